"""Shared privatiser: the ghost / image-patch clipping paths give the vectorized clipped sum."""

import numpy as np
import pytest
import tensorflow as tf

import keras
import layers as tfdp_layers
from layers import noise_streams
from tfdp.models import common
from tfdp.papers.adlm import models as adlm
from tfdp.train import dpsgd, ghost, privatize
from tfdp.train.base import StepContext, TrainConfig
from tfdp.train.nonprivate import build_baseline_model, per_example_cross_entropy

RTOL = 1e-5  # the bound: same clipped sum up to float32 rounding


def _loss_fn(model):
    """Cross-entropy weighted 10^-3, 1 or 10^3 by the label (mod 3), so that one batch holds
    gradient norms far below and far above any middle clip bound."""
    def example_loss(xi, yi):
        logits = model(xi, training=True)
        weight = tf.pow(10.0, 3.0 * (tf.cast(yi[0] % 3, tf.float32) - 1.0))
        return weight * per_example_cross_entropy(yi, logits)[0], logits
    return example_loss


def _data(shape, batch=6, classes=10, seed=0):
    x = tf.random.stateless_uniform((batch,) + tuple(shape), [seed, 1], minval=-1, maxval=1)
    y = tf.constant(np.arange(batch) % classes, tf.int64)
    return x, y


def _assert_same_sum(model, x, y, methods=("ghost", "auto"), expect_plan=True):
    """Ghost paths against today's vectorized path, for C far below, between and far above
    the examples' gradient norms (all clipped, some clipped, none clipped)."""
    variables = model.trainable_variables
    if expect_plan:
        assert ghost.plan_model(model, variables, "auto") is not None
    # The vectorized path: per-example gradients, then privatize.clip_and_sum.
    per_example, ref_loss, ref_correct = privatize.per_example_gradients(
        model, variables, x, y, _loss_fn(model))
    sq = sum(np.sum(np.reshape(np.square(g.numpy()), (g.shape[0], -1)), 1)
             for g in per_example)
    norms = np.sqrt(sq)
    # Between: the geometric middle, with examples far above and far below it in one batch.
    middle = float(np.sqrt(norms.min() * norms.max()))
    if expect_plan:
        assert norms.max() > 10 * middle and norms.min() < middle / 10, norms
    clips = [float(norms.min()) * 1e-3, middle, float(norms.max()) * 1e3]
    for method in methods:
        fn = tf.function(lambda c, m=method: privatize.clipped_gradient_sum(
            model, variables, x, y, _loss_fn(model), c, m))
        for clip in clips:
            ref = privatize.clip_and_sum(per_example, clip)
            got, loss, correct = fn(tf.constant(clip))
            assert len(got) == len(ref)
            for r, g, v in zip(ref, got, variables):
                assert g.shape == v.shape
                err = np.linalg.norm(g.numpy() - r.numpy())
                assert err <= RTOL * np.linalg.norm(r.numpy()) + 1e-12, (method, clip, v.path)
            np.testing.assert_allclose(loss.numpy(), ref_loss.numpy(), rtol=1e-5)
            np.testing.assert_array_equal(correct.numpy(), ref_correct.numpy())


# --------------------------------------------------------------------------- layers


@pytest.mark.parametrize("use_bias,activation", [(True, "relu"), (False, None)])
def test_dense(use_bias, activation):
    keras.utils.set_random_seed(1)
    inp = keras.Input((7,))
    h = keras.layers.Dense(5, use_bias=use_bias, activation=activation)(inp)
    model = keras.Model(inp, keras.layers.Dense(3)(h))
    _assert_same_sum(model, *_data((7,), classes=3))
    assert [k for _, k, _ in ghost.describe(model, model.trainable_variables)] == ["dense"] * 2


def test_dense_on_sequences_both_norm_forms():
    # Dense on [B, T, d]: the Gram ("ghost") and the per-example ("direct") forms.
    keras.utils.set_random_seed(2)
    inp = keras.Input((4, 6))
    h = keras.layers.Dense(8, activation="tanh")(inp)
    model = keras.Model(inp, keras.layers.Dense(3)(keras.layers.Flatten()(h)))
    norms = {n for _, _, n in ghost.describe(model, model.trainable_variables, "ghost")}
    assert "ghost" in norms
    _assert_same_sum(model, *_data((4, 6), classes=3))


