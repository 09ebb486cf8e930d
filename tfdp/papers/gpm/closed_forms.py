"""GPM's closed-form reproduction jobs (in-process "python" jobs of its rows): Figure 4 and
Table 4's "Expect" row.

They call the library functions under test (`tfdp.papers.gpm.pancake`), never a
re-implementation of the formula, take no data and return a JSON-able dict its rows'
extractors read.
"""

from __future__ import annotations

import math
import warnings

from tfdp.papers.gpm import pancake


def gpm_figure4() -> dict:
    """GPM Figure 4 (Thm 2.3, 4.2, 4.4): GM eps and GPM's lower and upper bounds (Delta = 1).

    Returns:
      dict of named values: gm_eps_s{sigma}_d{delta}, lower_b{beta} (t = 0.25,
      gamma = 1e2 and 1e4: the larger of the two relative spreads is reported too),
      upper_b1e-3_g1e2_s{sigma}, upper_b1e-5_g1e4_s{sigma}.
    """

    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pancake.GPMResearchWarning)
        for sigma in (0.25, 1.0, 4.0, 16.0, 64.0):
            for delta in (1e-10, 1e-1):
                out[f"gm_eps_s{sigma:g}_d{delta:g}"] = pancake.gm_eps(sigma, delta, 1.0)
            out[f"upper_b1e-3_g1e2_s{sigma:g}"] = pancake.eps_upper(1e-10, sigma, 1e-3, 1e2)
            out[f"upper_b1e-5_g1e4_s{sigma:g}"] = pancake.eps_upper(1e-10, sigma, 1e-5, 1e4)
        for beta in (1e-3, 1e-5):
            values = [pancake.eps_lower(0.25, beta, g, 1e-10) for g in (1e2, 1e4)]
            out[f"lower_b{beta:g}"] = values[0]
            out[f"lower_b{beta:g}_gamma_spread"] = abs(values[1] - values[0]) / values[0]
        # "GPM costs exceed eps = 1e4 even at delta = 0.1" (GPM, Figure 4).
        out["min_lower_at_delta_0.1"] = min(
            pancake.eps_lower(0.25, b, g, 0.1) for b in (1e-3, 1e-5) for g in (1e2, 1e4))
    return {k: float(v) for k, v in out.items()}


def gpm_table4_expect() -> dict:
    """GPM Table 4 "Expect" row: sigma sqrt(d) with sigma from GPM Thm 2.3 (delta* = 1e-10).

    Returns:
      dict expect_d{d}_e{eps} -> sigma sqrt(d).
    """

    out = {}
    for d in (256, 4096, 65536):
        for eps in (0.125, 0.25, 0.5, 1.0):
            out[f"expect_d{d}_e{eps:g}"] = pancake.gm_sigma(eps, 1e-10, 1.0) * math.sqrt(d)
    return out
