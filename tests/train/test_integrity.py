"""Run integrity: resume accounts what ran or refuses, locks, overwrite, errors, checkpoints."""

import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdp import accounting, rundir
from tfdp.apps import train as train_app
from tfdp.train import dpsgd, loop, nonprivate
from tfdp.papers.adlm import method as adlm
from tfdp.train.base import Method, TrainConfig

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SHAPE = (6, 6, 1)


@pytest.fixture(scope="module")
def tiny_data():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, size=(136,) + _SHAPE).astype(np.float32)
    y = (np.arange(136) % 3).astype(np.int64)
    return loop.Data(x[:96], y[:96], x[96:], y[96:], _SHAPE, 3)


def _cfg(tmp_path, name, method="dpsgd", **kw):
    base = dict(method=method, dataset="synthetic", model_dir=str(tmp_path / name), epochs=2,
                batch_size=16, learning_rate=0.05, seed=7, delta=1e-5,
                options={"dpsgd_noise_multiplier": 1.1, "dpsgd_model": "mlp",
                         "dpsgd_sampling": "poisson"})
    base.update(kw)
    return TrainConfig(**base)


# ------------------------------------------------------------------ item 1: resume, DP-SGD


def test_dpsgd_resume_with_a_new_batch_size_accounts_every_executed_segment(tmp_path,
                                                                            tiny_data):
    """Regression: a resume with --batch_size/--epochs changed kept the first ledger."""
    loop.train(dpsgd.DPSGD(_cfg(tmp_path, "r")), tiny_data, stop_after_epochs=1, verbose=0)
    first = json.load(open(tmp_path / "r" / rundir.LEDGER_FILE))
    res = loop.train(dpsgd.DPSGD(_cfg(tmp_path, "r", batch_size=48, epochs=3)), tiny_data,
                     resume=True, verbose=0)
    # What ran: 6 steps at q = 16/96, then epochs 2 and 3 with 2 steps each at q = 48/96.
    assert res.steps == 6 + 4
    segs = res.ledger["entries"][0]["segments"]
    assert [(s["start_step"], s["steps"], s["batch_size"], s["passes"]) for s in segs] == [
        (0, 6, 16, 1), (6, 4, 48, 2)]
    executed = accounting.segments_epsilon(segs, delta=1e-5, sampling="poisson")
    assert res.ledger["epsilon"] == pytest.approx(executed, rel=1e-12)
    # Before the fix the ledger kept the first segment's (planned) value.
    planned = accounting.dpsgd_epsilon(num_examples=96, batch_size=16, noise_multiplier=1.1,
                                       steps=12, delta=1e-5)
    assert res.ledger["epsilon"] > planned > first["epsilon"]
    assert json.load(open(tmp_path / "r" / rundir.LEDGER_FILE)) == res.ledger
    config = json.load(open(tmp_path / "r" / rundir.CONFIG_FILE))
    assert config["batch_size"] == 48 and config["resumes"][0]["batch_size"] == 48
    # Flags that change the mechanism or budget are refused, naming both values.
    with pytest.raises(ValueError, match=r"--epsilon: the run was started with None, the "
                                         r"resume asks for 5\.0"):
        loop.train(dpsgd.DPSGD(_cfg(tmp_path, "r", epochs=4, epsilon=5.0)), tiny_data,
                   resume=True, verbose=0)
    opts = dict(_cfg(tmp_path, "r").options, dpsgd_noise_multiplier=0.5)
    with pytest.raises(ValueError, match=r"--dpsgd_noise_multiplier: the run was started "
                                         r"with 1\.1, the resume asks for 0\.5"):
        loop.train(dpsgd.DPSGD(_cfg(tmp_path, "r", epochs=4, options=opts)), tiny_data,
                   resume=True, verbose=0)
    # Different training data are refused too.
    other = loop.Data(tiny_data.x_train[::-1].copy(), tiny_data.y_train, tiny_data.x_test,
                      tiny_data.y_test, _SHAPE, 3)
    with pytest.raises(ValueError, match="training data"):
        loop.train(dpsgd.DPSGD(_cfg(tmp_path, "r", epochs=4)), other, resume=True, verbose=0)
    # A finished run is not resumed (metrics.json would be overwritten with nulls).
    metrics = json.load(open(tmp_path / "r" / rundir.METRICS_FILE))
    with pytest.raises(ValueError, match="finished"):
        loop.train(dpsgd.DPSGD(_cfg(tmp_path, "r", batch_size=48, epochs=3)), tiny_data,
                   resume=True, verbose=0)
    assert json.load(open(tmp_path / "r" / rundir.METRICS_FILE)) == metrics
    # Both segments' metrics are kept, with the total time.
    assert [(s["start_epoch"], s["end_epoch"]) for s in metrics["segments"]] == [(0, 1), (1, 3)]
    assert metrics["seconds"] == pytest.approx(sum(s["seconds"] for s in metrics["segments"]))


