"""REPRODUCTION.md is generated from results/reproduce/ and the smoke scale regenerates it."""

import os
import shutil
import subprocess
import sys

import pytest

from tfdp.reproduce import jobfiles, registry, report, row_records, runner, values

_RESULTS = os.path.join(runner.REPO_ROOT, "results", "reproduce")
_REPORT = os.path.join(runner.REPO_ROOT, "REPRODUCTION.md")


def _committed() -> str:
    with open(_REPORT, encoding="utf-8") as f:
        return f.read()


def test_committed_report_is_generated_from_the_committed_results():
    text = report.generate(_RESULTS, report_path="", figures=False)
    assert report.strip_timings(text) == report.strip_timings(_committed())


def test_report_never_shows_a_number_without_a_result():
    rows = jobfiles.load_rows(_RESULTS)
    text = report.generate(_RESULTS, report_path="", figures=False)
    lines = {ln.split(" | ")[0][3:-1]: ln for ln in text.splitlines()
             if ln.startswith("| `")}
    for row in registry.ROWS:
        cells = lines[row.id].rstrip(" |").split(" | ")[-len(registry.SCALES):]
        for scale, cell in zip(registry.SCALES, cells):
            if (scale, row.id) in rows:
                assert rows[(scale, row.id)]["verdict"] in cell
            elif scale in row.jobs:
                assert cell == values.NOT_RUN, (row.id, scale, cell)
            else:
                assert cell == "no job at this scale", (row.id, scale, cell)


def test_report_is_deterministic_apart_from_timings(tmp_path):
    a = report.generate(_RESULTS, report_path="", figures=False)
    b = report.generate(_RESULTS, report_path="", figures=False)
    assert a == b
    assert report.TIMINGS_HEADING in a
    assert report.strip_timings(a) + report.TIMINGS_HEADING in a


def test_smoke_scale_regenerates_the_committed_report(tmp_path):
    """CI: rerun the smoke scale of GPM and HGM (closed forms, DP-hist) from scratch.

    The AdLM smoke rows (training, about 2 CPU minutes) are kept from the committed results
    here and rerun by the slow test below; everything else must come out identical.
    """
    res = tmp_path / "results" / "reproduce"
    shutil.copytree(_RESULTS, res, ignore=shutil.ignore_patterns("figures"))
    # Only the rows whose smoke jobs are closed forms and audits: the HGM trainer rows (whose
    # committed smoke results are kept) must not train here.
    only = [r.id for r in registry.select(["gpm", "hgm"]) if "smoke" in r.jobs and all(
        j.kind in ("python", "audit") for j in r.jobs["smoke"].values())]
    removed = 0
    for row_id in only:
        path = res / "smoke" / f"{row_id}.json"
        if path.exists():
            path.unlink()
            removed += 1
    for job in (res / "smoke" / "jobs").glob("*.json"):
        if job.name.startswith(("python.", "audit.gpm")):
            job.unlink()
    assert removed >= 40  # the closed forms and the d = 256 DP-hist cells
    env = dict(os.environ, PYTHONPATH=runner.REPO_ROOT)
    proc = subprocess.run(
        [sys.executable, "-m", "tfdp.apps.reproduce", "--scale=smoke", "--papers=gpm,hgm",
         "--only=" + ",".join(only),
         f"--results_dir={res}", f"--work_dir={tmp_path / 'work'}",
         f"--report_path={tmp_path / 'REPRODUCTION.md'}"],
        cwd=runner.REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
        check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(tmp_path / "REPRODUCTION.md", encoding="utf-8") as f:
        regenerated = f.read()
    assert report.strip_timings(regenerated) == report.strip_timings(_committed())
    # The smoke-meaningful verdicts all pass, except two findings the report explains: HGM's
    # sigma exceeds GM's by up to 0.2% for 0.9 < eps <= 1, and the paper's 103.2 typo.
    expected_failures = {"hgm.fig1.hgm_le_gm", "gpm.table4.expect.d256.e1"}
    checked = 0
    for row in registry.select(["gpm", "hgm"]):
        rec = row_records.compute_row(row, "smoke", 1, str(res), write=False)
        if rec is None or not row.criterion.smoke_meaningful:
            continue
        checked += 1
        passed = rec["verdict"] in ("reproduced", "within band", "ordering holds")
        assert passed != (row.id in expected_failures), (row.id, rec["reason"])
    assert checked >= 40


@pytest.mark.slow
def test_adlm_smoke_rows_get_verdicts(tmp_path):
    env = dict(os.environ, PYTHONPATH=runner.REPO_ROOT)
    proc = subprocess.run(
        [sys.executable, "-m", "tfdp.apps.reproduce", "--scale=smoke", "--papers=adlm",
         f"--results_dir={tmp_path / 'r'}", f"--work_dir={tmp_path / 'w'}",
         f"--report_path={tmp_path / 'R.md'}"],
        cwd=runner.REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200,
        check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for row in registry.select(["adlm"]):
        if "smoke" in row.jobs:
            rec = row_records.compute_row(row, "smoke", 1, str(tmp_path / "r"), write=False)
            assert rec is not None and rec["verdict"] in values.VERDICTS, row.id
