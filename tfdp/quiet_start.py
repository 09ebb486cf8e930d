"""A quiet TensorFlow import for every entry point: apps, `python -m tfdp.*` and the Python API.

TensorFlow writes start-up notices (oneDNN, CPU features, "All log messages before
absl::InitializeLog()") from C++ straight to file descriptor 2 while it is imported; setting
TF_CPP_MIN_LOG_LEVEL does not hold them all back. `quiet_import` imports TensorFlow with
descriptor 2 redirected to a temporary file and afterwards writes every captured line that is
not a known start-up notice to stderr, so an import error's output is never lost.

`install()` (called when `tfdp` is imported) makes the first `import tensorflow` of the
process (by tfdp, Keras or the user's code) go through the same filter, without importing
TensorFlow itself: importing `tfdp` alone stays fast. TFDP_VERBOSE=1 or
TF_CPP_MIN_LOG_LEVEL=0 in the environment shows the notices.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import tempfile
from typing import Iterator

# Start-up notices TensorFlow prints on every import (C++ logging before absl is initialised).
TF_NOISE = (
    "All log messages before absl::InitializeLog() is called",
    "oneDNN custom operations are on",
    "cpu_feature_guard.cc",
    "To enable the following instructions:",
    "This TensorFlow binary is optimized to use available CPU instructions",
    "Unable to register cuDNN factory",
    "Unable to register cuFFT factory",
    "Unable to register cuBLAS factory",
    "computation placer already registered",
    "TF-TRT Warning",
    "Could not find cuda drivers on your machine",
    "failed call to cuInit",
)


def notices_wanted() -> bool:
    """Whether the environment asks for TensorFlow's start-up log."""
    return (os.environ.get("TFDP_VERBOSE", "") not in ("", "0")
            or os.environ.get("TF_CPP_MIN_LOG_LEVEL", "").strip() == "0")


@contextlib.contextmanager
def filtered_stderr() -> Iterator[None]:
    """Within the block, file descriptor 2 goes to a temporary file; afterwards every line
    that is not a known start-up notice (`TF_NOISE`) is written to stderr."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (an embedding host): nothing to filter
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = [line for line in capture.read().decode("utf-8", "replace").splitlines()
                    if line.strip() and not any(n in line for n in TF_NOISE)]
            if kept:
                print("\n".join(kept), file=sys.stderr)


def quiet_import():
    """Imports TensorFlow without its start-up notices (unless `notices_wanted`).

    Returns:
      The tensorflow module.
    """
    if "tensorflow" in sys.modules or notices_wanted():
        # lazy: loads tensorflow only when asked
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        return tf
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with filtered_stderr():
        # lazy: loads tensorflow only when asked
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf


class _QuietLoader(importlib.abc.Loader):
    """Executes TensorFlow's package module inside `filtered_stderr`."""

    def __init__(self, real: importlib.abc.Loader):
        self.real = real

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module) -> None:
        # The module keeps TensorFlow's own loader (resources, reloads).
        module.__loader__ = self.real
        if module.__spec__ is not None:
            module.__spec__.loader = self.real
        with filtered_stderr():
            self.real.exec_module(module)


class _QuietFinder(importlib.abc.MetaPathFinder):
    """Finds `tensorflow` once, with a loader that filters its start-up notices."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "tensorflow":
            return None
        uninstall()  # one shot: the nested imports below use the normal finders
        if notices_wanted():
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        spec.loader = _QuietLoader(spec.loader)
        return spec


_FINDER = _QuietFinder()


def install() -> None:
    """Filters the start-up notices of the process's first `import tensorflow` (if it has
    not happened yet)."""
    if "tensorflow" not in sys.modules and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    """Removes the import hook of `install`."""
    while _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
