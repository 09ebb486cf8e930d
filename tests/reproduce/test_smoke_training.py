"""CI: the smoke-scale training rows of AdLM, HGM and StoBatch rerun from scratch.

One row per paper with a trainer, one test per row (so that two pytest-xdist workers share
them): every training and evaluation job of the row is deleted from a copy of the committed
results and rerun through `tfdp-reproduce --scale=smoke`, on real MNIST, and the regenerated
REPRODUCTION.md must equal the committed one apart from timings and that row.

The default suite reruns the cheapest training row (a CPU half-minute): StoBatch's
Secure-SGD-AGM baseline (HGM's mechanism, trained and evaluated through the whole
tfdp-reproduce path). The other rows are `slow`: AdLM's, HGM's HGM_PixelDP-minus-PixelDP and
Secure-SGD rise, and the StoBatch trainer's own row (40 real-size steps). What they check per
paper, a training that gives the committed numbers, the default suite checks through tests that
train anyway: tests/adlm/test_cli.py reruns the committed AdLM smoke result
(results/adlm/mnist_smoke_adlm.json: ledger and accuracy), tests/hgm/test_pipeline.py the
committed `train.hgm.mnist_secure_sgd.eps2` job of HGM's rows, and tests/train/test_determinism.py
a StoBatch run against its committed fingerprint.

All the rows are seeded and deterministic on one kind of machine (training: grappler's
memory-optimizer scheduling pass is off, tfdp/tf_options.py; evaluation: --seed keys the loaded
model's noise layers, layers.set_noise_seeds): each must give the committed verdict and value (a
small tolerance covers float rounding on another CPU) and an identical ledger. The committed
smoke jobs ran with `--verbose=0`, and tfdp-reproduce now trains with `--verbose=1` (progress
in the job's log); tests/train/test_train_app.py checks that this leaves the weights alone.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tfdp.reproduce import registry, report, runner, values

_RESULTS = os.path.join(runner.REPO_ROOT, "results", "reproduce")
_REPORT = os.path.join(runner.REPO_ROOT, "REPRODUCTION.md")

# The default suite's row: StoBatch's Secure-SGD-AGM baseline, one training and its
# Monte-Carlo evaluation.
ROWS = ("stobatch.mnist.secure_sgd_agm.eps2",)
# Slow: AdLM's row, HGM_PixelDP vs PixelDP (two trainings and evaluations), the StoBatch trainer
# at real size (40 steps) and two Secure-SGD runs. In the default suite
# tests/adlm/test_cli.py reruns the committed AdLM smoke result (results/adlm/),
# tests/hgm/test_pipeline.py retrains the committed train.hgm.mnist_secure_sgd.eps2 job (same
# ledger and accuracy) and tests/train/test_determinism.py checks StoBatch against a committed
# fingerprint.
SLOW_ROWS = ("adlm.mnist.adlm.eps0.25", "hgm.fig3.mnist_hgm_pixeldp_minus_pixeldp",
             "hgm.mnist.secure_sgd_rise", "stobatch.mnist.stobatch.eps2")
_EXACT = ROWS + SLOW_ROWS
# The trainings each row's smoke jobs run (4 in the default suite).
_TRAININGS = {"adlm.mnist.adlm.eps0.25": 1, "hgm.fig3.mnist_hgm_pixeldp_minus_pixeldp": 2,
              "stobatch.mnist.secure_sgd_agm.eps2": 1, "hgm.mnist.secure_sgd_rise": 2,
              "stobatch.mnist.stobatch.eps2": 1}
# Values are accuracies in % or differences in points, measured on 100-200 test images: two
# points is one or two images, the most float rounding on another CPU could move.
_TOLERANCE = 2.0


def _smoke_jobs(row_id):
    keys = []
    for job in registry.ROWS_BY_ID[row_id].jobs["smoke"].values():
        if job.depends:
            keys.append(runner.Task(registry.train_job("smoke", job.depends), 1).key)
        keys.append(runner.Task(job, 1 if job.seeded else None).key)
    return keys


def _mask(text, row_ids):
    """The report with the given rows' lines removed (they are compared by value instead)."""
    keep = [ln for ln in text.splitlines() if not any(f"`{r}`" in ln for r in row_ids)]
    return "\n".join(keep)


