"""Whether a finished job still describes what its command runs today.

A finished job is outdated when its command now selects other settings than it ran with
(an edited flagfile), or, for an evaluation, when the model it scored was trained again to
other weights; an evaluation is flagged when it drew its noise with another kernel than its
command selects now.
"""

from __future__ import annotations

import subprocess

from tfdp.reproduce import registry
from tfdp.reproduce.jobfiles import load_job
from tfdp.reproduce.registry import Job
from tfdp.reproduce.tasks import REPO_ROOT, Task, model_task


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
