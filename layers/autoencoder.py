"""StoBatch's DP auto-encoder first layer: conv encoder, latent Laplace noise, tied decoder."""

from __future__ import annotations

from typing import Any, Optional

import keras
import numpy as np
import tensorflow as tf

from layers.bounding import Clip
from layers.noise import LaplaceNoise
from layers.noise_checks import _check_nonneg_float
from tfdp import losses


@keras.saving.register_keras_serializable(package="tfdp")
class DPAutoEncoderConv(keras.layers.Layer):
    """First affine layer theta1 of StoBatch, trained as an auto-encoder (StoBatch Thm 1).

    Encoder (the StoBatch authors' code release; the paper gives no decoder details):
        h = clip(BN(ReLU(conv_stride_s(x_bar; W1) + b1)), -1, 1),
        h_bar = h + 2 chi2 / m,
    where chi2 ~ Lap(Delta_R / eps1) per neuron of every feature map (as the code release
    draws it; the paper writes one feature map). Pass
    `noise_scale = 2 * Delta_R / eps1` and `batch_divisor = m`; the noise is a `LaplaceNoise`
    sub-layer ("once" by default: drawn once and saved, StoBatch Alg. 1 line 1).

    Decoder (`reconstruct`): nearest-neighbour upsampling of h_bar by the stride, cropped to
    the input size, then a stride-1 SAME convolution with the tied kernel (W1 with its
    spatial axes swapped and its in/out channels swapped), optional bias, ReLU: the
    reconstruction logits z. `reconstruction_loss` is StoBatch's R_bar
    (`tfdp.losses.taylor_reconstruction_loss`). Only this objective should update the
    layer's variables; stop the classification gradient at h_bar in the training-loss
    forward pass only (the attacks need the input gradient through this layer).

    Args:
        filters: C_out of W1.
        kernel_size: k (int) of the square kernel.
        noise_scale: Laplace scale of the latent noise before `batch_divisor` (2 Delta_R /
            eps1), >= 0.
        strides: s (int >= 1).
        batch_divisor: m.
        noise_mode: mode of the latent noise layer ("once" per StoBatch).
        seed: seed of the latent noise (None: OS entropy).
        inference_noise: inference noise of the latent noise layer.
        inference_fresh_scale: StoBatch 1/psi for fresh inference noise.
        batch_norm: apply BatchNormalization after the ReLU (reference code).
        decoder_bias: give the decoder a bias (reference code: MNIST only).
        allow_zero: accept noise_scale 0 (no latent noise: a non-private ablation only).
        **kwargs: Keras layer arguments.

    Raises:
        ValueError: on a bad argument, naming it.
    """

    def __init__(self, filters: int, kernel_size: int, noise_scale: float, *, strides: int = 1,
                 batch_divisor: float = 1.0, noise_mode: str = "once", seed: Optional[int] = None,
                 inference_noise: bool = False, inference_fresh_scale: float = 1.0,
                 batch_norm: bool = True, decoder_bias: bool = False, allow_zero: bool = False,
                 **kwargs: Any) -> None:
        for name, value in (("filters", filters), ("kernel_size", kernel_size),
                            ("strides", strides)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.filters, self.kernel_size, self.strides = int(filters), int(kernel_size), int(strides)
        self.noise_scale = _check_nonneg_float(noise_scale, "noise_scale")
        self.batch_norm = bool(batch_norm)
        self.decoder_bias = bool(decoder_bias)
        super().__init__(**kwargs)
        self.conv = keras.layers.Conv2D(self.filters, self.kernel_size, strides=self.strides,
                                        padding="same", name="encoder_conv")
        self.bn = keras.layers.BatchNormalization(name="encoder_bn") if self.batch_norm else None
        self.clip = Clip(-1.0, 1.0, name="encoder_clip")  # StoBatch: h1 in [-1, 1]
        self.noise = LaplaceNoise(self.noise_scale, noise_mode=noise_mode, seed=seed,
                                  batch_divisor=batch_divisor, inference_noise=inference_noise,
                                  inference_fresh_scale=inference_fresh_scale,
                                  allow_zero=allow_zero, name="latent_noise")

    def build(self, input_shape: Any) -> None:
        if len(input_shape) != 4 or input_shape[-1] is None:
            raise ValueError(f"input must be [batch, height, width, channels], got {input_shape}")
        self._in_channels = int(input_shape[-1])
        self.conv.build(input_shape)
        out_shape = self.conv.compute_output_shape(input_shape)
        if self.bn is not None:
            self.bn.build(out_shape)
        self.noise.build(out_shape)
        if self.decoder_bias:
            self.dec_bias = self.add_weight(shape=(self._in_channels,), initializer="zeros",
                                            name="decoder_bias")
        super().build(input_shape)

    def encode(self, inputs: Any, training: Optional[bool] = None) -> tf.Tensor:
        """h = clip(BN(ReLU(conv(x) + b1)), -1, 1), before the latent noise."""
        h = tf.nn.relu(self.conv(inputs))
        if self.bn is not None:
            h = self.bn(h, training=training)
        return self.clip(h)

    def call(self, inputs: Any, training: Optional[bool] = None) -> tf.Tensor:
        return self.noise(self.encode(inputs, training=training), training=training)

    def reconstruct(self, h_bar: Any, output_shape: Any) -> tf.Tensor:
        """Tied-weight decoder logits z, shaped like the encoder input (StoBatch code release).

        Args:
            h_bar: encoder output [batch, H1, W1, filters].
            output_shape: the encoder input's shape (its spatial size is the target).

        Returns:
            Reconstruction logits [batch, H, W, C_in].
        """
        h = tf.convert_to_tensor(h_bar)
        s = self.strides
        if s > 1:
            h = tf.repeat(tf.repeat(h, s, axis=1), s, axis=2)  # nearest-neighbour upsampling
        height, width = output_shape[1], output_shape[2]
        h = h[:, :height, :width, :]
        kernel = tf.transpose(self.conv.kernel, [1, 0, 3, 2])  # tied: swap spatial and in/out
        z = tf.nn.conv2d(h, tf.cast(kernel, h.dtype), strides=1, padding="SAME")
        if self.decoder_bias:
            z = z + tf.cast(self.dec_bias, z.dtype)
        return tf.nn.relu(z)

    def reconstruction_loss(self, x_bar: Any, training: Optional[bool] = True,
                            reduction: str = "sum") -> tf.Tensor:
        """StoBatch R_bar of a noisy batch: |log 2 + z (1/2 - x_bar)| summed (Eq. 6; code's |.|).

        Args:
            x_bar: perturbed inputs [batch, H, W, C].
            training: passed to the encoder (BN mode, latent noise).
            reduction: as in `tfdp.losses.taylor_reconstruction_loss`.

        Returns:
            The loss tensor.
        """
        x_bar = tf.convert_to_tensor(x_bar)
        h_bar = self(x_bar, training=training)
        z = self.reconstruct(h_bar, tf.shape(x_bar))
        return losses.taylor_reconstruction_loss(z, x_bar, reduction=reduction)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return self.conv.compute_output_shape(input_shape)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({
            "filters": self.filters, "kernel_size": self.kernel_size,
            "noise_scale": self.noise_scale, "strides": self.strides,
            "batch_divisor": self.noise.batch_divisor, "noise_mode": self.noise.noise_mode,
            "seed": self.noise.seed, "inference_noise": self.noise.inference_noise,
            "inference_fresh_scale": self.noise.inference_fresh_scale,
            "batch_norm": self.batch_norm, "decoder_bias": self.decoder_bias,
            "allow_zero": self.noise.allow_zero,
        })
        return config
