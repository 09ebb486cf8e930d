"""The in-graph certification statistics equal tfdp.certify's for every mechanism."""

import numpy as np
import pytest
import tensorflow as tf

from tfdp import certify, export

_CERTS = [
    {"mechanism": "pixeldp_laplace", "construction_bound": 0.1, "epsilon": 1.0},
    {"mechanism": "pixeldp_laplace", "construction_bound": 0.1, "epsilon": 1.0, "eps_cap": 0.5},
    {"mechanism": "pixeldp_gaussian", "construction_bound": 0.1, "epsilon": 1.0, "delta": 0.05},
    {"mechanism": "hgm", "construction_bound": 0.1, "epsilon": 1.0, "delta": 1e-5},
    {"mechanism": "hgm", "construction_bound": 0.3, "epsilon": 4.0, "delta": 1e-3,
     "eps_cap": 2.0},
    {"mechanism": "agm", "construction_bound": 0.1, "epsilon": 1.0, "delta": 1e-5},
    {"mechanism": "stobatch", "sensitivity": 2.0, "batch_size": 100, "epsilon1": 0.5,
     "d_cert": 784, "delta_rh": 30.0},
    {"mechanism": "stobatch", "sensitivity": 2.0, "batch_size": 100, "epsilon1": 0.5,
     "d_cert": 784, "delta_rh": 30.0, "delta_rx_mode": "mu_a", "psi": 2.0,
     "radius_divisor": 3.0, "eps_cap": 1.0},
    {"mechanism": "stobatch", "sensitivity": 2.0, "batch_size": 100, "epsilon1": 0.5,
     "d_cert": 784, "delta_rh": 30.0, "delta_rx_mode": "mu_train", "mu_train": 0.1,
     "radius_psi_correction": False, "psi": 2.0},
]


def _bounds(seed=0, b=64):
    rng = np.random.default_rng(seed)
    upper = rng.uniform(0.0, 0.5, b)
    lower = upper + rng.uniform(-0.1, 0.5, b)
    lower[:4] = [1.0, 0.999, 0.5, 0.3]
    upper[:4] = [0.0, 0.0, 0.5, 0.31]  # lower = upper, lower < upper: abstain
    return np.clip(lower, 0, 1), upper


@pytest.mark.parametrize("cert", _CERTS, ids=lambda c: c["mechanism"] + str(len(c)))
def test_radius_matches_tfdp_certify(cert):
    # The numpy AGM calibration bisects element by element in Python: fewer rows there.
    lower, upper = _bounds(b=12 if cert["mechanism"] == "agm" else 64)
    for size in (0.0, 0.05):
        want = certify.certified_radius(lower, upper, cert, attack_size=size)
        radius = tf.function(lambda lo, up, s: export.tf_certified_radius(lo, up, cert, s))
        got = radius(tf.constant(lower), tf.constant(upper),
                     tf.constant(size, tf.float64)).numpy()
        # float64 formulas in a different library: a few ulp apart (AGM: bisection to 1e-15).
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14)
        assert np.any(want > 0) and np.any(want == 0)


def test_clopper_pearson_matches_scipy():
    rng = np.random.default_rng(1)
    rows = []
    for n in (1, 10, 1000, 100000):
        for _ in range(6):
            p = rng.dirichlet(np.ones(10) * 0.3)
            rows.append(rng.multinomial(n, p))
    rows.append(np.array([0] * 9 + [100000]))
    counts = np.stack(rows)
    for alpha in (0.05, 1e-3):
        want_lo, want_up = certify.clopper_pearson_bounds(counts, alpha)
        got_lo, got_up = (t.numpy() for t in export.tf_clopper_pearson_bounds(
            tf.constant(counts, tf.int64), tf.constant(alpha, tf.float64)))
        np.testing.assert_allclose(got_lo, want_lo, rtol=1e-9, atol=1e-15)
        np.testing.assert_allclose(got_up, want_up, rtol=1e-9, atol=1e-15)


def test_hoeffding_and_bernstein_match():
    rng = np.random.default_rng(2)
    mean = rng.dirichlet(np.ones(5), size=8)
    var = rng.uniform(0, 0.05, size=(8, 5))
    want = certify.hoeffding_bounds(mean, 500, 0.05)
    got = export.tf_hoeffding_bounds(tf.constant(mean), tf.constant(500), tf.constant(0.05,
                                                                                    tf.float64))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-12)
    want = certify.empirical_bernstein_bounds(mean, var, 500, 0.05)
    got = export.tf_bernstein_bounds(tf.constant(mean), tf.constant(var), tf.constant(500),
                                     tf.constant(0.05, tf.float64))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-12)


def test_max_epsilon_matches():
    lower, upper = _bounds(3)
    for delta in (0.0, 1e-3, 0.2):
        np.testing.assert_allclose(
            export.tf_max_epsilon(tf.constant(lower), tf.constant(upper), delta).numpy(),
            certify.max_epsilon(lower, upper, delta), rtol=1e-12, atol=1e-15)
