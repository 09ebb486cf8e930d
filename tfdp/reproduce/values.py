"""What a row's evidence is: an extractor's `Value`, the `Model` of each role, and the verdict
names the report counts.
"""

from __future__ import annotations

import dataclasses
import math
import statistics


VERDICTS = ("reproduced", "within band", "ordering holds", "not reproduced")
NOT_RUN = "not run at this scale"
RECORDED = "recorded"
NOT_AVAILABLE = "not available in this build"
# A row whose evidence cannot decide (issue 29 item 3): a model within CHANCE_MARGIN points of
# chance, or certificates that certify nothing / fewer than MIN_CERTIFIED examples. Counted
# apart from the verdicts above in the report.
INCONCLUSIVE = "inconclusive"
# A row whose definition (its jobs) changed since its JSON was written: the old number is kept
# only as `previous_value`, never presented as a result of the new definition.
STALE = "stale (rerun)"
CHANCE_MARGIN = 5.0
MIN_CERTIFIED = 20
NUM_CLASSES = {"mnist": 10, "cifar10": 10, "sample": 10, "tiny_imagenet": 30}
# Extractors whose number rests on certificates.
CERTIFIED_EXTRACTORS = ("certified_accuracy", "certified_gap", "eot_soundness")


@dataclasses.dataclass
class Value:
    """Our measurement for a row.

    Attributes:
      value: the number compared with the published one (None for check-only rows).
      text: how the report prints it.
      per_seed: the value of each seed (several seeds), else [value].
      ok: the extractor's own pass/fail for `check` criteria, else None.
      detail: a short explanation (which cells failed, the spread, ...).
      cells: per_seed holds the values of a grid's cells (sizes, eps, d), not of seeds:
        their spread is not a seed spread (sd is None).
    """

    value: float | None
    text: str
    per_seed: list[float] = dataclasses.field(default_factory=list)
    ok: bool | None = None
    detail: str = ""
    cells: bool = False

    @property
    def sd(self) -> float | None:
        """Sample standard deviation over seeds (None with fewer than 2 seeds, or cells)."""
        if self.cells:
            return None
        vals = [v for v in self.per_seed if v is not None and math.isfinite(v)]
        return float(statistics.stdev(vals)) if len(vals) >= 2 else None


@dataclasses.dataclass
class Model:
    """What one role's model was, read from its job files (the report's generated reasons).

    Attributes:
      role: the row's role (run, a, b, a0.2, ...).
      method: training method (adlm, dpsgd, secure_sgd, stobatch, ...).
      dataset: mnist | cifar10 | tiny_imagenet | sample, or "" when unknown.
      accuracy: clean test accuracy (%), mean over seeds (Monte-Carlo prediction when the
        evaluation used it), or None.
      epochs, steps: training length run (mean over seeds), or None.
      paper_epochs, paper_steps: the paper-scale flagfile's length (steps estimated for the
        same data-set size and batch), or None.
      paper_command: this scale ran the paper-scale training command itself (e.g. a recipe
        that stops when its budget is spent), so its length is the paper's.
      claimed_epsilon, sound_epsilon: the ledger's claimed and sound epsilon (None if absent).
      certified: certified examples at each of the row's attack sizes (certificate rows).
      claimed_certificates: the evaluation reported the paper's claimed (unsound)
        certificates (any `claimed_certified_accuracy*` field).
      config: the run's settings (flagfile + overrides) named in reasons.
      seed_accuracies: (seed, clean accuracy %) of each seed's model; a row is inconclusive
        when any one of them is near chance, whatever the mean.
    """

    role: str
    method: str = ""
    dataset: str = ""
    accuracy: float | None = None
    epochs: float | None = None
    steps: float | None = None
    paper_epochs: float | None = None
    paper_steps: float | None = None
    paper_command: bool = False
    claimed_epsilon: float | None = None
    sound_epsilon: float | None = None
    certified: list[int] = dataclasses.field(default_factory=list)
    claimed_certificates: bool = False
    config: dict = dataclasses.field(default_factory=dict)
    seed_accuracies: list[tuple[int | None, float]] = dataclasses.field(default_factory=list)

    @property
    def chance(self) -> float | None:
        """Chance accuracy (%) of the data set, or None when unknown."""
        k = NUM_CLASSES.get(self.dataset)
        return None if k is None else 100.0 / k

    def _near(self, acc: float | None) -> bool:
        return (acc is not None and self.chance is not None
                and acc <= self.chance + CHANCE_MARGIN)

    @property
    def seeds_near_chance(self) -> list[tuple[int | None, float]]:
        """The (seed, accuracy) of every seed's model within CHANCE_MARGIN points of chance."""
        return [(s, a) for s, a in self.seed_accuracies if self._near(a)]

    @property
    def near_chance(self) -> bool:
        """The mean clean accuracy, or any one seed's, within CHANCE_MARGIN points of chance
        (or below it): one seed's model at chance is evidence the criterion cannot use."""
        return self._near(self.accuracy) or bool(self.seeds_near_chance)


def _fmt(v: float, unit: str = "") -> str:
    if unit in ("%", " pts"):
        return f"{v:.2f}{unit}"
    if v == 0 or 1e-3 <= abs(v) < 1e5:
        return f"{v:.6g}"
    return f"{v:.4g}"
