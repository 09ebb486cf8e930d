"""GPM sampler, key, discrete Gaussian, attack, validation (GPM Def 2.4-3.1, Lemma 2.6, Sec. 5)."""

import math
import pathlib
import warnings

import numpy as np
import pytest
from scipy import special, stats

from tfdp import mechanisms
from tfdp.papers.gpm import pancake

pytestmark = pytest.mark.filterwarnings("ignore::tfdp.papers.gpm.pancake.GPMResearchWarning")

_TABLE = {0.125: 50.969205977598364, 0.25: 25.52372208700381, 0.5: 12.800801910640576,
          1.0: 6.438992798538109}


def _rng(seed):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------- 1. calibration

@pytest.mark.parametrize("eps,sigma", sorted(_TABLE.items()))
def test_gm_sigma_reference_table(eps, sigma):
    assert pancake.gm_sigma(eps, 1e-10, 1.0) == pytest.approx(sigma, rel=1e-12)


def test_gm_sigma_dpsgd_values_and_linearity():
    assert pancake.gm_sigma(0.125, 1e-10, 0.0625) == pytest.approx(3.1855753735998977, rel=1e-12)
    assert pancake.gm_sigma(1.0, 1e-10, 0.0625) == pytest.approx(0.4024370499086318, rel=1e-12)
    for eps in (0.125, 0.5, 3.0):
        assert pancake.gm_sigma(eps, 1e-5, 2.5) == pytest.approx(
            2.5 * pancake.gm_sigma(eps, 1e-5, 1.0), rel=1e-13)


@pytest.mark.parametrize("eps", [0.01, 0.125, 1.0, 10.0, 100.0])
@pytest.mark.parametrize("delta", [1e-15, 1e-10, 1e-5, 0.1])
def test_gm_round_trip(eps, delta):
    assert pancake.gm_eps(pancake.gm_sigma(eps, delta), delta) == pytest.approx(eps, rel=1e-11)


def test_gm_calibration_is_the_mechanisms_tail_calibration():
    # GPM uses tfdp.mechanisms' GPM Thm 2.3 calibration, bit for bit.
    for eps in (0.125, 1.0, 7.5):
        for delta, sens in ((1e-10, 1.0), (1e-5, 0.0625), (0.3, 2.5)):
            sigma = pancake.gm_sigma(eps, delta, sens)
            assert sigma == mechanisms.gaussian_tail_sigma(epsilon=eps, delta=delta,
                                                           sensitivity=sens)
            assert pancake.gm_eps(sigma, delta, sens) == mechanisms.gaussian_tail_epsilon(
                sigma=sigma, delta=delta, sensitivity=sens)


def test_gm_calibration_values_unchanged():
    # The closed forms of GPM Thm 2.3 as GPM computed them before it shared the calibration
    # of tfdp.mechanisms: the shared code must give exactly the same float64 numbers.
    for eps in (0.01, 0.125, 1.0, 10.0, 100.0):
        for delta in (1e-15, 1e-10, 1e-5, 0.1):
            for sens in (0.0625, 1.0, 2.5):
                a = float(special.ndtri(delta))
                sigma = sens / (a + math.sqrt(a * a + 2.0 * eps))
                assert pancake.gm_sigma(eps, delta, sens) == sigma
                r = sens / sigma
                assert pancake.gm_eps(sigma, delta, sens) == 0.5 * r * r - r * float(
                    special.ndtri(delta))


# ---------------------------------------------------------------- validation

