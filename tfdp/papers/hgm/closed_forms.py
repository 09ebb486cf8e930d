"""HGM's closed-form reproduction job (an in-process "python" job of its rows): Figure 1.

It calls the library functions under test (tfdp.mechanisms), never a re-implementation of
the formula, takes no data and returns a JSON-able dict its row's extractor reads.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import optimize

from tfdp import mechanisms


def hgm_figure1(delta: float = 1e-5, sensitivity: float = 1.0) -> dict:
    """HGM Figure 1: noise sigma against eps for GM, AGM and HGM (HGM Thms 1-2, Balle-Wang).

    Args:
      delta: the figure's delta (1e-5).
      sensitivity: the figure's l2 sensitivity (1).

    Returns:
      dict with, over eps in (0, 1] (grid of 100 points): the largest HGM/GM ratio, whether
      HGM <= GM everywhere, the largest AGM/HGM ratio and whether AGM < HGM everywhere; over
      eps in (1, 10]: whether HGM is finite everywhere and whether the classical GM rejects
      every such eps; and the delta threshold sqrt(2/pi) e^{-1/2} solved from `hgm_s`.
    """

    small = np.linspace(0.01, 1.0, 100)
    large = np.linspace(1.1, 10.0, 90)
    gm = [mechanisms.classical_gaussian_sigma(epsilon=float(e), delta=delta,
                                              sensitivity=sensitivity) for e in small]
    hgm_small = [mechanisms.hgm_sigma(epsilon=float(e), delta=delta, sensitivity=sensitivity)
                 for e in small]
    agm = [mechanisms.analytic_gaussian_sigma(epsilon=float(e), delta=delta,
                                              sensitivity=sensitivity) for e in small]
    hgm_large = [mechanisms.hgm_sigma(epsilon=float(e), delta=delta, sensitivity=sensitivity)
                 for e in large]
    gm_rejects = 0
    for e in large:
        try:
            mechanisms.classical_gaussian_sigma(epsilon=float(e), delta=delta,
                                                sensitivity=sensitivity)
        except ValueError:
            gm_rejects += 1
    # The delta below which HGM's second proof condition binds: s(delta) = 1/2, i.e.
    # delta = sqrt(2/pi) e^{-1/2} (the threshold stated with HGM Theorem 2).
    threshold = optimize.brentq(lambda d: mechanisms.hgm_s(d) - 0.5, 1e-3, 0.79, xtol=1e-15)
    return {
        "eps_small": [float(small[0]), float(small[-1])],
        "eps_large": [float(large[0]), float(large[-1])],
        "max_hgm_over_gm": float(max(h / g for h, g in zip(hgm_small, gm))),
        "hgm_le_gm": bool(all(h <= g for h, g in zip(hgm_small, gm))),
        "max_agm_over_hgm": float(max(a / h for a, h in zip(agm, hgm_small))),
        "agm_lt_hgm": bool(all(a < h for a, h in zip(agm, hgm_small))),
        "hgm_finite_eps_gt1": bool(all(math.isfinite(h) and h > 0 for h in hgm_large)),
        "gm_rejects_eps_gt1": gm_rejects == len(large),
        "delta_threshold": float(threshold),
    }
