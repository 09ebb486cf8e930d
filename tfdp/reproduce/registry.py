"""Registry of the papers' published numbers and of the runs that reproduce them.

A `Row` is one published number (or one published ordering): its paper, figure/table, setting,
metric, the published value, a pass criterion (tfdp's choice where the paper gives no tolerance),
and, per scale, the jobs that measure it. A `Job` is one tfdp-train / tfdp-evaluate /
tfdp-audit / tfdp-bench command (or an in-process closed-form computation); rows share jobs.

Each paper declares its rows in its own package, `tfdp/papers/<paper>/rows.py`, named by the
`rows` target of its `tfdp.registry.Paper`. This module holds what the papers share (the row
and job types and the job builders) and assembles the rows of every paper `tfdp.registry`
lists, in its order. It imports no paper: it loads them through `tfdp.registry` on first use
of ROWS, ROWS_BY_ID, PAPERS, PAPER_TITLES or PAPER_BASELINES, so a rows module may import
this one. Besides its rows function, a paper's rows module may define

  baseline_for(method, cfg) -> Baseline | None: the baseline (network and settings) a model
    of its rows is, from the model's method and settings (`settings`); absent: no baselines.
  SIZE_UNITS = {dataset: "0,1" | "-1,1"}: the pixel range its rows' attack sizes are
    fractions of, per data set; absent: none.
  BASELINE_METHODS = (method, ...): the baseline methods among its rows' models (the tests
    check that each is declared by `baseline_for`); absent: none.
  model_note(method, cfg, near_chance) -> str | None: a fact about a model of one of the
    paper's own methods (in any paper's row) that a generated reason states; absent: none.

Scales:
  smoke: seconds to a few minutes in total on a CPU; CI runs it. Only the verdicts of rows
    whose criterion is `smoke_meaningful` (closed forms, GPM success rates) are checked there.
  short: the reduced settings cut to fit about 20 minutes on 2 shared CPU cores (fewer
    training images and epochs); named for what it is, not a paper setting.
  reduced: the flagfiles' reduced settings (`flags/*/*_reduced.flags`), tens of CPU minutes
    per training run.
  full: the papers' settings (GPU; `--dry_run` prints the commands and compute estimates).

Rows of the HGM / Secure-SGD and StoBatch papers name their trainer (`method`) and flagfile
(`flags/hgm/<dataset>_<scale>.flags` with `--method=...` overrides, `flags/stobatch/...`,
`flags/baselines/...`; see `train_command`). A job whose trainer or flagfile is absent (every
`short` one: there is no short flagfile) reports "not available in this build".
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import types
from typing import Any, Callable, Mapping

from tfdp import registry as _papers
import os

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

# --------------------------------------------------------------------------------------------
# Job builders shared by the papers' rows


def with_min_seeds(rows: list[Row], ids: tuple[str, ...], n: int) -> list[Row]:
    """The rows, those named in `ids` needing `n` seeds (`Row.min_seeds`).

    Raises:
      KeyError: naming an id that is not among the rows.
    """
    missing = set(ids) - {r.id for r in rows}
    if missing:
        raise KeyError(f"with_min_seeds: no such rows {sorted(missing)}")
    return [dataclasses.replace(r, min_seeds=n) if r.id in ids else r for r in rows]


def per_scale(builder: Callable[..., Job | None], *args) -> dict[str, Job]:
    """scale -> `builder(*args, scale)`, over the scales where it returns a job."""
    return {s: j for s, j in ((s, builder(*args, s)) for s in SCALES) if j is not None}


def roles(**builders) -> dict[str, dict[str, Job]]:
    """scale -> role -> job, keeping only the scales where every role has a job.

    Args:
      **builders: role -> (builder, *args), where `builder(*args, scale)` returns the role's
        job at a scale, or None.
    """
    out: dict[str, dict[str, Job]] = {}
    for scale in SCALES:
        jobs = {}
        for role, (fn, *args) in builders.items():
            job = fn(*args, scale)
            if job is None:
                break
            jobs[role] = job
        else:
            out[scale] = jobs
    return out


def python(job_id: str, func: str, **kwargs) -> dict[str, dict[str, Job]]:
    """One in-process computation as a row's only job (role "cf") at every scale.

    Args:
      job_id: the job's id.
      func: "module:function" returning a dict of results.
      **kwargs: its keyword arguments.
    """
    job = Job(job_id, "python", func=func, kwargs=tuple(sorted(kwargs.items())),
              est_seconds=1, compute="< 1 s on a CPU")
    return {s: {"cf": job} for s in SCALES}


def combine(**per_role: dict[str, Job]) -> dict[str, dict[str, Job]]:
    """role -> (scale -> job)  =>  scale -> role -> job."""
    out: dict[str, dict[str, Job]] = {}
    for scale in SCALES:
        if all(scale in jobs for jobs in per_role.values()):
            out[scale] = {role: jobs[scale] for role, jobs in per_role.items()}
    return out


# Scales at which the HGM / StoBatch trainers have flagfiles. There is no `short` flagfile:
# the rows' short-scale jobs name one that does not exist, so they report "not available in
# this build" (and the report "not run at this scale").
TRAINER_SCALES = ("smoke", "reduced", "full")
# Evaluation images per scale (the flagfiles' comments: 100 at smoke, 1,000 reduced; all at
# full), except the reduced-scale Monte-Carlo evaluations of `MonteCarloEval`.
_EVAL_EXAMPLES = {"smoke": 100, "short": 200, "reduced": 1000, "full": None}
# DP-SGD baseline of the HGM figures (flags/baselines/*), with the overrides that match the
# HGM flagfile of the same scale (data subset, pixel range of the attack sizes). CIFAR-10 at
# reduced / full scale uses flags/baselines/dpsgd_cifar10_<scale>.flags (pixels on [-1, 1], as
# the HGM and AdLM CIFAR-10 flagfiles), the rule below the table.
_DPSGD = {("mnist", "smoke"): ("flags/baselines/dpsgd_smoke.flags",
                               ("--dataset=mnist", "--num_train=5000", "--num_test=500",
                                "--value_range=0,1", "--dpsgd_model=cnn")),
          ("mnist", "reduced"): ("flags/baselines/dpsgd_mnist_reduced.flags",
                                 ("--value_range=0,1", "--dpsgd_model=cnn")),
          ("mnist", "full"): ("flags/baselines/dpsgd_mnist_abadi.flags",
                              ("--value_range=0,1",)),
          ("cifar10", "smoke"): ("flags/baselines/dpsgd_smoke.flags",
                                 ("--dataset=cifar10", "--num_train=2000", "--num_test=200",
                                  "--epochs=1", "--value_range=-1,1", "--dpsgd_model=cnn"))}


def train_command(method: str, dataset: str, eps: float | None, scale: str,
                  eps_r: float | None = None, variant: str = "") -> tuple[str, tuple[str, ...]]:
    """The flagfile and override arguments of one HGM / StoBatch-figure training run.

    A paper's methods follow the rule the paper declares (registry kind "flagfile_rule",
    named by the method: e.g. the HGM methods share `flags/hgm/<dataset>_<scale>.flags`,
    StoBatch has `flags/stobatch/<dataset>_<scale>.flags`); DP-SGD's rule is shared.

    Args:
      method: training method.
      dataset: mnist | cifar10 | tiny_imagenet.
      eps: privacy budget (None for the non-private robustness baselines).
      scale: smoke | short | reduced | full (short has no flagfile: a name that does not
        exist, so the job reports "not available in this build").
      eps_r: robustness budget override (HGM methods), or None for the flagfile's.
      variant: a flagfile variant of the HGM methods or StoBatch, e.g. "authors_path" for
        `flags/stobatch/<dataset>_<scale>_authors_path.flags` (the authors' code release's
        data path, issue 29 item 5) or "sound_l2" for
        `flags/hgm/<dataset>_<scale>_sound_l2.flags` (the sound l2 sensitivity).

    Returns:
      (repository-relative flagfile, override arguments).
    """
    declared = _papers.extensions("flagfile_rule").get(method)
    if declared is not None:
        return declared.load()(method, dataset, eps, scale, eps_r, variant)
    if variant:
        raise ValueError(f"variant: {method!r} has no flagfile variants, got {variant!r}")
    e = () if eps is None else (f"--epsilon={eps:g}",)
    if method == "dpsgd":
        flagfile, extra = _DPSGD.get((dataset, scale), (
            f"flags/baselines/dpsgd_{dataset}_{scale}.flags", (f"--dataset={dataset}",)))
        return flagfile, ("--method=dpsgd",) + extra + e
    raise ValueError(f"method: no flagfile rule for {method!r}")


def settings(flagfile: str | None, args: tuple[str, ...] = ()) -> dict[str, str]:
    """A job's settings: its flagfile's `--name=value` lines overridden by its arguments.

    `--noname` lines set "false", bare `--name` lines "true". A flagfile that does not
    exist contributes nothing.
    """
    text = ""
    if flagfile:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.path.join(root, flagfile)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                text = f.read()
    return settings_from_text(text, args)


def settings_from_text(text: str, args: tuple[str, ...] = ()) -> dict[str, str]:
    """`settings` of a flagfile's text (e.g. the flagfile as an earlier commit had it)."""
    out: dict[str, str] = {}
    lines = [ln.strip() for ln in text.splitlines()]
    for item in list(lines) + list(args):
        if not item.startswith("--"):
            continue
        name, eq, value = item[2:].partition("=")
        if not eq:
            name, value = (name[2:], "false") if name.startswith("no") and name[2:] in out \
                else (name, "true")
        out[name] = value
    return out