# Chains of Conv2D layers covering padding, strides, dilation, groups, bias and activation.
CONV_CHAINS = [
    [dict(filters=4, kernel_size=3, padding="same"),
     dict(filters=4, kernel_size=3, padding="valid"),
     dict(filters=3, kernel_size=(3, 2), strides=2, padding="same")],
    [dict(filters=4, kernel_size=3, dilation_rate=2, padding="same"),
     dict(filters=4, kernel_size=(2, 3), dilation_rate=(2, 1), padding="valid"),
     dict(filters=3, kernel_size=3, strides=(2, 1), padding="valid")],
    [dict(filters=6, kernel_size=3, groups=2, padding="same"),
     dict(filters=4, kernel_size=1, groups=2, padding="valid", use_bias=False),
     dict(filters=5, kernel_size=5, strides=3, padding="same", activation="relu")],
]


@pytest.mark.parametrize("chain", CONV_CHAINS, ids=["padding-strides", "dilation", "groups"])
def test_conv2d(chain):
    keras.utils.set_random_seed(3)
    inp = keras.Input((11, 10, 4))
    h = inp
    for kwargs in chain:
        h = keras.layers.Conv2D(**kwargs)(h)
    model = keras.Model(inp, keras.layers.Dense(3)(keras.layers.Flatten()(h)))
    plan = ghost.describe(model, model.trainable_variables, "ghost")
    assert [p[1:] for p in plan[:3]] == [("conv2d", "ghost")] * 3
    _assert_same_sum(model, *_data((11, 10, 4), classes=3))


def test_auto_chooses_per_layer():
    # Many positions and few channels: patches (T k o) beat Gram matrices (T^2 (k + o)).
    model = build_baseline_model("cnn", (28, 28, 1), 10)
    plan = ghost.describe(model, model.trainable_variables, "auto")
    assert [k for _, k, _ in plan] == ["conv2d", "conv2d", "dense", "dense"]
    assert plan[0][2] == "direct"
    # One position with a wide kernel (1x1 output): the Gram form is cheaper.
    inp = keras.Input((3, 3, 8))
    h = keras.layers.Conv2D(64, 3, padding="valid")(inp)
    small = keras.Model(inp, keras.layers.Dense(2)(keras.layers.Flatten()(h)))
    assert ghost.describe(small, small.trainable_variables, "auto")[0][2] == "direct"


# --------------------------------------------------------------------------- models


@keras.saving.register_keras_serializable(package="tfdp_test")
class ChannelScale(keras.layers.Layer):
    """A custom layer with a trainable per-channel scale (the ghost path falls back)."""

    def build(self, input_shape):
        self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="s")

    def call(self, inputs):
        return inputs * self.scale * self.scale


@pytest.mark.parametrize("kind,shape", [("cnn", (28, 28, 1)), ("cnn", (32, 32, 3)),
                                        ("mlp", (28, 28, 1)), ("adlm_cnn", (28, 28, 1))])
def test_baseline_models(kind, shape):
    keras.utils.set_random_seed(4)
    model = build_baseline_model(kind, shape, 10)
    _assert_same_sum(model, *_data(shape, batch=4))


def test_custom_and_unsupported_layers_fall_back_per_layer():
    keras.utils.set_random_seed(5)
    inp = keras.Input((8, 8, 2))
    h = keras.layers.Conv2D(4, 3, padding="same")(inp)
    h = ChannelScale()(h)
    h = keras.layers.LayerNormalization()(h)
    h = keras.layers.Reshape((16, 4))(keras.layers.MaxPooling2D(2)(h))
    h = keras.layers.Conv1D(3, 2)(h)
    out = keras.layers.Dense(4)(keras.layers.Flatten()(h))
    model = keras.Model(inp, out)
    kinds = [k for _, k, _ in ghost.describe(model, model.trainable_variables)]
    assert kinds == ["conv2d", "fallback", "fallback", "fallback", "dense"]
    _assert_same_sum(model, *_data((8, 8, 2), classes=4))


