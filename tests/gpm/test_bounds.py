"""GPM privacy bounds and oracles (GPM Lemma 4.1, Thm 4.2, 4.4, Prop 4.3, Figure 4)."""

import math

import numpy as np
import pytest
from scipy import special

from tfdp.papers.gpm import pancake

pytestmark = pytest.mark.filterwarnings("ignore::tfdp.papers.gpm.pancake.GPMResearchWarning")


@pytest.mark.parametrize("beta,expected", [(1e-5, 4.90874e8), (1e-4, 4.90875e6),
                                           (1e-3, 4.90934e4), (1e-2, 494.545),
                                           (1e-1, 6.35865)])
def test_eps_lower_reference_table(beta, expected):
    # eps_low(t = 0.25) (GPM Thm 4.2, gamma = 32, delta = 1e-10), to 6 significant digits.
    assert pancake.eps_lower(0.25, beta, 32.0, 1e-10) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("beta", [1e-5, 3e-5, 1e-4])
def test_eps_lower_scaling_and_gamma_independence(beta):
    low = pancake.eps_lower(0.25, beta, 1e2, 1e-10)
    assert low == pytest.approx(0.0490874 / beta ** 2, rel=1e-3)
    assert abs(pancake.eps_lower(0.25, beta, 1e4, 1e-10) / low - 1.0) < 1e-6


def test_eps_lower_asymptotic_form():
    beta, gamma, t = 1e-3, 100.0, 0.25
    x = (gamma * t / beta) * math.sqrt(math.pi / (2 * (beta ** 2 + gamma ** 2)))
    approx = x * x / 2 + math.log(x * math.sqrt(2 * math.pi)) - math.log(2)
    assert pancake.eps_lower(t, beta, gamma, 1e-10) == pytest.approx(approx, rel=1e-6)


def test_figure4_reference_values():
    for sigma, a, b in [(0.25, 33.4454, 13.1262), (1, 6.8613, 1.7816), (4, 1.6216, 0.3516),
                        (16, 0.3995, 0.0821), (64, 0.0995, 0.0201)]:
        assert pancake.gm_eps(sigma, 1e-10) == pytest.approx(a, abs=1e-4)
        assert pancake.gm_eps(sigma, 1e-1) == pytest.approx(b, abs=1e-4)
    for sigma, up in [(0.25, 8e10), (1, 5.0e9), (4, 3.13e8), (16, 1.96e7), (64, 1.23e6)]:
        assert pancake.eps_upper(1e-10, sigma, 1e-3, 1e2) == pytest.approx(up, rel=0.01)
    assert pancake.eps_upper(1e-10, 0.25, 1e-5, 1e4) == pytest.approx(8e18, rel=0.01)
    assert pancake.eps_upper(1e-10, 64, 1e-5, 1e4) == pytest.approx(1.22e14, rel=0.01)


@pytest.mark.parametrize("sigma", [0.25, 1.0, 16.0])
@pytest.mark.parametrize("beta,gamma", [(1e-3, 1e2), (1e-5, 1e4), (0.2, 3.0)])
@pytest.mark.parametrize("delta", [1e-12, 1e-5, 0.1])
def test_upper_vs_gm_and_lower(sigma, beta, gamma, delta):
    up = pancake.eps_upper(delta, sigma, beta, gamma)
    assert up >= pancake.gm_eps(sigma, delta)
    s = pancake.spacing(sigma, beta, gamma)
    if 1.0 < s / 2:  # realisable t = Delta / S when Delta < S/2 (T = 0)
        assert pancake.eps_lower(1.0 / s, beta, gamma, delta) <= up


@pytest.mark.parametrize("beta", [1e-3, 0.05, 0.2])
@pytest.mark.parametrize("gamma", [3.0, 32.0])
@pytest.mark.parametrize("t", [0.05, 0.25, -0.4])
def test_lemma41(beta, gamma, t):
    p_in, p_shift = pancake.lemma41_probabilities(t, beta, gamma)
    x = (gamma * abs(t) / beta) * math.sqrt(math.pi / (2 * (beta ** 2 + gamma ** 2)))
    bound = 2 * special.ndtr(-x)
    assert p_in >= 1 - bound - 1e-12
    assert p_shift <= bound + 1e-12


