"""The authors' code release's data path as options (issue 29 item 5); defaults the paper's."""

import os

import numpy as np
import pytest
import tensorflow as tf

from tfdp.papers.stobatch import models
from tfdp.reproduce import runner
from tfdp.train import loop
from tfdp.papers.stobatch import method as stobatch
from tfdp.train.base import TrainConfig

SHAPE, K = (8, 8, 1), 3


def _method(model_dir, **options):
    opts = {"stobatch_architecture": "tiny", "stobatch_hidden_units": 8,
            "stobatch_attack_iters": 2, "stobatch_ae_optimizer": "sgd"}
    opts.update(options)
    cfg = TrainConfig(method="stobatch", dataset="synthetic", model_dir=str(model_dir),
                      epochs=1, batch_size=9, learning_rate=0.01, seed=3, epsilon=2.0,
                      options=opts)
    return stobatch.StoBatch(cfg)


@pytest.mark.parametrize("name,value,text", [
    ("stobatch_adv_source", "clean",
     r"--stobatch_adv_source: expected one of \['noisy', 'raw'\], got 'clean'"),
    ("stobatch_adv_noise", "half",
     r"--stobatch_adv_noise: expected one of \['train', 'zero'\], got 'half'"),
    ("stobatch_input_clip", 0.0, "--stobatch_input_clip: expected a finite number > 0"),
    ("stobatch_input_clip", float("inf"), "--stobatch_input_clip: expected a finite number"),
])
def test_bad_values_name_their_flag(tmp_path, name, value, text):
    with pytest.raises(ValueError, match=text):
        _method(tmp_path, **{name: value}).validate()


def test_defaults_are_the_papers_path(tmp_path):
    method = _method(tmp_path)
    assert (method.settings.adv_source, method.settings.adv_noise, method.settings.input_clip) == ("noisy", "train", None)
    xa = tf.constant([[1.0]])
    assert method.adversarial_input(None, xa) is xa  # untouched: no arithmetic on x_bar
    assert method.adversarial_source(None, xa) is xa


class _Noise:
    def __init__(self, value):
        self.fixed_noise = tf.constant(value)


class _Model:
    def __init__(self, value):
        self.input_noise = _Noise(value)


@pytest.mark.parametrize("source,noise,src_offset,adv_offset", [
    ("noisy", "train", 0.0, 0.0),   # the paper: crafted from x_bar, keeps chi1/m
    ("noisy", "zero", 0.0, -1.0),   # crafted from x_bar, chi1/m removed
    ("raw", "zero", -1.0, 0.0),     # the authors' code: from raw x, no noise
    ("raw", "train", -1.0, 1.0),    # from raw x, chi1/m added back
])
def test_source_and_noise_of_the_adversarial_half(tmp_path, source, noise, src_offset,
                                                  adv_offset):
    method = _method(tmp_path, stobatch_adv_source=source, stobatch_adv_noise=noise)
    model = _Model(np.full((1, 2), 0.5, np.float32))  # chi1/m = 0.5
    x_bar = tf.constant([[1.0, 2.0]])
    src = method.adversarial_source(model, x_bar)
    np.testing.assert_allclose(src.numpy(), x_bar.numpy() + 0.5 * src_offset)
    crafted = src + 0.1
    np.testing.assert_allclose(method.adversarial_input(model, crafted).numpy(),
                               crafted.numpy() + 0.5 * adv_offset)


def test_input_clip_in_the_network_and_its_saved_config():
    net = models.StoBatchNet(SHAPE, K, architecture="tiny", batch_size=9, hidden_units=8,
                             input_clip=10.0)
    net.build((None,) + SHAPE)
    big = tf.fill((2,) + SHAPE, 50.0)
    clipped = tf.fill((2,) + SHAPE, 10.0)
    np.testing.assert_allclose(net.encode(big, False).numpy(), net.encode(clipped, False).numpy())
    assert net.get_config()["input_clip"] == 10.0
    plain = models.StoBatchNet(SHAPE, K, architecture="tiny", batch_size=9, hidden_units=8)
    assert "input_clip" not in plain.get_config()  # the paper's models are saved as before
    assert models.StoBatchNet(**dict(net.get_config())).input_clip == 10.0


