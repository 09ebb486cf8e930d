"""BENCHMARKS.md is rendered from the committed result files and quotes their numbers."""

import pytest
import json
import os
import re

from tfdp.bench import report

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "results", "bench")


def _committed():
    with open(os.path.join(ROOT, "BENCHMARKS.md"), encoding="utf-8") as f:
        return f.read()


def test_benchmarks_md_regenerates_from_result_files():
    assert report.render(RESULTS) == _committed()


def test_every_ratio_in_the_table_is_the_result_files():
    text = _committed()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| (\w+) \| ([^|]+) \|", text, re.M)
            if m.group(1) not in ("benchmark",)}
    results = report.load_results(RESULTS)
    assert set(results) <= set(rows)
    for stem, result in results.items():
        assert float(rows[stem]) == float(f"{result['ratio']:.3g}"), stem
    for stem in ("layers", "layers_mnist", "certify", "gpm", "dpsgd"):
        assert stem in results, f"results/bench/{stem}.json is missing"


def test_dpsgd_table_matches_its_result_file():
    with open(os.path.join(RESULTS, "dpsgd.json"), encoding="utf-8") as f:
        result = json.load(f)
    text = _committed()
    for model, res in result["models"].items():
        assert f"**{model}**" in text
        for system, s in res["systems"].items():
            assert s["measured_path"] in ("train", "static", "peer"), system
            cell = (f"| {system} | {s['measured_path']} | "
                    f"{report._fmt(s['ms_per_step']['median'])} "
                    f"[{report._fmt(s['ms_per_step']['min'])}, "
                    f"{report._fmt(s['ms_per_step']['max'])}] | "
                    f"{report._fmt(s['ratio_to_nonprivate']['median'])} ")
            assert cell in text, (model, system)
        for system in res["skipped"]:
            assert f"| {system} | skipped: " in text
    assert os.path.exists(os.path.join(RESULTS, report.PLOT))
    # Principle 9: the headline is measured on tfdp-train's own path.
    assert result["measured_path"] == "train"
    headline = result["models"]["mnist"]["systems"]["tfdp-dpsgd-auto"]
    assert headline["measured_path"] == "train"
    assert result["ratio"] == headline["ratio_to_nonprivate"]["median"]
    assert result["models"]["mnist"]["systems"]["nonprivate"]["measured_path"] == "train"


def test_render_of_a_fresh_directory(tmp_path):
    result = {"ratio": 1.234567, "target": 2.0, "passed": True, "candidate": "c",
              "reference": "r", "command": "tfdp-bench x", "date": "2026-01-01 00:00 UTC",
              "host": {"cpu_count": 2, "machine": "x86_64"},
              "loadavg_before": [1.5, 1, 1], "loadavg_after": [2.5, 1, 1]}
    (tmp_path / "newbench.json").write_text(json.dumps(result))
    text = report.render(str(tmp_path))
    assert "| newbench | 1.23 |" in text
    assert "`tfdp-bench x`" in text and "2026-01-01 00:00 UTC" in text
    assert "load average 1.5 before, 2.5 after" in text


def test_report_without_result_files_names_the_flag_and_writes_nothing(tmp_path):
    out = tmp_path / "new" / "BENCHMARKS.md"
    with pytest.raises(ValueError, match="--results_dir: no benchmark result files"):
        report.write_report(str(tmp_path / "empty"), str(out))
    assert not out.exists()


def test_every_keras_fit_file_gets_its_table_and_says_when_a_system_trained_on_noise(tmp_path):
    with open(os.path.join(RESULTS, "keras_fit_mnist.json"), encoding="utf-8") as f:
        result = json.load(f)
    systems = result["models"]["mnist"]["systems"]
    systems["tfprivacy-dpmodel"]["setup"]["data"] = "uniform noise"
    (tmp_path / "keras_fit_other.json").write_text(json.dumps(result))
    text = report.render(str(tmp_path))
    section = text.split("### keras_fit_other", 1)[1]
    tfdp = systems["tfdp-keras"]["ms_per_step"]["median"]
    assert f"| mnist | tfdp-keras | {report._fmt(tfdp)} [" in section
    assert "- mnist: tfprivacy-dpmodel trained on uniform noise, not mnist images" in section
    assert "tfdp-keras trained on" not in section
