"""AdLM's adaptive per-feature Laplace budgets: relevance sensitivity, weights, scales."""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from tfdp import checks
from tfdp.mechanisms import _validate

# Presets of Delta_h0, the first affine layer's sensitivity (`delta_h0`).
DELTA_H0_PRESETS = ("paper_fc", "conv_fanin", "ref_code")


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


def delta_h0(preset: str | float, *, architecture: str, input_shape: tuple[int, ...],
             crop: int = 20) -> float:
    """Sensitivity Delta_h0 of the first affine layer (AdLM Lemma 3; presets in docs/adlm.md).

    Args:
        preset: "paper_fc" (2 |h0| d, |h0| = all first-layer output units), "conv_fanin"
            (2 * sum of the first-layer neurons' fan-ins), "ref_code" (code-release
            constants: MNIST 2*14*14*5*5 = 9800, CIFAR-10 2*3*10*10*3*3 = 5400) or a number.
        architecture: "mnist" or "cifar10" (the first layer of tfdp.papers.adlm.models).
        input_shape: (H, W, C) of the data.
        crop: CIFAR-10 crop size (the first layer sees crop x crop inputs).

    Returns:
        Delta_h0 as a float.

    Raises:
        ValueError: on an unknown preset or a number that is not finite and > 0.
    """
    h, w, c = (int(v) for v in input_shape)
    if not isinstance(preset, str):
        value = float(preset)
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"adlm_delta_h0 must be a preset or a number > 0, got {preset!r}")
        return value
    if preset not in DELTA_H0_PRESETS:
        try:
            return delta_h0(float(preset), architecture=architecture, input_shape=input_shape)
        except ValueError:
            raise ValueError(f"adlm_delta_h0 must be one of {DELTA_H0_PRESETS} or a number "
                             f"> 0, got {preset!r}") from None
    if architecture == "cifar10":
        s = int(crop)
        filters, k, h_out, w_out, d = 128, 3, (s + 1) // 2, (s + 1) // 2, s * s * c
    else:
        filters, k, h_out, w_out, d = 32, 5, h, w, h * w * c
    if preset == "paper_fc":
        return 2.0 * filters * h_out * w_out * d  # AdLM Lemma 3: 2 |h0| d
    if preset == "conv_fanin":
        return 2.0 * filters * h_out * w_out * k * k * c  # tfdp: 2 * sum of fan-ins
    if architecture == "cifar10":
        return 2.0 * c * h_out * w_out * k * k  # AdLM code release (CIFAR): 2*3*10*10*3*3
    return 2.0 * (h // 2) * (w // 2) * k * k  # AdLM code release (MNIST): 2*14*14*5*5


def per_record_epsilon_inputs(*, batch_size: int, eps_j_sum: float, feature_range: float,
                              delta_h0_value: float) -> float:
    """Per-record bound of per_example_fixed input noise (docs/adlm.md, "Privacy ledger").

    A record's noisy copy has noise Lap(Delta_h0/eps_j)/|L| per feature, so its privacy loss
    is at most |L| * sum_j eps_j * max|x_ij - x'_ij| / Delta_h0.

    Returns:
        The bound (10.8 for the MNIST code-release configuration).
    """
    return batch_size * eps_j_sum * feature_range / delta_h0_value


def per_record_epsilon_labels(*, batch_size: int, eps3: float, delta_f: float) -> float:
    """Per-record bound of per-example FM noise on phi1: 2 |L| eps3 / Delta_F (docs/adlm.md)."""
    return 2.0 * batch_size * eps3 / delta_f  # a label change moves 2 classes by 1
