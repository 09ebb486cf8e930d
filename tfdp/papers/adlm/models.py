"""AdLM's MNIST and CIFAR-10 networks (bounded layers, Taylor-loss output) and auxiliary models."""

from __future__ import annotations

from typing import Any, Sequence

import keras

import layers as tfdp_layers
from tfdp import checks
# The AdLM layers live in layers.adlm; saved models name this module in their configs.
from layers.adlm import BatchStatNorm, BiasNoise, CropStandardize  # pylint: disable=unused-import

BOUND_MODES = ("paper_lrn_minmax", "bn_clip")
ARCHITECTURES = ("mnist", "cifar10")
AUX_KINDS = ("same", "mlp")

# Names of the layers the trainer looks up.
FIRST_LAYER = "adlm_h0"
HIDDEN_LAYER = "adlm_hk"     # last hidden layer after bounding (h_(k))
OUTPUT_LAYER = "adlm_logits"
BIAS_NOISE_LAYER = "adlm_bias_noise"


BN_EVAL_MODES = ("moving", "batch")


def _batch_norm(bn_eval: str, momentum: float) -> keras.layers.Layer:
    """Keras batch norm (moving statistics at inference) or BatchStatNorm (batch statistics)."""
    if bn_eval == "batch":
        return BatchStatNorm(epsilon=1e-3)
    if bn_eval != "moving":
        raise ValueError(f"bn_eval must be one of {BN_EVAL_MODES}, got {bn_eval!r}")
    return keras.layers.BatchNormalization(epsilon=1e-3, momentum=momentum)


def _dense_init(stddev: float) -> dict:
    return {"kernel_initializer": keras.initializers.TruncatedNormal(stddev=stddev),
            "bias_initializer": keras.initializers.Constant(0.1)}


def mnist_model(input_shape: Sequence[int] = (28, 28, 1), num_classes: int = 10, *,
                bound_mode: str = "bn_clip", hidden_units: int = 25, output_bias: bool = True,
                bias_noise: bool = False, bn_momentum: float = 0.9, bn_eval: str = "moving",
                name: str = "adlm_mnist") -> keras.Model:
    """AdLM's MNIST network (the AdLM paper and its code release, MNIST/AdLM.py).

    conv 5x5/32 SAME -> ReLU -> [bounded LRN] -> max-pool 2 -> conv 5x5/64 SAME -> ReLU ->
    [bounded LRN] -> max-pool 2 -> flatten -> FC hidden_units -> bounding -> FC num_classes.
    Bounding of the hidden FC layer: "bn_clip" = batch norm -> ReLU -> clip [0, 1] (code
    release, 130,831 parameters); "paper_lrn_minmax" = ReLU -> per-batch min-max (AdLM paper,
    130,781 parameters) with the bounded LRN (Eq. 22) after each convolution.
    Weights start from a truncated normal with sd 0.1 and biases at 0.1 (code release).

    Args:
        input_shape: (28, 28, 1) for MNIST; any (H, W, C) works.
        num_classes: M.
        bound_mode: one of BOUND_MODES.
        hidden_units: |h_(k)| (25 in the paper).
        output_bias: whether the output layer has a bias (the code release has one).
        bias_noise: insert a BiasNoise layer after the first convolution (no privacy role).
        bn_momentum: batch-norm moving-average momentum (bn_eval="moving").
        bn_eval: "moving" (Keras batch norm, moving statistics at inference) or "batch"
            (batch statistics also at inference, as the code release).
        name: model name.

    Returns:
        A keras.Model mapping clean inputs to the logits z.

    Raises:
        ValueError: on a bad argument.
    """
    shape = checks.check_shape(input_shape, "input_shape (height, width, channels)", rank=3)
    checks.check_int(num_classes, "num_classes", minimum=2, allow_integral_float=True)
    if bound_mode not in BOUND_MODES:
        raise ValueError(f"bound_mode must be one of {BOUND_MODES}, got {bound_mode!r}")
    paper = bound_mode == "paper_lrn_minmax"
    inputs = keras.Input(shape=shape)
    h = keras.layers.Conv2D(32, 5, padding="same", name=FIRST_LAYER, **_dense_init(0.1))(inputs)
    if bias_noise:
        h = BiasNoise(32, name=BIAS_NOISE_LAYER)(h)
    h = keras.layers.ReLU()(h)
    if paper:
        h = tfdp_layers.BoundedLRN()(h)  # AdLM Eq. 22
    h = keras.layers.MaxPooling2D(2)(h)
    h = keras.layers.Conv2D(64, 5, padding="same", **_dense_init(0.1))(h)
    h = keras.layers.ReLU()(h)
    if paper:
        h = tfdp_layers.BoundedLRN()(h)
    h = keras.layers.MaxPooling2D(2)(h)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(int(hidden_units), **_dense_init(0.1))(h)
    if paper:
        h = keras.layers.ReLU()(h)
        h = tfdp_layers.MinMaxBound(name=HIDDEN_LAYER)(h)  # AdLM per-batch min-max
    else:
        # AdLM code release: batch norm (eps 1e-3) -> ReLU -> clip to [0, 1].
        h = _batch_norm(bn_eval, bn_momentum)(h)
        h = keras.layers.ReLU()(h)
        h = tfdp_layers.Clip(0.0, 1.0, name=HIDDEN_LAYER)(h)
    logits = keras.layers.Dense(int(num_classes), use_bias=bool(output_bias), name=OUTPUT_LAYER,
                                **_dense_init(0.1))(h)
    return keras.Model(inputs, logits, name=name)


