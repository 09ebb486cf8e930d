"""The release jobs: which checkout, script and commit, and what the harness overrides.

Each override replaces one exact line fragment of a temporary copy (it must occur exactly once,
so a changed release fails loudly instead of running unmodified). Placeholders `{name}` in the
replacement are filled from the job's settings (defaults below, overridable per run).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

# The four MNIST IDX files, as the releases' own readers name them.
MNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
               "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


@dataclasses.dataclass(frozen=True)
class Override:
    """One exact fragment of one file of the temporary copy and its replacement template."""

    file: str
    old: str
    new: str


@dataclasses.dataclass(frozen=True)
class ReleaseJob:
    """A release script, the commit it was read at, and how its output is parsed.

    Attributes:
      name: job id (`<paper>.<dataset>`).
      repo: GitHub owner/name of the release.
      commit: the commit whose files the overrides were written against.
      folder: the script's folder inside the checkout (copied whole).
      script: the script inside `folder`.
      settings: placeholder defaults (each one a run-length or evaluation knob).
      overrides: the edits made on the temporary copy.
      data_dir: folder (inside the copy) where the release's own reader looks for the MNIST
        files; the harness links tfdp's files there. Empty: the script reads through the shim.
      curve_pattern: regex with groups `step` and `accuracy` for each evaluation line.
      final_pattern: regex with group `accuracy` for the final line, or "".
      accuracy_scale: multiply parsed accuracies by this to get percent.
      published: the paper's published accuracy (percent) this job is compared with.
      published_source: where in the paper `published` is stated.
    """

    name: str
    repo: str
    commit: str
    folder: str
    script: str
    settings: Mapping[str, str]
    overrides: tuple[Override, ...]
    data_dir: str
    curve_pattern: str
    final_pattern: str = ""
    accuracy_scale: float = 100.0
    published: float | None = None
    published_source: str = ""


JOBS: dict[str, ReleaseJob] = {}


def _add(job: ReleaseJob) -> None:
    JOBS[job.name] = job


# AdLM, MNIST (PrivateDeepLearning AdLM/MNIST/AdLM.py; the script last changed in 15fb1f3).
# Run length: the epoch count (steps = int(60000 / 1800 * epochs + 1)); evaluation every
# `eval_epochs` epochs instead of every 5 (a curve at short budgets).
_add(ReleaseJob(
    name="adlm.mnist",
    repo="haiphanNJIT/PrivateDeepLearning",
    commit="77fb35740f820d24b1cba94174f9ce7b7eee3e7c",
    folder="AdLM/MNIST",
    script="AdLM.py",
    settings={"epochs": "12", "eval_epochs": "1"},
    overrides=(
        Override("AdLM.py", "epochs = 2400;", "epochs = {epochs};"),
        Override("AdLM.py", "if i % int(5*step_for_epoch) == 0:",
                 "if i % int({eval_epochs}*step_for_epoch) == 0:"),
    ),
    data_dir="MNIST_data",
    curve_pattern=r"^step \t (?P<step>\d+) \t test accuracy \t (?P<accuracy>[0-9.eE+-]+)\s*$",
    final_pattern=r"^test accuracy (?P<accuracy>[0-9.eE+-]+)\s*$",
    published=None,
))


def get(name: str) -> ReleaseJob:
    """The job called `name`.

    Raises:
      ValueError: naming the known jobs if there is none.
    """
    if name not in JOBS:
        raise ValueError(f"job must be one of {sorted(JOBS)}, got {name!r}")
    return JOBS[name]
