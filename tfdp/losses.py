"""Loss pieces shared by the papers: functional-mechanism noise, Taylor reconstruction, checks."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp import checks, mechanisms

LOG2 = math.log(2.0)

# Output-noise term forms (StoBatch Thm 3: linear; its code: abs_mean); AdLM ref_code uses
# "linear" (MNIST) / "abs_mean" (CIFAR).
NOISE_TERM_MODES = ("linear", "abs_mean")
REDUCTIONS = ("mean", "sum", "none")


# ----------------------------------------------------------------------------- validation


def check_onehot(labels: Any, name: str = "labels") -> np.ndarray:
    """One-hot labels as a float64 [batch, classes] array.

    Args:
        labels: the labels to check.
        name: the argument's name in error messages.

    Returns:
        The labels as float64.

    Raises:
        ValueError: if labels is not numeric, not 2-D, or has an entry other than 0 or 1.
    """
    try:
        y = np.asarray(labels, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a numeric [batch, classes] array") from e
    if y.ndim != 2:
        raise ValueError(f"{name} must have shape [batch, classes], got {y.shape}")
    if not np.all((y == 0.0) | (y == 1.0)):
        raise ValueError(f"{name} must be one-hot (entries 0 or 1)")
    return y


def check_same_shape(a: tf.Tensor, b: tf.Tensor, name_a: str, name_b: str) -> None:
    """Raises ValueError naming both arguments if their (known) static shapes differ."""
    if a.shape.rank is not None and b.shape.rank is not None and \
            not a.shape.is_compatible_with(b.shape):
        raise ValueError(f"{name_a} of shape {a.shape} and {name_b} of shape {b.shape} differ")


def reduce_per_example(per_example: tf.Tensor, reduction: str) -> tf.Tensor:
    """Mean or sum of a per-example loss vector, or the vector itself for "none"."""
    if reduction == "mean":
        return tf.reduce_mean(per_example)
    if reduction == "sum":
        return tf.reduce_sum(per_example)
    return per_example


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
    check_same_shape(n, w, "noise", "kernel")
    if mode == "linear":
        term = -tf.reduce_sum(n * w) / m  # StoBatch Thm 3: -(1/m) sum_k chi3[:,k] . W[:,k]
    else:
        term = tf.reduce_mean(tf.abs(n / m * w))  # StoBatch CIFAR-10 code: mean(|chi3/m o W|)
    if per_replica:
        ctx = tf.distribute.get_replica_context()
        if ctx is not None and ctx.num_replicas_in_sync > 1:
            term = term / tf.cast(ctx.num_replicas_in_sync, term.dtype)
    return term


# ----------------------------------------------------------------------------- reconstruction


def taylor_reconstruction_loss(logits: Any, x_bar: Any, *, absolute: bool = True,
                                 reduction: str = "sum") -> tf.Tensor:
    """First-order Taylor expansion of an auto-encoder's sigmoid cross-entropy reconstruction.

    The reconstruction objective of `layers.DPAutoEncoderConv` (StoBatch's R_bar, Eq. 6).
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
    reduction = checks.check_choice(reduction, "reduction", REDUCTIONS)
    z = tf.convert_to_tensor(logits)
    x = tf.cast(tf.convert_to_tensor(x_bar), z.dtype)
    check_same_shape(z, x, "logits", "x_bar")
    elem = LOG2 + z * (0.5 - x)  # StoBatch Thm 1: first-order expansion of F1 + F2
    if absolute:
        elem = tf.abs(elem)
    axes = list(range(1, z.shape.rank)) if z.shape.rank and z.shape.rank > 1 else None
    per_example = tf.reduce_sum(elem, axis=axes) if axes else elem
    return reduce_per_example(per_example, reduction)
