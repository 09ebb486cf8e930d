"""The noise layers' random streams: unit draws from counter-based words, the layers' seeds,
and the per-example key of fresh noise.

The layers draw unit noise from raw 32-bit Philox words (one stateless op for the whole
batch) and transform them in float32. A float32 uniform has 24 bits, so its smallest
positive value would cut the tails at 5.8 sd (Gaussian, Box-Muller) or 17 b (Laplace);
these draws build each uniform from TWO words, u = (w0 + (w1 + 1/2) 2^-32) 2^-32 (about
2^-65 at the smallest), which puts the tails at 9.5 sd and 44 b. That is beyond the
float64 samplers of tfdp.mechanisms.sampling: TensorFlow's normal sampler clamps its
uniform at 1e-7 in float64 too (tails stop at 5.7 sd) and the float64 Laplace inverse CDF
stops near 36 b; and it costs a fraction of a float64 transform.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Optional

import numpy as np
import tensorflow as tf

from tfdp import checks


# Tags folded into the stateless seed so the three uses of one layer seed never collide.
_TAG_FRESH = 1
_TAG_ONCE = 2
_TAG_INFERENCE = 3
_EXAMPLE = threading.local()
_TWO_M32 = 2.0 ** -32


def _open_uniform(w0: tf.Tensor, w1: tf.Tensor) -> tf.Tensor:
    """float32 uniform on (0, 1] from two uint32 words, resolution 2^-64 near 0."""
    u = tf.cast(w0, tf.float32) * _TWO_M32 + (tf.cast(w1, tf.float32) + 0.5) * _TWO_M32 ** 2
    return tf.minimum(u, 1.0)  # w0 near 2^32 rounds up to 1 in float32


def unit_gaussian_from_words(words: tf.Tensor) -> tf.Tensor:
    """Two N(0, 1) draws per row of three uint32 words ([m, 3] -> [m, 2]; Box-Muller).

    Args:
        words: uint32 tensor [m, 3]: words 0, 1 give the radius' uniform, word 2 the angle.

    Returns:
        float32 tensor [m, 2].
    """
    u = _open_uniform(words[:, 0], words[:, 1])
    radius = tf.sqrt(tf.maximum(-2.0 * tf.math.log(u), 0.0))
    angle = tf.cast(words[:, 2], tf.float32) * (2.0 * np.pi * _TWO_M32)
    return tf.stack([radius * tf.cos(angle), radius * tf.sin(angle)], axis=1)


def unit_laplace_from_words(words: tf.Tensor) -> tf.Tensor:
    """One Laplace(0, 1) draw per row of two uint32 words ([m, 2] -> [m]).

    |x| = -log(u) ~ Exp(1) with u uniform on (0, 1] from word 0 and the high 31 bits of
    word 1; the sign is word 1's lowest bit.

    Args:
        words: uint32 tensor [m, 2].

    Returns:
        float32 tensor [m].
    """
    low = tf.bitwise.right_shift(words[:, 1], tf.constant(1, tf.uint32))
    u = tf.minimum(tf.cast(words[:, 0], tf.float32) * _TWO_M32
                   + (tf.cast(low, tf.float32) + 0.5) * _TWO_M32 * 2.0 ** -31, 1.0)
    magnitude = tf.maximum(-tf.math.log(u), 0.0)
    negative = tf.cast(tf.bitwise.bitwise_and(words[:, 1], tf.constant(1, tf.uint32)),
                       tf.float32)
    return magnitude * (1.0 - 2.0 * negative)


def _words(count: tf.Tensor, per_draw: int, seed: tf.Tensor) -> tf.Tensor:
    return tf.random.stateless_uniform(tf.stack([count, per_draw]), seed=seed, minval=None,
                                       maxval=None, dtype=tf.uint32)


def unit_gaussian(shape: Any, seed: tf.Tensor) -> tf.Tensor:
    """N(0, 1) float32 noise of `shape` from one stateless op (see the module notes)."""
    shape = tf.convert_to_tensor(shape, dtype=tf.int32)
    n = tf.reduce_prod(shape)
    pairs = unit_gaussian_from_words(_words((n + 1) // 2, 3, seed))
    return tf.reshape(tf.reshape(pairs, [-1])[:n], shape)


def unit_laplace(shape: Any, seed: tf.Tensor) -> tf.Tensor:
    """Laplace(0, 1) float32 noise of `shape` from one stateless op (see the module notes)."""
    shape = tf.convert_to_tensor(shape, dtype=tf.int32)
    return tf.reshape(unit_laplace_from_words(_words(tf.reduce_prod(shape), 2, seed)), shape)


@contextlib.contextmanager
def example_index_scope(index: Any) -> Iterator[None]:
    """Keys fresh per-example noise by the example's position inside the block.

    Per-example gradients are computed by calling the model on one example at a time
    inside `tf.vectorized_map`; there a layer's seed is the same for every example, so
    without this scope every example would get the SAME "fresh" draw. Inside the block,
    per-example draws fold `index` (the example's position in the replica's batch, an int
    tensor, loop-variant under vectorized_map) into the seed: per-record randomness keyed by
    position, never by content. Per-batch and once-drawn noise are not affected.

    Args:
        index: the example's position (scalar int tensor).

    Yields:
        Nothing.
    """
    previous = getattr(_EXAMPLE, "index", None)
    _EXAMPLE.index = index
    try:
        yield
    finally:
        _EXAMPLE.index = previous


# Layer seeds are keys of up to 128 bits: the two int64 words of a stateless seed.
SEED_BITS = 128


def _check_seed(seed: Any) -> Optional[int]:
    return checks.check_seed(seed, "seed", maximum=2**SEED_BITS - 1)


def _signed64(word: int) -> int:
    """A 64-bit word as the int64 TensorFlow's stateless seeds hold."""
    return word - 2**64 if word >= 2**63 else word


def root_seed(key: int, tag: int) -> tf.Tensor:
    """The stateless seed [2] (int64) of use `tag` of a layer keyed by `key` (< 2^128).

    A key below 2^63 gives [key, tag], the stream layers have always drawn for such seeds;
    a larger key uses all its bits: its two 64-bit words with `tag` folded in. So the
    128-bit keys drawn from OS entropy cannot be searched in less than 2^128 tries (no
    63-bit truncation), while small user seeds keep their streams.
    """
    key = int(key)
    if not 0 <= key < 2**SEED_BITS:
        raise ValueError(f"seed must lie in [0, 2^{SEED_BITS}), got {key!r}")
    if key < 2**63:
        return tf.constant([key, int(tag)], dtype=tf.int64)
    words = tf.constant([_signed64(key & (2**64 - 1)), _signed64(key >> 64)], dtype=tf.int64)
    return tf.random.experimental.stateless_fold_in(words, tf.constant(int(tag), tf.int64))
