"""The types of the reproduction's rows: `Row`, its `Job`s and `Criterion`, a `Baseline`, and
the scales a row's jobs run at.

Scales:
  smoke: seconds to a few minutes in total on a CPU; CI runs it. Only the verdicts of rows
    whose criterion is `smoke_meaningful` (closed forms, GPM success rates) are checked there.
  short: the reduced settings cut to fit about 20 minutes on 2 shared CPU cores (fewer
    training images and epochs); named for what it is, not a paper setting.
  reduced: the flagfiles' reduced settings (`flags/*/*_reduced.flags`), tens of CPU minutes
    per training run.
  full: the papers' settings (GPU; `--dry_run` prints the commands and compute estimates).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping


SCALES = ("smoke", "short", "reduced", "full")
SCALE_NOTES = {
    "smoke": "seconds per job on a CPU; checks that every path runs and the closed forms",
    "short": ("the reduced settings cut to about 20 minutes in total on 2 shared CPU cores "
              "(fewer training images and epochs); not a paper setting"),
    "reduced": "the reduced flagfiles as written (tens of CPU minutes per training run)",
    "full": "the papers' settings (GPU-scale; see `tfdp-reproduce --dry_run --scale=full`)",
}
# The scales whose verdicts decide a row (the smoke and short scales only check that paths run).
DECIDING_SCALES = ("reduced", "full")
APPS = {"train": "tfdp.apps.train", "evaluate": "tfdp.apps.evaluate",
        "audit": "tfdp.apps.audit", "bench": "tfdp.apps.bench"}


COMMANDS = {"train": "tfdp-train", "evaluate": "tfdp-evaluate", "audit": "tfdp-audit",
            "bench": "tfdp-bench"}


@dataclasses.dataclass(frozen=True)
class Criterion:
    """A pass criterion.

    kind:
      band: |ours - published| <= tol (absolute; accuracy points or success rate).
      relerr: |ours - published| / |published| <= tol (closed forms).
      range: low <= ours <= high (either side may be None).
      positive: ours > 0 (the sign of a difference), and within [low, high] when given.
      check: the extractor decides (e.g. every GPM cell within its binomial tolerance of the
        oracle, or an ordering between methods); `text` says what is checked.
      record: no published number; the value is recorded (verdict "recorded").
    """

    kind: str
    tol: float | None = None
    low: float | None = None
    high: float | None = None
    text: str = ""
    smoke_meaningful: bool = False

    def describe(self, unit: str = "") -> str:
        """Human-readable criterion."""
        if self.text:
            return self.text
        unit = " points" if unit == "%" else unit
        if self.kind == "band":
            return f"within ±{self.tol:g}{unit} of the published value"
        if self.kind == "relerr":
            return f"relative error <= {self.tol:g}"
        if self.kind == "range":
            lo = "" if self.low is None else f"{self.low:g} <= "
            hi = "" if self.high is None else f" <= {self.high:g}"
            return f"{lo}ours{hi}"
        if self.kind == "positive":
            if self.low is not None or self.high is not None:
                return f"difference > 0 and within [{self.low:g}, {self.high:g}]{unit}"
            return "difference > 0"
        return self.kind


@dataclasses.dataclass(frozen=True)
class Job:
    """One command (or in-process computation) whose output one or more rows read.

    Attributes:
      id: unique within a scale; seeded jobs get `@seed<N>` appended per seed.
      kind: train | evaluate | audit | bench | python.
      args: arguments after the app (audit/bench: the subcommand first); a flagfile is
        passed as `--flagfile=...` before them.
      flagfile: repository-relative flagfile, or None.
      method: the training method (train jobs), for the availability check.
      needs_data: reads real data (TFDP_DATA_DIR or --data_dir).
      seeded: expands to one job per seed (--seeds); else runs once with seed 1 where a seed
        flag applies.
      depends: evaluate jobs: the id of the train job whose run directory is evaluated.
      func: python jobs: "module:function"; kwargs: its keyword arguments.
      est_seconds: CPU seconds estimate on 2 cores (progress ETA and --dry_run).
      compute: tfdp's compute-budget estimate for --dry_run (full scale).
      adopt: a result file of an earlier run of exactly this command (results/adlm/*.json);
        its metrics are reused when its recorded configuration matches.
    """

    id: str
    kind: str
    args: tuple[str, ...] = ()
    flagfile: str | None = None
    method: str | None = None
    needs_data: bool = False
    seeded: bool = False
    depends: str | None = None
    func: str | None = None
    kwargs: tuple[tuple[str, Any], ...] = ()
    est_seconds: float = 60.0
    compute: str = ""
    adopt: str | None = None

    def display(self, seed: int | None = None, extra: tuple[str, ...] = ()) -> str:
        """The command as a user types it (console script names, no run directory)."""
        if self.kind == "python":
            kw = ", ".join(f"{k}={v!r}" for k, v in self.kwargs)
            module, _, fn = (self.func or "").partition(":")
            return f"python -c 'from {module} import {fn}; print({fn}({kw}))'"
        parts = [COMMANDS[self.kind]]
        if self.kind in ("audit", "bench") and self.args:
            parts.append(self.args[0])
            rest = self.args[1:]
        else:
            rest = self.args
        if self.flagfile:
            parts.append(f"--flagfile={self.flagfile}")
        parts.extend(rest)
        if self.kind == "evaluate" and self.depends:
            suffix = "" if seed is None else f"@seed{seed}"
            parts.append(f"--model_dir=RUN_DIR_OF_{self.depends}{suffix}")
        parts.extend(extra)
        if seed is not None and self.kind == "train":
            parts.append(f"--seed={seed}")
        return " ".join(parts)


@dataclasses.dataclass(frozen=True)
class Baseline:
    """A baseline method of a row: the network and settings its paper ran it with.

    Attributes:
      method: the baseline's training method (dpsgd, secure_sgd, secure_sgd_agm, ...).
      paper_network: the network the paper (or, where it does not say, its code release) names.
      tfdp_network: what tfdp runs: the paper's network or the stated substitute.
      network_flag: the option naming the network in the job's settings (e.g. dpsgd_model),
        read from its flagfile and overrides, or None.
      paper_settings: (option, paper value) pairs compared with the job's settings; the
        report names each that differs.
      note: why a substitute (e.g. the trainer does not offer the paper's network).
    """

    method: str
    paper_network: str
    tfdp_network: str
    network_flag: str | None = None
    paper_settings: tuple[tuple[str, str], ...] = ()
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Row:
    """One published number or ordering.

    Attributes:
      id: stable identifier (file name of the row's JSON).
      paper: the name of the paper that declares it (`tfdp.registry`).
      source: the paper's figure/table (or "text") that states it.
      setting: the paper's setting in words.
      metric: what is measured.
      published: the published number (None for a qualitative claim).
      published_text: the published value as printed (ranges, qualifiers).
      criterion: the pass criterion.
      extractor: name of the metric extractor (tfdp.reproduce.extract.extractor).
      params: extractor parameters.
      jobs: scale -> role -> Job.
      note: why a gap is expected (shown beside a verdict that is not a pass).
      headline: the paper's headline ordering.
      figure: figure key for the report's plots, or None.
      unit: "%" for accuracies in points, "" otherwise.
      baselines: the baseline methods among the row's jobs, each with its paper's network
        and settings (or the stated substitute).
      size_unit: the range the row's attack sizes are fractions of ("0,1" or "-1,1"), the
        same for every model of the row; None for rows without attacks.
      min_seeds: the seeds a verdict of the row needs at the deciding scales
        (DECIDING_SCALES); a result on fewer is shown as resting on fewer seeds and is
        inconclusive (issue 39).
    """

    id: str
    paper: str
    source: str
    setting: str
    metric: str
    published: float | None
    published_text: str
    criterion: Criterion
    extractor: str
    params: tuple[tuple[str, Any], ...] = ()
    jobs: Mapping[str, Mapping[str, Job]] = dataclasses.field(default_factory=dict)
    note: str = ""
    headline: bool = False
    figure: str | None = None
    unit: str = ""
    baselines: tuple[Baseline, ...] = ()
    size_unit: str | None = None
    min_seeds: int = 1

    @property
    def param(self) -> dict:
        """Extractor parameters as a dict."""
        return dict(self.params)
