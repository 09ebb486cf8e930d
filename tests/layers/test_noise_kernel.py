"""The fused noise kernel (tfdp.kernels): same Philox words as the portable draws, same
distribution, same gradients, selected explicitly, never used where it cannot apply."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

import layers as L
from layers import noise_streams
from tfdp import kernels

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Tests that build the kernel need a C++ compiler; without one they are reported as skipped
# with this reason. The missing-compiler tests below run everywhere.
needs_compiler = pytest.mark.skipif(
    shutil.which(os.environ.get("CXX", "g++")) is None,
    reason="no C++ compiler on PATH: the fused kernel cannot be built here")


def _fused_unit(shape, seed, distribution):
    """The fused op's unit draw (x = 0, scale = 1) for a stateless seed."""
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=tf.constant(seed, tf.int64))
    return kernels.load().tfdp_noisy_add(tf.zeros(shape), tf.ones([1]), key, counter,
                                         distribution=distribution).numpy()


def _ulps(a, b):
    scale = np.spacing(np.maximum(np.abs(a), np.abs(b)).astype(np.float32))
    return np.abs(a.astype(np.float64) - b) / scale


@needs_compiler
@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (3, 5), (2, 999), (4, 28, 28, 32)])
@pytest.mark.parametrize("seed", [(1, 2), (123456789, -5), (0, 0)])
def test_fused_draws_are_the_portable_draws_to_a_few_ulps(shape, seed):
    # Same Philox words: every value within a few float32 ulps of the portable draw (a single
    # different word would move a value by O(1)); the Laplace sign is one word's lowest bit.
    for distribution, portable in (("gaussian", noise_streams.unit_gaussian),
                                   ("laplace", noise_streams.unit_laplace)):
        fused = _fused_unit(shape, seed, distribution)
        want = portable(shape, tf.constant(seed, tf.int64)).numpy()
        assert fused.shape == want.shape
        assert np.max(_ulps(fused, want)) <= 8, distribution
        np.testing.assert_array_equal(np.sign(fused), np.sign(want))
        if fused.size >= 1000:
            assert np.mean(fused == want) > 0.3  # many values are bit-identical


@needs_compiler
def test_counter_carry_across_the_low_word_matches_the_portable_draws():
    # Seeds whose Philox counter starts just below a 2^32 boundary, so that consecutive
    # blocks carry into the next counter word inside one 16-block batch.
    key = tf.constant([12345], tf.uint64)
    for low in (2 ** 32 - 5, 2 ** 64 - 3):
        counter = tf.constant([low, 7], tf.uint64)
        words = tf.raw_ops.StatelessRandomUniformFullIntV2(
            shape=[600, 3], key=key, counter=counter, alg=1, dtype=tf.uint32)
        want = noise_streams.unit_gaussian_from_words(words).numpy().reshape(-1)
        got = kernels.load().tfdp_noisy_add(tf.zeros([1200]), tf.ones([1]), key, counter,
                                            distribution="gaussian").numpy()
        assert np.max(_ulps(got, want)) <= 8


@needs_compiler
def test_fused_draws_have_the_claimed_distributions():
    z = _fused_unit((1_000_000,), (7, 11), "gaussian")
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert abs(z.mean()) < 5e-3 and abs(z.std() - 1) < 5e-3
    lap = _fused_unit((1_000_000,), (7, 12), "laplace")
    assert stats.kstest(lap, "laplace").pvalue > 1e-3
    assert np.all(np.isfinite(z)) and np.all(np.isfinite(lap))


def _layers(rng):
    r = rng.dirichlet(np.ones(6 * 6 * 3)).reshape(6, 6, 3)
    lap = rng.uniform(0.1, 0.3, (6, 6, 3))
    return {
        "laplace": lambda: L.LaplaceNoise(lap, seed=5),
        "hgm": lambda: L.HeterogeneousGaussianNoise(0.3, r, seed=5),
        "gaussian": lambda: L.GaussianNoise(0.5, seed=5),
    }


