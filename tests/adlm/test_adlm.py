"""Tests of the AdLM / ILM trainer and models: fixtures, budgets, noise modes, accounting."""

import math

import keras
import numpy as np
import pytest
import scipy.stats
import tensorflow as tf

from tfdp import accounting, losses
from tfdp.papers.adlm import budgets
from tfdp.papers.adlm import losses as adlm_losses
from tfdp.papers.adlm import models
from tfdp.papers.adlm import method as adlm
from tfdp.train.base import DataSpec, StepContext, TrainConfig


def _method(cls=adlm.AdLM, *, epsilon=1.0, batch_size=50, value_range=(0.0, 1.0), **options):
    opts = {"adlm_aux_model": "mlp", "adlm_aux_epochs": 1, "adlm_bound_mode": "bn_clip"}
    opts.update(options)
    cfg = TrainConfig(method=cls.name, dataset="synthetic", model_dir="/nonexistent",
                      epochs=1, batch_size=batch_size, epsilon=epsilon,
                      value_range=value_range, options=opts)
    return cls(cfg)


def _data(n=120, shape=(8, 8, 1), seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, size=(n,) + shape).astype(np.float32)
    y = (np.arange(n) % 10).astype(np.int64)
    return x, y


def _ready(method, x, y, seed=0):
    ledger = accounting.PrivacyLedger()
    method.validate()
    method.setup(DataSpec.of(x, y, 10), ledger, np.random.default_rng(seed))
    model = method.build_model(x.shape[1:], 10)
    return model, ledger


# ----------------------------------------------------------------------------- fixtures


def test_delta_h0_presets():
    # Delta_h0 presets (docs/adlm.md): 9800, 5400, 39,337,984 and 1,254,400.
    mnist = dict(architecture="mnist", input_shape=(28, 28, 1))
    assert budgets.delta_h0("ref_code", **mnist) == 9800
    assert budgets.delta_h0("paper_fc", **mnist) == 39_337_984
    assert budgets.delta_h0("conv_fanin", **mnist) == 1_254_400
    assert budgets.delta_h0("ref_code", architecture="cifar10", input_shape=(32, 32, 3)) == 5400
    assert budgets.delta_h0("123.5", **mnist) == 123.5
    with pytest.raises(ValueError, match="adlm_delta_h0"):
        budgets.delta_h0("wide", **mnist)
    with pytest.raises(ValueError, match="adlm_delta_h0"):
        budgets.delta_h0(-1.0, **mnist)


def test_noise_scale_table():
    # AdLM Alg. 1 l.12-19: per-example input scale Delta_h0/(beta_j eps2 |L|) = 72.5926/beta_j
    # (MNIST) and 0.5/beta_j (CIFAR); FM scales Delta_F/eps3 = 12083.33 and per example
    # 6.71296 / 0.472222.
    assert 9800 / (0.075 * 1800) == pytest.approx(72.5926, rel=1e-6)
    assert 5400 / (1.5 * 7200) == pytest.approx(0.5, rel=1e-12)
    df_mnist = adlm_losses.adlm_delta_f(num_classes=10, hidden_units=25)
    df_cifar = adlm_losses.adlm_delta_f(num_classes=10, hidden_units=30)
    assert (df_mnist, df_cifar) == (1812.5, 2550.0)
    assert df_mnist / 0.15 == pytest.approx(12083.33, rel=1e-6)
    assert df_mnist / (0.15 * 1800) == pytest.approx(6.71296, rel=1e-5)
    assert df_cifar / (0.75 * 7200) == pytest.approx(0.472222, rel=1e-5)


def test_per_record_diagnostics():
    # docs/adlm.md: MNIST code-release configuration: eps_rec,x ~ 10.8, eps_rec,y ~ 0.30.
    ex = budgets.per_record_epsilon_inputs(batch_size=1800, eps_j_sum=784 * 0.075,
                                        feature_range=1.0, delta_h0_value=9800)
    ey = budgets.per_record_epsilon_labels(batch_size=1800, eps3=0.15, delta_f=1812.5)
    assert ex == pytest.approx(10.8, rel=1e-12)
    assert ey == pytest.approx(0.2979, abs=1e-4)
    assert 0.075 + ex + ey == pytest.approx(11.17, abs=0.01)


