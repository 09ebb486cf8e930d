"""python -m tfdp.mechanisms: the Gaussian calibration table (GM, AGM, HGM and exact deltas).

The HGM paper's Theorems 2/3 next to the classical Gaussian mechanism and the analytic one
(Balle & Wang 2018), at the given delta, for each epsilon.
"""

from __future__ import annotations

import math
from typing import Sequence

from absl import app, flags

from tfdp import mechanisms

FLAGS = flags.FLAGS


def _define_flags() -> None:
    # Defined only when run as a script, so importing this module defines no global flags.
    flags.DEFINE_list(
        "epsilons", ["0.05", "0.1", "0.2", "0.25", "0.5", "0.75", "0.9", "1", "2", "4", "8", "10"],
        "epsilon values (rows)")
    flags.DEFINE_float("delta", 1e-5, "delta, in (0, 1)")
    flags.DEFINE_float("sensitivity", 1.0, "l2 sensitivity")


def table(epsilons: Sequence[float], delta: float, sensitivity: float) -> str:
    """The Markdown table: HGM, classical GM, AGM sigma, exact delta of HGM's and GM's sigma.

    Raises:
        ValueError: on invalid arguments.
    """
    rows = ["| eps | HGM (Thm 2/3) | classical GM | AGM (Balle-Wang) | exact delta of HGM sigma "
            "| exact delta of the GM formula |", "|---|---|---|---|---|---|"]
    for eps in epsilons:
        hgm = mechanisms.hgm_sigma(epsilon=eps, delta=delta, sensitivity=sensitivity)
        agm = mechanisms.analytic_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=sensitivity)
        # The classical formula evaluated regardless of its eps <= 1 validity, to show why.
        gm = math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / eps
        d_hgm = mechanisms.gaussian_delta(sigma=hgm, epsilon=eps, sensitivity=sensitivity)
        d_gm = mechanisms.gaussian_delta(sigma=gm, epsilon=eps, sensitivity=sensitivity)
        gm_text = f"{gm:.4f}" if eps <= 1 else f"{gm:.4f} (formula invalid)"
        flag = " NOT DP" if d_gm > delta else ""
        rows.append(f"| {eps:g} | {hgm:.4f} | {gm_text} | {agm:.4f} | {d_hgm:.3g} "
                    f"| {d_gm:.3g}{flag} |")
    return "\n".join(rows)


def main(argv: Sequence[str]) -> None:
    del argv
    eps = [float(e) for e in FLAGS.epsilons]
    print(f"delta = {FLAGS.delta:g}, sensitivity = {FLAGS.sensitivity:g}")
    print(table(eps, FLAGS.delta, FLAGS.sensitivity))


if __name__ == "__main__":
    import sys  # pylint: disable=import-outside-toplevel
    from tfdp.apps import cli  # pylint: disable=import-outside-toplevel
    _BEFORE = set(FLAGS)
    _define_flags()
    _OWN = cli.new_flags(_BEFORE)
    cli.handle_help(sys.argv, lambda kind: cli.app_help(__doc__, _OWN, kind))
    app.run(main)
