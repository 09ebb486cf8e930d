"""Tests of tfdp.papers.stobatch.losses: StoBatch's Taylor losses, objective, sensitivities."""

import math

import numpy as np
import pytest

from tfdp.papers.stobatch import losses
from tests.losses import reference


def test_sensitivity_fixtures():
    # StoBatch Lemma 2, 4 (Delta_R, Delta_L2).
    assert losses.stobatch_delta_r(fan_in=25, beta=196) == 4950.0
    assert losses.stobatch_delta_r(fan_in=48, beta=196) == 9504.0
    assert losses.stobatch_delta_r(fan_in=147, beta=1024) == 150822.0
    assert losses.stobatch_delta_l2(hidden_units=256) == 512.0
    assert losses.stobatch_delta_l2(hidden_units=256, output_bias=True) == 514.0
    # StoBatch gamma_x = Delta_R / m (Lemma 3).
    assert abs(4950 / 2499 - 1.980792) < 1e-6 and abs(9504 / 1851 - 5.134522) < 1e-6


def test_stobatch_taylor_algebra_and_error():
    # StoBatch Taylor algebra (Eq. 9).
    z = np.linspace(-0.5, 0.5, 1001)
    np.testing.assert_allclose(np.maximum(z, 0) - np.abs(z) / 2, z / 2, atol=1e-15)
    rng = np.random.default_rng(8)
    zb = rng.uniform(-0.5, 0.5, size=(200, 10))
    y = reference.onehot(rng.integers(0, 10, 200))
    got = losses.stobatch_taylor_loss(zb, y).numpy()
    closed = 10 * math.log(2) + np.sum(zb / 2 - zb * y + zb**2 / 8, axis=1)
    np.testing.assert_allclose(got, closed, rtol=1e-12)
    exact = np.sum(reference.exact_ce(zb, y), axis=1)
    assert np.all(np.abs(exact - got) <= np.sum(np.abs(zb) ** 4 / 192, axis=1) + 1e-15)


def test_stobatch_mixed_objective_weight():
    # StoBatch Eq. 9: adversarial batch == benign batch -> benign-only loss + noise
    # term, for any xi.
    rng = np.random.default_rng(10)
    m = 12
    z = rng.normal(size=(m, 10))
    y = reference.onehot(rng.integers(0, 10, m))
    benign = float(losses.stobatch_taylor_loss(z, y, reduction="sum")) / m
    for xi in (0.0, 1.0, 1.5, 7.0):
        got = float(losses.stobatch_adversarial_objective(z, y, z, y, xi=xi, m=m,
                                                          noise_term=0.25))
        assert math.isclose(got, benign + 0.25, rel_tol=1e-12)


@pytest.mark.parametrize("call,name", [
    (lambda: losses.stobatch_delta_r(fan_in=-1, beta=3), "fan_in"),
    (lambda: losses.stobatch_delta_r(fan_in=1, beta=True), "beta"),
    (lambda: losses.stobatch_delta_l2(hidden_units=0), "hidden_units"),
    (lambda: losses.stobatch_adversarial_objective(np.ones((1, 2)), np.ones((1, 2)),
                                                   np.ones((1, 2)), np.ones((1, 2)),
                                                   xi=-1.0, m=1), "xi"),
    (lambda: losses.stobatch_adversarial_objective(np.ones((1, 2)), np.ones((1, 2)),
                                                   np.ones((1, 2)), np.ones((1, 2)),
                                                   xi=1.0, m=0), "m"),
])
def test_bad_arguments(call, name):
    with pytest.raises(ValueError, match=name):
        call()
