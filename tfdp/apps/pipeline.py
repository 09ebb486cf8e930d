"""Train, then evaluate under attack with certification, then print a short summary.

    python -m tfdp.apps.pipeline [--train_flagfile=flags/smoothing/sample_20k.flags]
        [--eval_flagfile=flags/smoothing/sample_20k_eval.flags] [--model_dir=DIR] [--no-export]
        [extra tfdp-train flags]

Runs `tfdp.apps.train`, `tfdp.apps.evaluate` and (unless --no-export) `tfdp.apps.export` as
child processes of the same Python
(each app keeps its own flags), then reads the run directory (config.json, ledger.json,
metrics.json, evaluation.json) and prints: accuracy clean and under each attack, the clean
certified (or, for an unsound certificate, claimed) accuracy per radius with 95% CIs, the
soundness check, the claimed and the sound epsilon, and the run directory.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from typing import Optional, Sequence

from tfdp import evaluate as evaluate_lib
from tfdp.train import report


def _read(model_dir: str, name: str) -> dict:
    path = os.path.join(model_dir, name)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def summary_lines(model_dir: str) -> list[str]:
    """The summary of a trained and evaluated run directory.

    Raises:
        OSError: if a result file is missing.
    """
    config = _read(model_dir, "config.json")
    ledger = _read(model_dir, "ledger.json")
    evaluation = _read(model_dir, "evaluation.json")
    lo, hi = evaluation.get("size_range", [0, 1])
    lines = [f"method {config.get('method')} on {config.get('dataset')} "
             f"({evaluation.get('num_examples')} test examples, pixels on [{lo:g}, {hi:g}])"]
    lines += ["  " + line for line in evaluate_lib.summary_lines(evaluation)]
    lines.append("  " + report.privacy_summary(ledger))
    lines.append(f"  run directory: {os.path.abspath(model_dir)}")
    return lines


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train_flagfile",
                        default=os.path.join("flags", "smoothing", "sample_20k.flags"))
    parser.add_argument("--eval_flagfile",
                        default=os.path.join("flags", "smoothing", "sample_20k_eval.flags"))
    parser.add_argument("--model_dir", default=None)
    parser.add_argument("--export", default=True, action=argparse.BooleanOptionalAction,
                        help="end by exporting the model to MODEL_DIR/saved_model (tfdp-export)")
    # Every other argument (e.g. --epochs=1) is handed to tfdp-train after the flagfile.
    args, extra = parser.parse_known_args(argv)
    for path, flag in ((args.train_flagfile, "--train_flagfile"),
                       (args.eval_flagfile, "--eval_flagfile")):
        if not os.path.isfile(path):
            parser.error(f"{flag}: no such file {path!r}")
    model_dir = args.model_dir or os.path.join("runs", "pipeline-" + datetime.datetime.now(
        datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ"))
    start = time.time()
    train = [sys.executable, "-m", "tfdp.apps.train", f"--flagfile={args.train_flagfile}",
             f"--model_dir={model_dir}", *extra]
    evaluate = [sys.executable, "-m", "tfdp.apps.evaluate", f"--flagfile={args.eval_flagfile}",
                f"--model_dir={model_dir}"]
    commands = [train, evaluate]
    if args.export:
        commands.append([sys.executable, "-m", "tfdp.apps.export", f"--model_dir={model_dir}"])
    for cmd in commands:
        print("+ " + " ".join(cmd), flush=True)
        code = subprocess.call(cmd)
        if code != 0:
            print(f"pipeline: {cmd[2]} failed with exit code {code}", file=sys.stderr)
            return code
    lines = summary_lines(model_dir)
    if args.export:
        lines.append(f"  exported SavedModel: {os.path.abspath(os.path.join(model_dir, 'saved_model'))}")
    print("\n".join(["", "summary:"] + lines))
    print(f"  wall time: {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