@needs_compiler
@pytest.mark.parametrize("name", ["laplace", "hgm", "gaussian"])
def test_layer_outputs_match_the_portable_kernel(name):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.uniform(0, 1, (8, 6, 6, 3)), tf.float32)
    make = _layers(rng)[name]
    outs = {}
    for kernel in L.NOISE_KERNELS:
        layer = make()
        with L.noise_kernel(kernel):
            step = tf.function(lambda t, layer=layer: layer(t, training=True))
            train = [step(x).numpy() for _ in range(2)]
            layer.inference_noise, layer.inference_fresh_scale = True, 0.5
            infer = tf.function(lambda t, layer=layer: layer(t, training=False))(x).numpy()
        outs[kernel] = train + [infer]
    for portable, fused in zip(outs["portable"], outs["fused"]):
        np.testing.assert_allclose(fused, portable, rtol=0, atol=2e-6)
    assert np.abs(outs["fused"][0] - outs["fused"][1]).max() > 0.01  # fresh draw per call
    assert np.abs(outs["fused"][2] - x.numpy()).max() > 0.01  # inference noise was added


@needs_compiler
def test_fused_kernel_is_not_used_where_it_cannot_apply():
    rng = np.random.default_rng(1)
    x64 = tf.constant(rng.uniform(0, 1, (4, 6, 6, 3)), tf.float64)
    x32 = tf.cast(x64, tf.float32)
    cases = [(lambda: L.GaussianNoise(0.5, seed=3, dtype="float64"), x64),  # float64 layer
             (lambda: L.GaussianNoise(0.5, seed=3, shared_axes=[3]), x32)]  # shared axes
    for make, x in cases:
        got = {}
        for kernel in L.NOISE_KERNELS:
            layer = make()
            with L.noise_kernel(kernel):
                got[kernel] = layer(x, training=True).numpy()
        assert np.abs(got["fused"] - x.numpy()).max() > 0.01  # noise was added
        np.testing.assert_array_equal(got["fused"], got["portable"])  # the portable path ran
    # Per-example calls (inside example_index_scope, e.g. under tf.vectorized_map) too.
    got = {}
    for kernel in L.NOISE_KERNELS:
        layer = L.GaussianNoise(0.5, seed=3)
        layer.build((None, 6, 6, 3))
        with L.noise_kernel(kernel), noise_streams.example_index_scope(tf.constant(2)):
            got[kernel] = layer(x32[:1], training=True).numpy()
    np.testing.assert_array_equal(got["fused"], got["portable"])


@needs_compiler
def test_model_gradients_match_the_portable_kernel():
    from tfdp.bench import layers as bench_layers  # pylint: disable=import-outside-toplevel

    x = tf.constant(np.random.default_rng(0).uniform(0, 1, (4, 28, 28, 1)), tf.float32)
    y = tf.constant([1, 2, 3, 4])
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    grads = {}
    for kernel in L.NOISE_KERNELS:
        with L.noise_kernel(kernel):
            model = bench_layers.build_cnn("mnist", with_noise=True, seed=0)

            @tf.function
            def step(model=model):
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x, training=True))
                return tape.gradient(loss, model.trainable_variables)

            grads[kernel] = [g.numpy() for g in step()]
    assert len(grads["fused"]) == len(grads["portable"]) > 0
    for g_fused, g_portable in zip(grads["fused"], grads["portable"]):
        # conv1 sits before both noise layers: its gradient flows through the fused op.
        np.testing.assert_allclose(g_fused, g_portable, rtol=1e-4,
                                   atol=1e-5 * np.abs(g_portable).max())


