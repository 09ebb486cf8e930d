"""Argument checks shared by the mechanism and accounting functions."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def check_epsilon(epsilon: Any, name: str = "epsilon") -> float:
    """Returns `epsilon` as a float after checking it is finite and > 0.

    Args:
        epsilon: the privacy parameter.
        name: argument name used in the error message.

    Returns:
        epsilon as a Python float.

    Raises:
        ValueError: if epsilon is not a finite number > 0.
    """
    value = as_float(epsilon, name)
    if not math.isfinite(value) or value <= 0.0:
        raise ValueError(f"{name} must be a finite number > 0, got {epsilon!r}")
    return value


def check_delta(delta: Any, name: str = "delta") -> float:
    """Returns `delta` as a float after checking 0 < delta < 1.

    Raises:
        ValueError: if delta is not in the open interval (0, 1).
    """
    value = as_float(delta, name)
    if not (0.0 < value < 1.0):
        raise ValueError(f"{name} must lie in the open interval (0, 1), got {delta!r}")
    return value


def check_sensitivity(sensitivity: Any, name: str = "sensitivity") -> float:
    """Returns `sensitivity` as a float after checking it is finite and >= 0.

    Raises:
        ValueError: if sensitivity is negative, NaN or infinite.
    """
    value = as_float(sensitivity, name)
    if not math.isfinite(value) or value < 0.0:
        raise ValueError(f"{name} must be a finite number >= 0, got {sensitivity!r}")
    return value


def check_positive(value: Any, name: str) -> float:
    """Returns `value` as a float after checking it is finite and > 0.

    Raises:
        ValueError: if value is not a finite number > 0.
    """
    out = as_float(value, name)
    if not math.isfinite(out) or out <= 0.0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return out


def check_scale_array(scale: Any, name: str) -> np.ndarray:
    """Returns `scale` as a float64 array after checking every entry is finite and >= 0.

    Raises:
        ValueError: if any entry is negative, NaN or infinite, or not numeric.
    """
    try:
        arr = np.asarray(scale, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be numeric, got {scale!r}") from e
    if not np.all(np.isfinite(arr)) or np.any(arr < 0.0):
        raise ValueError(f"{name} must be finite and >= 0 everywhere")
    return arr


def check_rng(rng: Any, name: str = "rng") -> np.random.Generator:
    """Checks that `rng` is a numpy Generator.

    Raises:
        ValueError: if rng is not a np.random.Generator.
    """
    if not isinstance(rng, np.random.Generator):
        raise ValueError(
            f"{name} must be a numpy.random.Generator (e.g. np.random.default_rng(seed)), "
            f"got {type(rng).__name__}")
    return rng


def as_float(value: Any, name: str) -> float:
    """Returns a numeric scalar as a float (NaN and inf pass through).

    Raises:
        ValueError: if value is a bool, not numeric, or not a scalar.
    """
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a number, got {value!r}") from e
    if arr.shape != ():
        raise ValueError(f"{name} must be a scalar, got shape {arr.shape}")
    return float(arr)
