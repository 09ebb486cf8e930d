"""Randomized-smoothing evaluation, claimed naming of unsound certificates, soundness check,
and the bad-input errors of issue 23 (one line naming the flag, before any work)."""

import dataclasses
import os

import keras
import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

import layers
from tfdp import certify, data, evaluate
from tfdp.apps import train as train_app
from tfdp.certify import smoothing

SMOOTH = {"mechanism": "gaussian_smoothing", "sigma": 0.25, "selection_draws": 20}
CLAIMED = {"mechanism": "hgm", "construction_bound": 0.1, "epsilon": 1.0, "delta": 1e-5,
           "sensitivity_mode": "code_spectral", "sensitivity_sound": False}


@pytest.fixture(scope="module")
def mnist_mlp():
    """A small MLP trained briefly on the sample with Gaussian input noise (sigma 0.25)."""
    x, y = data.load("sample", "train", value_range=(0.0, 1.0), num_examples=2000)
    keras.utils.set_random_seed(0)
    inp = keras.Input((28, 28, 1))
    h = layers.GaussianNoise(0.3, seed=1, name="robustness_noise")(
        keras.layers.Dense(64, activation="relu")(keras.layers.Flatten()(inp)))
    model = keras.Model(inp, keras.layers.Dense(10)(h))
    model.compile(keras.optimizers.Adam(3e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    noisy = x + 0.25 * np.random.default_rng(0).standard_normal(x.shape).astype(np.float32)
    model.fit(noisy, y, batch_size=100, epochs=3, verbose=0)
    xt, yt = data.load("sample", "test", value_range=(0.0, 1.0), num_examples=40)
    return model, xt, yt


def test_smoothing_certifies_in_l2_with_cis_and_soundness_check(mnist_mlp):
    model, x, y = mnist_mlp
    opts = evaluate.EvalOptions(attacks=("madry",), attack_sizes=(0.1, 0.25), nb_iter=3,
                                eot_draws=4, attack_norm="2", certify=True, num_draws=200,
                                alpha=0.01, batch_size=40, seed=0, soundness_check=True,
                                soundness_nb_iter=5, soundness_eot_draws=4)
    summary, records = evaluate.evaluate_arrays(model, x, y, value_range=(0.0, 1.0),
                                                certification=SMOOTH, options=opts)
    cert = summary["certification"]
    assert (cert["name"], cert["norm"], cert["sound"]) == ("gaussian_smoothing", "l2", True)
    assert summary["attack_norm"] == "l2"
    clean = summary["clean_certified_accuracy"]
    assert set(clean) == {"0.1", "0.25"} and clean["0.1"]["n"] == 40
    assert 0 < clean["0.25"]["value"] <= clean["0.1"]["value"] <= summary["clean_accuracy"]
    # No radius exceeds the largest one n = 200 draws can give: sigma Phi^-1(alpha^(1/n)).
    r_max = 0.25 * scipy.stats.norm.ppf(0.01 ** (1 / 200))
    radii = np.array([r[5] for r in records if r[0] == "clean"])
    assert radii.max() <= r_max + 1e-9 and np.any(radii > 0)
    check = summary["soundness_check"]
    assert check["certified"] == int(np.sum(radii > 0))
    assert 0 <= check["flipped"] <= check["certified"] and 0 <= check["p_value"] <= 1
    assert check["norm"] == "l2"
    text = "\n".join(evaluate.summary_lines(summary))
    assert "clean certified accuracy at l2 radius 0.25" in text and "CLAIMED" not in text


def test_unsound_certificate_is_named_claimed(mnist_mlp, tmp_path):
    model, x, y = mnist_mlp
    opts = evaluate.EvalOptions(attacks=("fgsm",), attack_sizes=(0.05,), certify=True,
                                num_draws=50, num_examples=20, seed=0)
    summary, records = evaluate.evaluate_arrays(model, x, y, value_range=(0.0, 1.0),
                                                certification=CLAIMED, options=opts)
    assert summary["certification"]["sound"] is False
    assert "clean_certified_accuracy" not in summary
    assert set(summary["clean_claimed_certified_accuracy"]) == {"0.05"}
    cell = summary["attacks"]["fgsm"]["0.05"]
    assert "claimed_certified_accuracy_on_attacked_inputs" in cell
    assert not any("certified" in k and not k.startswith("claimed") for k in cell)
    assert "code_spectral" in summary["claimed_note"]
    path = evaluate.write_certificates(str(tmp_path / "c.tsv"), records,
                                       claimed=evaluate.certified_key(summary) !=
                                       "certified_accuracy")
    header = open(path, encoding="utf-8").readline().split("\t")
    assert "claimed_radius" in header and "claimed_certified" in header
    assert "radius" not in header and "certified" not in header
    text = "\n".join(evaluate.summary_lines(summary))
    assert "CLAIMED certified" in text


def test_l2_certificate_gives_linf_radii_only_through_sqrt_d(mnist_mlp):
    """Issue 23 item 4: l_inf attacks on an l2 certificate use l2 radius / sqrt(d)."""
    model, x, y = mnist_mlp
    opts = evaluate.EvalOptions(attacks=("fgsm",), attack_sizes=(0.002, 0.01), certify=True,
                                num_draws=200, alpha=0.01, batch_size=40, seed=0)
    summary, records = evaluate.evaluate_arrays(model, x, y, value_range=(0.0, 1.0),
                                                certification=SMOOTH, options=opts)
    assert summary["attack_norm"] == "linf" and "sqrt(d), d = 784" in summary[
        "radius_conversion"]
    clean = [r for r in records if r[0] == "clean"]
    radii = np.array([r[5] for r in clean])
    # The largest l2 radius 200 draws can give, over sqrt(784) = 28.
    r_max = 0.25 * scipy.stats.norm.ppf(0.01 ** (1 / 200)) / 28.0
    assert np.any(radii > 0) and radii.max() <= r_max + 1e-12
    correct = np.array([r[6] for r in clean])
    for size in (0.002, 0.01):
        want = np.mean(correct & (radii >= size) & (radii > 0))
        assert summary["clean_certified_accuracy"][str(size)]["value"] == pytest.approx(want)
    text = "\n".join(evaluate.summary_lines(summary))
    assert "l_inf radius 0.002" in text and "sqrt(d)" in text


def test_attack_norm_must_match_the_certificate(mnist_mlp):
    model, x, y = mnist_mlp
    linf = dict(CLAIMED, sensitivity_mode="layer_max", sensitivity_sound=True)
    with pytest.raises(ValueError, match="attack_norm"):
        evaluate.evaluate_arrays(model, x, y, value_range=(0.0, 1.0), certification=linf,
                                 options=evaluate.EvalOptions(certify=True, attack_norm="2"))
    with pytest.raises(ValueError, match="attack_norm"):
        evaluate.validate_options(evaluate.EvalOptions(attack_norm="1"))
    with pytest.raises(ValueError, match="soundness_check"):
        evaluate.validate_options(evaluate.EvalOptions(soundness_check=True))


def test_smoothed_score_adds_input_noise():
    fn = smoothing.smoothed_score(lambda v: v, 0.5)
    out = fn(tf.zeros((2000, 3))).numpy()
    assert abs(out.std() - 0.5) < 0.03 and abs(out.mean()) < 0.03
    seed = tf.constant([1, 2], tf.int64)
    a = smoothing.add_gaussian_noise(tf.zeros((4,)), 1.0, seed).numpy()
    np.testing.assert_array_equal(a, smoothing.add_gaussian_noise(tf.zeros((4,)), 1.0,
                                                                  seed).numpy())


def test_seeded_smoothed_score_draws_the_same_noise_in_the_same_order():
    """tfdp-evaluate --seed keys smoothing's input draws: the same seed repeats every draw,
    another seed draws other noise, and successive calls draw fresh noise."""
    a, b = (smoothing.smoothed_score(lambda v: v, 0.5, seed=7) for _ in range(2))
    c = smoothing.smoothed_score(lambda v: v, 0.5, seed=8)
    zeros = tf.zeros((500, 3))
    first, second = a(zeros).numpy(), a(zeros).numpy()
    np.testing.assert_array_equal(first, b(zeros).numpy())
    np.testing.assert_array_equal(second, b(zeros).numpy())
    assert not np.array_equal(first, second)
    assert not np.array_equal(first, c(zeros).numpy())
    assert abs(first.std() - 0.5) < 0.05


def test_a_seeded_smoothing_evaluation_reruns_identically(mnist_mlp):
    model, x, y = mnist_mlp
    opts = evaluate.EvalOptions(attacks=("fgsm",), attack_sizes=(0.1,), attack_norm="2",
                                certify=True, num_draws=60, alpha=0.01, batch_size=40, seed=3)
    # sigma 1: heavy noise, so that the counts (and radii) vary from draw to draw.
    heavy = dict(SMOOTH, sigma=1.0)
    runs = [evaluate.evaluate_arrays(model, x, y, value_range=(0.0, 1.0),
                                     certification=heavy, options=opts)[1] for _ in range(2)]
    # Records without their seconds column: predictions, radii, certified flags.
    assert [r[:8] for r in runs[0]] == [r[:8] for r in runs[1]]
    other = evaluate.evaluate_arrays(model, x, y, value_range=(0.0, 1.0), certification=heavy,
                                     options=dataclasses.replace(opts, seed=4))[1]
    assert [r[:8] for r in other] != [r[:8] for r in runs[0]]


def _values(tmp_path, **kw):
    values = {"method": "nonprivate", "dataset": "sample", "model_dir": str(tmp_path / "run")}
    values.update(kw)
    return values


@pytest.mark.parametrize("options, match", [
    ({"smoothing_sigma": 0.0}, "--smoothing_sigma"),
    ({"smoothing_sigma": -1.0}, "--smoothing_sigma"),
    ({"smoothing_sigma": float("nan")}, "--smoothing_sigma"),
])
def test_train_rejects_bad_smoothing_sigma(tmp_path, options, match):
    with pytest.raises(ValueError, match=match):
        train_app.resolve(_values(tmp_path), options)
    assert not os.path.exists(tmp_path / "run")


def test_train_rejects_smoothing_for_other_methods(tmp_path):
    with pytest.raises(ValueError, match="--smoothing_sigma"):
        train_app.resolve(_values(tmp_path, method="secure_sgd", epsilon=2.0),
                          {"smoothing_sigma": 0.5})


def test_unsound_modes_need_the_flag(tmp_path):
    with pytest.raises(ValueError, match="--allow_unsound_certificates"):
        train_app.resolve(_values(tmp_path, method="secure_sgd", epsilon=2.0),
                          {"hgm_sensitivity_mode": "code_spectral"})
    with pytest.raises(ValueError, match="--allow_unsound_certificates"):
        train_app.resolve(_values(tmp_path, method="stobatch", epsilon=2.0),
                          {"stobatch_radius_divisor": 0.005})
    assert not os.path.exists(tmp_path / "run")
    assert certify.registry.unsound_training_options({"hgm_sensitivity_mode": "layer_max"}) == []
    # HGM's code-release conv1 options are in its declared list too (one list, read by the
    # shared check and by the method's own validation).
    assert certify.registry.unsound_training_options(
        {"hgm_conv1": "free", "hgm_noise_mixture": "hgm"}) == ["--hgm_conv1=free"]


def test_smoothing_run_records_its_certificate(tmp_path):
    spec = train_app.resolve(_values(tmp_path, method="dpsgd", epsilon=2.0),
                             {"smoothing_sigma": 0.5})
    method = spec.method_cls(spec.config)
    cert = method.certification_config()
    assert (cert["mechanism"], cert["sigma"], cert["norm"], cert["lipschitz"]) == (
        "gaussian_smoothing", 0.5, "l2", 1.0)
    assert certify.from_config(cert).sound
