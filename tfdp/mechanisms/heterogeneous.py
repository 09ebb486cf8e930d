"""HGM noise redistribution: the vector r, r-weighted sensitivities, per-coordinate stds."""

from __future__ import annotations

from typing import Any

import numpy as np

from tfdp.mechanisms import _validate

# Tolerance on sum(r) == 1 accepted by the validators (tfdp's choice).
R_SUM_TOLERANCE = 1e-6

_BOUNDS = ("max", "sum", "per_map")


def check_redistribution(r: Any, name: str = "r") -> np.ndarray:
    """Checks that r is a redistribution vector: finite, every r_k > 0, sum 1 (+-1e-6).

    HGM Theorem 3 needs 0 <= r_k <= 1 and sum r = 1; tfdp further requires
    r_k > 0 (a zero entry makes the r-weighted sensitivity infinite).

    Args:
        r: array of any shape (K = r.size coordinates).
        name: argument name for the error message.

    Returns:
        r as a float64 array of the same shape.

    Raises:
        ValueError: if r is empty, non-finite, has an entry <= 0, or does not sum to 1.
    """
    try:
        arr = np.asarray(r, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a numeric array") from e
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    if np.any(arr <= 0.0):
        raise ValueError(f"{name} must be strictly positive "
                         "(floor it with redistribution_from_scores)")
    total = float(np.sum(arr))
    if abs(total - 1.0) > R_SUM_TOLERANCE:
        raise ValueError(f"{name} must sum to 1 (a distribution), got sum {total!r}")
    return arr


def uniform_redistribution(shape: Any) -> np.ndarray:
    """The uniform r = 1/K of the given shape (HGM reduces to its Theorem 2 mechanism).

    Raises:
        ValueError: if the shape has no elements or a negative dimension.
    """
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    shape = tuple(int(d) for d in shape)
    size = int(np.prod(shape)) if shape else 1
    if size <= 0 or any(d < 0 for d in shape):
        raise ValueError(f"shape must have at least one element, got {shape}")
    return np.full(shape, 1.0 / size, dtype=np.float64)


def heterogeneous_stddevs(*, sigma: float, r: Any) -> np.ndarray:
    """Per-coordinate standard deviations sigma * sqrt(K r_k) of HGM (Theorem 3).

    Args:
        sigma: HGM sigma (e.g. from hgm_sigma with the r-weighted sensitivity), >= 0.
        r: redistribution vector, any shape, K = r.size.

    Returns:
        float64 array of r's shape. The total variance is K sigma^2 whatever r is.

    Raises:
        ValueError: if sigma is negative/non-finite or r is not a valid distribution.
    """
    sig = _validate.check_sensitivity(sigma, "sigma")
    arr = check_redistribution(r)
    return sig * np.sqrt(arr.size * arr)  # HGM Theorem 3: z_k ~ N(0, sigma^2 K r_k)


def weighted_sensitivity(diff: Any, r: Any) -> float:
    """The r-weighted l2 sensitivity max ||diff / sqrt(K r)||_2 (HGM Theorem 3).

    Args:
        diff: A(D) - A(D') for one neighbouring pair (shape of r), or a batch of such
            differences (shape [..., *r.shape]); the maximum over the batch is returned.
        r: redistribution vector, K = r.size.

    Returns:
        The weighted sensitivity (float64). With uniform r it is the plain l2 norm.

    Raises:
        ValueError: if r is invalid or diff's trailing shape is not r's shape.
    """
    arr = check_redistribution(r)
    try:
        d = np.asarray(diff, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError("diff must be a numeric array") from e
    if d.ndim < arr.ndim or d.shape[d.ndim - arr.ndim:] != arr.shape:
        raise ValueError(f"diff must have shape {arr.shape} or [..., *{arr.shape}], got {d.shape}")
    if not np.all(np.isfinite(d)):
        raise ValueError("diff must be finite")
    lead = d.shape[:d.ndim - arr.ndim]
    flat = d.reshape((int(np.prod(lead)) if lead else 1, arr.size))
    norms = np.sqrt(np.sum(flat ** 2 / (arr.size * arr.reshape(-1)), axis=1))  # HGM Theorem 3
    return float(np.max(norms))


def layer_sensitivity(*, unit_l1_norms: Any, r: Any, bound: str = "max") -> float:
    """l_inf -> r-weighted l2 sensitivity of an affine layer, per unit of input change.

    unit_l1_norms[k] = ||w_k||_1, the l1 norm of the weights feeding unit k (for a conv
    layer, the kernel of unit k's channel). HGM Eq. 6:

    - "max" (a, paper form with the square root of K r restored): max_k ||w_k||_1 / sqrt(r_k);
    - "sum" (b, tighter, still sound): sqrt(sum_k ||w_k||_1^2 / (K r_k));
    - "per_map" (c, as published for conv layers; NOT sound for l_inf attacks, an
      ablation only): max_c sqrt(sum_p ||W_c||_1^2 / (K r_(p,c))), channel = last axis.

    Args:
        unit_l1_norms: array of r's shape, entries >= 0.
        r: redistribution vector.
        bound: "max", "sum" or "per_map".

    Returns:
        The sensitivity Delta_f (float64).

    Raises:
        ValueError: on invalid bound, r, or shapes.
    """
    if bound not in _BOUNDS:
        raise ValueError(f"bound must be one of {_BOUNDS}, got {bound!r}")
    arr = check_redistribution(r)
    w = _validate.check_scale_array(unit_l1_norms, "unit_l1_norms")
    if w.shape != arr.shape:
        raise ValueError(f"unit_l1_norms must have r's shape {arr.shape}, got {w.shape}")
    k = arr.size
    if bound == "max":
        return float(np.max(w / np.sqrt(arr)))  # HGM Eq. 6, sqrt(K r) restored
    terms = w ** 2 / (k * arr)
    if bound == "sum":
        return float(np.sqrt(np.sum(terms)))  # HGM Eq. 6, bound (b)
    if arr.ndim < 2:
        raise ValueError("bound='per_map' needs r with a channel (last) axis and >= 2 dims")
    per_map = np.sqrt(np.sum(terms.reshape(-1, arr.shape[-1]), axis=0))
    return float(np.max(per_map))  # HGM per feature map, as published


def redistribution_from_scores(scores: Any, *, floor: float = 0.01, mix: float = 0.0) -> np.ndarray:
    """Builds r from non-negative scores with mixing and a floor (HGM Eq. 7; docs/hgm.md).

    r = scores / sum(scores) (Eq. 7); r <- (1 - mix) r + mix / K; r <- max(r, floor / K);
    r <- r / sum(r). After the renormalisation min r >= floor / ((1 + floor) K) > 0.

    Args:
        scores: s_k >= 0 (e.g. mean |d loss / d h1_k|^beta), any shape, not all zero.
        floor: relative floor in [0, 1); 0 disables it (then every score must be > 0
            after mixing).
        mix: weight of the uniform vector, in [0, 1].

    Returns:
        r as float64 array of scores' shape, every entry > 0, summing to 1.

    Raises:
        ValueError: on negative/non-finite/all-zero scores, floor or mix out of range,
            or zero entries left with floor = 0 and mix = 0.
    """
    s = _validate.check_scale_array(scores, "scores")
    if s.size == 0:
        raise ValueError("scores must not be empty")
    fl = _validate.as_float(floor, "floor")
    if not (0.0 <= fl < 1.0):
        raise ValueError(f"floor must lie in [0, 1), got {floor!r}")
    mx = _validate.as_float(mix, "mix")
    if not (0.0 <= mx <= 1.0):
        raise ValueError(f"mix must lie in [0, 1], got {mix!r}")
    total = float(np.sum(s))
    if total <= 0.0:
        raise ValueError("scores must not all be zero")
    k = s.size
    r = s / total  # HGM Eq. 7
    r = (1.0 - mx) * r + mx / k  # mixing (tfdp's choice)
    r = np.maximum(r, fl / k)  # floor (tfdp's choice)
    if np.any(r <= 0.0):
        raise ValueError("scores has zero entries: use floor > 0 or mix > 0")
    return r / np.sum(r)
