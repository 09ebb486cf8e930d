"""Robustness radii of tfdp.certify against worked HGM and StoBatch fixtures."""

import math

import numpy as np
import pytest

from tfdp import certify
from tfdp.papers.stobatch import certificate as stobatch_certificate

# HGM Eq. 4 and 10 on the delta' grid: (E_lb, E_ub, G_HGM, G_GM with eps' <= 1)
HGM_TABLE = [(0.90, 0.02, 0.6327, 0.5238), (0.99, 0.0053, 0.8127, 0.5608),
             (0.70, 0.25, 0.1725, 0.1671), (0.60, 0.30, 0.1103, 0.1064)]


@pytest.mark.parametrize("lower,upper,g_hgm,g_gm", HGM_TABLE)
def test_g_factors_match_hgm_table(lower, upper, g_hgm, g_gm):
    # mu_max = (sigma_r / Delta_f) * G, so noise_to_sensitivity = 1 returns G.
    assert float(certify.gaussian_radius(lower, upper, 1.0, "hgm")) == pytest.approx(
        g_hgm, abs=1e-4)
    assert float(certify.gaussian_radius(lower, upper, 1.0, "gm", eps_cap=1.0)) == \
        pytest.approx(g_gm, abs=1e-4)


def test_hgm_mu_max_fixtures():
    # HGM Eq. 10: L = 0.2, delta_r = 1e-5, (E_lb, E_ub) = (0.90, 0.02)
    base = {"mechanism": "hgm", "construction_bound": 0.2, "delta": 1e-5}
    for eps_r, mu in [(1.0, 0.6143), (4.0, 0.1626), (8.0, 0.0867)]:
        got = certify.certified_radius(0.90, 0.02, dict(base, epsilon=eps_r))
        assert float(got) == pytest.approx(mu, abs=1e-4)
    pixeldp = dict(base, mechanism="pixeldp_gaussian", epsilon=1.0)
    assert float(certify.certified_radius(0.90, 0.02, pixeldp)) == pytest.approx(0.5075,
                                                                                abs=1e-4)


@pytest.mark.parametrize("mechanism", ["pixeldp_gaussian", "hgm", "agm"])
def test_sanity_identity_radius_equals_construction_bound(mechanism):
    # HGM Eq. 10: mu(eps_r, delta_r) = L. Restrict the search to delta' = delta_r and
    # eps' <= eps_r with bounds that pass Eq. 4 far beyond eps_r.
    eps_r, delta_r, bound_l = 0.5, 1e-3, 0.3
    cert = {"mechanism": mechanism, "construction_bound": bound_l, "epsilon": eps_r,
            "delta": delta_r}
    ratio = {"pixeldp_gaussian": bound_l * math.sqrt(2 * math.log(1.25 / delta_r)) / eps_r,
             "hgm": None, "agm": None}[mechanism]
    mult = {"pixeldp_gaussian": "gm", "hgm": "hgm", "agm": "agm"}[mechanism]
    if ratio is None:  # sigma / Delta from the mechanism's own multiplier at (eps_r, delta_r)
        fn = certify._hgm_multiplier if mechanism == "hgm" else certify._agm_multiplier
        ratio = bound_l * float(fn(eps_r, delta_r))
    r = certify.gaussian_radius(0.999, 1e-4, ratio, mult, eps_cap=eps_r, delta_grid=[delta_r])
    assert float(r) == pytest.approx(bound_l, rel=1e-6)


def test_agm_multiplier_solves_balle_wang_condition():
    # Balle & Wang 2018: sigma_AGM(eps, 1e-5, 1) = 3.7306 (eps=1), 0.4999 (eps=10)
    assert float(certify._agm_multiplier(1.0, 1e-5)) == pytest.approx(3.7306, abs=1e-4)
    assert float(certify._agm_multiplier(10.0, 1e-5)) == pytest.approx(0.4999, abs=1e-4)
    assert float(certify._hgm_multiplier(1.0, 1e-5)) == pytest.approx(4.8542, abs=1e-4)


def test_laplace_radius_closed_form():
    # PixelDP code release: size = L ln(p_lb / p_ub) / (2 eps)
    cert = {"mechanism": "pixeldp_laplace", "construction_bound": 0.1, "epsilon": 1.0}
    r = certify.certified_radius(np.array([0.8, 0.3]), np.array([0.05, 0.4]), cert)
    np.testing.assert_allclose(r, [0.1 * math.log(0.8 / 0.05) / 2.0, 0.0], rtol=1e-12)


# StoBatch Eq. 13, worked cases (eps_r = 1, s1 = 0.5, Delta_r^x = 0.05 d_cert,
# Delta_r^h = s1 beta): (Delta_R, m, eps1, d_cert, beta, radius)
STOBATCH_CASES = [
    (4950, 2499, None, 784, 196, 0.366303),  # MNIST eps = 0.2, eps1 from the budget rule
    (4950, 2499, 0.551788, 784, 196, 0.040700),  # MNIST eps = 1
    (9504, 1851, 0.804214, 784, 196, 0.072387),  # CIFAR-10 eps = 2
    (150822, 4500, 3.856181, 4096, 1024, 0.018862),  # Tiny ImageNet eps = 5
]


