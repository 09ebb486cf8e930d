"""Is StoBatch training bit-reproducible across processes? Writes determinism.json beside it.

Runs the same 3-step StoBatch command (the MNIST smoke flagfile on 1,998 images with m = 999,
one step per epoch) in two fresh processes, and compares every floating-point variable of the
final checkpoints and the ledgers. Cases:

* tfdp as shipped (grappler's memory optimizer at SWAPPING_HEURISTICS, tfdp/tf_options.py),
  two independent pairs, in float32 and once in float64;
* control: the same command with TensorFlow's default memory-optimizer level put back (the
  state before the fix), whose scheduling pass turns the step's multi-input AddN nodes into
  unordered AssignAdd accumulations when the graph is large compared with free RAM.

For each run it also records how many TemporaryVariable nodes (the rewrite's accumulators)
the optimised training-step graphs held.

    PYTHONPATH=. TFDP_DATA_DIR=/path/to/data python tools/stobatch/determinism.py
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
        "--learning_rate=0.01", "--stobatch_ae_learning_rate=0.01", "--verbose=0",
        "--epochs=3"]
# Runs tfdp-train in this process, recording the optimised function graphs; with "default",
# TensorFlow's default memory-optimizer level replaces tfdp's before the first tf.function.
_RUNNER = r"""
import collections, sys
from tensorflow.python.eager import context
from tfdp import tf_options
if sys.argv[1] == "default":
    tf_options.configure_tensorflow()
    ctx = context.context()
    ctx._config.graph_options.rewrite_options.memory_optimization = 0  # DEFAULT_MEM_OPT
    ctx._thread_local_data.function_call_options = None
    tf_options.configure_tensorflow = lambda: None
    assert tf_options.memory_optimization_level() == 0
from tfdp.apps import train
context.context().enable_run_metadata()
execute = train.execute
def recording(spec):
    try:
        return execute(spec)
    finally:
        md = context.context().export_run_metadata()
        ops = collections.Counter(n.op for g in md.function_graphs
                                  for n in g.post_optimization_graph.node)
        print("TemporaryVariable=%d" % ops["TemporaryVariable"], flush=True)
train.execute = recording
sys.argv = ["tfdp-train"] + sys.argv[2:]
train.run()
"""
CASES = [  # name, memory-optimizer level, extra flags, pairs
    ("tfdp (memory optimizer at SWAPPING_HEURISTICS)", "tfdp", [], 2),
    ("tfdp, --stobatch_dtype=float64", "tfdp", ["--stobatch_dtype=float64"], 1),
    ("control: TensorFlow's default memory-optimizer level (before the fix)", "default", [],
     1),
]


def _train(model_dir, level, extra):
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-c", _RUNNER, level, *ARGS, *extra,
                          f"--model_dir={model_dir}"], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout
    return int(out.rsplit("TemporaryVariable=", 1)[1].split()[0])


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
    out = {"command": "PYTHONPATH=. TFDP_DATA_DIR=... python tools/stobatch/determinism.py",
           "train_args": ARGS, "cases": []}
    tmp = tempfile.mkdtemp()
    try:
        for name, level, extra, pairs in CASES:
            diffs, temporaries, noise_equal, ledger_equal = [], [], True, True
            for pair in range(pairs):  # independent pairs of fresh processes
                dirs = [os.path.join(tmp, f"{len(out['cases'])}_{pair}_{i}") for i in (0, 1)]
                temporaries.append([_train(d, level, extra) for d in dirs])
                worst, same_noise, same_ledger = _max_diff(*dirs)
                diffs.append(worst)
                noise_equal &= same_noise
                ledger_equal &= same_ledger
            row = {"case": name, "steps": 3, "extra_args": extra,
                   "max_abs_difference_of_any_variable_per_pair": diffs,
                   "temporary_variable_nodes_per_run": temporaries,
                   "stored_noise_identical": noise_equal, "ledger_identical": ledger_equal}
            print(row, flush=True)
            out["cases"].append(row)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    path = os.path.join(ROOT, "results", "stobatch", "determinism.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
