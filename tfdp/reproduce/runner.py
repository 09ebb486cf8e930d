"""Runs the registry's jobs (resumably) and writes one JSON per job and per row.

Layout under the results directory (default results/reproduce/):
  <scale>/jobs/<job key>.json   one finished job: command, seed, versions, times, output
  <scale>/<row id>.json         one row: published value, our value, verdict, commands, jobs

A job counts as done when its JSON exists with status "ok"; an interrupted grid therefore
resumes at the first unfinished job (its partial run directory is removed and the job is
started again). Rows are recomputed from the job JSONs on every call (cheap).
"""

from __future__ import annotations

import dataclasses
import datetime
import glob
import hashlib
import importlib
import importlib.metadata
import importlib.util
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import zipfile
from typing import Any, Callable, Iterable

import h5py
import numpy as np

from tfdp.reproduce import extract, registry
from tfdp.reproduce.registry import Job, Row
from tfdp.train import registry as methods
import csv

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_RESULTS = os.path.join(REPO_ROOT, "results", "reproduce")
DEFAULT_WORK = os.path.join(REPO_ROOT, "runs", "reproduce")
# Where tfdp-reproduce writes without --repository (relative to the working directory).
DEFAULT_USER_RESULTS = os.path.join("runs", "reproduce", "results")


@dataclasses.dataclass(frozen=True)
class Task:
    """A job at one seed (seed None: the job is not seeded)."""

    job: Job
    seed: int | None

    @property
    def key(self) -> str:
        """File name stem of the job's JSON and run directory."""
        return self.job.id + ("" if self.seed is None else f"@seed{self.seed}")

    def command(self) -> str:
        """The command a user types."""
        seed = self.seed if self.seed is not None else (1 if self.job.kind == "train" else None)
        return self.job.display(seed)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def versions() -> dict[str, str]:
    """Versions of Python, the main packages and the source tree (git commit if any)."""
    out = {"python": platform.python_version()}
    for dist in ("tensorflow", "tensorflow-cpu", "keras", "numpy", "dp-accounting", "tfdp"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                                capture_output=True, text=True, timeout=10, check=False)
        if commit.returncode == 0:
            out["git_commit"] = commit.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def tasks_for(rows: Iterable[Row], scale: str, seeds: int) -> list[Task]:
    """The distinct tasks the rows need at a scale, dependencies first, in registry order."""
    out: list[Task] = []
    seen: set[str] = set()

    def add(task: Task) -> None:
        if task.key not in seen:
            seen.add(task.key)
            out.append(task)

    for row in rows:
        for job in row.jobs.get(scale, {}).values():
            for seed in (range(1, seeds + 1) if job.seeded else (None,)):
                if job.depends:
                    add(Task(registry.train_job(scale, job.depends), seed))
                add(Task(job, seed))
    return out


def unavailable(job: Job) -> str | None:
    """Why a job cannot run in this build (missing trainer module or flagfile), or None."""

    if job.method is not None:
        if job.method not in methods.METHODS:
            return f"method {job.method!r} is not registered"
        if importlib.util.find_spec(methods.method_module(job.method)) is None:
            return f"trainer {methods.method_module(job.method)} (method {job.method}) is absent"
    if job.flagfile and not os.path.exists(os.path.join(REPO_ROOT, job.flagfile)):
        return f"flagfile {job.flagfile} is absent"
    if job.kind == "python":
        module = (job.func or "").partition(":")[0]
        if importlib.util.find_spec(module) is None:
            return f"module {module} is absent"
    return None


def model_task(task: Task, scale: str) -> Task | None:
    """The training task whose model an evaluation task scores (None for other kinds)."""
    if task.job.kind != "evaluate" or not task.job.depends:
        return None
    return Task(registry.train_job(scale, task.job.depends), task.seed)


def outdated(results_dir: str, scale: str, task: Task, done: dict | None) -> str | None:
    """Why a finished evaluation no longer scores its model, or None if it does.

    An evaluation scores the model its training job produced when the evaluation ran. When
    that training job ran again afterwards (a code change, a deleted job file, a lost run
    directory) and gave other weights, the evaluation describes a model that no longer
    exists: it runs again, and until it has, the rows resting on it are stale. Evaluations
    record the training job's `finished_utc` and `weights_sha256` they saw; a retraining to
    the same weights keeps them current. Older records are compared by time.

    Any finished job is also outdated when its command now selects other settings than it
    ran with (an edited flagfile, `settings_changed`), and an evaluation when the training
    job it scores is.
    """
    if done is None:
        return None
    changed = settings_changed(task, done)
    if changed is not None:
        return changed
    dep = model_task(task, scale)
    if dep is None:
        return None
    trained = load_job(results_dir, scale, dep.key)
    if trained is None:
        return f"{task.key} scored a model whose training job {dep.key} has no finished record"
    changed = settings_changed(dep, trained)
    if changed is not None:
        return f"{task.key} scored a model trained with other settings ({changed})"
    finished = trained.get("finished_utc") or ""
    digest = (trained.get("output") or {}).get("weights_sha256")
    if digest is not None and done.get("model_weights_sha256") == digest:
        return None  # retrained since, to the same weights (a seeded rerun at the same code)
    seen = done.get("model_finished_utc")
    current = (seen == finished) if seen is not None else (
        (done.get("started_utc") or "") >= finished)
    if current:
        return None
    return (f"{task.key} scored the model of {dep.key} as it was before that training job "
            f"ran again (finished {finished})")


