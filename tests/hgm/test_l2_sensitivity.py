"""Sound l2 sensitivities of conv1 (issue 23 item 4): the FFT bound (Sedghi et al. 2019) and
the ceil(k/s) sigma_max bound are upper bounds of the operator norm found by power iteration,
the FFT one close to it; the layer normalises its kernel to them; their certificates are l2."""

import numpy as np
import pytest
import tensorflow as tf

from tfdp import certify, mechanisms
from tfdp.papers.hgm import redistribution
from tfdp.papers.hgm import models as hgm_models


def _power_iteration(kernel, n, stride, steps=150):
    rng = np.random.default_rng(1)
    x = tf.Variable(rng.standard_normal((1, n, n, int(kernel.shape[2]))).astype(np.float32))
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(tf.nn.conv2d(x, kernel, stride, "SAME"))) / 2
        g = tape.gradient(loss, x)  # W^T W x
        x.assign(g / tf.norm(g))
    return float(tf.norm(tf.nn.conv2d(x, kernel, stride, "SAME")))


@pytest.mark.parametrize("k, stride, cin, cout, n", [(5, 1, 1, 8, 28), (3, 2, 3, 16, 16)])
def test_bounds_dominate_power_iteration(k, stride, cin, cout, n):
    kernel = tf.constant(np.random.default_rng(0).standard_normal((k, k, cin, cout)),
                         tf.float32)
    power = _power_iteration(kernel, n, stride)
    out = -(-n // stride)
    fourier = float(redistribution.conv_operator_norm_fourier(kernel, (out, out), stride))
    patch = float(redistribution.conv_operator_norm_patch(kernel, stride))
    assert fourier >= power * (1 - 1e-4) and patch >= power * (1 - 1e-4)
    if stride == 1:
        assert fourier <= 1.03 * power  # within a few percent of the true norm


def test_layer_sensitivity_l2_modes_divide_by_min_kr():
    rng = np.random.default_rng(2)
    kernel = tf.constant(rng.standard_normal((5, 5, 1, 4)), tf.float32)
    r = mechanisms.check_redistribution(_normalised(rng), "r")
    k = r.size
    op = float(redistribution.conv_operator_norm_fourier(kernel, (28, 28), 1))
    got = float(redistribution.layer_sensitivity(kernel, r, "l2_fourier"))
    assert got == pytest.approx(op / np.sqrt(k * r.min()), rel=1e-6)
    assert redistribution.sensitivity_norm("l2_patch") == "l2"
    assert redistribution.sensitivity_norm("layer_max") == "linf"


def _normalised(rng):
    v = rng.uniform(0.5, 1.5, (28, 28, 4))
    return v / v.sum()


@pytest.mark.parametrize("mode", ["l2_fourier", "l2_patch"])
def test_bounded_conv_normalises_to_the_l2_bound(mode):
    layer = hgm_models.SensitivityBoundedConv2D(4, 5, padding="same", sensitivity_mode=mode,
                                                target=1.0)
    layer.build((None, 28, 28, 1))
    eff = layer.effective_kernel()
    assert float(layer.sensitivity(eff)) == pytest.approx(1.0, rel=1e-4)
    # With uniform r (K r_k = 1) the effective conv's l2 operator norm is at most the target.
    assert _power_iteration(eff, 28, 1, steps=80) <= 1.0 + 1e-3


def test_l2_mode_certificate_is_sound_and_l2():
    cert = certify.from_config({"mechanism": "hgm", "construction_bound": 0.2,
                                "epsilon": 1.0, "delta": 1e-5, "norm": "l2",
                                "sensitivity_mode": "l2_fourier", "sensitivity_sound": True})
    assert cert.sound and cert.norm == "l2"