def _range_text(value_range: str | None) -> str | None:
    """ "0,1" / "-1,1" normalised (floats printed with :g), or None."""
    if not value_range:
        return None
    try:
        lo, hi = (float(v) for v in value_range.split(","))
    except ValueError:
        return None
    return f"{lo:g},{hi:g}"


@dataclasses.dataclass(frozen=True)
class MonteCarloEval:
    """How a reduced-scale Monte-Carlo (`--certify`) evaluation of a model not trained on MNIST
    runs: the prediction on the CIFAR-10 / Tiny ImageNet networks costs tens of times MNIST's
    per image, so it uses fewer test images.

    Attributes:
      num_examples: test images (the default 200: binomial SE <= 3.5 points).
      args: further evaluation arguments (e.g. fewer draws per forward pass or in all).
      est_seconds: CPU seconds estimate of the evaluation (the default: HGM_PixelDP's on
        CIFAR-10, 526 s measured).
    """

    num_examples: int = 200
    args: tuple[str, ...] = ()
    est_seconds: float = 600


def trainer_jobs(paper: str, method: str, dataset: str, eps: float | None, scale: str,
                 eval_args: tuple[str, ...], eps_r: float | None = None,
                 variant: str = "", size_unit: str | None = None,
                 num_examples: dict[str, int] | None = None, compute: str = "",
                 est_seconds: float | None = None, eval_est_seconds: float | None = None,
                 monte_carlo: MonteCarloEval = MonteCarloEval()) -> Job:
    """A train + evaluate pair (the HGM and StoBatch rows); returns the evaluate job.

    The train job (`train_command`'s flagfile and arguments) is reachable through `depends`
    (`train_job`); the runner schedules it first. With `size_unit` ("0,1" or "-1,1": the
    range the row's attack sizes are fractions of), a model trained on another pixel range is
    evaluated with `--attack_size_range=<size_unit>`, so its sizes are converted to its own
    range (a model on [-1, 1] gets twice the [0, 1] size).

    Args:
      paper: the paper's name (in the train job's id).
      method, dataset, eps, scale, eps_r, variant: as `train_command`'s.
      eval_args: tfdp-evaluate's arguments (`eval_args`, `EOT_ARGS`, ...).
      size_unit: the row's attack-size unit, or None.
      num_examples: scale -> the row's own number of evaluation images.
      compute: the compute-budget note of both jobs (--dry_run).
      est_seconds, eval_est_seconds: CPU seconds estimates of the train and evaluate jobs
        replacing the scale's defaults (None: keep them).
      monte_carlo: the reduced-scale Monte-Carlo evaluation of a model not trained on MNIST.
    """
    flagfile, args = train_command(method, dataset, eps, scale, eps_r, variant=variant)
    model_range = _range_text(settings(flagfile, args).get("value_range"))
    if size_unit is not None and eval_args and model_range != _range_text(size_unit):
        eval_args = eval_args + (f"--attack_size_range={size_unit}",)
    tid = (f"train.{paper}.{dataset}_{method}" + ("" if eps is None else f".eps{eps:g}")
           + ("" if eps_r is None or method == "pixeldp" else f".epsr{eps_r:g}")
           + (f".{variant}" if variant else ""))
    est = {"smoke": 90, "short": 300, "reduced": 1800, "full": 4 * 3600}[scale]
    est_eval = est
    if scale == "reduced" and dataset == "mnist":
        # measured on 2 shared CPU cores (results/reproduce/reduced/jobs): trainings 140-330 s;
        # evaluations of 1,000 images 9-14 s, or 330-1,370 s with Monte-Carlo prediction
        est = 300
        est_eval = 900 if "--certify" in eval_args else 30
    est = est if est_seconds is None else est_seconds
    est_eval = est_eval if eval_est_seconds is None else eval_est_seconds
    train = Job(tid, "train", args, flagfile, method, needs_data=True, seeded=True,
                est_seconds=est, compute=compute)
    _TRAIN_JOBS[(scale, tid)] = train
    n = _EVAL_EXAMPLES.get(scale)
    if scale == "reduced" and dataset != "mnist" and "--certify" in eval_args:
        n = monte_carlo.num_examples
        eval_args = eval_args + monte_carlo.args
        est_eval = monte_carlo.est_seconds
    if scale in (num_examples or {}):
        # A row's own evaluation size; its Monte-Carlo passes tile 32 draws at a time (the
        # default 256 needed more than 8 GB, which the shared machine did not have).
        n = num_examples[scale]
        if "--certify" in eval_args and not any(a.startswith("--draws_per_step")
                                                for a in eval_args):
            eval_args = eval_args + ("--draws_per_step=32",)
    eval_args = eval_args + (() if n is None else (f"--num_examples={n}",))
    digest = hashlib.sha1(" ".join(eval_args).encode()).hexdigest()[:8]
    eid = f"eval.{tid[len('train.'):]}.{digest}"
    return Job(eid, "evaluate", eval_args, None, method, needs_data=True,
               seeded=True, depends=tid, est_seconds=est_eval, compute=compute)