def job_settings(job: Job) -> dict[str, str]:
    """The settings a job's command selects now: its flagfile's lines and its arguments."""
    return registry.settings(job.flagfile, job.args)


# Options the runner sets on every command itself (`_argv`): a flagfile's value is overridden.
_RUNNER_SET = ("seed", "model_dir", "verbose", "data_dir", "audit_output_dir", "output")
_GIT_FLAGFILES: dict[tuple[str, str], str | None] = {}


def _flagfile_at(commit: str, path: str) -> str | None:
    """A flagfile's text at a git commit of this repository, or None (no git, no such file)."""
    key = (commit, path)
    if key not in _GIT_FLAGFILES:
        try:
            proc = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=REPO_ROOT,
                                  capture_output=True, text=True, timeout=10, check=False)
            _GIT_FLAGFILES[key] = proc.stdout if proc.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            _GIT_FLAGFILES[key] = None
    return _GIT_FLAGFILES[key]


def ran_settings(task: Task, done: dict) -> dict[str, str] | None:
    """The settings a finished job ran with: recorded in its JSON (`settings`), else its
    flagfile at the commit it recorded (`versions.git_commit`) with its arguments; None when
    neither is known (a job without a flagfile has its arguments only)."""
    if "settings" in done:
        return {k: str(v) for k, v in done["settings"].items()}
    job = task.job
    if not job.flagfile:
        return registry.settings(None, job.args)
    commit = (done.get("versions") or {}).get("git_commit")
    text = _flagfile_at(commit, job.flagfile) if commit else None
    return None if text is None else registry.settings_from_text(text, job.args)


def settings_changed(task: Task, done: dict) -> str | None:
    """Why a finished job's command now selects other settings than it ran with, or None.

    The command of a job names its flagfile, not the flagfile's contents: an edited flagfile
    (e.g. a clipping implementation no longer pinned) makes the job's result one of another
    configuration; it runs again, and the rows resting on it are stale until it has.
    """
    if done.get("output", {}).get("adopted_from"):
        return None  # adoption checks the recorded configuration itself (`_adopt`)
    then = ran_settings(task, done)
    if then is None:
        return None
    now = job_settings(task.job)
    diffs = [f"{k}: {then.get(k, '(unset)')} -> {now.get(k, '(unset)')}"
             for k in sorted(set(then) | set(now))
             if then.get(k) != now.get(k) and k not in _RUNNER_SET]
    if not diffs:
        return None
    return (f"{task.key} ran with other settings than its command selects now (flagfile "
            f"{task.job.flagfile} edited since: {', '.join(diffs)})")


def kernel_mismatch(task: Task, done: dict) -> str | None:
    """Why an evaluation's noise kernel is not the one its command selects now, or None.

    An evaluation records the kernel it drew its noise with (`noise_kernel`) and, when
    "auto" fell back, why. Its command selects `--noise_kernel` (default "auto", which is
    "fused" wherever the fused kernel builds); a recorded "portable" without a fallback
    reason under a command that now selects "auto" or "fused" ran another noise stream.
    Evaluations that recorded no kernel are not judged (unknown).
    """
    if task.job.kind != "evaluate":
        return None
    evaluation = (done.get("output") or {}).get("evaluation") or {}
    ran = evaluation.get("noise_kernel")
    if ran is None:
        return None
    selected = job_settings(task.job).get("noise_kernel", "auto")
    if selected == "auto":
        if evaluation.get("noise_kernel_fallback"):
            return None  # "auto" fell back on that machine: what the command selects there
        selected = "fused"
    if ran == selected:
        return None
    return (f"{task.key} drew its noise with the {ran} kernel; its command now selects "
            f"{selected}")


def _job_file(results_dir: str, scale: str, key: str) -> str:
    return os.path.join(results_dir, scale, "jobs", f"{key}.json")


def load_job(results_dir: str, scale: str, key: str) -> dict | None:
    """The finished job's JSON, or None if it has not finished."""
    path = _job_file(results_dir, scale, key)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return data if data.get("status") == "ok" else None


