"""The run directory: every file a run writes lives under one folder."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

# File names inside a run directory (DESIGN.md "A run is a directory").
FLAGS_FILE = "flags.txt"
CONFIG_FILE = "config.json"
LEDGER_FILE = "ledger.json"
METRICS_FILE = "metrics.json"
EVALUATION_FILE = "evaluation.json"
CERTIFICATES_FILE = "certificates.tsv"
MODEL_FILE = "model.keras"
CHECKPOINT_DIR = "checkpoints"
TENSORBOARD_DIR = "logs"
SAVED_MODEL_DIR = "saved_model"


class RunDir:
    """Paths and atomic JSON I/O for one run directory.

    Args:
        path: the directory.
        create: create it if missing.
    """

    def __init__(self, path: str, create: bool = False):
        if not path:
            raise ValueError("model_dir: a run directory path is required")
        self.path = os.path.abspath(os.path.expanduser(path))
        if create:
            os.makedirs(self.path, exist_ok=True)

    def file(self, name: str) -> str:
        """Absolute path of `name` inside the run directory."""
        return os.path.join(self.path, name)

    def exists(self, name: str) -> bool:
        return os.path.exists(self.file(name))

    def write_json(self, name: str, obj: Any) -> str:
        """Writes `obj` as JSON atomically (temp file + rename); returns the path."""
        return write_json_atomic(self.file(name), obj)

    def read_json(self, name: str) -> Any:
        with open(self.file(name), encoding="utf-8") as f:
            return json.load(f)

    def write_text(self, name: str, text: str) -> str:
        path = self.file(name)
        _atomic_write(path, text)
        return path


def _atomic_write(path: str, text: str) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_json_atomic(path: str, obj: Any) -> str:
    """Writes JSON to `path` atomically; returns the path."""
    _atomic_write(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")
    return path


def _json_default(o: Any) -> Any:
    # numpy scalars and arrays
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
