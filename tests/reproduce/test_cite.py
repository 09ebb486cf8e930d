"""The report's written sections (conclusions, appendix) are filled in from the files they
cite (issue 39): a test edits a row and sees the text change."""

import glob
import json
import os
import shutil

import pytest

from tfdp.reproduce import cite, report, runner

_RESULTS = os.path.join(runner.REPO_ROOT, "results", "reproduce")


def _rows():
    return {("reduced", "r.one"): {"id": "r.one", "value": 85.04, "value_text": "85.04% ± 1.26",
                                   "verdict": "not reproduced", "per_seed": [83.9, 84.8, 86.4],
                                   "seeds": [1, 2, 3]},
            ("reduced", "r.stale"): {"id": "r.stale", "value": None, "verdict": "stale (rerun)"}}


def test_citations_are_filled_in_from_the_cited_files(tmp_path):
    os.makedirs(tmp_path / "d")
    (tmp_path / "d" / "m.json").write_text(json.dumps(
        {"test_accuracy": 0.8266, "attacks": {"fgsm": {"0.2": {"accuracy": 0.75}},
                                              "mim": {"0.2": {"accuracy": 0.78}}}}))
    (tmp_path / "d" / "t.csv").write_text("d,beta,rate\n256,1e-05,1.0\n256,0.1,0.5751\n")
    text = ("{{row:reduced/r.one:value_text}} **{{row:reduced/r.one:verdict}}** "
            "({{row:reduced/r.one:per_seed:.1f}}; {{row:reduced/r.one:n_seeds}} seeds) "
            "{{row:reduced/r.stale:value:.2f}} {{file:d/m.json:test_accuracy:pct.2f}}% "
            "{{attack_mean:d/m.json:0.2:pct.1f}}% {{csv:d/t.csv:d=256,beta=0.1:rate:.3f}}")
    out = cite.expand(text, _rows(), str(tmp_path))
    assert out == ("85.04% ± 1.26 **not reproduced** (83.9, 84.8, 86.4; 3 seeds) — 82.66% "
                   "76.5% 0.575")
    assert len(cite.citations(text)) == 8


def test_seed_citations_average_the_runs_made_once_per_seed(tmp_path):
    """`seeds` / `seeds_attack_mean` read every run whose "*" is a seed number, in seed order
    (10 after 2), and ignore names where it is not; a run added for a seed changes the text."""
    def run(name, acc, attack):
        os.makedirs(tmp_path / "d" / name)
        (tmp_path / "d" / name / "m.json").write_text(json.dumps(
            {"test_accuracy": acc, "attacks": {"fgsm": {"0.1": {"accuracy": attack}},
                                               "mim": {"0.1": {"accuracy": attack + 0.02}}}}))
    run("x_seed1", 0.60, 0.50)
    run("x_seed1_old", 0.10, 0.10)      # not a seed number: ignored
    run("x_seedling", 0.10, 0.10)       # not a seed number: ignored
    text = ("{{seeds:d/x_seed*/m.json:test_accuracy:pct.1f}} | "
            "{{seeds_attack_mean:d/x_seed*/m.json:0.1:pct.2f}}")
    assert cite.expand(text, _rows(), str(tmp_path)) == "60.0% (1 seed) | 51.00% (1 seed)"
    run("x_seed10", 0.66, 0.54)
    run("x_seed2", 0.63, 0.52)
    assert cite.expand(text, _rows(), str(tmp_path)) == (
        "63.0% ± 3.0 (3 seeds: 60.0, 63.0, 66.0) | "
        "53.00% ± 2.00 (3 seeds: 51.00, 53.00, 55.00)")
    assert cite.expand("{{seeds:d/y_seed*/m.json:test_accuracy}}", _rows(), str(tmp_path)) == (
        "[not in this results directory: d/y_seed*/m.json]")
    with pytest.raises(ValueError, match="exactly one"):
        cite.expand("{{seeds:d/x_seed1/m.json:test_accuracy}}", _rows(), str(tmp_path))


def test_a_row_or_file_this_results_directory_lacks_is_named_not_invented(tmp_path):
    out = cite.expand("{{row:reduced/no.such:value}} {{file:missing.json:x}}", _rows(),
                      str(tmp_path))
    assert out == ("[not in this results directory: reduced/no.such] "
                   "[not in this results directory: missing.json]")


