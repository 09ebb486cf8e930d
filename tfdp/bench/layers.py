"""Benchmark `tfdp-bench layers`: CNN training-step time with vs. without the tfdp noise layers."""

from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Any, Callable

import keras
import numpy as np
import tensorflow as tf

import layers as tfdp_layers
from tfdp import kernels, options

TARGET_RATIO = 1.10
MODELS = ("mnist", "cifar10")

OPTIONS = options.OptionSet("layers_")  # every layers_* setting: name, default, help

_MODEL = OPTIONS.enum(
    "layers_model", "cifar10", list(MODELS),
    "CNN: 'mnist' = HGM MNIST net (conv5x5x32, conv5x5x64, fc256; HGM paper), "
    "'cifar10' = HGM CIFAR-10 net (conv3x3x128/2, conv5x5x128, conv5x5x256, fc256).")
_BATCH = OPTIONS.integer("layers_batch_size", 32, "Examples per training step.")
_STEPS = OPTIONS.integer("layers_steps", 3, "Timed training steps per repetition.")
_REPEATS = OPTIONS.integer("layers_repeats", 15,
                           "Interleaved repetitions per variant (median reported).")
_WARMUP = OPTIONS.integer("layers_warmup", 3, "Untimed steps per variant after tracing.")
_MODE = OPTIONS.enum("layers_noise_mode", "per_example", list(tfdp_layers.NOISE_MODES),
                     "Noise mode of the candidate's noise layers.")
_SEED = OPTIONS.integer("layers_seed", 0, "Seed for data, weights and noise.")
_KERNEL = OPTIONS.enum("layers_noise_kernel", "portable", list(tfdp_layers.NOISE_KERNELS),
                       "How the candidate's noise layers draw fresh noise: 'portable' "
                       "(TensorFlow ops) or 'fused' (the compiled CPU kernel, tfdp.kernels).")


def _flag(name: str, overrides: dict) -> Any:
    return OPTIONS.setting(overrides, name)


