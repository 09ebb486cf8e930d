"""Tests of the tfdp noise layers: modes, samplers, seeds, inference switch, bad input."""

import numpy as np
import pytest
import scipy.stats
import tensorflow as tf
import keras

import layers


def _laplace_ks(v: np.ndarray) -> float:
    return scipy.stats.kstest(v.ravel(), scipy.stats.laplace.cdf).pvalue


def _normal_ks(v: np.ndarray) -> float:
    return scipy.stats.kstest(v.ravel(), scipy.stats.norm.cdf).pvalue


# ----------------------------------------------------------------------------- Laplace sampler


@pytest.mark.parametrize("scale", [0.1, 1.0, 72.59])
def test_laplace_per_example_statistics(scale):
    # Laplace moments with n = 200,000 draws (400 examples x 500 features).
    # mean: sd of the sample mean is sqrt(2) s / sqrt(n) = 0.0032 s, so 0.02 s is > 6 sd.
    # variance: Var(v^2) = E v^4 - (2s^2)^2 = 24 s^4 - 4 s^4 = 20 s^4, so the sd of the sample
    # variance is sqrt(20/n) s^2 = 0.01 s^2 = 0.5% of 2 s^2; 3% is 6 sd.
    # mean|v|: |v| ~ Exp(s), sd of the mean is s/sqrt(n) = 0.22% of s; 2% is 9 sd.
    layer = layers.LaplaceNoise(scale, seed=11)
    x = tf.zeros((400, 500))
    v = layer(x, training=True).numpy().astype(np.float64)
    assert abs(v.mean()) < 0.02 * scale
    assert abs(v.var() / (2 * scale**2) - 1) < 0.03
    assert abs(np.abs(v).mean() / scale - 1) < 0.02
    assert _laplace_ks(v / scale) > 1e-3


def test_laplace_per_feature_scales_and_divisor():
    # AdLM Alg. 1 l.12-13: feature j has scale Delta_h0/(beta_j eps2), divided by |L| when asked.
    beta = np.array([0.25, 0.5, 1.0, 2.0, 1.25])
    delta_h0, eps2, batch = 9800.0, 0.075, 1800
    per_feature = delta_h0 / (beta * eps2)
    layer = layers.LaplaceNoise(per_feature, batch_divisor=batch, seed=5)
    v = layer(tf.zeros((40000, 5)), training=True).numpy().astype(np.float64)
    expected = per_feature / batch
    np.testing.assert_allclose(layer.noise_scale, expected, rtol=1e-12)
    # mean|v| per feature: relative sd 1/sqrt(40000) = 0.5%; 3% is 6 sd.
    np.testing.assert_allclose(np.abs(v).mean(axis=0), expected, rtol=0.03)
    assert _laplace_ks(v / expected) > 1e-3
    # The MNIST ref-code per-example input scale 72.5926/beta_j (9800 / (0.075 x 1800)).
    np.testing.assert_allclose(delta_h0 / (eps2 * batch), 72.5926, atol=1e-4)


def test_shared_axes_share_noise_across_channels():
    # AdLM CIFAR code: one draw per pixel, copied to the 3 channels.
    layer = layers.LaplaceNoise(1.0, shared_axes=[3], seed=2)
    v = layer(tf.zeros((4, 6, 6, 3)), training=True).numpy()
    assert np.all(v[..., 0] == v[..., 1]) and np.all(v[..., 1] == v[..., 2])
    assert not np.all(v[0] == v[1])


# ----------------------------------------------------------------------------- modes


def test_per_example_fresh_per_row_and_per_call():
    layer = layers.LaplaceNoise(1.0, noise_mode="per_example", seed=1)
    x = tf.zeros((8, 10))
    a = layer(x, training=True).numpy()
    b = layer(x, training=True).numpy()
    assert len({row.tobytes() for row in a}) == 8
    assert not np.any(a == b)
    assert int(layer.draw_counter.numpy()) == 2


def test_per_batch_shared_within_batch_fresh_between_calls():
    # AdLM code release's batch_shared_per_step.
    layer = layers.LaplaceNoise(2.0, noise_mode="per_batch", batch_divisor=4.0, seed=3)
    x = tf.zeros((6, 20000))
    a = layer(x, training=True).numpy()
    b = layer(x, training=True).numpy()
    assert np.all(a == a[0]) and np.all(b == b[0])
    assert not np.any(a[0] == b[0])
    # One draw of 20,000 iid features, scale 2/4.
    assert _laplace_ks(a[0] / 0.5) > 1e-3


