"""Argument checks shared by the mechanism and accounting functions."""

from __future__ import annotations

from typing import Any

import numpy as np

from tfdp.checks import (
    as_float,
    check_nonnegative,
    check_nonnegative_array,
    check_positive,
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
