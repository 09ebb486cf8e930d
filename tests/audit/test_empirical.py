"""Empirical DP audit: Clopper-Pearson epsilon lower bounds on every shipped mechanism."""

import math

import numpy as np
import pytest

from tfdp.audit import dp_suite, empirical

pytestmark = pytest.mark.filterwarnings("ignore::tfdp.papers.gpm.pancake.GPMResearchWarning")


def test_clopper_pearson_and_eps_conversion():
    # 1000/1000 successes: p_lb = 0.05^(1/1000) (one-sided 95%), eps_lb = log(p/(1-p)) ~ 5.8.
    p_lb = empirical.clopper_pearson_lower(1000, 1000)
    assert p_lb == pytest.approx(0.05 ** (1 / 1000), rel=1e-9)
    assert empirical.eps_from_success(p_lb, 1e-10) == pytest.approx(5.806, abs=0.01)
    assert empirical.eps_from_success(0.4, 0.0) == 0.0
    assert math.isinf(empirical.eps_from_success(1.0, 0.0))
    with pytest.raises(ValueError, match="trials"):
        empirical.clopper_pearson_lower(0, 0)


def test_no_shipped_mechanism_exceeds_its_claim_and_gpm_is_caught():
    all_results = dp_suite.run_dp_suite(trials=20000, seed=0, gpm_trials=1000,
                                        threshold_trials=200000, gdp_trials=0)
    # The under-noised control is no shipped mechanism (tests/audit/test_gdp.py audits it).
    control = "control_gaussian_analytic_sigma_x0.9"
    results = {r.name: r for r in all_results if r.method == "balanced"}
    tail = {r.name: r for r in all_results if r.method == "threshold"}
    assert set(tail) == set(results) - {"gpm_without_key", "gpm_with_key"}
    for name, r in tail.items():
        assert name == control or not r.exceeds_claim, r
        # The tail audit is far tighter than the balanced one for every mechanism (at q =
        # 0.0256 one DP-SGD step leaks too little for 2e5 runs to show: both bounds are 0).
        if name == "dpsgd_step":
            assert r.eps_lower >= results[name].eps_lower
        else:
            assert r.eps_lower > results[name].eps_lower, (name, r, results[name])
    expected = {"laplace", "gaussian_classical", "gaussian_analytic", "gaussian_hgm",
                "gaussian_tail_thm2.3", "pixeldp_laplace", "pixeldp_gaussian",
                "heterogeneous_gaussian", "layer_LaplaceNoise",
                "layer_GaussianNoise", "layer_HeterogeneousGaussianNoise", "gpm_without_key",
                "gpm_with_key", "dpsgd_step", control}
    assert set(results) == expected
    for name, r in results.items():
        if name not in ("gpm_with_key", control):
            assert not r.exceeds_claim, r
    key = results["gpm_with_key"]
    assert key.exceeds_claim and key.eps_lower > 5.0
    assert key.eps_lower > 40 * key.claimed_eps
    # The audit is not blind: the Laplace likelihood-ratio attacker reaches its closed-form
    # optimum 1 - e^{-1/2}/2 (4 SE at n = 20000 is 0.013).
    for name in ("laplace", "layer_LaplaceNoise"):
        assert results[name].success_rate == pytest.approx(
            dp_suite.optimal_success(name, 1.0), abs=4 * math.sqrt(0.21 / 20000))
    # Without the key GPM looks like GM: success near 1/2 (4 SE at n = 1000).
    assert abs(results["gpm_without_key"].success_rate - 0.5) < 4 * math.sqrt(0.25 / 1000)


def test_threshold_audit_is_tight_for_laplace():
    # The event {score > tau} of a Laplace pair has TPR/FPR = e^eps exactly in the tail, so
    # the bound approaches the claim from below (Bonferroni CP bounds, 2e5 runs per input).
    x0, x1 = np.zeros(4), np.array([1.0, 0, 0, 0])
    mech = lambda x, num, rng: x + rng.laplace(0.0, 1.0, (num, 4))  # noqa: E731
    res = empirical.audit_threshold(mech, x0, x1, empirical.laplace_score(x0, x1, 1.0),
                                    trials=200000, claimed_eps=1.0, delta=0.0, seed=3)
    assert 0.8 < res.eps_lower <= 1.0 and res.method == "threshold"


def test_audit_detects_an_underscaled_gaussian():
    x0, x1 = np.zeros(4), np.array([1.0, 0, 0, 0])
    sigma_claim = 4.84  # classical sigma for eps = 1, delta = 1e-5 ...
    sigma_real = 0.3    # ... but the mechanism adds far less noise
    mech = lambda x, num, rng: x + sigma_real * rng.standard_normal((num, 4))  # noqa: E731
    res = empirical.audit(mech, x0, x1, empirical.gaussian_attacker(x0, x1, sigma_claim),
                          trials=5000, claimed_eps=1.0, delta=1e-5, seed=1)
    assert res.exceeds_claim and res.eps_lower > 1.0


def test_dpsgd_step_row_uses_the_executed_q_and_sigma_and_is_not_blind():
    q, sigma = dp_suite.dpsgd_smoke_step()
    assert q == 128 / 5000 and 0.5 < sigma < 2.0
    case = [c for c in dp_suite.audit_cases(include_layers=False) if c["name"] == "dpsgd_step"]
    assert len(case) == 1 and case[0]["q"] == q and case[0]["sigma"] == sigma
    # The per-step ledger claim (RDP, one Poisson-subsampled Gaussian step).
    assert 0 < case[0]["claimed_eps"] < 2.0
    # Rows from a run's ledger: one per executed segment, at that segment's q and sigma.
    ledger = {"entries": [{"name": "dpsgd", "delta": 1e-5, "segments": [
        dict(start_step=0, steps=39, passes=1, num_examples=5000, batch_size=128,
             noise_multiplier=sigma),
        dict(start_step=39, steps=20, passes=4, num_examples=5000, batch_size=1000,
             noise_multiplier=sigma)]}]}
    rows = dp_suite.dpsgd_cases_from_ledger(ledger)
    assert [(r["q"], r["sigma"]) for r in rows] == [(q, sigma), (0.2, sigma)]
    # Not blind: a step that really adds sigma = 0.3 with q = 1 exceeds the smoke claim.
    c = case[0]
    res = empirical.audit_threshold(dp_suite._subsampled_gaussian_mech(1.0, 0.3), c["x0"],
                                    c["x1"], c["score"], trials=20000,
                                    claimed_eps=c["claimed_eps"], delta=c["delta"], seed=2)
    assert res.exceeds_claim
