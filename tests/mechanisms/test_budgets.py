"""AdLM and StoBatch budget bookkeeping: AdLM Eq. 16, StoBatch Lemma 2-3 and Theorem 4."""

import numpy as np
import pytest

from tfdp import mechanisms as m


def test_adlm_relevance_sensitivity_fixtures():
    assert m.adlm_relevance_sensitivity(num_features=784, num_examples=60000) == pytest.approx(
        0.0261333, abs=1e-7)
    assert m.adlm_relevance_sensitivity(num_features=400, num_examples=50000) == pytest.approx(
        0.016, rel=1e-15)
    s = m.adlm_relevance_sensitivity(num_features=784, num_examples=60000)
    assert m.laplace_scale(epsilon=0.075, sensitivity=s) == pytest.approx(0.348444, abs=1e-6)


def test_adaptive_budget_identities():
    rng = np.random.default_rng(0)
    rel = rng.normal(size=(28, 28)) * np.linspace(0, 1, 28)  # includes exact zeros
    beta = m.adaptive_budget_weights(rel, floor=1e-5)
    assert beta.shape == (28, 28)
    assert abs(beta.sum() - 784) <= 1e-9 and np.all(beta > 0)
    eps2 = 0.075
    assert abs(np.sum(beta * eps2) - 784 * eps2) <= 1e-9
    scales = m.adlm_feature_noise_scales(sensitivity=9800, epsilon=eps2, beta=beta)
    flat_r, flat_s = np.abs(rel).ravel(), scales.ravel()
    a, b = np.argmax(flat_r), np.argmin(flat_r)
    assert flat_r[a] > flat_r[b] and flat_s[a] < flat_s[b]  # more relevant -> less noise
    ilm = m.adaptive_budget_weights(np.full(10, 0.3), floor=1e-5)
    np.testing.assert_allclose(ilm, 1.0, rtol=1e-15)
    # Lemma 4: sum_h sum_j 2 eps_j / Delta_h0 = eps2 when Delta_h0 = 2 |h0| d.
    h0, d = 5, 784
    assert h0 * np.sum(2 * beta * eps2) / (2 * h0 * d) == pytest.approx(eps2, rel=1e-12)


def test_adlm_noise_scale_fixtures():
    beta = np.array([0.5, 1.0, 2.0])
    mnist = m.adlm_feature_noise_scales(sensitivity=9800, epsilon=0.075, beta=beta, batch_size=1800)
    np.testing.assert_allclose(mnist * beta, 72.5926, atol=1e-4)
    cifar = m.adlm_feature_noise_scales(sensitivity=5400, epsilon=1.5, beta=beta, batch_size=7200)
    np.testing.assert_allclose(cifar, 0.5 / beta, rtol=1e-14)


def test_stobatch_fixtures():
    assert m.stobatch_autoencoder_sensitivity(fan_in=25, num_neurons=14 * 14) == 4950
    assert m.stobatch_autoencoder_sensitivity(fan_in=3 * 16, num_neurons=14 * 14) == 9504
    assert m.stobatch_autoencoder_sensitivity(fan_in=3 * 49, num_neurons=32 * 32) == 150822
    for dr, batch, want in [(4950, 2499, 1.980792), (9504, 1851, 5.134522), (150822, 4500, 33.516)]:
        gx, g = m.stobatch_gammas(sensitivity=dr, batch_size=batch, first_layer_norm=2.0)
        assert gx == pytest.approx(want, abs=1e-6)
        assert g == pytest.approx(2 * dr / (batch * 2.0), rel=1e-15)
    bx, bh = m.stobatch_noise_scales(sensitivity=4950, epsilon1=0.5, batch_size=2499)
    assert bx == pytest.approx(4950 / (2499 * 0.5), rel=1e-15) and bh == 2 * bx


def test_stobatch_epsilon_split_round_trip():
    gx, g = 4950 / 2499, 3.7
    for total in [0.2, 1.0, 2.0]:
        e1 = m.stobatch_epsilon1(total_epsilon=total, epsilon2=0.1, gamma_x=gx, gamma=g)
        assert m.stobatch_total_epsilon(epsilon1=e1, epsilon2=0.1, gamma_x=gx, gamma=g) == \
            pytest.approx(total, rel=1e-14)
    with pytest.raises(ValueError, match="total_epsilon"):
        m.stobatch_epsilon1(total_epsilon=0.1, epsilon2=0.1, gamma_x=gx, gamma=g)


def test_budget_bad_inputs():
    with pytest.raises(ValueError, match="num_examples"):
        m.adlm_relevance_sensitivity(num_features=10, num_examples=0)
    with pytest.raises(ValueError, match="floor"):
        m.adaptive_budget_weights([1.0, 2.0], floor=0.0)
    with pytest.raises(ValueError, match="relevance"):
        m.adaptive_budget_weights([1.0, np.nan], floor=1e-5)
    with pytest.raises(ValueError, match="beta"):
        m.adlm_feature_noise_scales(sensitivity=1.0, epsilon=1.0, beta=[1.0, 0.0])
    with pytest.raises(ValueError, match="epsilon"):
        m.adlm_feature_noise_scales(sensitivity=1.0, epsilon=-1.0, beta=[1.0])
    with pytest.raises(ValueError, match="fan_in"):
        m.stobatch_autoencoder_sensitivity(fan_in=2.5, num_neurons=3)
    with pytest.raises(ValueError, match="first_layer_norm"):
        m.stobatch_gammas(sensitivity=1.0, batch_size=2, first_layer_norm=0.0)
    with pytest.raises(ValueError, match="epsilon1"):
        m.stobatch_noise_scales(sensitivity=1.0, epsilon1=float("nan"), batch_size=2)