def cifar10_model(input_shape: Sequence[int] = (32, 32, 3), num_classes: int = 10, *,
                  bound_mode: str = "bn_clip", hidden_units: int = 30, crop: int = 20,
                  output_bias: bool = True, bias_noise: bool = False, bn_momentum: float = 0.9,
                  bn_eval: str = "moving", seed: int | None = None, name: str = "adlm_cifar10") -> keras.Model:
    """AdLM's CIFAR-10 network (the AdLM paper and its code release, Cifar10/AdLMCNN_CIFAR.py).

    (noisy 32x32 input) -> crop to crop x crop (random while training, central at
    inference) and per-image standardisation -> conv 3x3/128 stride 2 -> ReLU -> BN ->
    conv 5x5/128 -> ReLU -> concat with the first block (256 channels) -> BN ->
    conv 5x5/256 -> ReLU -> BN -> avg-pool 2 -> FC hidden_units -> BN -> clip [-1, 1] ->
    FC num_classes ("bn_clip", 2,245,648 parameters). "paper_lrn_minmax" replaces each
    batch norm after a convolution by the bounded LRN (Eq. 22) and the FC bounding by
    ReLU -> per-batch min-max.

    Args:
        input_shape: (32, 32, 3) for CIFAR-10.
        num_classes: M.
        bound_mode: one of BOUND_MODES.
        hidden_units: |h_(k)| (30 in the paper).
        crop: crop size (20 in the code release).
        output_bias: whether the output layer has a bias.
        bias_noise: insert a BiasNoise layer after the first convolution.
        bn_momentum: batch-norm moving-average momentum.
        bn_eval: "moving" or "batch" (see mnist_model).
        seed: seed of the random crops.
        name: model name.

    Returns:
        A keras.Model mapping clean inputs to logits.

    Raises:
        ValueError: on a bad argument.
    """
    shape = checks.check_shape(input_shape, "input_shape (height, width, channels)", rank=3)
    checks.check_int(num_classes, "num_classes", minimum=2, allow_integral_float=True)
    if bound_mode not in BOUND_MODES:
        raise ValueError(f"bound_mode must be one of {BOUND_MODES}, got {bound_mode!r}")
    if not 1 <= int(crop) <= min(shape[0], shape[1]):
        raise ValueError(f"crop must lie in [1, {min(shape[:2])}], got {crop!r}")
    paper = bound_mode == "paper_lrn_minmax"

    def bound(t):
        if paper:
            return tfdp_layers.BoundedLRN()(t)
        return _batch_norm(bn_eval, bn_momentum)(t)

    xavier = {"kernel_initializer": "glorot_uniform", "bias_initializer": "zeros"}
    inputs = keras.Input(shape=shape)
    h = CropStandardize(int(crop), seed=seed)(inputs)
    h = keras.layers.Conv2D(128, 3, strides=2, padding="same", name=FIRST_LAYER, **xavier)(h)
    if bias_noise:
        h = BiasNoise(128, name=BIAS_NOISE_LAYER)(h)
    h1 = bound(keras.layers.ReLU()(h))
    h = keras.layers.Conv2D(128, 5, padding="same", **xavier)(h1)
    h = keras.layers.ReLU()(h)
    h = bound(keras.layers.Concatenate()([h1, h]))
    h = keras.layers.Conv2D(256, 5, padding="same", **xavier)(h)
    h = bound(keras.layers.ReLU()(h))
    h = keras.layers.AveragePooling2D(2)(h)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(int(hidden_units),
                           kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.04),
                           bias_initializer="zeros")(h)
    if paper:
        h = keras.layers.ReLU()(h)
        h = tfdp_layers.MinMaxBound(name=HIDDEN_LAYER)(h)
    else:
        # AdLM code release: batch norm -> identity ("maxout" with one unit per channel)
        # -> clip to [-1, 1].
        h = _batch_norm(bn_eval, bn_momentum)(h)
        h = tfdp_layers.Clip(-1.0, 1.0, name=HIDDEN_LAYER)(h)
    logits = keras.layers.Dense(
        int(num_classes), use_bias=bool(output_bias), name=OUTPUT_LAYER,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=1.0 / 30),
        bias_initializer="zeros")(h)
    return keras.Model(inputs, logits, name=name)


