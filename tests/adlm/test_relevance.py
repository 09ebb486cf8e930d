"""Tests of tfdp.papers.adlm.relevance: LRP (epsilon rule), normalisation, private average, budgets (AdLM)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdp.papers.adlm import relevance


def _dense_chain(widths, *, bias, seed=0, input_dim=12):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((input_dim,))
    h = inputs
    for w in widths[:-1]:
        h = keras.layers.Dense(w, use_bias=bias, bias_initializer="random_normal")(h)
        h = keras.layers.ReLU()(h)
    out = keras.layers.Dense(widths[-1], use_bias=bias, bias_initializer="random_normal")(h)
    return keras.Model(inputs, out)


def test_linear_model_relevance_is_input_times_weight():
    # LRP: linear model, no bias, mu = 0: R_j = x_j * w_j (weights of the true class).
    model = _dense_chain([3], bias=False)
    rng = np.random.default_rng(1)
    x = rng.uniform(0.1, 1.0, size=(5, 12)).astype(np.float32)
    y = np.array([0, 1, 2, 1, 0])
    r = relevance.lrp(model, x, y, mu=0.0)
    w = model.layers[-1].kernel.numpy()
    np.testing.assert_allclose(r, x * w[:, y].T, rtol=1e-5, atol=1e-6)


def test_bias_free_relu_mlp_conserves_relevance():
    # AdLM Eq. 9: bias-free ReLU MLP, mu = 1e-9: sum_j R_j = F_x within 1e-4.
    model = _dense_chain([16, 8, 4], bias=False, seed=2)
    x = np.random.default_rng(2).uniform(0, 1, size=(20, 12)).astype(np.float32)
    y = np.arange(20) % 4
    logits = model(x).numpy()
    r = relevance.lrp(model, x, y, mu=1e-9)
    start = logits[np.arange(20), y]
    np.testing.assert_allclose(r.sum(axis=1), start, atol=1e-4)


def test_with_bias_and_mu_relevance_is_not_amplified():
    # LRP: with mu > 0 or with biases, |sum_j R_j| <= |F_x| + tol. Each epsilon-rule
    # layer multiplies unit m's relevance by (z_m - b_m) / (z_m + mu sign(z_m)), which lies in
    # [0, 1] for z_m > 0, b_m >= 0, mu >= 0. The total can still grow when relevances of mixed
    # sign cancel unequally, so the property is checked where it is a theorem: non-negative
    # inputs, weights and biases (every z > 0, every relevance >= 0).
    keras.utils.set_random_seed(3)
    pos = keras.initializers.RandomUniform(0.0, 0.5)
    inputs = keras.Input((12,))
    h = inputs
    for w in (16, 8):
        h = keras.layers.Dense(w, kernel_initializer=pos, bias_initializer=pos)(h)
        h = keras.layers.ReLU()(h)
    out = keras.layers.Dense(4, kernel_initializer=pos, bias_initializer=pos)(h)
    model = keras.Model(inputs, out)
    x = np.random.default_rng(3).uniform(0, 1, size=(100, 12)).astype(np.float32)
    y = np.arange(100) % 4
    start = model(x).numpy()[np.arange(100), y]
    for mu in (0.0, 0.01, 1.0):
        r = relevance.lrp(model, x, y, mu=mu)
        assert np.all(r >= -1e-7)
        assert np.all(np.abs(r.sum(axis=1)) <= np.abs(start) + 1e-4)
        # The biases absorb relevance: strictly less than F_x reaches the inputs.
        assert np.all(r.sum(axis=1) < start)


def test_max_pool_winner_take_all_keeps_total():
    # LRP: winner-take-all max-pool keeps the total relevance.
    layer = keras.layers.MaxPooling2D(2)
    a = tf.constant(np.random.default_rng(4).uniform(size=(3, 4, 4, 2)), tf.float32)
    r_out = tf.constant(np.random.default_rng(5).normal(size=(3, 2, 2, 2)), tf.float32)
    r_in = relevance._lrp_max(layer, a, r_out).numpy()
    np.testing.assert_allclose(r_in.sum(axis=(1, 2, 3)), r_out.numpy().sum(axis=(1, 2, 3)),
                               rtol=1e-5)
    # Exactly one winner per pooling window receives relevance.
    assert np.count_nonzero(r_in) == r_out.numpy().size


def test_conv_pool_model_conserves_relevance():
    # Conv (no bias) -> ReLU -> max-pool -> flatten -> dense (no bias), mu ~ 0: Eq. 9.
    keras.utils.set_random_seed(6)
    inputs = keras.Input((6, 6, 1))
    h = keras.layers.Conv2D(4, 3, padding="same", use_bias=False)(inputs)
    h = keras.layers.ReLU()(h)
    h = keras.layers.MaxPooling2D(2)(h)
    h = keras.layers.Flatten()(h)
    out = keras.layers.Dense(3, use_bias=False)(h)
    model = keras.Model(inputs, out)
    x = np.random.default_rng(6).uniform(size=(10, 6, 6, 1)).astype(np.float32)
    y = np.arange(10) % 3
    r = relevance.lrp(model, x, y, mu=1e-9)
    np.testing.assert_allclose(r.reshape(10, -1).sum(axis=1),
                               model(x).numpy()[np.arange(10), y], atol=1e-4)


def test_predicted_start_and_errors():
    model = _dense_chain([3], bias=False)
    x = np.ones((2, 12), np.float32)
    r = relevance.lrp(model, x, start="predicted", mu=0.0)
    pred = np.argmax(model(x).numpy(), axis=1)
    np.testing.assert_allclose(r.sum(axis=1), model(x).numpy()[np.arange(2), pred], rtol=1e-5)
    with pytest.raises(ValueError, match="mu"):
        relevance.lrp(model, x, [0, 1], mu=-1.0)
    with pytest.raises(ValueError, match="start"):
        relevance.lrp(model, x, [0, 1], start="all")
    with pytest.raises(ValueError, match="y"):
        relevance.lrp(model, x, None)


def test_per_record_normalisation_in_unit_interval():
    # Per-record normalised relevance lies in [0, 1]; a constant record maps to 0.
    r = np.random.default_rng(7).normal(scale=5.0, size=(30, 50))
    r[3] = 2.5
    out = relevance.normalize_per_record(r)
    assert out.min() >= 0.0 and out.max() <= 1.0
    np.testing.assert_allclose(out[:, :].max(axis=1)[np.arange(30) != 3], 1.0)
    np.testing.assert_array_equal(out[3], 0.0)
    with pytest.raises(ValueError, match="relevance"):
        relevance.normalize_per_record(np.ones(3))


def test_pixel_granularity_means_over_channels():
    r = np.arange(2 * 2 * 2 * 3, dtype=np.float64).reshape(2, 2, 2, 3)
    out = relevance.to_granularity(r, "pixel")
    np.testing.assert_allclose(out, r.mean(axis=-1).reshape(2, 4))
    assert relevance.to_granularity(r, "feature").shape == (2, 12)


def test_relevance_sensitivity_fixtures():
    # Lemma 1: Delta_R = 2d/|D|: MNIST 0.0261333..., CIFAR-10 (d = 400) 0.016;
    # scales 0.348444, 0.064.
    assert relevance.relevance_sensitivity(d=784, n=60000) == pytest.approx(0.02613333333, rel=1e-9)
    assert relevance.relevance_sensitivity(d=400, n=50000) == pytest.approx(0.016, rel=1e-12)
    assert relevance.relevance_sensitivity(d=784, n=60000) / 0.075 == pytest.approx(0.348444, rel=1e-5)
    assert relevance.relevance_sensitivity(d=400, n=50000) / 0.25 == pytest.approx(0.064, rel=1e-12)
    with pytest.raises(ValueError, match="n"):
        relevance.relevance_sensitivity(d=3, n=0)


def test_lemma1_empirically():
    # AdLM Lemma 1, empirically: neighbouring D, D' (one record replaced):
    # ||R(D) - R(D')||_1 <= 2d/|D| (in fact <= d/|D|) over 1,000 random trials.
    rng = np.random.default_rng(8)
    n, d = 50, 20
    for _ in range(1000):
        base = relevance.normalize_per_record(rng.normal(size=(n, d)))
        other = base.copy()
        other[rng.integers(n)] = relevance.normalize_per_record(rng.normal(size=(1, d)))[0]
        change = np.abs(base.mean(axis=0) - other.mean(axis=0)).sum()
        assert change <= d / n + 1e-12 <= relevance.relevance_sensitivity(d=d, n=n)


def test_private_average_noise_scale():
    # Rbar - R = Lap(Delta_R / eps1) per feature. Mean |noise| estimates the scale s with
    # relative standard error 1/sqrt(N) (Var|V| = s^2 for Laplace); N = 200 records x 20 draws
    # of d = 500 features = 10,000 values -> 1%; tolerance 5% (5 standard errors).
    rng = np.random.default_rng(9)
    r = relevance.normalize_per_record(rng.normal(size=(200, 500)))
    diffs = []
    for _ in range(20):
        rbar, info = relevance.private_average(r, epsilon=0.5, rng=rng)
        diffs.append(rbar - r.mean(axis=0))
    s = 2 * 500 / 200 / 0.5
    assert info["scale"] == pytest.approx(s)
    assert np.mean(np.abs(diffs)) == pytest.approx(s, rel=0.05)
    with pytest.raises(ValueError, match="normalized"):
        relevance.private_average(r * 3, epsilon=0.5, rng=rng)
    with pytest.raises(ValueError, match="epsilon"):
        relevance.private_average(r, epsilon=0.0, rng=rng)


def test_budget_identities():
    # AdLM Eq. 16: sum beta = d (1e-9), beta > 0 after the floor, sum eps_j = d eps2,
    # monotonicity, ILM beta = 1, and the Lemma 4 log-ratio bound equals eps2.
    rng = np.random.default_rng(10)
    d, eps2, h0 = 784, 0.075, 25088
    rbar = rng.normal(scale=0.3, size=d)
    rbar[:10] = 0.0
    beta = relevance.adaptive_budgets(rbar, floor=1e-5)
    assert abs(beta.sum() - d) < 1e-9
    assert np.all(beta > 0)
    eps_j = beta * eps2
    assert eps_j.sum() == pytest.approx(d * eps2, rel=1e-12)
    order = np.argsort(np.abs(rbar))
    scales = 1.0 / eps_j  # noise scale is Delta_h0 / eps_j
    assert np.all(np.diff(scales[order]) <= 1e-12)
    np.testing.assert_array_equal(relevance.uniform_budgets(d), np.ones(d))
    delta_h0 = 2 * h0 * d
    assert np.sum(h0 * 2 * eps_j / delta_h0) == pytest.approx(eps2, rel=1e-12)  # AdLM Lemma 4
    with pytest.raises(ValueError, match="floor"):
        relevance.adaptive_budgets(rbar, floor=0.0)


def test_transforms():
    avg = np.array([0.0, 0.5, 1.0, 0.25])
    np.testing.assert_allclose(relevance.transform_average(avg, "ref_code_mnist"),
                               avg ** 4)
    np.testing.assert_allclose(relevance.transform_average(avg, "ref_code_cifar"),
                               np.clip(avg + 0.3, 0, 1))
    np.testing.assert_array_equal(relevance.transform_average(avg, "paper"), avg)
    with pytest.raises(ValueError, match="transform"):
        relevance.transform_average(avg, "other")