def test_dpsgd_shuffle_run_counts_the_passes_that_ran(tmp_path, tiny_data):
    """Regression: 3 epochs of floor(96/40) = 2 steps were counted as 2 passes."""
    opts = {"dpsgd_noise_multiplier": 2.0, "dpsgd_model": "mlp", "dpsgd_sampling": "shuffle"}
    res = loop.train(dpsgd.DPSGD(_cfg(tmp_path, "s", batch_size=40, epochs=3, options=opts)),
                     tiny_data, verbose=0)
    assert res.steps == 6
    entry = res.ledger["entries"][0]
    assert entry["segments"][0]["passes"] == 3 and entry["relation"] == "replace_one"
    three_passes = accounting.dpsgd_epsilon(num_examples=40, batch_size=40,
                                            noise_multiplier=2.0, steps=3, delta=1e-5,
                                            sampling="shuffle_no_amplification")
    assert res.ledger["epsilon"] == pytest.approx(three_passes, rel=1e-12)
    assert "replace-one" in entry["note"] and res.ledger["relation"] == "replace_one"


# ------------------------------------------------------------------ item 1: resume, AdLM


def _adlm_cfg(tmp_path, name, **options):
    opts = {"adlm_aux_model": "mlp", "adlm_aux_epochs": 1, "adlm_bound_mode": "bn_clip",
            "adlm_delta_h0": 100.0, "adlm_input_noise": "per_example_fixed",
            "adlm_fm_mode": "per_example_label_only"}
    opts.update(options)
    return TrainConfig(method="adlm", dataset="synthetic", model_dir=str(tmp_path / name),
                       epochs=2, batch_size=16, learning_rate=0.01, seed=3, epsilon=1.0,
                       value_range=(0.0, 1.0), options=opts)


@pytest.fixture(scope="module")
def adlm_data():
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, size=(140, 8, 8, 1)).astype(np.float32)
    y = (np.arange(140) % 10).astype(np.int64)
    return loop.Data(x[:100], y[:100], x[100:], y[100:], (8, 8, 1), 10)


def test_adlm_resume_with_other_noise_modes_is_refused(tmp_path, adlm_data):
    """Regression: a per-example run resumed with code-release noise kept finite entries."""
    loop.train(adlm.AdLM(_adlm_cfg(tmp_path, "a")), adlm_data, stop_after_epochs=1, verbose=0)
    before = open(tmp_path / "a" / rundir.LEDGER_FILE).read()
    changed = _adlm_cfg(tmp_path, "a", adlm_input_noise="batch_shared_per_step",
                        adlm_fm_mode="ref_code")
    with pytest.raises(ValueError) as err:
        loop.train(adlm.AdLM(changed), adlm_data, resume=True, verbose=0)
    msg = str(err.value)
    assert ("--adlm_input_noise: the run was started with 'per_example_fixed', the resume asks "
            "for 'batch_shared_per_step'") in msg
    assert "--adlm_fm_mode: the run was started with 'per_example_label_only'" in msg
    assert open(tmp_path / "a" / rundir.LEDGER_FILE).read() == before
    res = loop.train(adlm.AdLM(_adlm_cfg(tmp_path, "a")), adlm_data, resume=True, verbose=0)
    assert res.epochs_completed == 2