def test_parameter_counts_and_output_shape():
    # Code-release layers: MNIST 130,831 (130,781 without BN scale/shift); CIFAR 2,245,648.
    def trainable(m):
        return int(sum(np.prod(v.shape) for v in m.trainable_variables))
    m = models.mnist_model(bound_mode="bn_clip", output_bias=True)
    assert trainable(m) == 130_831
    assert trainable(models.mnist_model(bound_mode="paper_lrn_minmax", output_bias=True)) == 130_781
    assert trainable(models.mnist_model(bound_mode="bn_clip", bn_eval="batch",
                                        output_bias=True)) == 130_831
    c = models.cifar10_model(bound_mode="bn_clip", output_bias=True)
    assert trainable(c) == 2_245_648
    assert m(np.zeros((3, 28, 28, 1), np.float32)).shape == (3, 10)
    assert c(np.zeros((2, 32, 32, 3), np.float32)).shape == (2, 10)


def test_lemma3_conv_fanin_bound_empirically():
    # AdLM Lemma 3, empirically: for a conv first layer the patch-wise L1 change of the
    # batch-summed input, summed over all output units, is at most the conv_fanin preset. A
    # neuron at one position of one filter sees a k x k x C patch; summing |change| of its
    # patch over every neuron is the conv of |change| with an all-ones kernel, summed, times
    # the number of filters.
    rng = np.random.default_rng(11)
    h, w, c, k, f = 12, 12, 1, 5, 4
    bound = budgets.delta_h0("conv_fanin", architecture="mnist", input_shape=(h, w, c)) / 32 * f
    ones = tf.ones((k, k, c, 1))
    for _ in range(200):
        batch = rng.uniform(0, 1, size=(6, h, w, c))
        other = batch.copy()
        other[rng.integers(6)] = rng.uniform(0, 1, size=(h, w, c))
        change = np.abs(batch.sum(0) - other.sum(0))[None].astype(np.float32)
        total = f * float(tf.reduce_sum(tf.nn.conv2d(change, ones, 1, "SAME")))
        assert total <= bound


def test_lemma5_coefficient_change_bound():
    # AdLM Lemma 5, empirically:
    # sum_l ||(1/2 - y_l) h - (1/2 - y'_l) h'||_1 + ||(1/8)(h h^T - h' h'^T)||_1
    # <= M (|h| + |h|^2 / 4), over 10,000 random trials and the all-ones / all-zeros corner.
    rng = np.random.default_rng(12)
    m, hk = 10, 25
    bound = adlm_losses.adlm_delta_f(num_classes=m, hidden_units=hk)

    def change(h1, h2, y1, y2):
        lin = sum(np.abs((0.5 - y1[l]) * h1 - (0.5 - y2[l]) * h2).sum() for l in range(m))
        quad = m * np.abs(np.outer(h1, h1) - np.outer(h2, h2)).sum() / 8
        return lin + quad

    eye = np.eye(m)
    for low in (0.0, -1.0):
        for _ in range(5000):
            h1, h2 = rng.uniform(low, 1, hk), rng.uniform(low, 1, hk)
            assert change(h1, h2, eye[rng.integers(m)], eye[rng.integers(m)]) <= bound
    assert change(np.ones(hk), np.zeros(hk), eye[0], eye[1]) <= bound


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize("options, match", [
    ({"adlm_eps_split": ["0.3", "0.3", "0.3"]}, "adlm_eps_split"),
    ({"adlm_eps_split": ["0.5", "0.5"]}, "adlm_eps_split"),
    ({"adlm_eps_split": ["-0.5", "0.5", "1.0"]}, "adlm_eps_split"),
    ({"adlm_input_noise": "fresh"}, "adlm_input_noise"),
    ({"adlm_fm_mode": "none"}, "adlm_fm_mode"),
    ({"adlm_delta_h0": "huge"}, "adlm_delta_h0"),
    ({"adlm_beta_floor": 0.0}, "adlm_beta_floor"),
])
def test_bad_flags_raise_naming_the_flag(options, match):
    with pytest.raises(ValueError, match=match):
        _method(**options).validate()


