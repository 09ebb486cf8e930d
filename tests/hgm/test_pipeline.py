"""The main-job pipeline's summary, and the smoke flagfile on real MNIST (about 3 minutes)."""

import json
import os
import subprocess
import sys

import pytest

from tfdp.apps import pipeline

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _write(path, name, obj):
    with open(os.path.join(path, name), "w", encoding="utf-8") as f:
        json.dump(obj, f)


def test_summary_lines_report_accuracy_certificates_and_both_epsilons(tmp_path):
    _write(tmp_path, "config.json", {"method": "secure_sgd", "dataset": "sample",
                                     "certification": {"mechanism": "hgm", "epsilon": 1.0,
                                                       "sensitivity_sound": False}})
    _write(tmp_path, "ledger.json", {"epsilon": 2.0, "delta": 1e-5, "claimed_epsilon": 2.0})
    _write(tmp_path, "evaluation.json", {
        "clean_accuracy": 0.62, "num_examples": 100, "size_range": [0, 1],
        "num_draws": 200, "bound": "hoeffding", "prediction": "monte_carlo",
        "attacks": {"fgsm": {"0.1": {"accuracy": 0.43, "certified_accuracy": 0.18}}}})
    text = "\n".join(pipeline.summary_lines(str(tmp_path)))
    assert "clean accuracy: 0.6200" in text
    assert "fgsm   mu_a=0.1: accuracy 0.4300, certified 0.1800" in text
    assert "NOT formally certified" in text
    assert "claimed epsilon=2.0, sound epsilon=2.0" in text


def test_pipeline_rejects_missing_flagfile(tmp_path):
    with pytest.raises(SystemExit):
        pipeline.main([f"--train_flagfile={tmp_path / 'none.flags'}"])


def test_smoke_flagfile_trains_and_certifies_on_real_mnist(tmp_path, real_data_dir):
    # Issue: certified accuracy at mu_a = 0.1 is > 0 and <= the conventional accuracy.
    run = str(tmp_path / "run")
    env = dict(os.environ, PYTHONPATH=REPO, TFDP_DATA_DIR=real_data_dir)
    subprocess.run([sys.executable, "-m", "tfdp.apps.train",
                    "--flagfile=flags/hgm/mnist_smoke.flags", f"--model_dir={run}",
                    "--verbose=0"], cwd=REPO, env=env, check=True)
    subprocess.run([sys.executable, "-m", "tfdp.apps.evaluate", f"--model_dir={run}",
                    "--certify", "--attack_sizes=0.1", "--num_examples=100", "--seed=0"],
                   cwd=REPO, env=env, check=True)
    summary = json.load(open(os.path.join(run, "evaluation.json")))
    for res in summary["attacks"].values():
        assert 0.0 < res["0.1"]["certified_accuracy"] <= res["0.1"]["accuracy"]
    assert os.path.exists(os.path.join(run, "certificates.tsv"))
