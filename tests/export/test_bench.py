"""`tfdp-bench export` runs and reports the agreed keys (tiny settings; speed not asserted)."""

import pytest

from tfdp.bench import export as bench


def test_bench_reports_both_throughputs():
    out = bench.run(batch_size=2, num_draws=20, draws_per_step=10, repeats=1, seed=0)
    for key in ("ratio", "target", "passed", "reference_inputs_per_second",
                "candidate_inputs_per_second"):
        assert key in out
    assert out["target"] == 0.9
    assert out["ratio"] == pytest.approx(out["candidate_inputs_per_second"]
                                         / out["reference_inputs_per_second"])
    assert out["passed"] == (out["ratio"] >= 0.9)
    # Registered with tfdp-bench (the registry the app and `tfdp-bench all` read).
    from tfdp.bench import BENCHMARKS  # pylint: disable=import-outside-toplevel
    assert BENCHMARKS["export"] == "tfdp.bench.export"


def test_bench_rejects_bad_sizes():
    with pytest.raises(ValueError, match="num_draws"):
        bench.run(batch_size=2, num_draws=0, draws_per_step=10, repeats=1, seed=0)
