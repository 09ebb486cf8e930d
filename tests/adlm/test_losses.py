"""Tests of tfdp.papers.adlm.losses: AdLM's Taylor loss, FM modes and sensitivities."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tfdp.papers.adlm import losses
from tests.losses import reference


# ----------------------------------------------------------------------------- sensitivities


def test_sensitivity_fixtures():
    # AdLM Lemma 5 (Delta_F).
    assert losses.adlm_delta_f(num_classes=10, hidden_units=25) == 1812.5
    assert losses.adlm_delta_f(num_classes=10, hidden_units=30) == 2550.0
    assert losses.adlm_delta_f(num_classes=10, hidden_units=25, output_bias=True) == \
        10 * (26 + 26**2 / 4)
    # AdLM noise scales, MNIST code-release configuration.
    assert math.isclose(1812.5 / 0.15, 12083.333333, rel_tol=1e-9)
    assert math.isclose(losses.adlm_delta_f(num_classes=10, hidden_units=25) / (0.15 * 1800),
                        6.71296, abs_tol=1e-5)
    assert math.isclose(losses.adlm_delta_f(num_classes=10, hidden_units=30) / (0.75 * 7200),
                        0.472222, abs_tol=1e-6)


def test_lemma5_delta_f_bound_empirical():
    # AdLM Lemma 5, empirically: per-record coefficient L1 change <= M(|h| + |h|^2/4) over 10,000
    # random trials in [0,1] and [-1,1], and at the corners.
    rng = np.random.default_rng(0)
    m, hk = 10, 25
    bound = losses.adlm_delta_f(num_classes=m, hidden_units=hk)

    def change(h, hp, y, yp):
        lin = np.sum(np.abs((0.5 - y)[:, None] * h[None, :] - (0.5 - yp)[:, None] * hp[None, :]))
        quad = m * np.sum(np.abs(np.outer(h, h) - np.outer(hp, hp))) / 8.0
        return lin + quad

    worst = 0.0
    for low in (0.0, -1.0):
        h = rng.uniform(low, 1.0, size=(5000, hk))
        hp = rng.uniform(low, 1.0, size=(5000, hk))
        ys = reference.onehot(rng.integers(0, m, 5000), m)
        yps = reference.onehot(rng.integers(0, m, 5000), m)
        for i in range(5000):
            worst = max(worst, change(h[i], hp[i], ys[i], yps[i]))
    corners = change(np.ones(hk), np.zeros(hk), reference.onehot(0, m), reference.onehot(1, m))
    assert worst <= bound and corners <= bound
    assert corners > 0.3 * bound  # the bound is of the right order, not vacuous


# ----------------------------------------------------------------------------- Taylor loss


def test_taylor_coefficients_by_autodiff_at_zero():
    # AdLM Eq. 25: derivatives of the exact loss at z = 0 give log 2, 1/2 - y, 1/8.
    for y in (0.0, 1.0):
        z = tf.Variable(0.0, dtype=tf.float64)
        with tf.GradientTape() as t2:
            with tf.GradientTape() as t1:
                f = y * tf.math.softplus(-z) + (1 - y) * tf.math.softplus(z)
            g = t1.gradient(f, z)
        hess = t2.gradient(g, z)
        phi0, phi1, phi2 = losses.adlm_taylor_coefficients([[y, 1 - y]])
        assert math.isclose(float(f), phi0[0, 0], rel_tol=1e-15)
        assert math.isclose(float(g), phi1[0, 0], rel_tol=1e-15)
        assert math.isclose(float(hess) / 2, phi2[0, 0], rel_tol=1e-15)


def test_taylor_truncation_error_and_double_sum():
    z = np.linspace(-1, 1, 2001)
    zz = np.linspace(-3, 3, 6001)
    for y in (0.0, 1.0):
        yv = np.full((z.size, 1), y)
        approx = losses.adlm_taylor_loss(z[:, None], yv, reduction="none").numpy()
        assert np.max(np.abs(reference.exact_ce(z, y) - approx)) <= 0.00489
        approx3 = losses.adlm_taylor_loss(zz[:, None], np.full((zz.size, 1), y),
                                          reduction="none").numpy()
        err3 = np.max(np.abs(reference.exact_ce(zz, y) - approx3))
        assert err3 <= 0.2697 and err3 > 0.26
        # Closed form equals the q/R double sum of Eq. 25 with f1 = y log(1+e^-z),
        # f2 = (1-y) log(1+e^z): f(0) = log2 y, (1-y) log2; f'(0) = -y/2, (1-y)/2;
        # f''(0)/2 = y/8, (1-y)/8.
        double_sum = sum(c0 + c1 * z + c2 * z**2 for c0, c1, c2 in
                         [(y * math.log(2), -y / 2, y / 8),
                          ((1 - y) * math.log(2), (1 - y) / 2, (1 - y) / 8)])
        np.testing.assert_allclose(approx, double_sum, rtol=1e-12)


def test_lemma7_constant_and_identity():
    e = math.e
    assert abs(losses.adlm_taylor_error_bound(1) - 0.3146623778) < 1e-10
    assert abs(losses.adlm_taylor_error_bound(10) - 3.146624) < 1e-6
    lhs = 4 * e / (1 + e) ** 3 + (e * (e - 1) - (1 - e) / e) / (1 + e) ** 3
    assert math.isclose(lhs, (e**2 + 2 * e - 1) / (e * (1 + e) ** 2), rel_tol=1e-14)


def test_taylor_loss_reductions_and_coefficient_override():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(6, 10))
    y = reference.onehot(rng.integers(0, 10, 6))
    per = losses.adlm_taylor_loss(z, y, reduction="none").numpy()
    expected = np.sum(math.log(2) + (0.5 - y) * z + z**2 / 8, axis=1)
    np.testing.assert_allclose(per, expected, rtol=1e-12)
    assert math.isclose(float(losses.adlm_taylor_loss(z, y)), expected.mean(), rel_tol=1e-12)
    assert math.isclose(float(losses.adlm_taylor_loss(z, y, reduction="sum")), expected.sum(),
                        rel_tol=1e-12)
    phi1 = rng.normal(size=(6, 10))
    got = losses.adlm_taylor_loss(z, phi1=phi1, phi2=0.0, phi0=0.0, reduction="none").numpy()
    np.testing.assert_allclose(got, np.sum(phi1 * z, axis=1), rtol=1e-12)


def test_fm_modes():
    # AdLM functional-mechanism modes.
    rng_labels = np.random.default_rng(2)
    y = reference.onehot(rng_labels.integers(0, 10, 20000))
    kw = dict(delta_f=1812.5, epsilon3=0.15, batch_size=1800)
    p0, p1, p2 = losses.adlm_perturb_coefficients(y, mode="per_example_label_only",
                                                  rng=np.random.default_rng(3), **kw)
    np.testing.assert_array_equal(p0, math.log(2))
    np.testing.assert_array_equal(p2, 0.125)
    noise = p1 - (0.5 - y)
    # Scale Delta_F/(eps3 |L|) = 6.71296; mean|v| relative sd 1/sqrt(200000) = 0.22%; 2% = 9 sd.
    assert abs(np.abs(noise).mean() / 6.712963 - 1) < 0.02
    # Drawn once: the same rng state gives the same coefficients (identical in every epoch).
    again = losses.adlm_perturb_coefficients(y, mode="per_example_label_only",
                                             rng=np.random.default_rng(3), **kw)
    np.testing.assert_array_equal(again[1], p1)
    q0, q1, q2 = losses.adlm_perturb_coefficients(y, mode="per_example_all_orders",
                                                  rng=np.random.default_rng(4), **kw)
    assert q2.min() >= 0.0 and np.mean(q2 == 0.0) > 0.4  # about half clamped
    assert not np.all(q0 == math.log(2))


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("call,name", [
    (lambda: losses.adlm_delta_f(num_classes=0, hidden_units=25), "num_classes"),
    (lambda: losses.adlm_delta_f(num_classes=10, hidden_units=2.5), "hidden_units"),
    (lambda: losses.adlm_taylor_error_bound(0), "num_classes"),
    (lambda: losses.adlm_taylor_coefficients([[0.5, 0.5]]), "labels"),
    (lambda: losses.adlm_perturb_coefficients([[1, 0]], delta_f=1.0, epsilon3=0.0,
                                              batch_size=1, rng=np.random.default_rng()),
     "epsilon"),
    (lambda: losses.adlm_perturb_coefficients([[1, 0]], delta_f=1.0, epsilon3=1.0,
                                              batch_size=0, rng=np.random.default_rng()),
     "batch_size"),
    (lambda: losses.adlm_perturb_coefficients([[1, 0]], delta_f=1.0, epsilon3=1.0,
                                              batch_size=1, mode="ref_code",
                                              rng=np.random.default_rng()), "mode"),
    (lambda: losses.adlm_perturb_coefficients([[1, 0]], delta_f=1.0, epsilon3=1.0,
                                              batch_size=1, rng=0), "rng"),
    (lambda: losses.adlm_taylor_loss(np.zeros((2, 3))), "labels"),
    (lambda: losses.adlm_taylor_loss(np.zeros((2, 3)), np.zeros((2, 4))), "labels"),
    (lambda: losses.adlm_taylor_loss(np.zeros((2, 3)), np.zeros((2, 3)), reduction="avg"),
     "reduction"),
])
def test_bad_arguments(call, name):
    with pytest.raises(ValueError, match=name):
        call()
