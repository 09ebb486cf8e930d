"""tfdp.export: the SavedModel serves without tfdp, matches the model and tfdp.certify."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdp import certify, export, rundir

SHAPE, CLASSES, VALUE_RANGE = (28, 28, 1), 10, (-1.0, 1.0)  # as in conftest.py

# As in conftest.py (the run fixtures).
HGM_CERT = {"mechanism": "hgm", "construction_bound": 0.1, "epsilon": 1.0, "delta": 1e-5,
            "sensitivity_sound": True}  # as in conftest.py
VALUE_RANGE = (-1.0, 1.0)

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BIN = os.path.dirname(sys.executable)

# Runs in a fresh interpreter with -I (no PYTHONPATH, no user site, no cwd on the path) in a
# clean environment; the venv's editable install of the project is a meta-path finder, which
# is removed too, and the script checks that tfdp, layers and attacks cannot be imported.
_FRESH = r"""
import importlib.util, json, sys
sys.meta_path[:] = [f for f in sys.meta_path
                    if not getattr(f, "__module__", "").startswith("__editable__")]
sys.path_hooks[:] = [h for h in sys.path_hooks
                     if not getattr(h, "__module__", "").startswith("__editable__")]
sys.path[:] = [p for p in sys.path if p and "wt-" not in p and not p.startswith("/work/main/")
               or "site-packages" in p]
sys.path_importer_cache.clear()
for name in ("tfdp", "layers", "attacks"):
    assert importlib.util.find_spec(name) is None, name + " is importable"
    try:
        __import__(name)
    except ImportError:
        pass
    else:
        raise AssertionError(name + " imported")
import numpy as np
import tensorflow as tf
d = np.load(sys.argv[2])
m = tf.saved_model.load(sys.argv[1])
out = {k: v.numpy() for k, v in m.signatures["serving_default"](x=tf.constant(d["x"])).items()}
cert = m.signatures["certify"](x=tf.constant(d["x"]), num_draws=tf.constant(300, tf.int32),
                               alpha=tf.constant(0.05, tf.float64),
                               attack_size=tf.constant(0.02, tf.float64),
                               seed=tf.constant(11, tf.int64))
out.update({"certify_" + k: v.numpy() for k, v in cert.items()})
np.savez(sys.argv[3], **out)
print("modules:", sorted(n for n in sys.modules if n.split(".")[0] in ("tfdp", "layers",
                                                                        "attacks")))
