"""tfdp-bench evaluate: argument checks and the measured path (a tiny run)."""

import pytest

from tfdp.bench import evaluate


@pytest.mark.parametrize("kwargs,name", [
    (dict(num_examples=0), "evaluate_bench_num_examples"),
    (dict(num_draws=0), "evaluate_bench_num_draws"),
    (dict(num_examples=6, batch_size=4), "evaluate_bench_batch_size"),
    (dict(num_draws=100, draws_per_step=64), "evaluate_bench_draws_per_step"),
])
def test_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        evaluate.run(**kwargs)


def test_tiny_run_times_tfdp_evaluates_path():
    res = evaluate.run(num_examples=2, batch_size=2, num_draws=8, draws_per_step=8, repeats=1)
    assert res["measured_path"] == "evaluate" and res["benchmark"] == "evaluate"
    assert res["ratio"] > 0 and len(res["times_seconds"]["candidate"]) == 1
    assert res["setup"]["forward_batch"] == 16
