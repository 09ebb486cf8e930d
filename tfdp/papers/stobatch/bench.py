"""Benchmark `tfdp-bench stobatch`: one StoBatch step vs. plain adversarial training.

Candidate: one StoBatch training step (`tfdp.papers.stobatch.method.StoBatch.train_step`: the
ensemble attack on the adversarial-source batch, the auto-encoder objective with its own
optimizer, the Taylor objective of Eq. 9 and the chi3 term). Reference: the same network's
plain (non-private) adversarial-training step with the same attacks (same batched loop,
same T_mu, same 2m examples), softmax cross-entropy on the benign and adversarial batches
and one optimizer for all weights. Ratio = median candidate time / median reference time
(target <= 1.15).

Also reported, without a target on CPU: the StoBatch step on a two-replica MirroredStrategy
over two logical CPUs against the single-device step.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Callable

import numpy as np
import tensorflow as tf
from tfdp import options
from tfdp import accounting
from tfdp.train import base
from tfdp.papers.stobatch import method as stobatch
import keras
from attacks import graph
from tfdp.train import loop

TARGET_RATIO = 1.15

# Two logical CPUs for the mirrored comparison; must happen before TF initialises devices.
try:
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
except RuntimeError:  # already initialised (e.g. imported after other TF work)
    pass

OPTIONS = options.OptionSet("stobatch_bench_")  # every stobatch_bench_* setting

_M = OPTIONS.integer("stobatch_bench_m", 300, "DP batch size m of the benchmark step.")
_ITERS = OPTIONS.integer("stobatch_bench_attack_iters", 3, "T_mu of the benchmark step.")
_REPEATS = OPTIONS.integer("stobatch_bench_repeats", 11,
                           "Interleaved repetitions per variant (median reported).")
_SEED = OPTIONS.integer("stobatch_bench_seed", 0, "Seed of data, weights and noise.")


def _method(m: int, iters: int, seed: int):
    cfg = base.TrainConfig(method="stobatch", dataset="synthetic", model_dir="/nonexistent",
                           batch_size=m, learning_rate=1e-3, optimizer="adam", seed=seed,
                           epsilon=1.0,
                           options={"stobatch_architecture": "mnist",
                                    "stobatch_attack_iters": iters})
    method = stobatch.StoBatch(cfg)
    method.validate()
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (2 * m, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, 2 * m)
    spec = base.DataSpec.of(x, y, 10)
    method.attach(spec)
    method.setup(spec, accounting.PrivacyLedger(), rng)
    return method, x, y


def _stobatch_step(strategy, m: int, iters: int, seed: int) -> Callable[[], None]:
    method, x, y = _method(m, iters, seed)
    with strategy.scope():
        method.build()  # the model and the classifier's Adam(1e-3)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(2 * m).repeat()
    batch = next(iter(strategy.experimental_distribute_dataset(ds)))

    @tf.function
    def step():
        def fn(xb, yb):
            ctx = base.StepContext.current(tf.constant([seed, 1], tf.int64), 2 * m)
            return method.train_step(ctx, xb, yb)["loss"]
        return strategy.run(fn, args=batch)

    return lambda: step()


def _plain_step(m: int, iters: int, seed: int) -> Callable[[], None]:
    method, x, y = _method(m, iters, seed)
    model = method.build_model((28, 28, 1), 10)
    opt = keras.optimizers.Adam(1e-3)
    opt.build(model.trainable_variables)
    xb, yb = tf.constant(x[:m]), tf.constant(y[:m])
    xs, ys = tf.constant(x[m:]), tf.constant(y[m:])
    ids = graph.ensemble_ids(tf.range(m), m)
    start = tf.random.stateless_uniform(xs.shape, [seed, 2], -1.0, 1.0)

    def logits(v, training):
        return model.forward(v, training=training, latent_noise=False)

    @tf.function
    def step():
        xa = graph.craft(lambda v: logits(v, False), xs, 0.3, attack_ids=ids, nb_iter=iters,
                         start_noise=start)
        with tf.GradientTape() as tape:
            loss = (tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                yb, logits(xb, True))) + tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(ys, logits(xa, True))))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return lambda: step()


def _time(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    out = fn()
    for t in tf.nest.flatten(out, expand_composites=True):
        t.numpy()  # wait for the step to finish
    return time.perf_counter() - t0


def run(**overrides) -> dict:
    """Runs the benchmark; returns the result dict (ratio, target, timings)."""
    m = int(OPTIONS.setting(overrides, "m"))
    iters = int(OPTIONS.setting(overrides, "attack_iters"))
    repeats = int(OPTIONS.setting(overrides, "repeats"))
    seed = int(OPTIONS.setting(overrides, "seed"))
    variants = {
        "plain_adversarial": _plain_step(m, iters, seed),
        "stobatch": _stobatch_step(tf.distribute.get_strategy(), m, iters, seed),
    }
    mirrored = None
    if len(tf.config.list_logical_devices("CPU")) >= 2:
        mirrored = loop.cpu_mirrored_strategy()
        variants["stobatch_mirrored_2"] = _stobatch_step(mirrored, m, iters, seed)
    for fn in variants.values():  # trace and warm up
        _time(fn)
    times = {k: [] for k in variants}
    for _ in range(repeats):
        for k, fn in variants.items():
            times[k].append(_time(fn))
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "benchmark": "stobatch",
        # Principle 9: which path the timings measure.
        "measured_path": "component",
        "measured_path_description": (
            "StoBatch's train_step called directly in a tf.function on a fixed batch (not "
            "through tfdp-train's Run)"),
        "reference": "plain adversarial-training step (same network, attacks, T_mu, 2m examples)",
        "candidate": "StoBatch training step (ensemble attack, auto-encoder, Eq. 9, chi3 term)",
        "ratio": med["stobatch"] / med["plain_adversarial"],
        "target": TARGET_RATIO,
        "meets_target": med["stobatch"] / med["plain_adversarial"] <= TARGET_RATIO,
        "seconds_median": med,
        "seconds_all": times,
        "m": m, "attack_iters": iters, "repeats": repeats,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "tensorflow": tf.__version__},
    }
    if mirrored is not None:
        result["mirrored_2_over_single"] = med["stobatch_mirrored_2"] / med["stobatch"]
        result["mirrored_note"] = ("two logical CPUs of one machine share its cores; "
                                   "reported without a target")
    return result
