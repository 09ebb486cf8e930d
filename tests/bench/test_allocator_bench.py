"""tfdp-bench allocator: both settings really run, and the result is a ratio."""

import pytest

from tfdp.bench import allocator, report


def test_one_round_runs_both_settings():
    # _one raises if a worker did not run under its variant's setting (read at its exit).
    result = allocator.run(cases=["sample"], rounds=1, epochs=2)
    times = result["cases"]["sample"]["seconds_per_step"]
    assert len(times["tfdp"]) == 1 and len(times["glibc"]) == 1
    assert result["ratio"] == pytest.approx(times["tfdp"][0] / times["glibc"][0])
    assert result["measured_path"] == "train" and result["target"] == allocator.TARGET_RATIO
    lines = report._allocator_section(result)  # pylint: disable=protected-access
    assert lines[3].startswith("| `sample` |") and "tfdp-train --flagfile=" in lines[3]


@pytest.mark.parametrize("bad, name", [({"rounds": 0}, "rounds"), ({"epochs": 1}, "epochs"),
                                       ({"cases": ["nope"]}, "cases")])
def test_bad_settings_are_named(bad, name):
    with pytest.raises(ValueError, match=name):
        allocator.run(**dict({"cases": ["sample"]}, **bad))
