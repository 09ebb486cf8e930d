"""The tfdp side of a release comparison: one tfdp-train run with its per-epoch test accuracy.

  python -m tfdp.reproduce.releases.tfdp_side --job=adlm.mnist --output=OUT.json -- \\
      --method=adlm --dataset=mnist --flagfile=flags/releases/adlm_mnist_release.flags --seed=1

Everything after `--` goes to tfdp-train, which runs in a child process with a temporary
--model_dir and --verbose=1 (its progress lines carry the test accuracy after every epoch but
the last; the last is the run's final test accuracy). The result file has the same fields as a
release result (command, seed, seconds, numbers, curve) plus the run's config and ledger;
never the training loss or accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Optional, Sequence

from tfdp import rundir
from tfdp.reproduce import runner
from tfdp.reproduce.releases import jobs as jobs_lib

_EPOCH_LINE = re.compile(r"^epoch (?P<epoch>\d+)/\d+\s+step (?P<step>\d+)\b.*?"
                         r"test acc (?P<accuracy>[0-9.]+)", re.M)
_SEED = re.compile(r"^--seed=(\d+)$")


def parse_curve(text: str) -> list[list[float]]:
    """[[step, test accuracy %], ...] from tfdp-train's progress lines."""
    return [[int(m.group("step")), float(m.group("accuracy")) * 100.0]
            for m in _EPOCH_LINE.finditer(text)]


def run(job_name: str, train_args: Sequence[str], output: str,
        log_path: Optional[str] = None) -> dict:
    """Runs tfdp-train with `train_args`; writes the result file `output` (atomically).

    Raises:
      ValueError: naming the argument, for an unknown job, a missing --seed, or an argument
        this tool sets.
      RuntimeError: if tfdp-train fails (nothing written).
    """
    jobs_lib.get(job_name)
    seeds = [int(m.group(1)) for a in train_args for m in [_SEED.match(a)] if m]
    if len(seeds) != 1:
        raise ValueError("train_args: exactly one --seed=N is required")
    for arg in train_args:
        if arg.startswith(("--model_dir", "--verbose")):
            raise ValueError(f"{arg.split('=')[0]}: set by this tool; leave it out")
    out_dir = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(out_dir):
        raise ValueError(f"--output: no such directory {out_dir!r}")
    with tempfile.TemporaryDirectory(prefix="tfdp-side-") as tmp:
        run_dir = os.path.join(tmp, "run")
        t0 = time.time()
        proc = subprocess.run([sys.executable, "-m", "tfdp.apps.train", *train_args,
                               f"--model_dir={run_dir}", "--verbose=1"],
                              cwd=runner.REPO_ROOT, capture_output=True, text=True,
                              check=False)
        seconds = time.time() - t0
        if log_path:
            with open(log_path, "w", encoding="utf-8") as f:
                f.write(proc.stdout + proc.stderr)
        if proc.returncode:
            raise RuntimeError(f"tfdp-train failed with exit code {proc.returncode}: "
                               f"{proc.stderr[-2000:]}")

        def read(name: str) -> dict:
            with open(os.path.join(run_dir, name), encoding="utf-8") as f:
                return json.load(f)

        metrics = read("metrics.json")
        curve = parse_curve(proc.stdout + proc.stderr)
        curve.append([int(metrics["steps"]), float(metrics["test_accuracy"]) * 100.0])
        rec = {
            "job": job_name,
            "side": "tfdp",
            "command": " ".join(["tfdp-train", *train_args, "--model_dir=RUN_DIR",
                                 "--verbose=1"]),
            "seed": seeds[0],
            "seconds": round(seconds, 1),
            "numbers": {"test_accuracy": float(metrics["test_accuracy"]) * 100.0,
                        "steps": int(metrics["steps"])},
            "curve": curve,
            "config": read("config.json"),
            "ledger": read("ledger.json"),
            "exit_code": proc.returncode,
            "versions": runner.versions(),
        }
    rundir.write_json_atomic(output, rec)
    return rec


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print("tfdp_side: put the tfdp-train arguments after `--`", file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--job", required=True, help="the release job compared with")
    parser.add_argument("--output", required=True, help="the JSON file to write")
    parser.add_argument("--log", default=None, help="keep tfdp-train's output here")
    args = parser.parse_args(argv[:split])
    try:
        rec = run(args.job, argv[split + 1:], args.output, args.log)
    except (ValueError, RuntimeError) as e:
        print(f"tfdp_side: {e}", file=sys.stderr)
        return 2 if isinstance(e, ValueError) else 1
    print(f"{args.output}: test accuracy {rec['numbers']['test_accuracy']:.2f}%, "
          f"{rec['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