def _secure_sgd_cnn(noise_mode, seed=6):
    """A Secure-SGD-style CNN: heterogeneous Gaussian noise on conv1's pre-activation."""
    keras.utils.set_random_seed(seed)
    inp = keras.Input((12, 12, 1))
    h = keras.layers.Conv2D(4, 3, padding="same")(inp)
    r = np.random.default_rng(seed).dirichlet(np.ones(12 * 12 * 4)).reshape(12, 12, 4)
    h = tfdp_layers.HeterogeneousGaussianNoise(0.05, r, noise_mode=noise_mode,
                                               seed=seed)(h)
    h = keras.layers.ReLU()(h)
    h = keras.layers.Conv2D(6, 3, strides=2, padding="same", activation="relu")(h)
    h = tfdp_layers.Clip(-1.0, 1.0)(h)
    out = keras.layers.Dense(10)(keras.layers.Flatten()(h))
    return keras.Model(inp, out)


def test_noise_layer_drawn_once_noise():
    # "once": the stored draw is deterministic state, identical in both paths.
    model = _secure_sgd_cnn("once")
    _assert_same_sum(model, *_data((12, 12, 1)))


def test_noise_layer_fresh_per_example(monkeypatch):
    # Fresh noise differs between any two forward passes, so both paths are given the same
    # realisation: a deterministic stand-in keyed by the example (its draw as a function of
    # its own pre-activation), exercising the same graph position and shapes.
    def fresh(self, inputs, tag, factor):
        del tag
        return tf.sin(37.0 * inputs) * tf.constant(self._noise_scale * factor, inputs.dtype)

    monkeypatch.setattr(tfdp_layers.HeterogeneousGaussianNoise, "_fresh_per_example", fresh)
    model = _secure_sgd_cnn("per_example")
    _assert_same_sum(model, *_data((12, 12, 1)))


def test_fresh_noise_is_drawn_once_per_step_and_per_example():
    model = _secure_sgd_cnn("per_example")
    noise = [l for l in model.layers if isinstance(l, tfdp_layers.HeterogeneousGaussianNoise)][0]
    x, y = _data((12, 12, 1), batch=4)
    before = int(noise.draw_counter.numpy())
    privatize.clipped_gradient_sum(model, model.trainable_variables, x, y, _loss_fn(model),
                                   1.0, "auto")
    assert int(noise.draw_counter.numpy()) == before + 1  # one batched forward pass


@pytest.mark.parametrize("index_scoped", [True, False])
def test_vectorized_path_draws_independent_noise_per_example(index_scoped):
    # Inside tf.vectorized_map the layer's seed is the same for every example; the example
    # index scope (which per_example_gradients sets) keys each draw by position.
    layer = tfdp_layers.GaussianNoise(1.0, seed=3)
    x = tf.zeros((4, 50))

    def one(args):
        xi, i = args
        if not index_scoped:
            return layer(xi[None], training=True)[0]
        with noise_streams.example_index_scope(i):
            return layer(xi[None], training=True)[0]

    out = tf.vectorized_map(one, (x, tf.range(4, dtype=tf.int64))).numpy()
    distinct = len({row.tobytes() for row in out})
    assert distinct == (4 if index_scoped else 1)


def test_adlm_models_use_the_vectorized_path():
    # Batch normalisation / per-batch min-max mix the examples of a batch: no per-example
    # gradient exists in a batched pass, so the whole model takes the vectorized path.
    for build in (lambda: adlm.mnist_model(),
                  lambda: adlm.mnist_model(bound_mode="paper_lrn_minmax"),
                  lambda: adlm.cifar10_model(seed=0)):
        model = build()
        assert ghost.plan_model(model, model.trainable_variables, "auto") is None
    keras.utils.set_random_seed(7)
    model = adlm.mnist_model(bn_eval="batch")
    _assert_same_sum(model, *_data((28, 28, 1), batch=4), expect_plan=False)


