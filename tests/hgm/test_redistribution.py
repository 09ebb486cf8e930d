"""Redistribution r from gradients and the conv1 sensitivity: HGM Eq. 6 and 7."""

import numpy as np
import pytest
import tensorflow as tf

from tfdp import mechanisms
from tfdp.papers.hgm import redistribution
from tfdp.papers.hgm import models as hgm_models


def _linear_head(w):
    def head(h):
        return tf.reshape(h, [tf.shape(h)[0], -1]) @ w
    return head


def test_gradient_scores_match_closed_form_and_beta_zero_is_uniform():
    # Linear head logits = h W: d loss / d h = W (softmax(hW) - onehot(y)), per example.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2, 2, 3)).astype(np.float32)
    y = rng.integers(0, 4, size=40)
    w = rng.normal(size=(12, 4)).astype(np.float32)
    scores = redistribution.gradient_scores(lambda v: v, _linear_head(tf.constant(w)), x, y,
                                            beta=1.0, batch_size=7)
    logits = x.reshape(40, 12) @ w
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    grad = (p - np.eye(4)[y]) @ w.T  # [40, 12]
    np.testing.assert_allclose(scores, np.abs(grad).mean(0).reshape(2, 2, 3), rtol=1e-4)
    # beta = 2: mean of squares (absolute value first, then the mean).
    sq = redistribution.gradient_scores(lambda v: v, _linear_head(tf.constant(w)), x, y,
                                        beta=2.0)
    np.testing.assert_allclose(sq, (grad ** 2).mean(0).reshape(2, 2, 3), rtol=1e-4)
    zero = redistribution.gradient_scores(lambda v: v, _linear_head(tf.constant(w)), x, y,
                                          beta=0.0)
    r = mechanisms.redistribution_from_scores(zero)
    np.testing.assert_allclose(r, np.full((2, 2, 3), 1 / 12), rtol=1e-12)


def test_gradient_scores_permute_with_units_and_floor():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 12)).astype(np.float32)
    y = rng.integers(0, 3, size=30)
    w = rng.normal(size=(12, 3)).astype(np.float32)
    w[5] = 0.0  # a unit with zero gradient gets the floor
    perm = rng.permutation(12)
    s = redistribution.gradient_scores(lambda v: v, _linear_head(tf.constant(w)), x, y)
    s_perm = redistribution.gradient_scores(lambda v: v, _linear_head(tf.constant(w[perm])),
                                            x[:, perm], y)
    np.testing.assert_allclose(s_perm, s[perm], rtol=1e-5)
    r = mechanisms.redistribution_from_scores(s, floor=0.01)
    assert abs(r.sum() - 1) < 1e-6 and np.all(r > 0)
    assert r.min() >= 0.01 / (1.01 * 12)  # renormalising after the floor: not 0.01 / K


@pytest.mark.parametrize("mode", ["layer_max", "layer_sum", "per_map"])
def test_tf_sensitivity_matches_numpy_reference(mode):
    rng = np.random.default_rng(2)
    kernel = rng.normal(size=(3, 3, 2, 4))
    r = rng.dirichlet(np.ones(5 * 5 * 4)).reshape(5, 5, 4)
    got = float(redistribution.layer_sensitivity(tf.constant(kernel), r, mode))
    want = redistribution.layer_sensitivity_numpy(kernel, r, mode)
    assert got == pytest.approx(want, rel=1e-10)


@pytest.mark.parametrize("stride", [1, 2])
def test_conv_sensitivity_bounds_hold_and_per_map_is_not_sound(stride):
    # HGM Eq. 6 bounds for tf.nn.conv2d with SAME padding: for every alpha with
    # ||alpha||_inf <= mu, ||conv(alpha) / sqrt(K r)||_2 <= mu Delta_sum <= mu Delta_max.
    rng = np.random.default_rng(3)
    kernel = rng.normal(size=(3, 3, 2, 5))
    out = (-(-8 // stride), -(-8 // stride), 5)
    k = int(np.prod(out))
    r = rng.dirichlet(np.ones(k)).reshape(out)
    mu = 0.3
    d_sum = float(redistribution.layer_sensitivity(tf.constant(kernel), r, "layer_sum"))
    d_max = float(redistribution.layer_sensitivity(tf.constant(kernel), r, "layer_max"))
    d_map = float(redistribution.layer_sensitivity(tf.constant(kernel), r, "per_map"))
    assert d_sum <= d_max + 1e-12
    alphas = [rng.uniform(-mu, mu, size=(8, 8, 2)) for _ in range(20)]
    alphas += [mu * rng.choice([-1.0, 1.0], size=(8, 8, 2)) for _ in range(20)]
    # mu sign(W_c) under the receptive field of an interior unit attains |w.alpha| = mu ||w||_1.
    c = 2
    patch = np.zeros((8, 8, 2))
    patch[2:5, 2:5, :] = mu * np.sign(kernel[:, :, :, c])
    alphas.append(patch)
    worst = 0.0
    for a in alphas:
        h = tf.nn.conv2d(tf.constant(a[None]), tf.constant(kernel), stride, "SAME").numpy()[0]
        worst = max(worst, float(np.sqrt(np.sum(h ** 2 / (k * r)))))
        assert worst <= mu * d_sum * (1 + 1e-9)
    h = tf.nn.conv2d(tf.constant(patch[None]), tf.constant(kernel), stride, "SAME").numpy()[0]
    assert np.max(np.abs(h[..., c])) == pytest.approx(mu * np.abs(kernel[..., c]).sum(),
                                                      rel=1e-9)
    # Negative control: the per-feature-map bound (as published) is not an l_inf bound: with
    # uniform r and positive kernels, alpha = mu * ones moves every map at once.
    pos = np.abs(kernel)
    uniform = np.full(out, 1.0 / k)
    d_map = float(redistribution.layer_sensitivity(tf.constant(pos), uniform, "per_map"))
    h = tf.nn.conv2d(tf.constant(mu * np.ones((1, 8, 8, 2))), tf.constant(pos), stride,
                     "SAME").numpy()[0]
    assert float(np.sqrt(np.sum(h ** 2))) > mu * d_map


def test_sensitivity_bounded_conv_normalises_delta_to_target():
    rng = np.random.default_rng(4)
    r = rng.dirichlet(np.ones(6 * 6 * 3)).reshape(6, 6, 3)
    for mode in redistribution.SENSITIVITY_MODES:
        layer = hgm_models.SensitivityBoundedConv2D(3, 3, padding="same", r=r,
                                                    sensitivity_mode=mode, target=0.5)
        layer(tf.zeros((1, 6, 6, 2)))
        layer.kernel.assign(10.0 * rng.normal(size=(3, 3, 2, 3)))
        eff = layer.effective_kernel()
        assert float(layer.sensitivity(eff)) == pytest.approx(0.5, rel=1e-5)
        layer.kernel.assign(1e-3 * np.ones((3, 3, 2, 3)))  # below the target: scaled up
        small = layer.effective_kernel()
        assert float(layer.sensitivity(small)) == pytest.approx(0.5, rel=1e-5)
        np.testing.assert_allclose(small.numpy(), small.numpy().flat[0], rtol=1e-6)


def test_bad_sensitivity_mode_and_r():
    with pytest.raises(ValueError, match="sensitivity_mode"):
        redistribution.check_sensitivity_mode("spectral")
    with pytest.raises(ValueError, match="r"):
        redistribution.layer_sensitivity(tf.ones((3, 3, 1, 2)), np.ones((4, 4, 2)))
