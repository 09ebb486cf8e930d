"""MultiWorkerMirroredStrategy: two local worker processes (TF_CONFIG) match one device."""

import json
import os
import socket
import subprocess
import sys

import keras
import numpy as np
import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_ARGS = ["--method=nonprivate", "--nonprivate_model=mlp", "--seed=4", "--num_train=512",
         "--num_test=200", "--epochs=1", "--batch_size=32", "--verbose=0"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _cmd(*extra):
    return [sys.executable, "-m", "tfdp.apps.train", *_ARGS, *extra]


@pytest.mark.slow
def test_two_workers_match_one_device(tmp_path):
    cluster = {"worker": [f"localhost:{_free_port()}", f"localhost:{_free_port()}"]}
    procs = []
    for index in (1, 0):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_CONFIG=json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": index}}))
        procs.append(subprocess.Popen(
            _cmd("--strategy=multi_worker", f"--model_dir={tmp_path / 'two'}"), cwd=_ROOT,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0, out[-3000:]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    one = subprocess.run(_cmd(f"--model_dir={tmp_path / 'one'}"), cwd=_ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    assert json.load(open(tmp_path / "two" / "config.json"))["num_replicas"] == 2
    # Only the chief writes the run's files; the other worker keeps its checkpoint apart.
    assert os.path.isdir(tmp_path / "two" / "workers" / "worker-1")
    a = keras.saving.load_model(tmp_path / "one" / "model.keras")
    b = keras.saving.load_model(tmp_path / "two" / "model.keras")
    for x, y in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(x, y, atol=2e-5, rtol=1e-4)
