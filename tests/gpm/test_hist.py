"""DP-hist experiment (GPM Figure 5, Table 4) and the benchmark."""

import math

import pytest

from tfdp.papers.gpm import experiments as gpm
from tfdp.papers.gpm import bench as bench_gpm

pytestmark = pytest.mark.filterwarnings("ignore::tfdp.papers.gpm.pancake.GPMResearchWarning")


@pytest.mark.parametrize("eps,beta,target", [(0.125, 1e-2, 0.850), (0.125, 1e-1, 0.562),
                                             (1.0, 1e-2, 0.980), (1.0, 1e-1, 0.818)])
def test_mini_dp_hist(eps, beta, target):
    r = gpm.hist_experiment(256, eps, beta, 2000, seed=7)
    assert r["oracle"] == pytest.approx(target, abs=1e-3)
    se = math.sqrt(target * (1 - target) / 2000)
    assert abs(r["success_rate"] - target) < 4 * se
    assert r["ci_low"] <= r["success_rate"] <= r["ci_high"]
    assert abs(r["gm_baseline_success_rate"] - 0.5) < 4 * math.sqrt(0.25 / 2000)
    for key in ("success_rate", "l2_error_gm", "l2_error_gpm", "l2_error_expected"):
        assert key in r


def test_dp_hist_d4096_small_beta_and_table4():
    r = gpm.hist_experiment(4096, 0.5, 1e-5, 300, seed=8)
    assert r["success_rate"] >= 0.99
    # Table 4: RMS error within 1.5% of sigma sqrt(d); 300 draws of chi^2_4096 give an RMS
    # with relative SD sqrt(1/(2*4096*300)) = 0.06%, so 1.5% is far outside chance.
    for key in ("l2_error_gm", "l2_error_gpm"):
        assert r[key] == pytest.approx(r["l2_error_expected"], rel=0.015)
    assert r["l2_error_expected"] == pytest.approx(819.3, abs=0.05)


def test_dp_hist_d4096_large_beta_near_oracle():
    r = gpm.hist_experiment(4096, 0.5, 1e-1, 1000, seed=9, fresh_data=False)
    se = math.sqrt(r["oracle"] * (1 - r["oracle"]) / 1000)
    assert abs(r["success_rate"] - r["oracle_exact"]) < 4 * se


def test_fixed_key_mode_and_validation():
    r = gpm.hist_experiment(256, 1.0, 1e-4, 200, seed=10, fixed_key=True)
    assert r["fixed_key"] and r["success_rate"] > 0.95
    with pytest.raises(ValueError, match="beta"):
        gpm.hist_experiment(256, 1.0, 0.0, 10, seed=0)
    with pytest.raises(ValueError, match="epsilon"):
        gpm.hist_experiment(256, -1.0, 1e-3, 10, seed=0)
    with pytest.raises(ValueError, match="trials"):
        gpm.hist_experiment(256, 1.0, 1e-3, 0, seed=0)


def test_bounds_curves_rows():
    rows = gpm.bounds_curves(deltas=[1e-10, 0.1])
    assert len(rows) == 2 * 5 * 2 * 2
    for r in rows:
        assert r["gpm_eps_upper"] >= r["gpm_eps_lower"] > 1e4


def test_bench_ratio_small():
    r = bench_gpm.benchmark(d=4096, samples=16, repeats=5)
    for key in ("ratio", "target", "gm_ms", "gpm_ms", "passed"):
        assert key in r
    assert r["target"] == 1.5
    assert r["ratio"] == pytest.approx(r["gpm_ms"] / r["gm_ms"])
    assert r["gm_ms"] > 0 and r["gpm_ms"] > 0
