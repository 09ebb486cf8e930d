"""The HGM code release's Secure-SGD options (tfdp/papers/hgm/release.py and their flags)."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdp import accounting, data, mechanisms
from tfdp.apps import train as train_app
from tfdp.papers.hgm import method as hgm_method
from tfdp.papers.hgm import models as hgm_models
from tfdp.papers.hgm import release
from tfdp.papers.hgm import robustness
from tfdp.papers.hgm.method import HGMPixelDP, SecureSGD
from tfdp.train import loop
from tfdp.train.base import DataSpec, TrainConfig

# The options that make tfdp's Secure-SGD train what the release trains (small settings).
RELEASE = {"hgm_model": "release_mnist", "hgm_conv1": "free",
           "hgm_noise_mixture": "egm_hgm_half", "hgm_train_noise": "fixed_once",
           "hgm_test_accuracy": "fixed_training_noise", "hgm_r_source": "nonprivate_pretrain",
           "hgm_clipping": "batch_mean", "hgm_l2_clip": 0.001, "hgm_noise_multiplier": 4.0,
           "hgm_pretrain_step": "batch_mean", "hgm_pretrain_steps": 3,
           "hgm_pretrain_examples": 50, "hgm_r_score": "abs_mean_sign", "hgm_r_floor": 0.0,
           "hgm_r_mix": 0.0, "hgm_sampling": "shuffle", "allow_unsound_certificates": True}


@pytest.fixture(scope="module")
def tiny_data():
    x, y = data.load("sample", "train", value_range=(0.0, 1.0))
    xt, yt = data.load("sample", "test", value_range=(0.0, 1.0))
    return loop.Data(x[:128], y[:128], xt[:40], yt[:40], (28, 28, 1), 10)


def _config(tmp_path, name="run", method="secure_sgd", **options):
    opts = dict(RELEASE)
    opts.update(options)
    return TrainConfig(method=method, dataset="sample", model_dir=str(tmp_path / name),
                       epochs=1, batch_size=32, learning_rate=0.1, seed=5, epsilon=None,
                       delta=1e-5, value_range=(0.0, 1.0), options=opts, optimizer="sgd")


# ----------------------------------------------------------------------------- closed forms


def test_release_map_and_delta_closed_forms():
    k_shape = (28, 28, 32)
    k = int(np.prod(k_shape))
    uniform = np.full(k_shape, 1.0 / k)
    m = release.release_map(uniform)
    assert m.sum() == pytest.approx(8192.0) and np.allclose(m, 8192.0 / k)
    # A [P, C] matrix of constant c has sigma_max = c sqrt(P C) = (8192 / K) sqrt(K).
    kernel = np.zeros((5, 5, 1, 32))
    kernel[0, 0, 0, 0] = 3.0  # reshaped [25, 32]: one non-zero entry, sigma_max 3
    want = 3.0 / np.sqrt(8192.0 / np.sqrt(k))
    assert release.pretrained_delta(kernel, uniform) == pytest.approx(want, rel=1e-12)
    with pytest.raises(ValueError, match="kernel, r"):
        release.pretrained_delta(kernel[..., :8], uniform)
    with pytest.raises(ValueError, match="r:"):
        release.release_map(-uniform)


def test_mixture_stddevs_and_their_layer_scale():
    r = np.random.default_rng(0).uniform(size=(4, 4, 2))
    r[0, 0, 0] = 0.0  # the release's r may have zero entries
    r /= r.sum()
    mult, delta, bound = 1.2851, 0.7, 0.2
    std = release.mixture_stddevs(mult, delta, r, bound)
    m = 8192.0 * r
    # L (E + H) / 2 with E ~ N(0, mult^2) and H_k ~ N(0, (mult Delta M_k)^2), independent.
    np.testing.assert_allclose(std, bound / 2 * np.sqrt(mult ** 2 + (mult * delta * m) ** 2))
    assert std[0, 0, 0] == pytest.approx(bound / 2 * mult)  # EGM part only where r = 0
    sigma, r_layer = release.layer_scale(std)
    np.testing.assert_allclose(
        mechanisms.heterogeneous_stddevs(sigma=sigma, r=r_layer.reshape(-1)).reshape(std.shape),
        std, rtol=1e-12)  # HGM Theorem 3's sigma sqrt(K r_k) reproduces them
    with pytest.raises(ValueError, match="delta"):
        release.mixture_stddevs(mult, 0.0, r, bound)
    with pytest.raises(ValueError, match="stddevs"):
        release.layer_scale(np.zeros(3))


# ----------------------------------------------------------------------------- network


def test_release_network_shapes_initialisers_and_dropout():
    model = hgm_models.build_model("release_mnist", (28, 28, 1), 10, sigma=0.5, seed=1,
                                   conv1="free")
    names = [layer.name for layer in model.layers]
    assert "post_noise_scale" not in names and "dropout" in names
    assert type(model.get_layer("conv1")) is keras.layers.Conv2D  # trained freely
    # conv 5x5x32 (832) + conv 5x5x32x64 (51,264) + FC 3136x25 (78,425) + FC 25x10 (260).
    assert sum(int(np.prod(v.shape)) for v in model.trainable_variables) == 130781
    for layer in ("conv1", "conv2", "fc", "logits"):
        kernel, bias = (np.asarray(v) for v in model.get_layer(layer).weights[:2])
        assert np.all(bias == np.float32(0.1))
        assert np.abs(kernel).max() <= 0.2 + 1e-6  # truncated at two std of 0.1
        if kernel.size > 1000:
            assert kernel.std() == pytest.approx(0.088, abs=0.01)  # 0.1 * 0.88 after truncation
    x = np.random.default_rng(0).uniform(size=(8, 28, 28, 1)).astype("float32")
    a = hgm_models.forward_with_noise(model, x, None, training=True)
    b = hgm_models.forward_with_noise(model, x, None, training=True)
    assert not np.allclose(a, b)  # dropout in training
    np.testing.assert_array_equal(np.asarray(model(x, training=False)),
                                  np.asarray(model(x, training=False)))
    normalised = hgm_models.build_model("release_mnist", (28, 28, 1), 10, sigma=0.5, seed=1)
    assert isinstance(normalised.get_layer("conv1"), hgm_models.SensitivityBoundedConv2D)
    with pytest.raises(ValueError, match="conv1"):
        hgm_models.build_model("mnist", (28, 28, 1), 10, sigma=0.5, conv1="loose")


def test_abs_mean_sign_scores_match_per_example_signs():
    model = hgm_models.build_model("small", (28, 28, 1), 10, sigma=0.0, seed=0,
                                   noise_free=True, conv1="free")
    rng = np.random.default_rng(1)
    x = rng.uniform(size=(6, 28, 28, 1)).astype("float32")
    y = rng.integers(0, 10, size=6)
    got = release.abs_mean_sign_scores(model, x, y, batch_size=4)
    relu_out = keras.Model(model.inputs[0], model.get_layer("relu1").output)
    signs = []
    for i in range(6):  # one example at a time: the sign of its own gradient
        h = tf.constant(relu_out(x[i:i + 1]))
        with tf.GradientTape() as tape:
            tape.watch(h)
            out = h
            for layer in model.layers[[l.name for l in model.layers].index("relu1") + 1:]:
                out = layer(out)
            loss = keras.losses.sparse_categorical_crossentropy(y[i:i + 1], out,
                                                                from_logits=True)
        signs.append(np.sign(tape.gradient(loss, h).numpy()[0]))
    np.testing.assert_allclose(got, np.abs(np.mean(signs, axis=0)), atol=1e-12)
    assert got.shape == (28, 28, 8) and got.min() >= 0 and got.max() <= 1
    assert np.any(got == 0)  # max pooling passes no gradient to most units


def test_pretrain_batch_mean_clips_kernels_not_biases():
    model = hgm_models.build_model("small", (28, 28, 1), 10, sigma=0.0, seed=0,
                                   noise_free=True, conv1="free")
    rng = np.random.default_rng(2)
    x = rng.uniform(size=(16, 28, 28, 1)).astype("float32")
    y = rng.integers(0, 10, size=16)
    before = [np.asarray(v) for v in model.trainable_variables]
    clip = 1e-4
    release.pretrain_batch_mean(model, x, y, steps=1, batch_size=16, l2_clip=clip,
                                noise_multiplier=0.0, optimizer=keras.optimizers.SGD(1.0),
                                rng=rng)
    moved = [np.linalg.norm(np.asarray(v) - b)
             for v, b in zip(model.trainable_variables, before)]
    kinds = [len(v.shape) > 1 for v in model.trainable_variables]
    assert all(m <= clip * (1 + 1e-3) for m, kernel in zip(moved, kinds) if kernel)
    assert max(m for m, kernel in zip(moved, kinds) if not kernel) > 10 * clip  # unclipped
    with pytest.raises(ValueError, match="steps"):
        release.pretrain_batch_mean(model, x, y, steps=0, batch_size=16, l2_clip=clip,
                                    noise_multiplier=0.0, optimizer=keras.optimizers.SGD(1.0),
                                    rng=rng)


# ----------------------------------------------------------------------------- flags


@pytest.mark.parametrize("options,match", [
    ({"hgm_model": "release_cifar"}, "--hgm_model"),
    ({"hgm_conv1": "loose"}, "--hgm_conv1"),
    ({"hgm_noise_mixture": "thirds"}, "--hgm_noise_mixture"),
    ({"hgm_test_accuracy": "noisy"}, "--hgm_test_accuracy"),
    ({"hgm_pretrain_steps": -1}, "--hgm_pretrain_steps"),
    ({"hgm_max_steps": -2}, "--hgm_max_steps"),
    ({"hgm_r_score": "sign"}, "--hgm_r_score"),
    ({"hgm_train_noise": "fresh"}, "--hgm_test_accuracy"),
    ({"hgm_conv1": "normalised"}, "--hgm_noise_mixture"),
    ({"hgm_clipping": "per_example"}, "--hgm_pretrain_step"),
    ({"hgm_pretrain_step": "noise_free_adam"}, "--hgm_pretrain_steps"),
    ({"hgm_noise_mixture": "hgm"}, "--hgm_r_floor"),
    ({"hgm_r_source": "uniform"}, "--hgm_noise_mixture"),
    ({"allow_unsound_certificates": False}, "--allow_unsound_certificates"),
])
def test_bad_release_flags_fail_before_any_work(tmp_path, options, match):
    values = {"method": "secure_sgd", "dataset": "sample", "epsilon": 1.0,
              "model_dir": str(tmp_path / "x")}
    opts = {k: v for k, v in {**RELEASE, **options}.items()}
    with pytest.raises(ValueError, match=match):
        train_app.resolve(values, opts)
    assert not os.path.exists(tmp_path / "x")


def test_release_flags_resolve_and_the_pretrain_step_needs_secure_sgd(tmp_path):
    values = {"method": "secure_sgd", "dataset": "sample", "epsilon": 1.0,
              "model_dir": str(tmp_path / "x")}
    train_app.resolve(values, dict(RELEASE))
    with pytest.raises(ValueError, match="--hgm_pretrain_step"):
        HGMPixelDP(_config(tmp_path, method="hgm_pixeldp")).validate()


def test_defaults_follow_the_paper(tmp_path):
    settings = hgm_method.SecureSGDConfig()
    assert (settings.model, settings.conv1, settings.noise_mixture, settings.test_accuracy,
            settings.pretrain_step, settings.r_score, settings.max_steps) == (
        "mnist", "normalised", "hgm", "noise_free", "noise_free_adam", "abs_gradient", 0)
    method = SecureSGD(TrainConfig(method="secure_sgd", dataset="sample",
                                   model_dir=str(tmp_path / "d"), epsilon=1.0, delta=1e-5,
                                   value_range=(0.0, 1.0), options={"hgm_model": "small"}))
    method.h1_shape = (28, 28, 8)
    assert "release_options" not in method.certification_config()
    model = object()
    assert method.accuracy_model(model) is model


# ----------------------------------------------------------------------------- a run


def test_release_run_trains_what_the_release_trains(tmp_path, tiny_data):
    cfg = _config(tmp_path, hgm_max_steps=5)
    cfg.epochs = 3  # 4 steps an epoch; the cap stops the run after 5
    method = SecureSGD(cfg)
    result = loop.train(method, tiny_data, verbose=0)
    assert result.steps == 5
    # Ledger: every executed step charged; r's pre-training has no finite epsilon.
    ledger = result.ledger
    assert [e["name"] for e in ledger["entries"]] == [robustness.R_PRETRAIN_ENTRY, "dpsgd"]
    assert ledger["epsilon"] == "inf" and not ledger["guarantee"]
    assert "batch-mean" in ledger["entries"][0]["mechanism"]
    assert sum(s["steps"] for s in ledger["entries"][1]["segments"]) == 5
    want = accounting.dpsgd_epsilon(num_examples=128, batch_size=32, noise_multiplier=4.0,
                                    steps=5, delta=1e-5, sampling="shuffle",
                                    accountant=accounting.DEFAULT_ACCOUNTANT)
    assert ledger["claimed_epsilon"] == pytest.approx(want, rel=1e-9)
    # The noise layer has the release's (E + H) / 2 standard deviations.
    with np.load(os.path.join(result.model_dir, "checkpoints", "setup_state.npz")) as npz:
        r, delta = npz["r"], float(npz["release_delta"])
    assert np.any(r == 0) and r.sum() == pytest.approx(1.0)  # zero entries kept
    std = release.mixture_stddevs(method.robustness_multiplier(), delta, r, 0.2)
    layer = result.model.get_layer(hgm_models.NOISE_LAYER)
    np.testing.assert_allclose(layer.noise_scale, std, rtol=1e-6)
    # Delta is private state: in the checkpoint only, never in a public file.
    config = json.load(open(os.path.join(result.model_dir, "config.json")))
    assert "release_delta" not in json.dumps(config)
    cert = config["certification"]
    assert cert["sensitivity_sound"] is False and cert["release_options"] == {
        "conv1": "free", "noise_mixture": "egm_hgm_half",
        "test_accuracy": "fixed_training_noise"}
    assert config["certification"]["r_stats"]["pretrain_steps"] == 3
    assert "normalised" not in cert["note"] and "not formally certified" in cert["note"]
    # The reported test accuracy is the network's with the fixed training draw, dropout off.
    fixed = layer.fixed_noise.numpy()
    logits = hgm_models.forward_with_noise(result.model, tiny_data.x_test, fixed,
                                           training=False)
    want_acc = float(np.mean(np.argmax(logits, -1) == tiny_data.y_test))
    assert result.metrics["test_accuracy"] == pytest.approx(want_acc)
    plain = loop.evaluate_accuracy(result.model, tiny_data.x_test, tiny_data.y_test)
    noisy_logits = np.asarray(logits)
    clean_logits = np.asarray(result.model(tiny_data.x_test, training=False))
    assert not np.allclose(noisy_logits, clean_logits)  # the option changes what is scored
    assert 0.0 <= plain <= 1.0


def test_release_setup_is_deterministic_given_its_rng(tmp_path, tiny_data):
    """Resume re-runs setup only when the state file is gone; the same rng gives the same r."""
    spec = DataSpec.of(tiny_data.x_train, tiny_data.y_train, 10, value_range=(0.0, 1.0))
    states = []
    for name in ("a", "b"):
        method = SecureSGD(_config(tmp_path, name))
        method.validate()
        method.setup(spec, accounting.PrivacyLedger(), np.random.default_rng(7))
        states.append(method.setup_state())
    np.testing.assert_array_equal(states[0]["r"], states[1]["r"])
    assert float(states[0]["release_delta"]) == float(states[1]["release_delta"])


def test_release_flagfile_resolves_to_the_release_settings(tmp_path):
    import copy  # pylint: disable=import-outside-toplevel
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(repo, "flags", "releases", "secure_sgd_mnist_release.flags")
    values = copy.deepcopy(train_app.FLAGS)
    values(["tfdp-train", f"--flagfile={path}", "--method=secure_sgd", "--dataset=mnist",
            f"--model_dir={tmp_path / 'run'}"])
    spec = train_app.resolve(*train_app.values_from_flags(values))
    opts = spec.config.options
    for key, want in RELEASE.items():
        if key not in ("hgm_pretrain_steps", "hgm_pretrain_examples"):
            assert opts[key] == want, key
    assert (opts["hgm_pretrain_steps"], opts["hgm_pretrain_examples"], opts["hgm_max_steps"],
            spec.num_train, spec.config.batch_size) == (4000, 1250, 3840, 55000, 125)
    # 9 epochs of 55,000 / 125 = 440 steps exceed the cap: the run stops at 3,840 steps.
    assert spec.config.epochs * (55000 // 125) >= 3840


def test_counted_dropout_masks_are_keyed_by_seed_and_counter():
    layer = hgm_models.CountedDropout(0.5, seed=3)
    x = tf.ones((4, 25))
    first = layer(x, training=True).numpy()
    second = layer(x, training=True).numpy()
    assert set(np.unique(first)) <= {0.0, 2.0} and not np.array_equal(first, second)
    assert 0.3 < float(np.mean(first == 0)) < 0.7  # 100 units, keep probability 0.5
    again = hgm_models.CountedDropout(0.5, seed=3)
    np.testing.assert_array_equal(again(x, training=True).numpy(), first)
    again.draw_counter.assign(1)  # a resumed counter replays the next mask
    np.testing.assert_array_equal(again(x, training=True).numpy(), second)
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
    with pytest.raises(ValueError, match="rate"):
        hgm_models.CountedDropout(1.0)


def test_release_run_resumes_bit_for_bit(tmp_path, tiny_data):
    full_cfg = _config(tmp_path, "full")
    full_cfg.epochs = 2
    full = loop.train(SecureSGD(full_cfg), tiny_data, verbose=0)
    part_cfg = _config(tmp_path, "part")
    part_cfg.epochs = 2
    assert loop.train(SecureSGD(part_cfg), tiny_data, stop_after_epochs=1, verbose=0).interrupted
    resumed = loop.train(SecureSGD(part_cfg), tiny_data, resume=True, verbose=0)
    for a, b in zip(full.model.get_weights(), resumed.model.get_weights()):
        np.testing.assert_array_equal(a, b)
