"""Statistical and API tests of the Laplace and Gaussian samplers (numpy and TF)."""

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from tfdp import mechanisms as m

N = 200_000  # draws per statistical check
# Tolerances are Z standard errors of the statistic at this N (fixed seeds, so each check
# is deterministic; Z = 5 keeps the false-alarm rate of a correct sampler below 1e-6 were
# the seed changed).
Z = 5.0
KS_P_MIN = 1e-3  # Kolmogorov-Smirnov threshold


def _check_laplace_moments(x: np.ndarray, s: float) -> None:
    n = x.size
    # Laplace(0, s): mean 0, sd 2^0.5 s, so SE(mean) = s sqrt(2/n).
    assert abs(x.mean()) <= Z * s * np.sqrt(2.0 / n)
    # Var = 2 s^2; fourth central moment 24 s^4, so SE(var) = sqrt((24 - 4) s^4 / n).
    assert abs(x.var() - 2 * s * s) <= Z * s * s * np.sqrt(20.0 / n)
    # |X| ~ Exp(s): mean s, sd s, so SE(mean|x|) = s / sqrt(n).
    assert abs(np.abs(x).mean() - s) <= Z * s / np.sqrt(n)
    assert stats.kstest(x, stats.laplace(scale=s).cdf).pvalue > KS_P_MIN


def _check_gaussian_moments(x: np.ndarray, sd: float) -> None:
    n = x.size
    assert abs(x.mean()) <= Z * sd / np.sqrt(n)  # SE(mean) = sd / sqrt(n)
    assert abs(x.var() - sd * sd) <= Z * sd * sd * np.sqrt(2.0 / n)  # SE(var) = sd^2 sqrt(2/n)
    assert stats.kstest(x, stats.norm(scale=sd).cdf).pvalue > KS_P_MIN


# Laplace sampler: scales 0.1, 1 and 72.59 (the MNIST per-example input-noise scale).
@pytest.mark.parametrize("s", [0.1, 1.0, 72.59])
def test_numpy_laplace_moments_and_ks(s):
    x = m.sample_laplace(s, N, rng=np.random.default_rng(11))
    assert x.shape == (N,) and x.dtype == np.float64
    _check_laplace_moments(x, s)


@pytest.mark.parametrize("s", [0.1, 1.0, 72.59])
def test_tf_laplace_stateless_moments_and_ks(s):
    x = m.tf_laplace([N], s, seed=tf.constant([3, 4]), dtype=tf.float64).numpy()
    _check_laplace_moments(x, s)


def test_tf_laplace_generator_in_tf_function_moments_and_ks():
    gen = tf.random.Generator.from_seed(5)

    @tf.function
    def draw():
        return m.tf_laplace([N], 2.0, generator=gen)

    a, b = draw().numpy(), draw().numpy()
    assert a.dtype == np.float32
    assert not np.array_equal(a, b)  # the generator advances between calls
    _check_laplace_moments(a.astype(np.float64), 2.0)
    _check_laplace_moments(b.astype(np.float64), 2.0)


@pytest.mark.parametrize("sd", [0.1, 1.0, 4.8542])
def test_numpy_gaussian_moments_and_ks(sd):
    _check_gaussian_moments(m.sample_gaussian(sd, N, rng=np.random.default_rng(12)), sd)


@pytest.mark.parametrize("sd", [0.1, 1.0, 4.8542])
def test_tf_gaussian_moments_and_ks(sd):
    x = m.tf_gaussian([N], sd, seed=[7, 8], dtype=tf.float64).numpy()
    _check_gaussian_moments(x, sd)
    gen = tf.random.Generator.from_seed(9)
    y = tf.function(lambda: m.tf_gaussian([N], sd, generator=gen))().numpy()
    _check_gaussian_moments(y.astype(np.float64), sd)


def test_per_feature_scales_numpy_and_tf():
    # AdLM Alg. 1 l.12-13: per-feature scales Delta_h0 / (beta_j eps2), here divided by |L|.
    beta = np.array([0.5, 1.0, 1.5])
    scales = 9800.0 / (beta * 0.075) / 1800.0  # 72.5926 / beta_j (MNIST code release)
    n = 100_000
    xs = [m.sample_laplace(scales, (n, 3), rng=np.random.default_rng(1)),
          m.tf_laplace([n, 3], scales, seed=[1, 2], dtype=tf.float64).numpy()]
    for x in xs:
        assert x.shape == (n, 3)
        for j in range(3):
            # mean|x_j| estimates the scale; SE = s_j / sqrt(n).
            assert abs(np.abs(x[:, j]).mean() - scales[j]) <= Z * scales[j] / np.sqrt(n)
            assert stats.kstest(x[:, j], stats.laplace(scale=scales[j]).cdf).pvalue > KS_P_MIN
    stds = np.array([0.5, 2.0])
    g = m.tf_gaussian([n, 2], stds, seed=[5, 5], dtype=tf.float64).numpy()
    for j in range(2):
        assert abs(g[:, j].std() - stds[j]) <= Z * stds[j] / np.sqrt(2 * n)  # SE(sd) = sd/sqrt(2n)


def test_stateless_seed_reproducible_and_distinct():
    a = m.tf_laplace([1000], 1.0, seed=[1, 2])
    b = m.tf_laplace([1000], 1.0, seed=tf.constant([1, 2], tf.int64))
    c = m.tf_laplace([1000], 1.0, seed=[1, 3])
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), c.numpy())
    g1 = m.tf_gaussian([50], 1.0, seed=[4, 4])
    g2 = m.tf_gaussian([50], 1.0, seed=[4, 4])
    np.testing.assert_array_equal(g1.numpy(), g2.numpy())


