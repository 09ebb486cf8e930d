"""tfdp-train: flag validation before any work, the command line end to end, flags.txt."""

import json
import math
import os
import subprocess
import sys

import pytest

from tfdp import rundir
from tfdp.apps import train as train_app
from tfdp.train import loop, registry

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _values(tmp_path, **kw):
    values = {"method": "nonprivate", "dataset": "sample", "model_dir": str(tmp_path / "run")}
    values.update(kw)
    return values


@pytest.mark.parametrize("kw, flag", [
    ({"method": "nosuchmethod"}, "--method"),
    ({"dataset": "imagenet22k"}, "--dataset"),
    ({"method": "dpsgd", "epsilon": 0.0}, "--epsilon"),
    ({"method": "dpsgd", "epsilon": -1.0}, "--epsilon"),
    ({"method": "dpsgd", "epsilon": math.nan}, "--epsilon"),
    ({"method": "dpsgd", "epsilon": math.inf}, "--epsilon"),
    ({"method": "dpsgd", "delta": 1.0}, "--delta"),
    ({"method": "dpsgd", "delta": -0.1}, "--delta"),
    ({"batch_size": 0}, "--batch_size"),
    ({"epochs": 0}, "--epochs"),
    ({"learning_rate": -1.0}, "--learning_rate"),
    ({"optimizer": "rmsprop"}, "--optimizer"),
    ({"strategy": "tpu"}, "--strategy"),
    ({"num_train": 0}, "--num_train"),
    ({"value_range": ["1", "-1"]}, "--value_range"),
    ({"checkpoint_every": 0}, "--checkpoint_every"),
    ({"strategy": "multi_worker"}, "--seed"),
    ({"epsilon": 1.0}, "--epsilon"),  # nonprivate spends no budget
])
def test_bad_flags_name_the_flag(tmp_path, kw, flag):
    with pytest.raises(ValueError) as err:
        train_app.resolve(_values(tmp_path, **kw))
    assert flag in str(err.value)
    assert not os.path.exists(tmp_path / "run")  # nothing was written


def test_bad_method_options_name_the_flag(tmp_path):
    with pytest.raises(ValueError, match="--dpsgd_l2_clip"):
        train_app.resolve(_values(tmp_path, method="dpsgd"), {"dpsgd_l2_clip": 0.0})
    with pytest.raises(ValueError, match="--dpsgd_noise_multiplier"):
        train_app.resolve(_values(tmp_path, method="dpsgd"), {"dpsgd_noise_multiplier": -2.0})


def test_run_directory_rules(tmp_path):
    existing = tmp_path / "run"
    existing.mkdir()
    train_app.resolve(_values(tmp_path))  # an empty directory is fine
    (existing / "flags.txt").write_text("--method=nonprivate\n")
    with pytest.raises(ValueError, match="--model_dir"):
        train_app.resolve(_values(tmp_path))
    with pytest.raises(ValueError, match="--resume"):  # exists but holds no checkpoint
        train_app.resolve(_values(tmp_path, resume=True))
    with pytest.raises(ValueError, match="--resume"):
        train_app.resolve(_values(tmp_path, resume=True, model_dir=str(tmp_path / "missing")))


def test_defaults_come_from_the_method(tmp_path):
    spec = train_app.resolve(_values(tmp_path, method="dpsgd"))
    assert spec.config.epsilon == 2.0 and spec.config.delta == 1e-5
    spec = train_app.resolve(_values(tmp_path, method="dpsgd", epsilon=0.5, epochs=3))
    assert spec.config.epsilon == 0.5 and spec.config.epochs == 3
    assert spec.config.value_range == (-1.0, 1.0)


def test_default_model_dir_is_under_runs(tmp_path):
    spec = train_app.resolve({"method": "nonprivate"})
    assert spec.config.model_dir.startswith(os.path.join("runs", "nonprivate-sample-"))


def test_registry_is_loud():
    assert registry.METHODS["nonprivate"] == "tfdp.train.nonprivate:NonPrivate"
    assert registry.METHODS["dpsgd"] == "tfdp.train.dpsgd:DPSGD"
    with pytest.raises(ValueError, match="method"):
        registry.get_method_class("nope")
    registry.METHODS["broken_for_test"] = "tfdp.train.no_such_module:Nothing"
    try:
        with pytest.raises(ImportError):
            registry.get_method_class("broken_for_test")
    finally:
        del registry.METHODS["broken_for_test"]


