"""The tied decoder's phase-kernel convolution equals upsample-then-convolve."""

import numpy as np
import pytest
import tensorflow as tf

from tfdp.papers.stobatch import models


def _direct(h, kernel, s, out_hw):
    up = tf.repeat(tf.repeat(h, s, axis=1), s, axis=2)[:, :out_hw[0], :out_hw[1], :]
    return tf.nn.conv2d(up, kernel, strides=1, padding="SAME")


@pytest.mark.parametrize("k, s, c, hw", [
    (5, 2, 1, (28, 28)),   # MNIST
    (4, 2, 3, (32, 32)),   # CIFAR-10 (even kernel: SAME pads 1 / 2)
    (7, 2, 3, (16, 16)),   # ResNet-18 stem geometry
    (3, 2, 1, (8, 8)),     # tiny
    (5, 3, 2, (12, 9)),    # another stride, non-square
    (5, 2, 1, (27, 27)),   # odd size: the direct path
])
def test_upsample_conv_equals_direct_form(k, s, c, hw):
    rng = np.random.default_rng(k * 10 + s)
    h1 = (-(-hw[0] // s), -(-hw[1] // s))
    h = tf.constant(rng.uniform(-1, 1, (3,) + h1 + (6,)))  # float64: compare to 1e-12
    kernel = tf.Variable(rng.normal(size=(k, k, 6, c)))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(h)
        ref = _direct(h, kernel, s, hw)
        out = models.upsample_conv(h, kernel, s, hw)
        w = tf.constant(rng.normal(size=ref.shape))
        l_ref, l_out = tf.reduce_sum(ref * w), tf.reduce_sum(out * w)
    assert out.shape == ref.shape == (3,) + tuple(hw) + (c,)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=0, atol=1e-12)
    for a, b in zip(tape.gradient(l_out, [h, kernel]), tape.gradient(l_ref, [h, kernel])):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-10)


def test_upsample_conv_float32_rounding_only():
    rng = np.random.default_rng(0)
    h = tf.constant(rng.uniform(-1, 1, (4, 14, 14, 32)).astype(np.float32))
    kernel = tf.constant(rng.normal(size=(5, 5, 32, 1)).astype(np.float32) * 0.1)
    ref = _direct(h, kernel, 2, (28, 28)).numpy()
    out = models.upsample_conv(h, kernel, 2, (28, 28)).numpy()
    # 25 x 32 products per output, float32 eps 6e-8: rounding differences stay ~1e-6 relative
    assert np.max(np.abs(out - ref)) / np.max(np.abs(ref)) < 1e-5
