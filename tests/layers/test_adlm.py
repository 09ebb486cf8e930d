"""AdLM's Keras layers in layers.adlm: behaviour, registered names, earlier saved models."""

import os

import keras
import numpy as np
import pytest

import layers
from layers import adlm as adlm_layers
from tfdp.papers.adlm import models as adlm_models

_DATA = os.path.join(os.path.dirname(__file__), "data")


def test_exported_from_layers_with_the_earlier_registered_names():
    for cls in (layers.BiasNoise, layers.CropStandardize, layers.BatchStatNorm):
        assert keras.saving.get_registered_name(cls) == f"tfdp_adlm>{cls.__name__}"
        # The AdLM model code builds with the same classes (one implementation).
        assert getattr(adlm_models, cls.__name__) is cls
    assert layers.BiasNoise is adlm_layers.BiasNoise


def test_model_saved_before_the_move_loads_and_predicts_the_same():
    # tests/layers/data/adlm_layers_before_move.{keras,npz} were written by the code that
    # defined these layers in tfdp.models.adlm (module "tfdp.models.adlm" in the config), a module
    # that no longer exists (AdLM's models are in tfdp.papers.adlm.models):
    # CropStandardize(6) -> Conv2D -> BiasNoise (offset 0.5, -1, 0.25, 2) -> BatchStatNorm.
    ref = np.load(os.path.join(_DATA, "adlm_layers_before_move.npz"))
    model = keras.saving.load_model(os.path.join(_DATA, "adlm_layers_before_move.keras"))
    kinds = {type(layer) for layer in model.layers}
    assert {layers.BiasNoise, layers.CropStandardize, layers.BatchStatNorm} <= kinds
    # The reference was computed on an Intel CPU through oneDNN's convolution; TensorFlow's own
    # (Eigen) kernels, its default on other x86 CPUs, round the sums differently (seen: 1e-6).
    np.testing.assert_allclose(model(ref["x"], training=False).numpy(), ref["y"], rtol=1e-5,
                               atol=1e-6)
    bias = model.get_layer("adlm_bias_noise")
    np.testing.assert_array_equal(bias.offset.numpy(), [0.5, -1.0, 0.25, 2.0])
    np.testing.assert_array_equal(
        bias(np.ones((1, 2, 2, 4), np.float32), training=True).numpy(), ref["bias_train"])


def test_bias_noise_applies_the_offset_only_while_training():
    layer = layers.BiasNoise(3)
    layer.offset.assign([1.0, -2.0, 0.5])
    x = np.zeros((2, 3), np.float32)
    np.testing.assert_array_equal(layer(x, training=True).numpy(), [[1.0, -2.0, 0.5]] * 2)
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x)
    assert layers.BiasNoise.from_config(layer.get_config()).channels == 3


@pytest.mark.parametrize("bad", [0, -1, 2.0, "3", None])
def test_bad_arguments_name_the_argument(bad):
    with pytest.raises(ValueError, match="channels"):
        layers.BiasNoise(bad)
    with pytest.raises(ValueError, match="size"):
        layers.CropStandardize(bad)


def test_batch_stat_norm_uses_the_batch_statistics():
    x = np.random.default_rng(0).normal(3.0, 2.0, (64, 5)).astype(np.float32)
    y = layers.BatchStatNorm(epsilon=1e-3)(x).numpy()
    # gamma = 1, beta = 0: each column has mean 0 and variance var/(var + 1e-3).
    np.testing.assert_allclose(y.mean(axis=0), 0.0, atol=1e-5)
    var = x.var(axis=0)
    np.testing.assert_allclose(y.var(axis=0), var / (var + 1e-3), rtol=1e-4)
    with pytest.raises(ValueError, match="epsilon"):
        layers.BatchStatNorm(epsilon=0.0)
