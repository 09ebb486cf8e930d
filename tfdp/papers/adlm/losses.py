"""AdLM's Taylor-expanded loss, its functional-mechanism perturbation and sensitivity."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp import checks, losses, mechanisms

# AdLM functional-mechanism modes (Alg. 1 l.16-19; docs/adlm.md, --adlm_fm_mode).
FM_MODES = ("per_example_label_only", "per_example_all_orders", "ref_code")


# ----------------------------------------------------------------------------- sensitivities


def adlm_delta_f(*, num_classes: int, hidden_units: int, output_bias: bool = False) -> float:
    """AdLM functional-mechanism sensitivity Delta_F = M (|h| + |h|^2 / 4) (Lemma 5).

    Args:
        num_classes: M >= 1.
        hidden_units: |h_(k)|, width of the last hidden layer (bounded to [0, 1] or [-1, 1]).
        output_bias: if True the bias counts as one more hidden unit fixed at 1 (not in the paper).

    Returns:
        Delta_F as a float64 (1812.5 for M = 10, |h| = 25; 2550 for |h| = 30).

    Raises:
        ValueError: if num_classes or hidden_units is not an int >= 1.
    """
    m = checks.check_positive_int(num_classes, "num_classes")
    h = checks.check_positive_int(hidden_units, "hidden_units") + (1 if output_bias else 0)
    return float(m) * (float(h) + float(h) ** 2 / 4.0)  # AdLM Lemma 5, float arithmetic


def adlm_taylor_error_bound(num_classes: int) -> float:
    """AdLM Lemma 7 bound M (e^2 + 2e - 1) / (e (1 + e)^2) on the Taylor truncation error.

    Args:
        num_classes: M >= 1.

    Returns:
        The bound (0.3146623778... * M).

    Raises:
        ValueError: if num_classes is not an int >= 1.
    """
    m = checks.check_positive_int(num_classes, "num_classes")
    e = math.e
    return m * (e * e + 2.0 * e - 1.0) / (e * (1.0 + e) ** 2)  # AdLM Lemma 7 / App. F


# ----------------------------------------------------------------------------- Taylor loss


def adlm_taylor_coefficients(labels: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact coefficients of AdLM's second-order Taylor loss (Eq. 25).

    Per record i and class l: phi0 = log 2, phi1 = 1/2 - y_il, phi2 = 1/8, so the loss is
    sum_l phi0 + phi1 z_il + phi2 z_il^2.

    Args:
        labels: one-hot labels [n, M].

    Returns:
        (phi0, phi1, phi2), each a float64 array [n, M].

    Raises:
        ValueError: if labels is not a one-hot [n, M] array.
    """
    y = losses.check_onehot(labels)
    return (np.full_like(y, losses.LOG2), 0.5 - y, np.full_like(y, 0.125))  # AdLM Eq. 25


def adlm_perturb_coefficients(
        labels: Any, *, delta_f: float, epsilon3: float, batch_size: int,
        mode: str = "per_example_label_only",
        rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Functional-mechanism perturbation of the Taylor coefficients (AdLM Alg. 1 l.16-19).

    The noise is drawn once, before training; reuse the returned arrays in every epoch.

    phibar = phi + Lap(Delta_F / eps3) / |L| per (record, class) and order (AdLM Alg. 1 l.16-19).

    * "per_example_label_only": only phi1 (the label-dependent order) is perturbed.
    * "per_example_all_orders": all three orders, then phibar2 is clamped at >= 0
      (post-processing; keeps the loss bounded below).

    For fm_mode "ref_code" use `tfdp.losses.draw_fm_noise` and `functional_mechanism_term`.

    Args:
        labels: one-hot labels [n, M] of the whole training set.
        delta_f: Delta_F (see `adlm_delta_f`).
        epsilon3: budget eps3 > 0.
        batch_size: |L| >= 1.
        mode: "per_example_label_only" or "per_example_all_orders".
        rng: numpy Generator supplying the noise.

    Returns:
        (phi0bar, phi1bar, phi2bar), float64 arrays [n, M].

    Raises:
        ValueError: on a bad argument, naming it.
    """
    y = losses.check_onehot(labels)
    if mode not in FM_MODES[:2]:
        raise ValueError(f"mode must be one of {FM_MODES[:2]}, got {mode!r}")
    batch = checks.check_positive_int(batch_size, "batch_size")
    scale = mechanisms.laplace_scale(epsilon=epsilon3, sensitivity=delta_f) / batch  # AdLM Alg. 1
    phi0, phi1, phi2 = adlm_taylor_coefficients(y)
    phi1 = phi1 + mechanisms.sample_laplace(scale, y.shape, rng=rng)
    if mode == "per_example_all_orders":
        phi0 = phi0 + mechanisms.sample_laplace(scale, y.shape, rng=rng)
        phi2 = np.maximum(phi2 + mechanisms.sample_laplace(scale, y.shape, rng=rng), 0.0)
    return phi0, phi1, phi2


def adlm_taylor_loss(logits: Any, labels: Any = None, *, phi0: Any = None, phi1: Any = None,
                     phi2: Any = None, reduction: str = "mean") -> tf.Tensor:
    """AdLM's Taylor-approximated per-class sigmoid cross-entropy (Eq. 25 / App. E).

    Per example: sum_l phi0_l + phi1_l z_l + phi2_l z_l^2. Without coefficients the exact
    ones are used (log 2, 1/2 - y, 1/8); pass perturbed per-example coefficients (rows of
    `adlm_perturb_coefficients`) to get the functional-mechanism loss Fbar. The batch mean
    is the default (AdLM Alg. 1 l.29).

    Args:
        logits: z, shape [batch, M] (output layer without softmax, AdLM Eq. 23).
        labels: one-hot [batch, M]; needed when phi1 is not given.
        phi0: optional coefficients [batch, M] (or broadcastable); default log 2.
        phi1: optional coefficients [batch, M]; default 1/2 - labels.
        phi2: optional coefficients [batch, M] (or broadcastable); default 1/8.
        reduction: "mean" (over the batch), "sum" or "none" (per-example vector).

    Returns:
        The loss tensor (scalar, or [batch] for "none").

    Raises:
        ValueError: if neither labels nor phi1 is given, shapes differ, or reduction is bad.
    """
    reduction = checks.check_choice(reduction, "reduction", losses.REDUCTIONS)
    z = tf.convert_to_tensor(logits)
    if phi1 is None:
        if labels is None:
            raise ValueError("labels must be given when phi1 is not")
        y = tf.cast(tf.convert_to_tensor(labels), z.dtype)
        losses.check_same_shape(z, y, "logits", "labels")
        phi1 = 0.5 - y  # AdLM Eq. 25: f1'(0) + f2'(0) = 1/2 - y
    phi1 = tf.cast(tf.convert_to_tensor(phi1), z.dtype)
    losses.check_same_shape(z, phi1, "logits", "phi1")
    phi0 = tf.constant(losses.LOG2, z.dtype) if phi0 is None else tf.cast(phi0, z.dtype)
    phi2 = tf.constant(0.125, z.dtype) if phi2 is None else tf.cast(phi2, z.dtype)
    per_class = phi0 + phi1 * z + phi2 * tf.square(z)  # AdLM Eq. 25
    return losses.reduce_per_example(tf.reduce_sum(per_class, axis=-1), reduction)
