"""AdLM's Keras layers: the first layer's bias offset, crop + standardise, batch-statistics norm.

The registered names stay `tfdp_adlm>BiasNoise`, `tfdp_adlm>CropStandardize` and
`tfdp_adlm>BatchStatNorm`, so models saved when these classes lived in `tfdp.models.adlm` (AdLM's models now live in
`tfdp.papers.adlm.models`) load unchanged: Keras finds them by their registered names.

BiasNoise draws no noise itself: the AdLM trainer draws its offset once, at setup, with
`tfdp.mechanisms.sample_laplace` from the run's setup generator and keeps it in the setup
state; the layer only holds and applies it (docs/layers-and-losses.md, "AdLM layers").
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

__all__ = ["BatchStatNorm", "BiasNoise", "CropStandardize"]


@keras.saving.register_keras_serializable(package="tfdp_adlm")
class BiasNoise(keras.layers.Layer):
    """Adds a fixed per-channel offset to the first layer's pre-activation while training.

    AdLM Algorithm 1 line 14: bbar = b + Lap(Delta_h0/eps2)/|L|, drawn once. The offset
    lives in a non-trainable variable (so checkpoints carry it) and is not applied at
    inference. It is data-independent and has no privacy role (it does not depend on the data).

    Args:
        channels: number of channels (first-layer filters).
        **kwargs: Keras layer arguments.
    """

    def __init__(self, channels: int, **kwargs: Any) -> None:
        if not isinstance(channels, (int, np.integer)) or channels < 1:
            raise ValueError(f"channels must be an int >= 1, got {channels!r}")
        super().__init__(**kwargs)
        self.channels = int(channels)
        self.offset = self.add_weight(name="offset", shape=(self.channels,),
                                      initializer="zeros", trainable=False)

    def call(self, inputs: Any, training: bool = False) -> tf.Tensor:
        if training:
            return inputs + tf.cast(self.offset, inputs.dtype)
        return inputs

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "channels": self.channels}


@keras.saving.register_keras_serializable(package="tfdp_adlm")
class CropStandardize(keras.layers.Layer):
    """Crop to `size` x `size` (random while training, central at inference), then per-image
    standardisation (AdLM code release, CIFAR-10 input pipeline after the noise).

    Args:
        size: crop height and width.
        seed: seed of the random crop offsets (None: OS entropy).
        **kwargs: Keras layer arguments.
    """

    def __init__(self, size: int, seed: int | None = None, **kwargs: Any) -> None:
        if not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"size must be an int >= 1, got {size!r}")
        super().__init__(**kwargs)
        self.size = int(size)
        self.seed = seed
        self._seed_generator = keras.random.SeedGenerator(seed)

    def call(self, inputs: Any, training: bool = False) -> tf.Tensor:
        x = tf.convert_to_tensor(inputs)
        h, w, s = x.shape[1], x.shape[2], self.size
        if training:
            batch = tf.shape(x)[0]
            oy = keras.random.randint((batch,), 0, h - s + 1, seed=self._seed_generator)
            ox = keras.random.randint((batch,), 0, w - s + 1, seed=self._seed_generator)
            oy = tf.cast(oy, tf.float32)
            ox = tf.cast(ox, tf.float32)
            # Integer-aligned boxes: crop_and_resize samples exactly the crop's pixels.
            boxes = tf.stack([oy / (h - 1), ox / (w - 1), (oy + s - 1) / (h - 1),
                              (ox + s - 1) / (w - 1)], axis=1)
            x = tf.image.crop_and_resize(x, boxes, tf.range(batch), [s, s], method="nearest")
        else:
            top, left = (h - s) // 2, (w - s) // 2
            x = x[:, top:top + s, left:left + s, :]
        return tf.image.per_image_standardization(x)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return (input_shape[0], self.size, self.size, input_shape[-1])

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"size": self.size, "seed": self.seed})
        return config


@keras.saving.register_keras_serializable(package="tfdp_adlm")
class BatchStatNorm(keras.layers.Layer):
    """Batch normalisation that always uses the current batch's statistics (no moving averages).

    AdLM code release: batch norm with batch statistics at training and at test time (the
    test set is evaluated in large batches). y = gamma * (x - mean_B) / sqrt(var_B + eps) + beta
    over all axes but the last. Predictions depend on the batch: evaluate in large batches.

    Args:
        epsilon: variance stabiliser > 0.
        **kwargs: Keras layer arguments.
    """

    def __init__(self, epsilon: float = 1e-3, **kwargs: Any) -> None:
        if not (isinstance(epsilon, (int, float)) and epsilon > 0):
            raise ValueError(f"epsilon must be a number > 0, got {epsilon!r}")
        super().__init__(**kwargs)
        self.epsilon = float(epsilon)

    def build(self, input_shape: Any) -> None:
        channels = int(input_shape[-1])
        self.gamma = self.add_weight(name="gamma", shape=(channels,), initializer="ones")
        self.beta = self.add_weight(name="beta", shape=(channels,), initializer="zeros")

    def call(self, inputs: Any) -> tf.Tensor:
        x = tf.convert_to_tensor(inputs)
        axes = list(range(x.shape.rank - 1))
        mean, var = tf.nn.moments(x, axes=axes, keepdims=True)
        return tf.nn.batch_normalization(x, mean, var, self.beta, self.gamma, self.epsilon)

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict:
        return {**super().get_config(), "epsilon": self.epsilon}