def test_bad_epsilon_delta_and_range():
    with pytest.raises(ValueError, match="--epsilon"):
        _method(epsilon=None).validate()
    with pytest.raises(ValueError, match="--value_range"):
        _method(value_range=(0.0, 255.0)).validate()
    m = _method()
    x, y = _data(20)
    with pytest.raises(ValueError, match="x_train"):
        m.setup(DataSpec.of(x * 3, y, 10), accounting.PrivacyLedger(), np.random.default_rng(0))


# ----------------------------------------------------------------------------- accounting


def test_ledger_claims_and_sound_values():
    # AdLM claims eps1+eps2+eps3, ILM eps2+eps3; sound values next to them.
    x, y = _data()
    m = _method(epsilon=1.0, batch_size=50, adlm_delta_h0="ref_code")
    _, ledger = _ready(m, x, y)
    d = ledger.to_dict()
    assert d["claimed_epsilon"] == pytest.approx(1.0, rel=1e-12)
    assert d["differs"]
    e2 = ledger.get("adlm_eps2_inputs")
    # per_example_fixed: |L| * d * eps2 * range / Delta_h0 with Delta_h0 = 2 * 4 * 4 * 25.
    assert e2["epsilon"] == pytest.approx(50 * 64 * 0.25 / 800, rel=1e-9)
    assert ledger.get("adlm_eps1_relevance")["epsilon"] == pytest.approx(0.25 * 120 / 2)
    assert ledger.get("adlm_eps3_functional_mechanism")["epsilon"] == pytest.approx(
        2 * 50 * 0.5 / adlm_losses.adlm_delta_f(num_classes=10, hidden_units=25))
    ilm = _method(adlm.ILM, epsilon=1.0, adlm_input_noise="batch_shared_per_step",
                  adlm_fm_mode="ref_code")
    _, ledger = _ready(ilm, x, y)
    d = ledger.to_dict()
    assert d["claimed_epsilon"] == pytest.approx(0.75, rel=1e-12)  # eps2 + eps3
    assert d["epsilon"] == "inf"  # shared noise: no finite per-record bound (docs/adlm.md)
    assert "adlm_eps1_relevance" not in ledger and "ilm_eps1_relevance" not in ledger


def test_ledger_independent_of_steps():
    # The same ledger after 1 step and after many steps (no per-step cost).
    x, y = _data(100)
    m = _method(adlm.ILM, batch_size=50, adlm_input_noise="batch_shared_per_step")
    model, ledger = _ready(m, x, y)
    before = ledger.to_dict()
    m.model, m.optimizer = model, keras.optimizers.Adam(1e-3)

    @tf.function
    def step(seed):
        ctx = StepContext.current(seed, 50, tf.range(50, dtype=tf.int64))
        return m.train_step(ctx, tf.constant(x[:50]), tf.constant(y[:50]))
    for i in range(3):
        step(tf.constant([i, 7], tf.int64))
    assert ledger.to_dict() == before


# ----------------------------------------------------------------------------- noise modes


