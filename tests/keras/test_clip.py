"""The registry's clipped sum equals a naive per-example loop, for every registered layer type."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdp.keras import clip, layers

L = keras.layers


def _naive(model, x, y, loss_fn):
    """Per-example gradients and the median norm, by a Python loop over examples."""
    variables = model.trainable_variables
    per_example, norms = [], []
    for i in range(len(x)):
        with tf.GradientTape() as tape:
            loss = loss_fn(y[i:i + 1], model(x[i:i + 1], training=True))[0]
        grads = [tf.convert_to_tensor(g).numpy().astype(np.float64)
                 for g in tape.gradient(loss, variables)]
        per_example.append(grads)
        norms.append(np.sqrt(sum(np.sum(g ** 2) for g in grads)))
    return per_example, norms


def _check(model, x, y, expect_rules=None):
    """Registry clipped sum == naive loop, at a bound C that clips about half the examples."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    model(x[:1])
    variables = model.trainable_variables
    per_example, norms = _naive(model, x, y, loss_fn)
    c = float(np.median(norms))
    assert max(norms) > c * 1.01 and min(norms) < c * 0.99
    # Abadi et al. 2016, Alg. 1: g / max(1, ||g|| / C), summed.
    want = [sum(min(1.0, c / n) * g[j] for g, n in zip(per_example, norms))
            for j in range(len(variables))]
    entries = clip.plan(model, variables)
    assert entries is not None
    if expect_rules is not None:
        got = {type(e.layer).__name__: e.rule is not None for e in entries}
        assert got == expect_rules
    sums, losses, pred = tf.function(lambda x, y: clip.clipped_gradient_sum(
        model, entries, variables, x, y, loss_fn, c))(tf.constant(x), tf.constant(y))
    for v, s, w in zip(variables, sums, want):
        np.testing.assert_allclose(s.numpy(), w, atol=1e-5, rtol=1e-5, err_msg=v.path)
    assert losses.shape == (len(x),)
    assert pred.shape[0] == len(x)
    return sums


RNG = np.random.default_rng(0)


def _images(shape, n=6):
    return RNG.normal(size=(n,) + shape).astype(np.float32), RNG.integers(0, 3, n).astype(np.int32)