_TRAIN_JOBS: dict[tuple[str, str], Job] = {}


def train_job(scale: str, job_id: str) -> Job:
    """The train job an evaluate job depends on (registered by `trainer_jobs`)."""
    return _TRAIN_JOBS[(scale, job_id)]


_ATTACKS = "--attacks=fgsm,ifgsm,mim,madry"


def eval_args(sizes: str, certify: bool, nb_iter: int = 10,
              preset: str | None = None) -> tuple[str, ...]:
    """tfdp-evaluate's arguments: the four attacks at `sizes` (comma-separated fractions of
    the row's size unit), `nb_iter` iterations, an optional `--attack_preset`, and
    `--certify` (Monte-Carlo prediction and certification) when asked."""
    args = (_ATTACKS, f"--attack_sizes={sizes}", f"--nb_iter={nb_iter}", "--seed=1")
    if preset:
        args += (f"--attack_preset={preset}",)
    return args + (("--certify",) if certify else ())


# EOT attack of the certified (noisy, Monte-Carlo) classifier at the certified size, with the
# strong PGD (issue 13 item 5): its accuracy must not fall below the certified accuracy by
# more than the bound's statistical slack.
EOT_ARGS = ("--attacks=madry", "--attack_preset=strong", "--eot_draws=8", "--certify",
            "--soundness_check", "--seed=1")


