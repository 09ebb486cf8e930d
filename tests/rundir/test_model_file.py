"""A truncated or corrupt model.keras is called corrupt everywhere (issue 43 item 4)."""

import json
import os
import subprocess
import sys
import zipfile

from tfdp import rundir
from tfdp.apps import runs

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _finished_looking_run(tmp_path, truncate):
    run = tmp_path / "run"
    run.mkdir(parents=True)
    with zipfile.ZipFile(run / rundir.MODEL_FILE, "w") as z:
        z.writestr("config.json", json.dumps({"x": list(range(2000))}))
        z.writestr("model.weights.h5", os.urandom(20000))
    if truncate:
        path = run / rundir.MODEL_FILE
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    (run / rundir.METRICS_FILE).write_text(json.dumps({"test_accuracy": 0.5,
                                                       "epochs_completed": 1}))
    (run / rundir.CONFIG_FILE).write_text(json.dumps({"method": "dpsgd", "epochs": 1}))
    (run / rundir.LEDGER_FILE).write_text(json.dumps({"entries": []}))
    return run


def test_model_file_problem_tells_a_truncated_archive(tmp_path):
    good = _finished_looking_run(tmp_path / "a", truncate=False)
    assert rundir.model_file_problem(str(good / rundir.MODEL_FILE)) is None
    bad = _finished_looking_run(tmp_path / "b", truncate=True)
    problem = rundir.model_file_problem(str(bad / rundir.MODEL_FILE))
    assert problem and "not a complete Keras archive" in problem
    assert rundir.model_file_problem(str(tmp_path / "missing.keras")) is None


def test_runs_lists_a_corrupt_model_as_damaged_and_evaluate_calls_it_corrupt(tmp_path):
    run = _finished_looking_run(tmp_path, truncate=True)
    assert runs.summarize(str(run)).status == "damaged (model.keras corrupt)"
    env = dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-m", "tfdp.apps.evaluate", f"--model_dir={run}"],
                          cwd=_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert f"{run / rundir.MODEL_FILE}: the model file is corrupt" in done.stderr, done.stderr
    assert "File not found" not in done.stderr


def test_export_of_a_corrupt_model_is_one_line(tmp_path):
    run = _finished_looking_run(tmp_path, truncate=True)
    env = dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-m", "tfdp.apps.export", f"--model_dir={run}"],
                          cwd=_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    lines = [l for l in done.stderr.strip().splitlines() if l.strip()]
    assert lines[-1].startswith(f"tfdp-export: error: {run / rundir.MODEL_FILE}: the model "
                                "file is corrupt"), done.stderr
    assert "USAGE" not in done.stderr and "Try --helpfull" not in done.stderr
