"""Probes of StoBatch's cross-process nondeterminism. Writes nondeterminism_probes.json.

Trains the 3-step command of determinism.py twice in fresh processes under each probe and
compares every floating-point variable of the two final checkpoints (largest absolute
difference) and the ledgers:

- PYTHONHASHSEED fixed at 0, and at 3 (is it Python's string-hash seed?);
- one inter-op thread, and one intra-op thread, set through tf.config.threading before
  TensorFlow starts (is it a scheduling race between threads?);
- grappler's arithmetic optimizer off (is it its rewriting of sums?).

    PYTHONPATH=. TFDP_DATA_DIR=/path/to/data python results/stobatch/nondeterminism_probes.py
"""

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import determinism  # noqa: E402  pylint: disable=wrong-import-position

ROOT = determinism.ROOT
PROBES = {
    "PYTHONHASHSEED=0": ({"PYTHONHASHSEED": "0"}, ""),
    "PYTHONHASHSEED=3": ({"PYTHONHASHSEED": "3"}, ""),
    "1 inter-op thread (tf.config.threading)": (
        {}, "tf.config.threading.set_inter_op_parallelism_threads(1)"),
    "1 intra-op thread (tf.config.threading)": (
        {}, "tf.config.threading.set_intra_op_parallelism_threads(1)"),
    "grappler arithmetic optimizer off": (
        {}, "tf.config.optimizer.set_experimental_options({'arithmetic_optimization': False})"),
}


def _train(model_dir, env_extra, setup):
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", **env_extra)
    code = ("import sys, tensorflow as tf; " + (setup + "; " if setup else "")
            + "sys.argv[0] = 'tfdp-train'; from tfdp.apps import train; train.run()")
    subprocess.run([sys.executable, "-c", code, *determinism.ARGS, "--epochs=3",
                    f"--model_dir={model_dir}"], cwd=ROOT, env=env, check=True,
                   capture_output=True)


def main():
    out = {"command": "PYTHONPATH=. TFDP_DATA_DIR=... python "
                      "results/stobatch/nondeterminism_probes.py",
           "train_args": determinism.ARGS + ["--epochs=3"], "probes": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (env_extra, setup) in PROBES.items():
            dirs = [os.path.join(tmp, f"{len(out['probes'])}_{tag}") for tag in "ab"]
            for d in dirs:
                _train(d, env_extra, setup)
            worst, noise_equal, ledger_equal = determinism._max_diff(*dirs)  # pylint: disable=protected-access
            row = {"probe": name, "max_abs_difference_between_two_runs": worst,
                   "stored_noise_identical": noise_equal, "ledger_identical": ledger_equal}
            out["probes"].append(row)
            print(row, flush=True)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nondeterminism_probes.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)
    print("wrote", path)


if __name__ == "__main__":
    main()
