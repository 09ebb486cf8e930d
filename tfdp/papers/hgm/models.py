"""Secure-SGD / HGM architectures: noise on the first convolution's pre-activation (HGM Eq. 8).

Every model is a chain

    input -> conv1 (SensitivityBoundedConv2D) -> robustness_noise (HeterogeneousGaussianNoise)
          -> ReLU -> ... -> logits

so the noise is added after the bias and before the nonlinearity (as in the authors' code).
conv1's effective kernel is W1 * Delta_target / Delta_f(W1, r) at every call: the
normalisation of docs/hgm.md ("Design decisions"), applied as a reparametrisation (like weight
normalisation) so that the deployed function has Delta_f = Delta_target in training, in
checkpoints and in the saved model alike (no separate projection step can be skipped).
Normalising to the bound itself rather than to min(1, .) keeps the first layer's signal at
the largest level the noise allows from the first step on.
"""

from __future__ import annotations

import secrets
from typing import Any, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

import layers as tfdp_layers
from layers import noise_streams
from tfdp import checks, mechanisms
from tfdp.papers.hgm import redistribution

ARCHITECTURES = ("mnist", "cifar10", "small", "release_mnist")
# conv1 kept at Delta_f = Delta_target (tfdp, docs/hgm.md) or trained freely (the code release).
CONV1_MODES = ("normalised", "free")
H1_LAYER = "conv1"
NOISE_LAYER = "robustness_noise"


@keras.saving.register_keras_serializable(package="tfdp")
class SensitivityBoundedConv2D(keras.layers.Conv2D):
    """Conv2D whose effective kernel has Delta_f(W, r) = `target` (HGM Eq. 6; docs/hgm.md).

    Args:
        r: redistribution vector of the layer's output feature shape (entries > 0, sum 1),
            or None for uniform r.
        sensitivity_mode: one of `tfdp.papers.hgm.redistribution.SENSITIVITY_MODES`.
        target: Delta_target > 0 (1 by default).
        **kwargs: keras.layers.Conv2D arguments.

    Raises:
        ValueError: on a bad argument, naming it.
    """

    def __init__(self, *args: Any, r: Any = None, sensitivity_mode: str = "layer_max",
                 target: float = 1.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.r = None if r is None else mechanisms.check_redistribution(r, "r")
        self.sensitivity_mode = redistribution.check_sensitivity_mode(sensitivity_mode)
        self.target = checks.check_finite(target, "target", minimum=0.0, strict=True)
        self._r_shaped: Optional[np.ndarray] = None

    def build(self, input_shape: Any) -> None:
        super().build(input_shape)
        out = self.compute_output_shape(input_shape)[1:]
        size = int(np.prod(out))
        if self.r is None:
            self._r_shaped = mechanisms.uniform_redistribution(tuple(out))
        else:
            if self.r.size != size:
                raise ValueError(f"r has {self.r.size} entries, but {self.name} has {size} "
                                 f"units (output shape {tuple(out)})")
            self._r_shaped = self.r.reshape(tuple(out))

    def sensitivity(self, kernel: Optional[tf.Tensor] = None) -> tf.Tensor:
        """Delta_f of `kernel` (default: the raw kernel) under the layer's r and mode."""
        kernel = self.kernel if kernel is None else kernel
        return redistribution.layer_sensitivity(kernel, self._r_shaped, self.sensitivity_mode,
                                                strides=int(self.strides[0]))

    def effective_kernel(self) -> tf.Tensor:
        """W * target / Delta_f(W); its Delta_f is the target (every mode is 1-homogeneous)."""
        kernel = tf.convert_to_tensor(self.kernel)
        delta = self.sensitivity(kernel)
        scale = self.target / tf.maximum(delta, 1e-30)
        return kernel * tf.cast(scale, kernel.dtype)

    def call(self, inputs: Any) -> Any:
        outputs = self.convolution_op(inputs, self.effective_kernel())
        if self.use_bias:
            outputs = outputs + tf.reshape(self.bias, [1] * (len(outputs.shape) - 1) + [-1])
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"r": None if self.r is None else self.r.reshape(-1).tolist(),
                       "sensitivity_mode": self.sensitivity_mode, "target": self.target})
        return config


