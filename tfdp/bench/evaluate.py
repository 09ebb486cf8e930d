"""Benchmark `tfdp-bench evaluate`: tfdp-evaluate's Monte-Carlo path vs. a plain forward pass.

Candidate: `tfdp.evaluate.evaluate_arrays` with `certify=True` and no attack, the function
`tfdp-evaluate` runs on a loaded model (its batches, Monte-Carlo prediction with
`MonteCarloPredictor`, Clopper-Pearson bounds, certified radii for every attack size and the
per-example records), on PixelDP's MNIST CNN with its certification config. Reference: the
same noisy network's plain batched forward pass over the same N x n inputs, pre-tiled, in
forward batches of the same size (evaluation batch x draws per step). Both process N x n noisy
inputs; ratio = candidate throughput / reference throughput (target >= 0.8).
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp import options
from tfdp import evaluate as tfdp_evaluate
from tfdp.bench import certify as certify_bench

TARGET_RATIO = 0.8

OPTIONS = options.OptionSet("evaluate_bench_")  # every evaluate_bench_* setting

_EXAMPLES = OPTIONS.integer(
    "evaluate_bench_num_examples", 64,
    "Test inputs N evaluated per call (each call is one tfdp-evaluate run: it traces its "
    "Monte-Carlo graph once, as a run does).")
_BATCH = OPTIONS.integer("evaluate_bench_batch_size", 8,
                         "tfdp-evaluate's --batch_size (inputs per prediction batch).")
_DRAWS = OPTIONS.integer("evaluate_bench_num_draws", 512, "Monte-Carlo draws n per input.")
_DRAWS_PER_STEP = OPTIONS.integer("evaluate_bench_draws_per_step", 256,
                                  "tfdp-evaluate's --draws_per_step (draws per forward pass).")
_REPEATS = OPTIONS.integer("evaluate_bench_repeats", 3,
                           "Interleaved repetitions per variant (median reported).")
_SEED = OPTIONS.integer("evaluate_bench_seed", 0, "Seed for data, weights and noise.")

# PixelDP-style certificate of the benchmark network (PixelDP code release defaults).
_CERT = dict(certify_bench._CERT)  # pylint: disable=protected-access


def _settings(overrides: dict[str, Any]) -> tuple[int, int, int, int, int, int]:
    """(num_examples, batch_size, num_draws, draws_per_step, repeats, seed), checked.

    Raises:
        ValueError: naming the setting (see `run`).
    """
    def get(name):
        return int(OPTIONS.setting(overrides, name))
    sizes = {k: get(k) for k in ("num_examples", "batch_size", "num_draws", "draws_per_step",
                                 "repeats")}
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"evaluate_bench_{name} must be >= 1, got {value}")
    n_ex, batch, draws, per_step, repeats = sizes.values()
    seed = get("seed")
    if n_ex % batch:
        raise ValueError(f"evaluate_bench_batch_size={batch} must divide "
                         f"evaluate_bench_num_examples={n_ex}")
    if draws % per_step:
        raise ValueError(f"evaluate_bench_draws_per_step={per_step} must divide "
                         f"evaluate_bench_num_draws={draws}")
    return n_ex, batch, draws, per_step, repeats, seed


def run(**overrides: Any) -> dict:
    """Throughput of tfdp-evaluate's Monte-Carlo evaluation vs. a plain forward pass.

    Args:
        **overrides: values for the flags without the `evaluate_bench_` prefix.

    Returns:
        dict with ratio (candidate / reference throughput), target, passed, both
        throughputs (noisy inputs per second), per-repetition times, measured_path, setup.

    Raises:
        ValueError: naming the setting, for a size < 1, or a batch size that does not
            divide the number of examples, or draws_per_step that does not divide num_draws.
    """
    n_ex, batch, draws, per_step, repeats, seed = _settings(overrides)

    model = certify_bench.build_pixeldp_cnn(seed)
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, size=(n_ex, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, size=n_ex)
    eval_options = tfdp_evaluate.EvalOptions(
        attacks=(), attack_sizes=(0.1, 0.2), certify=True, num_draws=draws,
        batch_size=batch, draws_per_step=per_step, seed=seed)

    def candidate() -> None:
        tfdp_evaluate.evaluate_arrays(model, x, y, value_range=(0.0, 1.0),
                                      certification=_CERT, options=eval_options)

    forward = tf.function(lambda v: model(v, training=False))
    tiled = [tf.constant(np.tile(x[s:s + batch], (per_step, 1, 1, 1)))
             for s in range(0, n_ex, batch)]

    def reference() -> None:
        out = None
        for t in tiled:
            for _ in range(draws // per_step):
                out = forward(t)
        out.numpy()

    load_before = os.getloadavg()
    reference()  # trace and warm up
    candidate()
    timing = certify_bench.interleaved_throughputs(reference, candidate, repeats, n_ex * draws)
    ratio = timing["ratio"]
    return {
        "benchmark": "evaluate",
        # Principle 9: which path the timings measure.
        "measured_path": "evaluate",
        "measured_path_description": (
            "tfdp.evaluate.evaluate_arrays with --certify and no attack: what tfdp-evaluate "
            "runs on a loaded model (batches, MonteCarloPredictor, bounds, radii, records)"),
        "ratio": ratio,
        "target": TARGET_RATIO,
        "passed": bool(ratio >= TARGET_RATIO),
        "reference": "plain batched forward pass of the noisy network over the same N x n "
                     "pre-tiled inputs (same forward batch)",
        "candidate": "tfdp-evaluate's Monte-Carlo prediction and certification "
                     "(evaluate_arrays, --certify, PixelDP MNIST CNN)",
        "reference_inputs_per_second": timing["reference"],
        "candidate_inputs_per_second": timing["candidate"],
        "times_seconds": timing["times"],
        "setup": dict(certify_bench.run_settings(batch, draws, per_step, repeats, seed),
                      num_examples=n_ex, forward_batch=batch * per_step),
        "loadavg_before": list(load_before),
        "loadavg_after": list(os.getloadavg()),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