def test_unknown_kernel_is_rejected_and_nothing_changes():
    before = L.get_noise_kernel()
    with pytest.raises(ValueError, match="noise kernel must be one of"):
        L.set_noise_kernel("simd")
    assert L.get_noise_kernel() == before
    with pytest.raises(ValueError, match="--noise_kernel must be one of"):
        with kernels.noise_kernel_flag("simd"):
            pass
    assert L.get_noise_kernel() == before
    from tfdp.apps import train as train_app  # pylint: disable=import-outside-toplevel

    with pytest.raises(ValueError, match="--noise_kernel must be one of"):
        train_app.resolve({"method": "nonprivate", "dataset": "sample",
                           "noise_kernel": "simd"})


def test_missing_compiler_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-tfdp")
    monkeypatch.setenv("TFDP_KERNEL_CACHE", str(tmp_path))
    with pytest.raises(kernels.KernelUnavailable, match="no-such-compiler-tfdp"):
        kernels.library_path()
    assert os.listdir(tmp_path) == []  # nothing half-written


@needs_compiler
def test_build_is_cached_and_atomic(tmp_path, monkeypatch):
    monkeypatch.setenv("TFDP_KERNEL_CACHE", str(tmp_path))
    path = kernels.library_path()
    assert os.path.dirname(os.path.dirname(path)) == str(tmp_path)
    mtime = os.path.getmtime(path)
    assert kernels.library_path() == path and os.path.getmtime(path) == mtime  # not rebuilt
    assert [f for f in os.listdir(os.path.dirname(path)) if f != os.path.basename(path)] == []


@needs_compiler
def test_train_cli_records_the_kernel_and_the_ledger_does_not_depend_on_it(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=_ROOT)
    common = ["--method=secure_sgd", "--dataset=sample", "--num_train=256", "--num_test=40",
              "--epochs=1", "--batch_size=64", "--seed=3", "--epsilon=2", "--delta=1e-5",
              "--value_range=0,1", "--hgm_model=small", "--hgm_pretrain_epochs=1",
              "--hgm_pretrain_examples=128", "--verbose=0"]
    configs = {}
    for kernel in L.NOISE_KERNELS:
        run = tmp_path / kernel
        proc = subprocess.run([sys.executable, "-m", "tfdp.apps.train", *common,
                               f"--noise_kernel={kernel}", f"--model_dir={run}"],
                              cwd=_ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        with open(run / "config.json", encoding="utf-8") as f:
            configs[kernel] = json.load(f)
        assert f"--noise_kernel={kernel}" in (run / "flags.txt").read_text()
    assert configs["fused"]["flags"]["noise_kernel"] == "fused"
    assert configs["portable"]["flags"]["noise_kernel"] == "portable"
    ledgers = {}
    for kernel in L.NOISE_KERNELS:
        with open(tmp_path / kernel / "ledger.json", encoding="utf-8") as f:
            ledgers[kernel] = json.load(f)
    assert ledgers["fused"]["epsilon"] == ledgers["portable"]["epsilon"]
    assert ledgers["fused"]["entries"] == ledgers["portable"]["entries"]
    # Monte-Carlo evaluation with the fused kernel, recorded in evaluation.json.
    proc = subprocess.run([sys.executable, "-m", "tfdp.apps.evaluate",
                           f"--model_dir={tmp_path / 'fused'}", "--certify", "--attacks=fgsm",
                           "--attack_sizes=0.1", "--num_examples=20", "--num_draws=64",
                           "--seed=0", "--noise_kernel=fused"],
                          cwd=_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "fused" / "evaluation.json", encoding="utf-8") as f:
        summary = json.load(f)
    assert summary["noise_kernel"] == "fused" and summary["prediction"] == "monte_carlo"


def test_evaluate_rejects_an_unknown_kernel():
    from tfdp import evaluate  # pylint: disable=import-outside-toplevel

    with pytest.raises(ValueError, match="noise_kernel"):
        evaluate.validate_options(evaluate.EvalOptions(noise_kernel="simd"))


def test_train_cli_fused_without_compiler_fails_before_any_work(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=_ROOT,
               CXX="no-such-compiler-tfdp", TFDP_KERNEL_CACHE=str(tmp_path / "cache"))
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "tfdp.apps.train", "--method=nonprivate",
                           "--dataset=sample", "--num_train=64", "--epochs=1",
                           "--batch_size=32", "--noise_kernel=fused", f"--model_dir={run}"],
                          cwd=_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert "--noise_kernel=fused" in proc.stderr and "no-such-compiler-tfdp" in proc.stderr
    assert not run.exists()  # nothing written


