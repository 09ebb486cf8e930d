"""Monte-Carlo prediction of tfdp.certify on models whose noise is known."""

import keras
import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

import layers
from tfdp import certify


def _threshold_model(stddev: float, seed: int) -> keras.Model:
    """x (scalar) + N(0, stddev^2), then class 1 iff the noisy value is > 0."""
    inp = keras.Input((1,))
    noisy = layers.GaussianNoise(stddev, seed=seed)(inp)
    out = keras.layers.Dense(2, kernel_initializer=keras.initializers.Constant(
        [[-1000.0, 1000.0]]), bias_initializer="zeros")(noisy)
    return keras.Model(inp, out)


def test_counts_reproduce_known_class_probabilities():
    stddev, n = 0.5, 4000
    model = _threshold_model(stddev, seed=11)
    assert layers.set_inference_noise(model, True) == 1
    x = np.array([[-0.5], [-0.1], [0.0], [0.2], [0.6]], np.float32)
    # Each of the 4000 draws runs in one of 3 graph steps (1500, 1500, 1000 draws).
    result = certify.monte_carlo_predict(lambda v: model(v, training=False), x, n,
                                         draws_per_step=1500)
    assert result.counts.sum(axis=1).tolist() == [n] * 5
    p = scipy.stats.norm.cdf(x[:, 0] / stddev)  # P(x + N(0, s^2) > 0)
    # counts[:, 1] ~ Binomial(n, p): 5 standard deviations per input (a false failure
    # has probability < 3e-6 per input); +1/n for p near 0 or 1.
    tol = 5 * np.sqrt(p * (1 - p) / n) + 1.0 / n
    np.testing.assert_array_less(np.abs(result.counts[:, 1] / n - p), tol)
    # Scores are one-hot to within exp(-1000 |z|), so their means match the counts.
    np.testing.assert_allclose(result.mean_scores[:, 1], result.counts[:, 1] / n, atol=2e-3)


def test_noise_off_gives_deterministic_softmax():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
    x = np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32)
    result = certify.monte_carlo_predict(model, x, 10, draws_per_step=3)
    expected = tf.nn.softmax(model(x)).numpy()
    np.testing.assert_allclose(result.mean_scores, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(result.var_scores, 0.0, atol=1e-10)
    np.testing.assert_array_equal(result.counts.argmax(1), expected.argmax(1))
    assert np.all(result.counts.max(1) == 10)


def test_draws_are_independent_across_tiled_copies():
    # Three classes drawn i.i.d. with known probabilities by a seeded categorical sampler;
    # counts ~ Multinomial(n, p). Per-class tolerance: 5 binomial standard deviations.
    probs = np.array([0.2, 0.5, 0.3])
    gen = tf.random.Generator.from_seed(5)

    cut = tf.constant(np.cumsum(probs)[:-1], tf.float32)

    def score_fn(v):
        # one inverse-CDF draw per row, from a seeded stateful generator
        idx = tf.searchsorted(cut, gen.uniform([tf.shape(v)[0]]), side="right")
        return tf.one_hot(idx, 3)

    n = 3000
    result = certify.monte_carlo_predict(score_fn, np.zeros((2, 1), np.float32), n,
                                         from_logits=False, draws_per_step=700,
                                         num_classes=3)
    tol = 5 * np.sqrt(probs * (1 - probs) / n)
    for row in result.counts:
        np.testing.assert_array_less(np.abs(row / n - probs), tol)


def test_product_of_softmax_is_square_for_identical_passes():
    # StoBatch Corollary 1's product: with no fresh noise, q = p_x * p_h = softmax^2.
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
    x = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)
    score = certify.product_of_softmax([model, model])
    np.testing.assert_allclose(score(x).numpy(), tf.nn.softmax(model(x)).numpy() ** 2,
                               rtol=1e-6)
    result = certify.monte_carlo_predict(score, x, 4, from_logits=False)
    np.testing.assert_array_equal(result.counts.argmax(1), model(x).numpy().argmax(1))


@pytest.mark.parametrize("n", [0, -1, 1.5])
def test_bad_num_draws_raises_before_work(n):
    calls = []

    def score_fn(v):
        calls.append(1)
        return v

    with pytest.raises(ValueError, match="num_draws"):
        certify.monte_carlo_predict(score_fn, np.zeros((1, 2), np.float32), n)
    assert not calls


def test_each_graph_step_draws_fresh_noise():
    # One draw per graph step: if a step reused the previous step's noise, all 400 draws
    # would agree (count 0 or 400). At x = 0, P(class 1) = 1/2; 5 binomial standard
    # deviations of the fraction = 5 * sqrt(0.25 / 400) = 0.125.
    model = _threshold_model(1.0, seed=4)
    layers.set_inference_noise(model, True)
    result = certify.monte_carlo_predict(lambda v: model(v, training=False),
                                         np.zeros((1, 1), np.float32), 400, draws_per_step=1)
    assert abs(result.counts[0, 1] / 400 - 0.5) < 0.125
