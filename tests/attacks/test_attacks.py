"""Attacks: eps-ball and clip range, equality with CleverHans, labels, EOT, ensemble, MNIST."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from cleverhans.tf2.attacks.basic_iterative_method import basic_iterative_method
from cleverhans.tf2.attacks.fast_gradient_method import fast_gradient_method
from cleverhans.tf2.attacks.momentum_iterative_method import momentum_iterative_method

import attacks
import layers
from tfdp import data


@pytest.fixture(scope="module")
def small_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(),
                             keras.layers.Dense(16, activation="tanh"),
                             keras.layers.Dense(3)])


def _inputs(low, high, n=8, seed=0):
    return np.random.default_rng(seed).uniform(low, high, (n, 4, 4, 1)).astype(np.float32)


@pytest.mark.parametrize("value_range", [(0.0, 1.0), (-1.0, 1.0)])
@pytest.mark.parametrize("name", attacks.ATTACKS)
@pytest.mark.parametrize("norm", [np.inf, 2])
def test_inside_eps_ball_and_clip_range(small_model, name, value_range, norm):
    low, high = value_range
    x = _inputs(low, high)
    eps = 0.3
    adv = attacks.run_attack(name, small_model, x, eps, low, high, norm=norm, nb_iter=5,
                             seed=3).numpy()
    assert adv.min() >= low and adv.max() <= high
    delta = (adv - x).reshape(len(x), -1)
    size = np.abs(delta).max(1) if norm == np.inf else np.linalg.norm(delta, axis=1)
    assert np.all(size <= eps * (1 + 1e-5) + 1e-6)
    assert np.all(size > 0)  # gradients flow: every example moved


def test_ifgsm_and_mim_equal_cleverhans(small_model):
    x = tf.constant(_inputs(-1, 1))
    ours = attacks.ifgsm(small_model, x, 0.2, nb_iter=7)
    ref = basic_iterative_method(small_model, x, 0.2, 0.2 / 7, 7, np.inf, clip_min=-1.0,
                                 clip_max=1.0, sanity_checks=False)
    np.testing.assert_allclose(ours.numpy(), ref.numpy(), atol=1e-6)
    ours = attacks.mim(small_model, x, 0.2, nb_iter=7)
    ref = momentum_iterative_method(small_model, x, 0.2, 0.2 / 7, 7, np.inf, clip_min=-1.0,
                                    clip_max=1.0, sanity_checks=False)
    np.testing.assert_allclose(ours.numpy(), ref.numpy(), atol=1e-6)
    ours = attacks.fgsm(small_model, x, 0.2)
    ref = fast_gradient_method(small_model, x, 0.2, np.inf, clip_min=-1.0, clip_max=1.0)
    np.testing.assert_allclose(ours.numpy(), ref.numpy(), atol=1e-6)


def test_single_step_ifgsm_equals_fgsm(small_model):
    # With T_mu = 1 and no random start, I-FGSM equals FGSM (StoBatch Eq. 7-8).
    x = _inputs(-1, 1)
    np.testing.assert_allclose(attacks.ifgsm(small_model, x, 0.1, nb_iter=1).numpy(),
                               attacks.fgsm(small_model, x, 0.1).numpy(), atol=1e-7)
    np.testing.assert_allclose(
        attacks.madry(small_model, x, 0.1, nb_iter=4, rand_init=False).numpy(),
        attacks.ifgsm(small_model, x, 0.1, nb_iter=4).numpy(), atol=1e-7)


def test_madry_random_start_is_seeded(small_model):
    x = _inputs(-1, 1)
    a = attacks.madry(small_model, x, 0.1, nb_iter=1, eps_iter=1e-3, seed=1).numpy()
    b = attacks.madry(small_model, x, 0.1, nb_iter=1, eps_iter=1e-3, seed=1).numpy()
    c = attacks.madry(small_model, x, 0.1, nb_iter=1, eps_iter=1e-3, seed=2).numpy()
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 1e-3
    # The start differs between examples (not one pattern for the whole batch).
    same_x = np.repeat(x[:1], 4, axis=0)
    d = attacks.madry(small_model, same_x, 0.1, nb_iter=1, eps_iter=1e-3, seed=1).numpy()
    assert np.abs(d[0] - d[1]).max() > 1e-3


def test_labels_default_to_model_predictions(small_model):
    x = _inputs(-1, 1)
    pred = np.argmax(small_model(x).numpy(), axis=1)
    other = (pred + 1) % 3
    for name in ("fgsm", "ifgsm", "mim"):
        default = attacks.run_attack(name, small_model, x, 0.2, nb_iter=3).numpy()
        with_pred = attacks.run_attack(name, small_model, x, 0.2, y=pred, nb_iter=3).numpy()
        with_other = attacks.run_attack(name, small_model, x, 0.2, y=other, nb_iter=3).numpy()
        np.testing.assert_array_equal(default, with_pred)
        assert np.abs(default - with_other).max() > 1e-3


def test_eot_on_deterministic_model_equals_plain_gradient(small_model):
    x = _inputs(-1, 1)
    for name in ("fgsm", "ifgsm", "mim"):
        plain = attacks.run_attack(name, small_model, x, 0.2, nb_iter=3).numpy()
        eot = attacks.run_attack(name, small_model, x, 0.2, nb_iter=3, eot_draws=4).numpy()
        np.testing.assert_allclose(eot, plain, atol=1e-6)


def test_eot_averages_gradients_over_noise_draws():
    # A small network with N(0, 1) input noise switched on at inference. The loss
    # gradient differs between noise draws; EOT's step is the sign of the mean over 256
    # draws, so two EOT calls agree on more coordinates than two single-draw calls do
    # (measured: 1.00 vs 0.77 at these seeds).
    keras.utils.set_random_seed(1)
    inp = keras.Input((4, 4, 1))
    h = layers.GaussianNoise(1.0, seed=3)(inp)
    h = keras.layers.Flatten()(h)
    out = keras.layers.Dense(3)(keras.layers.Dense(8, activation="tanh")(h))
    model = keras.Model(inp, out)
    layers.set_inference_noise(model, True)
    x = _inputs(-1, 1, n=16)
    y = np.zeros(16, np.int64)
    a = attacks.fgsm(model, x, 0.1, y=y, eot_draws=256).numpy()
    b = attacks.fgsm(model, x, 0.1, y=y, eot_draws=256).numpy()
    c = attacks.fgsm(model, x, 0.1, y=y).numpy()
    d = attacks.fgsm(model, x, 0.1, y=y).numpy()
    agree_eot = np.mean(np.sign(a - x) == np.sign(b - x))
    agree_one = np.mean(np.sign(c - x) == np.sign(d - x))
    assert agree_eot > agree_one


def test_rescale_size_between_conventions():
    assert attacks.rescale_size(0.1, (0.0, 1.0), (-1.0, 1.0)) == pytest.approx(0.2)
    assert attacks.rescale_size(0.3, (-1.0, 1.0), (0.0, 1.0)) == pytest.approx(0.15)
    with pytest.raises(ValueError, match="eps"):
        attacks.rescale_size(-0.1)


def test_ensemble_splits_batch_at_one_random_size(small_model):
    x = _inputs(-1, 1, n=10)
    adv, eps = attacks.ensemble(small_model, x, rng=np.random.default_rng(4), max_eps=0.5,
                                nb_iter=3)
    adv2, eps2 = attacks.ensemble(small_model, x, rng=np.random.default_rng(4), max_eps=0.5,
                                  nb_iter=3)
    assert 0.0 < eps <= 0.5 and eps == eps2
    np.testing.assert_array_equal(adv.numpy(), adv2.numpy())
    size = np.abs(adv.numpy() - x).reshape(10, -1).max(1)
    assert np.all(size <= eps * (1 + 1e-5) + 1e-6)
    # parts 4 / 3 / 3: the first part is I-FGSM at eps, deterministic
    np.testing.assert_allclose(adv.numpy()[:4], attacks.ifgsm(small_model, x[:4], eps,
                                                              nb_iter=3).numpy(), atol=1e-6)
    np.testing.assert_allclose(adv.numpy()[4:7], attacks.mim(small_model, x[4:7], eps,
                                                             nb_iter=3).numpy(), atol=1e-6)


@pytest.mark.parametrize("call,match", [
    (lambda m, x: attacks.run_attack("cw", m, x, 0.1), "attack name"),
    (lambda m, x: attacks.fgsm(m, x, -0.1), "eps"),
    (lambda m, x: attacks.fgsm(m, x * 3, 0.1), "clip range"),
    (lambda m, x: attacks.fgsm(m, x, 0.1, clip_min=1.0, clip_max=0.0), "clip_min"),
    (lambda m, x: attacks.ifgsm(m, x, 0.1, nb_iter=0), "nb_iter"),
    (lambda m, x: attacks.mim(m, x, 0.1, norm=1), "norm"),
    (lambda m, x: attacks.fgsm(m, x, 3.0), "exceeds"),
    (lambda m, x: attacks.fgsm(m, x, 0.1, y=np.zeros(3, np.int64)), "y must"),
])
def test_bad_input_raises_before_work(call, match):
    calls = []

    def model_fn(v):
        calls.append(1)
        return tf.reshape(v, [tf.shape(v)[0], -1])[:, :3]

    with pytest.raises(ValueError, match=match):
        call(model_fn, _inputs(-1, 1))
    assert not calls


def test_attacks_lower_accuracy_of_small_mnist_model(real_data_dir):
    # A small MLP on real MNIST in [0, 1] (HGM's MNIST convention), 300 Adam steps, then
    # 300 test images; every attack at eps = 0.1 on [0, 1] must cost >= 15 points.
    x_tr, y_tr = data.load("mnist", "train", data_dir=real_data_dir, value_range=(0.0, 1.0),
                           num_examples=9600, download=False)
    x_te, y_te = data.load("mnist", "test", data_dir=real_data_dir, value_range=(0.0, 1.0),
                           num_examples=300, download=False)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Flatten(),
                              keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(keras.optimizers.Adam(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x_tr, y_tr, batch_size=32, epochs=1, verbose=0)  # 300 steps
    clean = np.mean(np.argmax(model(x_te).numpy(), 1) == y_te)
    assert clean > 0.85
    for name in attacks.ATTACKS:
        adv = attacks.run_attack(name, model, x_te, 0.1, 0.0, 1.0, nb_iter=10, seed=0)
        acc = np.mean(np.argmax(model(adv).numpy(), 1) == y_te)
        assert acc < clean - 0.15, (name, clean, acc)