def test_once_is_fixed_and_laplace_distributed():
    # StoBatch's chi1/chi2 and AdLM's shared_fixed: drawn once, identical everywhere.
    layer = layers.LaplaceNoise(3.0, noise_mode="once", batch_divisor=1.5, seed=4)
    x = tf.zeros((5, 30000))
    a = layer(x, training=True).numpy()
    b = layer(x, training=True).numpy()
    assert np.array_equal(a, b) and np.all(a == a[0])
    np.testing.assert_array_equal(a[0], layer.fixed_noise.numpy()[0])
    assert int(layer.draw_counter.numpy()) == 0
    assert _laplace_ks(a[0] / 2.0) > 1e-3
    assert any(w is layer.fixed_noise for w in layer.non_trainable_weights)
    assert not layer.trainable_weights


def test_same_seed_same_stream_other_seed_differs():
    x = tf.zeros((3, 50))
    a = layers.LaplaceNoise(1.0, seed=9)
    b = layers.LaplaceNoise(1.0, seed=9)
    c = layers.LaplaceNoise(1.0, seed=10)
    for _ in range(2):
        va, vb, vc = (l(x, training=True).numpy() for l in (a, b, c))
        np.testing.assert_array_equal(va, vb)
        assert not np.any(va == vc)
    o1 = layers.LaplaceNoise(1.0, noise_mode="once", seed=7)
    o2 = layers.LaplaceNoise(1.0, noise_mode="once", seed=7)
    np.testing.assert_array_equal(o1(x, training=True), o2(x, training=True))
    # Without a seed the stream comes from OS entropy.
    n1, n2 = layers.LaplaceNoise(1.0), layers.LaplaceNoise(1.0)
    assert not np.any(n1(x, training=True).numpy() == n2(x, training=True).numpy())


def test_unseeded_layers_hold_128_bit_keys_and_use_every_bit():
    from layers import noise_streams as noise_module  # pylint: disable=import-outside-toplevel
    keys = [layers.LaplaceNoise(1.0)._base_seed for _ in range(8)]
    # 128-bit keys from OS entropy: all of them below 2^64 has probability 2^-512.
    assert all(0 <= k < 2**128 for k in keys) and any(k >= 2**64 for k in keys)
    assert len(set(keys)) == 8
    x = tf.zeros((3, 40))
    low = 2**100 + 12345
    # Keys that differ only in their high 64-bit word, or only in the low one, draw apart.
    for other in (low + 2**64, low + 1):
        va = layers.LaplaceNoise(1.0, seed=low)(x, training=True).numpy()
        vb = layers.LaplaceNoise(1.0, seed=other)(x, training=True).numpy()
        assert not np.any(va == vb)
    again = layers.LaplaceNoise(1.0, seed=low)(x, training=True).numpy()
    np.testing.assert_array_equal(va, again)  # a 128-bit seed still reproduces
    # Seeds below 2^63 keep the streams they always had: [seed, tag].
    np.testing.assert_array_equal(noise_module.root_seed(5, 3).numpy(), [5, 3])
    big = noise_module.root_seed(2**127 + 9, 3).numpy()
    assert big.dtype == np.int64 and not np.array_equal(big, noise_module.root_seed(
        2**127 + 9, 1).numpy())
    with pytest.raises(ValueError, match="seed"):
        layers.LaplaceNoise(1.0, seed=2**128)


def test_fresh_noise_inside_tf_function():
    layer = layers.LaplaceNoise(1.0, seed=8)
    x = tf.zeros((2, 16))

    @tf.function
    def step(inp):
        return layer(inp, training=True)

    a, b = step(x).numpy(), step(x).numpy()
    assert not np.any(a == b)


# ----------------------------------------------------------------------------- Gaussian / HGM


def test_gaussian_per_feature_stddev():
    std = np.array([0.5, 1.0, 3.0])
    layer = layers.GaussianNoise(std, seed=12)
    v = layer(tf.zeros((40000, 3)), training=True).numpy().astype(np.float64)
    # sd of the sample std is std/sqrt(2n) = 0.35% of std; 2% is > 5 sd.
    np.testing.assert_allclose(v.std(axis=0), std, rtol=0.02)
    assert _normal_ks(v / std) > 1e-3