def test_lemma41_against_component_sum():
    # Brute-force sum over mixture components and intervals of the 1-D hCLWE (Lemma 2.6).
    beta, gamma, t = 0.2, 3.0, 0.3
    b2g2 = beta ** 2 + gamma ** 2
    spacing, std = gamma / b2g2, math.sqrt(beta ** 2 / b2g2 / (2 * math.pi))
    zs = np.arange(-15, 16)
    a = np.exp(-math.pi * zs ** 2 / b2g2)
    a /= a.sum()
    lo, hi = (zs - abs(t) / 2) * spacing, (zs + abs(t) / 2) * spacing
    shift = (2 + t) * spacing
    p_in = sum(ak * np.sum(special.ndtr((hi - mu) / std) - special.ndtr((lo - mu) / std))
               for ak, mu in zip(a, zs * spacing))
    p_sh = sum(ak * np.sum(special.ndtr((hi - mu) / std) - special.ndtr((lo - mu) / std))
               for ak, mu in zip(a, zs * spacing + shift))
    got = pancake.lemma41_probabilities(t, beta, gamma)
    assert got[0] == pytest.approx(p_in, abs=1e-10)
    assert got[1] == pytest.approx(p_sh, abs=1e-10)


def test_numerical_privacy_curve():
    # Numerical privacy curve: beta = 0.2, gamma = 3, sigma = 1, Delta = 1, dq parallel to w.
    sigma, beta, gamma, delta0 = 1.0, 0.2, 3.0, 1e-3
    s = pancake.spacing(sigma, beta, gamma)
    big_t, t = math.floor(1.0 / s + 0.5), 1.0 / s - math.floor(1.0 / s + 0.5)
    assert big_t == 1
    up = pancake.eps_upper(delta0, sigma, beta, gamma)
    low = pancake.eps_lower(t, beta, gamma, delta0)
    d_up, d_low = pancake.hockey_stick_delta([up, 0.95 * low], sigma, beta, gamma, 1.0)
    assert d_up <= delta0
    assert d_low > delta0
    # Sanity of the integrator: delta(0) is the total variation distance, in (0, 1).
    tv = pancake.hockey_stick_delta(0.0, sigma, beta, gamma, 1.0)[0]
    assert 0.5 < tv < 1.0


def test_rdp_bounds():
    sigma, beta, gamma = 2.0, 1e-2, 16.0
    w = np.zeros(64)
    w[0] = 1.0
    dq = np.zeros(64)
    dq[0] = 1.0
    # dq parallel to w reaches the worst case: M^2 = (1 + gamma^2/beta^2)/sigma^2.
    assert pancake.pair_rdp(2.0, dq, w, sigma, beta, gamma) == pytest.approx(
        pancake.rdp_upper(2.0, sigma, beta, gamma), rel=1e-12)
    dq_orth = np.zeros(64)
    dq_orth[1] = 1.0
    assert pancake.pair_rdp(2.0, dq_orth, w, sigma, beta, gamma) == pytest.approx(
        2.0 / (2 * sigma ** 2), rel=1e-12)
    with pytest.raises(ValueError, match="alpha"):
        pancake.rdp_upper(1.0, sigma, beta, gamma)


def test_key_holder_view():
    sigma = pancake.gm_sigma(0.125, 1e-10)
    view = pancake.key_holder_view(sigma, 1e-10, 1e-5, 2 * math.sqrt(256))
    assert view["claimed_eps"] == pytest.approx(0.125, rel=1e-10)
    assert view["eps_lower"] > 4e8 and view["eps_upper"] > view["eps_lower"]
    assert "key holder" in view["statement"]


def test_averaged_oracle_mini_dp_hist_targets():
    for eps, beta, target in [(0.125, 1e-2, 0.850), (0.125, 1e-1, 0.562), (1.0, 1e-2, 0.980),
                              (1.0, 1e-1, 0.818)]:
        sigma = pancake.gm_sigma(eps, 1e-10)
        assert pancake.success_averaged(1.0, sigma, beta, 32.0, 256) == pytest.approx(
            target, abs=1e-3)
        assert pancake.success_averaged(1.0, sigma, beta, 32.0, 256, exact=True) == \
            pytest.approx(target, abs=2e-3)


def test_bound_argument_validation():
    with pytest.raises(ValueError, match="delta"):
        pancake.eps_lower(0.25, 1e-3, 32.0, 0.6)
    with pytest.raises(ValueError, match="gamma"):
        pancake.eps_lower(0.25, 1e-3, 0.5, 1e-5)
    with pytest.raises(ValueError, match="t must"):
        pancake.success_exact(0.7, 1e-3, 32.0)
    with pytest.raises(ValueError, match="beta"):
        pancake.eps_upper(1e-5, 1.0, 0.0, 32.0)


def test_key_holder_noise_multiplier():
    assert pancake.key_holder_noise_multiplier(50.97, 1e-5, 12483.0) == pytest.approx(
        4.083e-8, rel=1e-3)
    with pytest.raises(ValueError, match="noise_multiplier"):
        pancake.key_holder_noise_multiplier(0.0, 1e-5, 10.0)
