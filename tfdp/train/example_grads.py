"""Per-example gradient pieces shared by the clipping paths (vectorized, ghost, tfdp.keras)."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import tensorflow as tf


def layer_gradients(call: Callable[[tf.Tensor], tf.Tensor], variables: Sequence[tf.Variable],
                    a: tf.Tensor, g: tf.Tensor) -> list:
    """Per-example gradients of one layer's variables from its input and output gradient.

    Example i's gradient of the loss w.r.t. the layer's variables is the gradient of
    <g_i, call(a_i)>, with g_i = dl_i / dz_i recorded in one batched backward pass; it is
    computed for all examples at once by `tf.vectorized_map` over the layer alone.

    Args:
      call: the layer's forward map of a batch of one example, `call(a_i[None]) -> z_i[None]`
        (the Keras layer itself, or its functional operation with its `training` mode).
      variables: the layer's variables to differentiate.
      a: the layer's recorded inputs [B, ...].
      g: the loss gradients of its recorded outputs [B, ...].

    Returns:
      One tensor [B, *shape] per variable, in `variables` order (zeros where unconnected).
    """

    def one(args):
        ai, gi = args
        with tf.GradientTape() as tape:
            out = call(ai[None])
            target = tf.reduce_sum(out * gi[None])
        return tape.gradient(target, variables, unconnected_gradients="zero")

    return tf.vectorized_map(one, (a, g))


def clip_factors(sq_norms: tf.Tensor, l2_clip: float,
                 mask: Optional[tf.Tensor] = None) -> tf.Tensor:
    """Per-example clip factors c_i = min(1, C / ||g_i||_2), zero on padding rows.

    Abadi et al. 2016, Alg. 1: g_i / max(1, ||g_i||_2 / C) = c_i g_i.

    Args:
      sq_norms: squared per-example gradient norms ||g_i||_2^2, [B].
      l2_clip: the clipping bound C > 0.
      mask: optional float [B], 0.0 for padding rows (their factor becomes 0) and 1.0 for
        real records.

    Returns:
      The factors [B].
    """
    factors = tf.minimum(1.0, l2_clip / tf.maximum(tf.sqrt(sq_norms), 1e-12))
    if mask is not None:
        factors = factors * mask
    return factors
