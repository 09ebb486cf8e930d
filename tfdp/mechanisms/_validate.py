"""Argument checks shared by the mechanism and accounting functions."""

from __future__ import annotations

from typing import Any

import numpy as np

from tfdp.checks import (
    as_float,
    check_nonnegative,
    check_nonnegative_array,
    check_positive,
    check_rng,
    check_unit_interval,
)

__all__ = [
    "as_float",
    "check_positive",
    "check_epsilon",
    "check_delta",
    "check_sensitivity",
    "check_scale_array",
    "check_rng",
    "check_calibration_sensitivity",
    "check_noise_scale",
]


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
    return check_positive(epsilon, name)


def check_delta(delta: Any, name: str = "delta") -> float:
    """Returns `delta` as a float after checking 0 < delta < 1.

    Raises:
        ValueError: if delta is not in the open interval (0, 1).
    """
    return check_unit_interval(delta, name)


def check_sensitivity(sensitivity: Any, name: str = "sensitivity") -> float:
    """Returns `sensitivity` as a float after checking it is finite and >= 0.

    Raises:
        ValueError: if sensitivity is negative, NaN or infinite.
    """
    return check_nonnegative(sensitivity, name)


def check_scale_array(scale: Any, name: str) -> np.ndarray:
    """Returns `scale` as a float64 array after checking every entry is finite and >= 0.

    Raises:
        ValueError: if any entry is negative, NaN or infinite, or not numeric.
    """
    return check_nonnegative_array(scale, name)


def check_calibration_sensitivity(sensitivity: Any, allow_zero: Any,
                                  name: str = "sensitivity") -> float:
    """Sensitivity of a calibration: finite and > 0, or 0 only with `allow_zero=True`.

    A zero sensitivity calibrates zero noise; that must be a deliberate, non-private choice
    (an ablation), never an accident.

    Raises:
        ValueError: if sensitivity is negative, NaN, infinite, not a number, or 0 without
            allow_zero; if allow_zero is not a bool.
    """
    if not isinstance(allow_zero, (bool, np.bool_)):
        raise ValueError(f"allow_zero must be a bool, got {allow_zero!r}")
    sens = check_sensitivity(sensitivity, name)
    if sens == 0.0 and not allow_zero:
        raise ValueError(f"{name} is 0, which calibrates no noise at all; pass allow_zero=True "
                         "only for a deliberately non-private ablation")
    return sens


def check_noise_scale(scale: Any, allow_zero: bool, name: str = "scale") -> Any:
    """Checks a calibrated noise scale before it is used in float32.

    Returns `scale` unchanged when every entry is finite and, in float32, neither overflows
    to inf nor underflows to 0 (0 is accepted only with `allow_zero`).

    Raises:
        ValueError: naming `name` when the scale is not finite, overflows to inf or
            underflows to 0 in float32.
    """
    arr = np.asarray(scale, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} is not finite ({scale!r}); the calibration overflowed")
    with np.errstate(over="ignore", under="ignore"):
        f32 = arr.astype(np.float32)
    if not np.all(np.isfinite(f32)):
        raise ValueError(f"{name} overflows to inf in float32 ({scale!r})")
    if not allow_zero and np.any(f32 == 0.0):
        raise ValueError(f"{name} is 0 or underflows to 0 in float32 ({scale!r}): no noise "
                         "would be added; pass allow_zero=True only for a non-private ablation")
    return scale
