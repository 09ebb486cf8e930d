"""Keras noise layers: Laplace input/affine perturbation, Gaussian and heterogeneous Gaussian."""

from __future__ import annotations

import secrets
from typing import Any, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from layers.noise_checks import (_check_allow_zero, _check_bounds, _check_float32_scale,
                                 _check_nonneg_float, _check_scale, _check_shared_axes)
from layers.noise_streams import (_EXAMPLE, _TAG_FRESH, _TAG_INFERENCE, _TAG_ONCE, SEED_BITS,
                                  _check_seed, root_seed, unit_gaussian, unit_laplace)
from tfdp import kernels, mechanisms

NOISE_MODES = ("per_example", "per_batch", "once")

# The unit draws, the layers' seeds and the per-example key of fresh noise are in
# layers.noise_streams; the argument checks in layers.noise_checks.

# ---------------------------------------------------------------------------- kernels
#
# "portable" draws with the TensorFlow ops of layers.noise_streams (any device; the
# default). "fused" adds the fresh per-example/inference draws with one compiled CPU op
# (tfdp.kernels): the same Philox words, the same float32 formulas with vectorised
# log/cos/sin (a draw may differ from the portable one in its last few bits), scale and add
# in the same pass. The kernel is read when a layer is traced: set it before building a
# training step.

# The kernel choice and its state live in tfdp.kernels (below the layers); these names stay
# importable from here and from `layers`.
NOISE_KERNELS = kernels.NOISE_KERNELS
set_noise_kernel = kernels.set_noise_kernel
get_noise_kernel = kernels.get_noise_kernel
noise_kernel = kernels.noise_kernel


def _check_mode(noise_mode: Any) -> str:
    if noise_mode not in NOISE_MODES:
        raise ValueError(f"noise_mode must be one of {NOISE_MODES}, got {noise_mode!r}")
    return noise_mode


