"""HGM redistribution: HGM Theorem 3, Eq. 6 and 7."""

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from tfdp import mechanisms as m


def test_reduction_to_egm_with_uniform_r():
    r = m.uniform_redistribution((7, 3))
    sigma = m.hgm_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0)
    np.testing.assert_allclose(m.heterogeneous_stddevs(sigma=sigma, r=r), sigma, rtol=1e-15)
    diff = np.random.default_rng(0).normal(size=(7, 3))
    assert m.weighted_sensitivity(diff, r) == pytest.approx(np.linalg.norm(diff), rel=1e-14)


def test_noise_budget_is_preserved():
    rng = np.random.default_rng(1)
    for k in [2, 10, 1000]:
        r = rng.dirichlet(np.ones(k))
        std = m.heterogeneous_stddevs(sigma=2.5, r=r)
        assert np.sum(std ** 2) == pytest.approx(k * 2.5 ** 2, rel=1e-12)


def test_weighted_sensitivity_batch_max_and_formula():
    r = np.array([0.5, 0.25, 0.25])
    diffs = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.5]])
    # ||v / sqrt(K r)||: 1/sqrt(1.5), 1/sqrt(0.75), 0.5/sqrt(0.75)
    assert m.weighted_sensitivity(diffs, r) == pytest.approx(1 / np.sqrt(0.75), rel=1e-14)
    assert m.weighted_sensitivity(diffs[0], r) == pytest.approx(1 / np.sqrt(1.5), rel=1e-14)


def _mc_losses(r, v, std, n, seed):
    rng = np.random.default_rng(seed)
    o = rng.standard_normal((n, len(r))) * std
    return np.sum(((o + v) ** 2 - o ** 2) / (2 * std ** 2), axis=1)  # privacy loss


@pytest.mark.parametrize("eps, delta, p_tail, hockey", [(1.0, 0.05, 1.231e-2, 1.092e-3),
                                                        (8.0, 0.01, 1.541e-3, 5.72e-4)])
def test_monte_carlo_privacy_loss_heterogeneous(eps, delta, p_tail, hockey):
    r = np.array([0.4, 0.3, 0.15, 0.1, 0.05])
    k = len(r)
    v = np.random.default_rng(3).normal(size=k)
    v /= m.weighted_sensitivity(v, r)  # weighted norm exactly 1
    assert m.weighted_sensitivity(v, r) == pytest.approx(1.0, rel=1e-14)
    sigma = m.hgm_sigma(epsilon=eps, delta=delta, sensitivity=1.0)
    std = m.heterogeneous_stddevs(sigma=sigma, r=r)
    n = 2_000_000
    loss = _mc_losses(r, v, std, n, seed=0)
    # The loss is exactly N(1/(2 sigma^2), 1/sigma^2) whatever r and v are.
    exact = stats.norm(loc=1 / (2 * sigma ** 2), scale=1 / sigma)
    exact_tail = exact.sf(eps) + exact.cdf(-eps)
    assert exact_tail == pytest.approx(p_tail, rel=1e-3)
    exact_hockey = m.gaussian_delta(sigma=sigma, epsilon=eps, sensitivity=1.0)
    assert exact_hockey == pytest.approx(hockey, rel=2e-3)
    tail = np.mean(np.abs(loss) > eps)
    # Binomial SE of the tail frequency: sqrt(p (1 - p) / n); 5 SE.
    assert abs(tail - exact_tail) <= 5 * np.sqrt(exact_tail * (1 - exact_tail) / n)
    assert tail <= delta
    h = np.maximum(1 - np.exp(eps - loss), 0.0)
    # Sample SE of the mean of h; 5 SE.
    assert abs(h.mean() - exact_hockey) <= 5 * h.std() / np.sqrt(n)
    assert h.mean() <= delta


