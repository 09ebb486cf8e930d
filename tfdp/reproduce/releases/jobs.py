"""The release jobs: which checkout, script and commit, and what the harness overrides.

Each paper declares its jobs (registry kind "release_job": tfdp/papers/<paper>/releases.py);
this module holds what they are made of and finds them through tfdp.registry.

Each override replaces one exact line fragment of a temporary copy (it must occur exactly once,
so a changed release fails loudly instead of running unmodified). Placeholders `{name}` in the
replacement are filled from the job's settings (its defaults, overridable per run).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from tfdp import registry

KIND = "release_job"

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
      make_dirs: folders the script writes into, created in the copy.
      data_dir: folder (inside the copy) where the release's own reader looks for the MNIST
        files; the harness links tfdp's files there. Empty: the script reads through the shim.
      curve_pattern: regex with groups `step` and `accuracy` for each evaluation line.
      final_pattern: regex with group `accuracy` for the final line, or "".
      accuracy_scale: multiply parsed accuracies by this to get percent.
      extra_metrics: further accuracies the (overridden) script prints, name -> regex with
        groups `step` and `accuracy` (each gives a curve; its last point is the number).
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
    make_dirs: tuple[str, ...] = ()
    final_pattern: str = ""
    accuracy_scale: float = 100.0
    extra_metrics: Mapping[str, str] = dataclasses.field(default_factory=dict)
    published: float | None = None
    published_source: str = ""


def names() -> list[str]:
    """The jobs' names, sorted, from the papers' declarations (no job module is imported)."""
    return sorted(registry.extensions(KIND))


def get(name: str) -> ReleaseJob:
    """The job called `name`, as a paper declares it (kind "release_job").

    Raises:
      ValueError: naming the known jobs if there is none.
      TypeError: the declaration's target is not a ReleaseJob named `name`.
    """
    declared = registry.extensions(KIND).get(name)
    if declared is None:
        raise ValueError(f"job must be one of {names()}, got {name!r}")
    job = declared.load()
    if not isinstance(job, ReleaseJob) or job.name != name:
        raise TypeError(f"{KIND} {name!r} of paper "
                        f"{registry.extension_paper(KIND, name)!r}: {declared.target} is not "
                        f"a ReleaseJob named {name!r}")
    return job


def all_jobs() -> dict[str, ReleaseJob]:
    """name -> ReleaseJob of every declared job, sorted by name (imports their modules)."""
    return {name: get(name) for name in names()}