def _write_json(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(extract.as_jsonable(data), f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def _number(text: str) -> Any:
    try:
        v = float(text)
    except ValueError:
        return text
    return v


def _read_csvs(directory: str) -> dict[str, list[dict]]:
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.csv"))):
        with open(path, newline="", encoding="utf-8") as f:
            out[os.path.basename(path)] = [{k: _number(v) for k, v in r.items()}
                                           for r in csv.DictReader(f)]
    return out


# metrics.json keys a job file keeps: the public ones. The training loss and accuracy are
# statistics of the private data computed without privacy (issue 22), never recorded.
PUBLIC_METRICS = ("test_accuracy", "epochs_completed", "steps", "stopped_early", "seconds",
                  "segments")


def weights_digest(model_path: str) -> str | None:
    """SHA-256 over a saved model's weight arrays (names, dtypes, shapes, bytes), or None.

    The archive itself is not hashed (it records when it was saved); two runs that produce
    the same weights have the same digest. A digest of the released model is post-processing
    of it and reveals nothing the model does not.
    """
    if not os.path.exists(model_path):
        return None
    digest = hashlib.sha256()
    with zipfile.ZipFile(model_path) as z, z.open("model.weights.h5") as raw:
        with h5py.File(io.BytesIO(raw.read()), "r") as h5:
            names: list[str] = []
            h5.visititems(lambda name, obj: names.append(name)
                          if isinstance(obj, h5py.Dataset) else None)
            for name in sorted(names):
                arr = np.asarray(h5[name][()])
                digest.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
                digest.update(arr.tobytes())
    return digest.hexdigest()


def _read_run(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
        metrics = json.load(f)
    out = {"metrics": {k: metrics[k] for k in PUBLIC_METRICS if k in metrics}}
    digest = weights_digest(os.path.join(run_dir, "model.keras"))
    if digest is not None:
        out["weights_sha256"] = digest
    ledger_path = os.path.join(run_dir, "ledger.json")
    if os.path.exists(ledger_path):
        with open(ledger_path, encoding="utf-8") as f:
            ledger = json.load(f)
        out["ledger"] = {k: ledger.get(k) for k in ("epsilon", "delta", "claimed_epsilon",
                                                      "claimed_delta", "differs")}
    return out


def _flagfile_values(path: str) -> dict[str, str]:
    values = {}
    with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("--") and "=" in line:
                name, _, value = line[2:].partition("=")
                values[name] = value
    return values


def _adopt(task: Task) -> dict | None:
    """Reuses an earlier result file of exactly this command (results/adlm/*.json).

    Adopted only when the recorded command has the same arguments (ignoring --data_dir,
    --model_dir and --verbose) and the recorded configuration agrees with the flagfile on
    epochs, batch size, learning rate and optimizer (so an edited flagfile is not adopted).
    """
    job = task.job
    if not job.adopt or task.seed not in (None, 1):
        return None
    path = os.path.join(REPO_ROOT, job.adopt)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        rec = json.load(f)
    recorded = {a for a in rec.get("command", "").split()[1:]
                if not a.startswith(("--data_dir=", "--model_dir=", "--verbose="))}
    wanted = set(task.command().split()[1:])
    if recorded != wanted or rec.get("exit_code") != 0:
        return None
    cfg, flagfile = rec.get("config", {}), _flagfile_values(job.flagfile)
    overrides = {a[2:].partition("=")[0]: a.partition("=")[2] for a in job.args}
    for name in ("epochs", "batch_size", "learning_rate", "optimizer"):
        want = overrides.get(name, flagfile.get(name))
        if want is not None and str(cfg.get(name)) != want and not (
                name == "learning_rate" and float(cfg.get(name)) == float(want)):
            return None
    return {"metrics": rec["metrics"],
            "ledger": {k: rec.get("ledger", {}).get(k) for k in
                       ("epsilon", "delta", "claimed_epsilon", "claimed_delta", "differs")},
            "adopted_from": job.adopt, "adopted_started_utc": rec.get("started_utc"),
            "adopted_finished_utc": rec.get("finished_utc")}


def _argv(task: Task, run_dir: str, work_dir: str, scale: str) -> list[str]:
    job = task.job
    argv = [sys.executable, "-m", registry.APPS[job.kind]]
    args = list(job.args)
    if job.kind in ("audit", "bench"):
        argv.append(args.pop(0))
    if job.flagfile:
        argv.append(f"--flagfile={os.path.join(REPO_ROOT, job.flagfile)}")
    argv += args
    if job.kind == "train":
        seed = task.seed if task.seed is not None else 1
        # --verbose=1: one progress line per epoch in the job's log (off a terminal); the
        # per-epoch test-accuracy check puts the model's state back, so the weights are the
        # same as with --verbose=0 (tests/train/test_train_app.py).
        argv += [f"--seed={seed}", f"--model_dir={run_dir}", "--verbose=1"]
    elif job.kind == "evaluate":
        dep = os.path.join(work_dir, scale, job.depends + (
            "" if task.seed is None else f"@seed{task.seed}"))
        argv += [f"--model_dir={dep}"]
    elif job.kind == "audit":
        argv += [f"--audit_output_dir={run_dir}"]
    elif job.kind == "bench":
        argv += [f"--output={os.path.join(run_dir, 'bench.json')}"]
    return argv


def run_task(task: Task, scale: str, results_dir: str, work_dir: str,
             data_dir: str | None, log: Callable[[str], None]) -> dict:
    """Runs one task (or adopts an earlier identical run) and writes its job JSON.

    Returns:
      The job JSON written (status "ok"), or a dict with status "failed" (not written as ok;
      a rerun tries again).
    """
    job = task.job
    record = {"job": job.id, "key": task.key, "kind": job.kind, "scale": scale,
              "seed": task.seed, "command": task.command(), "versions": versions(),
              "settings": job_settings(job)}
    dep = model_task(task, scale)
    if dep is not None:  # the model this evaluation scores (see `outdated`)
        trained = load_job(results_dir, scale, dep.key)
        record.update(model_job=dep.key,
                      model_finished_utc=(trained or {}).get("finished_utc"),
                      model_weights_sha256=(trained or {}).get("output", {}).get(
                          "weights_sha256"))
    adopted = _adopt(task) if job.kind == "train" else None
    if adopted is not None:
        record.update(status="ok", output=adopted, seconds=float(
            adopted["metrics"].get("seconds", 0.0)), started_utc=adopted["adopted_started_utc"],
            finished_utc=adopted["adopted_finished_utc"])
        _write_json(_job_file(results_dir, scale, task.key), record)
        log(f"  adopted {job.adopt} (same command, recorded run)")
        return record
    run_dir = os.path.join(work_dir, scale, task.key)
    if job.kind != "evaluate" and os.path.exists(run_dir):
        shutil.rmtree(run_dir)  # a partial run of an interrupted grid
    if job.kind in ("audit", "bench"):
        os.makedirs(run_dir, exist_ok=True)
    os.makedirs(os.path.join(work_dir, scale), exist_ok=True)
    start, started = time.time(), _now()
    if job.kind == "python":
        module, _, fn = job.func.partition(":")
        result = getattr(importlib.import_module(module), fn)(**dict(job.kwargs))
        output = {"result": result}
    else:
        argv = _argv(task, run_dir, work_dir, scale)
        env = dict(os.environ)
        env["PYTHONPATH"] = REPO_ROOT + (os.pathsep + env["PYTHONPATH"]
                                         if env.get("PYTHONPATH") else "")
        if data_dir:
            env["TFDP_DATA_DIR"] = data_dir
        log_path = os.path.join(work_dir, scale, f"{task.key}.log")
        log(f"  log: {log_path}")
        with open(log_path, "w", encoding="utf-8") as logf:
            proc = subprocess.run(argv, cwd=REPO_ROOT, env=env, stdout=logf,
                                  stderr=subprocess.STDOUT, check=False)
        if proc.returncode != 0:
            with open(log_path, encoding="utf-8", errors="replace") as f:
                tail = f.read()[-800:]
            log(f"  FAILED (exit {proc.returncode}); log: {log_path}\n{tail}")
            return dict(record, status="failed", returncode=proc.returncode, log=log_path)
        if job.kind == "train":
            output = _read_run(run_dir)
        elif job.kind == "evaluate":
            dep = argv[-1].partition("=")[2]
            with open(os.path.join(dep, "evaluation.json"), encoding="utf-8") as f:
                output = {"evaluation": json.load(f)}
        elif job.kind == "audit":
            output = {"csv": _read_csvs(run_dir)}
        else:
            with open(os.path.join(run_dir, "bench.json"), encoding="utf-8") as f:
                output = {"result": json.load(f)}
    record.update(status="ok", output=output, seconds=time.time() - start,
                  started_utc=started, finished_utc=_now())
    _write_json(_job_file(results_dir, scale, task.key), record)
    return record


def _fmt_seconds(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{(s % 3600) // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def run_tasks(tasks: list[Task], scale: str, results_dir: str, work_dir: str,
              data_dir: str | None, log: Callable[[str], None] = print) -> dict[str, str]:
    """Runs the unfinished tasks in order, with progress and an ETA.

    Returns:
      key -> "done" | "skipped (already complete)" | "failed" | "not available in this build:
      <why>".
    """
    status: dict[str, str] = {}
    todo = []
    for t in tasks:
        why = unavailable(t.job)
        if why is None and t.job.depends:
            why = unavailable(registry.train_job(scale, t.job.depends))
        if why is not None:
            status[t.key] = f"{extract.NOT_AVAILABLE}: {why}"
        elif (done := load_job(results_dir, scale, t.key)) is not None and (
                stale := (outdated(results_dir, scale, t, done)
                          or kernel_mismatch(t, done))) is None:
            status[t.key] = "skipped (already complete)"
        else:
            # An evaluation that drew its noise with another kernel than its command selects
            # now runs again here; until it has, its rows are flagged (`compute_row`).
            if done is not None:
                log(f"tfdp-reproduce: {stale}; it runs again")
            todo.append(t)
    # An evaluation needs its training run's directory; when the training's job file is
    # complete but the directory is gone (another machine, a cleaned work dir), the training
    # runs again first (seeded: the same run) instead of the evaluation failing.
    by_key = {t.key: t for t in tasks}
    queued = {t.key for t in todo}
    rerun = []
    for t in todo:
        if not t.job.depends:
            continue
        dep = Task(registry.train_job(scale, t.job.depends), t.seed)
        run_dir = os.path.join(work_dir, scale, dep.key)
        if (dep.key not in queued and status.get(dep.key, "").startswith("skipped")
                and not os.path.exists(os.path.join(run_dir, "model.keras"))):
            rerun.append(by_key.get(dep.key, dep))
            queued.add(dep.key)
            status.pop(dep.key, None)
            log(f"tfdp-reproduce: {dep.key} is complete but its run directory {run_dir} is "
                "missing; it runs again for the evaluations that need it")
    todo = rerun + todo
    # A training that runs now makes its finished evaluations outdated: they run after it.
    in_todo = {x.key for x in todo}
    for t in tasks:
        dep = model_task(t, scale)
        if dep is not None and dep.key in queued and t.key not in in_todo:
            todo.append(t)
            in_todo.add(t.key)
            status.pop(t.key, None)
    order = {t.key: i for i, t in enumerate(tasks)}
    todo.sort(key=lambda x: order.get(x.key, -1))
    skipped = sum(1 for v in status.values() if v.startswith("skipped"))
    log(f"tfdp-reproduce: scale {scale}: {len(tasks)} jobs, {skipped} already complete, "
        f"{len(todo)} to run, {len(tasks) - skipped - len(todo)} not available in this build")
    est_left = sum(t.job.est_seconds for t in todo)
    est_done = spent = 0.0
    for i, t in enumerate(todo, 1):
        ratio = spent / est_done if est_done > 0 else 1.0
        log(f"[{i}/{len(todo)}] {t.key}: {t.command()}  (ETA for the rest: "
            f"{_fmt_seconds(est_left * ratio)})")
        if t.job.depends and status.get(Task(registry.train_job(scale, t.job.depends),
                                             t.seed).key) == "failed":
            status[t.key] = "failed"
            log("  skipped: its training run failed")
            continue
        start = time.time()
        rec = run_task(t, scale, results_dir, work_dir, data_dir, log)
        took = time.time() - start
        status[t.key] = "done" if rec["status"] == "ok" else "failed"
        est_left -= t.job.est_seconds
        est_done += t.job.est_seconds
        spent += took
        log(f"  {status[t.key]} in {took:.0f} s")
    return status


def _row_file(results_dir: str, scale: str, row_id: str) -> str:
    return os.path.join(results_dir, scale, f"{row_id}.json")


_DATA_SIZES = {"mnist": 60000, "cifar10": 50000}


def _float(v: Any) -> float | None:
    try:
        out = float(v)
    except (TypeError, ValueError):
        return None
    return out


def _mean_or_none(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _paper_length(row: Row, role: str, steps: float | None, epochs: float | None,
                  cfg: dict) -> tuple[float | None, float | None]:
    """(epochs, estimated steps) of the row's full-scale (paper) job of the same role.

    Steps are estimated from ours: steps per epoch scaled by the ratio of training-set sizes
    and batch sizes (the step unit is the same method's at both scales).
    """
    full = row.jobs.get("full", {}).get(role)
    if full is None:
        return None, None
    train = registry.train_job("full", full.depends) if full.depends else full
    if train.kind != "train":
        return None, None
    fcfg = registry.settings(train.flagfile, train.args)
    f_epochs = _float(fcfg.get("epochs"))
    if f_epochs is None or not steps or not epochs:
        return f_epochs, None
    dataset = cfg.get("dataset") or fcfg.get("dataset") or ""
    n_ours = _float(cfg.get("num_train")) or _DATA_SIZES.get(dataset)
    n_full = _float(fcfg.get("num_train")) or _DATA_SIZES.get(dataset)
    b_ours, b_full = _float(cfg.get("batch_size")), _float(fcfg.get("batch_size"))
    if not (n_ours and n_full and b_ours and b_full):
        return f_epochs, None
    return f_epochs, steps / epochs * f_epochs * (n_full / n_ours) * (b_ours / b_full)


def uses_claimed_certificates(evaluation: dict) -> bool:
    """Whether an evaluation's certificates are the paper's claimed (unsound) ones.

    Evaluations run with --allow_unsound_certificates name every such field with
    `claimed_certified_accuracy` in it (`claimed_certified_accuracy_on_attacked_inputs`
    per attack and size, `clean_claimed_certified_accuracy`); any of them counts.
    """
    if any("claimed_certified_accuracy" in key for key in evaluation):
        return True
    return any("claimed_certified_accuracy" in key
               for entry in (evaluation.get("attacks") or {}).values()
               for cell in entry.values() if isinstance(cell, dict) for key in cell)


def _certified_counts(row: Row, evaluation: dict) -> tuple[list[int], bool]:
    """Certified examples at the row's sizes (mean over attacks), and whether they are the
    claimed (unsound) certificates."""
    n = int(evaluation.get("num_examples") or 0)
    p = row.param
    sizes = (p["sizes"].split(",") if "sizes" in p else [p["size"]] if "size" in p else None)
    claimed = uses_claimed_certificates(evaluation)
    counts = []
    if row.extractor == "eot_soundness" or sizes is None:
        cert = extract._clean_certified(evaluation)  # pylint: disable=protected-access
        counts = [int(round(float(v) * n)) for v in cert.values() if v is not None]
        return counts, claimed
    for size in sizes:
        key = extract._size_key(size)  # pylint: disable=protected-access
        vals = [extract._field(entry[key], "certified_accuracy")  # pylint: disable=protected-access
                for entry in evaluation.get("attacks", {}).values() if key in entry]
        vals = [float(v) for v in vals if v is not None]
        if vals:
            counts.append(int(round(sum(vals) / len(vals) * n)))
    return counts, claimed


def row_models(row: Row, scale: str, records: dict[str, list[dict]],
               results_dir: str) -> list[extract.Model]:
    """What each role's model was (accuracy, length, privacy, settings), from the job files.

    Args:
      records: role -> the finished job JSONs of the role (one per seed).
    """
    out = []
    for role, recs in sorted(records.items()):
        job = row.jobs[scale][role]
        train = registry.train_job(scale, job.depends) if job.depends else job
        if train.kind != "train":
            continue
        cfg = registry.settings(train.flagfile, train.args)
        trains = []
        for rec in recs:
            if job.depends:
                t = load_job(results_dir, scale, Task(train, rec["seed"]).key)
                trains.append(t["output"] if t else {})
            else:
                trains.append(rec["output"])
        evals = [rec["output"].get("evaluation") for rec in recs if job.depends]
        evals = [e for e in evals if e]
        if evals:
            per_seed = [(rec["seed"], _float(rec["output"]["evaluation"].get("clean_accuracy")))
                        for rec in recs if rec["output"].get("evaluation")]
            dataset = evals[0].get("dataset") or cfg.get("dataset", "")
        else:
            per_seed = [(rec["seed"], _float(t.get("metrics", {}).get("test_accuracy")))
                        for rec, t in zip(recs, trains)]
            dataset = cfg.get("dataset", "")
        per_seed = [(sd, 100.0 * a) for sd, a in per_seed if a is not None]
        acc = _mean_or_none([a / 100.0 for _, a in per_seed])
        steps = _mean_or_none([_float(t.get("metrics", {}).get("steps")) for t in trains])
        epochs = _mean_or_none([_float(t.get("metrics", {}).get("epochs_completed"))
                                for t in trains])
        p_epochs, p_steps = _paper_length(row, role, steps, epochs, cfg)
        full = row.jobs.get("full", {}).get(role)
        full_train = (registry.train_job("full", full.depends) if full is not None
                      and full.depends else full)
        paper_command = (scale != "full" and full_train is not None
                         and (full_train.flagfile, full_train.args) == (train.flagfile,
                                                                        train.args))
        ledger = (trains[0].get("ledger") or {}) if trains else {}
        counts, claimed = [], False
        if row.extractor in extract.CERTIFIED_EXTRACTORS:
            for e in evals:
                c, cl = _certified_counts(row, e)
                counts += c
                claimed = claimed or cl
        out.append(extract.Model(
            role=role, method=train.method or "", dataset=dataset,
            accuracy=None if acc is None else 100.0 * acc, epochs=epochs, steps=steps,
            paper_epochs=p_epochs, paper_steps=p_steps, paper_command=paper_command,
            claimed_epsilon=_float(ledger.get("claimed_epsilon")),
            sound_epsilon=_float(ledger.get("epsilon")), certified=counts,
            claimed_certificates=claimed or any(uses_claimed_certificates(e) for e in evals),
            config=cfg, seed_accuracies=per_seed))
    return out


def compute_row(row: Row, scale: str, seeds: int, results_dir: str,
                write: bool = True) -> dict | None:
    """Our value and verdict for a row from its finished jobs; writes the row JSON.

    Returns:
      The row record, a record with verdict "not available in this build" when a job cannot
      run here, or None when the row has no jobs at this scale or some job has not finished
      (the report then says "not run at this scale").
    """
    jobs = row.jobs.get(scale)
    if not jobs:
        return None
    base = {"id": row.id, "paper": row.paper, "source": row.source, "setting": row.setting,
            "metric": row.metric, "published": row.published,
            "published_text": row.published_text, "criterion": row.criterion.describe(row.unit),
            "scale": scale}
    outs: dict[str, list[dict]] = {}
    by_role: dict[str, list[dict]] = {}
    records = []
    stale = []
    jobs_by_id = {job.id: job for job in jobs.values()}
    for role, job in sorted(jobs.items()):
        why = unavailable(job) or (unavailable(registry.train_job(scale, job.depends))
                                   if job.depends else None)
        if why is not None:
            rec = dict(base, verdict=extract.NOT_AVAILABLE, reason=why, value=None)
            return rec
        for seed in (range(1, seeds + 1) if job.seeded else (None,)):
            task = Task(job, seed)
            done = load_job(results_dir, scale, task.key)
            if done is None:
                return None
            why_stale = outdated(results_dir, scale, task, done)
            if why_stale is not None:
                stale.append((task.key, why_stale))
            outs.setdefault(role, []).append(done["output"])
            by_role.setdefault(role, []).append(done)
            records.append(done)
    if stale:
        old = _load_row(results_dir, scale, row.id) or {}
        rec = _stale_record(row, old, [r["key"] for r in records], [k for k, _ in stale],
                            "; ".join(w for _, w in stale))
        rec.update({k: v for k, v in base.items() if k not in rec})
        if write:
            _write_json(_row_file(results_dir, scale, row.id), rec)
        return rec
    value = extract.extract(row, outs)
    if value is None:
        return None
    flags = [why for r in records
             if (why := kernel_mismatch(Task(jobs_by_id[r["job"]], r["seed"]), r)) is not None]
    seeded = any(job.seeded for job in jobs.values())
    verdict, reason = extract.verdict(
        row, value, row_models(row, scale, by_role, results_dir),
        seeds=seeds if seeded and scale in registry.DECIDING_SCALES else None)
    if flags:
        reason += ("; flagged, not rerun: " + "; ".join(flags) +
                   " (another noise stream than the command draws today)")
    rec = dict(base, value=value.value, value_text=value.text, per_seed=value.per_seed,
               value_sd=value.sd, detail=value.detail, verdict=verdict, reason=reason,
               seeds=sorted({r["seed"] for r in records if r["seed"] is not None}),
               jobs=[r["key"] for r in records], commands=[r["command"] for r in records],
               adopted_from=sorted({r["output"]["adopted_from"] for r in records
                                    if "adopted_from" in r["output"]}),
               versions=records[0].get("versions", {}))
    if flags:
        rec["flags"] = flags
    if write:
        _write_json(_row_file(results_dir, scale, row.id), rec)
    return rec


def load_rows(results_dir: str) -> dict[tuple[str, str], dict]:
    """(scale, row id) -> row JSON, for every row JSON under the results directory."""
    out = {}
    for scale in registry.SCALES:
        for path in sorted(glob.glob(os.path.join(results_dir, scale, "*.json"))):
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            out[(scale, data["id"])] = data
    return out


def load_jobs(results_dir: str) -> dict[tuple[str, str], dict]:
    """(scale, job key) -> job JSON."""
    out = {}
    for scale in registry.SCALES:
        for path in sorted(glob.glob(os.path.join(results_dir, scale, "jobs", "*.json"))):
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            out[(scale, data["key"])] = data
    return out


def dry_run(rows: list[Row], scale: str, seeds: int, log: Callable[[str], None] = print,
            results_dir: str | None = None) -> None:
    """Prints the commands of a scale with their compute estimates (nothing runs).

    With `results_dir`, jobs already finished there are marked, and the estimate of what is
    left is printed after the total.
    """
    tasks = tasks_for(rows, scale, seeds)
    total = left = 0.0
    log(f"# tfdp-reproduce --scale={scale}: {len(tasks)} jobs for {len(rows)} rows")
    for t in tasks:
        why = unavailable(t.job)
        note = t.job.compute or f"about {_fmt_seconds(t.job.est_seconds)} on 2 CPU cores"
        if why:
            note += f"; {extract.NOT_AVAILABLE}: {why}"
        data = "  [needs --data_dir or TFDP_DATA_DIR]" if t.job.needs_data else ""
        rec = load_job(results_dir, scale, t.key) if results_dir is not None else None
        done = rec is not None and (outdated(results_dir, scale, t, rec)
                                    or kernel_mismatch(t, rec)) is None
        if done:
            note += "; finished (results_dir)"
        else:
            left += t.job.est_seconds
            if rec is not None:
                note += ("; finished, but outdated (its model retrained, its settings or "
                         "noise kernel changed): runs again")
        log(f"{t.command()}{data}\n    # {note}")
        total += t.job.est_seconds
    log(f"# CPU estimate if run here: about {_fmt_seconds(total)} "
        "(GPU-scale jobs: see each job's note)")
    if results_dir is not None:
        log(f"# not yet finished in {results_dir}: about {_fmt_seconds(left)}")


def recompute_rows(results_dir: str, rows: Iterable[Row] | None = None) -> int:
    """Recomputes every row JSON from the finished job JSONs (runs nothing).

    A row keeps the number of seeds its JSON recorded (1 when it has none). Rows whose jobs
    have not all finished are left without a JSON.

    Returns:
      The number of row JSONs written.
    """
    written = 0
    existing = load_rows(results_dir)
    for row in (registry.ROWS if rows is None else rows):
        for scale in row.jobs:
            old = existing.get((scale, row.id))
            seeds = max(1, len(old.get("seeds") or [])) if old else 1
            rec = compute_row(row, scale, seeds, results_dir)
            if rec is not None and rec.get("verdict") != extract.NOT_AVAILABLE:
                written += 1
            elif rec is None and old is not None:
                mark_stale(row, scale, seeds, old, results_dir)
    return written


def expected_jobs(row: Row, scale: str, seeds: int) -> list[str]:
    """The job keys a row's result rests on at a scale under its current definition."""
    keys = []
    for _, job in sorted(row.jobs.get(scale, {}).items()):
        for seed in (range(1, seeds + 1) if job.seeded else (None,)):
            keys.append(Task(job, seed).key)
    return keys


def _load_row(results_dir: str, scale: str, row_id: str) -> dict | None:
    path = _row_file(results_dir, scale, row_id)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _stale_record(row: Row, old: dict, want: list[str], rerun: list[str], why: str) -> dict:
    """A stale row record: no value; the earlier number only as `previous_value`."""
    rec = {k: v for k, v in old.items() if k not in ("value", "value_text", "per_seed",
                                                      "value_sd", "detail", "reason",
                                                      "jobs", "commands", "verdict")}
    rec.update(
        id=row.id, verdict=extract.STALE, value=None, value_text="—",
        previous_value=old.get("previous_value", old.get("value")),
        previous_value_text=old.get("previous_value_text", old.get("value_text")),
        previous_jobs=old.get("jobs") or old.get("previous_jobs") or [], expected_jobs=want,
        reason=f"{why}; the earlier number is not a result of the current jobs; rerun: "
               f"{', '.join(rerun)}",
        criterion=row.criterion.describe(row.unit), setting=row.setting, source=row.source)
    return rec


def mark_stale(row: Row, scale: str, seeds: int, old: dict, results_dir: str) -> bool:
    """Marks a row JSON stale when its recorded jobs are not the row's current jobs.

    The old number moves to `previous_value` (with the jobs it came from); `value` is None, so
    the report never shows it as a result of the new definition.

    Returns:
      True if the JSON was rewritten.
    """
    want = expected_jobs(row, scale, seeds)
    had = old.get("jobs") or old.get("previous_jobs") or []
    if sorted(had) == sorted(want):
        return False
    if old.get("verdict") == extract.STALE and old.get("expected_jobs") == want:
        return False
    missing = sorted(set(want) - set(had))
    rec = _stale_record(row, old, want, missing,
                        "the row's definition changed (issue 29: attack-size unit, baseline "
                        "settings or Monte-Carlo scoring); its earlier number came from other "
                        "jobs")
    _write_json(_row_file(results_dir, scale, row.id), rec)
    return True


def output_paths(repository: bool, results_dir: str | None, report_path: str | None
                 ) -> tuple[str, str]:
    """(results directory, report path): the repository's committed record only when asked
    (`--repository`), else under runs/ (issue 26: no command writes into results/ unless its
    output is named explicitly)."""
    if repository:
        return (results_dir or DEFAULT_RESULTS,
                report_path or os.path.join(REPO_ROOT, "REPRODUCTION.md"))
    results_dir = results_dir or DEFAULT_USER_RESULTS
    return results_dir, report_path or os.path.join(results_dir, "REPRODUCTION.md")
