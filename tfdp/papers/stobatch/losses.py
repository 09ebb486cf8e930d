"""StoBatch's Taylor-expanded classification losses, adversarial objective and sensitivities."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfdp import checks, losses


# ----------------------------------------------------------------------------- sensitivities


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


# ----------------------------------------------------------------------------- losses


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
    reduction = checks.check_choice(reduction, "reduction", losses.REDUCTIONS)
    z = tf.convert_to_tensor(logits)
    y = tf.cast(tf.convert_to_tensor(labels), z.dtype)
    losses.check_same_shape(z, y, "logits", "labels")
    l1 = tf.reduce_sum(tf.nn.relu(z) - tf.abs(z) / 2.0 + tf.square(z) / 8.0 + losses.LOG2,
                       axis=-1)
    l2 = tf.reduce_sum(z * y, axis=-1)  # StoBatch Thm 3: L2_i = sum_k (h_pi y_k) . W[:, k]
    return losses.reduce_per_example(l1 - l2, reduction)


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
        noise_term: optional scalar from `tfdp.losses.functional_mechanism_term`.

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
