"""Shared training loop: strategies agree, interrupted+resumed runs equal uninterrupted ones."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import layers
from tfdp import mechanisms, rundir
from tfdp.train import dpsgd, loop, nonprivate
from tfdp.train.base import Method, TrainConfig

_SHAPE = (6, 6, 1)
_CLASSES = 3


@pytest.fixture(scope="module")
def tiny_data(synthetic_data):
    return synthetic_data(_SHAPE, _CLASSES, num_train=96, num_test=40, seed=0)


def _mirrored():
    devices = tf.config.list_logical_devices("CPU")
    assert len(devices) == 2, "tests/conftest.py configures two logical CPUs"
    return loop.cpu_mirrored_strategy()


def _config(tmp_path, name, method="nonprivate", **kw):
    base = dict(method=method, dataset="synthetic", model_dir=str(tmp_path / name), epochs=2,
                batch_size=16, learning_rate=0.05, seed=7)
    base.update(kw)
    return TrainConfig(**base)


def _weights(model):
    return [np.asarray(w) for w in model.get_weights()]


class _OnceNoiseMethod(Method):
    """Test method: input noise drawn once (layers.LaplaceNoise "once") + fresh per-step noise.

    The once-noise layer is seeded from options["noise_seed"]; a resumed run gets a different
    seed, so its freshly built layer holds different noise unless the checkpoint restores it.
    The per-step Gaussian noise on the gradients comes from the loop's step seed, so a resumed
    run only matches when the run's generator state is restored too.
    """

    name = "once_noise_test"
    # noise_seed may change on resume: the test shows the restored noise wins over it.
    resume_mutable_flags = ("epochs", "noise_seed")

    def setup(self, data_spec, ledger, rng, strategy=None):
        ledger.add("test_noise", mechanism="laplace", epsilon=0.5, protects="training records")

    def build_model(self, input_shape, num_classes):
        inputs = keras.Input(input_shape)
        h = layers.LaplaceNoise(0.3, noise_mode="once", seed=self.config.options["noise_seed"],
                                name="once")(inputs)
        h = keras.layers.Flatten()(h)
        return keras.Model(inputs, keras.layers.Dense(num_classes)(h))

    def train_step(self, ctx, x, y):
        model, global_batch_size = self.model, ctx.global_batch_size
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(
                nonprivate.per_example_cross_entropy(y, model(x, training=True)),
                global_batch_size=global_batch_size)
        grads = tape.gradient(loss, model.trainable_variables)
        first = ctx.first_replica_mask()
        grads = [g + first * mechanisms.tf_gaussian(tf.shape(g), 0.01, seed=ctx.step_seed(i))
                 / global_batch_size for i, g in enumerate(grads)]
        self.optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return {"loss": loss}


def test_mirrored_matches_single_device_nonprivate(tmp_path, tiny_data):
    opts = {"nonprivate_model": "mlp"}
    one = loop.train(nonprivate.NonPrivate(_config(tmp_path, "one", options=opts)), tiny_data,
                     verbose=0)
    two = loop.train(nonprivate.NonPrivate(_config(tmp_path, "two", options=opts)), tiny_data,
                     strategy=_mirrored(), verbose=0)
    assert one.steps == two.steps == 2 * (96 // 16)
    w1, w2 = _weights(one.model), _weights(two.model)
    # The initial weights are not the trained ones (the test would be vacuous otherwise).
    assert max(np.abs(a).max() for a in w1) > 0
    for a, b in zip(w1, w2):
        # float32 sums in a different order: differences of a few ulp per step.
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4)
    assert one.metrics["test_accuracy"] == pytest.approx(two.metrics["test_accuracy"], abs=0.03)


@pytest.mark.parametrize("sampling", ["shuffle", "poisson"])
def test_mirrored_matches_single_device_dpsgd(tmp_path, tiny_data, sampling):
    opts = {"dpsgd_l2_clip": 0.5, "dpsgd_noise_multiplier": 1.0, "dpsgd_model": "mlp",
            "dpsgd_sampling": sampling}
    kw = dict(method="dpsgd", delta=1e-5, options=opts, epochs=1)
    one = loop.train(dpsgd.DPSGD(_config(tmp_path, "one", **kw)), tiny_data, verbose=0)
    two = loop.train(dpsgd.DPSGD(_config(tmp_path, "two", **kw)), tiny_data,
                     strategy=_mirrored(), verbose=0)
    for a, b in zip(_weights(one.model), _weights(two.model)):
        np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4)
    assert one.ledger == two.ledger
    if sampling == "poisson":
        return
    # Noise was really added: a run with another seed ends elsewhere.
    other = loop.train(dpsgd.DPSGD(_config(tmp_path, "other", seed=8, **kw)), tiny_data,
                       verbose=0)
    assert max(np.abs(a - b).max() for a, b in zip(_weights(one.model),
                                                    _weights(other.model))) > 1e-3


def test_interrupted_and_resumed_equals_uninterrupted(tmp_path, tiny_data):
    cfg = dict(epochs=3, options={"noise_seed": 11})
    full = loop.train(_OnceNoiseMethod(_config(tmp_path, "full", **cfg)), tiny_data, verbose=0)

    first = loop.train(_OnceNoiseMethod(_config(tmp_path, "cut", **cfg)), tiny_data,
                       stop_after_epochs=1, verbose=0)
    assert first.interrupted and first.epochs_completed == 1
    assert not os.path.exists(os.path.join(first.model_dir, rundir.METRICS_FILE))
    once_before = np.asarray(first.model.get_layer("once").fixed_noise.numpy())
    with open(os.path.join(first.model_dir, rundir.LEDGER_FILE)) as f:
        ledger_before = json.load(f)

    resumed_method = _OnceNoiseMethod(_config(tmp_path, "cut", epochs=3,
                                              options={"noise_seed": 12345}))
    resumed = loop.train(resumed_method, tiny_data, resume=True, verbose=0)
    assert not resumed.interrupted and resumed.epochs_completed == 3
    assert resumed.steps == full.steps == 3 * (96 // 16)

    # Noise drawn once is restored, never redrawn (a fresh layer with seed 12345 differs).
    once_resumed = resumed.model.get_layer("once").fixed_noise.numpy()
    fresh = layers.LaplaceNoise(0.3, noise_mode="once", seed=12345)
    fresh.build((None,) + _SHAPE)
    assert np.abs(fresh.fixed_noise.numpy() - once_before).max() > 1e-3
    np.testing.assert_array_equal(once_resumed, once_before)
    np.testing.assert_array_equal(once_resumed, full.model.get_layer("once").fixed_noise.numpy())
    # Same weights (same batches, same per-step noise stream), bit for bit.
    for a, b in zip(_weights(full.model), _weights(resumed.model)):
        np.testing.assert_array_equal(a, b)
    # The ledger is not double-counted.
    assert resumed.ledger == full.ledger == ledger_before
    assert resumed.ledger["epsilon"] == pytest.approx(0.5)
    metrics = json.load(open(os.path.join(resumed.model_dir, rundir.METRICS_FILE)))
    assert metrics["epochs_completed"] == 3


# Poisson lots vary in size; with ghost / auto clipping (auto is the default) the loop pads
# each lot to a bucket size and runs that bucket's static-shape graph, traced the same way on
# a first run and on a resume; the vectorized path keeps tracing as lots arrive. A resumed run
# must equal the uninterrupted one bit for bit on every path.
@pytest.mark.parametrize("model,clipping", [("mlp", None), ("cnn", "auto"),
                                            ("mlp", "vectorized")])
def test_dpsgd_resume_keeps_noise_stream_and_budget(tmp_path, tiny_data, model, clipping):
    opts = {"dpsgd_l2_clip": 1.0, "dpsgd_noise_multiplier": 1.1, "dpsgd_model": model,
            "dpsgd_sampling": "poisson"}
    if clipping is not None:  # None: the default (auto)
        opts["dpsgd_clipping"] = clipping
    kw = dict(method="dpsgd", delta=1e-5, epochs=2, options=opts)
    full = loop.train(dpsgd.DPSGD(_config(tmp_path, "full", **kw)), tiny_data, verbose=0)
    loop.train(dpsgd.DPSGD(_config(tmp_path, "cut", **kw)), tiny_data, stop_after_epochs=1,
               verbose=0)
    resumed = loop.train(dpsgd.DPSGD(_config(tmp_path, "cut", **kw)), tiny_data, resume=True,
                         verbose=0)
    for a, b in zip(_weights(full.model), _weights(resumed.model)):
        np.testing.assert_array_equal(a, b)
    # Same executed computation: the resume continues the first segment, so the ledger is
    # the uninterrupted run's, entry for entry (issue 43).
    assert len(resumed.ledger["entries"]) == 1
    segs = resumed.ledger["entries"][0]["segments"]
    assert [(s["start_step"], s["steps"]) for s in segs] == [(0, 12)]
    assert full.ledger["entries"][0]["segments"][0]["steps"] == 12
    assert resumed.ledger == full.ledger


def test_run_directory_contents(tmp_path, tiny_data):
    res = loop.train(nonprivate.NonPrivate(_config(tmp_path, "run", epochs=1,
                                                   options={"nonprivate_model": "mlp"})),
                     tiny_data, flags_text="--method=nonprivate\n", verbose=0)
    rd = rundir.RunDir(res.model_dir)
    for name in (rundir.FLAGS_FILE, rundir.CONFIG_FILE, rundir.LEDGER_FILE, rundir.METRICS_FILE,
                 rundir.MODEL_FILE, rundir.CHECKPOINT_DIR, rundir.TENSORBOARD_DIR):
        assert rd.exists(name), name
    config = rd.read_json(rundir.CONFIG_FILE)
    for key in ("method", "dataset", "data_dir", "value_range", "input_shape", "num_classes",
                "noise_seed", "certification"):
        assert key in config
    # The seed itself stays in the checkpoint; config.json only says where the noise came from.
    assert "seed" not in config and config["noise_seed"] == "user_supplied"
    assert config["input_shape"] == list(_SHAPE)
    metrics = rd.read_json(rundir.METRICS_FILE)
    assert set(metrics) >= {"test_accuracy", "epochs_completed", "seconds", "segments",
                            loop.NONPRIVATE_STATS_KEY}
    assert "train_loss" not in metrics  # non-private statistics live under their own key
    stats = metrics[loop.NONPRIVATE_STATS_KEY]
    assert stats["privatized"] is False and stats["train_loss"] is not None
    assert 0.0 <= metrics["test_accuracy"] <= 1.0
    ledger = rd.read_json(rundir.LEDGER_FILE)
    assert ledger["entries"] == [] and ledger["epsilon"] == "inf" and not ledger["guarantee"]
    assert "no differential-privacy guarantee" in ledger["note"]
    assert ledger["noise_seed"] == "user_supplied"
    # model.keras maps inputs to the same logits as the trained model.
    loaded = keras.saving.load_model(rd.file(rundir.MODEL_FILE))
    np.testing.assert_allclose(loaded(tiny_data.x_test[:5]), res.model(tiny_data.x_test[:5]),
                               atol=1e-6)
    tags = set()
    for name in os.listdir(rd.file(rundir.TENSORBOARD_DIR)):
        for event in tf.compat.v1.train.summary_iterator(
                os.path.join(rd.file(rundir.TENSORBOARD_DIR), name)):
            tags.update(v.tag for v in event.summary.value
                        if v.metadata.plugin_data.plugin_name == "scalars")
    assert {"nonprivate_train/loss", "nonprivate_train/accuracy", "test/accuracy"} <= tags
    assert not {"train/loss", "train/accuracy"} & tags
    # An existing run directory without resume is refused before any work.
    with pytest.raises(ValueError, match="model_dir"):
        loop.train(nonprivate.NonPrivate(_config(tmp_path, "run", epochs=1)), tiny_data,
                   verbose=0)
    with pytest.raises(ValueError, match="resume"):
        loop.train(nonprivate.NonPrivate(_config(tmp_path, "nothing")), tiny_data, resume=True,
                   verbose=0)


def test_setup_rejection_happens_before_any_file(tmp_path, tiny_data):
    opts = {"dpsgd_noise_multiplier": 0.3, "dpsgd_model": "mlp"}
    method = dpsgd.DPSGD(_config(tmp_path, "run", method="dpsgd", epsilon=0.01, delta=1e-5,
                                 options=opts))
    with pytest.raises(loop.SetupError, match="--dpsgd_noise_multiplier"):
        loop.train(method, tiny_data, verbose=0)
    assert not os.path.exists(tmp_path / "run")