def test_bad_parameters_raise_or_warn():
    w = pancake.generate_key(64, rng=_rng(0))
    with pytest.raises(ValueError, match="beta"):
        pancake.pancake_noise(w, 1.0, 0.0, 16.0, 4, rng=_rng(1))
    with pytest.raises(ValueError, match="beta"):
        pancake.pancake_noise(w, 1.0, -1e-3, 16.0, 4, rng=_rng(1))
    with pytest.raises(ValueError, match="sigma"):
        pancake.pancake_noise(w, 0.0, 1e-3, 16.0, 4, rng=_rng(1))
    with pytest.raises(ValueError, match="key"):
        pancake.pancake_noise(2.0 * w, 1.0, 1e-3, 16.0, 4, rng=_rng(1))
    with pytest.raises(ValueError, match="float64"):
        pancake.pancake_noise(w.astype(np.float32), 1.0, 1e-3, 16.0, 4, rng=_rng(1))
    with pytest.raises(ValueError, match="q must be float64"):
        pancake.gpm(np.zeros(64, np.float32), w, 1.0, 1e-3, 16.0, rng=_rng(1))
    with pytest.raises(ValueError, match="y must be float64"):
        pancake.distinguish(np.zeros(64, np.float32), np.zeros(64), np.zeros(64), w, 1.0, 1e-3,
                            16.0)
    # gamma < 2 sqrt(d) = 16: error where covertness is required, warning for experiments.
    with pytest.raises(ValueError, match="gamma"):
        pancake.GaussianPancakeMechanism(w, 1.0, 1e-3, 15.0)
    with pytest.raises(ValueError, match="gamma"):
        pancake.pancake_noise(w, 1.0, 1e-3, 15.0, 4, rng=_rng(1), require_covertness=True)
    with pytest.warns(pancake.GPMResearchWarning, match="gamma"):
        pancake.pancake_noise(w, 1.0, 1e-3, 15.0, 4, rng=_rng(1))
    with pytest.raises(ValueError, match="dg_method"):
        pancake.pancake_noise(w, 1.0, 1e-3, 16.0, 4, rng=_rng(1), dg_method="round")


def test_use_warns_research_code():
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        w = pancake.generate_key(8, rng=_rng(0))
        pancake.GaussianPancakeMechanism(w, 1.0, 1e-3, 6.0)
    assert any(issubclass(r.category, pancake.GPMResearchWarning)
               and "research/attack" in str(r.message) for r in rec)


def test_not_exported_from_mechanisms():
    assert not hasattr(mechanisms, "gpm") and "pancake" not in mechanisms.__all__
    # GPM lives in tfdp.papers.gpm; tfdp.mechanisms holds no copy of it.
    assert not (pathlib.Path(mechanisms.__file__).parent / "pancake.py").exists()
    assert pathlib.Path(pancake.__file__).parent.name == "gpm"


def test_key_is_unit_and_uniform():
    keys = pancake.generate_key(3, rng=_rng(0), num=20000)
    assert keys.dtype == np.float64
    np.testing.assert_allclose(np.linalg.norm(keys, axis=1), 1.0, atol=1e-14)
    # Uniform on S^2: each coordinate is uniform on [-1, 1] (Archimedes).
    assert stats.kstest(keys[:, 0], stats.uniform(-1, 2).cdf).pvalue > 1e-3


# ---------------------------------------------------------------- 6. discrete Gaussian

@pytest.mark.parametrize("gamma", [2.0, 32.0])
def test_discrete_gaussian_samplers(gamma):
    v = (1e-3 ** 2 + gamma ** 2) / (2 * math.pi)
    n = 200_000
    z_support = np.arange(-int(14 * math.sqrt(v)) - 2, int(14 * math.sqrt(v)) + 3)
    pmf = np.exp(-z_support ** 2 / (2 * v))
    pmf /= pmf.sum()
    for method, seed in (("cks", 1), ("table", 2)):
        z = pancake.sample_discrete_gaussian(v, n, rng=_rng(seed), method=method)
        assert z.dtype == np.int64
        # Variance within 1% of v: the sample variance's relative SE is about sqrt(2/n) =
        # 0.32%, so 1% is about 3 SE.
        assert abs(z.var() / v - 1.0) < 0.01
        # Chi-square goodness of fit on cells with expected count >= 5.
        counts = np.array([(z == k).sum() for k in z_support])
        expected = n * pmf
        big = expected >= 5
        obs = np.append(counts[big], counts[~big].sum())
        exp = np.append(expected[big], expected[~big].sum())
        keep = exp > 0
        chi = stats.chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum())
        assert chi.pvalue > 1e-3, (method, chi)


