"""AdLM's adaptive per-feature Laplace budgets: relevance sensitivity, weights, scales."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from tfdp import checks
from tfdp.mechanisms import _validate


def adlm_relevance_sensitivity(*, num_features: int, num_examples: int) -> float:
    """Delta_R = 2 d / |D| of the averaged relevance (AdLM Lemma 1).

    Args:
        num_features: d, the number of input features the relevance covers.
        num_examples: |D|, the number of records averaged (must be the real count).

    Returns:
        Delta_R (float64).

    Raises:
        ValueError: if either count is not a positive integer.
    """
    d = checks.check_positive_int(num_features, "num_features")
    n = checks.check_positive_int(num_examples, "num_examples")
    return 2.0 * d / n  # AdLM Lemma 1


def adaptive_budget_weights(relevance: Any, *, floor: float) -> np.ndarray:
    """beta_j = d * max(|R_j|, floor) / sum_k max(|R_k|, floor) (AdLM Eq. 16 with a floor).

    The floor is applied before normalising, so sum_j beta_j = d exactly and every
    beta_j > 0 (the per-feature budget is eps_j = beta_j * eps2).

    Args:
        relevance: the (noisy) average relevance Rbar, any shape, d = size.
        floor: r_min > 0 (ref code: 1e-5 MNIST, 1e-2 CIFAR-10).

    Returns:
        beta as float64 array of relevance's shape (mean 1).

    Raises:
        ValueError: on non-finite relevance, empty relevance, or floor <= 0.
    """
    try:
        rel = np.asarray(relevance, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError("relevance must be a numeric array") from e
    if rel.size == 0 or not np.all(np.isfinite(rel)):
        raise ValueError("relevance must be a non-empty finite array")
    fl = _validate.check_positive(floor, "floor")
    r = np.maximum(np.abs(rel), fl)  # floor before normalising (docs/adlm.md)
    return rel.size * r / np.sum(r)  # AdLM Eq. 16


def adlm_feature_noise_scales(*, sensitivity: float, epsilon: float, beta: Any,
                              batch_size: Optional[int] = None,
                              allow_zero: bool = False) -> np.ndarray:
    """Per-feature Laplace scales Delta_h0 / (beta_j eps2), divided by |L| when given.

    AdLM Algorithm 1 lines 12-14: xbar_ij = x_ij + Lap(Delta_h0 / eps_j) / |L| with
    eps_j = beta_j eps2.

    Args:
        sensitivity: Delta_h0 >= 0.
        epsilon: eps2 > 0.
        beta: adaptive weights (all > 0); 1 everywhere gives ILM.
        batch_size: |L| for per-example noise; None gives the batch-level scale.

    Returns:
        float64 array of beta's shape.

    Raises:
        ValueError: on invalid arguments, a zero sensitivity without allow_zero, or a
            scale that is 0, inf or underflows in float32.
    """
    sens = _validate.check_calibration_sensitivity(sensitivity, allow_zero)
    eps = _validate.check_epsilon(epsilon)
    b = _validate.check_scale_array(beta, "beta")
    if b.size == 0 or np.any(b <= 0.0):
        raise ValueError("beta must be non-empty and > 0 everywhere")
    scales = sens / (b * eps)  # AdLM Alg. 1 line 12, Lap(Delta_h0 / eps_j)
    if batch_size is not None:
        scales = scales / checks.check_positive_int(batch_size, "batch_size")
    return _validate.check_noise_scale(scales, allow_zero, "scales")
