"""Tests of tfdp.train.example_grads: one layer's per-example gradients and the clip factors."""

import keras
import numpy as np
import tensorflow as tf

from tfdp.train import example_grads


def test_layer_gradients_equal_a_loop_over_examples():
    keras.utils.set_random_seed(0)
    layer = keras.layers.Dense(3, activation="tanh")
    a = tf.random.stateless_normal((5, 4), [1, 2])
    g = tf.random.stateless_normal((5, 3), [3, 4])
    layer(a[:1])
    got = example_grads.layer_gradients(layer, layer.trainable_variables, a, g)
    for i in range(5):
        with tf.GradientTape() as tape:
            target = tf.reduce_sum(layer(a[i:i + 1]) * g[i:i + 1])  # <g_i, z_i>
        want = tape.gradient(target, layer.trainable_variables)
        for pe, w in zip(got, want):
            np.testing.assert_allclose(pe[i].numpy(), w.numpy(), rtol=1e-6, atol=1e-7)


def test_layer_gradients_are_zero_for_an_unconnected_variable():
    v = tf.Variable(tf.ones((2,)))
    unused = tf.Variable(tf.ones((3,)))
    got = example_grads.layer_gradients(lambda t: t * v, [v, unused], tf.ones((4, 2)),
                                        tf.fill((4, 2), 2.0))
    np.testing.assert_array_equal(got[0].numpy(), np.full((4, 2), 2.0))
    np.testing.assert_array_equal(got[1].numpy(), np.zeros((4, 3)))


def test_clip_factors():
    # Abadi et al. 2016, Alg. 1: min(1, C / ||g||); norms 0.5, 2, 4 and 0 against C = 1.
    sq = tf.constant([0.25, 4.0, 16.0, 0.0])
    np.testing.assert_allclose(example_grads.clip_factors(sq, 1.0).numpy(),
                               [1.0, 0.5, 0.25, 1.0])
    mask = tf.constant([1.0, 0.0, 1.0, 1.0])
    np.testing.assert_allclose(example_grads.clip_factors(sq, 1.0, mask).numpy(),
                               [1.0, 0.0, 0.25, 1.0])