@pytest.mark.parametrize("name,build,shape", [
    ("dense", lambda: [L.Flatten(), L.Dense(5, activation="relu"), L.Dense(3)], (4,)),
    ("dense_seq", lambda: [L.Dense(4, activation="tanh"), L.Flatten(), L.Dense(3)], (5, 3)),
    ("conv1d", lambda: [L.Conv1D(4, 3, padding="causal", activation="relu"),
                        L.Conv1D(3, 2, strides=2, dilation_rate=1), L.Flatten(), L.Dense(3)],
     (9, 2)),
    ("conv2d", lambda: [L.Conv2D(4, 3, padding="same", activation="relu"),
                        L.Conv2D(4, 3, strides=2, groups=2), L.Flatten(), L.Dense(3)], (8, 8, 2)),
    ("conv2d_wide_patches", lambda: [L.Conv2D(3, 3, padding="same", activation="relu"),
                                      L.Conv2D(2, 2, strides=2, dilation_rate=1), L.Flatten(),
                                      L.Dense(3)], (6, 6, 40)),
    ("conv2d_dilated", lambda: [L.Conv2D(3, 3, dilation_rate=2, padding="same"), L.Flatten(),
                                L.Dense(3)], (7, 7, 2)),
    ("conv1d_wide_patches", lambda: [L.Conv1D(3, 5, strides=2, padding="causal"), L.Flatten(),
                                     L.Dense(3)], (9, 60)),
    ("conv3d", lambda: [L.Conv3D(3, 2, padding="same", activation="relu"), L.Flatten(),
                        L.Dense(3)], (4, 4, 4, 2)),
    ("depthwise", lambda: [L.DepthwiseConv2D(3, depth_multiplier=2, padding="same",
                                             activation="relu"),
                           L.DepthwiseConv2D(3, strides=2, dilation_rate=1), L.Flatten(),
                           L.Dense(3)], (7, 7, 2)),
    ("layernorm", lambda: [L.Dense(6), L.LayerNormalization(), L.Dense(3)], (4,)),
    ("groupnorm", lambda: [L.Conv2D(4, 3), L.GroupNormalization(groups=2), L.Flatten(),
                           L.Dense(3)], (6, 6, 1)),
    ("conv2d_extracted_patches", lambda: [L.Conv2D(4, 3, padding="same", activation="relu"),
                                          L.Conv2D(3, 3, strides=2, padding="same"),
                                          L.Flatten(), L.Dense(3)], (6, 6, 8)),
    ("norms_scale_or_center_only", lambda: [
        L.Conv2D(4, 3), L.GroupNormalization(groups=4, center=False),
        L.LayerNormalization(axis=[1, 3], scale=False), L.Flatten(), L.Dense(3)], (6, 6, 1)),
    ("layernorm_rms_scaling", lambda: [L.Dense(6), L.LayerNormalization(rms_scaling=True),
                                       L.Dense(3)], (4,)),
    # channels-last GroupNormalization of <= 64 channels takes the matmul sums; these do not
    ("groupnorm_axis1_and_wide", lambda: [
        L.Conv2D(4, 3), L.GroupNormalization(groups=2, axis=1), L.Flatten(), L.Dense(72),
        L.GroupNormalization(groups=8), L.Dense(3)], (6, 6, 1)),
])
def test_each_registered_type_matches_naive_loop(name, build, shape):
    del name
    x, y = _images(shape)
    model = keras.Sequential([keras.Input(shape)] + build())
    _check(model, x, y, expect_rules={type(l).__name__: True for l in model.layers
                                      if l.trainable_weights})


def test_embedding_matches_naive_loop():
    x = RNG.integers(0, 7, size=(6, 5)).astype(np.int32)
    x[0, :3] = 2  # repeated ids inside one example
    y = RNG.integers(0, 3, 6).astype(np.int32)
    model = keras.Sequential([keras.Input((5,), dtype="int32"), L.Embedding(7, 4),
                              L.LayerNormalization(), L.Flatten(), L.Dense(3)])
    _check(model, x, y)


