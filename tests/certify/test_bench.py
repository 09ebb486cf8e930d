"""`tfdp-bench certify` runs and reports the agreed keys (tiny settings; speed not asserted)."""

import pytest

from tfdp.bench import certify as bench


def test_bench_reports_both_throughputs():
    out = bench.run(batch_size=2, num_draws=20, draws_per_step=10, repeats=1, seed=0)
    for key in ("ratio", "target", "passed", "reference_inputs_per_second",
                "candidate_inputs_per_second"):
        assert key in out
    assert out["target"] == 0.8
    assert out["ratio"] == pytest.approx(out["candidate_inputs_per_second"]
                                         / out["reference_inputs_per_second"])
    assert out["passed"] == (out["ratio"] >= 0.8)


def test_bench_rejects_bad_sizes():
    with pytest.raises(ValueError, match="num_draws"):
        bench.run(batch_size=2, num_draws=0, draws_per_step=10, repeats=1, seed=0)
    with pytest.raises(ValueError, match="divide"):
        bench.run(batch_size=2, num_draws=25, draws_per_step=10, repeats=1, seed=0)


def test_smoothing_bench_reports_both_throughputs():
    out = bench.run(batch_size=2, num_draws=20, draws_per_step=10, repeats=1, seed=0,
                    certificate="gaussian_smoothing")
    assert out["certificate"] == "gaussian_smoothing" and out["selection_draws"] == 10
    assert out["ratio"] == pytest.approx(out["candidate_inputs_per_second"]
                                         / out["reference_inputs_per_second"])
    with pytest.raises(ValueError, match="certificate"):
        bench.run(batch_size=2, num_draws=20, draws_per_step=10, repeats=1, seed=0,
                  certificate="nope")
