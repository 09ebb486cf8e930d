"""Noise layers under tf.distribute.MirroredStrategy over the 2 logical CPUs of conftest.py."""

import numpy as np
import pytest
import tensorflow as tf
import keras

import layers


@pytest.fixture(scope="module")
def strategy():
    devices = tf.config.list_logical_devices("CPU")
    assert len(devices) >= 2, "tests/conftest.py should configure 2 logical CPUs"
    return tf.distribute.MirroredStrategy([d.name for d in devices[:2]])


def _per_replica_noise(strategy, layer, steps=2):
    values = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.zeros((3, 50)))

    @tf.function
    def step(v):
        return strategy.run(lambda inp: layer(inp, training=True), args=(v,))

    outs = []
    for _ in range(steps):
        outs.append([t.numpy() for t in strategy.experimental_local_results(step(values))])
    return outs


@pytest.mark.parametrize("mode", layers.NOISE_MODES)
def test_replica_draws(strategy, mode):
    with strategy.scope():
        layer = layers.LaplaceNoise(1.0, noise_mode=mode, seed=21)
        layer.build((None, 50))
    (r0, r1), (s0, s1) = _per_replica_noise(strategy, layer)
    if mode == "per_example":
        assert not np.any(r0 == r1)  # independent per replica
        assert not np.any(r0 == s0)  # fresh per step
        assert len({row.tobytes() for row in r0}) == 3
    elif mode == "per_batch":
        np.testing.assert_array_equal(r0, r1)  # one draw for the global batch
        assert np.all(r0 == r0[0]) and not np.any(r0[0] == s0[0])
    else:
        np.testing.assert_array_equal(r0, r1)
        np.testing.assert_array_equal(r0, s0)
    expected_count = 0 if mode == "once" else 2  # one per step, not one per replica
    assert int(layer.draw_counter.numpy()) == expected_count


def test_fit_under_mirrored_strategy(strategy):
    with strategy.scope():
        inp = keras.Input((10,))
        h = layers.LaplaceNoise(0.1, noise_mode="once", seed=1)(inp)
        h = keras.layers.Dense(8)(h)
        h = layers.HeterogeneousGaussianNoise(0.1, np.full(8, 1 / 8), seed=2)(h)
        h = keras.layers.ReLU()(h)
        h = layers.BoundedLRN()(h)
        h = layers.GaussianNoise(0.05, noise_mode="per_batch", seed=3)(h)
        out = keras.layers.Dense(2)(h)
        model = keras.Model(inp, out)
        model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True))
    x = np.random.default_rng(0).normal(size=(32, 10)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    hist = model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert np.isfinite(hist.history["loss"][0])
    assert int(model.layers[3].draw_counter.numpy()) == 4  # 4 steps