@pytest.mark.parametrize("text,message", [
    ("{{row:reduced/r.one:no_field}}", "has no field"),
    ("{{file:../../etc/passwd:x}}", "leaves"),
    ("{{csv:t.csv:d=256:rate}}", "2 rows match"),
])
def test_a_citation_that_cannot_be_filled_in_is_an_error_naming_it(tmp_path, text, message):
    (tmp_path / "t.csv").write_text("d,beta,rate\n256,1e-05,1.0\n256,0.1,0.5\n")
    with pytest.raises(ValueError, match=message) as e:
        cite.expand(text, _rows(), str(tmp_path))
    assert text in str(e.value)


def _copy_results(tmp_path):
    res = tmp_path / "reproduce"
    for path in glob.glob(os.path.join(_RESULTS, "*", "*.json")):
        rel = os.path.relpath(path, _RESULTS)
        os.makedirs(res / os.path.dirname(rel), exist_ok=True)
        shutil.copy(path, res / rel)
    shutil.copytree(os.path.join(_RESULTS, "discriminating"), res / "discriminating",
                    dirs_exist_ok=True)
    for name in ("preamble.md", "earlier_runs.md"):
        shutil.copy(os.path.join(_RESULTS, name), res / name)
    return res


def _edit_row(res, scale, row_id, **fields):
    path = res / scale / f"{row_id}.json"
    rec = json.loads(path.read_text())
    rec.update(fields)
    path.write_text(json.dumps(rec))


def test_editing_a_row_changes_the_conclusions_and_the_appendix(tmp_path):
    res = _copy_results(tmp_path)
    before = report.generate(str(res), report_path="", figures=False)
    _edit_row(res, "reduced", "adlm.mnist.adlm_minus_ilm.eps0.25", verdict="ordering holds",
              value_text="+9.99 pts (edited)")
    _edit_row(res, "reduced", "stobatch.mnist.stobatch.eps2.authors_path",
              verdict="within band", value_text="88.88% ± 0.01 (3 seeds)")
    after = report.generate(str(res), report_path="", figures=False)
    assert after != before
    discussion, _, appendix = after.partition("## Appendix")
    conclusions = discussion[discussion.index("## Discriminating runs"):]
    assert "+9.99 pts (edited)" in conclusions and "+9.99 pts (edited)" in appendix
    assert "88.88% ± 0.01 (3 seeds)" in conclusions
    assert ("authors' path's is\n**within band**" in conclusions
            or "**within band**" in conclusions)
    assert "+9.99 pts (edited)" not in before


def test_a_number_in_a_cited_run_file_changes_the_text(tmp_path):
    res = _copy_results(tmp_path)
    path = res / "discriminating" / "sb_eps2_authors_seed1" / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics["test_accuracy"] = 0.1234
    path.write_text(json.dumps(metrics))
    text = report.generate(str(res), report_path="", figures=False)
    row = [ln for ln in text.splitlines() if ln.startswith("| 2 | authors' code |")]
    assert len(row) == 1
    noise_free = row[0].split("|")[3]  # the noise-free network's cell: the seed-1 value edited
    assert "12.3" in noise_free, noise_free


# Numbers and statements the issue found superseded or refuted; none may come back.
_SUPERSEDED = ("87.48", "93.68", "+1.85", "+1.10", "adopt three of these result files",
               "consistent with scale plus the authors' data path",
               "inside the band once the seeds' spread is counted")


@pytest.mark.parametrize("path", ["REPRODUCTION.md", "README.md", "docs/stobatch.md",
                                  "docs/adlm.md", "results/reproduce/preamble.md",
                                  "results/reproduce/earlier_runs.md"])
def test_superseded_numbers_and_refuted_conclusions_are_gone(path):
    with open(os.path.join(runner.REPO_ROOT, path), encoding="utf-8") as f:
        text = f.read()
    for phrase in _SUPERSEDED:
        assert phrase not in text, (path, phrase)


def test_the_committed_report_has_no_unfilled_citation():
    with open(os.path.join(runner.REPO_ROOT, "REPRODUCTION.md"), encoding="utf-8") as f:
        text = f.read()
    assert "{{" not in text and not cite.citations(text)
    assert "[not in this results directory" not in text
    for name in ("preamble.md", "earlier_runs.md"):
        with open(os.path.join(_RESULTS, name), encoding="utf-8") as f:
            assert len(cite.citations(f.read())) > 20, name