def test_per_example_fixed_noise_is_fixed_per_record_and_has_the_scale():
    # xbar_i identical across epochs, different between records; the
    # empirical per-feature scale matches Delta_h0/(beta_j eps2 |L|). mean|v|/s has relative
    # standard error 1/sqrt(n) (Var|V| = s^2); n = 3000 records -> 1.8%; tolerance 10% per
    # feature (5.5 standard errors, 64 features). KS on all 192k normalised values, p > 1e-3.
    x, y = _data(3000, seed=13)
    m = _method(adlm.AdLM, batch_size=50, adlm_delta_h0=100.0)
    _ready(m, x, y)
    xt = tf.constant(x)
    idx = tf.range(len(x), dtype=tf.int64)
    noise = tf.function(lambda v, i: m.noisy_inputs(v, m.record_seeds(i)) - v)
    n1 = noise(xt, idx).numpy()
    n2 = noise(xt[::-1], idx[::-1]).numpy()[::-1]
    np.testing.assert_array_equal(n1, n2)  # same record, same noise, in any batch position
    assert not np.allclose(n1[0], n1[1])
    scale = m.setup_state()["input_scale"]
    beta = m.setup_state()["beta"]
    np.testing.assert_allclose(scale, 100.0 / (beta * 0.25 * 50), rtol=1e-6)
    ratio = np.abs(n1).mean(axis=0) / scale
    assert np.all(np.abs(ratio - 1) < 0.10)
    assert scipy.stats.kstest((n1 / scale).ravel(), "laplace").pvalue > 1e-3


def test_batch_shared_per_step_noise():
    # batch_shared_per_step: identical within a batch, different between steps.
    x, y = _data(40)
    m = _method(adlm.ILM, batch_size=40, adlm_input_noise="batch_shared_per_step")
    _ready(m, x, y)
    xt = tf.constant(x)
    a = (m.noisy_inputs(xt, None, StepContext.current([1, 2], 40)) - xt).numpy()
    b = (m.noisy_inputs(xt, None, StepContext.current([1, 3], 40)) - xt).numpy()
    np.testing.assert_allclose(a, np.broadcast_to(a[:1], a.shape), atol=1e-5)
    assert not np.allclose(a[0], b[0])


def test_shared_fixed_noise_and_restore():
    # shared_fixed: identical everywhere; the draw is in the setup state and a variable.
    x, y = _data(40)
    m = _method(adlm.ILM, batch_size=40, adlm_input_noise="shared_fixed")
    _ready(m, x, y)
    xt = tf.constant(x)
    a = (m.noisy_inputs(xt) - xt).numpy()
    np.testing.assert_allclose(a, np.broadcast_to(a[:1], a.shape), atol=1e-5)
    state = m.setup_state()
    np.testing.assert_allclose(a[0], state["shared_noise"], rtol=1e-5, atol=1e-5)
    again = _method(adlm.ILM, batch_size=40, adlm_input_noise="shared_fixed")
    again.restore_setup_state(state)
    again.build_model(x.shape[1:], 10)
    np.testing.assert_array_equal(again.shared_noise.numpy(), m.shared_noise.numpy())


def test_fm_modes():
    # FM modes: label_only leaves phi0/phi2 exact; all_orders clamps phi2 >= 0; the noise
    # of a record is the same in every epoch.
    x, y = _data(60)
    xt, yt = tf.constant(x), tf.constant(y)
    onehot = np.eye(10)[y]
    m = _method(adlm.ILM, batch_size=10, epsilon=0.5)
    model, _ = _ready(m, x, y)
    idx = tf.range(len(x), dtype=tf.int64)
    phi0, phi1, phi2 = m.coefficients(xt, yt, 10, m.record_seeds(idx))
    assert phi0 is None and phi2 is None  # exact log 2 and 1/8 inside adlm_taylor_loss
    again = tf.function(lambda a, b: m.coefficients(a, b, 10, m.record_seeds(idx))[1])(xt, yt)
    np.testing.assert_array_equal(phi1.numpy(), again.numpy())
    assert not np.allclose(phi1.numpy(), 0.5 - onehot)
    m2 = _method(adlm.ILM, batch_size=10, epsilon=0.5, adlm_fm_mode="per_example_all_orders")
    _ready(m2, x, y)
    phi0, phi1, phi2 = tf.function(
        lambda a, b: m2.coefficients(a, b, 10, m2.record_seeds(idx)))(xt, yt)
    assert np.all(phi2.numpy() >= 0) and np.any(phi2.numpy() == 0)
    assert not np.allclose(phi0.numpy(), math.log(2))


