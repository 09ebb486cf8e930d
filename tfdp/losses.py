"""Taylor-expanded losses, functional-mechanism perturbation and sensitivities (AdLM, StoBatch)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp import checks, mechanisms

LOG2 = math.log(2.0)

# AdLM functional-mechanism modes (Alg. 1 l.16-19; docs/adlm.md, --adlm_fm_mode).
FM_MODES = ("per_example_label_only", "per_example_all_orders", "ref_code")
# Output-noise term forms (StoBatch Thm 3: linear; its code: abs_mean); AdLM ref_code uses
# "linear" (MNIST) / "abs_mean" (CIFAR).
NOISE_TERM_MODES = ("linear", "abs_mean")
_REDUCTIONS = ("mean", "sum", "none")


# ----------------------------------------------------------------------------- validation


def _check_onehot_np(labels: Any, name: str = "labels") -> np.ndarray:
    try:
        y = np.asarray(labels, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a numeric [batch, classes] array") from e
    if y.ndim != 2:
        raise ValueError(f"{name} must have shape [batch, classes], got {y.shape}")
    if not np.all((y == 0.0) | (y == 1.0)):
        raise ValueError(f"{name} must be one-hot (entries 0 or 1)")
    return y


def _check_same_shape(a: tf.Tensor, b: tf.Tensor, name_a: str, name_b: str) -> None:
    if a.shape.rank is not None and b.shape.rank is not None and \
            not a.shape.is_compatible_with(b.shape):
        raise ValueError(f"{name_a} of shape {a.shape} and {name_b} of shape {b.shape} differ")


def _reduce(per_example: tf.Tensor, reduction: str) -> tf.Tensor:
    if reduction == "mean":
        return tf.reduce_mean(per_example)
    if reduction == "sum":
        return tf.reduce_sum(per_example)
    return per_example


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


def stobatch_delta_r(*, fan_in: int, beta: int) -> float:
    """StoBatch auto-encoder sensitivity Delta_R = d (beta + 2) (Lemma 2, Eq. 18).

    Args:
        fan_in: d, fan-in of one h1 neuron (k*k*C_in for a conv layer; StoBatch Lemma 2).
        beta: number of h1 neurons (for a conv layer: neurons of ONE feature map, App. P).

    Returns:
        Delta_R (4950 for MNIST (25, 196); 9504 for CIFAR-10 (48, 196)).

    Raises:
        ValueError: if fan_in or beta is not an int >= 1.
    """
    d = checks.check_positive_int(fan_in, "fan_in")
    b = checks.check_positive_int(beta, "beta")
    return float(d) * (float(b) + 2.0)  # StoBatch Lemma 2


def stobatch_delta_l2(*, hidden_units: int, output_bias: bool = False) -> float:
    """StoBatch output-coefficient sensitivity Delta_L2 = 2 |h_pi| (Lemma 4).

    Args:
        hidden_units: |h_pi| (h_pi bounded to [-1, 1]).
        output_bias: if True the bias is a constant-1 unit: 2 (|h_pi| + 1) (not in the paper).

    Returns:
        Delta_L2 (512 for |h_pi| = 256).

    Raises:
        ValueError: if hidden_units is not an int >= 1.
    """
    h = checks.check_positive_int(hidden_units, "hidden_units") + (1 if output_bias else 0)
    return 2.0 * float(h)  # StoBatch Lemma 4


# ----------------------------------------------------------------------------- AdLM loss


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
    y = _check_onehot_np(labels)
    return (np.full_like(y, LOG2), 0.5 - y, np.full_like(y, 0.125))  # AdLM Eq. 25


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

    For fm_mode "ref_code" use `draw_fm_noise` and `functional_mechanism_term` instead.

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
    y = _check_onehot_np(labels)
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
    reduction = checks.check_choice(reduction, "reduction", _REDUCTIONS)
    z = tf.convert_to_tensor(logits)
    if phi1 is None:
        if labels is None:
            raise ValueError("labels must be given when phi1 is not")
        y = tf.cast(tf.convert_to_tensor(labels), z.dtype)
        _check_same_shape(z, y, "logits", "labels")
        phi1 = 0.5 - y  # AdLM Eq. 25: f1'(0) + f2'(0) = 1/2 - y
    phi1 = tf.cast(tf.convert_to_tensor(phi1), z.dtype)
    _check_same_shape(z, phi1, "logits", "phi1")
    phi0 = tf.constant(LOG2, z.dtype) if phi0 is None else tf.cast(phi0, z.dtype)
    phi2 = tf.constant(0.125, z.dtype) if phi2 is None else tf.cast(phi2, z.dtype)
    per_class = phi0 + phi1 * z + phi2 * tf.square(z)  # AdLM Eq. 25
    return _reduce(tf.reduce_sum(per_class, axis=-1), reduction)


# ----------------------------------------------------------------------------- noise terms


def draw_fm_noise(shape: Any, *, sensitivity: float, epsilon: float,
                  rng: np.random.Generator) -> np.ndarray:
    """One functional-mechanism noise draw Lap(sensitivity / epsilon), e.g. StoBatch's chi3.

    StoBatch Alg. 1 line 1: chi3 ~ Lap(Delta_L2 / eps2)^{|h_pi| x K}; AdLM ref_code: a [|h|, M]
    matrix Lap(Delta_F / eps3). Store it (e.g. in a non-trainable variable) and reuse it
    for the whole run.

    Args:
        shape: output shape, e.g. (hidden_units, num_classes).
        sensitivity: l1 sensitivity (Delta_L2 or Delta_F).
        epsilon: budget > 0.
        rng: numpy Generator.

    Returns:
        float64 array of `shape`.

    Raises:
        ValueError: on a bad argument.
    """
    scale = mechanisms.laplace_scale(epsilon=epsilon, sensitivity=sensitivity)
    return mechanisms.sample_laplace(scale, shape, rng=rng)


def functional_mechanism_term(noise: Any, kernel: Any, *, divisor: float,
                              mode: str = "linear", per_replica: bool = False) -> tf.Tensor:
    """Data-independent loss term that realises output-layer functional-mechanism noise.

    Perturbing the label coefficients h y_k by noise/m on each of m examples adds, to the
    batch-MEAN loss, the linear term -(1/m) sum_k noise[:, k] . W[:, k] (StoBatch Thm 3;
    AdLM ref_code with m = |L|). "abs_mean" is the code's CIFAR form
    mean(|noise/m * W|) (StoBatch code release). Its gradient w.r.t. W in "linear" mode is exactly
    -noise/m.

    Under a tf.distribute strategy with a SUM all-reduce of gradients the term must enter
    the global objective once (docs/stobatch.md, "Distribution"): pass per_replica=True in replica
    context, which divides it by the number of replicas.

    Args:
        noise: the once-drawn noise, shape of kernel ([hidden, classes]).
        kernel: output-layer weights W.
        divisor: m (StoBatch) or |L| (AdLM), > 0.
        mode: "linear" (paper) or "abs_mean" (reference CIFAR code).
        per_replica: divide by num_replicas_in_sync of the current replica context.

    Returns:
        Scalar tensor to add to the batch-mean loss.

    Raises:
        ValueError: on a bad mode or divisor, or mismatched shapes.
    """
    if mode not in NOISE_TERM_MODES:
        raise ValueError(f"mode must be one of {NOISE_TERM_MODES}, got {mode!r}")
    m = checks.check_positive(divisor, "divisor")
    w = tf.convert_to_tensor(kernel)
    n = tf.cast(tf.convert_to_tensor(noise), w.dtype)
    _check_same_shape(n, w, "noise", "kernel")
    if mode == "linear":
        term = -tf.reduce_sum(n * w) / m  # StoBatch Thm 3: -(1/m) sum_k chi3[:,k] . W[:,k]
    else:
        term = tf.reduce_mean(tf.abs(n / m * w))  # StoBatch CIFAR-10 code: mean(|chi3/m o W|)
    if per_replica:
        ctx = tf.distribute.get_replica_context()
        if ctx is not None and ctx.num_replicas_in_sync > 1:
            term = term / tf.cast(ctx.num_replicas_in_sync, term.dtype)
    return term


# ----------------------------------------------------------------------------- StoBatch losses


def stobatch_reconstruction_loss(logits: Any, x_bar: Any, *, absolute: bool = True,
                                 reduction: str = "sum") -> tf.Tensor:
    """StoBatch's first-order Taylor auto-encoder reconstruction loss (Eq. 6).

    Per element log 2 + z (1/2 - x_bar), with z the decoder's reconstruction logits and
    x_bar the perturbed input. With `absolute` (default, the only version known to train;
    StoBatch code release) each element is |log 2 + z (1/2 - x_bar)|, the code's
    |max(z,0) - z x_bar + log 2 - |z|/2|.

    Args:
        logits: reconstruction logits z, same shape as x_bar ([batch, ...]).
        x_bar: perturbed inputs.
        absolute: take the per-element absolute value.
        reduction: "sum" (over everything, default), "mean" (sum per example, then mean
            over the batch) or "none" (per-example sums, [batch]).

    Returns:
        The loss tensor.

    Raises:
        ValueError: on mismatched shapes or a bad reduction.
    """
    reduction = checks.check_choice(reduction, "reduction", _REDUCTIONS)
    z = tf.convert_to_tensor(logits)
    x = tf.cast(tf.convert_to_tensor(x_bar), z.dtype)
    _check_same_shape(z, x, "logits", "x_bar")
    elem = LOG2 + z * (0.5 - x)  # StoBatch Thm 1: first-order expansion of F1 + F2
    if absolute:
        elem = tf.abs(elem)
    axes = list(range(1, z.shape.rank)) if z.shape.rank and z.shape.rank > 1 else None
    per_example = tf.reduce_sum(elem, axis=axes) if axes else elem
    return _reduce(per_example, reduction)


def stobatch_taylor_loss(logits: Any, labels: Any, *, reduction: str = "none") -> tf.Tensor:
    """StoBatch's second-order Taylor classification loss L1 - L2 (Eq. 9; max(z, 0) as in the code).

    Per example: sum_k [max(z_k, 0) - |z_k|/2 + z_k^2/8 + log 2] - sum_k z_k y_k, the
    stable per-class logistic cross-entropy with log(1 + e^{-|z|}) expanded to second order.

    Args:
        logits: z = h_pi W_pi, [batch, K].
        labels: one-hot [batch, K].
        reduction: "none" (per example, default), "sum" or "mean".

    Returns:
        The loss tensor.

    Raises:
        ValueError: on mismatched shapes or a bad reduction.
    """
    reduction = checks.check_choice(reduction, "reduction", _REDUCTIONS)
    z = tf.convert_to_tensor(logits)
    y = tf.cast(tf.convert_to_tensor(labels), z.dtype)
    _check_same_shape(z, y, "logits", "labels")
    l1 = tf.reduce_sum(tf.nn.relu(z) - tf.abs(z) / 2.0 + tf.square(z) / 8.0 + LOG2, axis=-1)
    l2 = tf.reduce_sum(z * y, axis=-1)  # StoBatch Thm 3: L2_i = sum_k (h_pi y_k) . W[:, k]
    return _reduce(l1 - l2, reduction)


def stobatch_adversarial_objective(benign_logits: Any, benign_labels: Any, adv_logits: Any,
                                   adv_labels: Any, *, xi: float, m: int,
                                   noise_term: Any = None) -> tf.Tensor:
    """StoBatch's DP adversarial objective for theta2 (Eq. 9, Theorem 3).

    L_bar = 1/(m(1+xi)) [sum_benign (L1 - L2) + xi sum_adv (L1 - L2)] + noise_term.
    `m` is the global DP batch size; under a strategy each replica passes its shard and the
    SUM all-reduce of gradients recovers the global objective (docs/stobatch.md, "Distribution").

    Args:
        benign_logits, benign_labels: benign batch ([n, K]).
        adv_logits, adv_labels: adversarial batch ([n', K]; true labels of the sources).
        xi: weight of the adversarial part, >= 0.
        m: DP batch size (>= 1).
        noise_term: optional scalar from `functional_mechanism_term`.

    Returns:
        Scalar objective.

    Raises:
        ValueError: on a bad xi or m, or mismatched shapes.
    """
    xi = checks.check_nonnegative(xi, "xi")
    m = checks.check_positive_int(m, "m")
    benign = stobatch_taylor_loss(benign_logits, benign_labels, reduction="sum")
    adv = stobatch_taylor_loss(adv_logits, adv_labels, reduction="sum")
    total = (benign + xi * adv) / (m * (1.0 + xi))  # StoBatch Eq. 9
    if noise_term is not None:
        total = total + tf.cast(noise_term, total.dtype)
    return total
