"""The certificate registry: numpy vs TensorFlow radii, config round trip, soundness flags,
and randomized smoothing's radius against closed forms and an independent scipy path."""

import math

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from tfdp import certify
from tfdp.certify import registry

# One or more configs per registered certificate: a new certificate without an entry here
# fails test_every_certificate_has_fixtures.
FIXTURES = {
    "pixeldp_laplace": [{"construction_bound": 0.1, "epsilon": 1.0},
                        {"construction_bound": 0.1, "epsilon": 1.0, "eps_cap": 0.5}],
    "pixeldp_gaussian": [{"construction_bound": 0.1, "epsilon": 1.0, "delta": 0.05}],
    "hgm": [{"construction_bound": 0.1, "epsilon": 1.0, "delta": 1e-5},
            {"construction_bound": 0.3, "epsilon": 4.0, "delta": 1e-3, "eps_cap": 2.0}],
    "agm": [{"construction_bound": 0.1, "epsilon": 1.0, "delta": 1e-5}],
    "stobatch": [{"sensitivity": 2.0, "batch_size": 100, "epsilon1": 0.5, "d_cert": 784,
                  "delta_rh": 30.0},
                 {"sensitivity": 2.0, "batch_size": 100, "epsilon1": 0.5, "d_cert": 784,
                  "delta_rh": 30.0, "delta_rx_mode": "mu_a", "psi": 2.0,
                  "radius_divisor": 0.005}],
    "gaussian_smoothing": [{"sigma": 0.5}, {"sigma": 0.25, "lipschitz": 2.0,
                                            "selection_draws": 10}],
}


def _bounds(b=40, seed=0):
    rng = np.random.default_rng(seed)
    upper = rng.uniform(0.0, 0.5, b)
    lower = np.clip(upper + rng.uniform(-0.1, 0.5, b), 0, 1)
    lower[:5] = [1.0, 0.999, 0.5, 0.3, 0.5000001]
    upper[:5] = [0.0, 0.0, 0.5, 0.31, 0.4999999]
    return lower, upper


def test_every_certificate_has_fixtures():
    assert set(FIXTURES) == set(registry.names())
    for name in FIXTURES:  # a paper's certificate is imported on first lookup
        assert registry.lookup(name).name == name


@pytest.mark.parametrize("name,cfg", [(n, c) for n, cs in FIXTURES.items() for c in cs],
                         ids=lambda v: v if isinstance(v, str) else str(len(v)))
