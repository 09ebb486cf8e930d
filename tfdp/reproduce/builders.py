"""Builders of the reproduction's jobs that the papers' rows share: per-scale and per-role job
tables, the training and evaluation commands of a method at a scale, and their settings.

Rows of the HGM / Secure-SGD and StoBatch papers name their trainer (`method`) and flagfile
(`flags/hgm/<dataset>_<scale>.flags` with `--method=...` overrides, `flags/stobatch/...`,
`flags/baselines/...`; see `train_command`). A job whose trainer or flagfile is absent (every
`short` one: there is no short flagfile) reports "not available in this build".
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Callable, Mapping

from tfdp import registry as _papers
from tfdp.reproduce.rowtypes import SCALES, Criterion, Job, Row


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
