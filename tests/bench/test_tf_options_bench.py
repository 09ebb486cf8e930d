"""tfdp-bench tf_options: both memory-optimizer levels really run, and the result is a ratio."""

import pytest

from tfdp.bench import tf_options


def test_one_round_runs_both_levels():
    # _one raises if a worker did not run at its variant's level (read at the worker's exit).
    result = tf_options.run(methods=["nonprivate"], rounds=1, epochs=1, num_train=300)
    times = result["methods"]["nonprivate"]["seconds_per_step"]
    assert len(times["tfdp"]) == 1 and len(times["default"]) == 1
    assert result["ratio"] == pytest.approx(times["tfdp"][0] / times["default"][0])
    assert result["measured_path"] == "train" and result["target"] == tf_options.TARGET_RATIO


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="rounds"):
        tf_options.run(methods=["nonprivate"], rounds=0)
