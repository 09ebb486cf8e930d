"""tfdp.keras.make_private / DPModel: fit under DP-SGD, the ledger, refusals."""

import json
import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdp.keras as tk
from tfdp import accounting
from tfdp.keras import model as model_lib
from tfdp.train import base

L = keras.layers
RNG = np.random.default_rng(0)
X = RNG.normal(size=(400, 6, 6, 1)).astype(np.float32)
Y = (X.reshape(400, -1)[:, 0] > 0).astype(np.int32)


def _cnn(name="cnn"):
    return keras.Sequential([keras.Input((6, 6, 1)), L.Conv2D(4, 3, activation="relu"),
                             L.GroupNormalization(groups=2), L.Flatten(), L.Dense(2)],
                            name=name)


def _compile(dp, lr=0.05):
    dp.compile(optimizer=keras.optimizers.SGD(lr),
               loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
               metrics=["accuracy"])
    return dp


def test_fit_spends_the_target_and_writes_the_run_dir(tmp_path):
    run_dir = str(tmp_path / "run")
    model = _cnn()
    dp = _compile(tk.make_private(model, epsilon=2.0, delta=1e-5, epochs=2, batch_size=50,
                                  seed=12345, run_dir=run_dir))
    history = dp.fit(X, Y, verbose=0)
    assert dp.steps == 2 * (400 // 50)
    ledger = dp.ledger()
    want = accounting.dpsgd_epsilon(num_examples=400, batch_size=50,
                                    noise_multiplier=dp.noise_multiplier, steps=16, delta=1e-5)
    assert ledger["epsilon"] == pytest.approx(want)
    assert 1.9 < ledger["epsilon"] <= 2.0
    assert ledger["guarantee"] and ledger["noise_seed"] == "user_supplied"
    assert "covers" in ledger and ledger["entries"][0]["segments"][0]["steps"] == 16
    eps = history.history["epsilon"]
    assert len(eps) == 2 and eps[0] < eps[1] and eps[1] >= ledger["epsilon"]
    with open(os.path.join(run_dir, "ledger.json"), encoding="utf-8") as f:
        on_disk = json.load(f)
    assert on_disk["epsilon"] == pytest.approx(ledger["epsilon"])
    assert "12345" not in json.dumps(on_disk)  # the run key never leaves the process
    assert os.listdir(os.path.join(run_dir, "tensorboard"))
    # evaluate / predict are the wrapped model's.
    np.testing.assert_allclose(dp.predict(X[:20], verbose=0), model.predict(X[:20], verbose=0),
                               rtol=1e-6)
    assert len(dp.evaluate(X, Y, verbose=0)) == 2
    # No seed-derived state among the weights that Keras saves.
    assert len(dp.weights) == len(model.weights)


def test_budget_is_never_exceeded_by_another_fit():
    dp = _compile(tk.make_private(_cnn(), epsilon=2.0, epochs=1, batch_size=50, seed=1))
    dp.fit(X, Y, verbose=0)
    before = [w.numpy().copy() for w in dp.inner.weights]
    with pytest.raises(ValueError, match="^epochs:"):
        dp.fit(X, Y, epochs=1, verbose=0)
    for b, w in zip(before, dp.inner.weights):
        np.testing.assert_array_equal(b, w.numpy())


def test_same_seed_same_weights_other_seed_differs():
    def run(seed):
        keras.utils.set_random_seed(0)
        dp = _compile(tk.make_private(_cnn(), noise_multiplier=1.0, epochs=1, batch_size=50,
                                      seed=seed))
        dp.fit(X, Y, verbose=0)
        return [w.numpy() for w in dp.inner.trainable_weights]

    a, b, c = run(7), run(7), run(8)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    assert any(not np.array_equal(u, w) for u, w in zip(a, c))


def test_each_step_trains_on_its_keyed_poisson_lot_gathered_by_position():
    """Every step's rows are the training rows at the lot's positions (the lots of epoch e
    drawn from the run key and e), padded with zero rows of position -1."""
    dp = _compile(tk.make_private(_cnn(), noise_multiplier=1.0, epochs=2, batch_size=50,
                                  seed=5))
    seen, original = [], dp.train_step

    def spy(data):
        def record(xv, yv, pv):
            seen.append((xv.copy(), yv.copy(), pv.copy()))
            return np.int64(0)
        tf.numpy_function(record, list(data), tf.int64)
        return original(data)

    object.__setattr__(dp, "train_step", spy)
    dp.fit(X, Y, verbose=0)
    assert len(seen) == 2 * 8
    stream = model_lib._STREAM_LOTS  # pylint: disable=protected-access
    for epoch in range(2):
        rng = np.random.default_rng(base.derive_seed(dp._run_key, stream, epoch))  # pylint: disable=protected-access
        for lot, (xv, yv, pv) in zip(base.poisson_lots(400, 50, rng), seen[8 * epoch:]):
            k = len(lot)
            assert len(pv) == base.lot_bucket(k, 50)
            np.testing.assert_array_equal(pv[:k], lot)
            np.testing.assert_array_equal(xv[:k], X[lot])
            np.testing.assert_array_equal(yv[:k], Y[lot])
            assert (pv[k:] == -1).all() and not xv[k:].any() and not yv[k:].any()


def test_noise_has_the_calibrated_scale():
    # Zero inputs and no bias: the clipped sum of the kernel is exactly 0, so one SGD step
    # with learning rate 1 moves the kernel by -noise / m, noise ~ N(0, (sigma C)^2).
    x = np.zeros((400, 40), np.float32)
    y = RNG.integers(0, 25, 400).astype(np.int32)
    model = keras.Sequential([keras.Input((40,)), L.Dense(25, use_bias=False)])
    sigma, clip, m = 3.0, 2.0, 400
    dp = _compile(tk.make_private(model, noise_multiplier=sigma, l2_clip=clip, epochs=1,
                                  batch_size=m, seed=3), lr=1.0)
    before = model.trainable_weights[0].numpy().copy()
    dp.fit(x, y, verbose=0)
    assert dp.steps == 1
    step = (model.trainable_weights[0].numpy() - before) * m
    assert abs(step.mean()) < 0.15 * sigma * clip
    assert step.std() == pytest.approx(sigma * clip, rel=0.08)


class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.emb = L.Embedding(20, 4)
        self.norm = L.LayerNormalization()
        self.flat = L.Flatten()
        self.out = L.Dense(2)

    def call(self, inputs, training=False):
        return self.out(self.flat(self.norm(self.emb(inputs))))


def test_subclassed_model_from_a_tf_data_source():
    x = RNG.integers(0, 20, size=(300, 5)).astype(np.int32)
    y = (x[:, 0] > 9).astype(np.int32)
    dp = _compile(tk.make_private(Net(), noise_multiplier=0.5, epochs=2, batch_size=30, seed=2),
                  lr=0.5)
    dp.fit(tf.data.Dataset.from_tensor_slices((x, y)), verbose=0)
    assert dp.steps == 20
    assert math.isfinite(dp.epsilon())


def test_batchnorm_refused_in_one_line():
    model = keras.Sequential([keras.Input((4,)), L.Dense(4), L.BatchNormalization(name="bn"),
                              L.Dense(2)])
    with pytest.raises(ValueError) as err:
        tk.make_private(model, epsilon=1.0, epochs=1, batch_size=10)
    assert "\n" not in str(err.value) and "'bn' (BatchNormalization)" in str(err.value)
    assert "GroupNormalization" in str(err.value)


@pytest.mark.parametrize("kwargs,name", [
    (dict(epsilon=-1.0, epochs=1, batch_size=10), "epsilon"),
    (dict(epsilon=1.0, batch_size=10), "epochs"),
    (dict(epsilon=1.0, epochs=1, batch_size=0), "batch_size"),
    (dict(epsilon=1.0, epochs=1, batch_size=10, delta=1.0), "delta"),
    (dict(epsilon=1.0, epochs=1, batch_size=10, l2_clip=0.0), "l2_clip"),
    (dict(epsilon=1.0, epochs=1, batch_size=10, accountant="moments"), "accountant"),
    (dict(epsilon=1.0, noise_multiplier=1.0, epochs=1, batch_size=10), "noise_multiplier"),
])
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        tk.make_private(_cnn(), **kwargs)


def test_fit_refuses_keras_batching_arguments():
    dp = _compile(tk.make_private(_cnn(), epsilon=1.0, epochs=1, batch_size=50))
    with pytest.raises(ValueError, match="^batch_size:"):
        dp.fit(X, Y, batch_size=32)
    with pytest.raises(ValueError, match="^batch_size:"):
        _compile(tk.make_private(_cnn(), epsilon=1.0, epochs=1, batch_size=500)).fit(X, Y)
    assert dp.steps == 0 and not dp.ledger()["guarantee"]


def _dense(regularizer=None, activity=None, name="dense_net"):
    return keras.Sequential([keras.Input((6, 6, 1)), L.Flatten(),
                             L.Dense(2, kernel_regularizer=regularizer,
                                     activity_regularizer=activity, name="out")], name=name)


def test_weight_regularizer_gradient_is_added_after_the_noise():
    """One step with an L2 kernel penalty moves the kernel by exactly -lr * 2 * lam * w0 more
    than the same step (same lots, same noise) without it."""
    lam, lr = 0.1, 0.05
    plain, reg = _dense(), _dense(keras.regularizers.L2(lam))
    reg.set_weights(plain.get_weights())
    w0 = plain.get_weights()[0].copy()
    for model in (plain, reg):
        dp = _compile(tk.make_private(model, noise_multiplier=1.0, batch_size=400, seed=3), lr)
        dp.fit(X, Y, epochs=1, verbose=0)
        assert dp.steps == 1
    np.testing.assert_allclose(reg.get_weights()[0] - plain.get_weights()[0],
                               -lr * 2 * lam * w0, atol=1e-6)
    np.testing.assert_allclose(reg.get_weights()[1], plain.get_weights()[1], atol=1e-7)


class _AddsLoss(L.Layer):
    def call(self, inputs):
        self.add_loss(tf.reduce_mean(inputs ** 2))
        return inputs


@pytest.mark.parametrize("build,name", [
    (lambda: _dense(activity=keras.regularizers.L2(0.1)), "'out' has an activity_regularizer"),
    (lambda: keras.Sequential([keras.Input((6, 6, 1)), _AddsLoss(name="adds"), L.Flatten(),
                               L.Dense(2)]), "'adds' adds a loss in call"),
])
def test_data_dependent_losses_refused_before_training(build, name):
    model = build()
    before = [w.copy() for w in model.get_weights()]
    dp = _compile(tk.make_private(model, noise_multiplier=1.0, batch_size=50, seed=0))
    with pytest.raises(ValueError, match=name):
        dp.fit(X, Y, epochs=1, verbose=0)
    assert dp.steps == 0
    for b, w in zip(before, model.get_weights()):
        np.testing.assert_array_equal(b, w)