class _NoiseLayer(keras.layers.Layer):
    """Shared machinery of the tfdp noise layers: modes, seeds, stored draws, inference switch.

    Subclasses set `self._noise_scale` (float64 array broadcasting to the per-example noise
    shape, already divided by `batch_divisor`) and implement `_sample`.
    """

    def __init__(self, *, noise_mode: str = "per_example", seed: Optional[int] = None,
                 inference_noise: bool = False, batch_divisor: float = 1.0,
                 shared_axes: Optional[Sequence[int]] = None,
                 inference_fresh_scale: float = 1.0, inference_fixed_noise: bool = True,
                 input_bounds: Optional[Sequence[float]] = None, allow_zero: bool = False,
                 **kwargs: Any) -> None:
        self.allow_zero = _check_allow_zero(allow_zero)
        self.noise_mode = _check_mode(noise_mode)
        self.input_bounds = _check_bounds(input_bounds)
        self.seed = _check_seed(seed)
        if not isinstance(inference_noise, (bool, np.bool_)):
            raise ValueError(f"inference_noise must be a bool, got {inference_noise!r}")
        self.batch_divisor = _check_nonneg_float(batch_divisor, "batch_divisor", positive=True)
        self.shared_axes = _check_shared_axes(shared_axes)
        self.inference_fresh_scale = _check_nonneg_float(inference_fresh_scale,
                                                         "inference_fresh_scale")
        if not isinstance(inference_fixed_noise, (bool, np.bool_)):
            raise ValueError(f"inference_fixed_noise must be a bool, got {inference_fixed_noise!r}")
        self.inference_fixed_noise = bool(inference_fixed_noise)
        super().__init__(**kwargs)
        self.inference_noise = bool(inference_noise)
        # Without a seed the stream comes from 128 bits of OS entropy; that key is never saved.
        self._base_seed = self.seed if self.seed is not None else secrets.randbits(SEED_BITS)
        self._feature_shape: Optional[tuple[int, ...]] = None
        self.supports_masking = True

    # ------------------------------------------------------------------ building

    def _noise_feature_shape(self, input_shape: Sequence[Optional[int]]) -> tuple[int, ...]:
        dims = list(input_shape[1:])
        rank = len(input_shape)
        for a in self.shared_axes:
            if a >= rank:
                raise ValueError(f"shared_axes entry {a} is out of range for input rank {rank}")
            dims[a - 1] = 1
        if any(d is None for d in dims):
            raise ValueError(
                f"the non-shared feature dimensions must be known, got input shape "
                f"{tuple(input_shape)}")
        return tuple(int(d) for d in dims)

    def _check_scale_shape(self, scale: np.ndarray, name: str) -> np.ndarray:
        """Checks `scale` broadcasts to the per-example noise shape; returns it full-shaped."""
        shape = self._feature_shape
        try:
            out = np.broadcast_shapes(scale.shape, shape)
        except ValueError as e:
            raise ValueError(f"{name} of shape {scale.shape} does not broadcast to the noise "
                             f"shape {shape}") from e
        if out != shape:
            raise ValueError(f"{name} of shape {scale.shape} does not broadcast to the noise "
                             f"shape {shape}")
        return np.broadcast_to(scale, shape)

    def _resolve_scale(self) -> np.ndarray:
        """Returns the per-example noise scale (float64, broadcasting to the noise shape)."""
        raise NotImplementedError

    def build(self, input_shape: Sequence[Optional[int]]) -> None:
        self._feature_shape = self._noise_feature_shape(input_shape)
        # AdLM Alg. 1 l.13 / StoBatch Lemma 3: the noise is divided by |L| (m).
        scale = self._resolve_scale() / self.batch_divisor
        _check_float32_scale(np.asarray(scale, dtype=np.float64), self._scale_arg,
                             self.allow_zero)
        self._noise_scale = np.ascontiguousarray(scale, dtype=np.float64)
        # Counter of fresh draws; every replica reads the same value, so per-batch noise is
        # shared by the global batch, and restoring a checkpoint resumes the stream.
        self.draw_counter = self.add_weight(
            shape=(), initializer="zeros", dtype="int64", trainable=False,
            aggregation="only_first_replica", name="draw_counter")
        if self.noise_mode == "once":
            once_seed = root_seed(self._base_seed, _TAG_ONCE)

            def _init(shape: Any, dtype: Any = None) -> tf.Tensor:
                return self._sample(shape, once_seed, dtype=tf.float32)

            # Design principle 3: noise drawn once is state, saved with the model.
            self.fixed_noise = self.add_weight(
                shape=(1,) + self._feature_shape, initializer=_init, dtype="float32",
                trainable=False, name="fixed_noise")
        super().build(input_shape)

    # ------------------------------------------------------------------ sampling

    def _standard(self, shape: Any, seed: tf.Tensor) -> tf.Tensor:
        """Unit-scale float32 noise of `shape` (tails as far as the float64 samplers')."""
        raise NotImplementedError

    def _sample(self, shape: Any, seed: tf.Tensor, dtype: Any, factor: float = 1.0) -> tf.Tensor:
        """Draws noise of `shape` with the layer's per-feature scale times `factor`.

        One stateless op draws the words for the whole batch (unit_gaussian /
        unit_laplace: float32 arithmetic, tails beyond the float64 samplers'); the unit draw
        is cast to the input's dtype and then multiplied by the per-feature scale held as a
        constant of the feature shape (broadcast over the batch, never materialised).
        """
        dtype = tf.as_dtype(dtype)
        z = tf.cast(self._standard(shape, seed), dtype)
        scale = self._noise_scale * factor
        if np.all(scale == scale.flat[0]):
            return z * tf.constant(scale.flat[0], dtype=dtype)
        return z * tf.constant(scale.astype(dtype.as_numpy_dtype))

    def _next_seed(self, tag: int, per_replica: bool) -> tf.Tensor:
        """A fresh stateless seed [2]; distinct per call, and per replica if asked."""
        counter = self.draw_counter.value
        seed = tf.random.experimental.stateless_fold_in(root_seed(self._base_seed, tag), counter)
        if per_replica:
            ctx = tf.distribute.get_replica_context()
            if ctx is not None and ctx.num_replicas_in_sync > 1:
                seed = tf.random.experimental.stateless_fold_in(
                    seed, tf.cast(ctx.replica_id_in_sync_group, tf.int64))
            index = getattr(_EXAMPLE, "index", None)
            if index is not None:
                seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(index, tf.int64))
        self.draw_counter.assign_add(1)
        return seed

    def _fresh_per_example(self, inputs: tf.Tensor, tag: int, factor: float) -> tf.Tensor:
        batch = tf.shape(inputs)[:1]
        shape = tf.concat([batch, tf.constant(self._feature_shape, dtype=tf.int32)], axis=0)
        return self._sample(shape, self._next_seed(tag, per_replica=True), inputs.dtype, factor)

    def _fused_applies(self, inputs: tf.Tensor) -> bool:
        """Whether this call adds its fresh draw with the fused kernel (see NOISE_KERNELS).

        Only for float32 inputs whose noise has the input's full shape (no shared axes), and
        never inside example_index_scope (per-example calls under tf.vectorized_map, which
        has no rule for the compiled op).
        """
        return (kernels.get_noise_kernel() == "fused" and inputs.dtype == tf.float32
                and self._fused_distribution() is not None
                and getattr(_EXAMPLE, "index", None) is None
                and tuple(inputs.shape[1:]) == self._feature_shape)

    def _fused_distribution(self) -> Optional[str]:
        """The fused kernel's distribution for this layer's unit draw (None: not supported)."""
        standard = type(self)._standard
        if standard is LaplaceNoise._standard:
            return "laplace"
        if standard in (GaussianNoise._standard, HeterogeneousGaussianNoise._standard):
            return "gaussian"
        return None

    def _add_fresh(self, inputs: tf.Tensor, tag: int, factor: float) -> tf.Tensor:
        """inputs + a fresh per-example draw (scaled by `factor`)."""
        if not self._fused_applies(inputs):
            return inputs + self._fresh_per_example(inputs, tag, factor)
        seed = self._next_seed(tag, per_replica=True)
        key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)
        scale = self._noise_scale * factor
        if np.all(scale == scale.flat[0]):
            flat = np.array([scale.flat[0]], dtype=np.float32)
        else:
            flat = np.broadcast_to(scale, self._feature_shape).astype(np.float32).reshape(-1)
        return kernels.load().tfdp_noisy_add(inputs, tf.constant(flat), key, counter,
                                             distribution=self._fused_distribution())

    # ------------------------------------------------------------------ call

    def _assert_in_bounds(self, inputs: tf.Tensor) -> tf.Tensor:
        """Run-time check of the input range the sensitivity bound assumes (design principle 4)."""
        if self.input_bounds is None:
            return inputs
        low, high = self.input_bounds
        checks = [
            tf.debugging.assert_greater_equal(
                inputs, tf.cast(low, inputs.dtype),
                message=f"{self.name}: input below input_bounds low={low}"),
            tf.debugging.assert_less_equal(
                inputs, tf.cast(high, inputs.dtype),
                message=f"{self.name}: input above input_bounds high={high}"),
        ]
        with tf.control_dependencies(checks):
            return tf.identity(inputs)

    def call(self, inputs: Any, training: Optional[bool] = None) -> tf.Tensor:
        inputs = tf.convert_to_tensor(inputs)
        if training or self.inference_noise:
            inputs = self._assert_in_bounds(inputs)
        if training:
            if self.noise_mode == "once":
                noise = tf.cast(self.fixed_noise.value, inputs.dtype)
            elif self.noise_mode == "per_batch":
                # AdLM code release's batch_shared_per_step: one draw shared by the whole batch.
                shape = (1,) + self._feature_shape
                noise = self._sample(shape, self._next_seed(_TAG_FRESH, per_replica=False),
                                     inputs.dtype)
            else:
                return self._add_fresh(inputs, _TAG_FRESH, 1.0)
            return inputs + noise
        if not self.inference_noise:
            return inputs
        # Inference noise: every row gets an independent fresh draw (one Monte-Carlo draw per
        # row), scaled by inference_fresh_scale (StoBatch Alg. 3: 1/psi), plus the stored
        # draw in "once" mode if inference_fixed_noise (StoBatch Alg. 3; HGM uses False).
        out = inputs
        if self.noise_mode == "once" and self.inference_fixed_noise:
            out = out + tf.cast(self.fixed_noise.value, inputs.dtype)
        if self.inference_fresh_scale > 0.0:
            out = self._add_fresh(out, _TAG_INFERENCE, self.inference_fresh_scale)
        return out

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        return mask

    @property
    def noise_scale(self) -> np.ndarray:
        """Per-example noise scale (float64, after `batch_divisor`); available once built."""
        if self._feature_shape is None:
            raise ValueError("the layer is not built yet: call it on an input first")
        return np.broadcast_to(self._noise_scale, self._feature_shape).copy()

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({
            "noise_mode": self.noise_mode,
            "seed": self.seed,
            "inference_noise": self.inference_noise,
            "batch_divisor": self.batch_divisor,
            "shared_axes": list(self.shared_axes) or None,
            "inference_fresh_scale": self.inference_fresh_scale,
            "inference_fixed_noise": self.inference_fixed_noise,
            "input_bounds": None if self.input_bounds is None else list(self.input_bounds),
            "allow_zero": self.allow_zero,
        })
        return config


