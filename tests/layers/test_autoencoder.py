"""Tests of StoBatch's DP auto-encoder layer (StoBatch Lemma 3, Theorem 1)."""

import math
import os

import numpy as np
import pytest
import tensorflow as tf
import keras

import layers


def _layer(**kw):
    args = dict(filters=4, kernel_size=3, noise_scale=2 * 4950 / 0.5, strides=2,
                batch_divisor=2499.0, seed=5)
    args.update(kw)
    return layers.DPAutoEncoderConv(**args)


def test_shapes_bounds_and_fixed_latent_noise():
    ae = _layer()
    x = tf.random.stateless_uniform((3, 9, 9, 2), seed=[1, 2], minval=-1, maxval=1)
    h_bar = ae(x, training=True)
    assert h_bar.shape == (3, 5, 5, 4)
    h = ae.encode(x, training=True).numpy()
    assert np.all(np.abs(h) <= 1.0)  # StoBatch: h1 clipped to [-1, 1]
    noise = h_bar.numpy() - h
    np.testing.assert_allclose(noise, np.broadcast_to(ae.noise.fixed_noise.numpy(), noise.shape),
                               rtol=1e-5, atol=1e-6)
    # Per-neuron scale 2 Delta_R / (eps1 m) (StoBatch Lemma 3: b_h = 2 b_x).
    np.testing.assert_allclose(ae.noise.noise_scale, 2 * 4950 / 0.5 / 2499, rtol=1e-12)
    # Same draw in every call (drawn once).
    np.testing.assert_array_equal(ae(x, training=True) - ae.encode(x, training=True),
                                  h_bar.numpy() - h)
    # No latent noise at inference by default.
    np.testing.assert_array_equal(ae(x, training=False), ae.encode(x, training=False))


def test_tied_decoder_and_reconstruction_loss():
    ae = _layer(batch_norm=False, noise_scale=0.0, allow_zero=True)
    x = tf.random.stateless_uniform((2, 8, 8, 3), seed=[3, 4], minval=-1, maxval=1)
    h_bar = ae(x, training=True)
    z = ae.reconstruct(h_bar, tf.shape(x))
    assert z.shape == x.shape
    # Manual decoder: nearest-neighbour upsampling and the transposed kernel.
    up = np.repeat(np.repeat(h_bar.numpy(), 2, axis=1), 2, axis=2)[:, :8, :8]
    kern = np.transpose(ae.conv.kernel.numpy(), (1, 0, 3, 2))
    manual = tf.nn.relu(tf.nn.conv2d(up, kern, 1, "SAME")).numpy()
    np.testing.assert_allclose(z, manual, rtol=1e-5, atol=1e-6)
    expected = np.sum(np.abs(math.log(2) + manual * (0.5 - x.numpy())))
    loss = ae.reconstruction_loss(x)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    with tf.GradientTape() as tape:
        loss = ae.reconstruction_loss(x)
    grads = tape.gradient(loss, ae.trainable_variables)
    assert all(g is not None for g in grads)
    assert float(tf.reduce_sum(tf.abs(grads[0]))) > 0.0


def test_round_trip_and_inference_switch(tmp_path):
    inp = keras.Input((8, 8, 1))
    ae = _layer(name="ae")
    h = ae(inp)
    out = keras.layers.Dense(2)(keras.layers.Flatten()(h))
    model = keras.Model(inp, out)
    x = tf.random.stateless_uniform((2, 8, 8, 1), seed=[5, 6])
    path = os.path.join(tmp_path, "ae.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(model.predict(x, verbose=0), loaded.predict(x, verbose=0))
    np.testing.assert_array_equal(loaded.get_layer("ae").noise.fixed_noise.numpy(),
                                  ae.noise.fixed_noise.numpy())
    assert loaded.get_layer("ae").get_config() == ae.get_config()
    assert layers.set_inference_noise(loaded, True) == 1
    assert not np.allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


@pytest.mark.parametrize("kw,name", [
    (dict(filters=0), "filters"), (dict(kernel_size=2.0), "kernel_size"),
    (dict(strides=0), "strides"), (dict(noise_scale=-1.0), "noise_scale"),
    (dict(noise_mode="x"), "noise_mode"), (dict(batch_divisor=0), "batch_divisor"),
])
def test_bad_arguments(kw, name):
    with pytest.raises(ValueError, match=name):
        _layer(**kw)