def test_monte_carlo_negative_control_unweighted_calibration():
    # Calibrate with the unweighted sensitivity 1 but put v on the r = 0.05 coordinate
    # (weighted norm 2): the mechanism is not (1, 0.05)-DP and the check must see it.
    r = np.array([0.4, 0.3, 0.15, 0.1, 0.05])
    v = np.array([0.0, 0.0, 0.0, 0.0, 1.0])
    v_weighted_norm = m.weighted_sensitivity(v, r)
    assert v_weighted_norm == pytest.approx(2.0, rel=1e-14)
    sigma = m.hgm_sigma(epsilon=1.0, delta=0.05, sensitivity=1.0)
    std = m.heterogeneous_stddevs(sigma=sigma, r=r)
    assert m.gaussian_delta(sigma=sigma, epsilon=1.0, sensitivity=2.0) == pytest.approx(
        0.0589, abs=5e-4)
    sig5 = m.hgm_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0)
    assert m.gaussian_delta(sigma=sig5, epsilon=1.0, sensitivity=2.0) == pytest.approx(
        1.67e-3, rel=5e-3)
    n = 2_000_000
    h = np.maximum(1 - np.exp(1.0 - _mc_losses(r, v, std, n, seed=0)), 0.0)
    # The estimate exceeds delta = 0.05 by far more than 5 SE.
    assert h.mean() - 5 * h.std() / np.sqrt(n) > 0.05


def test_layer_sensitivity_dense_bounds_hold():
    rng = np.random.default_rng(4)
    w = rng.normal(size=(784, 256)) * 0.05
    r = rng.dirichlet(np.ones(256))
    l1 = np.abs(w).sum(axis=0)
    d_max = m.layer_sensitivity(unit_l1_norms=l1, r=r, bound="max")
    d_sum = m.layer_sensitivity(unit_l1_norms=l1, r=r, bound="sum")
    assert d_sum <= d_max
    mu = 0.3
    alphas = [rng.uniform(-mu, mu, size=784) for _ in range(50)]
    alphas += [mu * rng.choice([-1.0, 1.0], size=784) for _ in range(50)]
    worst = [mu * np.sign(w[:, k]) for k in range(256)]
    for k, a in enumerate(worst):
        assert abs(w[:, k] @ a) == pytest.approx(mu * l1[k], rel=1e-12)  # attains the l1 norm
    for a in alphas + worst:
        change = np.linalg.norm((w.T @ a) / np.sqrt(256 * r))
        assert change <= mu * d_sum * (1 + 1e-12) <= mu * d_max * (1 + 1e-12)


@pytest.mark.parametrize("stride", [1, 2])
def test_layer_sensitivity_conv_bounds_hold(stride):
    rng = np.random.default_rng(5)
    kernel = rng.normal(size=(3, 3, 2, 4)).astype(np.float64) * 0.1
    x_shape = (1, 10, 10, 2)
    out_shape = tuple(tf.nn.conv2d(tf.zeros(x_shape, tf.float64), kernel, stride, "SAME").shape[1:])
    k = int(np.prod(out_shape))
    r = rng.dirichlet(np.ones(k)).reshape(out_shape)
    l1 = np.broadcast_to(np.abs(kernel).sum(axis=(0, 1, 2)), out_shape)  # ||W_c||_1 per unit
    d_max = m.layer_sensitivity(unit_l1_norms=l1, r=r, bound="max")
    d_sum = m.layer_sensitivity(unit_l1_norms=l1, r=r, bound="sum")
    d_map = m.layer_sensitivity(unit_l1_norms=l1, r=r, bound="per_map")
    assert d_map <= d_sum <= d_max
    mu = 0.2
    alphas = [rng.uniform(-mu, mu, size=x_shape) for _ in range(20)]
    alphas += [mu * rng.choice([-1.0, 1.0], size=x_shape) for _ in range(20)]
    for a in alphas:
        h = tf.nn.conv2d(a, kernel, stride, "SAME").numpy()[0]
        assert np.linalg.norm(h / np.sqrt(k * r)) <= mu * d_sum * (1 + 1e-12)