"""


def test_fresh_process_without_tfdp_matches_model_and_certify(tmp_path, pixeldp_run,
                                                             pixeldp_export, tiny_data):
    x = tiny_data.x_test[:6]
    want_logits = pixeldp_run.model(x, training=False).numpy()
    # draws_per_step 256 < 300 draws: two Monte-Carlo chunks, as the export runs them.
    want = export.certify_in_process(pixeldp_run.model, HGM_CERT, x, 300, 0.05, 0.02, 11)
    np.savez(tmp_path / "in.npz", x=x)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([sys.executable, "-I", "-s", "-c", _FRESH, pixeldp_export.export_dir,
                           str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "modules: []" in proc.stdout
    got = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(got["logits"], want_logits, atol=1e-6, rtol=0)
    np.testing.assert_array_equal(got["class"], np.argmax(want_logits, axis=-1))
    np.testing.assert_array_equal(got["certify_counts"], want["counts"])
    assert got["certify_counts"].sum(axis=1).tolist() == [300] * len(x)
    np.testing.assert_array_equal(got["certify_prediction"], want["prediction"])
    # Same counts; the bounds invert the incomplete beta function in float64 by bisection
    # (scipy uses Boost's inverse), so radii agree to ~1e-12 relative, checked at 1e-9.
    np.testing.assert_allclose(got["certify_lower_bound"], want["lower_bound"], rtol=1e-9)
    np.testing.assert_allclose(got["certify_radius"], want["radius"], rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(got["certify_certified"], want["certified"])
    assert want["radius"].max() > 0  # the comparison covers certified examples


def _cli(*args, cwd):
    proc = subprocess.run([os.path.join(_BIN, "saved_model_cli"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_saved_model_cli_show_and_run(tmp_path, pixeldp_run, pixeldp_export, tiny_data):
    out_dir = pixeldp_export.export_dir
    shown = _cli("show", "--dir", out_dir, "--all", cwd=tmp_path)
    for sig in ("serving_default", "serve", "noisy_predict", "certify"):
        assert f"signature_def['{sig}']" in shown
    for name in ("x", "seed", "num_draws", "alpha", "attack_size"):
        assert f"inputs['{name}']" in shown
    for name in ("logits", "probabilities", "class", "counts", "radius", "certified"):
        assert f"outputs['{name}']" in shown
    x = tiny_data.x_test[:3]
    np.save(tmp_path / "x.npy", x)
    _cli("run", "--dir", out_dir, "--tag_set", "serve", "--signature_def", "serving_default",
         "--inputs", f"x={tmp_path / 'x.npy'}", "--outdir", str(tmp_path / "pred"),
         cwd=tmp_path)
    want = pixeldp_run.model(x, training=False).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "pred" / "logits.npy"), want, atol=1e-6)
    np.testing.assert_array_equal(np.load(tmp_path / "pred" / "class.npy"), want.argmax(-1))


@pytest.mark.slow
def test_saved_model_cli_certify(tmp_path, pixeldp_run, pixeldp_export, tiny_data):
    x = tiny_data.x_test[:3]
    np.save(tmp_path / "x.npy", x)
    out_dir = pixeldp_export.export_dir
    _cli("run", "--dir", out_dir, "--tag_set", "serve", "--signature_def", "certify",
         "--inputs", f"x={tmp_path / 'x.npy'}", "--input_exprs",
         "num_draws=100;alpha=0.05;attack_size=0.01;seed=5", "--outdir",
         str(tmp_path / "cert"), cwd=tmp_path)
    ref = export.certify_in_process(pixeldp_run.model, HGM_CERT, x, 100, 0.05, 0.01, 5)
    np.testing.assert_array_equal(np.load(tmp_path / "cert" / "counts.npy"), ref["counts"])


def test_noisy_predict_is_seeded_and_unbiased(tmp_path, linear_run, tiny_data):
    out = export.export_run(linear_run.model_dir, str(tmp_path / "out"))
    m = tf.saved_model.load(out.export_dir)
    noisy = m.signatures["noisy_predict"]
    x = tf.constant(tiny_data.x_test[:4])
    a = noisy(x=x, seed=tf.constant(1, tf.int64))["logits"].numpy()
    b = noisy(x=x, seed=tf.constant(1, tf.int64))["logits"].numpy()
    c = noisy(x=x, seed=tf.constant(2, tf.int64))["logits"].numpy()
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).min() > 0
    np.testing.assert_allclose(a, export.noisy_in_process(linear_run.model, x, 1), atol=1e-5)
    det = m.signatures["serving_default"](x=x)["logits"].numpy()
    assert np.abs(a - det).max() > 0.1  # the noise is really on
    # Logits are linear in the input noise (GaussianNoise(0.5) -> Dense), so their mean over
    # n draws is unbiased with std 0.5 ||w_k|| / sqrt(n) per logit; 5 std, fixed seed.
    n = 4000
    rows = tf.repeat(x[:1], n, axis=0)  # one independent draw per row
    mean = noisy(x=rows, seed=tf.constant(3, tf.int64))["logits"].numpy().mean(axis=0)
    kernel = linear_run.model.layers[-1].kernel.numpy()
    tol = 5 * 0.5 * np.linalg.norm(kernel, axis=0) / np.sqrt(n)
    assert np.all(np.abs(mean - det[0]) <= tol), (mean - det[0], tol)
    assert np.all(tol < 0.2)  # the tolerance is tight enough to mean something


@pytest.mark.parametrize("fixture", ["nonprivate_run", "dpsgd_run"])
def test_every_trainer_exports(tmp_path, request, fixture, tiny_data):
    run = request.getfixturevalue(fixture)
    out = export.export_run(run.model_dir, str(tmp_path / "out"))
    assert out.signatures == ["serve", "serving_default"]  # no noise layers, no certificate
    m = tf.saved_model.load(out.export_dir)
    x = tiny_data.x_test[:8]
    got = m.signatures["serving_default"](x=tf.constant(x))
    np.testing.assert_allclose(got["logits"].numpy(), run.model(x, training=False).numpy(),
                               atol=1e-6)
    np.testing.assert_allclose(got["probabilities"].numpy().sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(m.serve(tf.constant(x)).numpy(), got["logits"].numpy())
    card = json.load(open(os.path.join(out.export_dir, export.CARD_FILE)))
    assert card["ledger"] == json.load(open(os.path.join(run.model_dir, rundir.LEDGER_FILE)))
    assert card["certification"] is None
    assert "certify" not in card["signatures"]


def _all_keys_and_strings(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield str(k)
            yield from _all_keys_and_strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _all_keys_and_strings(v)
    elif isinstance(obj, str):
        yield obj


def test_model_card_allow_list(tmp_path, pixeldp_run):
    run = rundir.RunDir(str(tmp_path / "run"))
    import shutil
    shutil.copytree(pixeldp_run.model_dir, run.path)
    metrics = run.read_json(rundir.METRICS_FILE)
    # The run has (non-privatised) training statistics to keep out.
    assert metrics["nonprivate_training_stats"]["train_loss"] is not None
    # Training statistics under any key (also nested or at the top level) stay out of the card.
    metrics["train_loss"], metrics["train_accuracy"] = 0.1, 0.9
    run.write_json(rundir.METRICS_FILE, metrics)
    run.write_json(rundir.EVALUATION_FILE, {"clean_accuracy": 0.5, "attacks": {},
                                            "num_examples": 60, "train_loss": 0.2,
                                            "model_dir": run.path})
    out = export.export_run(run.path, str(tmp_path / "out"))
    card = json.load(open(os.path.join(out.export_dir, export.CARD_FILE)))
    with open(os.path.join(out.export_dir, "assets", export.CARD_FILE)) as f:
        assert json.load(f) == card  # also stored as a SavedModel asset
    words = " ".join(_all_keys_and_strings(card))
    for banned in ("train_loss", "train_accuracy", "nonprivate_training", run.path,
                   "--seed", "--model_dir"):
        assert banned not in words, banned
    assert card["test"] == {"test_accuracy": metrics["test_accuracy"]}
    assert card["evaluation"] == {"clean_accuracy": 0.5, "attacks": {}, "num_examples": 60}
    assert card["ledger"] == run.read_json(rundir.LEDGER_FILE)
    assert card["ledger"]["entries"][0]["note"] == "test ledger entry"
    assert card["certification"]["mechanism"] == "hgm"
    assert card["data"]["dataset"] == "sample"
    assert card["data"]["value_range"] == list(VALUE_RANGE)
    assert "--epochs=3" in card["flags"]
    assert card["versions"]["tensorflow"] == tf.__version__
    assert set(card["signatures"]) == {"serving_default", "serve", "noisy_predict", "certify"}
    loaded = tf.saved_model.load(out.export_dir)
    assert os.path.basename(loaded.model_card.asset_path.numpy().decode()) == export.CARD_FILE


def test_keras_routes(pixeldp_export, pixeldp_run, tiny_data):
    x = tiny_data.x_test[:4]
    want = pixeldp_run.model(x, training=False).numpy()
    # The `serve` endpoint is what keras Model.export() writes; TFSMLayer wraps it.
    layer = keras.layers.TFSMLayer(pixeldp_export.export_dir, call_endpoint="serve")
    np.testing.assert_allclose(np.asarray(layer(x)), want, atol=1e-6)
    # The .keras copy loads with tfdp's layers registered (import layers, tfdp.models).
    import layers  # noqa: F401  pylint: disable=unused-import,import-outside-toplevel
    model = keras.saving.load_model(os.path.join(pixeldp_export.export_dir, export.KERAS_FILE),
                                    compile=False)
    np.testing.assert_allclose(model(x, training=False).numpy(), want, atol=1e-6)


def test_bad_inputs(tmp_path, pixeldp_run, pixeldp_export, tiny_data):
    # A run directory without a finished model.
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    for name in (rundir.CONFIG_FILE, rundir.LEDGER_FILE):
        (unfinished / name).write_text(open(os.path.join(pixeldp_run.model_dir, name)).read())
    with pytest.raises(ValueError, match="model_dir: .* has no model.keras"):
        export.export_run(str(unfinished), str(tmp_path / "out1"))
    assert not (tmp_path / "out1").exists()
    with pytest.raises(ValueError, match="model_dir"):
        export.export_run(str(tmp_path / "missing"), str(tmp_path / "out1"))
    # An existing non-empty export directory without overwrite.
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match="export_dir: .* not empty.*overwrite"):
        export.export_run(pixeldp_run.model_dir, str(busy))
    assert os.listdir(busy) == ["keep.txt"]
    with pytest.raises(ValueError, match="export_dir"):
        export.export_run(pixeldp_run.model_dir, pixeldp_run.model_dir, overwrite=True)
    with pytest.raises(ValueError, match="draws_per_step"):
        export.export_run(pixeldp_run.model_dir, str(tmp_path / "out2"), draws_per_step=0)
    with pytest.raises(ValueError, match="bound"):
        export.export_run(pixeldp_run.model_dir, str(tmp_path / "out2"), bound="wilson")
    # num_draws < 1 and alpha outside (0, 1): graph assertions in the signature, ValueError
    # in the Python wrapper.
    m = tf.saved_model.load(pixeldp_export.export_dir)
    x = tf.constant(tiny_data.x_test[:2])

    def call(n, alpha, size=0.1):
        return m.certify(x, tf.constant(n, tf.int32), tf.constant(alpha, tf.float64),
                         tf.constant(size, tf.float64), tf.constant(1, tf.int64))

    with pytest.raises(tf.errors.InvalidArgumentError, match="num_draws must be >= 1"):
        call(0, 0.05)
    for alpha in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"alpha must lie in \(0, 1\)"):
            call(10, alpha)
    with pytest.raises(tf.errors.InvalidArgumentError, match="attack_size"):
        call(10, 0.05, -1.0)
    exported = export.ExportedModel(pixeldp_export.export_dir)
    with pytest.raises(ValueError, match="num_draws"):
        exported.certify(tiny_data.x_test[:2], 0, 0.05, 0.1, 1)
    with pytest.raises(ValueError, match="alpha"):
        exported.certify(tiny_data.x_test[:2], 10, 1.0, 0.1, 1)
    with pytest.raises(ValueError, match="saved_model"):
        export.ExportedModel(str(tmp_path))


def test_failed_export_leaves_nothing_half_written(tmp_path, pixeldp_run, monkeypatch):
    def failing_save(obj, path, **kwargs):
        with open(os.path.join(path, "saved_model.pb"), "wb") as f:
            f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(tf.saved_model, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        export.export_run(pixeldp_run.model_dir, str(tmp_path / "out"))
    assert os.listdir(tmp_path) == []  # neither the target nor a temporary directory
    with pytest.raises(OSError, match="disk full"):
        export.export_run(pixeldp_run.model_dir, str(tmp_path / "new" / "out"))
    assert os.listdir(tmp_path) == []  # the parent it created is gone too
    # With --overwrite, a failure keeps the previous export untouched.
    old = tmp_path / "old"
    old.mkdir()
    (old / "saved_model.pb").write_text("previous")
    with pytest.raises(OSError, match="disk full"):
        export.export_run(pixeldp_run.model_dir, str(old), overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["old"]
    assert (old / "saved_model.pb").read_text() == "previous"
    monkeypatch.undo()
    out = export.export_run(pixeldp_run.model_dir, str(old), overwrite=True)
    assert "certify" in out.signatures and sorted(os.listdir(tmp_path)) == ["old"]


@pytest.mark.parametrize("bound", ["clopper_pearson", "hoeffding"])
def test_stobatch_style_passes_and_once_noise(tmp_path, bound):
    # StoBatch-style certification: two Laplace layers whose noise was drawn once (saved as
    # variables), Monte-Carlo passes that each refresh one of them, product of the softmax
    # outputs (StoBatch Theorem 5); the export must reproduce tfdp.certify on it.
    import layers  # pylint: disable=import-outside-toplevel
    keras.utils.set_random_seed(0)
    inp = keras.Input((6, 6, 1))
    h = layers.LaplaceNoise(0.2, noise_mode="once", seed=1, name="input_noise",
                            inference_fresh_scale=0.5)(inp)
    h = keras.layers.Dense(8)(keras.layers.Flatten()(h))
    h = layers.LaplaceNoise(0.3, noise_mode="once", seed=2, name="latent_noise")(h)
    model = keras.Model(inp, keras.layers.Dense(4)(keras.layers.ReLU()(h)))
    last = model.layers[-1]
    last.kernel.assign(last.kernel * 20.0)  # confident enough for non-zero radii
    cert = {"mechanism": "stobatch", "sensitivity": 2.0, "batch_size": 10, "epsilon1": 0.2,
            "d_cert": 36, "delta_rh": 3.0, "delta_rx_mode": "mu_a", "psi": 2.0,
            "passes": [["input_noise"], ["latent_noise"]], "bound": bound}
    run = rundir.RunDir(str(tmp_path / "run"), create=True)
    model.save(run.file(rundir.MODEL_FILE))
    run.write_json(rundir.CONFIG_FILE, {"method": "stobatch_test", "dataset": "synthetic",
                                        "value_range": [-1.0, 1.0], "input_shape": [6, 6, 1],
                                        "num_classes": 4, "certification": cert})
    run.write_json(rundir.LEDGER_FILE, {"epsilon": 0.0, "delta": 0.0, "claimed_epsilon": 0.0,
                                        "claimed_delta": 0.0, "differs": False, "entries": []})
    out = export.export_run(run.path, str(tmp_path / "out"), draws_per_step=64)
    assert out.card["signatures"]["certify"]["bound"] == bound
    m = tf.saved_model.load(out.export_dir)
    x = np.random.default_rng(0).uniform(-1, 1, (5, 6, 6, 1)).astype(np.float32)
    for size in (0.001, 0.01):
        got = m.certify(tf.constant(x), tf.constant(150, tf.int32),
                        tf.constant(0.05, tf.float64), tf.constant(size, tf.float64),
                        tf.constant(4, tf.int64))
        want = export.certify_in_process(model, cert, x, 150, 0.05, size, 4,
                                         bound=bound, draws_per_step=64)
        np.testing.assert_array_equal(got["counts"].numpy(), want["counts"])
        # Means: the same draws summed per chunk here and per export step (float64). The
        # in-process passes have a static batch (tfdp.certify.MonteCarloPredictor), the
        # signature's a dynamic one, so the float32 forward passes may use other kernels:
        # agreement to float32 rounding (the counts above are equal).
        np.testing.assert_allclose(got["mean_scores"].numpy(), want["mean_scores"], rtol=1e-6,
                                   atol=1e-9)
        np.testing.assert_array_equal(got["prediction"].numpy(), want["prediction"])
        # delta_rx_mode="mu_a" is not a sound reading (docs/stobatch.md): the outputs are claims.
        np.testing.assert_allclose(got["claimed_radius"].numpy(), want["claimed_radius"],
                                   rtol=1e-6, atol=1e-12)
        np.testing.assert_array_equal(got["claimed_certified"].numpy(),
                                      want["claimed_certified"])
        if bound == "clopper_pearson":
            assert want["claimed_radius"].max() > 0
    # The deterministic path keeps the drawn-once noise off, as the in-process model does.
    np.testing.assert_allclose(m.serve(tf.constant(x)).numpy(),
                               model(x, training=False).numpy(), atol=1e-6)


def test_nested_noise_is_off_in_serving_and_stateless(tmp_path):
    # A noise layer inside a custom layer (DPAutoEncoderConv's Laplace noise), saved with its
    # inference noise on: serving_default must still be noise-free and every signature
    # stateless (the layer's draw counter never advances).
    import layers  # pylint: disable=import-outside-toplevel
    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 1))
    enc = layers.DPAutoEncoderConv(4, 3, 0.5, seed=1, name="ae")
    h = enc(inp)
    model = keras.Model(inp, keras.layers.Dense(3)(keras.layers.Flatten()(h)))
    layers.set_inference_noise(model, True)
    run = rundir.RunDir(str(tmp_path / "run"), create=True)
    model.save(run.file(rundir.MODEL_FILE))
    run.write_json(rundir.CONFIG_FILE, {"method": "ae_test", "dataset": "synthetic",
                                        "value_range": [-1.0, 1.0], "input_shape": [8, 8, 1],
                                        "num_classes": 3, "certification": None})
    run.write_json(rundir.LEDGER_FILE, {"epsilon": 0.0, "delta": 0.0, "entries": []})
    out = export.export_run(run.path, str(tmp_path / "out"))
    m = tf.saved_model.load(out.export_dir)
    x = tf.constant(np.random.default_rng(0).uniform(-1, 1, (2, 8, 8, 1)).astype(np.float32))
    a, b = m.serve(x).numpy(), m.serve(x).numpy()
    np.testing.assert_array_equal(a, b)
    layers.set_inference_noise(model, False)
    np.testing.assert_allclose(a, model(x, training=False).numpy(), atol=1e-6)


def test_unsound_certificate_outputs_are_claimed(pixeldp_run, tiny_data):
    # Issue 23: an unsound certificate's export outputs and model-card docs say "claimed".
    claimed = {"mechanism": "hgm", "construction_bound": 0.1, "epsilon": 1.0, "delta": 1e-5,
               "sensitivity_mode": "code_spectral", "sensitivity_sound": False}
    module, sigs = export.build_module(pixeldp_run.model, claimed, SHAPE, CLASSES)
    out = module.certify(tf.constant(tiny_data.x_test[:4]), tf.constant(50, tf.int32),
                         tf.constant(0.05, tf.float64), tf.constant(0.0, tf.float64),
                         tf.constant(3, tf.int64))
    assert {"claimed_radius", "claimed_certified"} <= set(out)
    assert "radius" not in out and "certified" not in out
    docs = export._signature_docs(True, certify.validate_certification(claimed),  # pylint: disable=protected-access
                                  SHAPE, VALUE_RANGE, "clopper_pearson", 256)
    assert docs["certify"]["certificate"]["sound"] is False
    assert "CLAIMED" in docs["certify"]["certificate"]["meaning"]
    want = export.certify_in_process(pixeldp_run.model, claimed, tiny_data.x_test[:4], 50,
                                     0.05, 0.0, 3)
    np.testing.assert_allclose(out["claimed_radius"].numpy(), want["claimed_radius"],
                               rtol=1e-9, atol=1e-12)


def test_smoothing_certify_signature_matches_in_process(nonprivate_run, tiny_data):
    # gaussian_smoothing: n0 selection draws and n estimation draws, seeded apart; the graph
    # (one-sided Clopper-Pearson by bisection, ndtri) equals scipy in process.
    cert = {"mechanism": "gaussian_smoothing", "sigma": 0.25, "selection_draws": 30}
    module, _ = export.build_module(nonprivate_run.model, cert, SHAPE, CLASSES)
    x = tiny_data.x_test[:6]
    out = module.certify(tf.constant(x), tf.constant(200, tf.int32),
                         tf.constant(0.01, tf.float64), tf.constant(0.0, tf.float64),
                         tf.constant(9, tf.int64))
    want = export.certify_in_process(nonprivate_run.model, cert, x, 200, 0.01, 0.0, 9)
    np.testing.assert_array_equal(out["counts"].numpy(), want["counts"])
    np.testing.assert_array_equal(out["prediction"].numpy(), want["prediction"])
    np.testing.assert_allclose(out["lower_bound"].numpy(), want["lower_bound"], rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_allclose(out["radius"].numpy(), want["radius"], rtol=1e-9, atol=1e-12)
    assert np.any(want["radius"] > 0)