def test_rows_cover_every_paper_with_a_trainer():
    assert {registry.ROWS_BY_ID[r].paper for r in ROWS + SLOW_ROWS} == {"adlm", "hgm",
                                                                         "stobatch"}
    for row_id in ROWS + SLOW_ROWS:
        assert any(k.startswith("train.") for k in _smoke_jobs(row_id)), row_id
    assert set(_TRAININGS) == set(ROWS + SLOW_ROWS)
    assert sum(_TRAININGS[r] for r in ROWS) == 1


@pytest.mark.parametrize("row", ROWS + tuple(pytest.param(r, marks=pytest.mark.slow)
                                             for r in SLOW_ROWS))
def test_smoke_training_rows_rerun_to_the_committed_results(tmp_path, real_data_dir, row):
    rows = (row,)
    res = tmp_path / "results" / "reproduce"
    shutil.copytree(_RESULTS, res, ignore=shutil.ignore_patterns("figures"))
    committed = {}
    removed = set()
    for row_id in rows:
        path = res / "smoke" / f"{row_id}.json"
        with open(path, encoding="utf-8") as f:
            committed[row_id] = json.load(f)
        path.unlink()
        for key in _smoke_jobs(row_id):
            job = res / "smoke" / "jobs" / f"{key}.json"
            if job.exists():
                job.unlink()
                removed.add(key)
    assert sum(k.startswith("train.") for k in removed) == _TRAININGS[row], sorted(removed)
    env = dict(os.environ, PYTHONPATH=runner.REPO_ROOT, TFDP_DATA_DIR=real_data_dir,
               TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-m", "tfdp.apps.reproduce", "--scale=smoke",
         "--papers=adlm,hgm,stobatch", "--only=" + row,
         f"--results_dir={res}", f"--work_dir={tmp_path / 'work'}",
         f"--report_path={tmp_path / 'REPRODUCTION.md'}"],
        cwd=runner.REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800,
        check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # Every removed job ran again (none was adopted or skipped) and finished.
    assert "adopted" not in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-2000:]
    assert len(re.findall(r"^\s+done in ", proc.stdout + proc.stderr, re.M)) == len(removed)
    # Each job names its log, and a training's log shows its progress, one line per epoch.
    for key in removed:
        log_path = tmp_path / "work" / "smoke" / f"{key}.log"
        assert f"  log: {log_path}" in proc.stdout, key
        if key.startswith("train."):
            with open(log_path, encoding="utf-8") as f:
                text = f.read()
            assert re.search(r"^epoch 1/\d+ +step \d+", text, re.M), (key, text[-1000:])
            assert "test accuracy: " in text, (key, text[-1000:])
    for row_id in rows:
        with open(res / "smoke" / f"{row_id}.json", encoding="utf-8") as f:
            new = json.load(f)
        old = committed[row_id]
        assert new["commands"] == old["commands"], row_id
        if row_id in _EXACT:
            assert new["verdict"] == old["verdict"], (row_id, new["reason"], old["reason"])
            assert new["value"] == pytest.approx(old["value"], abs=_TOLERANCE), (
                row_id, new["value"], old["value"])
        else:
            assert new["verdict"] in values.VERDICTS and new["value"] is not None, new
    for key in sorted(removed):  # the privacy accounting of every training is identical
        if key.startswith("train."):
            with open(res / "smoke" / "jobs" / f"{key}.json", encoding="utf-8") as f:
                new = json.load(f)["output"]["ledger"]
            with open(os.path.join(_RESULTS, "smoke", "jobs", f"{key}.json"),
                      encoding="utf-8") as f:
                old = json.load(f)["output"]["ledger"]
            assert new == old, key
    with open(tmp_path / "REPRODUCTION.md", encoding="utf-8") as f:
        regenerated = report.strip_timings(f.read())
    with open(_REPORT, encoding="utf-8") as f:
        expected = report.strip_timings(f.read())
    assert _mask(regenerated, rows) == _mask(expected, rows)
    for row_id in rows:  # the rows themselves are in the report, with their verdicts
        # The row's own line of the results table (other sections cite rows by id too).
        line = next(ln for ln in regenerated.splitlines() if ln.startswith(f"| `{row_id}` |"))
        assert committed[row_id]["verdict"] in line, line
