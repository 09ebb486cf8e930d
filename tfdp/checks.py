"""Argument checks shared by tfdp's modules: clear ValueErrors naming the argument."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

__all__ = [
    "as_float",
    "check_finite",
    "check_trackables",
    "check_train_test_arrays",
    "check_positive",
    "check_nonnegative",
    "check_unit_interval",
    "check_int",
    "check_positive_int",
    "check_seed",
    "check_interval",
    "check_nonnegative_array",
    "check_choice",
    "check_rng",
    "check_shape",
]


def as_float(value: Any, name: str, *, allow_nonfinite: bool = False) -> float:
    """Returns a numeric scalar as a Python float.

    Args:
        value: a Python or numpy number (or a 0-d array).
        name: argument name used in the error message.
        allow_nonfinite: if True, NaN and +-inf are returned as they are.

    Returns:
        value as a Python float.

    Raises:
        ValueError: naming `name`, if value is a bool, a string, not numeric, not a
            scalar, or (unless allow_nonfinite) NaN or infinite.
    """
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a number, got {value!r}") from e
    if arr.shape != ():
        raise ValueError(f"{name} must be a scalar, got shape {arr.shape}")
    out = float(arr)
    if not allow_nonfinite and not math.isfinite(out):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return out


def check_finite(value: Any, name: str, *, minimum: Optional[float] = None,
                 strict: bool = False) -> float:
    """Returns `value` as a float after checking it is finite and, if asked, bounded below.

    Args:
        value: the number to check.
        name: argument name used in the error message.
        minimum: if given, the smallest allowed value.
        strict: if True, `minimum` itself is rejected too (value > minimum).

    Returns:
        value as a Python float.

    Raises:
        ValueError: naming `name`, if value is not a finite number (bools and strings
            included) or lies below `minimum` (or at it, when strict).
    """
    out = as_float(value, name, allow_nonfinite=True)
    if minimum is None:
        if not math.isfinite(out):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
        return out
    if not math.isfinite(out) or out < minimum or (strict and out == minimum):
        raise ValueError(f"{name} must be a finite number {'>' if strict else '>='} "
                         f"{minimum:g}, got {value!r}")
    return out


def check_positive(value: Any, name: str) -> float:
    """Returns `value` as a float after checking it is finite and > 0.

    Raises:
        ValueError: naming `name`, if value is not a finite number > 0.
    """
    return check_finite(value, name, minimum=0.0, strict=True)


def check_nonnegative(value: Any, name: str) -> float:
    """Returns `value` as a float after checking it is finite and >= 0.

    Raises:
        ValueError: naming `name`, if value is not a finite number >= 0.
    """
    return check_finite(value, name, minimum=0.0)


def check_unit_interval(value: Any, name: str) -> float:
    """Returns `value` as a float after checking 0 < value < 1.

    Raises:
        ValueError: naming `name`, if value is not a number in the open interval (0, 1).
    """
    out = as_float(value, name, allow_nonfinite=True)
    if not 0.0 < out < 1.0:
        raise ValueError(f"{name} must lie in the open interval (0, 1), got {value!r}")
    return out


def check_trackables(objects: Any, source: str) -> dict:
    """Checks that every value of `objects` can be tracked by `tf.train.Checkpoint`.

    Args:
        objects: mapping of checkpoint name -> object.
        source: what returned them, named in the error (e.g. "build: MyMethod").

    Returns:
        `objects` as a dict.

    Raises:
        ValueError: naming `source` and the key, for a value a checkpoint cannot track (it
            would silently not be restored on resume), or if `objects` is not a mapping.
    """
    # lazy: loads tensorflow; importing tfdp.checks does not
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    if not hasattr(objects, "items"):
        raise ValueError(f"{source} returned {type(objects).__name__}; expected a dict of "
                         "name -> trackable object")
    trackable = tf.__internal__.tracking.Trackable
    out = {}
    for key, value in objects.items():
        if not isinstance(value, trackable):
            raise ValueError(f"{source} returned {key!r} of type {type(value).__name__}, "
                             "which tf.train.Checkpoint cannot track (use tf.Variable, "
                             "tf.Module, tf.random.Generator or a Keras model, layer or "
                             "optimizer); it would not be restored on resume")
        out[str(key)] = value
    return out


def check_train_test_arrays(x_train: Any, y_train: Any, x_test: Any, y_test: Any,
                            input_shape: Any, name: str = "data") -> None:
    """Checks that train and test images have `input_shape` and as many labels as images.

    Raises:
        ValueError: naming `name`, on a shape or length mismatch.
    """
    shape = tuple(int(v) for v in input_shape)
    for part, arr in (("x_train", x_train), ("x_test", x_test)):
        if tuple(arr.shape[1:]) != shape:
            raise ValueError(f"{name}: {part} images have shape {tuple(arr.shape[1:])}, but the "
                             f"run's input shape is {shape}; train and test images must have "
                             "the same shape")
    if len(x_train) != len(y_train) or len(x_test) != len(y_test):
        raise ValueError(f"{name}: images and labels differ in number")


def check_int(value: Any, name: str, *, minimum: Optional[int] = None,
              maximum: Optional[int] = None, allow_none: bool = False,
              allow_integral_float: bool = False) -> Optional[int]:
    """Returns `value` as a Python int after checking its type and bounds.

    Args:
        value: the integer to check.
        name: argument name used in the error message.
        minimum: if given, the smallest allowed value.
        maximum: if given, the largest allowed value.
        allow_none: if True, None is accepted and returned.
        allow_integral_float: if True, floats with an integral value (e.g. 10.0) count
            as integers.

    Returns:
        value as a Python int (or None, when allowed and given).

    Raises:
        ValueError: naming `name`, if value is a bool, not an integer, or out of bounds.
    """
    if value is None and allow_none:
        return None
    lower = "" if minimum is None else f" >= {minimum}"
    upper = "" if maximum is None else f" <= {maximum}"
    wanted = f"an integer{lower}{' and' if lower and upper else ''}{upper}"
    if allow_none:
        wanted += " or None"
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be {wanted}, got {value!r}")
    if isinstance(value, (int, np.integer)):
        out = int(value)
    elif (allow_integral_float and isinstance(value, (float, np.floating))
          and math.isfinite(value) and float(value).is_integer()):
        out = int(value)
    else:
        raise ValueError(f"{name} must be {wanted}, got {value!r}")
    if (minimum is not None and out < minimum) or (maximum is not None and out > maximum):
        raise ValueError(f"{name} must be {wanted}, got {value!r}")
    return out


def check_positive_int(value: Any, name: str, *, allow_none: bool = False,
                       allow_integral_float: bool = False) -> Optional[int]:
    """Returns `value` as a Python int after checking it is an integer >= 1.

    Args:
        value: the integer to check.
        name: argument name used in the error message.
        allow_none: if True, None is accepted and returned.
        allow_integral_float: if True, floats with an integral value (e.g. 10.0) count
            as integers.

    Raises:
        ValueError: naming `name`, if value is a bool, not an integer, or < 1.
    """
    return check_int(value, name, minimum=1, allow_none=allow_none,
                     allow_integral_float=allow_integral_float)


def check_seed(value: Any, name: str = "seed", *,
               maximum: Optional[int] = None) -> Optional[int]:
    """Returns a seed as a Python int (None passes through) after checking it is >= 0.

    Args:
        value: None or a non-negative integer.
        name: argument name used in the error message.
        maximum: if given, the largest allowed seed.

    Raises:
        ValueError: naming `name`, if value is neither None nor an integer in range.
    """
    return check_int(value, name, minimum=0, maximum=maximum, allow_none=True)


def check_interval(value: Any, name: str) -> tuple[float, float]:
    """Returns a pair (low, high) of finite floats after checking low < high.

    Args:
        value: a sequence of exactly two numbers.
        name: argument name used in the error message.

    Returns:
        (low, high) as Python floats.

    Raises:
        ValueError: naming `name`, if value is not a pair of finite numbers with low < high.
    """
    try:
        low, high = value
        low = as_float(low, name, allow_nonfinite=True)
        high = as_float(high, name, allow_nonfinite=True)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (low, high) of numbers, got "
                         f"{value!r}") from None
    if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
        raise ValueError(f"{name} must be finite with low < high, got {value!r}")
    return low, high


def check_nonnegative_array(value: Any, name: str, *, allow_empty: bool = True) -> np.ndarray:
    """Returns `value` as a float64 array after checking every entry is finite and >= 0.

    Args:
        value: a number or a numeric array.
        name: argument name used in the error message.
        allow_empty: if False, an array without entries is rejected.

    Returns:
        value as a float64 numpy array.

    Raises:
        ValueError: naming `name`, if value is not numeric, is empty (when not allowed),
            or has a negative, NaN or infinite entry.
    """
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a number or a numeric array, got {value!r}") from e
    if not allow_empty and arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0.0):
        raise ValueError(f"{name} must be finite and >= 0 everywhere")
    return arr


def check_choice(value: Any, name: str, choices: Sequence[Any]) -> Any:
    """Returns `value` after checking it is one of `choices`.

    Args:
        value: the option given.
        name: argument name used in the error message.
        choices: the allowed values.

    Returns:
        value, unchanged.

    Raises:
        ValueError: naming `name`, if value is not one of choices.
    """
    try:
        ok = value in choices
    except TypeError:  # unhashable value tested against a set
        ok = False
    if not ok:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_rng(value: Any, name: str = "rng") -> np.random.Generator:
    """Returns `value` after checking it is a numpy Generator.

    Args:
        value: the random generator given.
        name: argument name used in the error message.

    Returns:
        value, unchanged.

    Raises:
        ValueError: naming `name`, if value is not a np.random.Generator.
    """
    if not isinstance(value, np.random.Generator):
        raise ValueError(
            f"{name} must be a numpy.random.Generator (e.g. np.random.default_rng(seed)), "
            f"got {type(value).__name__}")
    return value


def check_shape(value: Any, name: str, *, rank: Optional[int] = None) -> tuple[int, ...]:
    """Returns a shape as a tuple of ints after checking every dimension is >= 1.

    Args:
        value: a sequence of dimensions (e.g. an input shape without the batch axis).
        name: argument name used in the error message.
        rank: if given, the required number of dimensions.

    Returns:
        the shape as a tuple of Python ints.

    Raises:
        ValueError: naming `name`, if value is not a non-empty sequence of integers >= 1
            (of length `rank`, when given).
    """
    wanted = "positive integer dimensions" + ("" if rank is None else f" ({rank} of them)")
    try:
        dims = [check_int(d, name, minimum=1, allow_integral_float=True) for d in value]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must have {wanted}, got {value!r}") from None
    if not dims or (rank is not None and len(dims) != rank):
        raise ValueError(f"{name} must have {wanted}, got {value!r}")
    return tuple(dims)
