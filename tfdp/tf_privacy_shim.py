"""The one place where tensorflow-privacy is (optionally) imported."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Optional

_INSTALL_HINT = ("tensorflow-privacy is not usable here; install it next to TF 2.21 with "
                 "`pip install --no-deps tensorflow-privacy==0.9.0` (see notes on the "
                 "dependency stack). tfdp itself does its accounting with dp_accounting.")


def _import(name: str) -> ModuleType:
    # tensorflow_privacy's package __init__ imports tensorflow_estimator, which fails on
    # TF >= 2.16; this attribute makes that __init__ skip its imports (documented flag).
    sys.skip_tf_privacy_import = True
    return importlib.import_module(name)


def get_module(name: str = "tensorflow_privacy", *, required: bool = False) -> Optional[ModuleType]:
    """Imports a tensorflow-privacy (sub)module, or returns None when it is not usable.

    Args:
        name: a module under `tensorflow_privacy`, e.g.
            "tensorflow_privacy.privacy.analysis.compute_dp_sgd_privacy_lib".
        required: raise instead of returning None.

    Returns:
        The module, or None when tensorflow-privacy is absent or broken and not required.

    Raises:
        ValueError: if name is not a tensorflow_privacy module name.
        ImportError: if required and the import fails (with the reason and an install hint).
    """
    if not isinstance(name, str) or not (name == "tensorflow_privacy"
                                         or name.startswith("tensorflow_privacy.")):
        raise ValueError(f"name must be a tensorflow_privacy module, got {name!r}")
    try:
        return _import(name)
    except Exception as e:  # ImportError, or version-skew errors raised while importing
        if required:
            raise ImportError(f"cannot import {name}: {type(e).__name__}: {e}. "
                              f"{_INSTALL_HINT}") from e
        return None


def available() -> bool:
    """True when tensorflow-privacy's accounting library imports."""
    return get_module("tensorflow_privacy.privacy.analysis.compute_dp_sgd_privacy_lib") is not None


def compute_dp_sgd_privacy(*, num_examples: int, batch_size: int, noise_multiplier: float,
                           epochs: float, delta: float) -> float:
    """epsilon from TF-Privacy's `compute_dp_sgd_privacy` (for cross-checks only).

    Raises:
        ImportError: if tensorflow-privacy is not importable.
    """
    lib = get_module("tensorflow_privacy.privacy.analysis.compute_dp_sgd_privacy_lib",
                     required=True)
    out = lib.compute_dp_sgd_privacy(num_examples, batch_size, noise_multiplier, epochs, delta)
    return float(out[0] if isinstance(out, tuple) else out)
