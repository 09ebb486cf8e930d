"""tfdp-train's progress off a terminal, and tfdp-runs over real and hand-written runs."""

import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys

import pytest

from tfdp.apps import runs
from tfdp.train import report

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _py(*args, cwd=_ROOT):
    env = dict(os.environ, PYTHONPATH=_ROOT)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900, check=False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny DP-SGD run through tfdp-train, output to a pipe (not a terminal)."""
    root = tmp_path_factory.mktemp("runs")
    out = _py("-m", "tfdp.apps.train", "--method=dpsgd", "--num_train=256", "--num_test=100",
              "--epochs=2", "--batch_size=64", "--seed=3", f"--model_dir={root / 'dpsgd'}")
    assert out.returncode == 0, out.stderr[-3000:]
    return root, out


def test_progress_off_a_terminal_is_one_line_per_epoch(trained):
    _, out = trained
    lines = out.stdout.splitlines()
    epoch_lines = [line for line in lines if line.startswith("epoch ")]
    assert [line.split()[1] for line in epoch_lines] == ["1/2", "2/2"]
    first = epoch_lines[0]
    for part in ("step 4", "test acc ", "eps ", "of 2", "/epoch", "ETA "):
        assert part in first, (part, first)
    assert "\x08" not in out.stdout and "\r" not in out.stdout  # no progress bar
    assert all(len(line) < 200 for line in lines)
    assert any("setup before the first step" in line for line in lines)
    # TensorFlow's start-up notices are held back
    assert "oneDNN" not in out.stderr and "absl::InitializeLog" not in out.stderr
    # the console rounds epsilon up; ledger.json keeps full precision
    ledger_line = next(line for line in lines if "total (sound accounting)" in line)
    shown = float(ledger_line.split("epsilon=")[1].split()[0])
    with open(os.path.join(trained[0], "dpsgd", "ledger.json"), encoding="utf-8") as f:
        full = json.load(f)["epsilon"]
    assert shown >= full and len(str(shown)) <= 6 and shown - full < 1e-3 * full


def test_round_up_never_understates():
    for x in (1.999998890499241, 2.00004, 0.12341, 7.0, 1e-5, 123456.7, 0.000123449):
        assert float(report.round_up(x)) >= x
        assert float(report.round_up(x)) <= x * (1 + 1e-3)
    assert report.round_up(1.999998890499241) == "2.0" and report.round_up(2.5) == "2.5"
    assert report.round_up(None) == "none" and report.round_up(math.inf) == "inf"


def _write(path, name, obj):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name), "w", encoding="utf-8") as f:
        json.dump(obj, f)


def test_runs_table_three_runs(trained, tmp_path):
    root, _ = trained
    base = tmp_path / "runs"
    shutil.copytree(root / "dpsgd", base / "dpsgd")
    # A non-private run as newer runs write it ("inf") and a legacy one (0.0, no entries).
    for name, eps in (("nonprivate", "inf"), ("legacy", 0.0)):
        run = base / name
        _write(run, "config.json", {"method": "nonprivate", "dataset": "sample", "epochs": 1,
                                    "num_test": 100})
        _write(run, "ledger.json", {"epsilon": eps, "claimed_epsilon": eps, "delta": 0.0,
                                    "entries": []})
        _write(run, "metrics.json", {"test_accuracy": 0.9, "epochs_completed": 1})
        (run / "model.keras").write_bytes(b"")
    # A stopped run: a checkpoint, no metrics.
    stopped = base / "stopped"
    _write(stopped, "config.json", {"method": "stobatch", "dataset": "mnist", "epochs": 5})
    _write(stopped, "ledger.json", {"epsilon": 0.51, "claimed_epsilon": 0.5, "delta": 1e-5,
                                    "entries": [{"name": "x"}]})
    _write(stopped / "checkpoints", "segments.json", {"segments": [{"end_epoch": 2}]})
    (stopped / "checkpoints" / "checkpoint").write_text("")
    _write(base / "dpsgd", "evaluation.json", {
        "num_examples": 100, "clean_accuracy": 0.5,
        "attacks": {"fgsm": {"0.1": {"accuracy": 0.4, "certified_accuracy_on_attacked_inputs": None},
                             "0.2": {"accuracy": 0.3, "certified_accuracy_on_attacked_inputs": 0.1}},
                    "madry": {"0.2": {"accuracy": 0.2, "certified_accuracy_on_attacked_inputs": 0.1}}},
        # Clean certified accuracy per radius (issue 40: the column shows this, not the
        # certified accuracy on attacked inputs at the largest size).
        "clean_certified_accuracy": {"0.1": {"value": 0.37, "n": 100},
                                     "0.2": {"value": 0.25, "n": 100}}})

    out = _py("-m", "tfdp.apps.runs", str(base), "--format=csv")
    assert out.returncode == 0, out.stderr
    rows = {r["run"]: r for r in csv.DictReader(io.StringIO(out.stdout))}
    assert set(rows) == {"dpsgd", "nonprivate", "legacy", "stopped"}
    with open(base / "dpsgd" / "ledger.json", encoding="utf-8") as f:
        ledger = json.load(f)
    assert float(rows["dpsgd"]["sound_epsilon"]) == ledger["epsilon"]
    assert float(rows["dpsgd"]["claimed_epsilon"]) == ledger["claimed_epsilon"]
    assert rows["dpsgd"]["status"] == "finished"
    assert rows["dpsgd"]["attack"] == "madry@0.2"  # the worst attack at the largest size
    assert float(rows["dpsgd"]["attacked_accuracy"]) == 0.2
    low, high = float(rows["dpsgd"]["attacked_ci_low"]), float(rows["dpsgd"]["attacked_ci_high"])
    assert low < 0.2 < high and rows["dpsgd"]["attacked_n"] == "100"
    assert float(rows["dpsgd"]["certified_accuracy"]) == 0.37  # clean, smallest radius
    assert rows["dpsgd"]["certified_radius"] == "0.1" and rows["dpsgd"]["certified_n"] == "100"
    at = _py("-m", "tfdp.apps.runs", str(base), "--format=csv", "--radius=0.2")
    rows_at = {r["run"]: r for r in csv.DictReader(io.StringIO(at.stdout))}
    assert float(rows_at["dpsgd"]["certified_accuracy"]) == 0.25
    assert rows_at["dpsgd"]["certified_radius"] == "0.2"
    assert rows["nonprivate"]["sound_epsilon"] == "inf" == rows["legacy"]["sound_epsilon"]
    assert rows["stopped"]["status"] == "stopped" and rows["stopped"]["epochs"] == "2/5"
    assert float(rows["stopped"]["sound_epsilon"]) == 0.51
    assert float(rows["stopped"]["claimed_epsilon"]) == 0.5

    table = _py("-m", "tfdp.apps.runs", str(base))
    assert table.returncode == 0, table.stderr
    body = [line for line in table.stdout.splitlines()[2:] if not line.startswith("(")]
    assert len(body) == 4 and "claimed eps" in table.stdout and "sound eps" in table.stdout
    assert "clean certified acc @r (smallest evaluated)" in table.stdout.splitlines()[0]
    assert "0.370 [0.28, 0.47] @0.1" in table.stdout
    named = _py("-m", "tfdp.apps.runs", str(base), "--radius=0.2")
    assert "clean certified acc @r=0.2" in named.stdout.splitlines()[0]
    assert "0.250 [" in named.stdout and "@0.2" in named.stdout
    md = _py("-m", "tfdp.apps.runs", str(base), "--format=markdown",
             f"--plot={tmp_path / 'plot.png'}")
    assert md.returncode == 0, md.stderr
    assert md.stdout.count("\n| ") == 4 and os.path.getsize(tmp_path / "plot.png") > 1000


def test_runs_bad_input(tmp_path):
    out = _py("-m", "tfdp.apps.runs", str(tmp_path / "missing"))
    assert out.returncode == 2 and "DIR" in out.stderr
    out = _py("-m", "tfdp.apps.runs", str(tmp_path), "--radius=-1")
    assert out.returncode == 2 and "--radius" in out.stderr
    out = _py("-m", "tfdp.apps.runs", str(tmp_path), "--plot=x.txt")
    assert out.returncode == 2 and "--plot" in out.stderr
    assert not os.path.exists(tmp_path / "x.txt")


def test_epsilon_value():
    assert runs.epsilon_value("inf", False) == math.inf
    assert runs.epsilon_value(None, False) == math.inf
    assert runs.epsilon_value(0.0, False) == math.inf
    assert runs.epsilon_value(0.0, True) == 0.0
    assert runs.epsilon_value(1.5, True) == 1.5


def _event_tags(logdir):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tensorflow.core.util import event_pb2  # pylint: disable=import-outside-toplevel
    tags = {}
    for name in os.listdir(logdir):
        for record in tf.data.TFRecordDataset(os.path.join(logdir, name)):
            event = event_pb2.Event.FromString(record.numpy())
            for value in event.summary.value:
                tags[value.tag] = tf.make_ndarray(value.tensor).item()
    return tags


def test_epoch_and_evaluation_metrics_in_tensorboard(trained, tmp_path):
    root, _ = trained
    run = tmp_path / "run"
    shutil.copytree(root / "dpsgd", run)
    tags = _event_tags(run / "logs")
    assert "test/accuracy_per_epoch" in tags and "privacy/epsilon_spent" in tags
    out = _py("-m", "tfdp.apps.evaluate", f"--model_dir={run}", "--attacks=fgsm",
              "--attack_sizes=0.1", "--num_examples=50")
    assert out.returncode == 0, out.stderr[-3000:]
    with open(run / "evaluation.json", encoding="utf-8") as f:
        evaluation = json.load(f)
    tags = _event_tags(run / "logs")
    assert tags["eval/clean_accuracy"] == pytest.approx(evaluation["clean_accuracy"])
    assert tags["eval/fgsm@0.1/accuracy"] == pytest.approx(
        evaluation["attacks"]["fgsm"]["0.1"]["accuracy"])
    assert "oneDNN" not in out.stderr


def test_config_records_the_resolved_data_dir(monkeypatch, tmp_path):
    from tfdp.apps import train as train_app  # pylint: disable=import-outside-toplevel
    monkeypatch.setenv("TFDP_DATA_DIR", str(tmp_path))
    assert train_app.resolved_data_dir("mnist", None) == str(tmp_path)
    assert train_app.data_dir_source("mnist", None) == "TFDP_DATA_DIR"
    assert train_app.resolved_data_dir("mnist", "/elsewhere") == "/elsewhere"
    assert train_app.data_dir_source("mnist", "/elsewhere") == "flag"
    assert train_app.resolved_data_dir("sample", None) is None


def test_runs_status_running_while_the_lock_is_held(tmp_path):
    import fcntl  # pylint: disable=import-outside-toplevel
    run = tmp_path / "live"
    _write(run, "config.json", {"method": "dpsgd", "dataset": "sample", "epochs": 3})
    _write(run, "ledger.json", {"epsilon": 1.0, "claimed_epsilon": 1.0, "delta": 1e-5,
                                "entries": [{"name": "dpsgd"}]})
    assert runs.summarize(str(run)).status == "incomplete"
    with open(run / ".lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        # another process sees the lock (flock locks are per open file description)
        out = _py("-c", "from tfdp.apps import runs; import sys; "
                        "print(runs.summarize(sys.argv[1]).status)", str(run))
        assert out.stdout.strip() == "running", out.stderr
    assert runs.summarize(str(run)).status == "incomplete"  # released: not running


@pytest.mark.slow
def test_runs_table_of_three_real_tiny_runs(tmp_path):
    """Three tiny runs through tfdp-train (finished DP-SGD, non-private, stopped DP-SGD)."""
    tiny = ["--num_train=512", "--num_test=200", "--batch_size=128", "--seed=1"]
    for name, extra in (("dpsgd", ["--method=dpsgd", "--epochs=1"]),
                        ("nonprivate", ["--method=nonprivate", "--epochs=1"]),
                        ("stopped", ["--method=dpsgd", "--epochs=3", "--stop_after_epochs=1"])):
        out = _py("-m", "tfdp.apps.train", *extra, *tiny, f"--model_dir={tmp_path / name}")
        assert out.returncode == 0, out.stderr[-3000:]
    out = _py("-m", "tfdp.apps.runs", str(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    body = {line.split()[0]: line.split() for line in lines[2:] if not line.startswith("(")}
    assert set(body) == {"dpsgd", "nonprivate", "stopped"}
    assert body["nonprivate"][3:5] == ["inf", "inf"]  # claimed and sound eps
    for name in ("dpsgd", "stopped"):
        with open(tmp_path / name / "ledger.json", encoding="utf-8") as f:
            ledger = json.load(f)
        assert body[name][3] == report.round_up(ledger["claimed_epsilon"])
        assert body[name][4] == report.round_up(ledger["epsilon"])
    assert body["stopped"][-1] == "stopped" and body["dpsgd"][-1] == "finished"
