"""Run files checked against the checkpoint on resume (issue 43 item 2, docs/ledger.md).

The checkpoint stores the run's configuration with a sha256 digest and the ledger as charged;
an edited config.json or ledger.json is refused in one line naming the field and both values,
before anything is written.
"""

import json
import os

import pytest

from tfdp import rundir
from tfdp.train import dpsgd, integrity, loop
from tfdp.train.base import TrainConfig


@pytest.fixture(scope="module")
def tiny_data(synthetic_data):
    return synthetic_data((6, 6, 1), 3, num_train=96, num_test=40, seed=0)


def _dpsgd(tmp_path, name, epochs=3, batch_size=16, epsilon=4.0):
    opts = {"dpsgd_l2_clip": 0.5, "dpsgd_model": "mlp", "dpsgd_sampling": "poisson"}
    return dpsgd.DPSGD(TrainConfig(method="dpsgd", dataset="synthetic",
                                   model_dir=str(tmp_path / name), epochs=epochs,
                                   batch_size=batch_size, learning_rate=0.05, seed=5,
                                   delta=1e-5, epsilon=epsilon, options=opts))


def _snapshot(model_dir):
    out = {}
    for root, _, files in os.walk(model_dir):
        for f in files:
            if f != ".lock":
                path = os.path.join(root, f)
                with open(path, "rb") as fh:
                    out[os.path.relpath(path, model_dir)] = fh.read()
    return out


def _edit(model_dir, name, edit):
    path = os.path.join(model_dir, name)
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    edit(data)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)
    return path


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory, tiny_data):
    """A run stopped after its first epoch (checkpointed), copied per test."""
    base = tmp_path_factory.mktemp("base")
    loop.train(_dpsgd(base, "r"), tiny_data, stop_after_epochs=1, verbose=0)
    return base / "r"


def _copy(stopped_run, tmp_path):
    import shutil  # pylint: disable=import-outside-toplevel
    shutil.copytree(stopped_run, tmp_path / "r")
    return str(tmp_path / "r")


@pytest.mark.parametrize("field,old,new", [("batch_size", 16, 8), ("epsilon", 4.0, 8.0),
                                           ("delta", 1e-5, 1e-3), ("num_train", 96, 48)])
def test_edited_config_field_is_refused_naming_it(stopped_run, tmp_path, tiny_data, field,
                                                  old, new):
    model_dir = _copy(stopped_run, tmp_path)

    def edit(cfg):
        assert cfg[field] == old
        cfg[field] = new
        if field in cfg.get("flags", {}):
            cfg["flags"][field] = new

    path = _edit(model_dir, rundir.CONFIG_FILE, edit)
    before = _snapshot(model_dir)
    with pytest.raises(ValueError) as err:
        loop.train(_dpsgd(tmp_path, "r"), tiny_data, resume=True, verbose=0)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"resume: {path} was edited: ")
    assert f"{field} is {new!r} there but {old!r} in the run's checkpoint" in msg
    assert _snapshot(model_dir) == before  # refused before anything was written


def test_edited_ledger_field_is_refused_naming_it(stopped_run, tmp_path, tiny_data):
    """A lowered epsilon, consistent across the entry and the totals (so the file is a
    valid ledger on its own), is refused against the checkpoint's."""
    model_dir = _copy(stopped_run, tmp_path)
    holder = {}

    def lower(led):
        holder["old"] = led["entries"][0]["epsilon"]
        for key in ("epsilon", "claimed_epsilon"):
            led[key] = 0.01
        led["entries"][0]["epsilon"] = 0.01

    path = _edit(model_dir, rundir.LEDGER_FILE, lower)
    before = _snapshot(model_dir)
    with pytest.raises(ValueError) as err:
        loop.train(_dpsgd(tmp_path, "r"), tiny_data, resume=True, verbose=0)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"resume: {path}")
    assert (f"entries[dpsgd].epsilon is 0.01 in the file but {holder['old']!r} in the "
            "checkpoint") in msg
    assert _snapshot(model_dir) == before


def test_inconsistent_ledger_edit_names_the_field(stopped_run, tmp_path, tiny_data):
    """Only the total lowered: the file contradicts its own entries."""
    model_dir = _copy(stopped_run, tmp_path)
    _edit(model_dir, rundir.LEDGER_FILE, lambda led: led.update(epsilon=0.01))
    with pytest.raises(ValueError, match=r"stored epsilon 0\.01 does not match the entries"):
        loop.train(_dpsgd(tmp_path, "r"), tiny_data, resume=True, verbose=0)


def test_corrupt_config_record_is_named(stopped_run, tmp_path):
    record = integrity.config_record({"batch_size": 16})
    assert integrity.read_config_record(record, "x") == {"batch_size": 16}
    tampered = record.replace(b"16", b"64")
    with pytest.raises(ValueError, match="^x: .*fails its sha256 digest"):
        integrity.read_config_record(tampered, "x")
    del stopped_run, tmp_path


def test_a_resume_stopped_before_its_checkpoint_may_have_changed_mutable_flags(
        stopped_run, tmp_path, tiny_data, monkeypatch):
    """A resume with a new batch size that stops before its first checkpoint leaves its
    config.json update; the next resume with that batch size is accepted."""
    model_dir = _copy(stopped_run, tmp_path)

    class Killed(BaseException):
        pass

    def killed(self, step_fn, batch):
        raise Killed()

    monkeypatch.setattr(loop.Run, "run_step", killed)
    with pytest.raises(Killed):
        loop.train(_dpsgd(tmp_path, "r", batch_size=8), tiny_data, resume=True, verbose=0)
    monkeypatch.undo()
    with open(os.path.join(model_dir, rundir.CONFIG_FILE), encoding="utf-8") as f:
        assert json.load(f)["batch_size"] == 8
    res = loop.train(_dpsgd(tmp_path, "r", batch_size=8), tiny_data, resume=True, verbose=0)
    assert not res.interrupted and res.epochs_completed >= 2
    assert res.ledger["epsilon"] <= 4.0 * (1 + 1e-9)  # stopped at the budget if need be
