"""Runs one release job: commit check, temporary copy with overrides, shimmed run, result file.

The result file (JSON) holds the command, the release's repo and commit, the exact diff of the
overrides, the seed, the settings, the wall seconds, the learning curve parsed from the
script's printed accuracies and the final accuracy; never the release's files or output text.
"""

from __future__ import annotations

import datetime
import difflib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Mapping, Sequence

from tfdp import rundir
from tfdp.data import _common, sources
from tfdp.reproduce.releases import jobs as jobs_lib

SHIM_MODULE = "tfdp.reproduce.releases.compat"
# tfdp's own root, put first on the child's PYTHONPATH so the shim imports this tfdp.
_TFDP_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def _git(checkout: str, *args: str) -> str:
    out = subprocess.run(["git", "-C", checkout, *args], capture_output=True, text=True,
                         check=False)
    if out.returncode:
        raise ValueError(f"release_dir {checkout}: git {' '.join(args)} failed: "
                         f"{out.stderr.strip()}")
    return out.stdout


def check_checkout(job: jobs_lib.ReleaseJob, checkout: str) -> list[str]:
    """Checks that `checkout` is the job's repository at the job's commit, unmodified.

    Args:
      job: the job.
      checkout: a git checkout of job.repo.

    Returns:
      Tracked files of the job's folder missing from the work tree (a mirror may omit large
      files; the run needs none of them or fails), sorted.

    Raises:
      ValueError: naming release_dir if it is not a checkout, is at another commit, lacks the
        script, or has modified or untracked files in the job's folder.
    """
    if not os.path.isdir(checkout):
        raise ValueError(f"release_dir {checkout} is not a directory")
    head = _git(checkout, "rev-parse", "HEAD").strip()
    if head != job.commit:
        raise ValueError(f"release_dir {checkout} is at commit {head}; job {job.name} names "
                         f"{job.commit} ({job.repo}): check that commit out first")
    if not os.path.isfile(os.path.join(checkout, job.folder, job.script)):
        raise ValueError(f"release_dir {checkout} has no {job.folder}/{job.script}")
    missing, changed = [], []
    for line in _git(checkout, "status", "--porcelain", "--untracked-files=all", "--",
                     job.folder).splitlines():
        code, path = line[:2], line[3:]
        if code.strip() == "D":
            missing.append(path)
        elif not path.endswith(".pyc") and "__pycache__" not in path:
            changed.append(f"{code.strip()} {path}")
    if changed:
        raise ValueError(f"release_dir {checkout} has local changes in {job.folder}: "
                         f"{changed[:5]}")
    return sorted(missing)


def apply_overrides(job: jobs_lib.ReleaseJob, copy_dir: str,
                    settings: Mapping[str, str]) -> str:
    """Applies the job's overrides to the copy in `copy_dir`; returns their unified diff.

    The diff has no context lines: it holds the changed lines only, so that a result file
    carries no more of the release's text than the edits themselves.

    Raises:
      ValueError: if a fragment does not occur exactly once, or a placeholder has no setting.
    """
    originals: dict[str, str] = {}
    texts: dict[str, str] = {}
    for ov in job.overrides:
        path = os.path.join(copy_dir, ov.file)
        if ov.file not in texts:
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                originals[ov.file] = texts[ov.file] = f.read()
        count = texts[ov.file].count(ov.old)
        if count != 1:
            raise ValueError(f"job {job.name}: {ov.file} holds {ov.old!r} {count} times "
                             "(expected once): the release differs from the job's commit")
        try:
            new = ov.new.format(**settings)
        except KeyError as e:
            raise ValueError(f"job {job.name}: no setting for placeholder {e}") from e
        except (ValueError, IndexError) as e:
            raise ValueError(f"job {job.name}: bad replacement template {ov.new!r}: {e}") from e
        texts[ov.file] = texts[ov.file].replace(ov.old, new)
    diff = []
    for name, text in texts.items():
        with open(os.path.join(copy_dir, name), "w", encoding="utf-8",
                  errors="surrogateescape") as f:
            f.write(text)
        diff.extend(difflib.unified_diff(originals[name].splitlines(keepends=True),
                                         text.splitlines(keepends=True),
                                         f"a/{job.folder}/{name}", f"b/{job.folder}/{name}",
                                         n=0))
    return "".join(diff)


