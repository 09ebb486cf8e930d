"""HGM Figure 1: noise sigma against eps for GM, AGM and HGM at Delta = 1, delta = 1e-5.

Run `python -m tfdp.papers.hgm.figure --out_dir=results/hgm` to write figure1.png and figure1.csv.
The classical GM curve is drawn only on (0, 1], where its formula is valid (HGM Theorem 1).
"""

from __future__ import annotations

import csv
import os
from typing import Optional, Sequence

import numpy as np

from tfdp import mechanisms
import argparse


def figure1_table(epsilons: Optional[Sequence[float]] = None, delta: float = 1e-5,
                  sensitivity: float = 1.0) -> dict:
    """sigma of the three mechanisms over an eps grid (HGM Figure 1).

    Args:
        epsilons: eps values > 0 (default: 200 points on (0, 10]).
        delta: delta in (0, 1).
        sensitivity: Delta > 0.

    Returns:
        dict of float64 arrays: "epsilon", "hgm" (Theorem 2/3), "agm" (Balle & Wang),
        "gm" (Theorem 1; NaN where eps > 1).

    Raises:
        ValueError: on eps <= 0 or invalid delta / sensitivity.
    """
    eps = (np.linspace(0.05, 10.0, 200) if epsilons is None
           else np.asarray(epsilons, np.float64).reshape(-1))
    if eps.size == 0 or np.any(~np.isfinite(eps)) or np.any(eps <= 0):
        raise ValueError("epsilons: expected finite values > 0")
    hgm = np.array([mechanisms.hgm_sigma(epsilon=e, delta=delta, sensitivity=sensitivity)
                    for e in eps])
    agm = np.array([mechanisms.analytic_gaussian_sigma(epsilon=e, delta=delta,
                                                       sensitivity=sensitivity) for e in eps])
    gm = np.array([mechanisms.classical_gaussian_multiplier(delta) * sensitivity / e
                   if e <= 1.0 else np.nan for e in eps])
    return {"epsilon": eps, "hgm": hgm, "agm": agm, "gm": gm}


def write_figure1(out_dir: str, delta: float = 1e-5) -> tuple[str, str]:
    """Writes figure1.png and figure1.csv into `out_dir`; returns their paths."""
    # lazy: matplotlib only when a figure is drawn
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    # lazy: matplotlib only when a figure is drawn
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    table = figure1_table(delta=delta)
    os.makedirs(out_dir, exist_ok=True)
    csv_path = os.path.join(out_dir, "figure1.csv")
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["epsilon", "sigma_gm", "sigma_agm", "sigma_hgm"])
        for row in zip(table["epsilon"], table["gm"], table["agm"], table["hgm"]):
            writer.writerow([f"{v:.6g}" for v in row])
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(table["epsilon"], table["gm"], label="GM (Theorem 1, eps <= 1)")
    ax.plot(table["epsilon"], table["agm"], label="AGM (Balle & Wang)")
    ax.plot(table["epsilon"], table["hgm"], "--", label="HGM (Theorem 2/3)")
    ax.set_yscale("log")
    ax.set_xlabel("epsilon")
    ax.set_ylabel(f"noise sigma (Delta = 1, delta = {delta:g})")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png_path = os.path.join(out_dir, "figure1.png")
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return png_path, csv_path


def main() -> None:
    """Command line: python -m tfdp.papers.hgm.figure [--out_dir=DIR]."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out_dir", default=os.path.join("results", "hgm"))
    args = parser.parse_args()
    for path in write_figure1(args.out_dir):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
