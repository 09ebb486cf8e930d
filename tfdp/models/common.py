"""Generic small Keras models mapping images to logits (baselines and tests)."""

from __future__ import annotations

from typing import Sequence

import keras

from tfdp import checks


def small_cnn(input_shape: Sequence[int], num_classes: int, *,
              filters: Sequence[int] = (16, 32), dense_units: int = 64,
              activation: str = "relu", name: str = "small_cnn") -> keras.Model:
    """A small convolutional network: [Conv 3x3 + MaxPool 2x2] per filter count, Dense, logits.

    No batch normalisation (it mixes examples in a batch, which per-example DP-SGD forbids),
    no dropout (so runs are reproducible from the seed alone).

    Args:
      input_shape: (height, width, channels) of one example.
      num_classes: number of output logits.
      filters: output channels of each convolution block.
      dense_units: width of the hidden dense layer (0 for none).
      activation: activation of the hidden layers.
      name: model name.

    Returns:
      An uncompiled keras.Model mapping inputs to logits.

    Raises:
      ValueError: if `input_shape` or `num_classes` is unusable.
    """
    checks.check_shape(input_shape, "input_shape")
    checks.check_int(num_classes, "num_classes", minimum=2, allow_integral_float=True)
    inputs = keras.Input(shape=tuple(int(d) for d in input_shape))
    h = inputs
    if len(input_shape) == 2:
        h = keras.layers.Reshape(tuple(input_shape) + (1,))(h)
    for f in filters:
        h = keras.layers.Conv2D(int(f), 3, padding="same", activation=activation)(h)
        if h.shape[1] >= 2 and h.shape[2] >= 2:
            h = keras.layers.MaxPooling2D(2)(h)
    h = keras.layers.Flatten()(h)
    if dense_units:
        h = keras.layers.Dense(int(dense_units), activation=activation)(h)
    logits = keras.layers.Dense(int(num_classes), name="logits")(h)
    return keras.Model(inputs, logits, name=name)


def mlp(input_shape: Sequence[int], num_classes: int, *, hidden: Sequence[int] = (64,),
        activation: str = "relu", name: str = "mlp") -> keras.Model:
    """A multilayer perceptron on flattened inputs.

    Args:
      input_shape: shape of one example.
      num_classes: number of output logits.
      hidden: widths of the hidden layers.
      activation: activation of the hidden layers.
      name: model name.

    Returns:
      An uncompiled keras.Model mapping inputs to logits.

    Raises:
      ValueError: if `input_shape` or `num_classes` is unusable.
    """
    checks.check_shape(input_shape, "input_shape")
    checks.check_int(num_classes, "num_classes", minimum=2, allow_integral_float=True)
    inputs = keras.Input(shape=tuple(int(d) for d in input_shape))
    h = keras.layers.Flatten()(inputs)
    for units in hidden:
        h = keras.layers.Dense(int(units), activation=activation)(h)
    logits = keras.layers.Dense(int(num_classes), name="logits")(h)
    return keras.Model(inputs, logits, name=name)