def test_layer_sensitivity_uniform_r_is_paper_form():
    l1 = np.array([1.0, 3.0, 2.0, 0.5])
    r = m.uniform_redistribution(4)
    # Paper form sqrt(|h1|) max_k ||w_k||_1 (HGM Eq. 6) for uniform r.
    assert m.layer_sensitivity(unit_l1_norms=l1, r=r) == pytest.approx(2 * 3.0, rel=1e-14)
    assert m.layer_sensitivity(unit_l1_norms=l1, r=r, bound="sum") == pytest.approx(
        np.linalg.norm(l1), rel=1e-14)


def test_redistribution_properties():
    rng = np.random.default_rng(6)
    scores = rng.exponential(size=(6, 5)) ** 3
    r = m.redistribution_from_scores(scores, floor=0.0)
    assert np.all(r >= 0) and abs(r.sum() - 1) <= 1e-6
    np.testing.assert_allclose(r, scores / scores.sum(), rtol=1e-14)
    grads = rng.normal(size=(100, 30))
    beta0 = m.redistribution_from_scores(np.mean(np.abs(grads) ** 0, axis=0), floor=0.01)
    np.testing.assert_allclose(beta0, 1 / 30, rtol=1e-14)  # beta = 0 gives uniform
    perm = rng.permutation(30)
    s = np.mean(np.abs(grads), axis=0)
    np.testing.assert_allclose(m.redistribution_from_scores(s[perm], floor=0.01),
                               m.redistribution_from_scores(s, floor=0.01)[perm], rtol=1e-14)
    spiky = np.zeros(1000)
    spiky[:3] = [5.0, 1.0, 1.0]
    rf = m.redistribution_from_scores(spiky, floor=0.01)
    assert rf.min() >= 0.01 / (1.01 * 1000) and abs(rf.sum() - 1) <= 1e-12
    m.check_redistribution(rf)
    rm = m.redistribution_from_scores(spiky, floor=0.0, mix=0.5)
    assert rm.min() == pytest.approx(0.5 / 1000, rel=1e-12)


@pytest.mark.parametrize("r", [[0.5, 0.6], [0.5, 0.5, 0.0], [1.2, -0.2], [np.nan, 1.0], []])
def test_r_not_a_distribution_raises(r):
    with pytest.raises(ValueError, match=r"\br\b"):
        m.heterogeneous_stddevs(sigma=1.0, r=r)
    with pytest.raises(ValueError, match=r"\br\b"):
        m.weighted_sensitivity(np.ones(len(r)), r)


def test_bad_inputs_heterogeneous():
    r = m.uniform_redistribution(4)
    with pytest.raises(ValueError, match="diff"):
        m.weighted_sensitivity(np.ones(3), r)
    with pytest.raises(ValueError, match="sigma"):
        m.heterogeneous_stddevs(sigma=-1.0, r=r)
    with pytest.raises(ValueError, match="unit_l1_norms"):
        m.layer_sensitivity(unit_l1_norms=np.ones(5), r=r)
    with pytest.raises(ValueError, match="bound"):
        m.layer_sensitivity(unit_l1_norms=np.ones(4), r=r, bound="spectral")
    with pytest.raises(ValueError, match="scores"):
        m.redistribution_from_scores([0.0, 0.0], floor=0.01)
    with pytest.raises(ValueError, match="scores"):
        m.redistribution_from_scores([1.0, -1.0], floor=0.01)
    with pytest.raises(ValueError, match="scores"):
        m.redistribution_from_scores([1.0, 0.0], floor=0.0)
    with pytest.raises(ValueError, match="floor"):
        m.redistribution_from_scores([1.0, 2.0], floor=1.0)
    with pytest.raises(ValueError, match="mix"):
        m.redistribution_from_scores([1.0, 2.0], floor=0.0, mix=1.5)
