"""Keras bounding layers: AdLM's bounded LRN, per-batch min-max normalisation, and clipping."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfdp import checks


def _finite(value: Any, name: str) -> float:
    return checks.check_finite(value, name)


@keras.saving.register_keras_serializable(package="tfdp")
class BoundedLRN(keras.layers.Layer):
    """Bounded local response normalisation over the last (channel) axis (AdLM Eq. 22).

    hn_k = h_k / max(|h_k|, (bias + alpha * sum_{m=k-r..k+r} h_m^2)^beta),

    with the window clipped at the first and last channel. For the non-negative inputs the
    paper uses (after a ReLU) this is exactly Eq. 22, h / max(h, .), and the output lies in
    [0, 1]; taking |h| in the guard keeps signed inputs in [-1, 1]. The defaults are the
    paper's q = 2, l = 5 (radius 2), alpha = 1e-4, beta = 0.75 (AdLM Eq. 22). Unlike
    `tf.nn.local_response_normalization` (same window, same unscaled alpha) the guard
    bounds the output. The window sums are one matmul of h^2 with a constant [C, C] band
    matrix; a NaN input therefore makes every channel at its position NaN.

    Args:
        depth_radius: half-width r of the channel window (window 2r + 1), int >= 0.
        bias: q > 0.
        alpha: alpha >= 0.
        beta: beta > 0.
        **kwargs: Keras layer arguments.

    Raises:
        ValueError: on a bad argument, naming it.
    """

    def __init__(self, depth_radius: int = 2, bias: float = 2.0, alpha: float = 1e-4,
                 beta: float = 0.75, **kwargs: Any) -> None:
        if isinstance(depth_radius, bool) or not isinstance(depth_radius, (int, np.integer)) \
                or depth_radius < 0:
            raise ValueError(f"depth_radius must be an int >= 0, got {depth_radius!r}")
        self.depth_radius = int(depth_radius)
        self.bias = _finite(bias, "bias")
        if self.bias <= 0:
            raise ValueError(f"bias must be > 0, got {bias!r}")
        self.alpha = _finite(alpha, "alpha")
        if self.alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha!r}")
        self.beta = _finite(beta, "beta")
        if self.beta <= 0:
            raise ValueError(f"beta must be > 0, got {beta!r}")
        super().__init__(**kwargs)

    def build(self, input_shape: Any) -> None:
        shape = tf.TensorShape(input_shape)
        channels = shape[-1] if shape.rank else None
        # Band matrix B[j, k] = 1 where |j - k| <= r: (h^2 @ B)_k is the window sum over
        # channels max(0, k-r)..min(C-1, k+r). Built once here when C is known (else in call).
        self._band = None
        if channels is not None and self.depth_radius > 0:
            idx = np.arange(int(channels))
            self._band = (np.abs(idx[:, None] - idx[None, :]) <= self.depth_radius).astype(
                np.float32)
        super().build(input_shape)

    def call(self, inputs: Any) -> tf.Tensor:
        h = tf.convert_to_tensor(inputs)
        sq = tf.square(h)
        r = self.depth_radius
        if r > 0:
            band = getattr(self, "_band", None)
            if band is not None and band.shape[0] == h.shape[-1]:
                band = tf.constant(band, dtype=h.dtype)
            else:  # channel count unknown when built
                idx = tf.range(tf.shape(h)[-1])
                band = tf.cast(tf.abs(idx[:, None] - idx[None, :]) <= r, h.dtype)
            # An overflowed h^2 (inf) would give inf * 0 = NaN outside its window: clamp it to
            # the largest finite value and map a window sum that reaches it back to inf.
            big = tf.constant(h.dtype.max, dtype=h.dtype)
            sq = tf.minimum(sq, big)
            # Window sum of squares over channels k-r..k+r (AdLM Eq. 22), zero outside.
            window = tf.tensordot(sq, band, axes=[[-1], [0]])
            window = tf.where(window >= big, tf.constant(np.inf, dtype=h.dtype), window)
        else:
            window = sq
        den = tf.pow(self.bias + self.alpha * window, self.beta)  # (q + alpha sum h^2)^beta
        return h / tf.maximum(tf.abs(h), den)  # AdLM Eq. 22 guard max(h, .)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"depth_radius": self.depth_radius, "bias": self.bias,
                       "alpha": self.alpha, "beta": self.beta})
        return config


@keras.saving.register_keras_serializable(package="tfdp")
class MinMaxBound(keras.layers.Layer):
    """Per-batch min-max normalisation of every unit to [0, 1] (AdLM, fully connected layers).

    hn = (h - chi) / (phi - chi + epsilon), with chi and phi the unit's minimum and maximum
    over the current batch (axis 0). A constant unit maps to 0 (no NaN). The statistics come
    from the batch at hand, also at inference (not in the paper; use large fixed test batches), and
    under a tf.distribute strategy from each replica's shard.

    Args:
        epsilon: small constant > 0 added to the denominator.
        **kwargs: Keras layer arguments.

    Raises:
        ValueError: if epsilon is not a finite number > 0.
    """

    def __init__(self, epsilon: float = 1e-6, **kwargs: Any) -> None:
        self.epsilon = _finite(epsilon, "epsilon")
        if self.epsilon <= 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
        super().__init__(**kwargs)

    def call(self, inputs: Any) -> tf.Tensor:
        h = tf.convert_to_tensor(inputs)
        chi = tf.reduce_min(h, axis=0, keepdims=True)
        phi = tf.reduce_max(h, axis=0, keepdims=True)
        return (h - chi) / (phi - chi + self.epsilon)  # AdLM per-batch min-max

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict:
        config = super().get_config()
        config["epsilon"] = self.epsilon
        return config


@keras.saving.register_keras_serializable(package="tfdp")
class Clip(keras.layers.Layer):
    """Clips every value to [low, high] (AdLM bn_clip mode, StoBatch's h1 and h_pi in [-1, 1]).

    Args:
        low: lower bound (finite).
        high: upper bound (finite, > low).
        **kwargs: Keras layer arguments.

    Raises:
        ValueError: if a bound is not finite or low >= high.
    """

    def __init__(self, low: float = -1.0, high: float = 1.0, **kwargs: Any) -> None:
        self.low = _finite(low, "low")
        self.high = _finite(high, "high")
        if not self.low < self.high:
            raise ValueError(f"low must be < high, got low={low!r}, high={high!r}")
        super().__init__(**kwargs)

    def call(self, inputs: Any) -> tf.Tensor:
        return tf.clip_by_value(inputs, self.low, self.high)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"low": self.low, "high": self.high})
        return config
