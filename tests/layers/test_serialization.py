"""Save/load round trips of models built from the tfdp layers (.keras and tf.train.Checkpoint)."""

import os

import numpy as np
import tensorflow as tf
import keras

import layers


def _model(seed: int) -> keras.Model:
    inp = keras.Input((8, 8, 3))
    x = layers.LaplaceNoise(np.linspace(0.1, 0.3, 3), noise_mode="once", shared_axes=None,
                            batch_divisor=2.0, seed=seed, name="input_noise")(inp)
    x = keras.layers.Conv2D(6, 3, padding="same")(x)
    x = layers.HeterogeneousGaussianNoise(0.5, np.full((8, 8, 6), 1 / 384), noise_mode="once",
                                          seed=seed + 1, name="hgm")(x)
    x = keras.layers.ReLU()(x)
    x = layers.BoundedLRN(name="lrn")(x)
    x = layers.GaussianNoise(0.2, noise_mode="per_example", seed=seed + 2, name="gauss")(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(5)(x)
    x = layers.MinMaxBound(name="minmax")(x)
    x = layers.Clip(0.0, 1.0, name="clip")(x)
    x = layers.LaplaceNoise(0.1, noise_mode="per_batch", seed=seed + 3, name="latent")(x)
    return keras.Model(inp, keras.layers.Dense(3)(x))


def test_keras_round_trip_identical_outputs_and_once_noise(tmp_path):
    model = _model(seed=1)
    x = tf.random.stateless_uniform((4, 8, 8, 3), seed=[3, 4])
    model(x, training=True)  # advance the draw counters
    path = os.path.join(tmp_path, "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(model.predict(x, verbose=0), loaded.predict(x, verbose=0))
    for name in ("input_noise", "hgm"):
        np.testing.assert_array_equal(model.get_layer(name).fixed_noise.numpy(),
                                      loaded.get_layer(name).fixed_noise.numpy())
    for name in ("gauss", "latent"):
        assert int(loaded.get_layer(name).draw_counter.numpy()) == 1
    for layer in model.layers:
        if layer.name in ("input_noise", "hgm", "lrn", "gauss", "minmax", "clip", "latent"):
            assert loaded.get_layer(layer.name).get_config() == layer.get_config()
    # Same seed and counter: the restored per-example stream continues identically.
    np.testing.assert_array_equal(model(x, training=True), loaded(x, training=True))


def test_inference_noise_flag_survives_save(tmp_path):
    inp = keras.Input((4,))
    out = layers.LaplaceNoise(1.0, seed=1, inference_noise=True)(inp)
    model = keras.Model(inp, out)
    path = os.path.join(tmp_path, "n.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.layers[1].inference_noise is True


def test_checkpoint_restore_never_redraws(tmp_path):
    # Design principle 3 / StoBatch's noise drawn once: a restore brings back the stored draw.
    model = _model(seed=1)
    x = tf.zeros((2, 8, 8, 3))
    model(x)
    ckpt = tf.train.Checkpoint(model=model)
    path = ckpt.save(os.path.join(tmp_path, "ckpt"))
    other = _model(seed=50)  # a different seed draws different noise when built
    other(x)
    before = other.get_layer("input_noise").fixed_noise.numpy()
    assert not np.array_equal(before, model.get_layer("input_noise").fixed_noise.numpy())
    tf.train.Checkpoint(model=other).restore(path).assert_existing_objects_matched()
    for name in ("input_noise", "hgm"):
        np.testing.assert_array_equal(other.get_layer(name).fixed_noise.numpy(),
                                      model.get_layer(name).fixed_noise.numpy())
    np.testing.assert_array_equal(other.predict(x, verbose=0), model.predict(x, verbose=0))


def test_saved_model_export_clean_and_noisy(tmp_path):
    inp = keras.Input((6,))
    h = layers.LaplaceNoise(1.0, noise_mode="once", seed=1)(inp)
    h = keras.layers.Dense(4)(h)
    out = layers.HeterogeneousGaussianNoise(0.5, np.full(4, 0.25), seed=2)(h)
    model = keras.Model(inp, out)
    x = np.ones((3, 6), np.float32)
    model.export(os.path.join(tmp_path, "clean"), verbose=False)
    clean = tf.saved_model.load(os.path.join(tmp_path, "clean"))
    np.testing.assert_array_equal(clean.serve(x), model.predict(x, verbose=0))
    # With inference noise on, the exported function draws fresh noise on every call.
    layers.set_inference_noise(model, True)
    model.export(os.path.join(tmp_path, "noisy"), verbose=False)
    noisy = tf.saved_model.load(os.path.join(tmp_path, "noisy"))
    assert not np.allclose(noisy.serve(x), noisy.serve(x))
