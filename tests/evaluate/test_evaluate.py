"""The evaluation harness: evaluation.json, certificates.tsv, plot, options, CLI."""

import csv
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import layers
from tfdp import data, evaluate, rundir

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BIN = os.path.join(os.path.dirname(sys.executable))

HGM_CERT = {"mechanism": "hgm", "construction_bound": 0.1, "epsilon": 1.0, "delta": 1e-5,
            "sensitivity_sound": True}


def _write_run(path, certification, stddev=0.0):
    """A run directory: a small MLP with a Gaussian noise layer, trained briefly on `sample`."""
    x, y = data.load("sample", "train", value_range=(-1.0, 1.0), num_examples=1000)
    keras.utils.set_random_seed(0)
    inp = keras.Input((28, 28, 1))
    h = keras.layers.Dense(32)(keras.layers.Flatten()(inp))
    h = layers.GaussianNoise(stddev, seed=1, name="robustness_noise", allow_zero=stddev == 0)(h)
    out = keras.layers.Dense(10)(keras.layers.ReLU()(h))
    model = keras.Model(inp, out)
    model.compile(keras.optimizers.Adam(3e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=50, epochs=2, verbose=0)
    os.makedirs(path, exist_ok=True)
    model.save(os.path.join(path, rundir.MODEL_FILE))
    config = {"method": "test", "dataset": "sample", "data_dir": None,
              "value_range": [-1.0, 1.0], "input_shape": [28, 28, 1], "num_classes": 10,
              "seed": 0, "certification": certification}
    with open(os.path.join(path, rundir.CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(config, f)
    return str(path)


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory):
    return _write_run(tmp_path_factory.mktemp("plain"), None)


@pytest.fixture(scope="module")
def noisy_run(tmp_path_factory):
    return _write_run(tmp_path_factory.mktemp("noisy"), HGM_CERT, stddev=0.3)


def _read_tsv(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def test_run_without_certification(plain_run):
    opts = evaluate.EvalOptions(attacks=("fgsm", "ifgsm", "mim", "madry"),
                                attack_sizes=(0.1, 0.3), nb_iter=3, num_examples=60,
                                batch_size=25, seed=0, certify=True)
    summary = evaluate.evaluate_run(plain_run, opts)
    on_disk = json.load(open(os.path.join(plain_run, rundir.EVALUATION_FILE)))
    assert on_disk["clean_accuracy"] == summary["clean_accuracy"]
    assert set(on_disk["attacks"]) == {"fgsm", "ifgsm", "mim", "madry"}
    assert set(on_disk["attacks"]["fgsm"]) == {"0.1", "0.3"}
    assert on_disk["attacks"]["mim"]["0.3"]["certified_accuracy_on_attacked_inputs"] is None
    assert "no robustness noise" in on_disk["certified_accuracy_note"]
    assert os.path.getsize(os.path.join(plain_run, evaluate.PLOT_FILE)) > 1000
    rows = _read_tsv(os.path.join(plain_run, rundir.CERTIFICATES_FILE))
    assert len(rows) == 60 * (1 + 4 * 2)
    assert list(rows[0]) == list(evaluate.TSV_COLUMNS)
    # The summary is the mean of the per-example records.
    for name, entry in on_disk["attacks"].items():
        for size, res in entry.items():
            sel = [r for r in rows if r["attack"] == name and float(r["attack_size"]) ==
                   float(size)]
            assert len(sel) == 60
            assert res["accuracy"] == pytest.approx(np.mean([int(r["correct"]) for r in sel]))
    clean = [r for r in rows if r["attack"] == "clean"]
    assert summary["clean_accuracy"] == pytest.approx(np.mean([int(r["correct"])
                                                               for r in clean]))
    assert summary["clean_accuracy"] > 0.6
    # The strongest attack at 0.3 on [-1, 1] lowers the accuracy of this undefended model.
    assert on_disk["attacks"]["ifgsm"]["0.3"]["accuracy"] < summary["clean_accuracy"]


def test_run_with_certification(noisy_run):
    opts = evaluate.EvalOptions(attacks=("fgsm",), attack_sizes=(0.05, 0.5), certify=True,
                                num_draws=300, alpha=0.05, num_examples=40, batch_size=20,
                                seed=0)
    summary = evaluate.evaluate_run(noisy_run, opts)
    assert summary["prediction"] == "monte_carlo"
    assert summary["certification"]["mechanism"] == "hgm"
    rows = _read_tsv(os.path.join(noisy_run, rundir.CERTIFICATES_FILE))
    for size in ("0.05", "0.5"):
        res = summary["attacks"]["fgsm"][size]
        cert_acc = res["certified_accuracy_on_attacked_inputs"]
        assert cert_acc is not None
        assert 0.0 <= cert_acc <= res["accuracy"]  # certified <= conventional
        assert res["n"] == 40 and res["accuracy_ci95"][0] <= res["accuracy"]
        sel = [r for r in rows if r["attack"] == "fgsm" and float(r["attack_size"]) ==
               float(size)]
        certified = [int(r["correct"]) and float(r["radius"]) >= float(size) and
                     float(r["radius"]) > 0 for r in sel]
        assert cert_acc == pytest.approx(np.mean(certified))
        assert all(int(r["certified"]) == (float(r["radius"]) >= float(size) and
                                           float(r["radius"]) > 0) for r in sel)
    radii = np.array([float(r["radius"]) for r in rows])
    assert np.all(radii >= 0) and np.any(radii > 0)
    clean_cert = summary["clean_certified_accuracy"]
    assert set(clean_cert) == {"0.05", "0.5"}
    assert (clean_cert["0.5"]["value"] <= clean_cert["0.05"]["value"]
            <= summary["clean_accuracy"])
    lo, hi = clean_cert["0.5"]["ci95"]
    assert clean_cert["0.5"]["n"] == 40 and lo <= clean_cert["0.5"]["value"] <= hi
    # The contract other tools read (issue 23).
    assert summary["certification"]["name"] == "hgm"
    assert summary["certification"]["norm"] == "linf" and summary["certification"]["sound"]


def test_size_range_converts_sizes(plain_run):
    model, _ = evaluate.load_run(plain_run)
    x, y = data.load("sample", "test", value_range=(-1.0, 1.0), num_examples=10)
    opts = evaluate.EvalOptions(attacks=("fgsm",), attack_sizes=(0.1,), size_range=(0, 1))
    summary, _ = evaluate.evaluate_arrays(model, x, y, value_range=(-1.0, 1.0),
                                          certification=None, options=opts)
    # 0.1 on [0, 1] is 0.2 on [-1, 1]; the key keeps the size as given.
    assert summary["attacks"]["fgsm"]["0.1"]["eps_data"] == pytest.approx(0.2)


def test_stobatch_passes_compose_two_mechanisms():
    # Two fixed-noise ("once") Laplace layers and no fresh noise: each pass equals the
    # fixed-noise forward pass, so the composed score is its softmax squared
    # (StoBatch Corollary 1).
    keras.utils.set_random_seed(2)
    inp = keras.Input((6,))
    h = layers.LaplaceNoise(0.1, noise_mode="once", seed=1, inference_fresh_scale=0.0,
                            name="input_noise")(inp)
    h = keras.layers.Dense(5)(h)
    h = layers.LaplaceNoise(0.1, noise_mode="once", seed=2, inference_fresh_scale=0.0,
                            name="latent_noise")(h)
    model = keras.Model(inp, keras.layers.Dense(3)(keras.layers.ReLU()(h)))
    cert = {"mechanism": "stobatch", "sensitivity": 10.0, "batch_size": 5, "epsilon1": 1.0,
            "d_cert": 6, "delta_rh": 2.0, "psi": 2.0,
            "passes": [["input_noise"], ["latent_noise"]]}
    _, score, from_logits = evaluate.model_functions(model, cert)
    assert not from_logits
    x = np.random.default_rng(0).uniform(-1, 1, (4, 6)).astype(np.float32)
    layers.set_inference_noise(model, True)
    fixed = tf.nn.softmax(model(x, training=False)).numpy()
    layers.set_inference_noise(model, False)
    np.testing.assert_allclose(score(tf.constant(x)).numpy(), fixed ** 2, rtol=1e-5)
    # Fresh noise on: the passes randomise one layer each, leaving the switch as it was.
    for layer in model.layers:
        if isinstance(layer, layers.LaplaceNoise):
            layer.inference_fresh_scale = 0.5
    y = fixed.argmax(1)
    summary, records = evaluate.evaluate_arrays(
        model, x, y, value_range=(-1.0, 1.0), certification=cert,
        options=evaluate.EvalOptions(attacks=("ifgsm",), attack_sizes=(0.1,), nb_iter=2,
                                     certify=True, num_draws=50))
    assert summary["attacks"]["ifgsm"]["0.1"]["certified_accuracy_on_attacked_inputs"] is not None
    assert all(r[5] >= 0 for r in records)
    assert all(not l.inference_noise for l in model.layers
               if isinstance(l, layers.LaplaceNoise))


@pytest.mark.parametrize("kwargs,match", [
    ({"attacks": ("fgsm", "cw")}, "unknown attack"),
    ({"attack_sizes": (0.1, -0.2)}, "attack_sizes"),
    ({"num_draws": 0}, "num_draws"),
    ({"alpha": 1.0}, "alpha"),
    ({"alpha": 0.0}, "alpha"),
    ({"bound": "chernoff"}, "bound"),
    ({"size_range": (1, 0)}, "size_range"),
])
def test_bad_options_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        evaluate.validate_options(evaluate.EvalOptions(**kwargs))


def test_bad_options_fail_before_loading(tmp_path):
    # The directory does not even exist: the option error must come first.
    with pytest.raises(ValueError, match="alpha"):
        evaluate.evaluate_run(str(tmp_path / "missing"), evaluate.EvalOptions(alpha=2.0))
    with pytest.raises(ValueError, match="model_dir"):
        evaluate.evaluate_run(str(tmp_path / "missing"), evaluate.EvalOptions())


def _run(cmd, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return subprocess.run(cmd, cwd=_ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_cli_rejects_unknown_attack(tmp_path):
    proc = _run([os.path.join(_BIN, "tfdp-evaluate"), f"--model_dir={tmp_path}",
                 "--attacks=fgsm,foo"])
    assert proc.returncode != 0
    assert "unknown attack 'foo'" in proc.stderr + proc.stdout
    assert not os.path.exists(tmp_path / rundir.EVALUATION_FILE)


def test_cli_end_to_end_on_trained_run(tmp_path):
    run = str(tmp_path / "run")
    proc = _run([os.path.join(_BIN, "tfdp-train"), "--method=nonprivate", "--dataset=sample",
                 f"--model_dir={run}", "--epochs=1", "--seed=0", "--num_train=200",
                 "--num_test=50", "--verbose=0"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = _run([os.path.join(_BIN, "tfdp-evaluate"), f"--model_dir={run}",
                 "--attacks=fgsm,ifgsm", "--attack_sizes=0.1,0.2", "--nb_iter=3",
                 "--num_examples=50", "--seed=0"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.load(open(os.path.join(run, rundir.EVALUATION_FILE)))
    assert isinstance(result["clean_accuracy"], float)
    for name in ("fgsm", "ifgsm"):
        for size in ("0.1", "0.2"):
            assert isinstance(result["attacks"][name][size]["accuracy"], float)
            assert result["attacks"][name][size]["certified_accuracy_on_attacked_inputs"] is None
    assert len(_read_tsv(os.path.join(run, rundir.CERTIFICATES_FILE))) == 50 * 5


def test_certify_defaults_to_the_runs_num_test_and_says_its_plan(tmp_path, noisy_run):
    # Issue 40: --certify without --num_examples evaluated all 10,000 test images silently.
    import shutil  # pylint: disable=import-outside-toplevel
    run = tmp_path / "run"
    shutil.copytree(noisy_run, run)
    config = json.load(open(run / rundir.CONFIG_FILE))
    json.dump(dict(config, num_test=30), open(run / rundir.CONFIG_FILE, "w"))
    lines = []
    summary = evaluate.evaluate_run(str(run), evaluate.EvalOptions(
        attacks=("fgsm",), attack_sizes=(0.1,), certify=True, num_draws=50, batch_size=10,
        seed=0), say=lines.append)
    assert summary["num_examples"] == 30
    assert summary["num_examples_source"] == "the run's --num_test=30"
    assert lines[0].startswith("evaluating 30 test examples (the run's --num_test=30) x 2 jobs")
    assert "50 Monte-Carlo draws" in lines[0] and "--num_examples=N" in lines[0]
    assert "ETA" in lines[1] and lines[1].startswith("evaluated 10/60 example-jobs")
    assert lines[-1].startswith("evaluated 60/60")


def test_default_num_examples():
    opts = evaluate.EvalOptions(certify=True)
    assert evaluate.default_num_examples(opts, {"num_test": 500}) == (
        500, "the run's --num_test=500")
    n, why = evaluate.default_num_examples(opts, {"num_test": 10000})
    assert n == evaluate.DEFAULT_CERTIFY_EXAMPLES and "10000" in why
    assert evaluate.default_num_examples(opts, {})[0] == evaluate.DEFAULT_CERTIFY_EXAMPLES
    assert evaluate.default_num_examples(evaluate.EvalOptions(), {"num_test": 500}) == (
        None, "all test examples")  # no Monte-Carlo: every test example, as before
    assert evaluate.default_num_examples(evaluate.EvalOptions(certify=True, num_examples=7),
                                         {"num_test": 500}) == (7, "--num_examples")