def build_cnn(model: str, *, with_noise: bool, noise_mode: str = "per_example",
              seed: int = 0) -> keras.Model:
    """The benchmark CNN, optionally with the noise layers the papers put in it.

    The candidate adds Laplace input perturbation with per-feature scales (AdLM Alg. 1
    l.12-13, StoBatch chi1) and heterogeneous Gaussian noise on the conv1 pre-activation (HGM Eq. 8,
    Secure-SGD); the reference is the same network without them (same weights).

    Args:
        model: "mnist" or "cifar10".
        with_noise: include the two noise layers.
        noise_mode: their noise mode.
        seed: weight-initialisation and noise seed.

    Returns:
        An uncompiled Keras model producing logits.

    Raises:
        ValueError: if model is unknown.
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    keras.utils.set_random_seed(seed)
    shape = (28, 28, 1) if model == "mnist" else (28, 28, 3)
    inp = keras.Input(shape)
    x = inp
    rng = np.random.default_rng(seed)
    if with_noise:
        scale = rng.uniform(0.05, 0.2, size=shape)  # per-feature Laplace scales
        x = tfdp_layers.LaplaceNoise(scale, noise_mode=noise_mode, seed=seed + 1)(x)
    if model == "mnist":
        x = keras.layers.Conv2D(32, 5, padding="same")(x)
    else:
        x = keras.layers.Conv2D(128, 3, strides=2, padding="same")(x)
    if with_noise:
        r = rng.dirichlet(np.ones(int(np.prod(x.shape[1:])))).reshape(x.shape[1:])
        x = tfdp_layers.HeterogeneousGaussianNoise(0.3, r, noise_mode=noise_mode,
                                                   seed=seed + 2)(x)
    x = keras.layers.ReLU()(x)
    if model == "mnist":
        x = keras.layers.MaxPooling2D()(x)
        x = keras.layers.Conv2D(64, 5, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling2D()(x)
    else:
        x = keras.layers.Conv2D(128, 5, padding="same", activation="relu")(x)
        x = keras.layers.Conv2D(256, 5, padding="same", activation="relu")(x)
        x = keras.layers.AveragePooling2D(2)(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(256, activation="relu")(x)
    out = keras.layers.Dense(10)(x)
    return keras.Model(inp, out)


def _train_step_fn(model: keras.Model) -> Callable:
    optimizer = keras.optimizers.SGD(0.01)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def _time_steps(step: Callable, x: tf.Tensor, y: tf.Tensor, n: int) -> float:
    start = time.perf_counter()
    loss = None
    for _ in range(n):
        loss = step(x, y)
    float(loss)  # wait for the last step
    return (time.perf_counter() - start) / n * 1000.0


def _settings(overrides: dict[str, Any]) -> tuple[str, int, int, int, int, str, int, str]:
    """(model, batch_size, steps, repeats, warmup, noise_mode, seed, noise_kernel), checked.

    Raises:
        ValueError: if a size argument is < 1 (warmup < 0), or the kernel is unknown.
    """
    model_name = _flag("model", overrides)
    batch, steps = int(_flag("batch_size", overrides)), int(_flag("steps", overrides))
    repeats, warmup = int(_flag("repeats", overrides)), int(_flag("warmup", overrides))
    noise_mode, seed = _flag("noise_mode", overrides), int(_flag("seed", overrides))
    kernel = kernels.check_noise_kernel(_flag("noise_kernel", overrides), "noise_kernel")
    for name, value in (("batch_size", batch), ("steps", steps), ("repeats", repeats)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    return model_name, batch, steps, repeats, warmup, noise_mode, seed, kernel


def run(**overrides: Any) -> dict:
    """Times training steps of the CNN with and without noise layers, interleaved, in one run.

    Args:
        **overrides: values for the benchmark's flags without the `layers_` prefix (model,
            batch_size, steps, repeats, warmup, noise_mode, seed); unset ones take the OPTIONS
            defaults.

    Returns:
        dict with ratio (median over repetitions of candidate / reference ms per step, each
        repetition timing both back to back), ratio_of_medians, target, passed,
        reference_ms_per_step and candidate_ms_per_step (medians), the per-repetition times
        and the setup.

    Raises:
        ValueError: if a size argument is < 1.
    """
    model_name, batch, steps, repeats, warmup, noise_mode, seed, kernel = _settings(overrides)

    reference = build_cnn(model_name, with_noise=False, seed=seed)
    candidate = build_cnn(model_name, with_noise=True, noise_mode=noise_mode, seed=seed)
    # Same starting weights for the layers both models share.
    candidate.set_weights(_merged_weights(reference, candidate))
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.uniform(0, 1, size=(batch,) + reference.input_shape[1:]), tf.float32)
    y = tf.constant(rng.integers(0, 10, size=batch), tf.int32)
    steps_fn = {"reference": _train_step_fn(reference), "candidate": _train_step_fn(candidate)}
    with tfdp_layers.noise_kernel(kernel):  # the kernel is fixed when the step is traced
        for fn in steps_fn.values():
            _time_steps(fn, x, y, max(warmup, 1))  # trace + warm up
    times: dict[str, list[float]] = {"reference": [], "candidate": []}
    for rep in range(repeats):
        order = ("reference", "candidate") if rep % 2 == 0 else ("candidate", "reference")
        for name in order:
            times[name].append(_time_steps(steps_fn[name], x, y, steps))
    ref_ms = statistics.median(times["reference"])
    cand_ms = statistics.median(times["candidate"])
    # Each repetition times both variants back to back, so their ratio cancels most of the
    # load drift of a shared machine; the reported ratio is the median of these ratios.
    paired = [c / r for c, r in zip(times["candidate"], times["reference"])]
    ratio = statistics.median(paired)
    noise_types = (tfdp_layers.LaplaceNoise, tfdp_layers.HeterogeneousGaussianNoise)
    noise_layers = [f"{type(l).__name__}({l.noise_mode}, noise shape {l._feature_shape})"
                    for l in candidate.layers if isinstance(l, noise_types)]
    return {
        "benchmark": "layers",
        # Principle 9: which path the timings measure.
        "measured_path": "component",
        "measured_path_description": (
            "a CNN training step traced for one static batch shape, with and without the "
            "noise layers (isolates the noise layers' cost; not a tfdp-train method's step)"),
        "ratio": ratio,
        "target": TARGET_RATIO,
        "passed": bool(ratio <= TARGET_RATIO),
        "reference": "CNN training step without noise layers",
        "candidate": "same CNN with " + ", ".join(noise_layers)
                     + f", {kernel} noise kernel",
        "reference_ms_per_step": ref_ms,
        "candidate_ms_per_step": cand_ms,
        "ratio_of_medians": cand_ms / ref_ms,
        "ratio_per_repeat": paired,
        "reference_ms_per_repeat": times["reference"],
        "candidate_ms_per_repeat": times["candidate"],
        "model": model_name,
        "batch_size": batch,
        "steps_per_repeat": steps,
        "repeats": repeats,
        "warmup": warmup,
        "noise_mode": noise_mode,
        "noise_kernel": kernel,
        "seed": seed,
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
    }


def _merged_weights(reference: keras.Model, candidate: keras.Model) -> list:
    """Candidate weights with every layer that also exists in the reference copied from it."""
    ref_iter = iter([l for l in reference.layers if l.weights])
    out = []
    for layer in candidate.layers:
        if not layer.weights:
            continue
        if isinstance(layer, (tfdp_layers.LaplaceNoise, tfdp_layers.HeterogeneousGaussianNoise)):
            out.extend(w.numpy() for w in layer.weights)
        else:
            out.extend(w.numpy() for w in next(ref_iter).weights)
    return out
