"""Tests of tfdp.papers.adlm.budgets: AdLM Lemma 1 sensitivity, Eq. 16 weights, Alg. 1 scales."""

import numpy as np
import pytest

from tfdp import mechanisms
from tfdp.papers.adlm import budgets


def test_adlm_relevance_sensitivity_fixtures():
    assert budgets.adlm_relevance_sensitivity(num_features=784, num_examples=60000) == \
        pytest.approx(0.0261333, abs=1e-7)
    assert budgets.adlm_relevance_sensitivity(num_features=400, num_examples=50000) == \
        pytest.approx(0.016, rel=1e-15)
    s = budgets.adlm_relevance_sensitivity(num_features=784, num_examples=60000)
    assert mechanisms.laplace_scale(epsilon=0.075, sensitivity=s) == pytest.approx(0.348444,
                                                                                   abs=1e-6)


def test_adaptive_budget_identities():
    rng = np.random.default_rng(0)
    rel = rng.normal(size=(28, 28)) * np.linspace(0, 1, 28)  # includes exact zeros
    beta = budgets.adaptive_budget_weights(rel, floor=1e-5)
    assert beta.shape == (28, 28)
    assert abs(beta.sum() - 784) <= 1e-9 and np.all(beta > 0)
    eps2 = 0.075
    assert abs(np.sum(beta * eps2) - 784 * eps2) <= 1e-9
    scales = budgets.adlm_feature_noise_scales(sensitivity=9800, epsilon=eps2, beta=beta)
    flat_r, flat_s = np.abs(rel).ravel(), scales.ravel()
    a, b = np.argmax(flat_r), np.argmin(flat_r)
    assert flat_r[a] > flat_r[b] and flat_s[a] < flat_s[b]  # more relevant -> less noise
    ilm = budgets.adaptive_budget_weights(np.full(10, 0.3), floor=1e-5)
    np.testing.assert_allclose(ilm, 1.0, rtol=1e-15)
    # Lemma 4: sum_h sum_j 2 eps_j / Delta_h0 = eps2 when Delta_h0 = 2 |h0| d.
    h0, d = 5, 784
    assert h0 * np.sum(2 * beta * eps2) / (2 * h0 * d) == pytest.approx(eps2, rel=1e-12)


def test_adlm_noise_scale_fixtures():
    beta = np.array([0.5, 1.0, 2.0])
    mnist = budgets.adlm_feature_noise_scales(sensitivity=9800, epsilon=0.075, beta=beta,
                                              batch_size=1800)
    np.testing.assert_allclose(mnist * beta, 72.5926, atol=1e-4)
    cifar = budgets.adlm_feature_noise_scales(sensitivity=5400, epsilon=1.5, beta=beta,
                                              batch_size=7200)
    np.testing.assert_allclose(cifar, 0.5 / beta, rtol=1e-14)


def test_zero_sensitivity_raises_unless_allowed():
    with pytest.raises(ValueError, match="sensitivity is 0"):
        budgets.adlm_feature_noise_scales(sensitivity=0.0, epsilon=1.0, beta=[1.0, 2.0])
    assert list(budgets.adlm_feature_noise_scales(sensitivity=0.0, epsilon=1.0, beta=[1.0],
                                                  allow_zero=True)) == [0.0]


def test_budget_bad_inputs():
    with pytest.raises(ValueError, match="num_examples"):
        budgets.adlm_relevance_sensitivity(num_features=10, num_examples=0)
    with pytest.raises(ValueError, match="floor"):
        budgets.adaptive_budget_weights([1.0, 2.0], floor=0.0)
    with pytest.raises(ValueError, match="relevance"):
        budgets.adaptive_budget_weights([1.0, np.nan], floor=1e-5)
    with pytest.raises(ValueError, match="beta"):
        budgets.adlm_feature_noise_scales(sensitivity=1.0, epsilon=1.0, beta=[1.0, 0.0])
    with pytest.raises(ValueError, match="epsilon"):
        budgets.adlm_feature_noise_scales(sensitivity=1.0, epsilon=-1.0, beta=[1.0])