def _cli(*args, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", "tfdp.apps.train", *args], cwd=_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_cli_rejects_bad_flags_before_training(tmp_path):
    out = _cli("--method=dpsgd", "--epsilon=-1", f"--model_dir={tmp_path / 'run'}")
    assert out.returncode != 0
    assert "--epsilon" in out.stderr
    assert not os.path.exists(tmp_path / "run")


def test_cli_nonprivate_end_to_end_and_flagfile_rerun(tmp_path):
    first = tmp_path / "first"
    out = _cli("--method=nonprivate", "--dataset=sample", f"--model_dir={first}", "--epochs=1",
               "--num_train=640", "--num_test=200", "--seed=3")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "test accuracy" in out.stdout and str(first) in out.stdout
    assert "privacy ledger" in out.stdout
    metrics = json.load(open(first / rundir.METRICS_FILE))
    assert metrics["epochs_completed"] == 1
    # 640 sample images, one epoch: well above chance (0.1) on the 200 test images.
    assert metrics["test_accuracy"] > 0.3
    flags_txt = (first / rundir.FLAGS_FILE).read_text()
    # The seed regenerates the run's noise: it is kept in the checkpoint, never in flags.txt.
    flag_lines = [ln for ln in flags_txt.splitlines() if not ln.startswith("#")]
    assert "--method=nonprivate" in flag_lines and not any(
        ln.startswith("--seed") for ln in flag_lines)
    assert train_app.SEED_NOTE in flags_txt.splitlines()[:2]  # the header says so (issue 40)
    # flags.txt and the same --seed re-create the run: same data, same result.
    second = tmp_path / "second"
    out = _cli(f"--flagfile={first / rundir.FLAGS_FILE}", "--seed=3", f"--model_dir={second}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.load(open(second / rundir.METRICS_FILE))["test_accuracy"] == \
        metrics["test_accuracy"]
    assert loop.has_checkpoint(str(first))
    # The same directory again without --resume is refused.
    with pytest.raises(ValueError, match="--model_dir"):
        train_app.resolve({"method": "nonprivate", "model_dir": str(first)})


@pytest.mark.parametrize("flagfile", sorted(
    f for f in os.listdir(os.path.join(_ROOT, "flags", "baselines")) if f.endswith(".flags")))
def test_baseline_flagfiles_validate(tmp_path, flagfile):
    import copy  # pylint: disable=import-outside-toplevel
    fv = copy.deepcopy(train_app.FLAGS)
    path = os.path.join(_ROOT, "flags", "baselines", flagfile)
    fv(["tfdp-train", f"--flagfile={path}", f"--model_dir={tmp_path / 'run'}"])
    values, options, present = train_app.values_from_flags(fv)
    spec = train_app.resolve(values, options, present)
    assert spec.config.method in ("nonprivate", "dpsgd")
    if spec.config.method == "dpsgd":
        assert spec.config.epsilon is not None and options["dpsgd_sampling"] == "poisson"


def test_app_stop_and_resume_equals_uninterrupted(tmp_path):
    import numpy as np  # pylint: disable=import-outside-toplevel

    def values(name, **kw):
        v = _values(tmp_path, model_dir=str(tmp_path / name), epochs=2, num_train=256,
                    num_test=100, seed=5, verbose=0, batch_size=32)
        v.update(kw)
        return v

    options = {"nonprivate_model": "mlp"}
    full = train_app.execute(train_app.resolve(values("full"), options))
    cut = train_app.execute(train_app.resolve(values("cut", stop_after_epochs=1), options))
    assert cut.interrupted and cut.epochs_completed == 1
    resumed = train_app.execute(train_app.resolve(values("cut", resume=True), options))
    assert resumed.epochs_completed == 2 and not resumed.interrupted
    for a, b in zip(full.model.get_weights(), resumed.model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert resumed.metrics["test_accuracy"] == full.metrics["test_accuracy"]


def test_progress_output_leaves_the_trained_model_alone(tmp_path, capsys):
    """--verbose=1 checks the test accuracy after every epoch but the last (an inference pass
    between training epochs); the run must end bit for bit where --verbose=0 ends.
    tfdp-reproduce trains with --verbose=1; the committed jobs ran with --verbose=0."""
    import numpy as np  # pylint: disable=import-outside-toplevel
    options = {"stobatch_attack_iters": 2, "stobatch_architecture": "tiny",
               "stobatch_hidden_units": 8}
    runs = {}
    for verbose in (0, 1):
        values = _values(tmp_path, method="stobatch", epsilon=2.0, epochs=2, num_train=100,
                         num_test=20, seed=5, batch_size=50, verbose=verbose,
                         model_dir=str(tmp_path / f"v{verbose}"))
        runs[verbose] = train_app.execute(train_app.resolve(values, options))
    out = capsys.readouterr().out
    assert "epoch 1/2" in out and "test acc " in out  # the check ran (verbose=1)
    quiet, loud = runs[0], runs[1]
    assert quiet.metrics["test_accuracy"] == loud.metrics["test_accuracy"]
    assert quiet.ledger == loud.ledger
    for a, b in zip(quiet.model.get_weights(), loud.model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(quiet.model.non_trainable_variables, loud.model.non_trainable_variables,
                    strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.slow  # about 2 minutes on a loaded 2-core machine; test_loop covers the loop
def test_app_dpsgd_defaults_resume_bit_identical(tmp_path):
    # tfdp-train's defaults (auto clipping, Poisson lots padded to bucket sizes, the auto
    # noise kernel): a stopped and resumed run equals the uninterrupted one bit for bit.
    import numpy as np  # pylint: disable=import-outside-toplevel

    def values(name, **kw):
        v = _values(tmp_path, model_dir=str(tmp_path / name), epochs=2, num_train=256,
                    num_test=50, seed=6, verbose=0, batch_size=32, method="dpsgd",
                    epsilon=50.0)
        v.update(kw)
        return v

    options = {"dpsgd_model": "mlp", "dpsgd_noise_multiplier": 4.0}
    full = train_app.execute(train_app.resolve(values("full"), options))
    assert full.model is not None
    spec = train_app.resolve(values("cut", stop_after_epochs=1), options)
    method = spec.method_cls(spec.config)
    assert method.pads_lots() and method.batch_schedule() == "poisson"
    train_app.execute(spec)
    resumed = train_app.execute(train_app.resolve(values("cut", resume=True), options))
    assert resumed.epochs_completed == 2 and not resumed.interrupted
    for a, b in zip(full.model.get_weights(), resumed.model.get_weights()):
        np.testing.assert_array_equal(a, b)
    # Accounted per segment ([0, 8) then [8, 8)), composing to the uninterrupted epsilon.
    assert resumed.ledger["epsilon"] == pytest.approx(full.ledger["epsilon"], rel=1e-9)
