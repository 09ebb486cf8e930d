"""Tests of tfdp.papers.stobatch.budgets: StoBatch Lemma 2-3, Theorem 4 and App. P."""

import pytest

from tfdp.papers.stobatch import budgets


def test_stobatch_fixtures():
    assert budgets.stobatch_autoencoder_sensitivity(fan_in=25, num_neurons=14 * 14) == 4950
    assert budgets.stobatch_autoencoder_sensitivity(fan_in=3 * 16, num_neurons=14 * 14) == 9504
    assert budgets.stobatch_autoencoder_sensitivity(fan_in=3 * 49, num_neurons=32 * 32) == 150822
    for dr, batch, want in [(4950, 2499, 1.980792), (9504, 1851, 5.134522), (150822, 4500, 33.516)]:
        gx, g = budgets.stobatch_gammas(sensitivity=dr, batch_size=batch, first_layer_norm=2.0)
        assert gx == pytest.approx(want, abs=1e-6)
        assert g == pytest.approx(2 * dr / (batch * 2.0), rel=1e-15)
    bx, bh = budgets.stobatch_noise_scales(sensitivity=4950, epsilon1=0.5, batch_size=2499)
    assert bx == pytest.approx(4950 / (2499 * 0.5), rel=1e-15) and bh == 2 * bx


def test_stobatch_epsilon_split_round_trip():
    gx, g = 4950 / 2499, 3.7
    for total in [0.2, 1.0, 2.0]:
        e1 = budgets.stobatch_epsilon1(total_epsilon=total, epsilon2=0.1, gamma_x=gx, gamma=g)
        assert budgets.stobatch_total_epsilon(epsilon1=e1, epsilon2=0.1, gamma_x=gx,
                                              gamma=g) == pytest.approx(total, rel=1e-14)
    with pytest.raises(ValueError, match="total_epsilon"):
        budgets.stobatch_epsilon1(total_epsilon=0.1, epsilon2=0.1, gamma_x=gx, gamma=g)


def test_zero_sensitivity_raises():
    with pytest.raises(ValueError, match="sensitivity is 0"):
        budgets.stobatch_noise_scales(sensitivity=0.0, epsilon1=1.0, batch_size=10)


def test_budget_bad_inputs():
    with pytest.raises(ValueError, match="fan_in"):
        budgets.stobatch_autoencoder_sensitivity(fan_in=2.5, num_neurons=3)
    with pytest.raises(ValueError, match="first_layer_norm"):
        budgets.stobatch_gammas(sensitivity=1.0, batch_size=2, first_layer_norm=0.0)
    with pytest.raises(ValueError, match="epsilon1"):
        budgets.stobatch_noise_scales(sensitivity=1.0, epsilon1=float("nan"), batch_size=2)
