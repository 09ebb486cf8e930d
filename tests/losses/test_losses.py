"""Tests of tfdp.losses: AdLM Taylor loss and FM modes, StoBatch losses, sensitivities."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tfdp import losses


def _onehot(labels, m=10):
    return np.eye(m)[np.asarray(labels)]


def _exact_ce(z, y):
    """Per-class sigmoid cross-entropy y log(1+e^-z) + (1-y) log(1+e^z) (AdLM Eq. 24)."""
    return y * np.logaddexp(0.0, -z) + (1.0 - y) * np.logaddexp(0.0, z)


# ----------------------------------------------------------------------------- sensitivities


def test_sensitivity_fixtures():
    # AdLM Lemma 5 (Delta_F); StoBatch Lemma 2, 4 (Delta_R, Delta_L2).
    assert losses.adlm_delta_f(num_classes=10, hidden_units=25) == 1812.5
    assert losses.adlm_delta_f(num_classes=10, hidden_units=30) == 2550.0
    assert losses.adlm_delta_f(num_classes=10, hidden_units=25, output_bias=True) == \
        10 * (26 + 26**2 / 4)
    assert losses.stobatch_delta_r(fan_in=25, beta=196) == 4950.0
    assert losses.stobatch_delta_r(fan_in=48, beta=196) == 9504.0
    assert losses.stobatch_delta_r(fan_in=147, beta=1024) == 150822.0
    assert losses.stobatch_delta_l2(hidden_units=256) == 512.0
    assert losses.stobatch_delta_l2(hidden_units=256, output_bias=True) == 514.0
    # AdLM noise scales, MNIST code-release configuration.
    assert math.isclose(1812.5 / 0.15, 12083.333333, rel_tol=1e-9)
    assert math.isclose(losses.adlm_delta_f(num_classes=10, hidden_units=25) / (0.15 * 1800),
                        6.71296, abs_tol=1e-5)
    assert math.isclose(losses.adlm_delta_f(num_classes=10, hidden_units=30) / (0.75 * 7200),
                        0.472222, abs_tol=1e-6)
    # StoBatch gamma_x = Delta_R / m (Lemma 3).
    assert abs(4950 / 2499 - 1.980792) < 1e-6 and abs(9504 / 1851 - 5.134522) < 1e-6


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
        ys = _onehot(rng.integers(0, m, 5000), m)
        yps = _onehot(rng.integers(0, m, 5000), m)
        for i in range(5000):
            worst = max(worst, change(h[i], hp[i], ys[i], yps[i]))
    corners = change(np.ones(hk), np.zeros(hk), _onehot(0, m), _onehot(1, m))
    assert worst <= bound and corners <= bound
    assert corners > 0.3 * bound  # the bound is of the right order, not vacuous


# ----------------------------------------------------------------------------- AdLM Taylor loss


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
        assert np.max(np.abs(_exact_ce(z, y) - approx)) <= 0.00489
        approx3 = losses.adlm_taylor_loss(zz[:, None], np.full((zz.size, 1), y),
                                          reduction="none").numpy()
        err3 = np.max(np.abs(_exact_ce(zz, y) - approx3))
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
    y = _onehot(rng.integers(0, 10, 6))
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
    y = _onehot(rng_labels.integers(0, 10, 20000))
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


def test_fm_noise_draw_mean_abs():
    # Mean |value| of 10^6 draws within 0.5% of b (relative sd of the
    # mean of Exp(b) is 1/sqrt(1e6) = 0.1%, so 0.5% is 5 sd).
    b = 512 / 0.1
    chi3 = losses.draw_fm_noise((1000, 1000), sensitivity=512, epsilon=0.1,
                                rng=np.random.default_rng(5))
    assert abs(np.abs(chi3).mean() / b - 1) < 0.005


# ----------------------------------------------------------------------------- noise term


def test_fm_identities_and_noise_term_gradient():
    # StoBatch functional-mechanism identities (Theorem 3).
    rng = np.random.default_rng(6)
    m, hk, k = 7, 5, 3
    chi3 = rng.laplace(size=(hk, k))
    w = tf.Variable(rng.normal(size=(hk, k)))
    x = rng.normal(size=(m, 4))
    chi1 = rng.laplace(size=4)
    np.testing.assert_allclose(np.sum(x + chi1 / m, axis=0), x.sum(0) + chi1, rtol=1e-12)
    per_example = sum(np.sum((chi3 / m) * w.numpy()) for _ in range(m))
    np.testing.assert_allclose(per_example, np.sum(chi3 * w.numpy()), rtol=1e-12)
    with tf.GradientTape() as tape:
        term = losses.functional_mechanism_term(chi3, w, divisor=m)
    np.testing.assert_allclose(tape.gradient(term, w), -chi3 / m, rtol=1e-12)
    absmean = losses.functional_mechanism_term(chi3, w, divisor=m, mode="abs_mean")
    np.testing.assert_allclose(absmean, np.mean(np.abs(chi3 / m * w.numpy())), rtol=1e-12)


def test_noise_term_gradient_under_two_replicas():
    # StoBatch Theorem 3's noise term: SUM all-reduce of per-replica gradients must give
    # -chi3/m, not -R chi3/m.
    devices = [d.name for d in tf.config.list_logical_devices("CPU")[:2]]
    assert len(devices) == 2
    strategy = tf.distribute.MirroredStrategy(devices)
    chi3 = np.random.default_rng(7).laplace(size=(4, 3)).astype(np.float32)
    m = 9.0
    with strategy.scope():
        w = tf.Variable(tf.ones((4, 3)))

    @tf.function
    def grads():
        def replica_fn():
            with tf.GradientTape() as tape:
                term = losses.functional_mechanism_term(chi3, w, divisor=m, per_replica=True)
            return tape.gradient(term, w)
        return strategy.run(replica_fn)

    # The SUM all-reduce, done on the host (avoids collectives shared with other tests).
    per_replica = [g.numpy() for g in strategy.experimental_local_results(grads())]
    assert len(per_replica) == 2
    np.testing.assert_allclose(per_replica[0], per_replica[1])
    np.testing.assert_allclose(np.sum(per_replica, axis=0), -chi3 / m, rtol=1e-6)


# ----------------------------------------------------------------------------- StoBatch


def test_stobatch_taylor_algebra_and_error():
    # StoBatch Taylor algebra (Eq. 9).
    z = np.linspace(-0.5, 0.5, 1001)
    np.testing.assert_allclose(np.maximum(z, 0) - np.abs(z) / 2, z / 2, atol=1e-15)
    rng = np.random.default_rng(8)
    zb = rng.uniform(-0.5, 0.5, size=(200, 10))
    y = _onehot(rng.integers(0, 10, 200))
    got = losses.stobatch_taylor_loss(zb, y).numpy()
    closed = 10 * math.log(2) + np.sum(zb / 2 - zb * y + zb**2 / 8, axis=1)
    np.testing.assert_allclose(got, closed, rtol=1e-12)
    exact = np.sum(_exact_ce(zb, y), axis=1)
    assert np.all(np.abs(exact - got) <= np.sum(np.abs(zb) ** 4 / 192, axis=1) + 1e-15)


def test_stobatch_reconstruction_identity():
    # StoBatch auto-encoder term: |max(z,0) - z x + log2 - |z|/2| == |log2 + z(1/2 - x)|.
    rng = np.random.default_rng(9)
    z = rng.normal(scale=3, size=(5, 4, 4, 2))
    x = rng.uniform(-1, 1, size=z.shape)
    code_form = np.abs(np.maximum(z, 0) - z * x + math.log(2) - np.abs(z) / 2)
    got = losses.stobatch_reconstruction_loss(z, x, reduction="none").numpy()
    np.testing.assert_allclose(got, code_form.reshape(5, -1).sum(1), rtol=1e-12)
    assert math.isclose(float(losses.stobatch_reconstruction_loss(z, x)), code_form.sum(),
                        rel_tol=1e-12)
    linear = losses.stobatch_reconstruction_loss(z, x, absolute=False).numpy()
    assert math.isclose(linear, np.sum(math.log(2) + z * (0.5 - x)), rel_tol=1e-12)


def test_stobatch_mixed_objective_weight():
    # StoBatch Eq. 9: adversarial batch == benign batch -> benign-only loss + noise
    # term, for any xi.
    rng = np.random.default_rng(10)
    m = 12
    z = rng.normal(size=(m, 10))
    y = _onehot(rng.integers(0, 10, m))
    benign = float(losses.stobatch_taylor_loss(z, y, reduction="sum")) / m
    for xi in (0.0, 1.0, 1.5, 7.0):
        got = float(losses.stobatch_adversarial_objective(z, y, z, y, xi=xi, m=m,
                                                          noise_term=0.25))
        assert math.isclose(got, benign + 0.25, rel_tol=1e-12)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("call,name", [
    (lambda: losses.adlm_delta_f(num_classes=0, hidden_units=25), "num_classes"),
    (lambda: losses.adlm_delta_f(num_classes=10, hidden_units=2.5), "hidden_units"),
    (lambda: losses.stobatch_delta_r(fan_in=-1, beta=3), "fan_in"),
    (lambda: losses.stobatch_delta_r(fan_in=1, beta=True), "beta"),
    (lambda: losses.stobatch_delta_l2(hidden_units=0), "hidden_units"),
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
    (lambda: losses.functional_mechanism_term(np.ones((2, 2)), np.ones((2, 2)), divisor=0),
     "divisor"),
    (lambda: losses.functional_mechanism_term(np.ones((2, 2)), np.ones((2, 2)), divisor=1,
                                              mode="abs"), "mode"),
    (lambda: losses.functional_mechanism_term(np.ones((2, 3)), np.ones((2, 2)), divisor=1),
     "noise"),
    (lambda: losses.stobatch_reconstruction_loss(np.ones((2, 3)), np.ones((2, 2))), "x_bar"),
    (lambda: losses.stobatch_adversarial_objective(np.ones((1, 2)), np.ones((1, 2)),
                                                   np.ones((1, 2)), np.ones((1, 2)),
                                                   xi=-1.0, m=1), "xi"),
    (lambda: losses.stobatch_adversarial_objective(np.ones((1, 2)), np.ones((1, 2)),
                                                   np.ones((1, 2)), np.ones((1, 2)),
                                                   xi=1.0, m=0), "m"),
    (lambda: losses.draw_fm_noise((2, 2), sensitivity=-1.0, epsilon=1.0,
                                  rng=np.random.default_rng()), "sensitivity"),
])
def test_bad_arguments(call, name):
    with pytest.raises(ValueError, match=name):
        call()
