"""Gaussian-DP audit: closed forms, coverage of the mu bound, tightness, flagging, assumption."""

import math
import warnings

import numpy as np
import pytest

from tfdp import mechanisms
from tfdp.audit import dp_suite, empirical, gdp


@pytest.mark.parametrize("mu,eps", [(0.27, 1.0), (1.0, 0.5), (2.0, 3.0), (0.05, 0.01)])
def test_gdp_delta_is_the_analytic_gaussian_curve(mu, eps):
    # Dong-Roth-Su Cor. 2.13 equals Balle-Wang Thm 8 at sigma = 1 / mu, sensitivity 1.
    want = mechanisms.gaussian_delta(sigma=1.0 / mu, epsilon=eps, sensitivity=1.0)
    assert gdp.gdp_delta(mu, eps) == pytest.approx(want, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("eps,delta", [(1.0, 1e-5), (0.25, 1e-10), (4.0, 1e-3)])
def test_gdp_epsilon_inverts_the_analytic_calibration(eps, delta):
    sigma = mechanisms.analytic_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=1.0)
    assert gdp.gdp_epsilon(1.0 / sigma, delta) == pytest.approx(eps, rel=1e-6)
    # Increasing in mu; zero when the TV distance is already <= delta.
    assert gdp.gdp_epsilon(1.1 / sigma, delta) > eps
    assert gdp.gdp_epsilon(1e-7, 1e-5) == 0.0


def test_mu_lower_bound_coverage():
    # 400 independent bounds at confidence 0.95 on Gaussian scores with known mu = 0.5.
    # Misses (mu_lower > mu) ~ Binomial(400, 0.05): mean 20, sd 4.36; [5, 38] is beyond
    # 3.4 sd on each side. A bound that ignored sampling error would miss ~50% (200).
    rng = np.random.default_rng(1)
    mu, n, misses = 0.5, 500, 0
    for _ in range(400):
        s0 = rng.normal(0.0, 2.0, n)
        s1 = rng.normal(2.0 * mu, 2.0, n)
        mu_hat, lo = gdp.mu_lower_bound(s0, s1, 0.95)
        assert lo <= mu_hat
        misses += lo > mu
    assert 5 <= misses <= 38


def test_mu_lower_bound_no_evidence_is_zero():
    rng = np.random.default_rng(2)
    s = rng.normal(size=(2, 1000))
    assert gdp.mu_lower_bound(s[0], s[0] - 1.0, 0.95)[1] == 0.0


def _gauss_case(sigma, eps=1.0, delta=1e-5):
    x0, x1 = np.zeros(16), np.zeros(16)
    x1[0] = 1.0
    mech = lambda x, num, rng: x + rng.normal(0.0, sigma, (num, x.size))  # noqa: E731
    return mech, x0, x1, empirical.gaussian_score(x0, x1, sigma)


def test_calibrated_analytic_gaussian_is_tight_and_under_noised_is_flagged():
    # n = 200000 per input: sd(mu_hat) ~ sqrt(2/n) = 0.0032 (1.2% of mu = 0.268), so
    # mu_lower ~ mu - 1.645 * 0.0032 -> eps_lower ~ 0.975; 0.9 is > 8 sd below. With sigma
    # x 0.9, mu = 0.298 and eps_mu ~ 1.12; the claim 1 is mu = 0.268, ~ 9 sd below mu_lower.
    sigma = mechanisms.analytic_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0)
    mech, x0, x1, score = _gauss_case(sigma)
    ok = gdp.audit_gaussian_dp(mech, x0, x1, score, trials=200000, claimed_eps=1.0,
                               delta=1e-5, seed=3)
    assert 0.9 <= ok.eps_lower <= 1.0 and not ok.exceeds_claim
    mech, x0, x1, score = _gauss_case(0.9 * sigma)
    bad = gdp.audit_gaussian_dp(mech, x0, x1, score, trials=200000, claimed_eps=1.0,
                                delta=1e-5, seed=4)
    assert bad.exceeds_claim and bad.eps_lower > 1.0
    assert bad.gaussian_p > gdp.GAUSSIAN_CHECK_LEVEL


def test_suite_gaussian_cases_within_ten_percent_of_their_noise():
    # Every Gaussian case of the dp suite: eps_lower within 10% of the eps its noise really
    # achieves (same sample-size argument as above), never above the claim except the
    # deliberately under-noised control, which must be flagged.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [c for c in dp_suite.audit_cases(seed=0) if "stddevs" in c]
    assert len(cases) >= 9
    for i, c in enumerate(cases):
        exact = gdp.exact_epsilon(c["x0"], c["x1"], c["stddevs"], c["delta"])
        res = gdp.audit_gaussian_dp(c["mechanism"], c["x0"], c["x1"], c["score"],
                                    trials=200000, claimed_eps=c["claimed_eps"],
                                    delta=c["delta"], seed=100 + i, exact_eps=exact)
        assert res.eps_lower >= 0.9 * exact, c["name"]
        assert res.exceeds_claim == bool(c.get("control")), c["name"]
        if not c.get("control"):
            assert exact <= c["claimed_eps"] * (1 + 1e-9), c["name"]


def test_non_gaussian_outputs_give_no_bound():
    # Laplace noise (excess kurtosis 3) fails the normality test at n = 20000 by far.
    x0, x1 = np.zeros(4), np.zeros(4)
    x1[0] = 1.0
    lap = lambda x, num, rng: x + rng.laplace(0.0, 1.0, (num, x.size))  # noqa: E731
    res = gdp.audit_gaussian_dp(lap, x0, x1, empirical.gaussian_score(x0, x1, 1.0),
                                trials=20000, claimed_eps=1.0, delta=1e-5, seed=5)
    assert res.gaussian_p < gdp.GAUSSIAN_CHECK_LEVEL
    assert math.isnan(res.eps_lower) and not res.exceeds_claim


def test_input_dependent_variance_gives_no_bound():
    # Gaussian outputs whose variance depends on the input (sd 1 vs 1.1): the F test on
    # 20000 + 20000 scores rejects (log variance ratio 0.19 vs its sd ~0.014).
    x0, x1 = np.zeros(4), np.zeros(4)
    x1[0] = 1.0
    mech = lambda x, num, rng: x + rng.normal(0.0, 1.0 + 0.1 * x[0], (num, x.size))  # noqa
    res = gdp.audit_gaussian_dp(mech, x0, x1, empirical.gaussian_score(x0, x1, 1.0),
                                trials=20000, claimed_eps=1.0, delta=1e-5, seed=6)
    assert res.gaussian_p < gdp.GAUSSIAN_CHECK_LEVEL and math.isnan(res.eps_lower)


def test_bad_arguments():
    mech, x0, x1, score = _gauss_case(1.0)
    with pytest.raises(ValueError, match="trials"):
        gdp.audit_gaussian_dp(mech, x0, x1, score, trials=10, claimed_eps=1.0, delta=1e-5,
                              seed=0)
    with pytest.raises(ValueError, match="delta"):
        gdp.audit_gaussian_dp(mech, x0, x1, score, trials=1000, claimed_eps=1.0, delta=0.0,
                              seed=0)
    with pytest.raises(ValueError, match="delta"):
        gdp.gdp_epsilon(1.0, 1.5)