def link_mnist(target: str, data_dir: str | None) -> dict[str, str]:
    """Links tfdp's MNIST IDX files into `target` under the names the releases read.

    Returns:
      {file name: sha256} of the linked files.

    Raises:
      ValueError: if tfdp's search path has no directory with all four gzipped files.
    """
    for d in sources.candidate_dirs("mnist", data_dir):
        found = [_common.find_file(d, [name]) for name in jobs_lib.MNIST_FILES]
        if all(found):
            os.makedirs(target, exist_ok=True)
            out = {}
            for name, path in zip(jobs_lib.MNIST_FILES, found):
                link = os.path.join(target, name)
                if os.path.lexists(link):
                    os.remove(link)
                os.symlink(os.path.abspath(path), link)
                out[name] = rundir.file_sha256(path)
            return out
    raise ValueError(f"data_dir: no directory of {sources.candidate_dirs('mnist', data_dir)} "
                     f"holds all of {jobs_lib.MNIST_FILES}")


def parse_output(job: jobs_lib.ReleaseJob, text: str) -> tuple[list[list[float]], float | None]:
    """The learning curve [[step, accuracy %], ...] and the final accuracy % (or None)."""
    curve, final = [], None
    curve_re = re.compile(job.curve_pattern, re.M)
    for m in curve_re.finditer(text):
        curve.append([int(float(m.group("step"))), float(m.group("accuracy")) * job.accuracy_scale])
    if job.final_pattern:
        found = re.findall(job.final_pattern, text, re.M)
        if found:
            final = float(found[-1]) * job.accuracy_scale
    return curve, final


def parse_extra_metrics(job: jobs_lib.ReleaseJob, text: str) -> dict[str, list[list[float]]]:
    """The curve [[step, accuracy %], ...] of each of the job's extra metrics (may be empty)."""
    curves = {}
    for name, pattern in job.extra_metrics.items():
        curves[name] = [[int(float(m.group("step"))),
                         float(m.group("accuracy")) * job.accuracy_scale]
                        for m in re.compile(pattern, re.M).finditer(text)]
    return curves


