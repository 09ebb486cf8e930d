"""Per-example gradient pieces shared by the clipping paths (vectorized, ghost, tfdp.keras)."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np
import tensorflow as tf

from tfdp import tf_options

tf_options.configure_tensorflow()  # bit-reproducible tf.function graphs (tfdp/tf_options.py)

# The result of `grouped_filter_gradients_ok`, under "ok" once checked.
GROUPED_FILTER_GRADIENTS: dict = {}


def grouped_filter_gradients_ok() -> bool:
    """Whether this TensorFlow build's Conv2DBackpropFilter computes grouped filter gradients
    (filter depth < input depth) exactly: checked once, eagerly, on a tiny case against the
    definition. TensorFlow's own (Eigen) CPU kernels refuse grouped convolutions; oneDNN's
    have them. TensorFlow turns oneDNN on by default only on some x86 CPUs (AVX-512 VNNI /
    AMX; `TF_ENABLE_ONEDNN_OPTS=1` elsewhere). Keras runs a grouped Conv2D through XLA on such
    CPUs, which `tf.vectorized_map` does not keep: there the vectorised gradient fails at run
    time ("filter_size does not have enough elements")."""
    if "ok" not in GROUPED_FILTER_GRADIENTS:
        with tf.init_scope():
            rng = np.random.default_rng(0)
            x = rng.normal(size=(1, 4, 4, 6)).astype(np.float32)      # 2 groups of 3 channels
            dz = rng.normal(size=(1, 2, 2, 4)).astype(np.float32)     # 2 groups of 2 outputs
            want = np.zeros((3, 3, 3, 4), np.float32)
            for grp in range(2):
                for i, j in np.ndindex(3, 3):
                    want[i, j, :, 2 * grp:2 * grp + 2] = np.einsum(
                        "pqc,pqo->co", x[0, i:i + 2, j:j + 2, 3 * grp:3 * grp + 3],
                        dz[0, :, :, 2 * grp:2 * grp + 2])
            try:
                got = tf.compat.v1.nn.conv2d_backprop_filter(
                    tf.constant(x), [3, 3, 3, 4], tf.constant(dz), [1, 1, 1, 1], "VALID").numpy()
                ok = bool(np.allclose(got, want, rtol=1e-4, atol=1e-5))
                GROUPED_FILTER_GRADIENTS["ok"] = ok
            except (tf.errors.OpError, ValueError):
                GROUPED_FILTER_GRADIENTS["ok"] = False
    return GROUPED_FILTER_GRADIENTS["ok"]


def _has_grouped_conv(model: Any) -> bool:
    flatten = getattr(model, "_flatten_layers", None)
    if flatten is None:
        return False
    return any(int(getattr(layer, "groups", 1) or 1) > 1 and "Conv" in type(layer).__name__
               for layer in flatten(include_self=True, recursive=True))


def map_examples(fn: Callable, elems: Any, model: Any = None) -> Any:
    """`tf.vectorized_map(fn, elems)`, or a `tf.map_fn` loop where that cannot run.

    The loop is taken for a model with a grouped convolution on a CPU whose kernels cannot
    differentiate it under `tf.vectorized_map` (`grouped_filter_gradients_ok`):
    the same per-example values, one example at a time.

    Args:
      fn: the per-example function of one element of `elems` (a structure of tensors).
      elems: a structure of tensors with a leading batch axis.
      model: the Keras model `fn` calls, if any (inspected for grouped convolutions).
    """
    if (model is None or not _has_grouped_conv(model) or grouped_filter_gradients_ok()):
        return tf.vectorized_map(fn, elems)
    specs = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape[1:], t.dtype), elems)
    traced = tf.function(fn, autograph=False).get_concrete_function(specs)
    signature = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype),
                                      traced.structured_outputs)
    return tf.map_fn(fn, elems, fn_output_signature=signature)


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
