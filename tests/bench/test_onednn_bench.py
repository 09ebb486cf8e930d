"""tfdp-bench onednn: both kernel libraries really run, and the result is a ratio."""

import platform

import pytest

from tfdp.bench import onednn, report


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="TensorFlow's oneDNN switch is for x86 builds")
def test_one_round_runs_both_kernel_libraries():
    # allocator._one raises if a worker did not report the kernels of its variant at exit.
    result = onednn.run(cases=["sample"], rounds=1, epochs=2)
    times = result["cases"]["sample"]["seconds_per_step"]
    assert len(times["tfdp"]) == 1 and len(times["eigen"]) == 1
    assert result["ratio"] == pytest.approx(times["tfdp"][0] / times["eigen"][0])
    assert result["measured_path"] == "train" and result["target"] == onednn.TARGET_RATIO
    lines = report._allocator_section(result)  # pylint: disable=protected-access
    assert "TensorFlow's own kernels (s/step)" in lines[1]
    assert lines[3].startswith("| `sample` |") and "tfdp-train --flagfile=" in lines[3]


@pytest.mark.parametrize("bad, name", [({"rounds": 0}, "rounds"), ({"epochs": 1}, "epochs"),
                                       ({"cases": ["nope"]}, "cases")])
def test_bad_settings_are_named(bad, name):
    with pytest.raises(ValueError, match=name):
        onednn.run(**dict({"cases": ["sample"]}, **bad))
