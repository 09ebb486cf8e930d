"""Benchmark `tfdp-bench certify`: Monte-Carlo certification vs. a plain noisy forward pass."""

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
from tfdp import certify, options
from tfdp.certify import smoothing
from tfdp.models import common

TARGET_RATIO = 0.8

OPTIONS = options.OptionSet("certify_")  # every certify_* setting: name, default, help

_BATCH = OPTIONS.integer("certify_batch_size", 8, "Inputs certified per call.")
_DRAWS = OPTIONS.integer("certify_num_draws", 500, "Monte-Carlo draws per input.")
_DRAWS_PER_STEP = OPTIONS.integer("certify_draws_per_step", 250,
                                  "Draws per forward pass (both variants use the same "
                                  "forward batch of batch_size * draws_per_step).")
_REPEATS = OPTIONS.integer("certify_repeats", 5,
                           "Interleaved repetitions per variant (median reported).")
_SEED = OPTIONS.integer("certify_seed", 0, "Seed for data, weights and noise.")
_CERTIFICATE = OPTIONS.enum("certify_certificate", "pixeldp_gaussian",
                            ["pixeldp_gaussian", "gaussian_smoothing"],
                            "Certificate benchmarked: pixeldp_gaussian (noise layer after "
                            "conv1 of PixelDP's CNN) or gaussian_smoothing (input noise on the "
                            "main job's small CNN, n0 = draws_per_step selection draws plus "
                            "num_draws estimation draws).")

# Randomized smoothing of the benchmark (the main job's input noise).
_SMOOTHING_SIGMA = 0.5

# PixelDP-style certificate of the benchmark network (PixelDP code release defaults).
_CERT = {"mechanism": "pixeldp_gaussian", "construction_bound": 0.1, "epsilon": 1.0,
         "delta": 0.05}


def read_sizes(option_set: options.OptionSet, overrides: dict) -> tuple[int, ...]:
    """(batch_size, num_draws, draws_per_step, repeats, seed) of a certification benchmark.

    Raises:
        ValueError: naming the setting, if a size is < 1.
    """
    def get(name):
        return int(option_set.setting(overrides, name))
    sizes = {k: get(k) for k in ("batch_size", "num_draws", "draws_per_step", "repeats")}
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    return (*sizes.values(), get("seed"))