def mnist_per_example_model(input_shape: Sequence[int] = (28, 28, 1), num_classes: int = 10,
                             *, hidden_units: int = 25, name: str = "adlm_mnist_per_example"
                             ) -> keras.Model:
    """AdLM's MNIST network with per-example layers only: the pSGD baseline's network.

    The AdLM paper trains its pSGD baseline (DP-SGD) on the same network as AdLM. That
    network's batch normalisation mixes the examples of a batch, which per-example clipping
    forbids, so this variant drops it: conv 5x5/32 SAME -> ReLU -> max-pool 2 -> conv 5x5/64
    SAME -> ReLU -> max-pool 2 -> flatten -> FC hidden_units -> ReLU -> FC num_classes, with
    the code release's initialisation (truncated normal sd 0.1, biases 0.1).
    `--dpsgd_model=adlm_cnn` selects it.

    Raises:
        ValueError: on a bad argument.
    """
    shape = checks.check_shape(input_shape, "input_shape (height, width, channels)", rank=3)
    checks.check_int(num_classes, "num_classes", minimum=2, allow_integral_float=True)
    checks.check_int(hidden_units, "hidden_units", minimum=1)
    inputs = keras.Input(shape=shape)
    h = keras.layers.Conv2D(32, 5, padding="same", activation="relu", **_dense_init(0.1))(inputs)
    h = keras.layers.MaxPooling2D(2)(h)
    h = keras.layers.Conv2D(64, 5, padding="same", activation="relu", **_dense_init(0.1))(h)
    h = keras.layers.MaxPooling2D(2)(h)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(int(hidden_units), activation="relu", **_dense_init(0.1))(h)
    logits = keras.layers.Dense(int(num_classes), name="logits", **_dense_init(0.1))(h)
    return keras.Model(inputs, logits, name=name)


def architecture_for(dataset: str, input_shape: Sequence[int]) -> str:
    """"cifar10" for colour 32x32 inputs (cifar10), else "mnist" (MNIST-like grey images)."""
    shape = tuple(int(d) for d in input_shape)
    if dataset == "cifar10" or (len(shape) == 3 and shape[-1] == 3):
        return "cifar10"
    return "mnist"


def build(architecture: str, input_shape: Sequence[int], num_classes: int, **kwargs: Any
          ) -> keras.Model:
    """Builds the AdLM network `architecture` ("mnist" or "cifar10").

    Raises:
        ValueError: on an unknown architecture.
    """
    if architecture == "mnist":
        return mnist_model(input_shape, num_classes, **kwargs)
    if architecture == "cifar10":
        return cifar10_model(input_shape, num_classes, **kwargs)
    raise ValueError(f"architecture must be one of {ARCHITECTURES}, got {architecture!r}")


def auxiliary_model(input_shape: Sequence[int], num_classes: int, *, kind: str = "same",
                    architecture: str = "mnist", hidden: int = 256) -> keras.Model:
    """A noise-free chain model for the relevance step (AdLM's auxiliary model).

    "same": the private network's convolutional structure without bounding layers
    (conv-ReLU-pool blocks, FC, logits; for CIFAR-10 a chain of the three convolutions);
    "mlp": a one-hidden-layer perceptron (the paper: a simpler model works if accurate).
    Every layer is one LRP can propagate through (tfdp.papers.adlm.relevance.lrp).

    Raises:
        ValueError: on an unknown kind.
    """
    shape = checks.check_shape(input_shape, "input_shape (height, width, channels)", rank=3)
    checks.check_int(num_classes, "num_classes", minimum=2, allow_integral_float=True)
    if kind not in AUX_KINDS:
        raise ValueError(f"kind must be one of {AUX_KINDS}, got {kind!r}")
    inputs = keras.Input(shape=shape)
    h = inputs
    if kind == "mlp":
        h = keras.layers.Flatten()(h)
        h = keras.layers.Dense(int(hidden), activation="relu")(h)
    elif architecture == "cifar10":
        for filters in (64, 64, 128):
            h = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(h)
            h = keras.layers.MaxPooling2D(2)(h)
        h = keras.layers.Flatten()(h)
        h = keras.layers.Dense(int(hidden), activation="relu")(h)
    else:
        for filters in (32, 64):
            h = keras.layers.Conv2D(filters, 5, padding="same", activation="relu")(h)
            h = keras.layers.MaxPooling2D(2)(h)
        h = keras.layers.Flatten()(h)
        h = keras.layers.Dense(int(hidden), activation="relu")(h)
    logits = keras.layers.Dense(int(num_classes))(h)
    return keras.Model(inputs, logits, name=f"adlm_aux_{kind}")