def test_hgm_per_unit_stddev_and_total_energy():
    # HGM Theorem 3: empirical per-unit std of gamma equals sigma sqrt(K r_k) within 3%.
    rng = np.random.default_rng(0)
    r = rng.dirichlet(np.ones(12)).reshape(2, 2, 3)
    sigma = 0.8
    layer = layers.HeterogeneousGaussianNoise(sigma, r, seed=13)
    v = layer(tf.zeros((30000, 2, 2, 3)), training=True).numpy().astype(np.float64)
    expected = sigma * np.sqrt(12 * r)
    np.testing.assert_allclose(layer.noise_scale, expected, rtol=1e-12)
    # sd of the sample std is 1/sqrt(2 * 30000) = 0.41%; 3% is > 7 sd.
    np.testing.assert_allclose(v.std(axis=0), expected, rtol=0.03)
    assert _normal_ks(v / expected) > 1e-3
    # HGM Theorem 3: total variance K sigma^2 whatever r is.
    np.testing.assert_allclose(np.sum(layer.noise_scale**2), 12 * sigma**2, rtol=1e-12)


def test_hgm_uniform_r_reduces_to_sigma_and_flat_r_accepted():
    u = layers.HeterogeneousGaussianNoise(1.5, None, seed=1)
    u(tf.zeros((1, 4, 4, 2)))
    np.testing.assert_allclose(u.noise_scale, 1.5)
    flat = layers.HeterogeneousGaussianNoise(1.5, np.full(32, 1 / 32), seed=1)
    flat(tf.zeros((1, 4, 4, 2)))
    np.testing.assert_allclose(flat.noise_scale, 1.5, rtol=1e-12)


def test_hgm_fresh_vs_fixed_once():
    # Training noise: fresh -> two passes differ; fixed_once -> they agree.
    r = np.full((3, 4), 1 / 12)
    x = tf.ones((2, 3, 4))
    fresh = layers.HeterogeneousGaussianNoise(1.0, r, noise_mode="per_example", seed=3)
    fixed = layers.HeterogeneousGaussianNoise(1.0, r, noise_mode="once", seed=3)
    assert not np.allclose(fresh(x, training=True), fresh(x, training=True))
    np.testing.assert_array_equal(fixed(x, training=True), fixed(x, training=True))


# ----------------------------------------------------------------------------- inference


def test_no_noise_at_inference_by_default():
    # No noise at inference: two passes on the same batch are identical and equal to the input.
    for mode in layers.NOISE_MODES:
        layer = layers.LaplaceNoise(1.0, noise_mode=mode, seed=1)
        x = tf.random.stateless_uniform((4, 7), seed=[1, 2])
        np.testing.assert_array_equal(layer(x), x)
        np.testing.assert_array_equal(layer(x, training=False), x)
        assert int(layer.draw_counter.numpy()) == 0


def test_inference_noise_fresh_per_row_and_scaled():
    layer = layers.LaplaceNoise(2.0, noise_mode="per_batch", seed=1, inference_noise=True,
                                inference_fresh_scale=0.5)
    x = tf.zeros((30000, 2))
    v = layer(x).numpy().astype(np.float64)
    assert len({row.tobytes() for row in v[:100]}) == 100  # one MC draw per row
    # Fresh scale 2 * 0.5 = 1; mean|v| relative sd 1/sqrt(60000) = 0.4%; 3% is > 7 sd.
    assert abs(np.abs(v).mean() - 1.0) < 0.03


def test_inference_once_fixed_plus_fresh():
    # StoBatch Alg. 3: stored draw plus fresh noise shrunk by psi; psi -> inf leaves the
    # stored draw only.
    x = tf.zeros((3, 10))
    only_fixed = layers.LaplaceNoise(1.0, noise_mode="once", seed=2, inference_noise=True,
                                     inference_fresh_scale=0.0)
    out = only_fixed(x).numpy()
    np.testing.assert_array_equal(out, np.broadcast_to(only_fixed.fixed_noise.numpy(), out.shape))
    fresh_only = layers.LaplaceNoise(1.0, noise_mode="once", seed=2, inference_noise=True,
                                     inference_fixed_noise=False)
    v = fresh_only(tf.zeros((20000, 10))).numpy()
    assert abs(np.mean(v)) < 0.05  # fresh zero-mean noise, not the fixed draw (sd 0.01)


