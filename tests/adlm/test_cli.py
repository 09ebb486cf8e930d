"""End-to-end AdLM runs through the tfdp-train command line (real MNIST smoke run, bad flags)."""

import json
import os
import subprocess
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SMOKE = os.path.join(_ROOT, "flags", "adlm", "mnist_smoke.flags")


def _train(args, timeout=900):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", "tfdp.apps.train"] + args, cwd=_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_mnist_smoke_reaches_85_percent_with_claimed_budget(real_data_dir, tmp_path):
    # The must-show: tfdp-train --method=adlm --dataset=mnist
    # --flagfile=flags/adlm/mnist_smoke.flags on real MNIST reaches >= 85% test accuracy, and
    # the ledger's (claimed) epsilon equals the configured total, 8 = eps1 + eps2 + eps3.
    run = tmp_path / "run"
    proc = _train(["--method=adlm", "--dataset=mnist", f"--flagfile={_SMOKE}",
                   f"--data_dir={real_data_dir}", f"--model_dir={run}", "--verbose=0"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((run / "metrics.json").read_text())
    ledger = json.loads((run / "ledger.json").read_text())
    assert metrics["test_accuracy"] >= 0.85, metrics
    assert metrics["epochs_completed"] == 3
    # The committed result of this command (README's "AdLM, real MNIST, CI smoke setting" row)
    # reruns: the same accounting and the same test accuracy (two points of tolerance for float
    # rounding on another CPU).
    with open(os.path.join(_ROOT, "results", "adlm", "mnist_smoke_adlm.json"),
              encoding="utf-8") as f:
        committed = json.load(f)
    assert committed["command"] == ("tfdp-train --method=adlm --dataset=mnist "
                                    "--flagfile=flags/adlm/mnist_smoke.flags "
                                    "--model_dir=RUN_DIR --verbose=0")
    # The accounting (the file predates the ledger's later fields: dp_event, reworded notes).
    def accounting(led):
        keys = ("name", "mechanism", "epsilon", "delta", "claimed_epsilon", "claimed_delta")
        return ({k: led[k] for k in ("epsilon", "delta", "claimed_epsilon", "claimed_delta")},
                [{k: e[k] for k in keys} for e in led["entries"]])
    assert accounting(ledger) == accounting(committed["ledger"])
    assert metrics["test_accuracy"] == pytest.approx(committed["metrics"]["test_accuracy"],
                                                     abs=0.02)
    assert ledger["claimed_epsilon"] == pytest.approx(8.0, rel=1e-12)
    names = [e["name"] for e in ledger["entries"]]
    assert names == ["adlm_eps1_relevance", "adlm_eps2_inputs", "adlm_eps3_functional_mechanism"]
    claimed = [e["claimed_epsilon"] for e in ledger["entries"]]
    assert claimed == pytest.approx([2.0, 2.0, 4.0], rel=1e-12)
    # batch_shared_per_step / ref_code FM: no finite per-record bound, recorded as such.
    assert ledger["differs"] and ledger["epsilon"] == "inf" and not ledger["guarantee"]
    assert (run / "model.keras").exists()


@pytest.mark.parametrize("flag, message", [
    ("--adlm_eps_split=0.3,0.3,0.3", "adlm_eps_split"),
    # Slow: the same path as the eps_split case (a method flag rejected by the method's
    # validation, through the command line); the value itself is checked by the fast
    # tests/adlm/test_adlm.py::test_bad_flags_raise_naming_the_flag.
    pytest.param("--adlm_delta_h0=huge", "adlm_delta_h0", marks=pytest.mark.slow),
    # Slow: a bad --epsilon through the command line, before any file, is the fast
    # tests/train/test_train_app.py::test_cli_rejects_bad_flags_before_training (and
    # test_bad_flags_name_the_flag in-process).
    pytest.param("--epsilon=-1", "epsilon", marks=pytest.mark.slow),
])
def test_bad_flags_fail_before_training(tmp_path, flag, message):
    run = tmp_path / "run"
    proc = _train(["--method=adlm", "--dataset=sample", f"--model_dir={run}", flag])
    assert proc.returncode != 0
    assert message in proc.stderr
    assert not (run / "ledger.json").exists()  # nothing was trained or accounted


@pytest.mark.slow
@pytest.mark.parametrize("method", ["adlm", "ilm"])
def test_sample_eps1_ref_code_modes_beat_chance(tmp_path, method):
    # Smoke: with eps = 1 in the code-release modes training has no NaN and beats
    # chance (> 20%), here on the embedded MNIST sample with flags/adlm/sample.flags.
    run = tmp_path / "run"
    proc = _train([f"--method={method}", "--dataset=sample",
                   f"--flagfile={os.path.join(_ROOT, 'flags', 'adlm', 'sample.flags')}",
                   "--epsilon=1", f"--model_dir={run}", "--verbose=0"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((run / "metrics.json").read_text())
    stats = metrics["nonprivate_training_stats"]
    assert stats["train_loss"] == stats["train_loss"]  # not NaN
    assert metrics["test_accuracy"] > 0.20, metrics
