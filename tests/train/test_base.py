"""The method interface: DataSpec in setup, build(), batches() pairs, StepContext per replica."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdp.train import base, loop, nonprivate
from tfdp.train.base import DataSpec, Method, StepContext, TrainConfig

_SHAPE = (4, 4, 1)
_CLASSES = 3


@pytest.fixture(scope="module")
def tiny_data(synthetic_data):
    return synthetic_data(_SHAPE, _CLASSES, num_train=48, num_test=12, seed=1)


def _cfg(tmp_path, name, **kw):
    base_kw = dict(method=name, dataset="synthetic", model_dir=str(tmp_path / name), epochs=1,
                   batch_size=8, learning_rate=0.05, seed=3)
    base_kw.update(kw)
    return TrainConfig(**base_kw)


class _Probe(nonprivate.NonPrivate):
    """Non-private training that records what the run handed to its hooks."""

    name = "probe_test"

    def setup(self, data_spec, ledger, rng, strategy=None):
        self.seen_spec, self.seen_strategy = data_spec, strategy

    def train_step(self, ctx, x, y):
        metrics = super().train_step(ctx, x, y)
        # x must be the training rows at ctx.indices (summed across replicas: 0 mismatches).
        rows = tf.gather(tf.constant(self.data_spec.x_train), ctx.indices)
        metrics["mismatch"] = tf.reduce_sum(tf.abs(rows - x))
        metrics["records"] = tf.cast(tf.size(ctx.indices), tf.float32)
        metrics["replicas"] = tf.constant(1.0)
        metrics["first"] = ctx.first_replica_mask()
        metrics["replica_id"] = tf.cast(ctx.replica_id, tf.float32)
        metrics["global_batch"] = float(ctx.global_batch_size) / ctx.num_replicas
        return metrics


class _Pairs(_Probe):
    """Yields (benign, adversarial) index pairs: even positions first, odd positions second."""

    name = "pairs_test"

    def batches(self, epoch, rng):
        order = rng.permutation(self.data_spec.num_train // 2)[:8]
        for i in range(0, 8, 4):  # two steps of 4 + 4 records
            yield 2 * order[i:i + 4], 2 * order[i:i + 4] + 1

    def train_step(self, ctx, x, y):
        metrics = super().train_step(ctx, x, y)
        half = tf.shape(ctx.indices)[0] // 2  # default strategy: the whole batch
        metrics["benign_odd"] = tf.cast(tf.reduce_sum(ctx.indices[:half] % 2), tf.float32)
        metrics["adversarial_odd"] = tf.cast(tf.reduce_sum(ctx.indices[half:] % 2), tf.float32)
        return metrics


def test_setup_gets_the_data_spec_and_strategy(tmp_path, tiny_data):
    method = _Probe(_cfg(tmp_path, "spec", value_range=(0.0, 1.0)))
    loop.train(method, tiny_data, verbose=0)
    spec = method.seen_spec
    assert spec == DataSpec(_SHAPE, _CLASSES, (0.0, 1.0), 48, "synthetic")
    assert spec.x_train is method.data_spec.x_train and spec.y_train.shape == (48,)
    assert method.seen_strategy is tf.distribute.get_strategy()
    with pytest.raises(dataclasses_error()):
        spec.num_train = 3  # frozen


def dataclasses_error():
    import dataclasses  # pylint: disable=import-outside-toplevel
    return dataclasses.FrozenInstanceError


def test_step_context_in_the_run_default_strategy(tmp_path, tiny_data):
    res = loop.train(_Probe(_cfg(tmp_path, "ctx")), tiny_data, verbose=0)
    last = res.metrics[loop.NONPRIVATE_STATS_KEY]["last_epoch"]
    assert last == {"mismatch": 0.0, "records": 8.0, "replicas": 1.0, "first": 1.0,
                    "replica_id": 0.0, "global_batch": 8.0}


def test_step_context_in_the_run_two_replicas(tmp_path, tiny_data):
    strategy = loop.cpu_mirrored_strategy()
    assert strategy.num_replicas_in_sync == 2  # tests/conftest.py: two logical CPUs
    res = loop.train(_Probe(_cfg(tmp_path, "ctx2")), tiny_data, strategy=strategy, verbose=0)
    last = res.metrics[loop.NONPRIVATE_STATS_KEY]["last_epoch"]
    # Summed over the replicas: ids 0 + 1, one first replica, each its half of the records.
    assert last == {"mismatch": 0.0, "records": 8.0, "replicas": 2.0, "first": 1.0,
                    "replica_id": 1.0, "global_batch": 8.0}


def test_step_context_contents_per_replica():
    strategy = loop.cpu_mirrored_strategy()
    seed = tf.constant([11, 12], tf.int64)
    ds = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices(tf.range(8, dtype=tf.int64)).batch(8))
    indices = next(iter(ds))

    static = []  # the Python-valued fields, seen while tracing each replica

    @tf.function
    def run(idx):
        def fn(i):
            ctx = StepContext.current(seed, 8, i)
            static.append((ctx.num_replicas, ctx.global_batch_size))
            return (ctx.replica_id, tf.identity(ctx.step_seed()), ctx.step_seed(5),
                    ctx.replica_seed(5),
                    ctx.is_first_replica(), ctx.indices)
        return strategy.run(fn, args=(idx,))

    out = [[t.numpy() for t in strategy.experimental_local_results(part)]
           for part in run(indices)]
    rid, s0, s5, r5, first, idx = out
    assert list(rid) == [0, 1] and set(static) == {(2, 8)}
    np.testing.assert_array_equal(s0[0], [11, 12])
    np.testing.assert_array_equal(s0[0], s0[1])  # the step seed is shared
    np.testing.assert_array_equal(s5[0], s5[1])
    assert not np.array_equal(s5[0], s0[0])  # salted
    assert not np.array_equal(r5[0], r5[1])  # per-replica seeds differ
    np.testing.assert_array_equal(r5[0], base.replica_seed(s5[0], 0).numpy())
    assert list(first) == [True, False]
    np.testing.assert_array_equal(np.concatenate(idx), np.arange(8))  # each its own records


def test_batches_may_yield_pairs(tmp_path, tiny_data):
    res = loop.train(_Pairs(_cfg(tmp_path, "pairs")), tiny_data, verbose=0)
    assert res.steps == 2
    last = res.metrics[loop.NONPRIVATE_STATS_KEY]["last_epoch"]
    # The pair is concatenated in order: the benign half even, the adversarial half odd.
    assert last["benign_odd"] == 0.0 and last["adversarial_odd"] == 4.0
    assert last["mismatch"] == 0.0 and last["records"] == 8.0


def test_epoch_batches_are_seeded_by_the_run_key(tiny_data):
    def batches(key, epoch, schedule):
        class M(_Probe):
            def batch_schedule(self):
                return schedule
        m = M(TrainConfig("m", "synthetic", "/unused", batch_size=8))
        m.attach(DataSpec.of(tiny_data.x_train, tiny_data.y_train, _CLASSES), None,
                 loop.derive_seed(key, 3))
        return [b.tolist() for b in loop.epoch_batches(m, key, epoch)]

    for schedule in ("shuffle", "fixed", "poisson"):
        assert batches(5, 0, schedule) == batches(5, 0, schedule)
        assert batches(5, 0, schedule) != batches(5, 1, schedule)
    fixed = batches(5, 0, "fixed")
    assert sorted(fixed) == sorted(batches(5, 1, "fixed"))  # same blocks, another order
    with pytest.raises(ValueError, match="batch_schedule.*'sometimes'"):
        batches(5, 0, "sometimes")


class _NoModel(Method):
    name = "no_model_test"

    def build(self):
        return {"net": keras.Sequential([keras.layers.Flatten(), keras.layers.Dense(2)])}

    def train_step(self, ctx, x, y):
        return {}


def test_build_without_model_is_an_error(tmp_path, tiny_data):
    with pytest.raises(ValueError, match="build: _NoModel returned no 'model'"):
        loop.train(_NoModel(_cfg(tmp_path, "nm")), tiny_data, verbose=0)


def test_data_spec_of_checks_its_arguments():
    x, y = np.zeros((5, 2), np.float32), np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="y_train"):
        DataSpec.of(x, y, 2)
    with pytest.raises(ValueError, match="num_classes"):
        DataSpec.of(x, np.zeros(5), 0)
    spec = DataSpec.of(x, np.zeros(5), 2, value_range=(0, 1), dataset="d")
    assert (spec.input_shape, spec.num_train, spec.value_range) == ((2,), 5, (0.0, 1.0))


def test_default_build_needs_attach():
    with pytest.raises(RuntimeError, match="attach"):
        nonprivate.NonPrivate(TrainConfig("nonprivate", "synthetic", "/unused")).build()


class _ScoresClassZero(nonprivate.NonPrivate):
    """Reports the test accuracy of a stand-in that always predicts class 0."""

    name = "class_zero_test"

    def accuracy_model(self, model):
        def predict_zero(x, training=False):
            del training
            return tf.one_hot(tf.zeros(tf.shape(x)[:1], tf.int32), _CLASSES) + 0.0 * tf.reduce_sum(
                model(x, training=False))
        return predict_zero


def test_accuracy_model_is_what_the_run_reports(tmp_path, tiny_data):
    lines = []
    cfg = _cfg(tmp_path, "class_zero_test", epochs=2)
    result = loop.train(_ScoresClassZero(cfg), tiny_data, verbose=1, print_fn=lines.append)
    want = float(np.mean(np.asarray(tiny_data.y_test) == 0))
    # The trained model itself scores otherwise, so the number shows which one was scored.
    assert loop.evaluate_accuracy(result.model, tiny_data.x_test, tiny_data.y_test) != want
    assert result.metrics["test_accuracy"] == pytest.approx(want)
    epoch_one = [ln for ln in lines if ln.startswith("epoch 1/2")]
    assert epoch_one and f"test acc {want:.4f}" in epoch_one[0]
    default = Method.accuracy_model(_ScoresClassZero(cfg), result.model)
    assert default is result.model  # the base hook scores the model itself