def test_numpy_and_tensorflow_radii_agree(name, cfg):
    cert = registry.lookup(name)(cfg)
    lower, upper = _bounds(b=10 if name == "agm" else 40)
    for size in (0.0, 0.05):
        want = cert.radius(lower, upper, attack_size=size)
        got = tf.function(lambda lo, up, s: cert.radius_tf(lo, up, s))(
            tf.constant(lower), tf.constant(upper), tf.constant(size, tf.float64)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
        assert np.any(want > 0) and np.any(want == 0)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_config_round_trip(name):
    cert = registry.lookup(name)(FIXTURES[name][0])
    cfg = cert.to_config()
    assert cfg["name"] == name and cfg["norm"] in registry.NORMS
    again = registry.from_config(cfg)
    assert type(again) is type(cert) and again.to_config() == cfg
    # "sound" in a file is never trusted: it is derived again.
    forged = dict(cfg, sound=True)
    assert registry.from_config(forged).sound == cert.sound


def test_soundness_flags():
    base = {"mechanism": "hgm", "construction_bound": 0.1, "epsilon": 1.0, "delta": 1e-5}
    assert not certify.from_config(base).sound  # nothing says the sensitivity is proven
    assert certify.from_config(dict(base, sensitivity_sound=True)).sound
    claim = certify.from_config(dict(base, sensitivity_mode="code_spectral",
                                     sensitivity_sound=False))
    assert not claim.sound and "code_spectral" in claim.unsound_reason
    assert claim.accuracy_key() == "claimed_certified_accuracy"
    sto = dict(FIXTURES["stobatch"][0], mechanism="stobatch")
    assert certify.from_config(sto).sound
    assert not certify.from_config(dict(sto, radius_divisor=0.005)).sound
    assert not certify.from_config(dict(sto, delta_rx_mode="mu_a")).sound
    smooth = certify.from_config({"mechanism": "gaussian_smoothing", "sigma": 0.5})
    assert smooth.sound and smooth.norm == "l2" and smooth.selection_draws == 100


def test_bad_smoothing_config_names_the_flag():
    with pytest.raises(ValueError, match="smoothing_sigma"):
        certify.from_config({"mechanism": "gaussian_smoothing", "sigma": 0.0})
    with pytest.raises(ValueError, match="smoothing_sigma"):
        certify.from_config({"mechanism": "gaussian_smoothing", "sigma": -1.0})
    with pytest.raises(ValueError, match="selection_draws"):
        certify.from_config({"mechanism": "gaussian_smoothing", "sigma": 0.5,
                             "selection_draws": 0})
    with pytest.raises(ValueError, match="norm"):
        certify.from_config({"mechanism": "gaussian_smoothing", "sigma": 0.5,
                             "norm": "linf"})


# Cohen et al. 2019 from counts: (n, count of the selected class, alpha, sigma).
COUNT_TABLE = [(1000, 1000, 0.001, 0.5), (1000, 990, 0.001, 0.5), (1000, 800, 0.001, 0.25),
               (1000, 520, 0.001, 0.5), (1000, 500, 0.05, 0.5), (1000, 300, 0.05, 1.0),
               (100, 100, 0.05, 1.0), (100, 0, 0.05, 1.0), (10000, 9000, 1e-3, 0.12),
               (50, 49, 0.01, 0.5)]


def _independent_radius(n, k, alpha, sigma, lipschitz=1.0):
    """Cohen's CERTIFY by scipy's exact binomial interval (a different code path)."""
    if k == 0:
        p_lower = 0.0
    else:  # two-sided exact interval at 1 - 2 alpha = one-sided lower bound at alpha
        p_lower = scipy.stats.binomtest(k, n).proportion_ci(
            confidence_level=1 - 2 * alpha, method="exact").low
    return sigma * scipy.stats.norm.ppf(p_lower) / lipschitz if p_lower > 0.5 else 0.0


@pytest.mark.parametrize("n,k,alpha,sigma", COUNT_TABLE)
def test_smoothing_radius_matches_independent_scipy(n, k, alpha, sigma):
    cert = certify.from_config({"mechanism": "gaussian_smoothing", "sigma": sigma})
    counts = np.array([[k, n - k, 0]])
    sel = certify.MonteCarloResult(np.array([[5, 1, 0]]), np.zeros((1, 3)), np.zeros((1, 3)),
                                   6)
    est = certify.MonteCarloResult(counts, counts / n, np.zeros((1, 3)), n)
    pred, radius = certify.certify(est, cert, alpha=alpha, selection=sel)
    assert pred[0] == 0
    assert radius[0] == pytest.approx(_independent_radius(n, k, alpha, sigma), rel=1e-9,
                                      abs=1e-12)


def test_smoothing_closed_forms():
    # k = n: the Clopper-Pearson lower bound is alpha^(1/n) exactly.
    for n, alpha, sigma in ((1000, 0.001, 0.5), (100, 0.05, 0.25)):
        lower = certify.smoothing_lower_bound(n, n, alpha)
        assert lower == pytest.approx(alpha ** (1.0 / n), rel=1e-12)
        cert = certify.from_config({"mechanism": "gaussian_smoothing", "sigma": sigma})
        want = sigma * scipy.stats.norm.ppf(alpha ** (1.0 / n))
        assert cert.radius(lower)[()] == pytest.approx(want, rel=1e-12)
    # n = 1000, all draws agree, alpha = 0.001, sigma = 0.5: radius 1.2316 (tables: Q(2.46) = 0.006947, Q(2.47) = 0.006756).
    cert = certify.from_config({"mechanism": "gaussian_smoothing", "sigma": 0.5})
    assert float(cert.radius(0.001 ** 0.001)) == pytest.approx(
        0.5 * 2.4633, rel=1e-4)
    # The lower bound at 1/2 or below abstains; L divides the radius.
    assert float(cert.radius(0.5)) == 0.0 and float(cert.radius(0.3)) == 0.0
    half = certify.from_config({"mechanism": "gaussian_smoothing", "sigma": 0.5,
                                "lipschitz": 2.0})
    assert float(half.radius(0.9)) == pytest.approx(0.5 * scipy.stats.norm.ppf(0.9) / 2.0)


def test_smoothing_predicts_from_the_selection_draws():
    cert = certify.from_config({"mechanism": "gaussian_smoothing", "sigma": 0.5})
    est = certify.MonteCarloResult(np.array([[900, 100]]), np.zeros((1, 2)), np.zeros((1, 2)),
                                   1000)
    sel = certify.MonteCarloResult(np.array([[10, 90]]), np.zeros((1, 2)), np.zeros((1, 2)),
                                   100)
    pred, radius = certify.certify(est, cert, alpha=0.001, selection=sel)
    # The selection picked class 1, which has 100 of the 1000 estimation draws: abstain.
    assert pred[0] == 1 and radius[0] == 0.0
    with pytest.raises(ValueError, match="selection"):
        certify.certify(est, cert, alpha=0.001)
    assert math.isfinite(float(cert.radius(0.999999)))