def test_set_inference_noise_nested_model_and_retrace():
    inner_in = keras.Input((6,))
    h = layers.LaplaceNoise(1.0, seed=1)(inner_in)
    h = keras.layers.Dense(4)(h)
    h = layers.GaussianNoise(0.5, noise_mode="once", seed=2)(h)
    inner = keras.Model(inner_in, h)
    outer_in = keras.Input((6,))
    y = layers.HeterogeneousGaussianNoise(1.0, None, seed=3)(inner(outer_in))
    y = layers.Clip(-5.0, 5.0)(y)
    model = keras.Model(outer_in, y)
    x = np.ones((3, 6), np.float32)
    clean = model.predict(x, verbose=0)
    np.testing.assert_array_equal(clean, model.predict(x, verbose=0))
    assert layers.set_inference_noise(model, True) == 3
    noisy1, noisy2 = model.predict(x, verbose=0), model.predict(x, verbose=0)
    assert not np.allclose(noisy1, clean) and not np.allclose(noisy1, noisy2)
    assert layers.set_inference_noise(model, False) == 3
    np.testing.assert_array_equal(model.predict(x, verbose=0), clean)
    assert layers.set_inference_noise(model.layers[1], True) == 2  # the inner model only


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs,name", [
    (dict(scale=-1.0), "scale"),
    (dict(scale=float("nan")), "scale"),
    (dict(scale=[]), "scale"),
    (dict(scale=1.0, noise_mode="per_step"), "noise_mode"),
    (dict(scale=1.0, seed=-3), "seed"),
    (dict(scale=1.0, seed=1.5), "seed"),
    (dict(scale=1.0, inference_noise="yes"), "inference_noise"),
    (dict(scale=1.0, batch_divisor=0.0), "batch_divisor"),
    (dict(scale=1.0, shared_axes=[0]), "shared_axes"),
    (dict(scale=1.0, inference_fresh_scale=-0.1), "inference_fresh_scale"),
    (dict(scale=1.0, inference_fixed_noise=None), "inference_fixed_noise"),
])
def test_laplace_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        layers.LaplaceNoise(**kwargs)


def test_scale_shape_mismatch_raises_at_build():
    layer = layers.LaplaceNoise(np.ones(4))
    with pytest.raises(ValueError, match="scale"):
        layer(tf.zeros((2, 5)), training=True)


def test_hgm_bad_arguments():
    with pytest.raises(ValueError, match="sigma"):
        layers.HeterogeneousGaussianNoise(-1.0, None)
    with pytest.raises(ValueError, match="r"):
        layers.HeterogeneousGaussianNoise(1.0, [0.5, 0.6])
    with pytest.raises(ValueError, match="r"):
        layers.HeterogeneousGaussianNoise(1.0, [1.0, 0.0])
    layer = layers.HeterogeneousGaussianNoise(1.0, np.full(5, 0.2))
    with pytest.raises(ValueError, match="r has 5 entries"):
        layer(tf.zeros((1, 6)))
    with pytest.raises(ValueError, match="stddev"):
        layers.GaussianNoise(-0.5)
    with pytest.raises(ValueError, match="enabled"):
        layers.set_inference_noise(layer, 1)
    with pytest.raises(ValueError, match="model_or_layer"):
        layers.set_inference_noise("model", True)


def test_input_bounds_assertion():
    # Design principle 4: inputs outside the range the sensitivity assumes are an error.
    layer = layers.LaplaceNoise(1.0, seed=1, input_bounds=(-1.0, 1.0))
    layer(tf.fill((2, 3), 0.9), training=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="input_bounds"):
        layer(tf.fill((2, 3), 1.5), training=True)

    @tf.function
    def step(x):
        return layer(x, training=True)

    with pytest.raises(tf.errors.InvalidArgumentError, match="input_bounds"):
        step(tf.fill((2, 3), -2.0))
    np.testing.assert_array_equal(layer(tf.fill((2, 3), 5.0)), 5.0)  # no noise, no check
    for bad in ((1.0, 1.0), (0.0,), ("a", 1.0), (0.0, float("inf"))):
        with pytest.raises(ValueError, match="input_bounds"):
            layers.LaplaceNoise(1.0, input_bounds=bad)