def _conv1_spec(arch: str) -> dict:
    if arch in ("mnist", "release_mnist"):  # HGM paper: conv 32 5x5; stride 1, SAME (code)
        return {"filters": 32, "kernel_size": 5, "strides": 1}
    if arch == "cifar10":  # HGM paper: conv 128 3x3; stride 2, SAME (code)
        return {"filters": 128, "kernel_size": 3, "strides": 2}
    if arch == "small":  # CPU-sized variant of the MNIST network (not a paper setting)
        return {"filters": 8, "kernel_size": 5, "strides": 1}
    raise ValueError(f"arch: unknown architecture {arch!r}; choose one of {ARCHITECTURES}")


def h1_shape(arch: str, input_shape: Sequence[int]) -> tuple[int, int, int]:
    """Output shape [H, W, C] of conv1 (the noised units; K is its product)."""
    spec = _conv1_spec(arch)
    h, w = (int(input_shape[0]), int(input_shape[1]))
    s = spec["strides"]
    return (-(-h // s), -(-w // s), spec["filters"])


def build_model(arch: str, input_shape: Sequence[int], num_classes: int, *, sigma: float,
                r: Any = None, noise_mode: str = "per_example",
                sensitivity_mode: str = "layer_max", target: float = 1.0,
                seed: Optional[int] = None, name: Optional[str] = None,
                noise_free: bool = False, conv1: str = "normalised",
                noise_r: Any = None) -> keras.Model:
    """The HGM experiments' network with HGM robustness noise at conv1's pre-activation.

    Args:
        arch: "mnist" (paper: conv32 5x5 -> pool -> conv64 5x5 -> pool -> FC256 -> logits),
            "cifar10" (paper: conv128 3x3/2 -> conv128 5x5 -> conv256 5x5 -> avgpool ->
            FC256 -> logits; no BatchNorm, as for DP-SGD), "small" (conv8 5x5 -> pool ->
            conv16 5x5 -> pool -> FC64 -> logits) or "release_mnist" (the HGM code release's
            MNIST network: conv32 5x5 -> maxpool 2 -> conv64 5x5 -> maxpool 2 -> FC25 ->
            dropout 0.5 -> logits; SAME padding, ReLU, kernels from a normal of std 0.1
            truncated at two std, biases 0.1).
        input_shape: (H, W, C).
        num_classes: number of logits.
        sigma: HGM noise multiplier sigma_r > 0 (0 only together with `noise_free`).
        r: redistribution vector over conv1's units (None: uniform).
        noise_mode: "per_example" (fresh) or "once" (drawn once, stored in the model).
        sensitivity_mode: Delta_f bound kept by conv1.
        target: Delta_target.
        seed: seed of the noise layer (None: OS entropy).
        name: model name.
        noise_free: build the noise-free twin (sigma 0), e.g. for the pre-training pass
            that computes the redistribution r; the noise layer refuses a zero scale
            otherwise.
        conv1: "normalised" (conv1's effective kernel has Delta_f = target, followed by the
            fixed gain sqrt(K) / target) or "free" (a plain convolution trained freely, no
            gain: the code release; no sensitivity bound holds).
        noise_r: the noise layer's redistribution when it differs from conv1's `r` (e.g.
            the code release's noise mixture, `tfdp.papers.hgm.release`); None: `r`.

    Returns:
        An uncompiled keras.Model mapping inputs to logits.

    Raises:
        ValueError: on a bad argument.
    """
    spec = _conv1_spec(arch)
    if len(input_shape) != 3:
        raise ValueError(f"input_shape: expected (H, W, C), got {tuple(input_shape)!r}")
    if int(num_classes) < 2:
        raise ValueError(f"num_classes: expected >= 2, got {num_classes!r}")
    if conv1 not in CONV1_MODES:
        raise ValueError(f"conv1: expected one of {CONV1_MODES}, got {conv1!r}")
    inputs = keras.Input(shape=tuple(int(d) for d in input_shape))
    init = _release_initialisers() if arch == "release_mnist" else {}
    conv_args = dict(strides=spec["strides"], padding="same", name=H1_LAYER, **init)
    if conv1 == "free":  # HGM code release: conv1 is never normalised
        h = keras.layers.Conv2D(spec["filters"], spec["kernel_size"], **conv_args)(inputs)
    else:
        h = SensitivityBoundedConv2D(spec["filters"], spec["kernel_size"], r=r,
                                     sensitivity_mode=sensitivity_mode, target=target,
                                     **conv_args)(inputs)
    h = tfdp_layers.HeterogeneousGaussianNoise(
        sigma, r if noise_r is None else noise_r, noise_mode=noise_mode, seed=seed,
        inference_fixed_noise=False, allow_zero=bool(noise_free), name=NOISE_LAYER)(h)
    if conv1 == "normalised":
        # Fixed gain sqrt(K) / Delta_target after the noise (post-processing, so it changes
        # neither the certificate nor the privacy): conv1's units move by at most about
        # Delta_target / sqrt(K), and this brings them back to order one for the layers above.
        k = int(np.prod(h.shape[1:]))
        h = keras.layers.Rescaling(float(np.sqrt(k) / target), name="post_noise_scale")(h)
    h = keras.layers.ReLU(name="relu1")(h)
    if arch == "release_mnist":
        return _release_head(h, inputs, int(num_classes), init, name, seed)
    return _paper_head(h, inputs, arch, int(num_classes), name)


def _paper_head(h: Any, inputs: Any, arch: str, num_classes: int,
                name: Optional[str]) -> keras.Model:
    """The layers above relu1 of the paper's networks ("mnist", "cifar10", "small")."""
    if arch == "cifar10":
        h = keras.layers.Conv2D(128, 5, padding="same", activation="relu", name="conv2")(h)
        h = keras.layers.Conv2D(256, 5, padding="same", activation="relu", name="conv3")(h)
        h = keras.layers.AveragePooling2D(2, name="pool")(h)
        dense = 256
    else:
        wide = arch == "mnist"
        h = keras.layers.MaxPooling2D(2, name="pool1")(h)
        h = keras.layers.Conv2D(64 if wide else 16, 5, padding="same", activation="relu",
                                name="conv2")(h)
        h = keras.layers.MaxPooling2D(2, name="pool2")(h)
        dense = 256 if wide else 64
    h = keras.layers.Flatten(name="flatten")(h)
    h = keras.layers.Dense(dense, activation="relu", name="fc")(h)
    logits = keras.layers.Dense(int(num_classes), name="logits")(h)
    return keras.Model(inputs, logits, name=name or f"hgm_{arch}")


@keras.saving.register_keras_serializable(package="tfdp")
class CountedDropout(keras.layers.Layer):
    """Dropout whose masks are keyed by a seed and a checkpointed draw counter.

    Keras' Dropout keeps its random state outside the training checkpoint, so a resumed run
    would draw other masks; here step t's mask is a stateless draw from (seed, t), like the
    noise layers' draws, and a resume replays the same masks (exact resume).

    Args:
        rate: fraction of units dropped in training, in [0, 1).
        seed: key of the masks (< 2^128); None: 128 bits of OS entropy. Withheld from saved
            models (`tfdp.rundir.save_model`).
        **kwargs: keras.layers.Layer arguments.

    Raises:
        ValueError: on a rate outside [0, 1).
    """

    _TAG = 9173  # this layer's stream of the key (layers.noise_streams.root_seed)

    def __init__(self, rate: float, seed: Optional[int] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not 0.0 <= float(rate) < 1.0:
            raise ValueError(f"rate: expected a number in [0, 1), got {rate!r}")
        self.rate = float(rate)
        self.seed = seed
        self._key = seed if seed is not None else secrets.randbits(128)

    def build(self, input_shape: Any) -> None:
        self.draw_counter = self.add_weight(
            shape=(), initializer="zeros", dtype="int64", trainable=False,
            aggregation="only_first_replica", name="draw_counter")
        super().build(input_shape)

    def call(self, inputs: Any, training: Optional[bool] = None) -> Any:
        if not training or self.rate == 0.0:
            return inputs
        seed = tf.random.experimental.stateless_fold_in(
            noise_streams.root_seed(self._key, self._TAG), self.draw_counter.value)
        ctx = tf.distribute.get_replica_context()
        if ctx is not None and ctx.num_replicas_in_sync > 1:
            seed = tf.random.experimental.stateless_fold_in(
                seed, tf.cast(ctx.replica_id_in_sync_group, tf.int64))
        self.draw_counter.assign_add(1)
        keep = tf.random.stateless_uniform(tf.shape(inputs), seed) >= self.rate
        return tf.where(keep, inputs / (1.0 - self.rate), tf.zeros_like(inputs))

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"rate": self.rate, "seed": self.seed})
        return config


def _release_initialisers() -> dict:
    # HGM code release (MNIST): kernels ~ N(0, 0.1^2) truncated at two std, biases 0.1.
    return {"kernel_initializer": keras.initializers.TruncatedNormal(stddev=0.1),
            "bias_initializer": keras.initializers.Constant(0.1)}


def _release_head(h: Any, inputs: Any, num_classes: int, init: dict,
                  name: Optional[str], seed: Optional[int]) -> keras.Model:
    """The code release's layers after conv1's ReLU: pool, conv64, pool, FC25, dropout, FC."""
    h = keras.layers.MaxPooling2D(2, padding="same", name="pool1")(h)
    h = keras.layers.Conv2D(64, 5, padding="same", activation="relu", name="conv2", **init)(h)
    h = keras.layers.MaxPooling2D(2, padding="same", name="pool2")(h)
    h = keras.layers.Flatten(name="flatten")(h)
    h = keras.layers.Dense(25, activation="relu", name="fc", **init)(h)
    h = CountedDropout(0.5, seed=seed, name="dropout")(h)  # keep probability 0.5 in training
    logits = keras.layers.Dense(num_classes, name="logits", **init)(h)
    return keras.Model(inputs, logits, name=name or "hgm_release_mnist")


def split_layers(model: keras.Model) -> tuple[Any, Any, list]:
    """(conv1, noise layer, the layers after the noise layer, in order) of a `build_model` net.

    Raises:
        ValueError: if the model lacks the named layers.
    """
    names = [layer.name for layer in model.layers]
    for wanted in (H1_LAYER, NOISE_LAYER):
        if wanted not in names:
            raise ValueError(f"model: has no layer named {wanted!r}; build it with "
                             "tfdp.papers.hgm.models.build_model")
    rest = model.layers[names.index(NOISE_LAYER) + 1:]
    return model.get_layer(H1_LAYER), model.get_layer(NOISE_LAYER), rest


def forward_with_noise(model: keras.Model, x: tf.Tensor, gamma: Optional[tf.Tensor],
                       training: bool = True) -> tf.Tensor:
    """Logits of the model with the given robustness noise gamma added to conv1's output.

    Args:
        model: a `build_model` network.
        x: inputs [b, H, W, C].
        gamma: noise [b or 1, *h1 shape], or None for none.
        training: passed to the layers after the noise.

    Returns:
        logits [b, num_classes].
    """
    conv1, _, rest = split_layers(model)
    h = conv1(x)
    if gamma is not None:
        h = h + tf.cast(gamma, h.dtype)
    for layer in rest:
        h = layer(h, training=training)
    return h
