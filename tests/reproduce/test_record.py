"""tfdp.reproduce.record: one tfdp-train run as a result file, without private statistics."""

import json
import os

import pytest

from tfdp.reproduce import record

_ARGS = ["--flagfile=flags/methods/nonprivate.flags", "--epochs=1", "--num_train=300",
         "--num_test=50", "--seed=4"]


def test_record_writes_the_public_result(tmp_path):
    out = tmp_path / "r.json"
    rec = record.record("tiny", _ARGS, str(out))
    on_disk = json.loads(out.read_text())
    assert on_disk == rec
    assert rec["exit_code"] == 0 and rec["row"] == "tiny"
    assert rec["command"].startswith("tfdp-train --flagfile=flags/methods/nonprivate.flags")
    assert "--model_dir=RUN_DIR" in rec["command"]
    assert set(rec["metrics"]) <= set(record.PUBLIC_METRICS)
    assert 0.0 <= rec["metrics"]["test_accuracy"] <= 1.0
    assert rec["ledger"]["epsilon"] == "inf"
    text = out.read_text()
    assert "train_accuracy" not in text and "train_loss" not in text
    assert rec["versions"].get("tfdp")


def test_a_failed_run_leaves_the_earlier_file(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("earlier")
    with pytest.raises(RuntimeError, match="exit code"):
        record.record("tiny", _ARGS + ["--epochs=-1"], str(out))
    assert out.read_text() == "earlier"
    assert not os.path.exists(str(out) + ".tmp")


@pytest.mark.parametrize("row,args,match", [
    ("a/b", _ARGS, "--row"), ("ok", _ARGS + ["--model_dir=x"], "--model_dir"),
    ("ok", _ARGS + ["--verbose=1"], "--verbose")])
def test_bad_arguments_are_named(tmp_path, row, args, match):
    with pytest.raises(ValueError, match=match):
        record.record(row, args, str(tmp_path / "r.json"))


def test_cli_needs_the_separator(capsys):
    assert record.main(["--row=x", "--output=y"]) == 2
    assert "--" in capsys.readouterr().err