def test_noise_layers_under_xla():
    layer_pe = layers.LaplaceNoise(1.0, seed=1)
    layer_pb = layers.GaussianNoise(1.0, noise_mode="per_batch", seed=2)

    @tf.function(jit_compile=True)
    def step(x):
        return layer_pb(layer_pe(x, training=True), training=True)

    a, b = step(tf.zeros((4, 8))).numpy(), step(tf.zeros((4, 8))).numpy()
    assert np.all(np.isfinite(a)) and not np.any(a == b)
    assert int(layer_pe.draw_counter.numpy()) == 2


def test_stobatch_two_pass_switching():
    # StoBatch Cor. 1: pass p_x randomises the input only; the latent layer keeps its stored draw.
    inp = keras.Input((5,))
    in_noise = layers.LaplaceNoise(1.0, noise_mode="once", seed=1, name="in_noise")
    lat_noise = layers.LaplaceNoise(1.0, noise_mode="once", seed=2, name="lat_noise")
    model = keras.Model(inp, lat_noise(keras.layers.Dense(3)(in_noise(inp))))
    x = np.zeros((2, 5), np.float32)
    assert layers.set_inference_noise(model, True, fresh_scale=0.0) == 2
    fixed_only = model.predict(x, verbose=0)
    np.testing.assert_array_equal(fixed_only, model(x, training=True))
    assert layers.set_inference_noise(model, True, fresh_scale=0.5, names=["in_noise"]) == 1
    assert in_noise.inference_fresh_scale == 0.5 and lat_noise.inference_fresh_scale == 0.0
    assert not np.allclose(model.predict(x, verbose=0), fixed_only)
    assert layers.set_inference_noise(model, True, include_fixed=False, fresh_scale=0.0) == 2
    bias = model.layers[2].bias.numpy()  # Dense(0) = bias: no noise at all
    np.testing.assert_allclose(model.predict(x, verbose=0), np.broadcast_to(bias, (2, 3)))
    with pytest.raises(ValueError, match="fresh_scale"):
        layers.set_inference_noise(model, True, fresh_scale=-1.0)
    with pytest.raises(ValueError, match="include_fixed"):
        layers.set_inference_noise(model, True, include_fixed=1)
    with pytest.raises(ValueError, match="names"):
        layers.set_inference_noise(model, True, names="in_noise")


# ---------------------------------------------------------------- zero and non-finite scales

@pytest.mark.parametrize("make,name", [
    (lambda **kw: layers.LaplaceNoise(0.0, **kw), "scale"),
    (lambda **kw: layers.LaplaceNoise([1.0, 0.0, 2.0], **kw), "scale"),
    (lambda **kw: layers.GaussianNoise(0.0, **kw), "stddev"),
    (lambda **kw: layers.HeterogeneousGaussianNoise(0.0, None, **kw), "sigma"),
])
def test_zero_scale_needs_allow_zero(make, name):
    with pytest.raises(ValueError, match=f"{name}.*allow_zero"):
        make()
    layer = make(allow_zero=True, seed=1)  # the explicit non-private ablation
    x = tf.ones((2, 3))
    out = layer(x, training=True).numpy()
    assert np.all(np.isfinite(out))
    assert layer.get_config()["allow_zero"] is True


@pytest.mark.parametrize("make,name", [
    # Positive in float64 but 0 in float32 after the division by the batch (float32 denormals
    # stop near 1.4e-45).
    (lambda **kw: layers.LaplaceNoise(1e-43, batch_divisor=1e3, **kw), "scale"),
    (lambda **kw: layers.GaussianNoise(1e-46, **kw), "stddev"),
    (lambda **kw: layers.HeterogeneousGaussianNoise(1e-45, None, batch_divisor=100.0, **kw),
     "sigma"),
])
def test_scale_underflowing_float32_raises(make, name):
    layer = make()
    with pytest.raises(ValueError, match=f"{name}.*underflows"):
        layer(tf.ones((2, 3)), training=True)
    make(allow_zero=True)(tf.ones((2, 3)), training=True)


