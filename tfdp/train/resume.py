"""One checker of a resume's settings against the run's (tfdp-train's flags and the run).

A resume continues the run in its directory with the run's own configuration: a setting it
gives may differ from the run's only where the method allows it (`resume_mutable_flags`) or
where it steers only how the run executes. Both places that compare use this module:
tfdp-train (`tfdp.apps.train.merge_resume`, the flags given against config.json's) and the
run itself (`tfdp.train.loop`, the resolved configuration against config.json), so the rule
and its messages are one. It imports no TensorFlow (tfdp-train's `--help` loads it).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Iterable, Mapping

import numpy as np

__all__ = ["RESUME_KEYS", "same_setting", "setting_conflict", "resume_conflicts",
           "flag_conflicts", "conflict_error", "data_fingerprint"]

# Configuration keys compared on resume, with the flag that sets each (the training data is
# compared by content through data_sha256, kept in the checkpoint folder's private state).
RESUME_KEYS = {"method": "--method", "dataset": "--dataset", "batch_size": "--batch_size",
               "learning_rate": "--learning_rate", "optimizer": "--optimizer",
               "epsilon": "--epsilon", "delta": "--delta", "value_range": "--value_range",
               "num_train": "--num_train", "input_shape": "--dataset",
               "num_classes": "--dataset", "data_sha256": "--data_dir",
               "epochs": "--epochs"}
_UNSET = object()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def same_setting(a: Any, b: Any) -> bool:
    """Whether two values of a setting are the same (numbers as floats, lists item by item).

    A flag's list value arrives as strings ("-1", "1") and the run's as numbers, so list
    items are compared as numbers when they all are, else as they are.
    """
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        try:
            return [float(v) for v in a] == [float(v) for v in b]
        except (TypeError, ValueError):
            return list(a or []) == list(b or [])
    if _is_number(a) and _is_number(b):
        return float(a) == float(b)
    return a == b


def _shown(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def setting_conflict(flag: str, started: Any, asked: Any) -> str | None:
    """The message for a setting a resume changes, or None when both values are the same.

    Args:
      flag: the flag that sets it, e.g. "--epsilon".
      started: the run's value.
      asked: the resume's value.
    """
    if same_setting(started, asked):
        return None
    return (f"{flag}: the run was started with {_shown(started)!r}, the resume asks for "
            f"{_shown(asked)!r}")


def resume_conflicts(stored: Mapping[str, Any], current: Mapping[str, Any],
                     mutable: tuple[str, ...] = ("epochs",)) -> list[str]:
    """Differences between a run's config.json and the configuration of a resume.

    Args:
      stored: the run's config.json.
      current: the resume's configuration, same keys (options under "options").
      mutable: keys allowed to differ (the method's `resume_mutable_flags`).

    Returns:
      One message per conflicting setting, naming its flag and both values.
    """
    out = []
    for key, flag in RESUME_KEYS.items():
        if key in mutable or key not in stored or key not in current:
            continue
        a, b = stored[key], current[key]
        if key == "data_sha256":
            if a != b:
                out.append("training data: the data differ from the run's (content hash "
                           f"{str(a)[:12]}... vs {str(b)[:12]}...)")
            continue
        message = setting_conflict(flag, a, b)
        if message:
            out.append(message)
    # --seed is checked against the checkpoint, where the run's secret key lives.
    opts_a, opts_b = stored.get("options") or {}, current.get("options") or {}
    for key in sorted(set(opts_a) | set(opts_b)):
        if key in mutable:
            continue
        a, b = opts_a.get(key, _UNSET), opts_b.get(key, _UNSET)
        if (a is _UNSET and b is None) or (b is _UNSET and a is None):
            continue
        if a is _UNSET or b is _UNSET:
            out.append(f"--{key}: the run was started with "
                       f"{'its default' if a is _UNSET else repr(a)}, the resume asks for "
                       f"{'its default' if b is _UNSET else repr(b)}")
            continue
        message = setting_conflict(f"--{key}", a, b)
        if message:
            out.append(message)
    return out


def flag_conflicts(stored: Mapping[str, Any], given: Mapping[str, Any], present: Iterable[str],
                   mutable: Iterable[str]) -> list[str]:
    """Messages for the flags a resume gives explicitly that change the run's values.

    Args:
      stored: the run's flag values by name (from its config.json).
      given: the resume's flag values by name.
      present: names of the flags given explicitly (command line or flagfile).
      mutable: names that may change on resume.

    Returns:
      One message per flag in `present`, not in `mutable`, whose value differs.
    """
    present, mutable = set(present), set(mutable)
    out = []
    for name, old in stored.items():
        if name in present and name not in mutable:
            message = setting_conflict(f"--{name}", old, given.get(name))
            if message:
                out.append(message)
    return out


def conflict_error(model_dir: str, conflicts: list[str]) -> ValueError:
    """The error refusing a resume that changes the run, listing every conflict."""
    return ValueError("--resume: these flags change the run in " + str(model_dir)
                      + " (a resume reads the run's configuration from its config.json; "
                      "start a new run to change them):\n  " + "\n  ".join(conflicts))


def data_fingerprint(x: np.ndarray, y: np.ndarray) -> str:
    """sha256 of the training arrays (detects a resume on different data)."""
    h = hashlib.sha256()
    for a in (np.ascontiguousarray(x), np.ascontiguousarray(y)):
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()