def test_discrete_gaussian_large_parameter_cks():
    v = (20 * 65536) ** 2 / (2 * math.pi)  # gamma = 20 d at d = 65536 (the CKS sampler's range)
    z = pancake.sample_discrete_gaussian(v, 50000, rng=_rng(3), method="cks")
    assert abs(z.var() / v - 1.0) < 0.03  # 5 SE of sqrt(2/5e4) = 0.63%
    with pytest.raises(ValueError, match="table"):
        pancake.sample_discrete_gaussian(v, 10, rng=_rng(3), method="table")


# ---------------------------------------------------------------- 2-4. moments and structure

@pytest.fixture(scope="module")
def moment_samples():
    d, sigma, beta, gamma, n = 64, 2.0, 1e-3, 16.0, 200_000
    w = pancake.generate_key(d, rng=_rng(10))
    y = pancake.pancake_noise(w, sigma, beta, gamma, n, rng=_rng(11))
    return dict(d=d, sigma=sigma, beta=beta, gamma=gamma, n=n, w=w, y=y)


def test_sampler_moments(moment_samples):
    s = moment_samples
    y, sigma, n = s["y"], s["sigma"], s["n"]
    assert y.dtype == np.float64 and y.shape == (n, s["d"])
    assert np.all(np.abs(y.mean(axis=0)) < 5 * sigma / math.sqrt(n))
    np.testing.assert_allclose(y.var(axis=0), sigma ** 2, rtol=0.03)
    proj = y @ s["w"]
    assert proj.var() == pytest.approx(sigma ** 2, rel=0.02)
    assert stats.kurtosis(proj, fisher=False) == pytest.approx(3.0, abs=0.05)
    assert stats.kstest(y[:, 0], stats.norm(scale=sigma).cdf).pvalue > 1e-3


def _mixture_cdf(x, sigma, beta, gamma):
    s, sw = pancake.spacing(sigma, beta, gamma), pancake.pancake_std(sigma, beta, gamma)
    v = (beta ** 2 + gamma ** 2) / (2 * math.pi)
    ks = np.arange(-int(12 * math.sqrt(v)) - 2, int(12 * math.sqrt(v)) + 3)
    a = np.exp(-ks ** 2 / (2 * v))
    a /= a.sum()
    out = np.zeros_like(x)
    for k, ak in zip(ks, a):
        out += ak * special.ndtr((x - k * s) / sw)
    return out


def test_mixture_structure_with_key(moment_samples):
    s = moment_samples
    y, w, sigma, beta, gamma, n = s["y"], s["w"], s["sigma"], s["beta"], s["gamma"], s["n"]
    proj = y @ w
    sub = proj[:50000]
    assert stats.kstest(sub, lambda x: _mixture_cdf(x, sigma, beta, gamma)).pvalue > 1e-3
    # With n >> gamma^2 the staircase CDF is visible: the Gaussian KS rejects (with the key).
    assert stats.kstest(proj, stats.norm(scale=sigma).cdf).pvalue < 1e-6
    # Orthogonal component independent of the projection: corr of squares ~ 0 (4/sqrt(n)).
    orth = y - np.outer(proj, w)
    r = np.corrcoef(proj ** 2, orth[:, 0] ** 2)[0, 1]
    assert abs(r) < 4 / math.sqrt(n)
    # Rayleigh statistic at the pancake frequency: exp(-2 pi^2 tau^2), about 1 at beta=1e-3.
    rayleigh = abs(np.mean(np.exp(2j * math.pi * proj / pancake.spacing(sigma, beta, gamma))))
    assert rayleigh == pytest.approx(math.exp(-2 * math.pi ** 2 * pancake.tau(beta, gamma) ** 2),
                                     abs=0.01)


def test_rayleigh_at_beta_03():
    d, sigma, beta, gamma, n = 64, 1.0, 0.3, 16.0, 100_000
    w = pancake.generate_key(d, rng=_rng(20))
    y = pancake.pancake_noise(w, sigma, beta, gamma, n, rng=_rng(21))
    stat = abs(np.mean(np.exp(2j * math.pi * (y @ w) / pancake.spacing(sigma, beta, gamma))))
    expected = math.exp(-2 * math.pi ** 2 * pancake.tau(beta, gamma) ** 2)
    assert expected == pytest.approx(0.754, abs=1e-3)
    assert stat == pytest.approx(expected, abs=0.01)