@pytest.mark.parametrize("make,name", [
    (lambda: layers.LaplaceNoise(1e39), "scale"),
    (lambda: layers.GaussianNoise([1.0, 1e300, 1.0]), "stddev"),
    (lambda: layers.HeterogeneousGaussianNoise(1e39, np.full(3, 1 / 3)), "sigma"),
])
def test_scale_overflowing_float32_raises(make, name):
    layer = make()
    with pytest.raises(ValueError, match=f"{name}.*overflows"):
        layer(tf.ones((2, 3)), training=True)


@pytest.mark.parametrize("bad", ["1.0", b"1", True, np.bool_(True), [True, False],
                                 np.array(["1", "2"]), None, float("inf"), [1.0, float("nan")]])
def test_scale_types_match_the_calibrators(bad):
    with pytest.raises(ValueError, match="scale"):
        layers.LaplaceNoise(bad)
    with pytest.raises(ValueError, match="stddev"):
        layers.GaussianNoise(bad)


@pytest.mark.parametrize("bad", ["0.5", True, None, float("inf"), [0.5]])
def test_hgm_sigma_types(bad):
    with pytest.raises(ValueError, match="sigma"):
        layers.HeterogeneousGaussianNoise(bad, None)


def test_allow_zero_must_be_bool():
    with pytest.raises(ValueError, match="allow_zero"):
        layers.LaplaceNoise(1.0, allow_zero=1)


def test_zero_scale_entries_add_no_noise_only_there():
    # A per-feature scale with a zero entry (allowed explicitly) noises the other features.
    layer = layers.LaplaceNoise([0.0, 1.0], seed=3, allow_zero=True)
    out = layer(tf.zeros((500, 2)), training=True).numpy()
    np.testing.assert_array_equal(out[:, 0], 0.0)
    assert np.std(out[:, 1]) > 1.0  # Laplace(1) has sd sqrt(2)


# ---------------------------------------------------------------- unit draws of the layers

def test_unit_draw_tails_from_edge_words():
    from layers import noise_streams as noise_mod  # pylint: disable=import-outside-toplevel
    top = 2**32 - 1
    g = noise_mod.unit_gaussian_from_words(tf.constant([[0, 0, 0], [top, top, 0]],
                                                       tf.uint32)).numpy()
    # Smallest uniform ~2^-65: radius sqrt(2 * 65 ln 2) = 9.49 (beyond float64's 5.7 sd).
    assert g[0, 0] == pytest.approx(np.sqrt(-2 * np.log(0.5 * 2.0**-64)), rel=1e-5)
    assert g[1, 0] == 0.0 and np.all(np.isfinite(g))
    lap = noise_mod.unit_laplace_from_words(tf.constant([[0, 0], [0, 1], [top, top - 1]],
                                                        tf.uint32)).numpy()
    assert lap[0] == pytest.approx(64 * np.log(2), rel=1e-5)  # 44.4 b
    assert lap[1] == pytest.approx(-64 * np.log(2), rel=1e-5)
    assert lap[2] == 0.0


@pytest.mark.parametrize("which", ["gaussian", "laplace"])
def test_unit_draws_are_standard(which):
    from scipy import stats  # pylint: disable=import-outside-toplevel

    from layers import noise_streams as noise_mod  # pylint: disable=import-outside-toplevel
    n = 400_000
    draw = noise_mod.unit_gaussian if which == "gaussian" else noise_mod.unit_laplace
    x = draw([n // 4, 4], tf.constant([7, 11], tf.int64)).numpy().reshape(-1).astype(np.float64)
    dist = stats.norm() if which == "gaussian" else stats.laplace()
    # KS at n = 4e5: the 1e-4 critical value is about 2.15 / sqrt(n) = 0.0034.
    assert stats.kstest(x, dist.cdf).statistic < 2.15 / np.sqrt(n)
    # Tail frequency beyond 3.5 sd (Laplace: 5 b): binomial count within 5 standard errors.
    t = 3.5 if which == "gaussian" else 5.0
    p = 2 * dist.sf(t)
    assert abs(np.sum(np.abs(x) > t) - n * p) < 5 * np.sqrt(n * p)
    # Neighbours (e.g. a Box-Muller pair) are uncorrelated: |r| < 5 / sqrt(n).
    assert abs(np.corrcoef(x[:-1], x[1:])[0, 1]) < 5 / np.sqrt(n)
    # Odd sizes are filled exactly.
    assert draw([3, 5], tf.constant([1, 2], tf.int64)).shape == (3, 5)
