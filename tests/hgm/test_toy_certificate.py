"""Certificates of a trained HGM-noised model survive a PGD attack."""

import keras
import numpy as np
import tensorflow as tf

import layers as tfdp_layers
from tfdp import certify, mechanisms
from tfdp.papers.hgm import models as hgm_models

D, UNITS, N_CERT, DRAWS, ALPHA = 20, 16, 200, 5000, 0.05


def _toy_model(sigma):
    # A dense first layer written as a 1x1 convolution on a 1x1xD "image", so that it is the
    # same sensitivity-bounded layer (layer_max, uniform r, Delta_f <= 1) as in Secure-SGD.
    inputs = keras.Input((1, 1, D))
    h = hgm_models.SensitivityBoundedConv2D(UNITS, 1, name="conv1")(inputs)
    h = tfdp_layers.HeterogeneousGaussianNoise(sigma, None, seed=5, name="noise")(h)
    h = keras.layers.Rescaling(float(np.sqrt(UNITS)))(h)
    h = keras.layers.ReLU()(h)
    h = keras.layers.Flatten()(h)
    return keras.Model(inputs, keras.layers.Dense(2)(h))


def _blobs(rng, n):
    y = rng.integers(0, 2, size=n)
    x = (2.0 * y - 1.0)[:, None] * 2.0 + rng.normal(0.0, 2.0, size=(n, D))
    return x.reshape(n, 1, 1, D).astype(np.float32), y


def test_certified_points_do_not_flip_under_pgd():
    rng = np.random.default_rng(0)
    keras.utils.set_random_seed(0)
    eps_r, delta_r, bound_l = 1.0, 1e-5, 0.5
    sigma = mechanisms.hgm_multiplier(epsilon=eps_r, delta=delta_r) * bound_l  # HGM Alg. 1 line 3
    model = _toy_model(sigma)
    x_train, y_train = _blobs(rng, 4000)
    opt = keras.optimizers.Adam(1e-2)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                yb, model(xb, training=True), from_logits=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))

    for _ in range(3):
        for i in range(0, 4000, 100):
            step(x_train[i:i + 100], y_train[i:i + 100])

    tfdp_layers.set_inference_noise(model, True)
    cert = {"mechanism": "hgm", "construction_bound": bound_l, "epsilon": eps_r,
            "delta": delta_r}
    predictor = certify.MonteCarloPredictor(lambda v: model(v, training=False),
                                            draws_per_step=1000)
    x_test, _ = _blobs(rng, N_CERT)
    result = predictor(x_test, DRAWS, 2)
    pred, radius = certify.certify(result, cert, bound="hoeffding", alpha=ALPHA)
    ok = radius > 0
    assert ok.sum() >= 50, "too few certified points for a meaningful check"

    # PGD (100 steps, l_inf ball of 0.99 mu_max per point) against E_hat with 500 common noise
    # draws per step, maximising the runner-up's minus the predicted class's mean score.
    conv1 = model.get_layer("conv1")
    rest = model.layers[model.layers.index(model.get_layer("noise")) + 1:]
    xc = tf.constant(x_test[ok])
    pc = tf.constant(pred[ok])
    budget = tf.constant((0.99 * radius[ok]).astype(np.float32))[:, None, None, None]
    noise_std = float(sigma)

    def mean_scores(xv, seed):
        h = conv1(xv)  # [b, 1, 1, U]
        z = tf.random.stateless_normal([500, 1, 1, 1, UNITS], seed, stddev=noise_std)
        hz = tf.reshape(h[None] + z, [-1, 1, 1, UNITS])
        for layer in rest:
            hz = layer(hz)
        return tf.reduce_mean(tf.reshape(tf.nn.softmax(hz), [500, -1, 2]), axis=0)

    def pgd(scale, steps):
        eps_ball = scale * budget
        xa = tf.Variable(xc)
        step_size = 2.5 * eps_ball / steps
        for t in range(steps):
            with tf.GradientTape() as tape:
                probs = mean_scores(xa, tf.constant([t, 7]))
                top = tf.gather(probs, pc, batch_dims=1)
                objective = tf.reduce_sum((1.0 - top) - top)
            g = tape.gradient(objective, xa)
            moved = xa + step_size * tf.sign(g)
            xa.assign(xc + tf.clip_by_value(moved - xc, -eps_ball, eps_ball))
        assert np.all(np.abs(xa.numpy() - xc.numpy()) <= eps_ball.numpy() + 1e-5)
        adv = predictor(xa.numpy(), DRAWS, 2)
        return np.argmax(adv.mean_scores, axis=-1) != pred[ok]

    flipped = pgd(1.0, 100)
    # Soundness: at most (1 - eta) + 2% of certified points flip.
    assert flipped.mean() <= ALPHA + 0.02
    # Control: the same attack with 10 times the certified radius does flip points, so the
    # check above is not passing because the attack is weak.
    assert pgd(10.0, 30).mean() > 0.2