def test_no_structure_without_key(moment_samples):
    s = moment_samples
    y, sigma, n = s["y"], s["sigma"], s["n"]
    period = pancake.spacing(sigma, s["beta"], s["gamma"])
    u = _rng(30).standard_normal(s["d"])
    u /= np.linalg.norm(u)
    # Under no structure |mean e^{i theta}|^2 n ~ Exp(1): P(> 4/sqrt(n)) = e^-16.
    assert abs(np.mean(np.exp(2j * math.pi * (y @ u) / period))) < 4 / math.sqrt(n)
    g = sigma * _rng(31).standard_normal((n, s["d"]))
    assert abs(np.mean(np.exp(2j * math.pi * (g @ s["w"]) / period))) < 4 / math.sqrt(n)
    for i in range(4):
        u = _rng(40 + i).standard_normal(s["d"])
        u /= np.linalg.norm(u)
        assert stats.kstest(y @ u, stats.norm(scale=sigma).cdf).pvalue > 1e-3


# ---------------------------------------------------------------- 5. cross-check of samplers

def test_mixture_and_rejection_samplers_agree():
    d, beta, gamma, n = 3, 0.3, 2.0, 50000
    w = pancake.generate_key(d, rng=_rng(50))
    mix = pancake.pancake_noise(w, 1.0, beta, gamma, n, rng=_rng(51)) / math.sqrt(2 * math.pi)
    rej = pancake.sample_hclwe_rejection(w, beta, gamma, n, rng=_rng(52))
    assert stats.ks_2samp(mix @ w, rej @ w).pvalue > 1e-3
    # ... and both differ from a plain Gaussian along w (the comb is visible at gamma=2).
    assert stats.kstest(rej @ w, stats.norm(scale=1 / math.sqrt(2 * math.pi)).cdf).pvalue < 1e-6


def test_tf_sampler_matches_numpy():
    d, sigma, beta, gamma, n = 16, 2.0, 0.3, 8.0, 40000
    w = pancake.generate_key(d, rng=_rng(60))
    y_tf = pancake.tf_pancake_noise(w, sigma, beta, gamma, n, seed=[1, 2])
    assert y_tf.dtype.name == "float64"
    y_tf = y_tf.numpy()
    y_np = pancake.pancake_noise(w, sigma, beta, gamma, n, rng=_rng(61))
    assert stats.ks_2samp(y_tf @ w, y_np @ w).pvalue > 1e-3
    np.testing.assert_allclose(y_tf.var(axis=0), sigma ** 2, rtol=0.05)  # >6 SE of 0.7%
    again = pancake.tf_pancake_noise(w, sigma, beta, gamma, n, seed=[1, 2]).numpy()
    np.testing.assert_array_equal(y_tf, again)


# ---------------------------------------------------------------- 7-8. attack

def _attack_rate(d, sigma, beta, gamma, t, n, seed, big_t=3):
    rng = _rng(seed)
    w = pancake.generate_key(d, rng=rng)
    s = pancake.spacing(sigma, beta, gamma)
    q0 = rng.standard_normal(d) * 10
    q1 = q0 + (big_t + t) * s * w
    b = rng.integers(2, size=n)
    y = np.where(b[:, None] == 1, q1, q0) + pancake.pancake_noise(w, sigma, beta, gamma, n,
                                                                  rng=rng)
    return float(np.mean(pancake.distinguish(y, q0, q1, w, sigma, beta, gamma) == b))


@pytest.mark.parametrize("beta,t,reference", [(0.1, 0.05, 0.7346), (0.1, 0.25, 0.9991),
                                              (0.01, 0.25, 1.0), (0.1, -0.15, None)])
