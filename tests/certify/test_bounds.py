"""Confidence bounds of tfdp.certify against scipy and worked fixtures."""

import math

import numpy as np
import pytest
import scipy.stats

from tfdp import certify


@pytest.mark.parametrize("n,k", [(1000, 10), (2000, 10), (500, 30), (37, 3)])
def test_clopper_pearson_matches_scipy_exact_interval(n, k):
    rng = np.random.default_rng(n)
    counts = rng.multinomial(n, rng.dirichlet(np.ones(k)))
    alpha = 0.05
    lower, upper = certify.clopper_pearson_bounds(counts, alpha)
    for j, c in enumerate(counts):
        # A two-sided exact interval at confidence 1 - 2a has one-sided level a per end.
        ci = scipy.stats.binomtest(int(c), n).proportion_ci(
            confidence_level=1 - 2 * alpha / k, method="exact")
        assert lower[j] == pytest.approx(ci.low, abs=1e-12)
        assert upper[j] == pytest.approx(ci.high, abs=1e-12)


def test_clopper_pearson_spec_fixtures():
    # Clopper-Pearson: a = alpha / K = 0.005 (alpha 0.05, K = 10)
    for n, ub, lb in [(1000, 0.005284, 0.994716), (2000, 0.002646, 0.997354)]:
        counts = np.array([n] + [0] * 9)
        lower, upper = certify.clopper_pearson_bounds(counts, 0.05)
        assert lower[0] == pytest.approx(lb, abs=1e-6)
        assert upper[1] == pytest.approx(ub, abs=1e-6)
        assert lower[1] == 0.0 and upper[0] == 1.0


@pytest.mark.parametrize("n,k,expected", [(2000, 10, 2.966094), (1000, 10, 2.618858),
                                          (1000, 30, 2.524368), (500, 30, 2.176193)])
def test_max_certifiable_eps_stobatch_fixture(n, k, expected):
    # Largest certifiable eps_r*: all n counts on one class, alpha 0.05, Bonferroni K.
    result = certify.MonteCarloResult(np.array([[n] + [0] * (k - 1)]),
                                      np.zeros((1, k)), np.zeros((1, k)), n)
    _, lower, upper = certify.top_two_bounds(result, "clopper_pearson", 0.05)
    assert float(certify.max_epsilon(lower, upper)[0]) == pytest.approx(expected, abs=1e-5)


def test_hoeffding_half_width_spec_fixture():
    # Hoeffding: half-width sqrt(ln(K/alpha)/(2N)) = 0.051470 (N=1000), 0.036395 (N=2000)
    for n, half in [(1000, 0.051470), (2000, 0.036395)]:
        mean = np.full((1, 10), 0.5)
        lower, upper = certify.hoeffding_bounds(mean, n, 0.05)
        assert 0.5 - lower[0, 0] == pytest.approx(half, abs=1e-6)
        assert upper[0, 0] - 0.5 == pytest.approx(half, abs=1e-6)


def test_empirical_bernstein_closed_form_and_zero_variance():
    n, k, alpha = 400, 4, 0.1
    mean = np.array([[0.7, 0.2, 0.05, 0.05]])
    var = np.array([[0.04, 0.01, 0.0, 0.0]])
    lower, upper = certify.empirical_bernstein_bounds(mean, var, n, alpha)
    log_term = math.log(2 * k / alpha)
    half = np.sqrt(2 * var * log_term / n) + 7 * log_term / (3 * (n - 1))
    np.testing.assert_allclose(upper, np.clip(mean + half, 0, 1), rtol=0, atol=1e-15)
    np.testing.assert_allclose(lower, np.clip(mean - half, 0, 1), rtol=0, atol=1e-15)
    # With zero variance only the 7 ln(2K/alpha) / (3(n-1)) term remains.
    assert upper[0, 2] - 0.05 == pytest.approx(7 * log_term / (3 * (n - 1)), rel=1e-12)


def test_empirical_bernstein_covers_true_mean():
    # 2000 repetitions of n = 200 Bernoulli(0.3) scores; the one-sided lower bound at level
    # a = alpha/K = 0.05/2 must fail in at most a fraction a of them. The failure count is
    # Binomial(2000, <= 0.025): mean <= 50, sd <= 7; allow 50 + 5 sd = 85.
    rng = np.random.default_rng(7)
    p, n, reps = 0.3, 200, 2000
    samples = rng.random((reps, n)) < p
    mean = samples.mean(axis=1)
    var = samples.var(axis=1, ddof=1)
    m = np.stack([mean, 1 - mean], axis=1)
    v = np.stack([var, var], axis=1)
    lower, upper = certify.empirical_bernstein_bounds(m, v, n, 0.05)
    assert np.sum(lower[:, 0] > p) <= 85
    assert np.sum(upper[:, 0] < p) <= 85


def test_top_two_bounds_uses_runner_up():
    counts = np.array([[5, 80, 15], [0, 0, 100]])
    result = certify.MonteCarloResult(counts, counts / 100.0, np.zeros((2, 3)), 100)
    pred, lower, upper = certify.top_two_bounds(result, "clopper_pearson", 0.05)
    lo, up = certify.clopper_pearson_bounds(counts, 0.05)
    np.testing.assert_array_equal(pred, [1, 2])
    assert lower[0] == lo[0, 1] and upper[0] == up[0, 2]
    assert lower[1] == lo[1, 2] and upper[1] == max(up[1, 0], up[1, 1])
    pred_h, _, _ = certify.top_two_bounds(result, "hoeffding", 0.05)
    np.testing.assert_array_equal(pred_h, [1, 2])


def test_max_epsilon_solves_eq4_exactly():
    # PixelDP Eq. 4 holds strictly just below eps* and fails just above it.
    rng = np.random.default_rng(3)
    for _ in range(50):
        lo = rng.uniform(0.3, 1.0)
        up = rng.uniform(0.0, lo / 2)
        d = rng.uniform(0.0, 0.05)
        eps = float(certify.max_epsilon(lo, up, d))
        if eps == 0.0:
            assert lo <= math.exp(1e-9 * 2) * up + (1 + math.exp(1e-9)) * d + 1e-12
            continue

        def check(e):
            return lo > math.exp(2 * e) * up + (1 + math.exp(e)) * d

        assert check(eps * (1 - 1e-9))
        assert not check(eps * (1 + 1e-9))
    assert float(certify.max_epsilon(0.4, 0.5)) == 0.0  # abstain


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 1.5])
def test_bad_alpha_raises(alpha):
    with pytest.raises(ValueError, match="alpha"):
        certify.clopper_pearson_bounds([5, 5], alpha)
    with pytest.raises(ValueError, match="alpha"):
        certify.hoeffding_bounds([[0.5, 0.5]], 10, alpha)


@pytest.mark.parametrize("n", [0, -3, 2.5])
def test_bad_num_draws_raises(n):
    with pytest.raises(ValueError, match="num_draws"):
        certify.hoeffding_bounds([[0.5, 0.5]], n, 0.05)


def test_unknown_bound_raises():
    result = certify.MonteCarloResult(np.array([[1, 1]]), np.full((1, 2), 0.5),
                                      np.zeros((1, 2)), 2)
    with pytest.raises(ValueError, match="bound"):
        certify.top_two_bounds(result, "chernoff", 0.05)
