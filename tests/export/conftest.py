"""Run directories for the export tests: non-private, DP-SGD and a small PixelDP-style run."""

import keras
import pytest
import tensorflow as tf

import layers
from tfdp import data
from tfdp.train import dpsgd, loop, nonprivate
from tfdp.train.base import Method, TrainConfig

SHAPE = (28, 28, 1)
CLASSES = 10
VALUE_RANGE = (-1.0, 1.0)
# A certification entry for the PixelDP-style test method (HGM Theorem 2/3 radius).
HGM_CERT = {"mechanism": "hgm", "construction_bound": 0.1, "epsilon": 1.0, "delta": 1e-5,
            "sensitivity_sound": True}  # marked sound: the output names are "radius"/"certified"
# (test_export.py::test_unsound_certificate_outputs_are_claimed checks the claimed names)


class TinyPixelDP(Method):
    """Test method: a PixelDP-style network with robustness noise and a certification entry.

    Input -> GaussianNoise (fresh per example) -> Dense -> HeterogeneousGaussianNoise
    (drawn once, also added at inference) -> ReLU -> Dense logits. Training is plain
    cross-entropy through the noise; the ledger gets one (test) entry.
    """

    name = "tiny_pixeldp_test"

    def setup(self, data_spec, ledger, rng, strategy=None):
        ledger.add("test_entry", mechanism="gaussian", epsilon=1.0, delta=1e-5,
                   protects="training records", note="test ledger entry")

    def build_model(self, input_shape, num_classes):
        inp = keras.Input(input_shape)
        h = layers.GaussianNoise(0.2, seed=3, name="input_noise")(inp)
        h = keras.layers.Dense(12)(keras.layers.Flatten()(h))
        h = layers.HeterogeneousGaussianNoise(0.3, noise_mode="once", seed=4,
                                              name="latent_noise")(h)
        out = keras.layers.Dense(num_classes)(keras.layers.ReLU()(h))
        return keras.Model(inp, out)

    def train_step(self, ctx, x, y):
        model = self.model
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(
                nonprivate.per_example_cross_entropy(y, model(x, training=True)),
                global_batch_size=ctx.global_batch_size)
        grads = tape.gradient(loss, model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return {"loss": loss}

    def certification_config(self):
        return dict(self.config.options.get("certification") or HGM_CERT)


class LinearNoisy(TinyPixelDP):
    """Test method: GaussianNoise on the input of a linear model (logits linear in the noise)."""

    name = "linear_noisy_test"

    def build_model(self, input_shape, num_classes):
        inp = keras.Input(input_shape)
        h = layers.GaussianNoise(0.5, seed=5, name="input_noise")(inp)
        return keras.Model(inp, keras.layers.Dense(num_classes)(keras.layers.Flatten()(h)))


@pytest.fixture(scope="session")
def tiny_data():
    x_train, y_train = data.load("sample", "train", value_range=VALUE_RANGE, num_examples=1000)
    x_test, y_test = data.load("sample", "test", value_range=VALUE_RANGE, num_examples=60)
    return loop.Data(x_train, y_train, x_test, y_test, SHAPE, CLASSES)


def train_run(path, method_cls, data_, method="nonprivate", **kw):
    """Trains `method_cls` briefly into run directory `path`; returns the RunResult."""
    base = dict(method=method, dataset="sample", model_dir=str(path), epochs=3,
                batch_size=50, learning_rate=0.005, seed=7, value_range=VALUE_RANGE)
    base.update(kw)
    return loop.train(method_cls(TrainConfig(**base)), data_, verbose=0,
                      optimizer="adam",
                      flags_text=f"--method={method}\n--seed=7\n--model_dir={path}\n"
                                 "--epochs=3\n--dataset=sample\n")


@pytest.fixture(scope="session")
def pixeldp_run(tmp_path_factory, tiny_data):
    return train_run(tmp_path_factory.mktemp("pixeldp") / "run", TinyPixelDP, tiny_data,
                     method="tiny_pixeldp_test")


@pytest.fixture(scope="session")
def linear_run(tmp_path_factory, tiny_data):
    return train_run(tmp_path_factory.mktemp("linear") / "run", LinearNoisy, tiny_data,
                     method="linear_noisy_test")


@pytest.fixture(scope="session")
def nonprivate_run(tmp_path_factory, tiny_data):
    return train_run(tmp_path_factory.mktemp("nonprivate") / "run", nonprivate.NonPrivate,
                     tiny_data, options={"nonprivate_model": "mlp"})


@pytest.fixture(scope="session")
def dpsgd_run(tmp_path_factory, tiny_data):
    opts = {"dpsgd_l2_clip": 0.5, "dpsgd_noise_multiplier": 1.0, "dpsgd_model": "mlp"}
    return train_run(tmp_path_factory.mktemp("dpsgd") / "run", dpsgd.DPSGD, tiny_data,
                     method="dpsgd", delta=1e-5, options=opts, epochs=1)


@pytest.fixture(scope="session")
def pixeldp_export(tmp_path_factory, pixeldp_run):
    from tfdp import export
    return export.export_run(pixeldp_run.model_dir,
                             str(tmp_path_factory.mktemp("pixeldp_export") / "out"))