def _as_config_value(arr: np.ndarray) -> Any:
    return float(arr) if arr.ndim == 0 else arr.tolist()


@keras.saving.register_keras_serializable(package="tfdp")
class LaplaceNoise(_NoiseLayer):
    """Adds Laplace noise: AdLM's input / first-affine-layer perturbation and StoBatch's chi1, chi2.

    Perturbing the input of an affine layer perturbs its output, (x + n) W = x W + n W
    (AdLM Lemma 4), so placing this layer before the first dense/conv layer realises the
    "noisy affine transformation"; placing it after the affine layer adds noise to the
    pre-activation (StoBatch Lemma 3, h1_bar = h1 + 2 chi2 / m: pass scale = 2 Delta_R / eps1
    and batch_divisor = m).

    Noise is applied when the layer is called with `training=True` (a Python bool, as Keras
    passes it), or at inference when `inference_noise` is on (see `set_inference_noise`).
    Modes:

    * "per_example": an independent draw for every example on every call (fresh per
      replica under a tf.distribute strategy).
    * "per_batch": one draw per call shared by the whole (global) batch; AdLM's
      batch_shared_per_step with `batch_divisor = |L|`.
    * "once": drawn when the layer is built and kept in the non-trainable weight
      `fixed_noise`, so checkpoints and `.keras` files carry it and a restore never
      redraws it (AdLM shared_fixed, StoBatch chi1 / chi2).

    Args:
        scale: Laplace scale b >= 0 (density exp(-|v|/b)/2b); a scalar or a per-feature
            array broadcasting to the input's feature shape (with `shared_axes` set to 1),
            e.g. AdLM's Delta_h0 / (beta_j eps2).
        noise_mode: "per_example", "per_batch" or "once".
        seed: int in [0, 2^128) for reproducible noise, None for a 128-bit key from OS entropy.
            Give every layer its own seed.
        inference_noise: whether noise is also applied when not training.
        batch_divisor: the noise is divided by this factor (AdLM |L|, StoBatch m).
        shared_axes: feature axes (1-based, axis 0 is the batch) along which one draw is
            shared, e.g. (3,) to share a pixel's noise across RGB channels (AdLM CIFAR code).
        inference_fresh_scale: multiplier on the fresh inference noise (StoBatch 1/psi); 0
            draws none.
        inference_fixed_noise: in "once" mode, whether the stored draw is also added at
            inference.
        input_bounds: optional (low, high): whenever noise is applied, a run-time assertion
            checks that every input lies in [low, high], the range the sensitivity bound
            assumes (AdLM Lemma 3, StoBatch Lemma 2); a violation raises
            tf.errors.InvalidArgumentError instead of being clipped silently.
        allow_zero: accept a scale that is 0 (or underflows to 0 in float32 after
            `batch_divisor`) somewhere, i.e. no noise there; only for a non-private ablation.
            Without it such a scale, and any scale overflowing float32, raise ValueError.
        **kwargs: Keras layer arguments (name, dtype, ...).

    Raises:
        ValueError: on a bad argument, naming it.
    """

    _scale_arg = "scale"

    def __init__(self, scale: Any, **kwargs: Any) -> None:
        self.scale = _check_scale(scale, "scale", kwargs.get("allow_zero", False))
        super().__init__(**kwargs)

    def _resolve_scale(self) -> np.ndarray:
        return self._check_scale_shape(self.scale, "scale")

    def _standard(self, shape: Any, seed: tf.Tensor) -> tf.Tensor:
        return unit_laplace(shape, seed)

    def get_config(self) -> dict:
        config = super().get_config()
        config["scale"] = _as_config_value(self.scale)
        return config


