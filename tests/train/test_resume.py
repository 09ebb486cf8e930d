"""One resume checker: tfdp-train's flags and the run's configuration, one rule, one message."""

import json
import os

import numpy as np
import pytest

from tfdp import rundir
from tfdp.apps import train as train_app
from tfdp.train import loop, resume, run_state
from tfdp.train.base import Method


def test_same_setting_compares_numbers_as_floats_and_flag_lists_item_by_item():
    assert resume.same_setting(1, 1.0)
    assert resume.same_setting(["-1", "1"], [-1.0, 1.0])  # a flag's list vs config.json's
    assert resume.same_setting(("a", "b"), ["a", "b"])
    assert not resume.same_setting(0.5, 0.25)
    assert not resume.same_setting(None, 0.5)
    assert not resume.same_setting(True, "true")


def test_one_message_for_a_changed_setting():
    assert resume.setting_conflict("--epsilon", 1.0, 1) is None
    assert resume.setting_conflict("--epsilon", 1.1, 0.5) == (
        "--epsilon: the run was started with 1.1, the resume asks for 0.5")
    # Tuples are shown as lists, as config.json holds them.
    assert resume.setting_conflict("--value_range", (-1.0, 1.0), (0.0, 1.0)) == (
        "--value_range: the run was started with [-1.0, 1.0], the resume asks for [0.0, 1.0]")


def test_flag_conflicts_names_only_given_flags_that_may_not_change():
    stored = {"epsilon": 1.0, "epochs": 2, "batch_size": 16, "learning_rate": 0.1}
    given = {"epsilon": 2.0, "epochs": 5, "batch_size": 32, "learning_rate": 0.5}
    out = resume.flag_conflicts(stored, given, present={"epsilon", "epochs", "batch_size"},
                                mutable={"epochs"})
    assert out == ["--epsilon: the run was started with 1.0, the resume asks for 2.0",
                   "--batch_size: the run was started with 16, the resume asks for 32"]


def test_resume_conflicts_options_absent_on_one_side_read_as_the_default():
    stored = {"method": "dpsgd", "epochs": 2, "options": {"dpsgd_l2_clip": 1.0, "a": None}}
    current = {"method": "dpsgd", "epochs": 4, "options": {"dpsgd_l2_clip": 2.0, "b": 3}}
    out = resume.resume_conflicts(stored, current, ("epochs",))
    assert out == ["--b: the run was started with its default, the resume asks for 3",
                   "--dpsgd_l2_clip: the run was started with 1.0, the resume asks for 2.0"]
    assert resume.resume_conflicts(dict(stored, data_sha256="a" * 64),
                                   dict(current, data_sha256="b" * 64, options={}),
                                   ("epochs", "dpsgd_l2_clip", "b"))[0].startswith(
        "training data: the data differ")


class _Stub(Method):
    """A method with nothing but its name (the checks need no training)."""

    def build_model(self, input_shape, num_classes):
        raise NotImplementedError

    def train_step(self, ctx, x, y):
        raise NotImplementedError


def _stored_run(tmp_path, flags, options):
    path = tmp_path / "run"
    os.makedirs(path)
    (path / rundir.CONFIG_FILE).write_text(json.dumps({"flags": flags, "options": options}))
    return str(path)


def test_the_app_and_the_run_refuse_a_change_with_the_same_error(tmp_path):
    """tfdp-train (flags vs config.json) and the run (its configuration vs config.json) say
    the same thing about the same change."""
    model_dir = _stored_run(tmp_path, {"method": "dpsgd", "epsilon": 1.0, "epochs": 2},
                            {"dpsgd_l2_clip": 1.0})
    with pytest.raises(ValueError) as app_error:
        train_app.merge_resume({"model_dir": model_dir, "epsilon": 3.0, "epochs": 9},
                               {"dpsgd_l2_clip": 0.5}, {"epsilon", "epochs", "dpsgd_l2_clip"},
                               _Stub)
    state = run_state.RunState.__new__(run_state.RunState)
    state.resume, state.private_state = True, {}
    state.stored_config = {"method": "dpsgd", "epsilon": 1.0, "epochs": 2,
                           "options": {"dpsgd_l2_clip": 1.0}}
    state.method = _Stub.__new__(_Stub)
    state.rd = rundir.RunDir(model_dir)
    with pytest.raises(ValueError) as run_error:
        state._check_resume({"method": "dpsgd", "epsilon": 3.0, "epochs": 9,  # pylint: disable=protected-access
                             "options": {"dpsgd_l2_clip": 0.5}})
    assert str(app_error.value) == str(run_error.value)
    assert str(app_error.value).startswith(f"--resume: these flags change the run in {model_dir}")
    assert "--epsilon: the run was started with 1.0, the resume asks for 3.0" in str(
        run_error.value)
    assert "--dpsgd_l2_clip: the run was started with 1.0, the resume asks for 0.5" in str(
        run_error.value)
    assert "--epochs" not in str(run_error.value)


def test_merge_resume_takes_the_run_flags_not_given(tmp_path):
    model_dir = _stored_run(tmp_path, {"method": "dpsgd", "epsilon": 1.0, "batch_size": 16,
                                       "model_dir": "/elsewhere"}, {"dpsgd_l2_clip": 1.0})
    values, options = train_app.merge_resume({"model_dir": model_dir, "epochs": 4}, {},
                                             {"epochs"}, _Stub)
    assert values == {"model_dir": model_dir, "epochs": 4, "method": "dpsgd", "epsilon": 1.0,
                      "batch_size": 16}
    assert options == {"dpsgd_l2_clip": 1.0}


def test_old_names_stay_importable_from_the_loop():
    assert loop.resume_conflicts is resume.resume_conflicts
    assert loop.data_fingerprint is resume.data_fingerprint
    x, y = np.zeros((2, 3), np.float32), np.zeros(2, np.int64)
    assert loop.data_fingerprint(x, y) != loop.data_fingerprint(x, y + 1)
