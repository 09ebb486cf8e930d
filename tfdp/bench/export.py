"""Benchmark `tfdp-bench export`: the exported `certify` signature vs. tfdp.certify in process."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Callable

import keras
import numpy as np
import tensorflow as tf

from tfdp import certify, export, options, rundir
from tfdp.bench import certify as certify_bench

TARGET_RATIO = 0.9

OPTIONS = options.OptionSet("export_")  # every export_* setting: name, default, help

_BATCH = OPTIONS.integer("export_batch_size", 8, "Inputs certified per call.")
_DRAWS = OPTIONS.integer("export_num_draws", 512, "Monte-Carlo draws per input.")
_DRAWS_PER_STEP = OPTIONS.integer("export_draws_per_step", 256,
                                  "Draws per forward pass (both variants).")
_REPEATS = OPTIONS.integer("export_repeats", 5,
                           "Interleaved repetitions per variant (median reported).")
_SEED = OPTIONS.integer("export_seed", 0, "Seed for data, weights and noise.")


def _write_run(path: str, model: keras.Model) -> None:
    """A minimal run directory for the benchmark network (model, config, empty ledger)."""
    run = rundir.RunDir(path, create=True)
    model.save(run.file(rundir.MODEL_FILE))
    run.write_json(rundir.CONFIG_FILE, {
        "method": "pixeldp_bench", "dataset": "mnist", "value_range": [0.0, 1.0],
        "input_shape": [28, 28, 1], "num_classes": 10,
        "certification": dict(certify_bench._CERT)})  # pylint: disable=protected-access
    run.write_json(rundir.LEDGER_FILE, {"epsilon": 0.0, "delta": 0.0, "claimed_epsilon": 0.0,
                                        "claimed_delta": 0.0, "differs": False,
                                        "entries": []})


def _time_against_export(model: Any, x: np.ndarray, draws: int, per_step: int, alpha: float,
                         size: float, reference: Callable[[], Any], repeats: int
                         ) -> tuple[dict, Any, dict]:
    """Exports `model` (in a temporary directory, removed after), loads it, and times its
    `certify` signature against `reference` on the same inputs.

    Returns:
      (the interleaved timings, reference's output, the signature's output).
    """
    batch = x.shape[0]
    work = tempfile.mkdtemp(prefix="tfdp-bench-export-")
    try:
        _write_run(os.path.join(work, "run"), model)
        export.export_run(os.path.join(work, "run"), os.path.join(work, "out"),
                          draws_per_step=per_step, include_keras=False)
        loaded = tf.saved_model.load(os.path.join(work, "out"))
        args = (tf.constant(x), tf.constant(draws, tf.int32), tf.constant(alpha, tf.float64),
                tf.constant(size, tf.float64))
        calls = [0]

        def candidate() -> Any:
            calls[0] += 1
            out = loaded.certify(*args, tf.constant(calls[0], tf.int64))
            return {k: v.numpy() for k, v in out.items()}

        ref_out = reference()  # trace and warm up
        cand_out = candidate()
        timing = certify_bench.interleaved_throughputs(reference, candidate, repeats,
                                                       batch * draws)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return timing, ref_out, cand_out


def run(**overrides: Any) -> dict:
    """Throughput of the exported `certify` signature against tfdp.certify, in one run.

    Network: PixelDP's MNIST CNN with Gaussian robustness noise (tfdp.bench.certify). The
    reference is tfdp.certify in process: MonteCarloPredictor over the Keras model with
    its inference noise on, Clopper-Pearson bounds (scipy), the PixelDP Gaussian radius
    (numpy) and is_robust. The candidate is the same network exported with tfdp.export,
    loaded with tf.saved_model.load, its `certify` signature called on the same inputs
    (everything in one graph). Both draw `batch_size * num_draws` noisy inputs per call.

    Args:
        **overrides: values for the flags without the `export_` prefix.

    Returns:
        dict with ratio (candidate / reference throughput), target, passed, both
        throughputs (noisy inputs per second), per-repetition times, and the setup.

    Raises:
        ValueError: if a size argument is < 1.
    """
    batch, draws, per_step, repeats, seed = certify_bench.read_sizes(OPTIONS, overrides)
    cert = dict(certify_bench._CERT)  # pylint: disable=protected-access
    model = certify_bench.build_pixeldp_cnn(seed)
    x = np.random.default_rng(seed).uniform(0, 1, size=(batch, 28, 28, 1)).astype(np.float32)
    alpha, size = 0.05, 0.01

    predictor = certify.MonteCarloPredictor(lambda v: model(v, training=False),
                                            draws_per_step=per_step)

    def reference() -> Any:
        result = predictor(x, draws, 10)
        pred, lower, upper = certify.top_two_bounds(result, "clopper_pearson", alpha)
        radius = certify.certified_radius(lower, upper, cert, attack_size=size)
        return pred, radius, certify.is_robust(radius, size)

    timing, ref_out, cand_out = _time_against_export(model, x, draws, per_step, alpha, size,
                                                     reference, repeats)
    times, ref_tp, cand_tp, ratio = (timing["times"], timing["reference"], timing["candidate"],
                                     timing["ratio"])
    return {
        "benchmark": "export",
        # Principle 9: which path the timings measure.
        "measured_path": "export",
        "measured_path_description": (
            "the exported SavedModel's certify signature after tf.saved_model.load (what a "
            "serving user runs) against tfdp.certify in process"),
        "ratio": ratio,
        "target": TARGET_RATIO,
        "passed": bool(ratio >= TARGET_RATIO),
        "reference": "tfdp.certify in process (MonteCarloPredictor + scipy Clopper-Pearson + "
                     "numpy PixelDP Gaussian radius + is_robust) on the Keras model",
        "candidate": "the exported certify signature (tf.saved_model.load), same network, "
                     "inputs, draws and bound",
        "reference_inputs_per_second": ref_tp,
        "candidate_inputs_per_second": cand_tp,
        "reference_seconds_per_repeat": times["reference"],
        "candidate_seconds_per_repeat": times["candidate"],
        # Different noise draws (the export is seeded per call): agreement is statistical.
        "reference_certified_fraction": float(np.mean(ref_out[2])),
        "candidate_certified_fraction": float(np.mean(
            cand_out["certified"] if "certified" in cand_out else cand_out["claimed_certified"])),
        **certify_bench.run_settings(batch, draws, per_step, repeats, seed),
    }
