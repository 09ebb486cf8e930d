"""Checks of the noise layers' arguments (a clear error naming the argument)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from tfdp import checks


def _check_nonneg_float(value: Any, name: str, *, positive: bool = False) -> float:
    return checks.check_finite(value, name, minimum=0.0, strict=positive)


def _check_scale(scale: Any, name: str, allow_zero: Any = False) -> np.ndarray:
    """A noise scale as float64: numbers or numeric arrays only (no strings or bools).

    The calibrators of tfdp.mechanisms accept the same types; a zero entry is refused unless
    `allow_zero` (a non-private ablation) is set explicitly.
    """
    if isinstance(scale, (bool, np.bool_, str, bytes)):
        raise ValueError(f"{name} must be a number or a numeric array, got {scale!r}")
    if isinstance(scale, (np.ndarray, list, tuple)):
        kind = np.asarray(scale).dtype.kind
        if kind not in "iuf":
            raise ValueError(f"{name} must be a number or a numeric array, got an array of "
                             f"dtype {np.asarray(scale).dtype}")
    arr = checks.check_nonnegative_array(scale, name, allow_empty=False)
    if not _check_allow_zero(allow_zero) and np.any(arr == 0.0):
        raise ValueError(f"{name} has a zero entry: the layer would add no noise there; pass "
                         f"allow_zero=True for a deliberate non-private ablation")
    return arr


def _check_allow_zero(allow_zero: Any) -> bool:
    if not isinstance(allow_zero, (bool, np.bool_)):
        raise ValueError(f"allow_zero must be a bool, got {allow_zero!r}")
    return bool(allow_zero)


def _check_float32_scale(scale: np.ndarray, name: str, allow_zero: bool) -> None:
    """Refuses a final noise scale that overflows float32, or underflows to 0 there.

    The noise is added in the input's precision (float32); a scale that is 0 or inf in
    float32 would silently add no noise or destroy the signal.

    Raises:
        ValueError: naming `name`.
    """
    with np.errstate(over="ignore", under="ignore"):
        s32 = scale.astype(np.float32)
    if not np.all(np.isfinite(s32)):
        raise ValueError(f"{name}: the noise scale overflows float32 (largest "
                         f"{float(np.max(scale)):g}, after batch_divisor)")
    if not allow_zero and np.any(s32 == 0.0):
        raise ValueError(f"{name}: the noise scale underflows to 0 in float32 (smallest "
                         f"{float(np.min(scale)):g}, after batch_divisor); pass "
                         f"allow_zero=True for a deliberate non-private ablation")


def _check_shared_axes(shared_axes: Any) -> tuple[int, ...]:
    if shared_axes is None:
        return ()
    if isinstance(shared_axes, (int, np.integer)):
        shared_axes = (shared_axes,)
    try:
        axes = tuple(int(a) for a in shared_axes)
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"shared_axes must be an int or a sequence of ints, got {shared_axes!r}") from e
    if any(a < 1 for a in axes) or len(set(axes)) != len(axes):
        raise ValueError(
            f"shared_axes must be distinct feature axes >= 1 (axis 0 is the batch), "
            f"got {shared_axes!r}")
    return tuple(sorted(axes))


def _check_bounds(bounds: Any) -> Optional[tuple[float, float]]:
    if bounds is None:
        return None
    return checks.check_interval(bounds, "input_bounds")
