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


def declare_options(option_set: options.OptionSet) -> None:
    """The cases / rounds / epochs options of a benchmark built on `compare`."""
    prefix = option_set.prefix
    option_set.list(f"{prefix}cases", ["stobatch", "adlm", "dpsgd"],
                    f"Trainer runs timed, from {sorted(CASES)}.")
    option_set.integer(f"{prefix}rounds", 2, "Alternating rounds per case.")
    option_set.integer(f"{prefix}epochs", 3,
                       "Epochs per run (>= 2: the first, holding the trace, is not timed).")


declare_options(OPTIONS)

TARGET_RATIO = 1.05  # tfdp's setting no slower than glibc's default, within noise
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# tfdp-train as users run it, printing at exit the allocator setting the process ran under and
# the time at which each epoch's training ended.
_WORKER = """
import atexit, json, sys, time
from tfdp import allocator, onednn
from tfdp.apps import train
from tfdp.train import report
stamps = []
_end = report.Reporter.end_epoch
def end_epoch(self, *args, **kwargs):
    stamps.append(time.perf_counter())
    return _end(self, *args, **kwargs)
report.Reporter.end_epoch = end_epoch
atexit.register(lambda: print("settings", json.dumps({"allocator": allocator.state(),
                                                      "onednn": onednn.state()}),
                              "epoch_stamps", json.dumps(stamps), flush=True))
sys.argv = ["tfdp-train"] + sys.argv[1:]
train.run()
"""
# variant -> (environment it runs with, the settings its process must report at exit)
_VARIANTS = {"tfdp": ({"TFDP_MALLOC": "keep"}, {"allocator": "keep"}),
             "glibc": ({"TFDP_MALLOC": "glibc"}, {"allocator": "glibc"})}


def _one(case: str, variant: str, epochs: int, work: str, i: int,
         variants: dict = None) -> float:
    variants = variants or _VARIANTS
    env_changes, expected = variants[variant]
    run_dir = os.path.join(work, f"{case}-{variant}-{i}")
    args = [*CASES[case], f"--epochs={epochs}", "--seed=1", "--verbose=0",
            f"--model_dir={run_dir}"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=_ROOT + (os.pathsep + os.environ["PYTHONPATH"]
                                   if os.environ.get("PYTHONPATH") else ""))
    env.update(env_changes)
    proc = subprocess.run([sys.executable, "-c", _WORKER, *args], cwd=_ROOT, env=env,
                          capture_output=True, text=True, timeout=3600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{case} ({variant}) failed: {proc.stderr[-1500:]}")
    lines = [line.split(" ", 1)[1] for line in proc.stdout.splitlines()
             if line.startswith("settings ")]
    if not lines:
        raise RuntimeError(f"{case} ({variant}): the worker printed no settings: "
                           f"{proc.stdout[-500:]}")
    settings_text, _, stamps_text = lines[-1].partition(" epoch_stamps ")
    settings = json.loads(settings_text)
    if any(settings.get(k) != v for k, v in expected.items()):  # the variant really ran
        raise RuntimeError(f"{case} ({variant}): the worker ran with {settings}, not "
                           f"{expected}")
    stamps = json.loads(stamps_text)
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
        metrics = json.load(f)
    steps_per_epoch = int(metrics["steps"]) / max(1, int(metrics["epochs_completed"]))
    if len(stamps) < 2:
        raise RuntimeError(f"{case} ({variant}): {len(stamps)} epoch(s) timed; run at least 2 "
                           "(the first epoch holds the graph's trace)")
    # Epochs after the first: the steady state (the trace and first allocations excluded).
    intervals = [b - a for a, b in zip(stamps, stamps[1:])]
    return statistics.median(intervals) / steps_per_epoch


def compare(benchmark: str, variants: dict, cases: list, rounds: int, epochs: int,
            prefix: str) -> dict:
    """Per case: seconds per step of each variant (the first is tfdp's), alternating order
    over rounds, and the ratio of the first variant's median to the second's."""
    unknown = [c for c in cases if c not in CASES]
    if unknown or not cases:
        raise ValueError(f"cases: expected names from {sorted(CASES)}, got {cases}")
    for name, value, least in (("rounds", rounds, 1), ("epochs", epochs, 2)):
        if value < least:
            raise ValueError(f"{name} must be >= {least}, got {value}")
    names = list(variants)
    per_case = {}
    with tempfile.TemporaryDirectory(prefix=f"tfdp-bench-{benchmark}-") as work:
        for case in cases:
            times: dict[str, list[float]] = {v: [] for v in names}
            for r in range(rounds):
                for variant in (names if r % 2 == 0 else names[::-1]):
                    seconds = _one(case, variant, epochs, work, r, variants)
                    times[variant].append(seconds)
                    print(f"{prefix}: {case} {variant} round {r + 1}/{rounds}: "
                          f"{seconds:.3f} s/step", flush=True)
            ratio = statistics.median(times[names[0]]) / statistics.median(times[names[1]])
            per_case[case] = {"seconds_per_step": times, "ratio": ratio,
                              "command": "tfdp-train " + " ".join(CASES[case])
                                         + f" --epochs={epochs} --seed=1"}
    return {
        "benchmark": benchmark,
        "measured_path": "train",
        "measured_path_description": "tfdp-train in fresh processes: seconds per training "
                                     "step after the first epoch (median interval between "
                                     "epochs' ends, over the epoch's steps)",
        "variants": names,
        "ratio": max(v["ratio"] for v in per_case.values()),
        "ratio_by_case": {c: v["ratio"] for c, v in per_case.items()},
        "cases": per_case,
        "rounds": rounds, "epochs": epochs,
    }


def run_benchmark(benchmark: str, option_set: options.OptionSet, variants: dict,
                  overrides: dict, reference: str, candidate: str,
                  target: float = TARGET_RATIO) -> dict:
    """`compare` with the settings of `option_set` (see `declare_options`), and the verdict."""
    result = compare(benchmark, variants,
                     [str(c) for c in option_set.setting(overrides, "cases")],
                     int(option_set.setting(overrides, "rounds")),
                     int(option_set.setting(overrides, "epochs")), f"{benchmark} bench")
    result.update({"reference": reference, "candidate": candidate, "target": target,
                   "passed": bool(result["ratio"] <= target)})
    return result


def run(**overrides: Any) -> dict:
    """Per case: seconds per step with tfdp's allocator setting and with glibc's default."""
    return run_benchmark(
        "allocator", OPTIONS, _VARIANTS, overrides,
        reference="glibc's default malloc settings (TFDP_MALLOC=glibc)",
        candidate="tfdp's setting: freed memory kept for reuse (no mmap, no trimming)")