def test_auto_kernel_falls_back_to_portable_and_says_why(monkeypatch):
    def unavailable():
        raise kernels.KernelUnavailable("the fused noise kernel needs a C++ compiler: 'x'")
    monkeypatch.setattr(kernels, "load", unavailable)
    kernel, why = kernels.resolve_noise_kernel("auto")
    assert kernel == "portable" and "--noise_kernel=auto" in why and "C++ compiler" in why
    with pytest.raises(ValueError, match="--noise_kernel=fused"):  # asked for: an error
        kernels.resolve_noise_kernel("fused")
    assert kernels.resolve_noise_kernel("portable") == ("portable", None)
    from tfdp.apps import train as train_app  # pylint: disable=import-outside-toplevel

    spec = train_app.resolve({"method": "nonprivate", "dataset": "sample",
                              "model_dir": "/tmp/tfdp-unused-run-dir-25"})
    assert spec.noise_kernel == "portable" and "C++ compiler" in spec.noise_kernel_fallback
    assert train_app.run_flags(spec)["noise_kernel"] == "portable"


@needs_compiler
def test_auto_kernel_is_fused_where_it_builds():
    assert kernels.resolve_noise_kernel("auto") == ("fused", None)
    from tfdp.apps import train as train_app  # pylint: disable=import-outside-toplevel

    spec = train_app.resolve({"method": "nonprivate", "dataset": "sample",
                              "model_dir": "/tmp/tfdp-unused-run-dir-25"})
    assert spec.noise_kernel == "fused" and spec.noise_kernel_fallback is None
    assert "--noise_kernel=fused" in train_app.flags_text(spec)  # the kernel used


def test_evaluate_defaults_to_auto_and_records_a_fallback(monkeypatch):
    """Issue 25 item 3: tfdp-evaluate's default kernel is auto (fused where it builds); a
    fallback to portable is recorded with its reason."""
    from tfdp import evaluate  # pylint: disable=import-outside-toplevel

    assert evaluate.EvalOptions().noise_kernel == "auto"

    def unavailable():
        raise kernels.KernelUnavailable("the fused noise kernel needs a C++ compiler: 'x'")
    monkeypatch.setattr(kernels, "load", unavailable)
    opts = evaluate.validate_options(evaluate.EvalOptions())
    assert opts.noise_kernel == "portable" and "C++ compiler" in opts.noise_kernel_fallback


def test_a_second_validation_keeps_why_auto_fell_back(monkeypatch):
    """tfdp-evaluate validates its options, then evaluate_run does again: the fallback reason
    of "auto" must reach evaluation.json (issue 39: without it an evaluation that fell back
    looks like one that asked for the portable kernel)."""
    from tfdp import evaluate  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(kernels, "resolve_noise_kernel", lambda kernel, flag="": (
        ("portable", "noise_kernel=auto: unavailable here") if kernel == "auto"
        else (kernel, None)))
    once = evaluate.validate_options(evaluate.EvalOptions())
    twice = evaluate.validate_options(once)
    assert once.noise_kernel == twice.noise_kernel == "portable"
    assert twice.noise_kernel_fallback == "noise_kernel=auto: unavailable here"
    asked = evaluate.validate_options(evaluate.EvalOptions(noise_kernel="portable"))
    assert asked.noise_kernel_fallback is None