def test_authors_path_trains_and_records_raw_inputs_in_the_ledger(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (36,) + SHAPE).astype(np.float32)
    y = rng.integers(0, K, 36)
    method = _method(tmp_path / "run", stobatch_adv_source="raw", stobatch_adv_noise="zero",
                     stobatch_input_clip=10.0, stobatch_ae_optimizer="adam",
                     stobatch_ae_adam_epsilon=4e-12, stobatch_madry_eps_iter=0.005,
                     stobatch_noise_term="linear_broadcast")
    data = loop.Data(x.copy(), y.copy(), x[:10].copy(), y[:10].copy(), SHAPE, K)
    result = loop.train(method, data, optimizer="sgd", verbose=0)
    assert result.model.input_clip == 10.0
    assert method.ae_optimizer.epsilon == pytest.approx(4e-12)  # --stobatch_ae_adam_epsilon
    with open(os.path.join(tmp_path / "run", "ledger.json"), encoding="utf-8") as f:
        assert "stobatch_raw_adversarial_source" in f.read()
    for v in result.model.weights:
        assert np.all(np.isfinite(v.numpy())), v.path


@pytest.mark.parametrize("scale", ["smoke", "reduced", "full"])
def test_authors_path_flagfiles_are_the_scales_flagfile_plus_the_three_options(scale):
    def lines(name):
        with open(os.path.join(runner.REPO_ROOT, "flags", "stobatch", name),
                  encoding="utf-8") as f:
            return [ln.strip() for ln in f if ln.startswith("--")]
    assert lines(f"mnist_{scale}_authors_path.flags") == lines(f"mnist_{scale}.flags") + [
        "--stobatch_adv_source=raw", "--stobatch_adv_noise=zero", "--stobatch_input_clip=10"]


def _craft_linear(tmp_path, xs, mu, start, **options):
    """The method's training attacks on 9 rows against a fixed linear model (3 per attack)."""
    w = tf.constant(np.random.default_rng(0).normal(size=(4, K)), tf.float32)
    method = _method(tmp_path, **options)
    method._attack_logits = lambda model: (lambda v: tf.matmul(v, w))  # pylint: disable=protected-access
    model = type("M", (), {"compute_dtype": "float32"})()
    return method.craft_adversarial(model, tf.constant(xs, tf.float32), tf.constant(mu),
                                    tf.range(9, dtype=tf.int64),
                                    tf.constant(start, tf.float32)).numpy()


def test_madry_eps_iter_steps_only_the_madry_rows(tmp_path):
    """--stobatch_madry_eps_iter (the code release's Madry step): the Madry third of the
    adversarial-source batch moves by at most T x the step from its start; the I-FGSM and MIM
    thirds are crafted as without the option."""
    xs = np.random.default_rng(1).uniform(-0.5, 0.5, (9, 4))
    default = _craft_linear(tmp_path, xs, 0.5, np.zeros_like(xs))  # Madry starts at x
    released = _craft_linear(tmp_path, xs, 0.5, np.zeros_like(xs), stobatch_madry_eps_iter=0.01)
    np.testing.assert_array_equal(default[:6], released[:6])  # I-FGSM and MIM rows
    moved = np.abs(released[6:] - xs[6:]).max()
    assert 0 < moved <= 2 * 0.01 + 1e-7  # T_mu = 2 steps of 0.01
    assert np.abs(default[6:] - xs[6:]).max() > 0.1  # Eq. 8: steps of mu / T = 0.25


def test_linear_broadcast_noise_term_is_k_times_the_linear_one(tmp_path):
    """--stobatch_noise_term=linear_broadcast: the MNIST code subtracts its scalar
    sum(N * W_pi) from every record and class, so the term (and its gradient) is K times the
    paper's linear term."""
    kernel = tf.Variable(np.random.default_rng(0).normal(size=(8, K)).astype(np.float32))
    chi3 = tf.constant(np.random.default_rng(1).laplace(size=(8, K)).astype(np.float32))
    model = type("M", (), {"chi3": chi3, "output_layer": type("O", (), {"kernel": kernel})()})()
    lin, g_lin = _method(tmp_path).chi3_term_gradient(model)
    bro, g_bro = _method(tmp_path, stobatch_noise_term="linear_broadcast").chi3_term_gradient(model)
    np.testing.assert_allclose(bro.numpy(), K * lin.numpy(), rtol=1e-6)
    np.testing.assert_allclose(g_bro.numpy(), K * g_lin.numpy(), rtol=1e-6)


def test_adam_epsilons_reach_both_optimizers(tmp_path):
    method = _method(tmp_path, stobatch_adam_epsilon=1e-8, stobatch_ae_optimizer="adam",
                     stobatch_ae_adam_epsilon=4e-12)
    assert method.make_optimizer("adam", 1e-4).epsilon == pytest.approx(1e-8)
    assert _method(tmp_path).make_optimizer("adam", 1e-4).epsilon == pytest.approx(1e-7)