class _Scale(L.Layer):
    """An unregistered layer with a trainable variable (takes the vectorized fallback)."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones")

    def call(self, inputs):
        return inputs * self.w


def test_functional_mixed_model_with_fallback_matches_naive_loop():
    inp = keras.Input((8, 8, 8))  # 8 channels: the first convolution's patches are extracted
    h = L.Conv2D(4, 3, padding="same", activation="relu")(inp)
    h = L.GroupNormalization(groups=2)(h)
    h = L.DepthwiseConv2D(3, padding="same")(h)
    h = L.LayerNormalization()(h)
    h = L.Reshape((64, 4))(h)
    h = L.Conv1D(3, 3)(h)
    h = _Scale()(h)
    h = L.Flatten()(h)
    out = L.Dense(3)(L.Dense(5, activation="relu")(h))
    model = keras.Model(inp, out)
    x, y = _images((8, 8, 8))
    _check(model, x, y)


class SubclassedNet(keras.Model):
    def __init__(self):
        super().__init__()
        self.conv = L.Conv2D(3, 3, activation="relu")
        self.norm = L.LayerNormalization()
        self.flat = L.Flatten()
        self.out = L.Dense(3)

    def call(self, inputs, training=False):
        return self.out(self.flat(self.norm(self.conv(inputs))))


def test_subclassed_model_matches_naive_loop():
    x, y = _images((6, 6, 1))
    _check(SubclassedNet(), x, y)


def test_shared_layer_takes_whole_model_path_and_matches():
    dense = L.Dense(4, activation="relu")
    inp = keras.Input((4,))
    out = L.Dense(3)(dense(L.Dense(4)(dense(inp))))
    model = keras.Model(inp, out)
    x, y = _images((4,))
    _check(model, x, y)


def test_batchnorm_model_refused_in_one_line():
    model = keras.Sequential([keras.Input((4,)), L.Dense(4), L.BatchNormalization(name="bn1"),
                              L.Dense(3)])
    with pytest.raises(ValueError) as err:
        clip.plan(model, model.trainable_variables)
    message = str(err.value)
    assert "\n" not in message
    assert "'bn1'" in message and "BatchNormalization" in message
    assert "GroupNormalization" in message and "LayerNormalization" in message


def test_registry_lists_required_types():
    names = set(layers.registered())
    assert {"Dense", "Conv1D", "Conv2D", "Conv3D", "DepthwiseConv2D", "Embedding",
            "LayerNormalization", "GroupNormalization"} <= names


@pytest.mark.parametrize("grouped", [True, False])
def test_conv2d_paths_match_naive_loop(grouped, monkeypatch):
    """Each Conv2D construction (one grouped filter-gradient op over >= 128 output positions,
    per-offset blocks kept or only accumulated, extracted patches of a wide strided
    convolution) gives the naive loop's clipped sum, with and without the grouped op (a
    backend refusing it)."""
    if grouped and not layers._grouped_filter_grad_ok():  # pylint: disable=protected-access
        pytest.skip("this TensorFlow build has no exact grouped filter gradient")
    monkeypatch.setitem(layers._GROUPED_OK, "ok", grouped)  # pylint: disable=protected-access
    calls = []
    batched = layers._conv2d_batched_kernels  # pylint: disable=protected-access

    def counted(layer, a, g):
        calls.append(layer.name)
        return batched(layer, a, g)

    monkeypatch.setattr(layers, "_conv2d_batched_kernels", counted)
    inp = keras.Input((33, 32, 2))
    top = L.Conv2D(8, 3, padding="same", activation="relu", name="grouped_same")(inp)  # 33 x 32
    side = L.Conv2D(3, (3, 5), strides=2, padding="same", name="grouped_same_strided")(top)
    h = L.Conv2D(8, 3, strides=2, use_bias=False, name="grouped_valid_strided")(top)
    h = L.Conv2D(8, 3, strides=2, name="extracted_strided")(h)                       # 15 x 15 in
    h = L.Conv2D(48, 3, padding="same", name="offsets_kept")(h)                      # 3*3*8*48
    h = L.Conv2D(40, 3, padding="same", name="offsets_accumulated")(h)       # 3*3*48*40 > 16k
    h = L.Conv2D(4, 3, strides=2, name="extracted_wide")(h)                          # width 360
    flat = L.Concatenate()([L.Flatten()(h), L.Flatten()(side)])
    model = keras.Model(inp, L.Dense(3)(flat))
    x, y = _images((33, 32, 2))
    _check(model, x, y)
    assert set(calls) == ({"grouped_same", "grouped_same_strided", "grouped_valid_strided"}
                          if grouped else set())


def test_grouped_filter_grad_probe_is_cached_bool():
    ok = layers._grouped_filter_grad_ok()  # pylint: disable=protected-access
    assert isinstance(ok, bool)
    assert layers._GROUPED_OK["ok"] is ok  # pylint: disable=protected-access


@pytest.mark.parametrize("grouped", [True, False])
def test_conv2d_space_to_depth_paths_match_naive_loop(grouped, monkeypatch):
    """Strided convolutions whose kernel sides are multiples of the stride take the
    space-to-depth constructions (one grouped filter-gradient op where per-example kernels are
    cheaper, Gram sums over offsets where the ghost norm is), same and valid padding, strides
    2 and 3; the naive loop's clipped sum either way, and the other paths without the grouped
    op."""
    if grouped and not layers._grouped_filter_grad_ok():  # pylint: disable=protected-access
        pytest.skip("this TensorFlow build has no exact grouped filter gradient")
    monkeypatch.setitem(layers._GROUPED_OK, "ok", grouped)  # pylint: disable=protected-access
    calls = []
    for fn in ("_conv2d_space_to_depth_kernels", "_conv2d_space_to_depth_ghost"):
        def counted(layer, a, g, s, _fn=getattr(layers, fn), _name=fn):
            calls.append((layer.name, _name))
            return _fn(layer, a, g, s)
        monkeypatch.setattr(layers, fn, counted)
    inp = keras.Input((13, 13, 1))
    h = L.Conv2D(4, 4, strides=2, padding="same", activation="relu", name="s2d_kernels")(inp)
    # padded: 7x7 -> 3x3 reads 12 padded rows and columns
    padded = L.Conv2D(12, 6, strides=3, padding="same", name="s3_ghost_same")(h)
    h = L.Conv2D(12, (4, 2), strides=2, name="s2d_ghost")(h)    # 7x7 -> 2x3: T^2 (k + o) < T k o
    side = L.Conv2D(3, 6, strides=3, padding="same", use_bias=False, name="s3_kernels")(inp)
    # valid: the kernel reads 12 of the 13 rows and columns (the input is cut first)
    cut = L.Conv2D(2, 4, strides=2, name="s2d_kernels_valid")(inp)
    flat = L.Concatenate()([L.Flatten()(h), L.Flatten()(side), L.Flatten()(cut),
                            L.Flatten()(padded)])
    model = keras.Model(inp, L.Dense(3)(flat))
    x, y = _images((13, 13, 1))
    _check(model, x, y)
    want = {("s2d_ghost", "_conv2d_space_to_depth_ghost"),
            ("s3_ghost_same", "_conv2d_space_to_depth_ghost")}
    if grouped:
        want |= {("s2d_kernels", "_conv2d_space_to_depth_kernels"),
                 ("s3_kernels", "_conv2d_space_to_depth_kernels"),
                 ("s2d_kernels_valid", "_conv2d_space_to_depth_kernels")}
    assert set(calls) == want


@pytest.mark.parametrize("gamma_floor", [None, 0.0])
def test_group_norm_gamma_from_output_and_from_input_match_naive_loop(gamma_floor, monkeypatch):
    """A channels-last GroupNormalization's gamma gradients come from its recorded output,
    (sum z g - beta sum g) / gamma, while every |gamma| >= 1e-2, and from the recomputed
    moments otherwise (one gamma at 0 here): the naive loop's clipped sum either way, with
    trained-looking gamma (both signs) and beta (large, so the subtraction cancels)."""
    calls = []
    original = layers._group_norm_scale_from_input  # pylint: disable=protected-access

    def counted(*args):
        calls.append("input")
        return original(*args)

    monkeypatch.setattr(layers, "_group_norm_scale_from_input", counted)
    model = keras.Sequential([keras.Input((6, 6, 2)), L.Conv2D(4, 3, name="c"),
                              L.GroupNormalization(groups=2, name="gn"),
                              L.Activation("relu"), L.Flatten(), L.Dense(3)])
    model(np.zeros((1, 6, 6, 2), np.float32))
    gn = model.get_layer("gn")
    gamma = np.array([1.7, -0.4, 0.05, 2.5], np.float32)
    if gamma_floor is not None:
        gamma[2] = gamma_floor
    gn.gamma.assign(gamma)
    gn.beta.assign(np.array([3.0, -5.0, 0.5, 8.0], np.float32))
    x, y = _images((6, 6, 2), n=8)
    sums = _check(model, x, y)
    assert all(np.all(np.isfinite(s.numpy())) for s in sums)
    # Eagerly, tf.cond runs one branch: the input's only when a gamma is below the floor.
    calls.clear()
    t = tf.constant(RNG.normal(size=(2, 4, 4, 4)).astype(np.float32))
    layers._group_norm_affine_grads(gn, t, t, t)  # pylint: disable=protected-access
    assert calls == ([] if gamma_floor is None else ["input"])
    entries = clip.plan(model, model.trainable_variables)
    assert next(e for e in entries if e.layer is gn).rule.uses_output