def test_adlm_public_split_has_a_finite_sound_epsilon(tmp_path, adlm_data):
    """docs/ledger.md: the auxiliary model on a held-out public split makes eps1 sound."""
    res = loop.train(adlm.AdLM(_adlm_cfg(tmp_path, "p", adlm_aux_data="public_split",
                                         adlm_aux_public_size=20)), adlm_data, verbose=0)
    entries = {e["name"]: e for e in res.ledger["entries"]}
    eps1 = entries["adlm_eps1_relevance"]
    assert eps1["claimed_epsilon"] is None and eps1["epsilon"] == pytest.approx(0.25)
    assert np.isfinite(res.ledger["epsilon"]) and all(
        np.isfinite(e["epsilon"]) for e in entries.values())
    config = json.load(open(tmp_path / "p" / rundir.CONFIG_FILE))
    assert config["num_public"] == 20 and config["num_train"] == 80
    # The paper's default (auxiliary model on D) has no useful sound eps1: eps1 * |D| / 2.
    res2 = loop.train(adlm.AdLM(_adlm_cfg(tmp_path, "q")), adlm_data, verbose=0)
    e2 = {e["name"]: e for e in res2.ledger["entries"]}["adlm_eps1_relevance"]
    assert e2["epsilon"] == pytest.approx(0.25 * 100 / 2) and e2["claimed_epsilon"] == 0.25
    with pytest.raises(ValueError, match="--adlm_aux_public_size"):
        adlm.AdLM(_adlm_cfg(tmp_path, "r", adlm_aux_public_size=5)).validate()


# ------------------------------------------------------------------ checkpointed objects


class _TwoModels(Method):
    """Test method with two Keras models and two optimizers, built by its own `build`."""

    name = "two_models_test"

    def build(self):
        shape, classes = self.data_spec.input_shape, self.data_spec.num_classes
        inputs = keras.Input(shape)
        self.model = keras.Model(inputs, keras.layers.Dense(classes)(keras.layers.Flatten()(
            inputs)))
        self.optimizer = self.make_optimizer()
        self.optimizer.build(self.model.trainable_variables)
        inp2 = keras.Input(shape)
        self.second = keras.Model(inp2, keras.layers.Dense(4)(keras.layers.Flatten()(inp2)))
        self.second_opt = keras.optimizers.Adam(0.01)
        self.second_opt.build(self.second.trainable_variables)
        return {"model": self.model, "optimizer": self.optimizer, "second": self.second,
                "second_opt": self.second_opt}

    def train_step(self, ctx, x, y):
        model, global_batch_size = self.model, ctx.global_batch_size
        with tf.GradientTape(persistent=True) as tape:
            loss = tf.nn.compute_average_loss(
                nonprivate.per_example_cross_entropy(y, model(x, training=True)),
                global_batch_size=global_batch_size)
            loss2 = tf.reduce_sum(tf.square(self.second(x, training=True) - 1.0)) / float(
                global_batch_size)
        self.optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                           model.trainable_variables))
        self.second_opt.apply_gradients(zip(tape.gradient(loss2, self.second.trainable_variables),
                                            self.second.trainable_variables))
        return {"loss": loss}


