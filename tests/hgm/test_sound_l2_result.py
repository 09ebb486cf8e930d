"""Issue 23: a Secure-SGD smoke model with a sound l2 certificate (flags/hgm/mnist_smoke_l2.flags)
certifies and passes the soundness check; with code_spectral it needs
--allow_unsound_certificates, is "claimed", and fails. The committed run is
results/hgm/sound_l2/ (made by its run.sh); the slow test reruns the sound half and compares."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "results", "hgm", "sound_l2")


def _load(name):
    with open(os.path.join(OUT, name), encoding="utf-8") as f:
        return json.load(f)


def test_committed_sound_l2_run_certifies_and_passes_the_check():
    ev = _load("l2_fourier_evaluation.json")
    cert = ev["certification"]
    assert (cert["norm"], cert["sound"], cert["sensitivity_mode"]) == ("l2", True, "l2_fourier")
    assert ev["attack_norm"] == "l2"
    values = {k: v["value"] for k, v in ev["clean_certified_accuracy"].items()}
    assert max(values.values()) > 0.3
    check = ev["soundness_check"]
    assert check["conclusive"] and check["passed"] and check["certified"] >= 20
    assert check["flipped"] <= 0.05 * check["certified"]
    assert _load("l2_fourier_ledger.json")["epsilon"] == pytest.approx(2.0, rel=1e-3)


def test_committed_code_spectral_run_is_claimed_and_fails_the_check():
    ev = _load("code_spectral_evaluation.json")
    assert ev["certification"]["sound"] is False
    assert "clean_certified_accuracy" not in ev and ev["clean_claimed_certified_accuracy"]
    check = ev["soundness_check"]
    assert check["conclusive"] and not check["passed"] and check["p_value"] < 1e-6
    with open(os.path.join(OUT, "code_spectral_refused.txt"), encoding="utf-8") as f:
        refused = f.read()
    assert "--allow_unsound_certificates" in refused and "error" in refused
    with open(os.path.join(OUT, "code_spectral_evaluate.txt"), encoding="utf-8") as f:
        assert "CLAIMED certified" in f.read()


@pytest.mark.slow
def test_sound_l2_run_reruns_to_the_committed_numbers(tmp_path, real_data_dir):
    env = dict(os.environ, PYTHONPATH=ROOT, TFDP_DATA_DIR=real_data_dir)
    run = tmp_path / "run"
    for args in (["tfdp.apps.train", "--flagfile=flags/hgm/mnist_smoke_l2.flags",
                  f"--model_dir={run}", "--verbose=0"],
                 ["tfdp.apps.evaluate", "--flagfile=flags/hgm/mnist_smoke_l2_eval.flags",
                  f"--model_dir={run}"]):
        proc = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=1800, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
    with open(run / "evaluation.json", encoding="utf-8") as f:
        new = json.load(f)
    old = _load("l2_fourier_evaluation.json")
    assert new["clean_accuracy"] == pytest.approx(old["clean_accuracy"], abs=0.02)
    for k, v in old["clean_certified_accuracy"].items():
        assert new["clean_certified_accuracy"][k]["value"] == pytest.approx(v["value"], abs=0.02)
    assert new["soundness_check"]["passed"]
