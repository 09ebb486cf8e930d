"""End to end (issue 22): train shipped flagfiles at tiny size without --seed, export, and scan
every public file of the run directory and every file of the export for the run's secret key,
any seed derived from it, and the non-private training statistics: none may be found."""

import json
import os
import subprocess
import sys

import pytest

from tfdp import export, rundir

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Files of a run directory that are released with the model (metrics.json and the TensorBoard
# events hold the labelled non-private monitoring statistics and stay with the run).
_RELEASED = (rundir.FLAGS_FILE, rundir.CONFIG_FILE, rundir.LEDGER_FILE, rundir.MODEL_FILE)
_BANNED_KEYS = ("train_loss", "train_accuracy", "pretrain_train_accuracy",
                "nonprivate_training_stats", "seed_source")


def _run(module, *args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=_ROOT)
    p = subprocess.run([sys.executable, "-m", module, *args], cwd=_ROOT, env=env,
                       capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def _keys_and_strings(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield str(k)
            yield from _keys_and_strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _keys_and_strings(v)
    elif isinstance(obj, str):
        yield obj


@pytest.mark.slow  # two tiny trainings and exports through the command line (~2 min)
@pytest.mark.parametrize("flagfile,extra", [
    # The main job's Secure-SGD flagfile (r from a public split).
    ("flags/hgm/sample.flags", ["--num_train=700", "--num_test=60", "--epochs=1",
                                "--hgm_r_public_size=200", "--hgm_pretrain_examples=200",
                                "--hgm_num_draws=20"]),
    # DP-SGD, the other private trainer of the main jobs.
    ("flags/baselines/dpsgd_smoke.flags", ["--num_train=512", "--num_test=60", "--epochs=1"]),
], ids=["hgm_sample", "dpsgd_smoke"])
def test_nothing_private_leaves_the_run(tmp_path, flagfile, extra, leak_scan):
    # The shipped flagfile without its --seed line: noise from OS entropy, as users run it.
    lines = open(os.path.join(_ROOT, flagfile)).read().splitlines()
    unseeded = tmp_path / "job.flags"
    unseeded.write_text("\n".join(ln for ln in lines if not ln.startswith("--seed")) + "\n")
    run, out = tmp_path / "run", tmp_path / "export"
    _run("tfdp.apps.train", f"--flagfile={unseeded}", f"--model_dir={run}", "--verbose=0",
         *extra)
    _run("tfdp.apps.export", f"--model_dir={run}", f"--export_dir={out}")

    key, user_supplied = leak_scan.run_secret(str(run))
    assert not user_supplied
    seeds = leak_scan.patterns(leak_scan.derived_values(key))
    assert leak_scan.find(leak_scan.all_files(rundir.checkpoint_dir(str(run))), seeds)
    exported = leak_scan.all_files(str(out))
    assert any(p.endswith(export.CARD_FILE) for p in exported)
    assert leak_scan.find(leak_scan.public_files(str(run)) + exported, seeds) == []

    # Non-private training statistics (monitoring only) appear in no released file.
    metrics = json.load(open(run / rundir.METRICS_FILE))
    stats = metrics["nonprivate_training_stats"]
    values = [stats["train_loss"], stats["train_accuracy"], *stats["last_epoch"].values()]
    stat_pats = {repr(float(v)).encode(): f"statistic {v!r}" for v in values
                 if v is not None and len(repr(float(v))) >= 8}
    assert stat_pats  # the loss at least has many digits
    released = [str(run / name) for name in _RELEASED] + exported
    assert leak_scan.find(released, stat_pats) == []

    # The card and every JSON config inside the export carry none of the banned keys.
    for path in exported + [str(run / rundir.CONFIG_FILE)]:
        if path.endswith(".json"):
            words = set(_keys_and_strings(json.load(open(path))))
            assert not words & set(_BANNED_KEYS), (path, words & set(_BANNED_KEYS))
    card = json.load(open(out / export.CARD_FILE))
    assert card["ledger"]["noise_seed"] == "os_entropy" and card["ledger"]["guarantee"]
    assert card["run"]["noise_seed"] == "os_entropy" and "seed" not in card["run"]

    # The published copy (tfdp-publish, issue 40): no seed, no derived value, no training
    # statistic (the marked ones and Secure-SGD's r statistics), no hash of the training data.
    public = tmp_path / "public"
    _run("tfdp.apps.publish", f"--model_dir={run}", f"--out={public}")
    pats = dict(seeds)
    pats.update(leak_scan.statistic_patterns(leak_scan.training_statistics(str(run))))
    pats.update(leak_scan.data_hash_patterns(str(run)))
    assert leak_scan.find(leak_scan.all_files(rundir.checkpoint_dir(str(run))), pats)
    assert leak_scan.find(leak_scan.all_files(str(public)), pats) == []
