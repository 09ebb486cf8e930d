"""Runs the registry's jobs (resumably) and writes one JSON per job and per row.

Layout under the results directory (default results/reproduce/):
  <scale>/jobs/<job key>.json   one finished job: command, seed, versions, times, output
  <scale>/<row id>.json         one row: published value, our value, verdict, commands, jobs

A job counts as done when its JSON exists with status "ok"; an interrupted grid therefore
resumes at the first unfinished job (its partial run directory is removed and the job is
started again). The tasks are in `tasks`, the files in `jobfiles`, whether a finished job
is still current in `freshness`, and the rows' records in `row_records`.
"""

from __future__ import annotations

import csv
import datetime
import glob
import hashlib
import importlib
import importlib.metadata
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import zipfile
from typing import Any, Callable

import h5py
import numpy as np

from tfdp.reproduce import registry, values
from tfdp.reproduce.freshness import job_settings, kernel_mismatch, outdated
from tfdp.reproduce.jobfiles import _job_file, _write_json, load_job
from tfdp.reproduce.registry import Row
from tfdp.reproduce.tasks import (DEFAULT_RESULTS, DEFAULT_USER_RESULTS, REPO_ROOT, Task,
                                  model_task, tasks_for, unavailable)


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
            status[t.key] = f"{values.NOT_AVAILABLE}: {why}"
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
            note += f"; {values.NOT_AVAILABLE}: {why}"
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