# Methods with a robustness noise layer, scored by their noisy expectation (Monte-Carlo
# prediction; the HGM and StoBatch metrics), never by the noise-free network: the papers
# declare them (registry kind "noisy_method").
def noisy_methods() -> tuple[str, ...]:
    """The methods the papers declare noisy, in paper order."""
    return tuple(_papers.extensions("noisy_method"))


# --------------------------------------------------------------------------------------------
# Rows: assembled from the papers (tfdp.registry)


def row_models(row: Row) -> list[tuple[str, Job]]:
    """(scale, training job) of every model behind a row, over every scale."""
    out = []
    for scale, jobs in row.jobs.items():
        for job in jobs.values():
            train = train_job(scale, job.depends) if job.depends else job
            if train.kind == "train":
                out.append((scale, train))
    return out


def eot_soundness_row(row_id: str, paper: str, setting: str,
                      jobs: Mapping[str, Job]) -> Row:
    """A certificate soundness row (issue 13 item 5): EOT PGD (strong) on the Monte-Carlo
    classifier must not beat the certified accuracy beyond the slack, and
    `tfdp-evaluate --soundness_check` must pass. `jobs`: scale -> the evaluation job."""
    return Row(
        id=row_id, paper=paper, source="certificate soundness check (issue 13 item 5)",
        setting=setting,
        metric="accuracy under attack minus (certified accuracy - slack)", published=None,
        published_text="certified accuracy is a lower bound",
        criterion=Criterion("check", text="accuracy under the EOT attack >= certified "
                            "accuracy - (alpha + 3 binomial SE) at every size, and "
                            "tfdp-evaluate --soundness_check passes (flips consistent with "
                            "2 alpha)"),
        extractor="eot_soundness", jobs={s: {"run": j} for s, j in jobs.items()})


def rows_module(paper: _papers.Paper) -> types.ModuleType | None:
    """The module of a paper's rows target (it also holds the optional `baseline_for`,
    `SIZE_UNITS` and `BASELINE_METHODS`), or None for a paper without rows."""
    if paper.rows is None:
        return None
    return importlib.import_module(paper.rows.partition(":")[0])


