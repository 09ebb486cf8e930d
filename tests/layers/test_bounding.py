"""Tests of the bounding layers: bounded LRN (AdLM Eq. 22), per-batch min-max, clip."""

import numpy as np
import pytest
import tensorflow as tf

import layers


def _eq22_reference(h: np.ndarray, r=2, q=2.0, alpha=1e-4, beta=0.75) -> np.ndarray:
    """Direct loop over channels of AdLM Eq. 22 (float64)."""
    n = h.shape[-1]
    out = np.empty_like(h, dtype=np.float64)
    for k in range(n):
        lo, hi = max(0, k - r), min(n - 1, k + r)
        s = np.sum(h[..., lo:hi + 1].astype(np.float64) ** 2, axis=-1)
        den = (q + alpha * s) ** beta
        out[..., k] = h[..., k] / np.maximum(h[..., k], den)
    return out


def test_bounded_lrn_matches_eq22_and_is_in_unit_interval():
    # AdLM Eq. 22: outputs in [0, 1] for any non-negative input, including 1e6.
    rng = np.random.default_rng(0)
    h = np.abs(rng.standard_cauchy((4, 5, 5, 7))).astype(np.float32) * 10.0
    h[0, 0, 0, :] = 1e6
    h[1, 1, 1, :] = 0.0
    h[2, 2, 2, :] = 0.0
    h[2, 2, 2, 3] = 5.0  # 5 > (2 + 1e-4 * 25)^0.75 = 1.68: the guard max(h, .) is active
    out = layers.BoundedLRN()(tf.constant(h)).numpy()
    assert np.all(np.isfinite(out)) and out.min() >= 0.0 and out.max() <= 1.0
    np.testing.assert_allclose(out, _eq22_reference(h), rtol=1e-5, atol=1e-7)
    assert np.all(out[1, 1, 1] == 0.0)
    assert out[2, 2, 2, 3] == 1.0
    assert np.all(out[0, 0, 0] < 1.0)  # 1e6 everywhere: den = (2 + 5e8)^0.75 > h


def test_bounded_lrn_band_matmul_matches_numpy_reference():
    # The banded-matmul window sum equals a direct loop of Eq. 22, also with fewer channels
    # than the window (C = 3 < 2r + 1 = 5) and for other radii.
    rng = np.random.default_rng(5)
    for shape, r in (((4, 5, 5, 7), 2), ((4, 5, 5, 3), 2), ((2, 6, 6, 11), 3), ((8, 4), 1)):
        h = (np.abs(rng.normal(size=shape)) * rng.choice([0.1, 10.0, 200.0], size=shape))
        h = h.astype(np.float32)
        out = layers.BoundedLRN(depth_radius=r)(tf.constant(h)).numpy()
        np.testing.assert_allclose(out, _eq22_reference(h, r=r), rtol=1e-5, atol=1e-7)


def test_bounded_lrn_equals_tf_lrn_where_guard_inactive():
    # Where den >= h the layer is tf.nn.local_response_normalization(radius 2, bias 2, 1e-4, .75).
    h = tf.random.stateless_uniform((3, 4, 4, 9), seed=[1, 1], maxval=1.5)
    ours = layers.BoundedLRN()(h)
    ref = tf.nn.local_response_normalization(h, depth_radius=2, bias=2.0, alpha=1e-4, beta=0.75)
    np.testing.assert_allclose(ours, ref, rtol=1e-6)


def test_bounded_lrn_signed_input_in_minus_one_one():
    h = tf.random.stateless_normal((2, 50, 6), seed=[2, 3]) * 1e3
    out = layers.BoundedLRN()(h).numpy()
    assert np.all(np.abs(out) <= 1.0)
    np.testing.assert_array_equal(np.sign(out), np.sign(h.numpy()))


def test_min_max_bound():
    # Min-max: per-neuron outputs in [0, 1], a constant column gives no NaN.
    rng = np.random.default_rng(1)
    h = rng.normal(scale=50.0, size=(64, 6)).astype(np.float32)
    h[:, 2] = 3.0
    out = layers.MinMaxBound()(tf.constant(h)).numpy()
    assert np.all(np.isfinite(out)) and out.min() >= 0.0 and out.max() <= 1.0
    np.testing.assert_array_equal(out[:, 2], 0.0)
    np.testing.assert_allclose(out.min(axis=0)[[0, 1, 3, 4, 5]], 0.0)
    np.testing.assert_allclose(out.max(axis=0)[[0, 1, 3, 4, 5]], 1.0, atol=1e-6)
    expected = (h - h.min(0)) / (h.max(0) - h.min(0) + 1e-6)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_clip_respects_bounds():
    h = tf.constant([[-1e9, -0.5, 0.0, 0.7, 2.0, 1e9]])
    out = layers.Clip(-1.0, 1.0)(h).numpy()
    np.testing.assert_array_equal(out, np.float32([[-1.0, -0.5, 0.0, 0.7, 1.0, 1.0]]))
    out01 = layers.Clip(0.0, 1.0)(h).numpy()
    assert out01.min() == 0.0 and out01.max() == 1.0


@pytest.mark.parametrize("factory,name", [
    (lambda: layers.BoundedLRN(depth_radius=-1), "depth_radius"),
    (lambda: layers.BoundedLRN(depth_radius=1.5), "depth_radius"),
    (lambda: layers.BoundedLRN(bias=0.0), "bias"),
    (lambda: layers.BoundedLRN(alpha=-1e-4), "alpha"),
    (lambda: layers.BoundedLRN(beta=float("inf")), "beta"),
    (lambda: layers.MinMaxBound(epsilon=0.0), "epsilon"),
    (lambda: layers.Clip(1.0, 1.0), "low"),
    (lambda: layers.Clip(float("nan"), 1.0), "low"),
    (lambda: layers.Clip(0.0, "x"), "high"),
])
def test_bad_arguments(factory, name):
    with pytest.raises(ValueError, match=name):
        factory()
