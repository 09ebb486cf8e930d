"""The reproduction's tasks: a registry job at one seed, and the tasks a set of rows needs.

Also the repository's default locations of the results and the runs.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from typing import Iterable

from tfdp.reproduce import registry
from tfdp.reproduce.registry import Job, Row
from tfdp.train import registry as methods


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


def expected_jobs(row: Row, scale: str, seeds: int) -> list[str]:
    """The job keys a row's result rests on at a scale under its current definition."""
    keys = []
    for _, job in sorted(row.jobs.get(scale, {}).items()):
        for seed in (range(1, seeds + 1) if job.seeded else (None,)):
            keys.append(Task(job, seed).key)
    return keys