def test_numpy_same_rng_state_reproducible():
    a = m.sample_laplace(1.0, 100, rng=np.random.default_rng(3))
    b = m.sample_laplace(1.0, 100, rng=np.random.default_rng(3))
    np.testing.assert_array_equal(a, b)


def test_tf_function_dynamic_shape_and_tensor_scale():
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32),
                                  tf.TensorSpec([4], tf.float32), tf.TensorSpec([2], tf.int32)])
    def noisy(x, scale, seed):
        return x + m.tf_laplace(tf.shape(x), scale, seed=seed) + m.tf_gaussian(
            [tf.shape(x)[0], 4], scale, seed=seed)

    out = noisy(tf.zeros([6, 4]), tf.constant([0.0, 1.0, 2.0, 3.0]), tf.constant([1, 1]))
    assert out.shape == (6, 4)
    np.testing.assert_array_equal(out.numpy()[:, 0], 0.0)  # zero scale -> no noise
    with pytest.raises(tf.errors.InvalidArgumentError):
        noisy(tf.zeros([2, 4]), tf.constant([-1.0, 1.0, 1.0, 1.0]), tf.constant([1, 1]))


def test_laplace_tail_mass():
    # P(|X| > 10 b) = e^-10; with n = 2e6 the count is ~Poisson(90.8), SE = sqrt(90.8).
    n = 2_000_000
    for x in (m.tf_laplace([n], 1.0, seed=[0, 1], dtype=tf.float64).numpy(),
              m.sample_laplace(1.0, n, rng=np.random.default_rng(2))):
        assert np.all(np.isfinite(x))
        expected = n * np.exp(-10.0)
        assert abs(np.sum(np.abs(x) > 10.0) - expected) <= Z * np.sqrt(expected)


@pytest.mark.parametrize("kwargs, word", [
    (dict(), "seed"),
    (dict(seed=[1, 2], generator=tf.random.Generator.from_seed(1)), "seed"),
    (dict(seed=[1, 2, 3]), "seed"),
    (dict(seed=[1.0, 2.0]), "seed"),
    (dict(generator="gen"), "generator"),
    (dict(seed=[1, 2], dtype=tf.int32), "dtype"),
])
def test_tf_samplers_bad_arguments(kwargs, word):
    for fn in (m.tf_laplace, m.tf_gaussian):
        with pytest.raises(ValueError, match=word):
            fn([3], 1.0, **kwargs)


@pytest.mark.parametrize("scale", [-1.0, float("nan"), float("inf"), [1.0, -0.5]])
def test_bad_scales(scale):
    with pytest.raises(ValueError, match="scale"):
        m.sample_laplace(scale, 2, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="scale"):
        m.tf_laplace([2], scale, seed=[1, 2])
    with pytest.raises(ValueError, match="stddev"):
        m.sample_gaussian(scale, 2, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="stddev"):
        m.tf_gaussian([2], scale, seed=[1, 2])


def test_bad_shapes_and_rng():
    with pytest.raises(ValueError, match="scale"):
        m.sample_laplace([1.0, 2.0], (4, 3), rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="scale"):
        m.tf_laplace([4, 3], [1.0, 2.0], seed=[1, 2])
    with pytest.raises(ValueError, match="stddev"):
        m.tf_gaussian([3], [[1.0, 1.0, 1.0]], seed=[1, 2])  # would enlarge the output
    with pytest.raises(ValueError, match="shape"):
        m.tf_laplace([-1], 1.0, seed=[1, 2])
    with pytest.raises(ValueError, match="size"):
        m.sample_gaussian(1.0, (-2,), rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="rng"):
        m.sample_laplace(1.0, 3, rng=np.random.RandomState(0))
    with pytest.raises(ValueError, match="rng"):
        m.sample_gaussian(1.0, 3, rng=0)


def test_replicas_draw_distinct_noise():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        gen = tf.random.Generator.from_seed(1)
    seed = tf.constant([3, 4])

    @tf.function
    def step():
        return strategy.run(lambda: (m.tf_laplace([1000], 1.0, generator=gen),
                                     m.tf_gaussian([1000], 1.0, seed=m.replica_seed(seed))))

    lap, gau = step()
    lap0, lap1 = (t.numpy() for t in strategy.experimental_local_results(lap))
    gau0, gau1 = (t.numpy() for t in strategy.experimental_local_results(gau))
    assert not np.array_equal(lap0, lap1)
    assert not np.array_equal(gau0, gau1)
    # Outside a replica context the folded seed is replica 0's, so replica 0 is reproducible.
    outside = m.tf_gaussian([1000], 1.0, seed=m.replica_seed(seed)).numpy()
    np.testing.assert_array_equal(gau0, outside)
    with pytest.raises(ValueError, match="seed"):
        m.replica_seed([1, 2, 3])


def test_float32_draw_path_moments_and_ks():
    lap = m.tf_laplace([N], 1.5, seed=[9, 9], draw_dtype=tf.float32).numpy().astype(np.float64)
    _check_laplace_moments(lap, 1.5)
    gau = m.tf_gaussian([N], 1.5, seed=[9, 9], draw_dtype=tf.float32).numpy().astype(np.float64)
    _check_gaussian_moments(gau, 1.5)
    with pytest.raises(ValueError, match="draw_dtype"):
        m.tf_laplace([3], 1.0, seed=[1, 2], draw_dtype=tf.float16)
    with pytest.raises(ValueError, match="draw_dtype"):
        m.tf_gaussian([3], 1.0, seed=[1, 2], draw_dtype="int32")
