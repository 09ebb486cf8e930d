"""Bit-reproducible training across processes (docs/training.md, "Reproducibility").

Two fresh processes train the same seeded tiny runs; every checkpointed variable, the test
accuracy and the ledger must be identical. Grappler's memory-optimizer scheduling pass, which
made StoBatch runs differ between processes, fires only on graphs that are large compared with
free RAM; tests/train/test_tf_options.py forces that condition, and the StoBatch smoke row
(tests/reproduce/test_smoke_training.py, slow) reruns a real-size run against its committed value.

The StoBatch run is also compared with its committed fingerprint (`stobatch_fingerprint.json`:
the sum of |x| of every float checkpoint tensor, the test accuracy and the ledger's epsilon), so
that a change to what StoBatch trains shows in the default suite as it does in the slow smoke
row. This tiny run is chaotic in float rounding, and TensorFlow's CPU kernels differ by
platform (oneDNN's, its default on x86 CPUs with AVX-512 VNNI / AMX, or its own Eigen kernels
elsewhere; oneDNN's code also differs by instruction set): one Intel Xeon (AVX-512, oneDNN) and
one AMD EPYC (AVX2, Eigen) moved one Adam moment's sum by 12%. So the file holds one
fingerprint per platform (`platform_key`), and the test compares with this platform's. After a
deliberate change, or on a platform with none, write this platform's with

    python tests/train/test_determinism.py --write_fingerprint

(after a deliberate change, rewrite every platform's: the others are then stale).
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

if __name__ == "__main__":  # --write_fingerprint: the kernels the suite runs (tests/conftest.py)
    from tfdp import onednn
    onednn.use_onednn()

import tensorflow as tf  # noqa: E402  # pylint: disable=wrong-import-position

from tfdp import rundir

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "determinism_worker.py")
_SWAPPING_HEURISTICS = 4  # RewriterConfig.MemOptType: every memory pass but scheduling
_FINGERPRINT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "stobatch_fingerprint.json")
# Float rounding on another CPU of the same kind moves these sums by far less; a change to the
# noise (a one-off check: epsilon 2 -> 4 moved 24 of the 44 sums), the losses or the optimiser moves them by much
# more. This tiny run is not sensitive to the training attacks (2 -> 5 iterations moved none):
# tests/stobatch and the slow smoke row cover those.
_FINGERPRINT_RTOL = 1e-4


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


def platform_key() -> str:
    """The machine, the widest vector instruction set and TensorFlow's CPU kernel library."""
    import platform  # pylint: disable=import-outside-toplevel
    from tfdp.train import integrity  # pylint: disable=import-outside-toplevel
    record = integrity.platform_record()
    features = set(record["cpu_features"])
    isa = "avx512" if "avx512f" in features else "avx2" if "avx2" in features else "other"
    kernels = "onednn" if record["onednn"] == "on" else "eigen"
    return f"{platform.machine()}-{isa}-{kernels}"


def fingerprint(run_dir) -> dict:
    """Sum of |x| per float checkpoint tensor, the test accuracy and the ledger's epsilon."""
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(os.path.join(run_dir,
                                                                              "checkpoints")))
    sums = {}
    for key in sorted(reader.get_variable_to_shape_map()):
        x = reader.get_tensor(key)
        if isinstance(x, np.ndarray) and x.dtype.kind == "f":
            sums[key] = float(np.sum(np.abs(x.astype(np.float64))))
    with open(os.path.join(run_dir, rundir.METRICS_FILE), encoding="utf-8") as f:
        accuracy = json.load(f)["test_accuracy"]
    with open(os.path.join(run_dir, rundir.LEDGER_FILE), encoding="utf-8") as f:
        epsilon = json.load(f)["epsilon"]
    return {"abs_sums": sums, "test_accuracy": accuracy, "epsilon": epsilon}


def test_stobatch_is_bit_identical_in_two_fresh_processes(tmp_path):
    p0, p1 = _two_fresh_processes(tmp_path, ["stobatch"])
    _assert_identical_runs(p0 / "stobatch", p1 / "stobatch")
    with open(_FINGERPRINT, encoding="utf-8") as f:
        fingerprints = json.load(f)["platforms"]
    key = platform_key()
    if key not in fingerprints:
        pytest.skip(f"two processes agreed; no committed StoBatch fingerprint for platform "
                    f"{key} (recorded: {sorted(fingerprints)}); write one with "
                    "`python tests/train/test_determinism.py --write_fingerprint`")
    committed = fingerprints[key]
    got = fingerprint(p0 / "stobatch")
    assert got["epsilon"] == committed["epsilon"]
    assert got["test_accuracy"] == pytest.approx(committed["test_accuracy"], abs=0.051)
    assert sorted(got["abs_sums"]) == sorted(committed["abs_sums"])
    moved = {k: (v, committed["abs_sums"][k]) for k, v in got["abs_sums"].items()
             if v != pytest.approx(committed["abs_sums"][k], rel=_FINGERPRINT_RTOL, abs=1e-6)}
    assert not moved, moved


@pytest.mark.slow
def test_every_trainer_is_bit_identical_in_two_fresh_processes(tmp_path):
    methods = ["nonprivate", "dpsgd", "adlm", "secure_sgd", "stobatch"]
    p0, p1 = _two_fresh_processes(tmp_path, methods)
    for method in methods:
        _assert_identical_runs(p0 / method, p1 / method)



if __name__ == "__main__" and sys.argv[1:] == ["--write_fingerprint"]:
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, _WORKER, out, "stobatch"], check=True, cwd=_ROOT,
                       env=dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="2"))
        with open(_FINGERPRINT, encoding="utf-8") as f:
            recorded = json.load(f)
        recorded["platforms"][platform_key()] = fingerprint(os.path.join(out, "stobatch"))
        with open(_FINGERPRINT + ".tmp", "w", encoding="utf-8") as f:
            json.dump(recorded, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(_FINGERPRINT + ".tmp", _FINGERPRINT)