@pytest.mark.parametrize("options,text", [
    ({"stobatch_bn_affine": "fixed"},
     r"--stobatch_bn_affine: expected one of \['trained', 'frozen'\], got 'fixed'"),
    ({"stobatch_attack_net": "release"},
     r"--stobatch_attack_net: expected one of \['model', 'release_unnormalised'\]"),
    ({"stobatch_attack_net": "release_unnormalised"},
     "--stobatch_attack_net: release_unnormalised .* needs --stobatch_adv_source=raw"),
    ({"stobatch_attack_net": "release_unnormalised", "stobatch_adv_source": "raw"},
     "--stobatch_attack_net: release_unnormalised exists for the mnist architecture only"),
])
def test_release_network_options_refuse_bad_values(tmp_path, options, text):
    with pytest.raises(ValueError, match=text):
        _method(tmp_path, **options).validate()


def test_frozen_bn_affine_has_no_offset_or_gain_and_is_saved():
    """--stobatch_bn_affine=frozen: every batch norm normalises with beta = 0, gamma = 1 and
    has no trainable variable (the MNIST code release trains neither)."""
    net = models.StoBatchNet(SHAPE, K, architecture="tiny", batch_size=9, hidden_units=8,
                             bn_affine=False, bn_eval="batch")
    net.build((None,) + SHAPE)
    bn_vars = [v.path for v in net.trainable_variables if "bn" in v.path]
    assert bn_vars == []
    assert not any("bn" in v.path for v in net.theta1 + net.theta2)
    x = tf.constant(np.random.default_rng(0).normal(size=(5,) + SHAPE), tf.float32)
    h = tf.nn.relu(net.encoder_conv(x))
    mean, var = tf.nn.moments(h, [0, 1, 2])
    expect = tf.clip_by_value((h - mean) / tf.sqrt(var + 1e-3), -1.0, 1.0)
    np.testing.assert_allclose(net.encode(x, False).numpy(), expect.numpy(), atol=1e-5)
    assert net.get_config()["bn_affine"] is False
    assert models.StoBatchNet(**dict(net.get_config())).bn_affine is False
    plain = models.StoBatchNet(SHAPE, K, architecture="tiny", batch_size=9, hidden_units=8)
    assert "bn_affine" not in plain.get_config()  # earlier models are saved as before


def _mnist_net(**kwargs):
    net = models.StoBatchNet((28, 28, 1), 10, architecture="mnist", batch_size=9,
                             hidden_units=16, bn_eval="batch", **kwargs)
    net.build((None, 28, 28, 1))
    return net


def test_release_attack_network_normalises_nothing_and_skips_noise_and_clips():
    """forward_unnormalised is the MNIST code release's attack copy: conv1, ReLU, a batch norm
    that only divides by sqrt(1 + 1e-3), pool, conv2, the h_pi layer, the same division, the
    output layer; the latent noise, BN statistics and clips do not enter."""
    net = _mnist_net()
    rng = np.random.default_rng(0)
    net.latent_noise.fixed_noise.assign(rng.normal(size=net.latent_noise.fixed_noise.shape))
    net.h_pi_bn.moving_mean.assign(rng.normal(size=net.h_pi_bn.moving_mean.shape))
    x = tf.constant(rng.normal(size=(4, 28, 28, 1)) * 3, tf.float32)
    s = 1.0 / np.sqrt(1.001)
    h = tf.nn.relu(net.encoder_conv(x)) * s
    for layer in net.body:
        h = layer(h)
    expect = tf.matmul(h * s, net.output_layer.kernel)
    got = net.forward_unnormalised(x)
    np.testing.assert_allclose(got.numpy(), expect.numpy(), rtol=1e-5, atol=1e-5)
    assert np.abs(expect.numpy()).max() > 0
    with pytest.raises(ValueError, match="architecture is 'tiny'"):
        models.StoBatchNet(SHAPE, K, architecture="tiny", batch_size=9,
                           hidden_units=8).forward_unnormalised(tf.zeros((1,) + SHAPE))


def test_release_attack_network_gets_the_fixed_input_noise(tmp_path):
    method = _method(tmp_path, stobatch_architecture="mnist", stobatch_adv_source="raw",
                     stobatch_attack_net="release_unnormalised")
    method.validate()
    net = _mnist_net()
    noise = np.random.default_rng(1).normal(size=(1, 28, 28, 1)).astype(np.float32)
    net.input_noise.fixed_noise.assign(noise)
    x = tf.constant(np.random.default_rng(2).uniform(-1, 1, (3, 28, 28, 1)), tf.float32)
    got = method._attack_logits(net)(x)  # pylint: disable=protected-access
    np.testing.assert_allclose(got.numpy(), net.forward_unnormalised(x + noise).numpy(),
                               rtol=1e-6)


