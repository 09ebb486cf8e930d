"""Is StoBatch training bit-reproducible across processes? Writes determinism.json beside it.

Runs the same 2- or 3-step StoBatch command (the MNIST smoke flagfile on 1,998 images with
m = 999, one step per epoch) twice in fresh processes (two such pairs per case) under several environments, and compares every floating-point
variable of the final checkpoints and the ledgers.

    PYTHONPATH=. TFDP_DATA_DIR=/path/to/data python results/stobatch/determinism.py
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARGS = ["--flagfile=flags/stobatch/mnist_smoke.flags", "--method=stobatch", "--dataset=mnist",
        "--epsilon=2", "--seed=1", "--num_train=1998", "--batch_size=999",
        "--learning_rate=0.01", "--stobatch_ae_learning_rate=0.01", "--verbose=0"]
TRIALS = 2
ENVS = {
    "default": {},
    "oneDNN off, 1 intra/inter-op thread, TF_DETERMINISTIC_OPS=1": {
        "TF_ENABLE_ONEDNN_OPTS": "0", "TF_NUM_INTRAOP_THREADS": "1",
        "TF_NUM_INTEROP_THREADS": "1", "TF_DETERMINISTIC_OPS": "1"},
    "MALLOC_PERTURB_=165 (glibc fills freed heap memory with one byte)": {
        "MALLOC_PERTURB_": "165"},
}


def _train(model_dir, epochs, extra_env, dtype_args=()):
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", **extra_env)
    subprocess.run([sys.executable, "-m", "tfdp.apps.train", *ARGS, *dtype_args,
                    f"--epochs={epochs}", f"--model_dir={model_dir}"], cwd=ROOT, env=env,
                   check=True, capture_output=True)


def _max_diff(a_dir, b_dir):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    ra = tf.train.load_checkpoint(os.path.join(a_dir, "checkpoints"))
    rb = tf.train.load_checkpoint(os.path.join(b_dir, "checkpoints"))
    worst, noise_equal = 0.0, True
    for key in ra.get_variable_to_shape_map():
        x, y = ra.get_tensor(key), rb.get_tensor(key)
        if isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.size:
            d = float(np.max(np.abs(x.astype(np.float64) - y)))
            worst = max(worst, d)
            if ("chi3" in key or "fixed_noise" in key) and d != 0.0:
                noise_equal = False
    with open(os.path.join(a_dir, "ledger.json"), encoding="utf-8") as f:
        la = json.load(f)
    with open(os.path.join(b_dir, "ledger.json"), encoding="utf-8") as f:
        lb = json.load(f)
    return worst, noise_equal, la == lb


def main():
    out = {"command": "PYTHONPATH=. TFDP_DATA_DIR=... python results/stobatch/determinism.py",
           "train_args": ARGS, "cases": []}
    cases = [("default", {}, 2, ())]
    cases += [(name, env, 3, ()) for name, env in ENVS.items()]
    cases.append(("default, --stobatch_dtype=float64", {}, 3, ("--stobatch_dtype=float64",)))
    tmp = tempfile.mkdtemp()
    try:
        for name, env, steps, dtype_args in cases:
            diffs, noise_equal, ledger_equal = [], True, True
            for trial in range(TRIALS):  # independent pairs of fresh processes
                dirs = [os.path.join(tmp, f"{len(out['cases'])}_{trial}_{i}") for i in (0, 1)]
                for d in dirs:
                    _train(d, steps, env, dtype_args)
                worst, same_noise, same_ledger = _max_diff(*dirs)
                diffs.append(worst)
                noise_equal &= same_noise
                ledger_equal &= same_ledger
            row = {"environment": name, "steps": steps, "extra_args": list(dtype_args),
                   "max_abs_difference_of_any_variable_per_pair": diffs,
                   "stored_noise_identical": noise_equal, "ledger_identical": ledger_equal}
            print(row, flush=True)
            out["cases"].append(row)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "determinism.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