def _tf_version() -> str:
    for dist in ("tensorflow", "tensorflow-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def _tfdp_commit() -> str | None:
    out = subprocess.run(["git", "-C", _TFDP_ROOT, "rev-parse", "HEAD"], capture_output=True,
                         text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else None


def _utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_job(job: jobs_lib.ReleaseJob, checkout: str, seed: int, output: str,
            settings: Mapping[str, str] | None = None, work_dir: str | None = None,
            extra_path: Sequence[str] = (), data_dir: str | None = None,
            python: str = sys.executable, command: str = "") -> dict[str, Any]:
    """Runs `job` on a temporary copy of `checkout` and writes the result file `output`.

    Args:
      job: the job.
      checkout: git checkout of job.repo at job.commit.
      seed: seeds NumPy, Python and TF (graph level) in the child.
      output: result JSON path (written atomically, only after a successful run).
      settings: overrides of job.settings (unknown keys are an error).
      work_dir: where the copy and the log go (a new temporary directory if None; kept).
      extra_path: further PYTHONPATH entries for the child (e.g. where tf_slim is).
      data_dir: tfdp's data directory (default: TFDP_DATA_DIR / the usual search path).
      python: interpreter for the child.
      command: the command line to record.

    Returns:
      The result dictionary.

    Raises:
      ValueError: bad arguments (before anything runs) or a release that differs.
      RuntimeError: if the script exits non-zero or prints no accuracy (log path named).
    """
    unknown = sorted(set(settings or {}) - set(job.settings))
    if unknown:
        raise ValueError(f"settings: job {job.name} has no setting {unknown}; known: "
                         f"{sorted(job.settings)}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    merged = {**job.settings, **(settings or {})}
    missing = check_checkout(job, checkout)
    work_dir = work_dir or tempfile.mkdtemp(prefix=f"tfdp-release-{job.name}-")
    copy_dir = os.path.join(work_dir, "copy")
    diff, data_files = _prepare_copy(job, checkout, copy_dir, merged, data_dir)
    env = _child_env(extra_path, data_dir)
    log_path = os.path.join(work_dir, "log.txt")
    started, t0 = _utc(), time.time()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.run([python, "-u", "-m", SHIM_MODULE, str(seed), job.script],
                              cwd=copy_dir, env=env, stdout=log, stderr=subprocess.STDOUT,
                              check=False)
    seconds = time.time() - t0
    with open(log_path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    curve, final = parse_output(job, text)
    extra = parse_extra_metrics(job, text)
    if proc.returncode:
        raise RuntimeError(f"job {job.name} exited with {proc.returncode}; log: {log_path}")
    if final is None and not curve:
        raise RuntimeError(f"job {job.name} printed no accuracy; log: {log_path}")
    result = _result(job, command, missing, diff, seed, merged, data_files, seconds, started,
                     proc.returncode, curve, final, extra)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    rundir.write_json_atomic(output, result)
    return result


def _prepare_copy(job: jobs_lib.ReleaseJob, checkout: str, copy_dir: str,
                  merged: Mapping[str, str], data_dir: str | None
                  ) -> tuple[str, dict[str, str]]:
    """Copies the release's folder to `copy_dir` (afresh), applies the settings, makes the
    folders the script expects and links MNIST into it.

    Returns:
      (the diff the settings made, the linked data files' SHA-256).
    """
    if os.path.exists(copy_dir):
        shutil.rmtree(copy_dir)
    shutil.copytree(os.path.join(checkout, job.folder), copy_dir, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git"))
    diff = apply_overrides(job, copy_dir, merged)
    for folder in job.make_dirs:
        os.makedirs(os.path.join(copy_dir, folder), exist_ok=True)
    data_files = (link_mnist(os.path.join(copy_dir, job.data_dir), data_dir)
                  if job.data_dir else {})
    return diff, data_files


def _child_env(extra_path: Sequence[str], data_dir: str | None) -> dict[str, str]:
    """The child's environment: tfdp and `extra_path` first on PYTHONPATH, the data dir."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([_TFDP_ROOT, *extra_path] + (
        [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if data_dir:
        env["TFDP_DATA_DIR"] = data_dir
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def _result(job: jobs_lib.ReleaseJob, command: str, missing: list[str], diff: str, seed: int,
            merged: Mapping[str, str], data_files: dict[str, str], seconds: float,
            started: str, exit_code: int, curve: list[list[float]], final: float | None,
            extra: dict[str, list[list[float]]]) -> dict[str, Any]:
    """The result file's content (versions read now)."""
    return {
        "job": job.name,
        "command": command,
        "release": {"repo": job.repo, "commit": job.commit,
                    "script": f"{job.folder}/{job.script}", "missing_files": missing},
        "diff": diff,
        "seed": seed,
        "settings": merged,
        "shim": SHIM_MODULE,
        "data_files_sha256": data_files,
        "seconds": round(seconds, 1),
        "started_utc": started,
        "finished_utc": _utc(),
        "exit_code": exit_code,
        "numbers": {"test_accuracy": final if final is not None else curve[-1][1],
                    "final_line": final is not None,
                    **{name: points[-1][1] for name, points in extra.items() if points}},
        "curve": curve,
        **({"extra_curves": extra} if extra else {}),
        "versions": {"python": sys.version.split()[0], "tensorflow": _tf_version(),
                     "tfdp_commit": _tfdp_commit()},
    }