@keras.saving.register_keras_serializable(package="tfdp")
class GaussianNoise(_NoiseLayer):
    """Adds N(0, stddev^2) noise (PixelDP-style robustness noise, uniform HGM).

    Same modes and switches as `LaplaceNoise`; unlike `keras.layers.GaussianNoise` it
    supports per-feature standard deviations, the "once" mode and inference noise.

    Args:
        stddev: standard deviation >= 0; a scalar or per-feature array.
        **kwargs: the `LaplaceNoise` keyword arguments (noise_mode, seed, ...).

    Raises:
        ValueError: on a bad argument, naming it.
    """

    _scale_arg = "stddev"

    def __init__(self, stddev: Any, **kwargs: Any) -> None:
        self.stddev = _check_scale(stddev, "stddev", kwargs.get("allow_zero", False))
        super().__init__(**kwargs)

    def _resolve_scale(self) -> np.ndarray:
        return self._check_scale_shape(self.stddev, "stddev")

    def _standard(self, shape: Any, seed: tf.Tensor) -> tf.Tensor:
        return unit_gaussian(shape, seed)

    def get_config(self) -> dict:
        config = super().get_config()
        config["stddev"] = _as_config_value(self.stddev)
        return config


@keras.saving.register_keras_serializable(package="tfdp")
class HeterogeneousGaussianNoise(_NoiseLayer):
    """Adds heterogeneous Gaussian noise: unit k gets std sigma * sqrt(K r_k) (HGM Theorem 3).

    Secure-SGD puts this noise on the pre-activation of the first hidden layer (HGM Eq. 8):
    place the layer right after the first convolution (bias included), before the ReLU.
    K is the number of noised units, i.e. the size of `r` (all positions x channels).
    `sigma` is the calibrated noise multiplier, e.g. sigma_r = mult_HGM(eps_r, delta_r) *
    Delta_f * L from `tfdp.mechanisms.hgm_sigma` (HGM Alg. 1 line 3, Eq. 10). tfdp's default
    training noise is fresh per example ("per_example"); the paper/code's single draw is
    "once" (docs/hgm.md, "Design decisions"). For certification, turn inference noise on with
    `inference_fixed_noise=False` (test-time noise is always fresh, per Monte-Carlo draw).

    Args:
        sigma: noise multiplier sigma >= 0.
        r: redistribution vector (entries > 0 summing to 1), shaped like the noised
            features or flat with that many entries; None means uniform r (std sigma).
        **kwargs: the `LaplaceNoise` keyword arguments (noise_mode, seed, ...).

    Raises:
        ValueError: on a bad argument, naming it.
    """

    _scale_arg = "sigma"

    def __init__(self, sigma: float, r: Any = None, **kwargs: Any) -> None:
        self.sigma = _check_nonneg_float(sigma, "sigma")
        _check_scale(self.sigma, "sigma", kwargs.get("allow_zero", False))
        if r is None:
            self.r = None
        else:
            self.r = mechanisms.check_redistribution(r, "r")  # sum 1 (HGM Thm 3), entries > 0
        super().__init__(**kwargs)

    def _resolve_scale(self) -> np.ndarray:
        if self.r is None:
            return np.full(self._feature_shape, self.sigma)  # uniform r: HGM reduces to EGM (Thm 3)
        size = int(np.prod(self._feature_shape))
        if self.r.size != size:
            raise ValueError(f"r has {self.r.size} entries, but the layer noises {size} units "
                             f"(noise shape {self._feature_shape})")
        std = mechanisms.heterogeneous_stddevs(sigma=self.sigma, r=self.r.reshape(-1))  # HGM Thm 3
        return np.asarray(std, dtype=np.float64).reshape(self._feature_shape)

    def _standard(self, shape: Any, seed: tf.Tensor) -> tf.Tensor:
        return unit_gaussian(shape, seed)

    def get_config(self) -> dict:
        config = super().get_config()
        config["sigma"] = self.sigma
        config["r"] = None if self.r is None else self.r.tolist()
        return config
