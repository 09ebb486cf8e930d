"""Analytic Gaussian sigma: tfdp's bisection next to dp_accounting's get_sigma_gaussian.

Run from the repository root: python tools/calibration/agm_vs_dp_accounting.py
Writes results/calibration/agm_vs_dp_accounting.json.
"""
import json
from dp_accounting import gaussian_mechanism as gm
from tfdp import mechanisms as m
rows = []
for e in [0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 20, 50]:
    for d in [1e-12, 1e-10, 1e-8, 1e-6, 1e-5, 1e-3, 0.1]:
        ours = m.analytic_gaussian_sigma(epsilon=e, delta=d, sensitivity=1.0)
        theirs = gm.get_sigma_gaussian(e, d)
        rows.append(dict(epsilon=e, delta=d, tfdp_sigma=ours, dp_accounting_sigma=theirs,
                         tfdp_exact_delta=m.gaussian_delta(sigma=ours, epsilon=e, sensitivity=1.0),
                         dp_accounting_exact_delta=m.gaussian_delta(sigma=theirs, epsilon=e,
                                                                    sensitivity=1.0)))
out = dict(
    pairs=len(rows),
    dp_accounting_above_target_delta=sum(r["dp_accounting_exact_delta"] > r["delta"]
                                         for r in rows),
    tfdp_above_target_delta=sum(r["tfdp_exact_delta"] > r["delta"] for r in rows),
    max_relative_difference=max(abs(r["dp_accounting_sigma"] / r["tfdp_sigma"] - 1)
                                for r in rows),
    rows=rows)
json.dump(out, open("results/calibration/agm_vs_dp_accounting.json", "w"), indent=1)
print({k: v for k, v in out.items() if k != "rows"})