def test_loss_reading_variables_falls_back():
    model = common.mlp((5,), 3, hidden=(4,))
    x, y = _data((5,), classes=3)
    kernel = model.trainable_variables[0]

    def example_loss(xi, yi):
        logits = model(xi, training=True)
        return per_example_cross_entropy(yi, logits)[0] + tf.reduce_sum(kernel ** 2), logits

    assert ghost.clipped_gradient_sum(model, model.trainable_variables, x, y, example_loss,
                                      1.0) is None
    ref, _, _ = privatize.clipped_gradient_sum(model, model.trainable_variables, x, y,
                                               example_loss, 0.5, "vectorized")
    got, _, _ = privatize.clipped_gradient_sum(model, model.trainable_variables, x, y,
                                               example_loss, 0.5, "auto")
    for r, g in zip(ref, got):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-6, atol=1e-7)


def test_subclassed_model_falls_back():
    class Tiny(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(3)

        def call(self, x):
            return self.d(x)

    model = Tiny()
    model(tf.zeros((1, 4)))
    assert ghost.plan_model(model, model.trainable_variables) is None


def test_inside_tf_function_and_dpsgd_gradients_agree():
    model = build_baseline_model("cnn", (12, 12, 1), 10)
    x, y = _data((12, 12, 1), batch=8)
    variables = model.trainable_variables

    @tf.function
    def grads(method):
        ctx = StepContext.current(tf.constant([3, 4], tf.int64), 8)
        return privatize.dpsgd_gradients(ctx, model, variables, x, y, _loss_fn(model),
                                         l2_clip=0.1, noise_multiplier=0.5, clipping=method)

    ref, ref_metrics = grads("vectorized")
    got, metrics = grads("auto")
    for r, g in zip(ref, got):  # same noise draw (same step seed): same noisy gradient
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(metrics["loss"].numpy(), ref_metrics["loss"].numpy(),
                               rtol=1e-5)


def test_bad_method_and_flag():
    model = common.mlp((5,), 3)
    x, y = _data((5,), classes=3)
    with pytest.raises(ValueError, match="method"):
        privatize.clipped_gradient_sum(model, model.trainable_variables, x, y,
                                       _loss_fn(model), 1.0, "fast")
    cfg = TrainConfig(method="dpsgd", dataset="synthetic", model_dir="/tmp/unused",
                      epochs=1, batch_size=10, epsilon=1.0, delta=1e-5, seed=0,
                      options={"dpsgd_clipping": "fast"})
    with pytest.raises(ValueError, match="--dpsgd_clipping"):
        dpsgd.DPSGD(cfg).validate()


def test_mirrored_strategy_ghost_equals_vectorized():
    from tfdp.train import loop  # pylint: disable=import-outside-toplevel
    strategy = loop.cpu_mirrored_strategy()
    with strategy.scope():
        keras.utils.set_random_seed(8)
        model = build_baseline_model("cnn", (10, 10, 1), 10)
    x, y = _data((10, 10, 1), batch=8)
    ds = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(8))
    xb, yb = next(iter(ds))

    def total(method):
        @tf.function
        def step(xr, yr):
            def fn(xi, yi):
                ctx = StepContext.current(tf.constant([5, 6], tf.int64), 8)
                grads, _ = privatize.dpsgd_gradients(
                    ctx, model, model.trainable_variables, xi, yi, _loss_fn(model),
                    l2_clip=0.05, noise_multiplier=1.0, clipping=method)
                return grads
            per_replica = strategy.run(fn, args=(xr, yr))
            return [strategy.reduce(tf.distribute.ReduceOp.SUM, g, axis=None)
                    for g in per_replica]
        return [g.numpy() for g in step(xb, yb)]

    for r, g in zip(total("vectorized"), total("auto")):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
    assert "call" not in model.__dict__  # the temporary call substitution is undone


