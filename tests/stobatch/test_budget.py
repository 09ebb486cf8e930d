"""StoBatch budget, sensitivities, noise generators and loss identities."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tfdp import accounting, losses
from tfdp.papers.stobatch import losses as stobatch_losses
from tfdp.papers.stobatch import models
from tfdp.train import base
from tfdp.papers.stobatch import method as stobatch
from tfdp.papers.stobatch import privacy


@pytest.mark.parametrize("arch,shape,fan_in,beta,delta_r", [
    ("mnist", (28, 28, 1), 25, 196, 4950),
    ("cifar10", (28, 28, 3), 48, 196, 9504),
    ("resnet18", (64, 64, 3), 147, 1024, 150822),
])
def test_sensitivities_from_architecture(arch, shape, fan_in, beta, delta_r):
    # Lemma 2 and 4: Delta_R = fan_in (beta + 2); Delta_L2 = 2 |h_pi| = 512
    spec = models.encoder_spec(arch, shape)
    assert (spec["fan_in"], spec["beta"]) == (fan_in, beta)
    assert stobatch_losses.stobatch_delta_r(fan_in=fan_in, beta=beta) == delta_r
    assert stobatch_losses.stobatch_delta_l2(hidden_units=256) == 512


# Worked examples, s1 = 0.5: (fan_in, beta, m, eps, eps2, gamma_x, gamma, eps1)
CASES = [
    (25, 196, 2499, 0.2, 0.1, 1.980792, 7.923169, 0.061310),   # MNIST eps = 0.2
    (48, 196, 1851, 2.0, 1.0, 5.134522, 20.538088, 0.804214),  # CIFAR-10 r = 0
    (147, 1024, 4500, 5.0, 1.0, 33.516, 134.064, 3.856181),    # Tiny ImageNet r = 3
]


@pytest.mark.parametrize("fan_in,beta,m,eps,eps2,gamma_x,gamma,eps1", CASES)
def test_budget_solve_fixtures(fan_in, beta, m, eps, eps2, gamma_x, gamma, eps1):
    # gamma_x = Delta_R / m and the budget solve (Lemma 3, Theorem 4)
    b = privacy.solve_budget(epsilon=eps, eps2=eps2, fan_in=fan_in, beta=beta, m=m,
                              first_layer_norm=0.5)
    assert b.gamma_x == pytest.approx(gamma_x, abs=1e-6 if gamma_x < 10 else 1e-3)
    assert b.gamma == pytest.approx(gamma, abs=1e-6 if gamma < 100 else 1e-3)
    assert b.eps1 == pytest.approx(eps1, abs=1e-6)
    total = b.eps1 + b.eps1 / b.gamma_x + b.eps1 / b.gamma + b.eps2
    assert abs(total - eps) < 1e-12


@pytest.mark.parametrize("gamma_norm", [0.1, 0.5, 3.0])
@pytest.mark.parametrize("eps", [0.3, 1.0, 7.5])
def test_budget_solve_any_gamma(gamma_norm, eps):
    b = privacy.solve_budget(epsilon=eps, eps2=0.1, fan_in=25, beta=196, m=999,
                              first_layer_norm=gamma_norm)
    assert abs(b.to_dict()["theorem4_total"] - eps) < 1e-12


@pytest.mark.parametrize("r", range(9))
def test_cifar_and_tiny_imagenet_rules(r):
    # The paper's rules: eps2 = 1 + r/3 (CIFAR-10) or 1 (Tiny ImageNet), eps_total = 2 + r
    for fan_in, beta, m, eps2 in ((48, 196, 1851, 1 + r / 3), (147, 1024, 4500, 1.0)):
        b = privacy.solve_budget(epsilon=2.0 + r, eps2=eps2, fan_in=fan_in, beta=beta, m=m,
                                  first_layer_norm=0.5)
        assert b.to_dict()["theorem4_total"] == pytest.approx(2.0 + r, abs=1e-12)
        numerator = (1 + 2 * r / 3) if eps2 != 1.0 else (1 + r)
        assert b.eps1 == pytest.approx(numerator / (1 + 1 / b.gamma + 1 / b.gamma_x), rel=1e-12)


@pytest.mark.parametrize("fan_in,beta,factor", [(25, 196, 0.1188), (48, 196, 0.0619),
                                                (147, 1024, 0.0204)])
def test_a22_term_and_ledger(fan_in, beta, factor):
    # Theorem 1's dropped term and the ledger: claimed Theorem 4 total, extra line, sound value inf
    b = privacy.solve_budget(epsilon=2.0, eps2=0.1, fan_in=fan_in, beta=beta, m=2499,
                              first_layer_norm=0.5)
    assert b.a22_term / b.eps1 == pytest.approx(factor, abs=5e-5)
    ledger = accounting.PrivacyLedger()
    privacy.add_ledger_entries(ledger, b)
    d = ledger.to_dict()
    assert d["claimed_epsilon"] == pytest.approx(2.0, abs=1e-12)
    assert d["epsilon"] == "inf"  # never a sound value below what the analysis supports
    a22 = ledger.get("stobatch_theorem1_gradient_term")
    assert f"{b.a22_term:.6g}" in a22["note"]
    for entry in d["entries"]:
        assert entry["note"]
    assert "ONE draw shared by every example" in ledger.get("stobatch_input_perturbation")["note"]
    assert "ONE feature map" in ledger.get("stobatch_first_layer")["note"]


@pytest.mark.parametrize("scale", [4950 / 0.5, 4950 / 0.5, 512 / 0.1])
def test_laplace_generator_mean_absolute_value(scale):
    # Mean |v| of 1e6 draws within 0.5% of b. The standard error of the mean of
    # |v| (exponential, sd b) is b / 1000, so 0.5% is five standard errors.
    draws = privacy.draw_laplace(np.random.default_rng(7), scale, (1000, 1000))
    assert abs(np.mean(np.abs(draws.astype(np.float64))) / scale - 1.0) < 5e-3


def test_functional_mechanism_identities():
    # Functional-mechanism identities
    rng = np.random.default_rng(0)
    m = 37
    x = rng.uniform(-1, 1, (m, 20))
    chi1 = rng.laplace(0, 5.0, 20)
    np.testing.assert_allclose(np.sum(x + chi1 / m, 0), np.sum(x, 0) + chi1, atol=1e-10)
    chi3 = rng.laplace(0, 3.0, (8, 4))
    w = rng.normal(size=(8, 4))
    lhs = sum(np.sum(chi3[:, k] / m * w[:, k]) for _ in range(m) for k in range(4))
    assert lhs == pytest.approx(np.sum(chi3 * w), rel=1e-10)


def test_taylor_algebra_and_error_bound():
    # Taylor algebra
    z = tf.constant(np.linspace(-0.5, 0.5, 101), tf.float64)[:, None] * tf.ones([1, 3], tf.float64)
    y = tf.one_hot(np.arange(101) % 3, 3, dtype=tf.float64)
    np.testing.assert_allclose(tf.nn.relu(z) - tf.abs(z) / 2, z / 2, atol=1e-15)
    approx = stobatch_losses.stobatch_taylor_loss(z, y).numpy()
    expected = (3 * math.log(2) + tf.reduce_sum(z / 2 - z * y + z ** 2 / 8, -1)).numpy()
    np.testing.assert_allclose(approx, expected, atol=1e-12)
    exact = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=z), -1)
    bound = tf.reduce_sum(tf.abs(z) ** 4 / 192, -1)
    assert np.all(np.abs(approx - exact.numpy()) <= bound.numpy() + 1e-12)


def test_autoencoder_term_identity():
    # Auto-encoder term identity
    rng = np.random.default_rng(1)
    z = rng.normal(size=(5, 6, 6, 1)) * 3
    x = rng.uniform(-3, 3, z.shape)
    code = np.abs(np.maximum(z, 0) - z * x + math.log(2) - np.abs(z) / 2)
    ours = losses.taylor_reconstruction_loss(tf.constant(z), tf.constant(x),
                                             reduction="none").numpy()
    np.testing.assert_allclose(ours, code.reshape(5, -1).sum(1), rtol=1e-12)


@pytest.mark.parametrize("xi", [0.0, 1.0, 1.5, 4.0])
def test_mixed_loss_weight(xi):
    # Eq. 9: adversarial batch = benign batch gives the benign-only loss (+ noise)
    rng = np.random.default_rng(2)
    z = tf.constant(rng.normal(size=(12, 4)), tf.float32)
    y = tf.one_hot(rng.integers(0, 4, 12), 4)
    mixed = stobatch_losses.stobatch_adversarial_objective(z, y, z, y, xi=xi, m=12, noise_term=0.25)
    benign = stobatch_losses.stobatch_taylor_loss(z, y, reduction="sum") / 12 + 0.25
    assert float(mixed) == pytest.approx(float(benign), rel=1e-6)


def _config(**options):
    opts = {"stobatch_architecture": "tiny"}
    opts.update(options)
    return base.TrainConfig(method="stobatch", dataset="synthetic", model_dir="/nonexistent",
                            batch_size=9, epsilon=2.0, options=opts)


@pytest.mark.parametrize("changes,flag", [
    ({"stobatch_eps2": 2.5}, "--epsilon"),
    ({"stobatch_psi": 0.0}, "--stobatch_psi"),
    ({"stobatch_psi": -1.0}, "--stobatch_psi"),
    ({"stobatch_pairing": "random"}, "--stobatch_pairing"),
    ({"stobatch_bn_stats": "sometimes"}, "--stobatch_bn_stats"),
    ({"stobatch_micro_batches": 2}, "--stobatch_micro_batches"),
    ({"stobatch_trainers": 0}, "--stobatch_trainers"),
    ({"stobatch_architecture": "vgg"}, "--stobatch_architecture"),
    ({"stobatch_mu_max": 0.0}, "--stobatch_mu_max"),
])
def test_bad_flags_name_the_flag(changes, flag):
    with pytest.raises(ValueError, match=flag):
        stobatch.StoBatch(_config(**changes)).validate()


def test_bad_batch_and_replica_counts_before_training(tmp_path):
    from tfdp.train import loop
    from tfdp.train.base import DataSpec
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (30, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 3, 30)
    method = stobatch.StoBatch(_config())  # m = 9: 2 m = 18 <= 30
    with pytest.raises(ValueError, match="--batch_size"):
        method.setup(DataSpec.of(x[:10].copy(), y[:10], 3), accounting.PrivacyLedger(),
                     np.random.default_rng(0))
    cfg = _config(stobatch_bn_stats="per_microbatch")
    cfg.model_dir = str(tmp_path / "run")
    data = loop.Data(x, y, x[:5], y[:5], (8, 8, 1), 3)
    with pytest.raises(ValueError, match="per_microbatch"):  # 9 is not divisible by 2
        loop.train(stobatch.StoBatch(cfg), data, strategy=loop.cpu_mirrored_strategy(),
                   verbose=0)


def test_first_layer_norms_and_projection():
    # First-layer norms: hand-made 2x3 matrix (fan_in 2, C_out 3), viewed as a 1x1 conv kernel
    w = np.array([[1.0, -2.0, 0.5], [-0.25, 3.0, 1.0]])
    norms = models.first_layer_norms(w.reshape(1, 1, 2, 3))
    assert norms["l1_rows"] == pytest.approx(4.25)  # l1 -> l1 of x -> W^T x: max row sum
    assert norms["l1_cols"] == pytest.approx(5.0)   # max column sum
    assert norms["spectral"] == pytest.approx(np.linalg.svd(w, compute_uv=False)[0])
    import keras
    layer = keras.layers.Conv2D(3, 1, use_bias=False, kernel_constraint=models.RowL1Bound(4.25))
    layer.build((None, 4, 4, 2))
    layer.kernel.assign(w.reshape(1, 1, 2, 3).astype(np.float32))
    opt = keras.optimizers.SGD(1.0)
    opt.apply_gradients([(-np.ones((1, 1, 2, 3), np.float32), layer.kernel)])  # would exceed
    after = models.first_layer_norms(layer.kernel.numpy())
    assert after["l1_rows"] <= 4.25 + 1e-5