def _decorate(row: Row, module: types.ModuleType) -> Row:
    """Attaches the row's baselines and attack-size unit, read from its jobs and from its
    paper's rows module (`baseline_for`, `SIZE_UNITS`)."""
    baseline_for = getattr(module, "baseline_for", None)
    size_units = getattr(module, "SIZE_UNITS", {})
    baselines, units = [], set()
    for _, train in row_models(row):
        cfg = settings(train.flagfile, train.args)
        dataset = cfg.get("dataset", "")
        found = None if baseline_for is None else baseline_for(train.method or "", cfg)
        if found is not None and found not in baselines:
            baselines.append(found)
        if dataset in size_units:
            units.add(size_units[dataset])
    has_attacks = any(j.kind == "evaluate" for jobs in row.jobs.values() for j in jobs.values())
    unit = units.pop() if has_attacks and len(units) == 1 else None
    return dataclasses.replace(row, baselines=tuple(baselines), size_unit=unit)


def all_rows() -> list[Row]:
    """Every registered row, in report order: each paper's (`tfdp.registry.papers()` order),
    as its rows target returns them.

    Raises:
      ValueError: a paper returns a row of another paper.
      AssertionError: two rows share an id.
    """
    rows = []
    for paper in _papers.papers().values():
        module = rows_module(paper)
        if module is None:
            continue
        for row in _papers.load(paper.rows)():
            if row.paper != paper.name:
                raise ValueError(f"paper {paper.name!r}: its rows target {paper.rows!r} "
                                 f"returned row {row.id!r} of paper {row.paper!r}")
            rows.append(_decorate(row, module))
    ids = [r.id for r in rows]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise AssertionError(f"duplicate row ids: {sorted(dupes)}")
    return rows


# Computed on first use (module __getattr__) and recomputed in place by reload():
#   ROWS: list[Row], every row in report order; ROWS_BY_ID: dict[str, Row];
#   PAPERS: tuple[str, ...], the papers' names in report order; PAPER_TITLES: name -> title;
#   PAPER_BASELINES: name -> the baseline methods of its rows (its BASELINE_METHODS).
_LAZY = ("ROWS", "ROWS_BY_ID", "PAPERS", "PAPER_TITLES", "PAPER_BASELINES")


def _refresh() -> None:
    papers = _papers.papers()
    rows = all_rows()
    new = {
        "ROWS": rows,
        "ROWS_BY_ID": {r.id: r for r in rows},
        "PAPERS": tuple(papers),
        "PAPER_TITLES": {name: p.title for name, p in papers.items()},
        "PAPER_BASELINES": {name: tuple(getattr(rows_module(p), "BASELINE_METHODS", ()))
                            for name, p in papers.items()},
    }
    state = globals()
    for name, value in new.items():
        old = state.get(name)
        if isinstance(old, list):
            old[:] = value
        elif isinstance(old, dict):
            old.clear()
            old.update(value)
        else:
            state[name] = value


def __getattr__(name: str):
    if name in _LAZY:
        try:
            _refresh()
        except AttributeError as e:  # not to be mistaken for a missing module attribute
            raise RuntimeError(f"tfdp.reproduce.registry: assembling the rows failed: {e}") from e
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _loaded(name: str):
    """A lazily computed module attribute (for this module's own functions)."""
    return globals()[name] if name in globals() else __getattr__(name)


def reload() -> None:
    """Re-reads the papers (`tfdp.registry.reload()`: the built-in ones and TFDP_PAPERS') and
    recomputes the rows. ROWS and ROWS_BY_ID (and PAPER_TITLES, PAPER_BASELINES) are updated
    in place, so a module holding a reference sees the new rows; PAPERS is a new tuple."""
    _papers.reload()
    _refresh()


def select(papers: list[str] | None = None, only: list[str] | None = None) -> list[Row]:
    """Rows of the given papers (default all), restricted to ids in `only` when given.

    Raises:
      ValueError: naming --papers or --only for an unknown paper or row id.
    """
    known, rows_by_id = _loaded("PAPERS"), _loaded("ROWS_BY_ID")
    papers = list(papers or known)
    bad = [p for p in papers if p not in known]
    if bad:
        raise ValueError(f"--papers: unknown paper(s) {bad}; choose from {list(known)}")
    rows = [r for r in _loaded("ROWS") if r.paper in papers]
    if only:
        unknown = [i for i in only if i not in rows_by_id]
        if unknown:
            raise ValueError(f"--only: unknown row id(s) {unknown}")
        rows = [r for r in rows if r.id in set(only)]
    return rows