def build_pixeldp_cnn(seed: int = 0) -> keras.Model:
    """PixelDP's MNIST CNN (its code release): conv5x5x32/s2, noise, conv5x5x64/s2, fc1024.

    Args:
        seed: weight and noise seed.

    Returns:
        an uncompiled Keras model producing logits, inference noise switched on.
    """
    keras.utils.set_random_seed(seed)
    inp = keras.Input((28, 28, 1))
    x = keras.layers.Conv2D(32, 5, strides=2, padding="same")(inp)
    # PixelDP: sigma = sqrt(2 ln(1.25/delta)) * Delta * L / eps with Delta = 1
    sigma = float(np.sqrt(2 * np.log(1.25 / _CERT["delta"])) * _CERT["construction_bound"]
                  / _CERT["epsilon"])
    x = tfdp_layers.GaussianNoise(sigma, seed=seed + 1)(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(64, 5, strides=2, padding="same", activation="relu")(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(1024, activation="relu")(x)
    model = keras.Model(inp, keras.layers.Dense(10)(x))
    tfdp_layers.set_inference_noise(model, True)
    return model


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_settings(batch: int, draws: int, per_step: int, repeats: int, seed: int) -> dict:
    """The settings and environment a certification benchmark records with its result."""
    return {"batch_size": batch, "num_draws": draws, "draws_per_step": per_step,
            "repeats": repeats, "seed": seed, "tensorflow": tf.__version__,
            "keras": keras.__version__, "cpu_count": os.cpu_count(),
            "machine": platform.machine()}


def interleaved_throughputs(reference: Callable[[], Any], candidate: Callable[[], Any],
                            repeats: int, inputs: int) -> dict:
    """Times `reference` and `candidate` in alternating order, `repeats` times each.

    Args:
      reference, candidate: warmed-up callables doing the same amount of work.
      repeats: timings of each.
      inputs: inputs processed per call (throughput = inputs / median time).

    Returns:
      Dict with `times` (name -> seconds per repeat), the two throughputs and their ratio
      (candidate / reference).
    """
    times: dict[str, list[float]] = {"reference": [], "candidate": []}
    for rep in range(repeats):
        order = ("reference", "candidate") if rep % 2 == 0 else ("candidate", "reference")
        for name in order:
            times[name].append(_timed(reference if name == "reference" else candidate))
    ref_tp = inputs / statistics.median(times["reference"])
    cand_tp = inputs / statistics.median(times["candidate"])
    return {"times": times, "reference": ref_tp, "candidate": cand_tp, "ratio": cand_tp / ref_tp}


def run_smoothing(batch: int, draws: int, per_step: int, repeats: int, seed: int) -> dict:
    """gaussian_smoothing certification vs. the plain batched noisy forward pass.

    The network is the main job's small CNN (tfdp.models.common.small_cnn). The reference
    runs it on pre-tiled batches of `batch_size * draws_per_step` inputs with
    N(0, sigma^2 I) added in the same graph (the noisy classifier's bare forward passes);
    the candidate is the whole certification: n0 = draws_per_step selection draws and
    num_draws estimation draws through `MonteCarloPredictor`, the one-sided Clopper-Pearson
    bound and Cohen et al.'s radius. Both process `batch_size * (n0 + num_draws)` noisy
    inputs.
    """
    keras.utils.set_random_seed(seed)
    model = common.small_cnn((28, 28, 1), 10)
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, size=(batch, 28, 28, 1)).astype(np.float32)
    tiled = tf.constant(np.tile(x, (per_step, 1, 1, 1)))
    sigma = _SMOOTHING_SIGMA
    cert = certify.from_config({"mechanism": "gaussian_smoothing", "sigma": sigma,
                                "selection_draws": per_step})
    passes = (per_step + draws) // per_step

    noisy_forward = tf.function(
        lambda v: model(smoothing.add_gaussian_noise(v, sigma), training=False))

    def reference() -> None:
        out = None
        for _ in range(passes):
            out = noisy_forward(tiled)
        out.numpy()

    predictor = certify.MonteCarloPredictor(
        smoothing.smoothed_score(lambda v: model(v, training=False), sigma),
        draws_per_step=per_step)

    def candidate() -> None:
        selection = predictor(x, cert.selection_draws, 10)
        result = predictor(x, draws, 10)
        _, lower, upper = cert.bounds(result, "clopper_pearson", 0.001, selection=selection)
        cert.radius(lower, upper)

    reference()  # trace and warm up
    candidate()
    timing = interleaved_throughputs(reference, candidate, repeats, batch * passes * per_step)
    return {
        "benchmark": "certify",
        "certificate": "gaussian_smoothing",
        "measured_path": "component",
        "measured_path_description": "tfdp.certify's Monte-Carlo predictor, Clopper-Pearson "
                                     "bound and Cohen radius called in process on a Keras "
                                     "model (tfdp-evaluate end to end: tfdp-bench evaluate)",
        "ratio": timing["ratio"],
        "target": TARGET_RATIO,
        "passed": bool(timing["ratio"] >= TARGET_RATIO),
        "reference": "plain batched forward pass of the small CNN on pre-tiled inputs with "
                     "N(0, sigma^2 I) added in the graph",
        "candidate": "gaussian_smoothing certification (n0 selection + n estimation draws "
                     "through MonteCarloPredictor, one-sided Clopper-Pearson, Cohen radius)",
        "sigma": sigma,
        "selection_draws": per_step,
        "reference_inputs_per_second": timing["reference"],
        "candidate_inputs_per_second": timing["candidate"],
        "reference_seconds_per_repeat": timing["times"]["reference"],
        "candidate_seconds_per_repeat": timing["times"]["candidate"],
        **run_settings(batch, draws, per_step, repeats, seed),
    }


def run(**overrides: Any) -> dict:
    """Throughput of certification vs. the plain batched noisy forward pass, in one run.

    The reference runs the network on pre-tiled batches of `batch_size * draws_per_step`
    noisy inputs, `num_draws / draws_per_step` times (the bare cost of the forward passes).
    The candidate is the whole certification: `MonteCarloPredictor` (tiling, the graph loop
    over draws, counts and score moments), Clopper-Pearson bounds and the Gaussian radius
    search. Both process `batch_size * num_draws` noisy inputs.

    Args:
        **overrides: values for the flags without the `certify_` prefix.

    Returns:
        dict with ratio (candidate / reference throughput), target, passed, both
        throughputs (noisy inputs per second), the per-repetition times and the setup.

    Raises:
        ValueError: if a size argument is < 1 or draws_per_step does not divide num_draws.
    """
    batch, draws, per_step, repeats, seed = read_sizes(OPTIONS, overrides)
    if draws % per_step:
        raise ValueError(f"draws_per_step={per_step} must divide num_draws={draws}")
    which = OPTIONS.setting(overrides, "certificate")
    if which not in ("pixeldp_gaussian", "gaussian_smoothing"):
        raise ValueError(f"certificate: expected pixeldp_gaussian or gaussian_smoothing, got "
                         f"{which!r}")
    if which == "gaussian_smoothing":
        return run_smoothing(batch, draws, per_step, repeats, seed)

    model = build_pixeldp_cnn(seed)
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, size=(batch, 28, 28, 1)).astype(np.float32)
    tiled = tf.constant(np.tile(x, (per_step, 1, 1, 1)))

    forward = tf.function(lambda v: model(v, training=False))

    def reference() -> None:
        out = None
        for _ in range(draws // per_step):
            out = forward(tiled)
        out.numpy()

    predictor = certify.MonteCarloPredictor(lambda v: model(v, training=False),
                                            draws_per_step=per_step)

    def candidate() -> None:
        result = predictor(x, draws, 10)
        _, lower, upper = certify.top_two_bounds(result, "clopper_pearson", 0.05)
        certify.certified_radius(lower, upper, _CERT)

    reference()  # trace and warm up
    candidate()
    timing = interleaved_throughputs(reference, candidate, repeats, batch * draws)
    times, ref_tp, cand_tp, ratio = (timing["times"], timing["reference"], timing["candidate"],
                                     timing["ratio"])
    return {
        "benchmark": "certify",
        "certificate": "pixeldp_gaussian",
        # Principle 9: which path the timings measure.
        "measured_path": "component",
        "measured_path_description": (
            "tfdp.certify's Monte-Carlo predictor and bounds called in process on a Keras "
            "model (the library calls, not tfdp-evaluate end to end)"),
        "ratio": ratio,
        "target": TARGET_RATIO,
        "passed": bool(ratio >= TARGET_RATIO),
        "reference": "plain batched forward pass of the noisy network over pre-tiled inputs",
        "candidate": "Monte-Carlo certification (MonteCarloPredictor + Clopper-Pearson + "
                     "PixelDP Gaussian radius)",
        "reference_inputs_per_second": ref_tp,
        "candidate_inputs_per_second": cand_tp,
        "reference_seconds_per_repeat": times["reference"],
        "candidate_seconds_per_repeat": times["candidate"],
        **run_settings(batch, draws, per_step, repeats, seed),
    }