def test_second_model_and_optimizer_are_checkpointed_and_restored(tmp_path, tiny_data):
    def cfg(name):
        return _cfg(tmp_path, name, method="two_models_test", epochs=3, options={})

    full_m = _TwoModels(cfg("full"))
    full = loop.train(full_m, tiny_data, optimizer="adam", verbose=0)
    cut_m = _TwoModels(cfg("cut"))
    loop.train(cut_m, tiny_data, optimizer="adam", stop_after_epochs=1, verbose=0)
    assert int(cut_m.second_opt.iterations.numpy()) == 6
    resumed_m = _TwoModels(cfg("cut"))
    resumed = loop.train(resumed_m, tiny_data, optimizer="adam", resume=True, verbose=0)
    for a, b in zip(full.model.get_weights(), resumed.model.get_weights()):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(full_m.second.get_weights(), resumed_m.second.get_weights()):
        np.testing.assert_array_equal(a, b)
    # Both optimizers' slot variables (and iteration counts), bit for bit.
    assert int(resumed_m.second_opt.iterations.numpy()) == 18
    for a, b in zip(full_m.second_opt.variables, resumed_m.second_opt.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert len(full_m.second_opt.variables) > 3  # momentum and velocity slots exist


class _Untrackable(_TwoModels):
    name = "untrackable_test"

    def build(self):
        return {**super().build(), "state": np.zeros(3)}


def test_untrackable_build_object_is_an_error_at_start(tmp_path, tiny_data):
    with pytest.raises(ValueError, match="build: _Untrackable.*'state'.*ndarray"):
        loop.train(_Untrackable(_cfg(tmp_path, "u", method="u", options={})), tiny_data,
                   verbose=0)
    assert not os.path.exists(tmp_path / "u" / rundir.CHECKPOINT_DIR)


class _UntrackableExtra(nonprivate.NonPrivate):
    name = "untrackable_extra_test"

    def checkpoint_objects(self):
        return {"state": np.zeros(3)}


def test_untrackable_checkpoint_object_is_an_error_at_start(tmp_path, tiny_data):
    with pytest.raises(ValueError, match="checkpoint_objects.*'state'.*ndarray"):
        loop.train(_UntrackableExtra(_cfg(tmp_path, "v", method="v", options={})), tiny_data,
                   verbose=0)


def test_build_may_not_take_the_run_state_names(tmp_path, tiny_data):
    class Clash(_TwoModels):
        def build(self):
            return {**super().build(), "step": tf.Variable(0)}

    with pytest.raises(ValueError, match="build: Clash.*'step'"):
        loop.train(Clash(_cfg(tmp_path, "w", method="w", options={})), tiny_data, verbose=0)


# ------------------------------------------------------------------ run directory rules


def test_overwrite_only_for_a_run_without_checkpoint(tmp_path, tiny_data):
    run = tmp_path / "killed"
    run.mkdir()
    (run / rundir.CONFIG_FILE).write_text("{}")  # a run killed before its first checkpoint
    cfg = _cfg(tmp_path, "killed", method="nonprivate", epochs=1,
               options={"nonprivate_model": "mlp"})
    with pytest.raises(ValueError, match="--overwrite|overwrite"):
        loop.train(nonprivate.NonPrivate(cfg), tiny_data, verbose=0)
    with pytest.raises(ValueError, match="no checkpoint.*overwrite"):
        loop.train(nonprivate.NonPrivate(cfg), tiny_data, resume=True, verbose=0)
    res = loop.train(nonprivate.NonPrivate(cfg), tiny_data, overwrite=True, verbose=0)
    assert res.epochs_completed == 1
    with pytest.raises(ValueError, match="overwrite.*checkpoint"):
        loop.train(nonprivate.NonPrivate(cfg), tiny_data, overwrite=True, verbose=0)


def test_bad_inputs_are_errors_before_work(tmp_path, tiny_data, monkeypatch):
    cfg = _cfg(tmp_path, "x", method="nonprivate", options={"nonprivate_model": "mlp"})
    bad = loop.Data(tiny_data.x_train, tiny_data.y_train, tiny_data.x_test[:, :5],
                    tiny_data.y_test, _SHAPE, 3)
    with pytest.raises(ValueError, match="same shape"):
        loop.train(nonprivate.NonPrivate(cfg), bad, verbose=0)
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        loop.check_run_dir(str(tmp_path / "file"), resume=False, flag_prefix="--")
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    with pytest.raises(ValueError, match="--model_dir: .* is not writable"):
        train_app.resolve({"method": "nonprivate", "model_dir": str(tmp_path / "ro" / "r")})
    monkeypatch.undo()
    with pytest.raises(ValueError, match="--num_train: 10 examples are fewer than one batch"):
        train_app.resolve({"method": "nonprivate", "model_dir": str(tmp_path / "n"),
                           "num_train": 10, "batch_size": 32})
    assert not os.path.exists(tmp_path / "x") and not os.path.exists(tmp_path / "n")


# ------------------------------------------------------------------ command line


def _cli(*args, env_extra=None):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=_ROOT, PYTHONUNBUFFERED="1")
    env.update(env_extra or {})
    return subprocess.Popen([sys.executable, "-m", "tfdp.apps.train", *args], cwd=_ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


_SMALL = ("--method=nonprivate", "--dataset=sample", "--num_train=256", "--num_test=100",
          "--epochs=1", "--batch_size=32", "--verbose=0")


def test_two_trainings_started_together_on_one_directory(tmp_path):
    run = tmp_path / "shared"
    procs = [_cli(*_SMALL, f"--learning_rate={s}", f"--model_dir={run}") for s in (0.01, 0.02)]
    outs = [p.communicate(timeout=600) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 1], (codes, [o[1][-2000:] for o in outs])
    loser = outs[codes.index(1)][1]
    assert "tfdp-train: error: --model_dir" in loser or "tfdp-train: error: model_dir" in loser
    assert "in use by process" in loser or "already exists" in loser
    assert "Traceback" not in loser
    winner = (0.01, 0.02)[codes.index(0)]
    config = json.load(open(run / rundir.CONFIG_FILE))
    assert config["learning_rate"] == winner and config["flags"]["learning_rate"] == winner
    assert f"--learning_rate={winner}" in (run / rundir.FLAGS_FILE).read_text()
    assert json.load(open(run / rundir.METRICS_FILE))["epochs_completed"] == 1
    assert sorted(os.listdir(run / rundir.CHECKPOINT_DIR)).count("checkpoint") == 1


@pytest.mark.slow  # several subprocesses of the command line
def test_cli_resume_reads_the_run_config_and_refuses_conflicts(tmp_path):
    run = tmp_path / "r"
    p = _cli("--flagfile=flags/baselines/dpsgd_smoke.flags", f"--model_dir={run}", "--seed=2",
             "--num_train=640", "--num_test=100", "--stop_after_epochs=1", "--verbose=0")
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-2000:]
    assert "--model_dir" not in (run / rundir.FLAGS_FILE).read_text().replace(
        "--model_dir=<", "")
    # Mechanism flag changed on resume: refused, naming the flag and both values.
    p = _cli("--resume", f"--model_dir={run}", "--dpsgd_l2_clip=3.0")
    out, err = p.communicate(timeout=600)
    assert p.returncode == 1 and "--dpsgd_l2_clip: the run was started with 1.0" in err
    # Resume without the flagfile: the run's own method and settings (not the default AdLM).
    p = _cli("--resume", f"--model_dir={run}", "--verbose=0")
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-2000:]
    metrics = json.load(open(run / rundir.METRICS_FILE))
    assert metrics["epochs_completed"] == 2
    assert metrics[loop.NONPRIVATE_STATS_KEY]["privatized"] is False
    ledger = json.load(open(run / rundir.LEDGER_FILE))
    assert [s["steps"] for s in ledger["entries"][0]["segments"]] == [5, 5]
    # A copy of the run is resumed in the copy, never in the original.
    import shutil  # pylint: disable=import-outside-toplevel
    shutil.copytree(run, tmp_path / "copy")
    before = {n: os.stat(run / n).st_mtime_ns for n in os.listdir(run)}
    p = _cli(f"--flagfile={tmp_path / 'copy' / rundir.FLAGS_FILE}", "--resume",
             f"--model_dir={tmp_path / 'copy'}", "--epochs=3", "--verbose=0")
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-2000:]
    assert {n: os.stat(run / n).st_mtime_ns for n in os.listdir(run)} == before
    copy_metrics = json.load(open(tmp_path / "copy" / rundir.METRICS_FILE))
    # sigma was solved for 2 epochs; --epochs=3 asks for a third: it runs and is charged
    # (issue 22: never exit 0 with nothing run).
    assert not copy_metrics["stopped_early"] and copy_metrics["epochs_completed"] == 3
    assert json.load(open(tmp_path / "copy" / rundir.CONFIG_FILE))["resumes"][-1]["epochs"] == 3
    grown = json.load(open(tmp_path / "copy" / rundir.LEDGER_FILE))
    assert [s["steps"] for s in grown["entries"][0]["segments"]] == [5, 5, 5]
    assert grown["epsilon"] > ledger["epsilon"]
    # Again with --epochs=3: nothing to run, refused in one line, nothing written.
    before = {n: os.stat(tmp_path / "copy" / n).st_mtime_ns
              for n in os.listdir(tmp_path / "copy")}
    p = _cli("--resume", f"--model_dir={tmp_path / 'copy'}", "--epochs=3", "--verbose=0")
    out, err = p.communicate(timeout=600)
    assert p.returncode == 1 and "--epochs" in err and "Traceback" not in err
    assert {n: os.stat(tmp_path / "copy" / n).st_mtime_ns
            for n in os.listdir(tmp_path / "copy")} == before


