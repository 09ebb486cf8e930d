"""Interrupted and resumed runs charge each step once (issue 43 item 1, docs/ledger.md).

A run interrupted at several points and resumed each time must end with the ledger and the
weights of the uninterrupted run: the steps replayed after the last checkpoint draw the same
lots and noise (keyed by the run's secret key and the step's position), so they release
nothing new. The fast tests interrupt in-process at a chosen step through tfdp-train's own
resolve/execute path (what a kill leaves: ledger.json charged for the started epoch, no
checkpoint for it); the slow one SIGKILLs `tfdp-train` subprocesses.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tfdp import rundir
from tfdp.apps import train as train_app
from tfdp.train import integrity, loop

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BASE = {"dataset": "sample", "num_train": 100, "num_test": 20, "epochs": 3, "seed": 5,
         "verbose": 0, "batch_size": 25}
_RUNS = {
    "dpsgd": ({"epsilon": 3.0}, {"dpsgd_model": "mlp", "dpsgd_sampling": "poisson"}),
    "secure_sgd": ({"epsilon": 3.0}, {"hgm_model": "small", "hgm_sampling": "shuffle"}),
    "secure_sgd_poisson": ({"epsilon": 3.0, "method": "secure_sgd"},
                           {"hgm_model": "small", "hgm_sampling": "poisson"}),
    "stobatch": ({"epsilon": 2.0, "batch_size": 50},
                 {"stobatch_attack_iters": 1, "stobatch_architecture": "tiny",
                  "stobatch_hidden_units": 8}),
}


class _Killed(BaseException):
    """Stands for a kill at a chosen step (nothing after it runs)."""


def _train(model_dir, method, resume=False):
    overrides, options = _RUNS[method]
    values = dict(_BASE, method=method, model_dir=str(model_dir))
    values.update(overrides)
    if resume:
        values = {"model_dir": str(model_dir), "resume": True, "verbose": 0,
                  "method": values["method"]}
        return train_app.execute(train_app.resolve(values, {}, present={"model_dir",
                                                                        "resume", "verbose",
                                                                        "method"}))
    return train_app.execute(train_app.resolve(values, options))


def _weights(model_dir):
    reader = tf.train.load_checkpoint(
        tf.train.latest_checkpoint(rundir.checkpoint_dir(str(model_dir))))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if not name.startswith(("run_secret", "run_config", "ledger_state",
                                    "_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter"))}


def _ledger(model_dir):
    with open(os.path.join(str(model_dir), rundir.LEDGER_FILE), encoding="utf-8") as f:
        return json.load(f)


def _interrupted_run(tmp_path, monkeypatch, method, kill_steps):
    """Runs `method`, killed when the global step counter reaches each of `kill_steps`."""
    real = loop.Run.run_step
    pending = list(kill_steps)

    def run_step(self, step_fn, batch):
        if pending and int(self.step_var.numpy()) == pending[0]:
            pending.pop(0)
            raise _Killed()
        return real(self, step_fn, batch)

    monkeypatch.setattr(loop.Run, "run_step", run_step)
    model_dir = tmp_path / f"{method}_killed"
    resumed = False
    kills = 0
    while True:
        try:
            result = _train(model_dir, method, resume=resumed)
            break
        except _Killed:
            kills += 1
            resumed = rundir.has_checkpoint(str(model_dir))
            if not resumed:  # killed before the first checkpoint: start again
                for name in os.listdir(model_dir):
                    path = model_dir / name
                    if path.is_dir():
                        shutil.rmtree(path)
                    elif name != ".lock":
                        path.unlink()
    monkeypatch.setattr(loop.Run, "run_step", real)
    assert kills == len(kill_steps)
    return model_dir, result


@pytest.mark.parametrize("method,kill_steps", [
    ("dpsgd", [5, 9]),  # killed in epochs 2 and 3 (4 steps per epoch)
    # DP-SGD with HGM's noise layer (fresh noise every step), fixed-size shuffled batches.
    ("secure_sgd", [5]),
    pytest.param("dpsgd", [1, 5, 6, 9, 11], marks=pytest.mark.slow),
    pytest.param("stobatch", [1, 2], marks=pytest.mark.slow)])
def test_kills_and_resumes_give_the_uninterrupted_ledger_and_weights(tmp_path, monkeypatch,
                                                                     method, kill_steps):
    clean = _train(tmp_path / f"{method}_clean", method)
    killed_dir, killed = _interrupted_run(tmp_path, monkeypatch, method, kill_steps)
    assert killed.steps == clean.steps and killed.epochs_completed == clean.epochs_completed
    assert _ledger(killed_dir) == _ledger(tmp_path / f"{method}_clean")
    a, b = _weights(killed_dir), _weights(tmp_path / f"{method}_clean")
    assert sorted(a) == sorted(b)
    for name in a:
        assert np.array_equal(a[name], b[name]), name


def _kill_at_step(monkeypatch, step):
    """Makes training die (as a kill would) when it reaches `step`; returns the real step."""
    real = loop.Run.run_step

    def run_step(self, step_fn, batch):
        if int(self.step_var.numpy()) == step:
            raise _Killed()
        return real(self, step_fn, batch)

    monkeypatch.setattr(loop.Run, "run_step", run_step)
    return real


def test_the_ledger_between_kill_and_resume_is_never_below_what_ran(tmp_path, monkeypatch):
    """After a kill, ledger.json still charges every step that ran (the started epoch)."""
    _kill_at_step(monkeypatch, 6)
    with pytest.raises(_Killed):
        _train(tmp_path / "k", "dpsgd")
    entry = [e for e in _ledger(tmp_path / "k")["entries"] if e["name"] == "dpsgd"][0]
    assert sum(s["steps"] for s in entry["segments"]) >= 6


@pytest.mark.parametrize("method,change", [
    ("dpsgd", {"batch_size": 20}),  # another lot size: other lots, another mechanism
    # Secure-SGD with Poisson lots traces its step for the first lot's static size, so a
    # resume can differ from the stopped process in the last bit (tfdp.train.base.Method.
    # replays_identically): its replayed steps stay charged.
    pytest.param("secure_sgd_poisson", {}, marks=pytest.mark.slow)])
def test_a_resume_that_does_not_replay_bit_for_bit_charges_again(tmp_path, monkeypatch,
                                                                 capsys, method, change):
    real = _kill_at_step(monkeypatch, 6)
    with pytest.raises(_Killed):
        _train(tmp_path / "d", method)
    monkeypatch.setattr(loop.Run, "run_step", real)
    name = "dpsgd"  # Secure-SGD's per-step entry is DP-SGD's
    charged = sum(s["steps"] for s in [e for e in _ledger(tmp_path / "d")["entries"]
                                       if e["name"] == name][0]["segments"])
    values = {"model_dir": str(tmp_path / "d"), "resume": True, "verbose": 1,
              "method": _RUNS[method][0].get("method", method), **change}
    capsys.readouterr()
    if method == "secure_sgd_poisson":
        # sigma was solved for the budget over the plan: charging the replayed steps again
        # leaves no room for them, so the resume is refused before any work.
        with pytest.raises(ValueError, match=r"^--epsilon: the budget is spent: .* one more "
                                             r"step would bring it to 3\.\d+"):
            train_app.execute(train_app.resolve(values, {}, present=set(values)))
        out = capsys.readouterr().out
        assert re.search(r"resume: the \d+ steps after the checkpoint \S+ are charged again", out)
        assert "do not replay bit for bit" in out
        return
    res = train_app.execute(train_app.resolve(values, {}, present=set(values)))
    out = capsys.readouterr().out
    assert f"the {charged - 4} steps after the checkpoint" in out and "charged again" in out
    segs = [e for e in res.ledger["entries"] if e["name"] == name][0]["segments"]
    assert segs[0]["steps"] == charged  # the stopped process's charge is kept
    assert sum(s["steps"] for s in segs) > res.steps  # and the replayed steps charged again
    assert res.ledger["epsilon"] <= _RUNS[method][0]["epsilon"] * (1 + 1e-9)  # within budget


def _resume_verbose(model_dir):
    values = {"model_dir": str(model_dir), "resume": True, "verbose": 1, "method": "dpsgd"}
    return train_app.execute(train_app.resolve(values, {}, present=set(values)))


def test_a_resume_on_another_platform_charges_the_replayed_steps_again(tmp_path, monkeypatch,
                                                                       capsys):
    """The stopped process's platform (CPU model and features, logical CPUs, TensorFlow
    build, oneDNN switch, threads, accelerators) is in config.json; a resume whose platform
    differs is not known to recompute the replayed steps bit for bit, so it keeps their
    charge and charges its own steps again."""
    real = _kill_at_step(monkeypatch, 6)
    with pytest.raises(_Killed):
        _train(tmp_path / "p", "dpsgd")
    monkeypatch.setattr(loop.Run, "run_step", real)
    config = json.load(open(tmp_path / "p" / rundir.CONFIG_FILE))
    recorded = config[integrity.PLATFORM_KEY]
    assert recorded == integrity.platform_record() and recorded["cpu"] and recorded["tensorflow"]
    charged = sum(s["steps"] for s in [e for e in _ledger(tmp_path / "p")["entries"]
                                       if e["name"] == "dpsgd"][0]["segments"])
    other = dict(recorded, cpu=recorded["cpu"] + " (another model)")
    monkeypatch.setattr(integrity, "platform_record", lambda: other)
    capsys.readouterr()
    res = _resume_verbose(tmp_path / "p")
    out = capsys.readouterr().out
    assert f"the {charged - 4} steps after the checkpoint" in out and "charged again" in out
    assert "another platform: platform.cpu" in out
    segs = [e for e in res.ledger["entries"] if e["name"] == "dpsgd"][0]["segments"]
    assert segs[0]["steps"] == charged and sum(s["steps"] for s in segs) > res.steps
    # The resume's platform is recorded for the next one.
    assert json.load(open(tmp_path / "p" / rundir.CONFIG_FILE))[integrity.PLATFORM_KEY] == other

    # (On the same platform the replayed steps are charged once: the kill-and-resume test
    # above ends with the uninterrupted run's ledger.)


def test_a_stopped_process_without_a_platform_record_counts_as_another_platform():
    """config.json written by an older tfdp names no platform: its replay is not trusted."""
    current = {"method": "dpsgd", integrity.PLATFORM_KEY: integrity.platform_record()}
    assert integrity.replay_differences(current, current) == []
    old = {"method": "dpsgd"}
    assert integrity.replay_differences(old, current) == [
        "the platform that ran them is not recorded (a run from an older tfdp)"]
    other = dict(current, platform=dict(current["platform"], logical_cpus=64))
    assert integrity.replay_differences(other, current) == [
        "another platform: platform.logical_cpus 64 then, "
        f"{current['platform']['logical_cpus']} now"]


def _checkpoint_number(model_dir):
    latest = tf.train.latest_checkpoint(rundir.checkpoint_dir(str(model_dir)))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


@pytest.mark.slow
def test_sigkills_at_random_points_give_the_uninterrupted_ledger_and_weights(tmp_path):
    """tfdp-train on the DP-SGD smoke flags (vectorized clipping), SIGKILLed four times, each
    a random time after the process wrote a new checkpoint (so mid-epoch or just after a
    checkpoint), and resumed: the ledger and weights of the uninterrupted run."""
    env = dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    base = [sys.executable, "-m", "tfdp.apps.train",
            "--flagfile=" + os.path.join(_ROOT, "flags/baselines/dpsgd_smoke.flags"),
            "--seed=5", "--verbose=0", "--epochs=6"]
    clean = tmp_path / "clean"
    subprocess.run(base + [f"--model_dir={clean}"], cwd=_ROOT, env=env, check=True,
                   capture_output=True, timeout=1800)
    killed = tmp_path / "killed"
    rng = np.random.default_rng(0)
    kills = 0
    for _ in range(4):
        started = rundir.has_checkpoint(str(killed))
        args = base + [f"--model_dir={killed}"] + (["--resume"] if started else [])
        seen = _checkpoint_number(killed)
        proc = subprocess.Popen(args, cwd=_ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        while proc.poll() is None and _checkpoint_number(killed) <= seen:
            time.sleep(0.2)
        if proc.poll() is not None:
            break  # finished before a new checkpoint
        time.sleep(float(rng.uniform(0.0, 3.0)))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.communicate()
        if os.path.exists(killed / rundir.METRICS_FILE):
            break
    if not os.path.exists(killed / rundir.METRICS_FILE):
        subprocess.run(base + [f"--model_dir={killed}", "--resume"], cwd=_ROOT, env=env,
                       check=True, capture_output=True, timeout=1800)
    assert kills >= 2
    assert _ledger(killed) == _ledger(clean)
    a, b = _weights(killed), _weights(clean)
    assert sorted(a) == sorted(b)
    for name in a:
        assert np.array_equal(a[name], b[name]), name