def test_ref_code_fm_term_gradient():
    # The code release's linear term: d/dW of -(1/|L|^2) sum(Lap * W) is -Lap/|L|^2.
    x, y = _data(20)
    m = _method(adlm.ILM, batch_size=20, adlm_fm_mode="ref_code",
                adlm_input_noise="shared_fixed")
    model, _ = _ready(m, x, y)
    kernel = model.get_layer(models.OUTPUT_LAYER).kernel
    with tf.GradientTape() as tape:
        term = losses.functional_mechanism_term(m.fm_noise, kernel, divisor=20 * 20)
    np.testing.assert_allclose(tape.gradient(term, kernel).numpy(),
                               -m.fm_noise.numpy() / 400, rtol=1e-5)


@pytest.mark.parametrize("fm_mode, times", [("ref_code_broadcast", 1.0),
                                             ("ref_code", None)])
def test_ref_code_broadcast_is_the_release_objective(fm_mode, times):
    """The release (AdLM/MNIST/AdLM.py) minimises the sum of its [|L|, M] Taylor tensor after
    subtracting the scalar sum(N * W), N = Lap/|L|, from every entry: written out here in TF2.
    --adlm_fm_mode=ref_code_broadcast is that objective divided by |L| (the mean), in value and
    gradient; ref_code counts the term once (|L| M times less)."""
    x, y = _data(20)
    m = _method(adlm.ILM, batch_size=20, adlm_fm_mode=fm_mode, adlm_input_noise="shared_fixed")
    model, _ = _ready(m, x, y)
    xt, yt = tf.constant(x), tf.constant(y)
    phi0, phi1, phi2 = m.coefficients(xt, yt, 10, None)
    kernel = model.get_layer(models.OUTPUT_LAYER).kernel
    with tf.GradientTape(persistent=True) as tape:
        ours, _ = m.objective(model, xt, phi0, phi1, phi2, 20)
        z = model(xt, training=True)
        y1 = tf.one_hot(yt, 10)
        relu = tf.where(z >= 0, z, tf.zeros_like(z))
        neg_abs = tf.where(z >= 0, -z, z)
        noise = tf.cast(m.fm_noise, tf.float32) / 20.0  # the release's N = Lap / |L|
        data = relu - z * y1 + (math.log(2.0) + 0.5 * neg_abs + neg_abs ** 2 / 8.0)
        taylor = data - tf.reduce_sum(noise * kernel)  # broadcast to every [record, class]
        release = tf.reduce_sum(taylor)
        data_sum = tf.reduce_sum(data)
    g_ours, g_release = tape.gradient(ours, kernel), tape.gradient(release, kernel)
    if times is not None:
        np.testing.assert_allclose(ours.numpy() * 20, release.numpy(), rtol=1e-5)
        np.testing.assert_allclose(g_ours.numpy() * 20, g_release.numpy(), rtol=1e-4,
                                   atol=1e-6)
    else:  # ref_code: the noise part of the gradient is |L| M = 200 times smaller
        data_grad = tape.gradient(data_sum, kernel)
        np.testing.assert_allclose(
            (g_ours.numpy() * 20 - data_grad.numpy()) * 200,
            g_release.numpy() - data_grad.numpy(), rtol=1e-3, atol=1e-3)


def test_no_noise_at_inference_and_data_isolation():
    # Data isolation: the saved network has no noise: two inference passes agree; the update
    # depends on the raw batch only through (xbar, phibar).
    x, y = _data(40)
    m = _method(adlm.ILM, batch_size=20, adlm_input_noise="batch_shared_per_step",
                adlm_bn_eval="moving")
    model, _ = _ready(m, x, y)
    a, b = model(x[:20], training=False).numpy(), model(x[:20], training=False).numpy()
    np.testing.assert_array_equal(a, b)
    xbar = tf.constant(x[:20] + 0.5)
    _, phi1, _ = m.coefficients(tf.constant(x[:20]), tf.constant(y[:20]), 10,
                                m.record_seeds(tf.range(20, dtype=tf.int64)))
    start = [v.numpy() for v in model.trainable_variables]
    results = []
    for _ in range(2):
        for v, s in zip(model.trainable_variables, start):
            v.assign(s)
        opt = keras.optimizers.SGD(0.1)
        m.step_on_noisy(model, opt, xbar, None, phi1, None, tf.constant(y[:20]), 20)
        results.append([v.numpy() for v in model.trainable_variables])
    for u, v in zip(*results):
        np.testing.assert_array_equal(u, v)


