"""DP-SGD epsilon and sigma with the PLD accountant (tfdp's default) next to RDP.

Run from the repository root: python tools/accounting/pld_vs_rdp.py
Writes results/accounting/pld_vs_rdp.json: for each setting (Poisson lots, add/remove-one,
delta 1e-5), epsilon at a fixed sigma with both accountants, and the sigma each needs for
the setting's target epsilon (tfdp.accounting.dpsgd_noise_multiplier).
"""

import json
import os
import sys

from absl import logging

from tfdp import accounting

SETTINGS = [
    # name, num_examples, batch_size, steps, sigma, target epsilon
    ("main job (make run): 20,000 records, lots of 256, 5 epochs", 20000, 256, 390, 0.8337, 3.0),
    ("MNIST, lots of 256, 60 epochs (Abadi et al.'s sigma 1.1)", 60000, 256, 14063, 1.1, 2.0),
    ("DP-SGD smoke (flags/baselines/dpsgd_smoke.flags): 5,000, lots of 128, 2 epochs", 5000,
     128, 78, 1.0180, 2.0),
    ("real MNIST reduced (dpsgd_mnist_reduced.flags): 60,000, lots of 256, 5 epochs", 60000,
     256, 1170, 1.472, 0.5),
]


def main() -> int:
    logging.set_verbosity(logging.ERROR)  # RDP's order warnings
    rows = []
    for name, n, b, steps, sigma, target in SETTINGS:
        kw = dict(num_examples=n, batch_size=b, steps=steps, delta=1e-5)
        row = dict(setting=name, num_examples=n, batch_size=b, q=b / n, steps=steps,
                   delta=1e-5, sigma=sigma, target_epsilon=target)
        for acc in ("rdp", "pld"):
            row[f"{acc}_epsilon"] = accounting.dpsgd_epsilon(noise_multiplier=sigma,
                                                             accountant=acc, **kw)
            row[f"{acc}_sigma_at_target"] = accounting.dpsgd_noise_multiplier(
                target_epsilon=target, accountant=acc, **kw)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = dict(command="python tools/accounting/pld_vs_rdp.py",
               accountants={k: accounting.ACCOUNTANT_NAMES[k] for k in ("rdp", "pld")},
               rows=rows)
    path = os.path.join("results", "accounting", "pld_vs_rdp.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
