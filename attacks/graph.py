"""Graph-safe l_inf attacks: one batched loop with per-example attack ids (StoBatch Alg. 1).

Everything here runs inside `tf.function` and `strategy.run`: no Python-side checks on
tensor values, no caches, no stateful random numbers. The caller passes

- `attack_ids`, an int tensor [B] with one of IFGSM, MIM, MADRY per example (FGSM is
  I-FGSM with one iteration of the full size). Because the id is a property of the
  example, a batch gives the same adversarial examples however it is sharded across
  replicas (docs/stobatch.md, "What one run does");
- `start_noise`, uniform values in [-1, 1] shaped like `x` for Madry's random start, drawn by
  the caller from a stateless RNG keyed by the example's global position (docs/stobatch.md);
- the clip range, or None for no range clipping (StoBatch starts from x_bar = x + chi1/m,
  which is not in [-1, 1]; the paper writes no clipping: project onto the mu-ball only).

The update order is CleverHans 4.0.0's, operation by operation, so that with a clip range
the result agrees bit for bit with `basic_iterative_method`, `momentum_iterative_method`
and `madry_et_al` (tests/attacks):

- I-FGSM / Madry step: adv <- clip(adv + eps_iter * sign(grad)), then the projection
  adv <- clip(x + clip(adv - x, -eps, eps));
- MIM step: g <- decay * g + grad / mean|grad| (per example),
  adv <- clip(x + clip(adv + eps_iter * sign(g) - x, -eps, eps));
- Madry start: adv_0 <- clip(x + eps * start_noise).

The loss is the softmax cross-entropy against the label predicted at the starting point
x (computed once; StoBatch Eq. 8 with the CleverHans convention of the authors' code), unless labels
are given.
"""

from __future__ import annotations

from typing import Callable, Optional

import tensorflow as tf

from tfdp import tf_options

tf_options.configure_tensorflow()  # bit-reproducible tf.function graphs (tfdp/tf_options.py)

IFGSM, MIM, MADRY = 0, 1, 2
ATTACK_IDS = {"ifgsm": IFGSM, "fgsm": IFGSM, "mim": MIM, "madry": MADRY}

LogitsFn = Callable[[tf.Tensor], tf.Tensor]


def _per_example(value: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
    """Broadcasts a scalar or [B] tensor against x ([B, ...])."""
    value = tf.cast(tf.convert_to_tensor(value), x.dtype)
    if value.shape.rank == 0:
        return value
    shape = tf.concat([tf.shape(value), tf.ones([tf.rank(x) - 1], tf.int32)], 0)
    return tf.reshape(value, shape)


def input_gradient(logits_fn: LogitsFn, x: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Gradient w.r.t. x of the summed softmax cross-entropy (CleverHans compute_gradient)."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                              logits=logits_fn(x))
    return tape.gradient(loss, x)


def craft(logits_fn: LogitsFn, x: tf.Tensor, eps, *, attack_ids: tf.Tensor, nb_iter: int,
          eps_iter=None, start_noise: Optional[tf.Tensor] = None,
          labels: Optional[tf.Tensor] = None, clip_min: Optional[float] = None,
          clip_max: Optional[float] = None, decay: float = 1.0,
          dtype: tf.DType = tf.float32) -> tf.Tensor:
    """Crafts l_inf adversarial examples, each with its own attack (graph-safe).

    Args:
        logits_fn: maps a batch to logits; differentiable w.r.t. its input.
        x: starting points [B, ...] (float32).
        eps: attack size mu, a scalar or [B] tensor (>= 0; not checked here).
        attack_ids: int [B], IFGSM, MIM or MADRY per example.
        nb_iter: T, Python int >= 1.
        eps_iter: step size (scalar or [B]); default eps / nb_iter (StoBatch Eq. 8).
        start_noise: uniform [-1, 1] values shaped like x, Madry's random start (required
            when any id is MADRY; rows of other attacks ignore it).
        labels: int labels [B] to move away from; None uses the predictions at x.
        clip_min: lower end of the clip range, or None (with clip_max None) for no clipping.
        clip_max: upper end of the clip range.
        decay: MIM's momentum decay (1.0 in the papers' code).
        dtype: dtype of the crafting arithmetic (float32; float64 for checks that must not
            depend on float32 summation order).

    Returns:
        Adversarial examples shaped like x, in `dtype`.

    Raises:
        ValueError: if nb_iter < 1 or only one end of the clip range is given (Python
            arguments, checked at trace time).
    """
    nb_iter = int(nb_iter)
    if nb_iter < 1:
        raise ValueError(f"nb_iter must be >= 1, got {nb_iter}")
    if (clip_min is None) != (clip_max is None):
        raise ValueError("clip_min and clip_max must both be given or both be None")
    clipping = clip_min is not None
    x = tf.cast(tf.convert_to_tensor(x), dtype)
    eps_b = _per_example(eps, x)
    step = eps_b / float(nb_iter) if eps_iter is None else _per_example(eps_iter, x)
    ids = tf.cast(tf.convert_to_tensor(attack_ids), tf.int32)
    is_mim = tf.cast(_per_example(tf.cast(tf.equal(ids, MIM), tf.float32), x), tf.bool)
    is_madry = tf.cast(_per_example(tf.cast(tf.equal(ids, MADRY), tf.float32), x), tf.bool)

    def clip(v):
        return tf.clip_by_value(v, clip_min, clip_max) if clipping else v

    if labels is None:
        # CleverHans convention: the model's own prediction at the start, kept fixed
        labels = tf.argmax(logits_fn(x), axis=1)
    labels = tf.stop_gradient(tf.cast(labels, tf.int64))
    adv = x
    if start_noise is not None:
        # Madry et al. 2018: uniform random start in the eps-ball (Madry rows only)
        start = clip(x + tf.cast(start_noise, x.dtype) * eps_b)
        adv = tf.where(is_madry, start, x)
    momentum = tf.zeros_like(x)
    red = list(range(1, x.shape.rank))
    for _ in tf.range(nb_iter):
        grad = input_gradient(logits_fn, adv, labels)
        # Dong et al. 2018 (CleverHans): gradient normalised by its mean absolute value
        normalised = grad / tf.maximum(tf.constant(1e-12, grad.dtype),
                                       tf.reduce_mean(tf.abs(grad), red, keepdims=True))
        momentum = decay * momentum + normalised
        direction = tf.stop_gradient(tf.where(is_mim, tf.sign(momentum), tf.sign(grad)))
        moved = adv + step * direction
        if clipping:  # CleverHans' FGM clips before the projection; MIM does not
            moved = tf.where(is_mim, moved, clip(moved))
        adv = clip(x + tf.clip_by_value(moved - x, -eps_b, eps_b))  # project onto the ball
        adv = tf.ensure_shape(adv, x.shape)
    return tf.stop_gradient(adv)


def ensemble_ids(positions: tf.Tensor, batch_size: int, num_attacks: int = 3) -> tf.Tensor:
    """Attack id of each example from its position in a batch of `batch_size`.

    The batch is cut once into `num_attacks` contiguous parts of size m / |A| (StoBatch
    Alg. 1: the fixed 3-way split; sizes differ by at most one when m is not divisible), in
    the order I-FGSM, MIM, Madry. The id depends only on the global position, never on the
    replica that holds the example (docs/stobatch.md, "What one run does").

    Args:
        positions: int tensor of global positions in [0, batch_size).
        batch_size: m.
        num_attacks: |A|.

    Returns:
        int32 ids in [0, num_attacks).
    """
    pos = tf.cast(positions, tf.int64)
    return tf.cast((pos * num_attacks) // int(batch_size), tf.int32)
