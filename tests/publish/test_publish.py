"""tfdp-publish (issue 40 item 3): the published copy of a run holds no seed, no value derived
from the run's secret, no training statistic and no hash of the training data (scanned with
tests/leak_scan.py, with positive controls showing the scanner finds each where it is kept);
the copy refuses to overwrite and is all-or-nothing."""

import json
import os
import shutil

import pytest

from tfdp import data, publish, rundir
from tfdp.apps import publish as publish_app
from tfdp.train import dpsgd, loop
from tfdp.train.base import TrainConfig

_SHAPE = (6, 6, 1)
_CLASSES = 3
# Planted into a copy of the run: Secure-SGD-style statistics fitted on the training data.
_PLANTED_STAT = 0.7105263157894737


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished unseeded DP-SGD run (noise from OS entropy) with an evaluation.json."""
    def load(split, n):
        return data.load("synthetic", split, shape=_SHAPE, num_classes=_CLASSES,
                         num_examples=n, seed=0)
    (x, y), (xt, yt) = load("train", 96), load("test", 40)
    path = tmp_path_factory.mktemp("publish") / "run"
    opts = {"dpsgd_l2_clip": 0.5, "dpsgd_noise_multiplier": 1.0, "dpsgd_model": "mlp"}
    method = dpsgd.DPSGD(TrainConfig(method="dpsgd", dataset="synthetic", model_dir=str(path),
                                     epochs=2, batch_size=16, learning_rate=0.05, delta=1e-5,
                                     options=opts))
    loop.train(method, loop.Data(x, y, xt, yt, _SHAPE, _CLASSES), verbose=0,
               flags_text=f"--method=dpsgd\n--model_dir={path}\n--data_dir=/private/data\n"
                          "--epochs=2\n--batch_size=16\n")
    rundir.RunDir(str(path)).write_json(rundir.EVALUATION_FILE, {
        "clean_accuracy": 0.5, "num_examples": 40, "model_dir": str(path)})
    return str(path)


def _scan_everything(leak_scan, run, paths):
    """Hits of the run's seeds, training statistics and data hash in `paths`."""
    key, user_supplied = leak_scan.run_secret(run)
    assert not user_supplied
    pats = leak_scan.patterns(leak_scan.derived_values(key))
    pats.update(leak_scan.statistic_patterns(leak_scan.training_statistics(run)))
    pats.update(leak_scan.data_hash_patterns(run))
    return leak_scan.find(paths, pats)


def test_published_copy_holds_nothing_private(tmp_path, finished_run, leak_scan):
    out = tmp_path / "public"
    manifest = publish.publish_run(finished_run, str(out))
    names = sorted(os.listdir(out))
    assert names == sorted(manifest["files"] + [publish.PUBLISHED_FILE])
    assert {rundir.MODEL_FILE, rundir.CONFIG_FILE, rundir.LEDGER_FILE, rundir.METRICS_FILE,
            rundir.EVALUATION_FILE, rundir.FLAGS_FILE} <= set(names)
    assert rundir.CHECKPOINT_DIR in manifest["withheld"]
    assert not any(os.path.isdir(out / n) for n in names)

    # Positive controls: the scanner finds the secret, the statistics and the data hash in
    # the run's private folder and its labelled monitoring files.
    stats = leak_scan.training_statistics(finished_run)
    assert len(leak_scan.statistic_patterns(stats)) >= 2
    ckpt = leak_scan.all_files(rundir.checkpoint_dir(finished_run))
    found = _scan_everything(leak_scan, finished_run, ckpt)
    for what in ("as text", "statistic", "data_sha256"):
        assert any(what in h for h in found), (what, found)
    metrics = os.path.join(finished_run, rundir.METRICS_FILE)
    assert any("statistic" in h for h in _scan_everything(leak_scan, finished_run, [metrics]))

    # The copy: none of them.
    assert _scan_everything(leak_scan, finished_run, leak_scan.all_files(str(out))) == []
    copied = json.load(open(out / rundir.METRICS_FILE))
    assert set(copied) <= {"test_accuracy", "epochs_completed", "steps", "stopped_early"}
    assert copied["test_accuracy"] == json.load(open(metrics))["test_accuracy"]
    assert "model_dir" not in json.load(open(out / rundir.EVALUATION_FILE))
    flags = [ln for ln in open(out / rundir.FLAGS_FILE).read().splitlines()
             if not ln.startswith("#")]
    assert flags == ["--method=dpsgd", "--epochs=2", "--batch_size=16"]
    assert "data_dir" not in json.load(open(out / rundir.CONFIG_FILE))
    with open(os.path.join(finished_run, rundir.MODEL_FILE), "rb") as f:
        assert open(out / rundir.MODEL_FILE, "rb").read() == f.read()


