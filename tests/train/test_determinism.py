"""Bit-reproducible training across processes (docs/training.md, "Reproducibility").

Two fresh processes train the same seeded tiny runs; every checkpointed variable, the test
accuracy and the ledger must be identical. Grappler's memory-optimizer scheduling pass, which
made StoBatch runs differ between processes, fires only on graphs that are large compared with
free RAM; tests/train/test_tf_options.py forces that condition, and the StoBatch smoke row
(tests/reproduce/test_smoke_training.py) reruns a real-size run against its committed value.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfdp import rundir

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "determinism_worker.py")
_SWAPPING_HEURISTICS = 4  # RewriterConfig.MemOptType: every memory pass but scheduling


def _two_fresh_processes(tmp_path, methods):
    env = dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    procs = [subprocess.Popen([sys.executable, _WORKER, str(tmp_path / f"p{i}"), *methods],
                              cwd=_ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
        assert f"memory_optimization={_SWAPPING_HEURISTICS}" in out, out
    return [tmp_path / "p0", tmp_path / "p1"]


def _assert_identical_runs(a, b):
    ra = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(a / "checkpoints")))
    rb = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(b / "checkpoints")))
    keys = ra.get_variable_to_shape_map()
    assert keys == rb.get_variable_to_shape_map(), a.name
    compared = 0
    for key in keys:
        x, y = ra.get_tensor(key), rb.get_tensor(key)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), (a.name, key)
            compared += x.dtype.kind == "f"
        else:
            assert x == y, (a.name, key)
    assert compared >= 2, (a.name, compared)  # the model's weights were compared
    for name in (rundir.METRICS_FILE, rundir.LEDGER_FILE):
        with open(a / name, encoding="utf-8") as f, open(b / name, encoding="utf-8") as g:
            first, second = json.load(f), json.load(g)
        if name == rundir.METRICS_FILE:
            first, second = first["test_accuracy"], second["test_accuracy"]
        assert first == second, (a.name, name)


def test_stobatch_is_bit_identical_in_two_fresh_processes(tmp_path):
    p0, p1 = _two_fresh_processes(tmp_path, ["stobatch"])
    _assert_identical_runs(p0 / "stobatch", p1 / "stobatch")


@pytest.mark.slow
def test_every_trainer_is_bit_identical_in_two_fresh_processes(tmp_path):
    methods = ["nonprivate", "dpsgd", "adlm", "secure_sgd", "stobatch"]
    p0, p1 = _two_fresh_processes(tmp_path, methods)
    for method in methods:
        _assert_identical_runs(p0 / method, p1 / method)