@pytest.mark.parametrize("delta_big_r,m,eps1,d_cert,beta,expected", STOBATCH_CASES)
def test_stobatch_radius_fixtures(delta_big_r, m, eps1, d_cert, beta, expected):
    if eps1 is None:
        # StoBatch MNIST: eps1 = (eps - 0.1) / (1 + 1/gamma + 1/gamma_x), eps = 0.2
        eps1 = 0.1 / (1 + 1 / 7.923169 + 1 / (delta_big_r / m))
    lower, upper = 0.9, 0.9 * math.exp(-2.0)  # eps_r* = 1
    kwargs = dict(sensitivity=delta_big_r, batch_size=m, epsilon1=eps1, d_cert=d_cert,
                  delta_rh=0.5 * beta, delta_rx_mode="mu_train", mu_train=0.05,
                  radius_psi_correction=False)
    r = float(stobatch_certificate.stobatch_radius(lower, upper, **kwargs))
    assert r == pytest.approx(expected, abs=2e-6)
    # Eq. 13 equals kappa phi / (kappa + phi) from their separate definitions (Corollary 1).
    b_x = delta_big_r / (m * eps1)
    kappa = b_x / (0.05 * d_cert)
    phi = 2 * b_x / (0.5 * beta)
    assert r == pytest.approx(kappa * phi / (kappa + phi), rel=1e-12)


def test_stobatch_radius_options_and_monotonicity():
    base = dict(sensitivity=4950, batch_size=2499, epsilon1=0.5, d_cert=784, delta_rh=98.0)
    r1 = float(stobatch_certificate.stobatch_radius(0.9, 0.1, psi=2.0, radius_psi_correction=False, **base))
    r2 = float(stobatch_certificate.stobatch_radius(0.9, 0.05, psi=2.0, radius_psi_correction=False, **base))
    assert r2 > r1 > 0  # grows with eps_r*
    r_eps = float(stobatch_certificate.stobatch_radius(0.9, 0.1, psi=2.0, radius_psi_correction=False,
                                          **dict(base, epsilon1=1.0)))
    assert r_eps < r1  # shrinks as eps1 grows
    r_psi = float(stobatch_certificate.stobatch_radius(0.9, 0.1, psi=2.0, **base))
    assert r_psi == pytest.approx(r1 / 2.0, rel=1e-12)  # psi correction (docs/stobatch.md)
    r_div = float(stobatch_certificate.stobatch_radius(0.9, 0.1, psi=2.0, radius_psi_correction=False,
                                          radius_divisor=0.005, **base))
    assert r_div == pytest.approx(r1 * 200, rel=1e-12)  # the code release's divisor
    r_mu = float(stobatch_certificate.stobatch_radius(0.9, 0.1, delta_rx_mode="mu_a", attack_size=0.05,
                                         radius_psi_correction=False, **base))
    r_train = float(stobatch_certificate.stobatch_radius(0.9, 0.1, delta_rx_mode="mu_train",
                                            radius_psi_correction=False, **base))
    assert r_mu == pytest.approx(r_train, rel=1e-12)
    assert float(stobatch_certificate.stobatch_radius(0.3, 0.3, **base)) == 0.0  # abstain
    with pytest.raises(ValueError, match="attack_size"):
        stobatch_certificate.stobatch_radius(0.9, 0.1, delta_rx_mode="mu_a", **base)


def test_is_robust_and_abstention():
    r = np.array([0.0, 0.1, 0.3])
    np.testing.assert_array_equal(certify.is_robust(r, 0.1), [False, True, True])
    np.testing.assert_array_equal(certify.is_robust(r, 0.0), [False, True, True])
    with pytest.raises(ValueError, match="attack_size"):
        certify.is_robust(r, -0.1)
    cert = {"mechanism": "hgm", "construction_bound": 0.2, "epsilon": 1.0, "delta": 1e-5}
    assert float(certify.certified_radius(0.3, 0.35, cert)) == 0.0


@pytest.mark.parametrize("bad,match", [
    ({"mechanism": "foo"}, "mechanism"),
    ({"mechanism": "hgm", "construction_bound": 0.1, "epsilon": 1.0}, "delta"),
    ({"mechanism": "hgm", "construction_bound": 0.1, "epsilon": 1.0, "delta": 1.5}, "delta"),
    ({"mechanism": "pixeldp_gaussian", "construction_bound": 0.1, "epsilon": 2.0,
      "delta": 0.05}, "epsilon"),
    ({"mechanism": "pixeldp_laplace", "construction_bound": -1, "epsilon": 1.0},
     "construction_bound"),
    ({"mechanism": "stobatch", "sensitivity": 1, "batch_size": 1, "epsilon1": 1,
      "d_cert": 1}, "delta_rh"),
    ({"mechanism": "hgm", "construction_bound": 0.1, "epsilon": 1.0, "delta": 0.05,
      "alpha": 1.0}, "alpha"),
])
def test_validate_certification_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        certify.validate_certification(bad)
