"""`tfdp-bench allocator`: tfdp-train's step time with freed memory kept for reuse vs glibc's default.

Every tfdp command keeps the memory its tensors free inside the process (`tfdp.allocator`:
no mmap-served blocks, no heap trimming) instead of glibc's default, which returns every
block above 32 MiB to the kernel on `free` and faults it in again, zeroed, at the next step.
This benchmark runs the same seeded tfdp-train command in fresh processes, alternately with
tfdp's setting and with ``TFDP_MALLOC=glibc``, and compares their seconds per training step
after the first epoch (the median interval between the ends of consecutive epochs' training,
over the epoch's steps; the first epoch, which traces the graph, is not timed: a short run's
fixed costs would hide a per-step difference).
The ratio is tfdp's over glibc's default, median over rounds, worst trainer; below 1 is a
speed-up. The default cases are the MNIST reproduction settings at one epoch (real MNIST
from --data_dir / TFDP_DATA_DIR); ``sample`` cases run on the bundled sample data.
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

OPTIONS = options.OptionSet("allocator_bench_")

# name -> tfdp-train arguments (one epoch of each reproduction's MNIST settings, or a tiny
# run on the bundled sample data).
CASES = {
    "stobatch": ["--flagfile=flags/stobatch/mnist_reduced.flags", "--method=stobatch",
                 "--dataset=mnist", "--epsilon=2", "--num_train=5000", "--num_test=500"],
    "adlm": ["--flagfile=flags/adlm/mnist_full.flags", "--method=adlm", "--dataset=mnist",
             "--epsilon=0.25", "--num_train=9000", "--num_test=500", "--adlm_aux_epochs=1"],
    "dpsgd": ["--flagfile=flags/methods/dpsgd.flags", "--dataset=mnist", "--batch_size=256",
              "--num_train=5120", "--num_test=500"],
    "sample": ["--flagfile=flags/methods/nonprivate.flags", "--dataset=sample",
               "--num_train=300", "--num_test=50"],
}
_CASES = OPTIONS.list("allocator_bench_cases", ["stobatch", "adlm", "dpsgd"],
                      f"Trainer runs timed, from {sorted(CASES)}.")
_ROUNDS = OPTIONS.integer("allocator_bench_rounds", 2, "Alternating rounds per case.")
_EPOCHS = OPTIONS.integer("allocator_bench_epochs", 3,
                          "Epochs per run (>= 2: the first, holding the trace, is not timed).")

TARGET_RATIO = 1.05  # tfdp's setting no slower than glibc's default, within noise
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# tfdp-train as users run it, printing at exit the allocator setting the process ran under and
# the time at which each epoch's training ended.
_WORKER = """
import atexit, json, sys, time
from tfdp import allocator
from tfdp.apps import train
from tfdp.train import report
stamps = []
_end = report.Reporter.end_epoch
def end_epoch(self, *args, **kwargs):
    stamps.append(time.perf_counter())
    return _end(self, *args, **kwargs)
report.Reporter.end_epoch = end_epoch
atexit.register(lambda: print("allocator", allocator.state(), "epoch_stamps",
                              json.dumps(stamps), flush=True))
sys.argv = ["tfdp-train"] + sys.argv[1:]
train.run()
"""
_VARIANTS = {"tfdp": "keep", "glibc": "glibc"}


def _one(case: str, variant: str, epochs: int, work: str, i: int) -> float:
    run_dir = os.path.join(work, f"{case}-{variant}-{i}")
    args = [*CASES[case], f"--epochs={epochs}", "--seed=1", "--verbose=0",
            f"--model_dir={run_dir}"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TFDP_MALLOC=_VARIANTS[variant],
               PYTHONPATH=_ROOT + (os.pathsep + os.environ["PYTHONPATH"]
                                   if os.environ.get("PYTHONPATH") else ""))
    proc = subprocess.run([sys.executable, "-c", _WORKER, *args], cwd=_ROOT, env=env,
                          capture_output=True, text=True, timeout=3600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{case} ({variant}) failed: {proc.stderr[-1500:]}")
    marker = f"allocator {_VARIANTS[variant]} epoch_stamps "
    lines = [line for line in proc.stdout.splitlines() if line.startswith(marker)]
    if not lines:  # the variant really ran
        raise RuntimeError(f"{case} ({variant}): the worker did not run with the allocator "
                           f"setting {_VARIANTS[variant]!r}: {proc.stdout[-500:]}")
    stamps = json.loads(lines[-1][len(marker):])
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
        metrics = json.load(f)
    steps_per_epoch = int(metrics["steps"]) / max(1, int(metrics["epochs_completed"]))
    if len(stamps) < 2:
        raise RuntimeError(f"{case} ({variant}): {len(stamps)} epoch(s) timed; run at least 2 "
                           "(the first epoch holds the graph's trace)")
    # Epochs after the first: the steady state (the trace and first allocations excluded).
    intervals = [b - a for a, b in zip(stamps, stamps[1:])]
    return statistics.median(intervals) / steps_per_epoch


def run(**overrides: Any) -> dict:
    """Per case: seconds per step with tfdp's allocator setting and with glibc's default."""
    cases = [str(c) for c in OPTIONS.setting(overrides, "cases")]
    rounds = int(OPTIONS.setting(overrides, "rounds"))
    epochs = int(OPTIONS.setting(overrides, "epochs"))
    unknown = [c for c in cases if c not in CASES]
    if unknown or not cases:
        raise ValueError(f"cases: expected names from {sorted(CASES)}, got {cases}")
    for name, value, least in (("rounds", rounds, 1), ("epochs", epochs, 2)):
        if value < least:
            raise ValueError(f"{name} must be >= {least}, got {value}")
    per_case = {}
    with tempfile.TemporaryDirectory(prefix="tfdp-bench-allocator-") as work:
        for case in cases:
            times: dict[str, list[float]] = {"tfdp": [], "glibc": []}
            for r in range(rounds):
                order = ("tfdp", "glibc") if r % 2 == 0 else ("glibc", "tfdp")
                for variant in order:
                    seconds = _one(case, variant, epochs, work, r)
                    times[variant].append(seconds)
                    print(f"allocator bench: {case} {variant} round {r + 1}/{rounds}: "
                          f"{seconds:.3f} s/step", flush=True)
            ratio = statistics.median(times["tfdp"]) / statistics.median(times["glibc"])
            per_case[case] = {"seconds_per_step": times, "ratio": ratio,
                              "command": "tfdp-train " + " ".join(CASES[case])
                                         + f" --epochs={epochs} --seed=1"}
    worst = max(v["ratio"] for v in per_case.values())
    return {
        "benchmark": "allocator",
        "measured_path": "train",
        "measured_path_description": "tfdp-train in fresh processes: seconds per training "
                                     "step after the first epoch (median interval between "
                                     "epochs' ends, over the epoch's steps)",
        "reference": "glibc's default malloc settings (TFDP_MALLOC=glibc)",
        "candidate": "tfdp's setting: freed memory kept for reuse (no mmap, no trimming)",
        "ratio": worst,
        "ratio_by_case": {c: v["ratio"] for c, v in per_case.items()},
        "target": TARGET_RATIO,
        "passed": bool(worst <= TARGET_RATIO),
        "cases": per_case,
        "rounds": rounds, "epochs": epochs,
    }