def test_release_network_options_train(tmp_path):
    """A run with the release's frozen batch-norm affine, attack network and classifier path
    trains, and its model has no BN variables."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (36, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, 36)
    method = _method(tmp_path / "run", stobatch_architecture="mnist", stobatch_hidden_units=16,
                     stobatch_adv_source="raw", stobatch_adv_noise="zero",
                     stobatch_bn_eval="batch", stobatch_bn_affine="frozen",
                     stobatch_attack_net="release_unnormalised",
                     stobatch_classifier_h="release_pre_relu")
    data = loop.Data(x.copy(), y.copy(), x[:10].copy(), y[:10].copy(), (28, 28, 1), 10)
    result = loop.train(method, data, optimizer="sgd", verbose=0)
    assert not any("bn" in v.path for v in result.model.trainable_variables)
    for v in result.model.weights:
        assert np.all(np.isfinite(v.numpy())), v.path


def test_release_classifier_path_puts_the_noise_before_relu_and_bn():
    """--stobatch_classifier_h=release_pre_relu: the classifier sees BN(ReLU(conv x + noise))
    with the batch's statistics and no clip; the auto-encoder's h_bar is unchanged."""
    net = _mnist_net(classifier_h="release_pre_relu", bn_affine=False)
    rng = np.random.default_rng(0)
    noise = rng.laplace(size=(1, 14, 14, 32)).astype(np.float32) * 5
    net.latent_noise.fixed_noise.assign(noise)
    x = tf.constant(rng.uniform(-1, 1, (6, 28, 28, 1)), tf.float32)
    z = tf.nn.relu(net.encoder_conv(x) + noise)
    mean, var = tf.nn.moments(z, [0, 1, 2])
    expect = (z - mean) / tf.sqrt(var + 1e-3)
    got = net.classifier_hidden(x, True, noise)
    np.testing.assert_allclose(got.numpy(), expect.numpy(), rtol=1e-4, atol=1e-4)
    assert np.abs(got.numpy()).max() > 1.0  # no [-1, 1] clip
    np.testing.assert_allclose(net.forward(x, training=False).numpy(),
                               net.classify(expect, False).numpy(), rtol=1e-4, atol=1e-4)
    # the noise-free network (inference, no stored noise) through call()
    plain = tf.nn.relu(net.encoder_conv(x))
    mean, var = tf.nn.moments(plain, [0, 1, 2])
    np.testing.assert_allclose(net(x, training=False).numpy(), net.classify(
        (plain - mean) / tf.sqrt(var + 1e-3), False).numpy(), rtol=1e-4, atol=1e-4)
    shared = _mnist_net(bn_affine=False)
    shared.set_weights(net.get_weights())
    np.testing.assert_allclose(net.encode(x, True).numpy(), shared.encode(x, True).numpy())
    assert net.get_config()["classifier_h"] == "release_pre_relu"
    assert "classifier_h" not in shared.get_config()
    with pytest.raises(ValueError, match="needs bn_eval='batch'"):
        models.StoBatchNet((28, 28, 1), 10, architecture="mnist", classifier_h="release_pre_relu")


def test_release_classifier_path_is_refused_without_batch_bn_and_claims_its_certificates(
        tmp_path):
    from tfdp.certify import registry as certify_registry  # pylint: disable=import-outside-toplevel
    with pytest.raises(ValueError, match="--stobatch_classifier_h: release_pre_relu .* needs "
                                         "--stobatch_bn_eval=batch"):
        _method(tmp_path, stobatch_classifier_h="release_pre_relu").validate()
    assert certify_registry.unsound_training_options(
        {"stobatch_classifier_h": "release_pre_relu"}) == [
            "--stobatch_classifier_h=release_pre_relu"]
    assert certify_registry.unsound_training_options({"stobatch_classifier_h": "shared"}) == []


def test_attack_clip_keeps_every_crafted_row_in_the_value_range(tmp_path):
    """--stobatch_attack_clip (the code release's clip_min=-1, clip_max=1): every crafted row
    stays in [-1, 1]; without it the mu-ball alone bounds them (Eq. 8) and rows leave it."""
    xs = np.random.default_rng(1).uniform(-1, 1, (9, 4))
    start = np.random.default_rng(2).uniform(-1, 1, (9, 4))
    free = _craft_linear(tmp_path, xs, 0.8, start)
    clipped = _craft_linear(tmp_path, xs, 0.8, start, stobatch_attack_clip=True)
    assert np.abs(free).max() > 1.0  # rows leave the value range without the option
    assert clipped.min() >= -1.0 and clipped.max() <= 1.0
    assert np.abs(clipped - xs).max() <= 0.8 + 1e-6
    assert np.abs(clipped - xs).max() > 0.1