def test_attack_at_fixed_t(beta, t, reference):
    d, sigma, gamma, n = 64, 3.0, 16.0, 40000
    exact = pancake.success_exact(t, beta, gamma)
    if reference is not None:
        assert exact == pytest.approx(reference, abs=1e-3)
    rate = _attack_rate(d, sigma, beta, gamma, t, n, seed=70)
    se = math.sqrt(max(exact * (1 - exact), 1e-6) / n)
    assert abs(rate - exact) <= 4 * se + 1e-4
    assert exact >= pancake.success_paper_bound(t, beta, gamma)


def test_exact_oracle_at_t_zero_is_half():
    assert pancake.success_exact(0.0, 0.1, 16.0) == pytest.approx(0.5, abs=1e-12)


def test_attack_baselines_are_half():
    d, sigma, beta, gamma, n = 64, 3.0, 1e-3, 16.0, 40000
    rng = _rng(80)
    w = pancake.generate_key(d, rng=rng)
    s = pancake.spacing(sigma, beta, gamma)
    q0 = np.zeros(d)
    q1 = q0 + 3.25 * s * w
    b = rng.integers(2, size=n)
    qb = np.where(b[:, None] == 1, q1, q0)
    se4 = 4 * math.sqrt(0.25 / n)
    y_gm = qb + sigma * rng.standard_normal((n, d))
    assert abs(np.mean(pancake.distinguish(y_gm, q0, q1, w, sigma, beta, gamma) == b) - 0.5) < se4
    y = qb + pancake.pancake_noise(w, sigma, beta, gamma, n, rng=rng)
    wrong = pancake.generate_key(d, rng=rng)
    assert abs(np.mean(pancake.distinguish(y, q0, q1, wrong, sigma, beta, gamma) == b)
               - 0.5) < se4
    # ... while the right key wins.
    assert np.mean(pancake.distinguish(y, q0, q1, w, sigma, beta, gamma) == b) > 0.99


def test_realisable_t():
    w = pancake.generate_key(32, rng=_rng(90))
    s = pancake.spacing(2.0, 1e-2, 12.0)
    big_t, t = pancake.realisable_t(3.2 * s * w, w, 2.0, 1e-2, 12.0)
    assert big_t == 3 and t == pytest.approx(0.2, abs=1e-9)


def test_mechanism_class_round_trip():
    w = pancake.generate_key(256, rng=_rng(95))
    mech = pancake.GaussianPancakeMechanism(w, 2.0, 1e-4, 32.0)
    q0 = np.zeros(256)
    q1 = q0.copy()
    q1[5] = 1.0
    ys = mech(np.stack([q0, q1] * 50), rng=_rng(96))
    assert np.all(mech.attack(ys, q0, q1) == np.tile([0, 1], 50))


# ---------------------------------------------------------------- 13. precision regression

def test_precision_float64_vs_float32():
    from tfdp.papers.gpm import experiments as gpm_audit

    res = gpm_audit.precision_check(trials=20, seed=0)
    assert res["success_float64"] == 1.0
    # Informational (docs/gpm.md, "Precision"): the float32 pipeline loses resolution. With this
    # fixed seed it misses 2 of 20 games (measured); any miss shows the degradation.
    assert res["success_float32"] < 1.0


# ---------------------------------------------------------------- 14. utility

@pytest.mark.parametrize("d", [4096])
def test_utility_rms_error(d):
    sigma, n = 3.0, 100
    w = pancake.generate_key(d, rng=_rng(100))
    gpm_noise = pancake.pancake_noise(w, sigma, 1e-4, 2 * math.sqrt(d), n, rng=_rng(101))
    gm_noise = sigma * _rng(102).standard_normal((n, d))
    # mean of ||noise||^2 / (sigma^2 d) over 100 draws has SD sqrt(2/d)/10 = 0.22%; RMS error
    # has half that relative SD (0.11%), so 1% is 9 SD.
    for noise in (gpm_noise, gm_noise):
        rms = math.sqrt(np.mean(np.sum(noise ** 2, axis=1)))
        assert rms == pytest.approx(sigma * math.sqrt(d), rel=0.01)