def test_dpsgd_flag_selects_the_path():
    def one_step(clipping):
        cfg = TrainConfig(method="dpsgd", dataset="synthetic", model_dir="/tmp/unused",
                          epochs=1, batch_size=8, epsilon=None, delta=1e-5, seed=0,
                          options={"dpsgd_l2_clip": 0.1, "dpsgd_noise_multiplier": 1.0,
                                   "dpsgd_clipping": clipping})
        method = dpsgd.DPSGD(cfg)
        method.validate()
        keras.utils.set_random_seed(9)
        model = method.build_model((10, 10, 1), 10)
        x, y = _data((10, 10, 1), batch=8)
        method.model, method.optimizer = model, keras.optimizers.SGD(1.0)
        method.train_step(StepContext.current(tf.constant([7, 8], tf.int64), 8), x, y)
        return model.get_weights()

    for r, g in zip(one_step("vectorized"), one_step("auto")):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)


def test_adlm_cnn_is_adlms_mnist_network_without_batch_norm():
    """--dpsgd_model=adlm_cnn: AdLM's conv 5x5/32, conv 5x5/64, fc 25 layers, per-example only."""
    model = build_baseline_model("adlm_cnn", (28, 28, 1), 10)
    kinds = [type(layer).__name__ for layer in model.layers]
    assert kinds.count("Conv2D") == 2 and kinds.count("Dense") == 2
    assert not any("Norm" in k for k in kinds), kinds  # nothing mixes the examples of a batch
    convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    assert [c.filters for c in convs] == [32, 64] and all(c.kernel_size == (5, 5) for c in convs)
    assert model.layers[-2].units == 25
    # As many weights as AdLM's paper network (paper_lrn_minmax: its LRN and min-max bounding
    # have none), 50 fewer than the code release's (batch norm's gamma and beta).
    from tfdp.papers.adlm import models as adlm  # pylint: disable=import-outside-toplevel
    paper = adlm.mnist_model((28, 28, 1), 10, bound_mode="paper_lrn_minmax")
    assert model.count_params() == paper.count_params() == 130_781
    assert model.count_params() == 32 * 26 + 64 * (32 * 25 + 1) + (7 * 7 * 64 + 1) * 25 + 26 * 10
    with pytest.raises(ValueError, match="adlm_cnn"):
        build_baseline_model("adlm", (28, 28, 1), 10)


@pytest.mark.parametrize("kernels_differentiate_groups", [False, True])
def test_grouped_conv_per_example_gradients_on_any_cpu(monkeypatch, kernels_differentiate_groups):
    # TensorFlow's Eigen CPU kernels (its default on CPUs without AVX-512 VNNI / AMX) cannot
    # differentiate a grouped convolution under tf.vectorized_map; tfdp then loops over the
    # examples (example_grads.map_examples). Both routes, forced, against one tape per example.
    from tfdp.train import example_grads
    if kernels_differentiate_groups and not example_grads.grouped_filter_gradients_ok():
        pytest.skip("this CPU's TensorFlow kernels cannot differentiate grouped convolutions "
                    "(oneDNN is off): the loop route, the one tfdp takes here, is the other case")
    monkeypatch.setitem(example_grads.GROUPED_FILTER_GRADIENTS, "ok", kernels_differentiate_groups)
    keras.utils.set_random_seed(3)
    inp = keras.Input((11, 10, 4))
    h = inp
    for kwargs in CONV_CHAINS[2]:
        h = keras.layers.Conv2D(**kwargs)(h)
    model = keras.Model(inp, keras.layers.Dense(3)(keras.layers.Flatten()(h)))
    x, y = _data((11, 10, 4), classes=3)
    variables = model.trainable_variables
    loss = _loss_fn(model)
    grads, losses, _ = tf.function(lambda: privatize.per_example_gradients(
        model, variables, x, y, loss))()
    for i in range(int(x.shape[0])):
        with tf.GradientTape() as tape:
            li, _ = loss(x[i:i + 1], y[i:i + 1])
        for g, r in zip(grads, tape.gradient(li, variables)):
            np.testing.assert_allclose(g[i].numpy(), r.numpy(), rtol=RTOL, atol=1e-6 * float(
                np.max(np.abs(r.numpy())) + 1e-30))
        assert losses[i].numpy() == pytest.approx(float(li), rel=RTOL)
