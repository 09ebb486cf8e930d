"""tfdp.soundness: the flip test, and a mutation test (inflated radii make the check fail).

The fixture is a linear classifier smoothed with Gaussian noise, whose exact smoothed radius
is known in closed form (Cohen et al. 2019: the distance t to the decision boundary), so the
check's verdict on honest and on inflated radii is predictable and fast to compute.
"""

import types

import numpy as np
import pytest
import tensorflow as tf

from tfdp import certify, soundness

SIGMA, D, N, ALPHA = 0.5, 20, 1000, 0.001


def _options(**kw):
    base = dict(batch_size=40, soundness_nb_iter=20, soundness_eot_draws=16,
                soundness_restarts=1, soundness_targeted=True, soundness_power_factor=2.0)
    base.update(kw)
    return types.SimpleNamespace(**base)


@pytest.fixture(scope="module")
def linear():
    """Three classes: 0 and 1 split by the hyperplane u.x = 0 (class 0 on the positive
    side), class 2 never wins. 40 points of class 0 at distance t in [sigma, 2 sigma] from
    the boundary, so p_A = Phi(t / sigma) lies in [0.84, 0.98]: the certified radius is a
    little below t, and 1.5 times it lies beyond the boundary."""
    rng = np.random.default_rng(0)
    u = rng.standard_normal(D)
    u /= np.linalg.norm(u)
    w = tf.constant(np.stack([u, -u, np.zeros(D)], axis=1), tf.float32)  # (D, 3)
    b = tf.constant([0.0, 0.0, -50.0])
    tf.random.set_seed(0)

    def noisy(v):
        v = tf.reshape(tf.convert_to_tensor(v, tf.float32), [-1, D])
        return tf.matmul(v + SIGMA * tf.random.normal(tf.shape(v)), w) + b

    t = np.linspace(SIGMA, 2 * SIGMA, 40)
    # Each point: distance t along u plus an orthogonal offset (irrelevant to the classifier).
    side = rng.standard_normal((40, D))
    side -= (side @ u)[:, None] * u[None, :]
    x = (t[:, None] * u[None, :] + side).astype(np.float32)
    cert = certify.from_config({"mechanism": "gaussian_smoothing", "sigma": SIGMA,
                                "selection_draws": 100})
    predictor = certify.MonteCarloPredictor(noisy, from_logits=True, draws_per_step=250)
    selection = predictor(x, 100, 3)
    pred, lower, upper = cert.bounds(predictor(x, N, 3), "clopper_pearson", ALPHA,
                                     selection=selection)
    radius = cert.radius(lower, upper)
    return dict(cert=cert, noisy=noisy, x=x, pred=pred, radius=radius, t=t,
                mc=lambda xb: predictor(xb, N, 3))


def _check(linear, radius, **kw):
    return soundness.soundness_check(
        linear["cert"], linear["x"], np.zeros(40, np.int64), linear["pred"], radius,
        noisy=linear["noisy"], monte_carlo_fn=linear["mc"], bound="clopper_pearson",
        value_range=(-100.0, 100.0), alpha=ALPHA, options=_options(**kw), num_classes=3,
        chance=1 / 3, clean_accuracy=1.0, seed=0, log=lambda text: None)


def test_fixture_certificates_are_sound_and_below_the_exact_radius(linear):
    assert np.all(linear["pred"] == 0) and np.all(linear["radius"] > 0)
    assert np.all(linear["radius"] <= linear["t"])  # Cohen's radius never exceeds t
    assert np.all(1.5 * linear["radius"] > linear["t"])  # and 1.5 r crosses the boundary


def test_honest_radii_pass_and_inflated_radii_fail(linear):
    logs = []
    honest = soundness.soundness_check(
        linear["cert"], linear["x"], np.zeros(40, np.int64), linear["pred"], linear["radius"],
        noisy=linear["noisy"], monte_carlo_fn=linear["mc"], bound="clopper_pearson",
        value_range=(-100.0, 100.0), alpha=ALPHA, options=_options(batch_size=20),
        num_classes=3, chance=1 / 3, clean_accuracy=1.0, seed=0, log=logs.append)
    assert honest["conclusive"] and honest["passed"], honest
    assert honest["certified"] == 40 and honest["flipped"] <= 1
    # Power: at 2 r every point lies well beyond the boundary.
    assert honest["power"]["flipped"] >= 35 and honest["power"]["radius_factor"] == 2.0
    # Progress: a line per chunk (2 chunks of 20) at r and at 2 r, with an ETA.
    assert len(logs) == 4 and all("ETA" in line for line in logs)
    assert "chunk 2/2" in logs[1] and "2 r" in logs[3]
    # The mutation: radii inflated 1.5x are refuted.
    inflated = _check(linear, 1.5 * linear["radius"], soundness_power_factor=0.0)
    assert inflated["conclusive"] and not inflated["passed"], inflated
    assert inflated["flipped"] >= 20 and inflated["power"] is None


def test_each_attack_alone_breaks_inflated_radii(linear):
    """The random start and the targeted attack are real attacks, not passengers."""
    r = 1.5 * linear["radius"]
    x, cls = linear["x"], linear["pred"]
    kw = dict(value_range=(-100.0, 100.0), nb_iter=20, eot_draws=16)
    rng = np.random.default_rng(1)
    starts = soundness.random_starts(x, r, "l2", (-100.0, 100.0), rng)
    assert np.all(np.linalg.norm(starts - x, axis=1) <= r + 1e-4)
    for adv in (soundness.pgd_eot(linear["noisy"], x, cls, r, "l2", start=starts, **kw),
                soundness.pgd_eot(linear["noisy"], x, np.ones(40, np.int64), r, "l2",
                                  targeted=True, **kw)):
        assert np.all(np.linalg.norm(adv - x, axis=1) <= r + 1e-4)
        flips = soundness.plurality_flipped(linear["mc"](adv), cls, "clopper_pearson", ALPHA)
        assert flips.sum() >= 20


def test_plurality_flip_test():
    counts = np.array([[400, 600, 0], [520, 480, 0], [470, 530, 0], [200, 400, 400]])
    res = types.SimpleNamespace(counts=counts, num_draws=1000,
                                mean_scores=counts / 1000.0)
    cls = np.zeros(4, np.int64)
    # Clopper-Pearson on n_c of n_c + n_k at alpha / (K - 1) = 0.0005 (z about 3.3, standard
    # error about 0.016-0.02): 400 of 1000 and 200 of 600 are significant, 520 of 1000 (c
    # ahead) and 470 of 1000 (upper bound about 0.52) are not.
    got = soundness.plurality_flipped(res, cls, "clopper_pearson", 0.001)
    assert got.tolist() == [True, False, False, True]
    # Hoeffding on the mean score difference: slack 2 sqrt(ln(2000) / 2000) = 0.124.
    got = soundness.plurality_flipped(res, cls, "hoeffding", 0.001)
    assert got.tolist() == [True, False, False, True]
