"""Tests of tfdp.losses: functional-mechanism noise and term, Taylor reconstruction loss."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tfdp import losses


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


# ----------------------------------------------------------------------------- reconstruction


def test_taylor_reconstruction_identity():
    # StoBatch auto-encoder term: |max(z,0) - z x + log2 - |z|/2| == |log2 + z(1/2 - x)|.
    rng = np.random.default_rng(9)
    z = rng.normal(scale=3, size=(5, 4, 4, 2))
    x = rng.uniform(-1, 1, size=z.shape)
    code_form = np.abs(np.maximum(z, 0) - z * x + math.log(2) - np.abs(z) / 2)
    got = losses.taylor_reconstruction_loss(z, x, reduction="none").numpy()
    np.testing.assert_allclose(got, code_form.reshape(5, -1).sum(1), rtol=1e-12)
    assert math.isclose(float(losses.taylor_reconstruction_loss(z, x)), code_form.sum(),
                        rel_tol=1e-12)
    linear = losses.taylor_reconstruction_loss(z, x, absolute=False).numpy()
    assert math.isclose(linear, np.sum(math.log(2) + z * (0.5 - x)), rel_tol=1e-12)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("call,name", [
    (lambda: losses.functional_mechanism_term(np.ones((2, 2)), np.ones((2, 2)), divisor=0),
     "divisor"),
    (lambda: losses.functional_mechanism_term(np.ones((2, 2)), np.ones((2, 2)), divisor=1,
                                              mode="abs"), "mode"),
    (lambda: losses.functional_mechanism_term(np.ones((2, 3)), np.ones((2, 2)), divisor=1),
     "noise"),
    (lambda: losses.taylor_reconstruction_loss(np.ones((2, 3)), np.ones((2, 2))), "x_bar"),
    (lambda: losses.draw_fm_noise((2, 2), sensitivity=-1.0, epsilon=1.0,
                                  rng=np.random.default_rng()), "sensitivity"),
])
def test_bad_arguments(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_shared_modules_hold_no_adlm_or_stobatch_function():
    # Issue 42: each paper's losses and budgets live in its folder (tfdp/papers/<paper>/).
    from tfdp import mechanisms  # pylint: disable=import-outside-toplevel
    papers = ("adlm_", "stobatch_")
    assert not [n for n in dir(losses) if n.startswith(papers)]
    assert not [n for n in dir(mechanisms) if n.startswith(papers)]
    assert not [n for n in dir(mechanisms) if "budget" in n]
