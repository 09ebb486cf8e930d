"""tfdp.keras.certify / predict / audit on a user's Keras model."""

import csv
import json
import os

import keras
import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from tfdp import evaluate, rundir
from tfdp.certify import smoothing
from tfdp.keras import audit, certify

L = keras.layers


def _constant_model(num_inputs=4, winner=0):
    """Always class `winner` by a wide margin, whatever the (noisy) input."""
    model = keras.Sequential([keras.Input((num_inputs,)), L.Dense(3, kernel_initializer="zeros")])
    bias = np.zeros(3, np.float32)
    bias[winner] = 50.0
    model.layers[-1].bias.assign(bias)
    return model


def test_certificate_of_a_constant_classifier_is_the_closed_form(tmp_path):
    x = np.full((5, 4), 0.5, np.float32)
    y = np.array([0, 0, 0, 1, 2])
    sigma, n, alpha = 0.25, 200, 0.01
    summary = certify.certify(_constant_model(), x, y, sigma=sigma, value_range=(0.0, 1.0),
                              n0=20, n=n, alpha=alpha, attack_sizes=(0.1, 1.0), seed=1,
                              out_dir=str(tmp_path))
    # Cohen et al. 2019: all n draws vote class 0, the one-sided Clopper-Pearson lower bound
    # of p_A is alpha^(1/n), and the radius sigma Phi^-1(alpha^(1/n)).
    radius = sigma * scipy.stats.norm.ppf(alpha ** (1.0 / n))
    with open(tmp_path / rundir.CERTIFICATES_FILE, encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert len(rows) == 5
    for row in rows:
        assert int(row["prediction"]) == 0
        assert float(row["radius"]) == pytest.approx(radius, abs=1e-6)  # TSV: 6 digits
    clean = summary["clean_certified_accuracy"]
    assert clean[evaluate.size_key(0.1)]["value"] == pytest.approx(0.6)   # radius ~0.50
    assert clean[evaluate.size_key(1.0)]["value"] == 0.0
    assert summary["certified_label"] == "certified"
    assert sorted(certify.output_files(str(tmp_path))) == sorted(
        [rundir.CERTIFICATES_FILE, rundir.EVALUATION_FILE, evaluate.PLOT_FILE])
    with open(tmp_path / rundir.EVALUATION_FILE, encoding="utf-8") as f:
        assert json.load(f)["certification"]["selection_draws"] == 20


def test_same_numbers_as_tfdp_evaluate_on_the_same_weights(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (12, 6)).astype(np.float32)
    y = rng.integers(0, 3, 12)
    model = keras.Sequential([keras.Input((6,)), L.Dense(8, activation="relu"), L.Dense(3)])
    cert = smoothing.certification(0.5)
    cert.update(selection_draws=30, num_draws=300, alpha=0.01)
    opts = evaluate.EvalOptions(attacks=("fgsm",), attack_sizes=(0.25,), certify=True,
                                num_draws=300, alpha=0.01, seed=3, attack_norm="2",
                                noise_kernel="portable")
    tf.random.set_seed(3)
    want, want_records = evaluate.evaluate_arrays(model, x, y, value_range=(0.0, 1.0),
                                                  certification=cert, options=opts)
    got = certify.certify(model, x, y, sigma=0.5, value_range=(0.0, 1.0), n0=30, n=300,
                          alpha=0.01, attacks=("fgsm",), attack_sizes=(0.25,), seed=3)
    assert got["clean_certified_accuracy"] == want["clean_certified_accuracy"]
    assert got["attacks"] == want["attacks"]
    assert got["certification"] == want["certification"]


def test_predict_returns_the_class_or_abstains():
    x = np.zeros((4, 4), np.float32)
    assert list(certify.predict(_constant_model(winner=2), x, sigma=0.5, n=100, alpha=0.01,
                                seed=0)) == [2] * 4
    # A classifier that is a coin flip under the noise: sign of the first input.
    coin = keras.Sequential([keras.Input((4,)), L.Dense(2, kernel_initializer="zeros")])
    kernel = np.zeros((4, 2), np.float32)
    kernel[0] = [100.0, -100.0]
    coin.layers[-1].kernel.assign(kernel)
    out = certify.predict(coin, x, sigma=1.0, n=400, alpha=0.001, seed=0)
    assert list(out) == [certify.ABSTAIN] * 4


def test_certify_rejects_bad_arguments():
    with pytest.raises(ValueError, match="sigma"):
        certify.certify(_constant_model(), np.zeros((2, 4)), np.zeros(2), sigma=0.0,
                        value_range=(0, 1))
    with pytest.raises(ValueError, match="n0"):
        certify.certify(_constant_model(), np.zeros((2, 4)), np.zeros(2), sigma=1.0,
                        value_range=(0, 1), n0=0)


def test_one_run_audit_of_a_fit_run(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (400, 8)).astype(np.float32)
    y = (x[:, 0] > 0.5).astype(np.int32)

    def build():
        return keras.Sequential([keras.Input((8,)), L.Dense(16, activation="relu"), L.Dense(2)])

    report = audit.audit_fit(
        build, x, y, num_classes=2, num_canaries=40, seed=5, out_dir=str(tmp_path),
        private=dict(epsilon=4.0, delta=1e-5, epochs=2, batch_size=40, seed=9),
        compile_args=dict(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True)),
        fit_args=dict(verbose=0))
    with open(os.path.join(tmp_path, "audit.json"), encoding="utf-8") as f:
        on_disk = json.load(f)
    assert on_disk == json.loads(json.dumps(report))
    assert report["num_canaries"] == 40 and report["k_plus"] == 4 == report["k_minus"]
    assert 0.0 <= report["epsilon_lower_bound"] <= report["sound_epsilon"] <= 4.0
    assert report["num_train_with_canaries"] == 360 + report["num_included"]


def test_soundness_check_runs_on_a_user_model():
    x = np.full((4, 4), 0.5, np.float32)
    y = np.zeros(4, np.int64)
    summary = certify.certify(_constant_model(), x, y, sigma=0.25, value_range=(0.0, 1.0),
                              n0=20, n=100, alpha=0.01, attacks=("madry",), attack_sizes=(0.2,),
                              nb_iter=3, soundness_check=True, soundness_nb_iter=3,
                              soundness_eot_draws=2, seed=0)
    check = summary["soundness_check"]
    # Every clean example is certified; a constant classifier cannot be flipped.
    assert check["certified"] == 4 and check["flipped"] == 0 and check["sound"]