def test_planted_private_values_are_not_copied(tmp_path, finished_run, leak_scan):
    # A run written before issue 40 (data hash in config.json) with statistics fitted on the
    # training data in its certification entry, a seed and a path.
    run = tmp_path / "old"
    shutil.copytree(finished_run, run, ignore=shutil.ignore_patterns(".lock"))
    rd = rundir.RunDir(str(run))
    config = rd.read_json(rundir.CONFIG_FILE)
    digest = rundir.read_json(os.path.join(rundir.checkpoint_dir(str(run)),
                                           rundir.PRIVATE_STATE_FILE))["data_sha256"]
    config.update(data_sha256=digest, seed=918273645, certification={
        "mechanism": "hgm", "construction_bound": 0.1, "epsilon": 1.0, "delta": 1e-5,
        "r_stats": {"pretrain_epochs": 2, "pretrain_train_accuracy": _PLANTED_STAT}})
    rd.write_json(rundir.CONFIG_FILE, config)
    assert any("data_sha256" in h for h in _scan_everything(
        leak_scan, str(run), [rd.file(rundir.CONFIG_FILE)]))  # the control sees them
    assert any(repr(_PLANTED_STAT) in h for h in _scan_everything(
        leak_scan, str(run), [rd.file(rundir.CONFIG_FILE)]))
    out = tmp_path / "public"
    publish.publish_run(str(run), str(out))
    assert _scan_everything(leak_scan, str(run), leak_scan.all_files(str(out))) == []
    text = open(out / rundir.CONFIG_FILE).read()
    assert "918273645" not in text and "pretrain_epochs" in text


def test_refuses_to_overwrite_and_unfinished_runs(tmp_path, finished_run):
    out = tmp_path / "public"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"^out: .* not empty"):
        publish.publish_run(finished_run, str(out))
    assert os.listdir(out) == ["keep.txt"]
    with pytest.raises(ValueError, match=r"^out: .*inside the run directory"):
        publish.publish_run(finished_run, os.path.join(finished_run, "public"))
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    (stopped / rundir.CONFIG_FILE).write_text("{}")
    with pytest.raises(ValueError, match=r"^model_dir: .* no ledger.json"):
        publish.publish_run(str(stopped), str(tmp_path / "x"))
    assert not os.path.exists(tmp_path / "x")
    assert [n for n in os.listdir(tmp_path) if n.startswith(".tmp")] == []


def test_all_or_nothing_when_a_write_fails(tmp_path, finished_run, monkeypatch):
    calls = []

    def failing(path, blob, mode=rundir.FILE_MODE):
        calls.append(path)
        if len(calls) == 3:
            raise OSError(28, "No space left on device", path)
        with open(path, "wb") as f:
            f.write(blob)

    monkeypatch.setattr(rundir, "atomic_write_bytes", failing)
    with pytest.raises(OSError):
        publish.publish_run(finished_run, str(tmp_path / "public"))
    assert len(calls) == 3 and os.listdir(tmp_path) == []


def test_command_line(tmp_path, finished_run, capsys):
    out = str(tmp_path / "public")
    assert publish_app.main([f"--model_dir={finished_run}", f"--out={out}"]) == 0
    assert "withheld: checkpoints" in capsys.readouterr().out
    assert publish_app.main([f"--model_dir={finished_run}", f"--out={out}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tfdp-publish: error: --out: ")


def test_a_corrupt_result_file_is_named(tmp_path, finished_run, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run, ignore=shutil.ignore_patterns(".lock"))
    (run / rundir.LEDGER_FILE).write_text("{not json")
    out = tmp_path / "public"
    assert publish_app.main([f"--model_dir={run}", f"--out={out}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"tfdp-publish: error: {run / rundir.LEDGER_FILE}: corrupt"), err
    assert not out.exists() and [n for n in os.listdir(tmp_path) if n.startswith(".tmp")] == []