def test_training_step_same_seed_same_result():
    # Same random state, same result (bit-for-bit on CPU).
    x, y = _data(40)
    outs = []
    for _ in range(2):
        keras.utils.set_random_seed(3)
        m = _method(adlm.AdLM, batch_size=20, adlm_input_noise="batch_shared_per_step")
        model, _ = _ready(m, x, y, seed=5)
        m.model, m.optimizer = model, keras.optimizers.Adam(1e-2)

        @tf.function
        def step():
            ctx = StepContext.current(tf.constant([4, 4], tf.int64), 20,
                                      tf.range(20, dtype=tf.int64))
            return m.train_step(ctx, tf.constant(x[:20]), tf.constant(y[:20]))
        step()
        outs.append(model.get_layer(models.OUTPUT_LAYER).kernel.numpy())
    np.testing.assert_array_equal(outs[0], outs[1])


def test_batch_shared_noise_is_shared_across_replicas():
    # Under MirroredStrategy (2 logical CPUs, tests/conftest.py) the per-step noise is drawn
    # from the step seed, identical on every replica: one draw for the whole global batch.
    if len(tf.config.list_logical_devices("CPU")) < 2:
        pytest.fail("tests/conftest.py should configure 2 logical CPU devices")
    x, y = _data(40)
    m = _method(adlm.ILM, batch_size=40, adlm_input_noise="batch_shared_per_step")
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    ledger = accounting.PrivacyLedger()
    m.setup(DataSpec.of(x, y, 10), ledger, np.random.default_rng(0))
    with strategy.scope():
        m.build_model(x.shape[1:], 10)
    seed = tf.constant([5, 6], tf.int64)

    def replica_fn(xb):
        return m.noisy_inputs(xb, None, StepContext.current(seed, 40)) - xb

    dist = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices(x).batch(40))
    out = strategy.run(tf.function(replica_fn), args=(next(iter(dist)),))
    parts = [t.numpy() for t in strategy.experimental_local_results(out)]
    assert len(parts) == 2
    np.testing.assert_allclose(parts[0][0], parts[1][0], atol=1e-6)


def test_duplicate_images_get_independent_noise():
    """Regression (issue: noise keyed by content): two identical images, even with different
    labels, used to get identical input and label noise; noise is keyed by position now."""
    x, y = _data(40)
    x[1] = x[0]  # a duplicate record with another label
    y[0], y[1] = 3, 7
    m = _method(adlm.ILM, batch_size=20, epsilon=0.5)
    _ready(m, x, y)
    xt, yt = tf.constant(x[:2]), tf.constant(y[:2])
    seeds = m.record_seeds(tf.constant([0, 1], tf.int64))
    noise = (m.noisy_inputs(xt, seeds) - xt).numpy()
    assert np.abs(noise[0] - noise[1]).min() > 0  # every feature differs
    _, phi1, _ = m.coefficients(xt, yt, 10, seeds)
    label_noise = phi1.numpy() - (0.5 - np.eye(10)[y[:2]])
    assert np.abs(label_noise[0] - label_noise[1]).min() > 0
    # Same position, same noise (drawn once per record: reproducible across epochs).
    again = (m.noisy_inputs(xt, m.record_seeds(tf.constant([0, 1], tf.int64))) - xt).numpy()
    np.testing.assert_array_equal(noise, again)
    with pytest.raises(ValueError, match="indices"):
        m.train_step(StepContext.current([0, 0], 2), xt, yt)
