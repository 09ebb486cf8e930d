"""DP-SGD: per-example clipping, noise once per lot, budget-limited steps, ledger entries."""

import numpy as np
import pytest
import tensorflow as tf

from tfdp import accounting
from tfdp.train import dpsgd
from tfdp.train.base import DataSpec, StepContext, TrainConfig


def _spec(n):
    """The spec of n all-zero two-feature records of two classes."""
    return DataSpec.of(np.zeros((n, 2), np.float32), np.zeros(n, np.int64), 2)


def _method(tmp_path, epsilon=None, epochs=2, batch_size=100, **opts):
    options = {"dpsgd_l2_clip": 1.0, "dpsgd_accountant": "rdp", "dpsgd_sampling": "poisson"}
    options.update(opts)
    cfg = TrainConfig(method="dpsgd", dataset="synthetic", model_dir=str(tmp_path / "r"),
                      epochs=epochs, batch_size=batch_size, epsilon=epsilon, delta=1e-5,
                      seed=0, options=options)
    m = dpsgd.DPSGD(cfg)
    m.validate()
    return m


def _charge_planned(m, ledger, n, batch=100):
    """Records the planned steps as the loop would after running them all."""
    spend = m.step_spend()
    steps = m.max_steps()
    spend.record(ledger, [spend.segment(0, steps, -(-steps // (n // batch)), n, batch)])


def test_clipped_sum_closed_form():
    # Example 0: gradient (3, 4) split over two tensors, norm 5 -> scaled by C/5 = 0.2.
    # Example 1: gradient (0.3, 0.4), norm 0.5 <= C -> unchanged.
    g_a = tf.constant([[3.0], [0.3]])
    g_b = tf.constant([[[4.0]], [[0.4]]])
    out = dpsgd.clipped_sum([g_a, g_b], 1.0)
    np.testing.assert_allclose(out[0].numpy(), [3.0 * 0.2 + 0.3], rtol=1e-6)
    np.testing.assert_allclose(out[1].numpy(), [[4.0 * 0.2 + 0.4]], rtol=1e-6)


def test_sigma_solved_from_target_epsilon(tmp_path):
    m = _method(tmp_path, epsilon=1.0)
    ledger = accounting.PrivacyLedger()
    m.setup(_spec(1000), ledger,
            np.random.default_rng(0))
    assert m.max_steps() == 2 * (1000 // 100)
    assert len(ledger) == 0  # the loop charges the steps that execute
    _charge_planned(m, ledger, 1000)
    eps, delta = ledger.total()
    assert eps <= 1.0 and eps == pytest.approx(1.0, rel=1e-3)
    assert delta == 1e-5
    # Cross-check with the accountant directly.
    assert accounting.dpsgd_epsilon(num_examples=1000, batch_size=100,
                                    noise_multiplier=m.noise_multiplier, steps=20,
                                    delta=1e-5, accountant="rdp") == pytest.approx(eps)


def test_fixed_sigma_stops_when_budget_is_spent(tmp_path):
    m = _method(tmp_path, epsilon=1.0, epochs=50, dpsgd_noise_multiplier=2.0)
    ledger = accounting.PrivacyLedger()
    m.setup(_spec(1000), ledger,
            np.random.default_rng(0))
    steps = m.max_steps()
    assert 0 < steps < 50 * 10
    _charge_planned(m, ledger, 1000)

    def eps(t):
        return accounting.dpsgd_epsilon(num_examples=1000, batch_size=100, noise_multiplier=2.0,
                                        steps=t, delta=1e-5, accountant="rdp")

    # The last allowed step keeps eps <= target; one more step would exceed it.
    assert eps(steps) <= 1.0 < eps(steps + 1)
    assert ledger.total()[0] == pytest.approx(eps(steps))


def test_fixed_sigma_too_small_for_one_step(tmp_path):
    m = _method(tmp_path, epsilon=0.01, dpsgd_noise_multiplier=0.3)
    with pytest.raises(ValueError, match="--dpsgd_noise_multiplier"):
        m.setup(_spec(1000), accounting.PrivacyLedger(), np.random.default_rng(0))


def test_shuffle_sampling_records_claimed_and_sound(tmp_path):
    m = _method(tmp_path, epsilon=2.0, dpsgd_sampling="shuffle")
    ledger = accounting.PrivacyLedger()
    m.setup(_spec(1000), ledger,
            np.random.default_rng(0))
    _charge_planned(m, ledger, 1000)
    d = ledger.to_dict()
    # Calibrated on the Poisson analysis (claimed); the sound no-amplification bound is larger.
    assert d["claimed_epsilon"] == pytest.approx(2.0, rel=1e-3)
    assert d["epsilon"] > d["claimed_epsilon"] and d["differs"]


def test_noise_is_added_once_per_lot_with_stddev_sigma_c(tmp_path):
    """One train step on a zero-gradient model: the update is exactly the noise / lot size."""
    import keras  # pylint: disable=import-outside-toplevel

    m = _method(tmp_path, epsilon=None, dpsgd_noise_multiplier=2.0, dpsgd_l2_clip=0.5)
    m.noise_multiplier = 2.0
    inputs = keras.Input((1,))
    model = keras.Model(inputs, keras.layers.Dense(2000, use_bias=False,
                                                   kernel_initializer="zeros")(inputs))
    optimizer = keras.optimizers.SGD(1.0)
    batch = 50
    x = tf.zeros((batch, 1))  # zero input: zero data gradient, the update is pure noise
    y = tf.zeros((batch,), tf.int64)
    m.model, m.optimizer = model, optimizer
    m.train_step(StepContext.current(tf.constant([1, 2], tf.int64), batch), x, y)
    update = -model.get_weights()[0].ravel()
    # Expected stddev sigma*C/batch = 2*0.5/50 = 0.02. With 2000 draws the sample stddev has
    # relative standard error ~ 1/sqrt(2*2000) = 1.6%; 6% is ~4 standard errors.
    assert np.std(update) == pytest.approx(0.02, rel=0.06)
    assert abs(np.mean(update)) < 4 * 0.02 / np.sqrt(2000)
