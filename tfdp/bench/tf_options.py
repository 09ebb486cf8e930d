"""`tfdp-bench tf_options`: each trainer's step time with tfdp's TensorFlow settings vs without.

tfdp runs every traced TensorFlow function with grappler's memory optimizer at SWAPPING_HEURISTICS instead of
TensorFlow's default level (`tfdp.tf_options`: the default level's scheduling pass made float
sums depend on the executor's order). This benchmark checks that the setting costs no speed:
for each trainer it runs the same seeded tfdp-train command (the method's flagfile in
flags/methods/ at a small size) in fresh processes, alternately with tfdp's level and with
TensorFlow's default (`MEMORY_OPTIMIZATION` replaced before tfdp configures TensorFlow), and
compares the training seconds per step that each run records in its metrics.json (the path
users run, including the first step's trace). The ratio is tfdp's over the default's, median
over rounds; within noise means near 1.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any

from tfdp import options

OPTIONS = options.OptionSet("tf_options_")

_METHODS = OPTIONS.list("tf_options_methods",
                        ["nonprivate", "dpsgd", "adlm", "secure_sgd", "stobatch"],
                        "Trainers timed (each with flags/methods/<method>.flags).")
_ROUNDS = OPTIONS.integer("tf_options_rounds", 3, "Alternating rounds per trainer.")
_EPOCHS = OPTIONS.integer("tf_options_epochs", 2, "Epochs per run.")
_NUM_TRAIN = OPTIONS.integer("tf_options_num_train", 1000, "Training records per run.")

TARGET_RATIO = 1.10  # within noise: tfdp's setting at most 10% slower
_EXTRA = {"stobatch": ["--batch_size=499"], "adlm": ["--adlm_aux_epochs=1"],
          "ilm": ["--adlm_aux_epochs=1"]}
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The worker: optionally put TensorFlow's default memory-optimizer level in place of tfdp's
# before any tfdp module configures TensorFlow, then run tfdp-train.
_WORKER = """
import sys
from tensorflow.core.protobuf import rewriter_config_pb2
import tfdp.tf_options as o
if sys.argv[1] == "default":
    o.MEMORY_OPTIMIZATION = rewriter_config_pb2.RewriterConfig.DEFAULT_MEM_OPT
import atexit
from tfdp.apps import train
# The level the run's traced functions were optimised with (read after training, at exit).
atexit.register(lambda: print("memory_optimization", o.memory_optimization_level(), flush=True))
sys.argv = ["tfdp-train"] + sys.argv[2:]
train.run()
"""
_LEVELS = {"tfdp": "SWAPPING_HEURISTICS", "default": "DEFAULT_MEM_OPT"}


def _one(method: str, variant: str, epochs: int, num_train: int, work: str, i: int) -> float:
    run_dir = os.path.join(work, f"{method}-{variant}-{i}")
    args = [f"--flagfile=flags/methods/{method}.flags", f"--epochs={epochs}",
            f"--num_train={num_train}", "--num_test=100", "--seed=1", "--verbose=0",
            f"--model_dir={run_dir}", *_EXTRA.get(method, [])]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=_ROOT + (os.pathsep + os.environ["PYTHONPATH"]
                                   if os.environ.get("PYTHONPATH") else ""))
    proc = subprocess.run([sys.executable, "-c", _WORKER, variant, *args], cwd=_ROOT, env=env,
                          capture_output=True, text=True, timeout=3600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{method} ({variant}) failed: {proc.stderr[-1500:]}")
    # lazy: loads tensorflow; importing tfdp.bench.tf_options does not
    from tensorflow.core.protobuf import rewriter_config_pb2  # pylint: disable=import-outside-toplevel
    want = rewriter_config_pb2.RewriterConfig.MemOptType.Value(_LEVELS[variant])
    if f"memory_optimization {want}" not in proc.stdout:  # the variant really ran
        raise RuntimeError(f"{method} ({variant}): the worker did not run at level "
                           f"{_LEVELS[variant]}: {proc.stdout[-500:]}")
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
        metrics = json.load(f)
    return float(metrics["seconds"]) / max(1, int(metrics["steps"]))


def run(**overrides: Any) -> dict:
    """Per trainer: seconds per step with tfdp's setting and with TensorFlow's default."""
    methods = [str(m) for m in OPTIONS.setting(overrides, "methods")]
    rounds = int(OPTIONS.setting(overrides, "rounds"))
    epochs = int(OPTIONS.setting(overrides, "epochs"))
    num_train = int(OPTIONS.setting(overrides, "num_train"))
    for name, value in (("rounds", rounds), ("epochs", epochs), ("num_train", num_train)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    per_method = {}
    with tempfile.TemporaryDirectory(prefix="tfdp-bench-tf-options-") as work:
        for method in methods:
            times: dict[str, list[float]] = {"tfdp": [], "default": []}
            for r in range(rounds):
                order = ("tfdp", "default") if r % 2 == 0 else ("default", "tfdp")
                for variant in order:
                    times[variant].append(_one(method, variant, epochs, num_train, work, r))
            ratio = statistics.median(times["tfdp"]) / statistics.median(times["default"])
            per_method[method] = {"seconds_per_step": times, "ratio": ratio}
    worst = max(v["ratio"] for v in per_method.values())
    return {
        "benchmark": "tf_options",
        "measured_path": "train",
        "measured_path_description": "tfdp-train in fresh processes: metrics.json's training "
                                     "seconds per step (the first step's trace included)",
        "reference": "TensorFlow's default memory-optimizer level (DEFAULT_MEM_OPT)",
        "candidate": "tfdp's level (SWAPPING_HEURISTICS: the scheduling pass off)",
        "ratio": worst,
        "ratio_by_method": {m: v["ratio"] for m, v in per_method.items()},
        "target": TARGET_RATIO,
        "passed": bool(worst <= TARGET_RATIO),
        "methods": per_method,
        "rounds": rounds, "epochs": epochs, "num_train": num_train,
    }