@pytest.mark.slow  # several subprocesses of the command line
def test_cli_ctrl_c_is_a_one_line_message_with_exit_130(tmp_path):
    run = tmp_path / "int"
    p = _cli("--method=nonprivate", "--dataset=sample", "--epochs=200", "--batch_size=16",
             f"--model_dir={run}", "--seed=1", "--verbose=0")
    deadline = time.time() + 300
    while not (run / rundir.LEDGER_FILE).exists() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 130, err[-2000:]
    assert "tfdp-train: interrupted; " in err and "Traceback" not in err
    assert f"--model_dir={run}" in err


def test_cli_cpu_replicas_runs_two_mirrored_replicas(tmp_path):
    run = tmp_path / "m"
    p = _cli(*_SMALL, "--strategy=mirrored", "--cpu_replicas=2", "--seed=1",
             f"--model_dir={run}")
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-2000:]
    config = json.load(open(run / rundir.CONFIG_FILE))
    assert config["num_replicas"] == 2 and config["cpu_replicas"] == 2


@pytest.mark.slow  # several subprocesses of the command line
def test_evaluate_app_errors_for_missing_directory_or_model(tmp_path):
    (tmp_path / "empty").mkdir()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=_ROOT)
    for name, words in (("none", "does not exist"), ("empty", "no trained model")):
        out = subprocess.run([sys.executable, "-m", "tfdp.apps.evaluate",
                              f"--model_dir={tmp_path / name}"], cwd=_ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 1 and words in out.stderr, out.stderr[-2000:]
        assert "Traceback" not in out.stderr


def test_corrupt_resume_state_is_an_error_naming_the_file(tmp_path, tiny_data):
    cfg = _cfg(tmp_path, "c", method="nonprivate", options={"nonprivate_model": "mlp"})
    loop.train(nonprivate.NonPrivate(cfg), tiny_data, stop_after_epochs=1, verbose=0)
    ledger_path = tmp_path / "c" / rundir.LEDGER_FILE
    good = ledger_path.read_text()
    ledger_path.write_text(good[: len(good) // 2])  # a half-written file (pre-atomic writes)
    with pytest.raises(ValueError, match="ledger.json"):
        loop.train(nonprivate.NonPrivate(cfg), tiny_data, resume=True, verbose=0)
    ledger_path.write_text(good)
    (tmp_path / "c" / rundir.CONFIG_FILE).unlink()
    with pytest.raises(ValueError, match="config.json: file is missing"):
        loop.train(nonprivate.NonPrivate(cfg), tiny_data, resume=True, verbose=0)


def test_cpu_replicas_after_device_initialisation_is_an_error():
    tf.config.list_logical_devices("CPU")  # devices are initialised in this process
    with pytest.raises(ValueError, match="--cpu_replicas: TensorFlow's devices were already"):
        train_app._split_cpu(3)  # pylint: disable=protected-access
    with pytest.raises(ValueError, match="--cpu_replicas"):
        train_app._split_cpu(0)  # pylint: disable=protected-access
