"""Record one tfdp-train run as a result file (the `results/adlm/*.json` format).

    python -m tfdp.reproduce.record --row=mnist_smoke_adlm \\
        --output=results/adlm/mnist_smoke_adlm.json -- \\
        --method=adlm --dataset=mnist --flagfile=flags/adlm/mnist_smoke.flags

Everything after `--` is handed to tfdp-train, which runs in a child process with a fresh
temporary `--model_dir` and `--verbose=0`. The file holds the command (with `RUN_DIR` for the
temporary directory), the run's `config.json`, `ledger.json`, the public part of
`metrics.json` (test accuracy, steps, epochs, seconds: never the training loss or accuracy,
which are statistics of the private data computed without privacy), the exit code, UTC start
and end and the versions (including the git commit). It is written atomically, and only when
the run succeeded: a failed run leaves any earlier file untouched and exits non-zero.

`tfdp-reproduce` adopts such a file for a reduced-scale job with exactly the same command
(docs/reproduce.md, "Adoption"); the README's results table cites them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from typing import Optional, Sequence

from tfdp.reproduce import runner

# metrics.json keys that are public (the rest, e.g. the non-private training statistics, stay
# in the run directory).
PUBLIC_METRICS = ("test_accuracy", "epochs_completed", "steps", "stopped_early", "seconds")


def _utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def record(row: str, train_args: Sequence[str], output: str,
           data_dir: Optional[str] = None) -> dict:
    """Runs tfdp-train with `train_args` and writes the result file `output`; returns it.

    Raises:
      ValueError: naming the argument, for a bad row name or an argument this tool sets.
      RuntimeError: if tfdp-train fails (the output is not written).
    """
    if not row or any(c in row for c in "/\\ "):
        raise ValueError(f"--row: a name without slashes or spaces, got {row!r}")
    for arg in train_args:
        if arg.startswith(("--model_dir", "--verbose")):
            raise ValueError(f"{arg.split('=')[0]}: set by this tool (a temporary run "
                             "directory, --verbose=0); leave it out")
    out_dir = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(out_dir):
        raise ValueError(f"--output: no such directory {out_dir!r}")
    extra = [f"--data_dir={data_dir}"] if data_dir else []
    with tempfile.TemporaryDirectory(prefix="tfdp-record-") as tmp:
        run_dir = os.path.join(tmp, "run")
        argv = [*train_args, *extra, f"--model_dir={run_dir}", "--verbose=0"]
        started = _utc()
        proc = subprocess.run([sys.executable, "-m", "tfdp.apps.train", *argv],
                              cwd=runner.REPO_ROOT, check=False)
        finished = _utc()
        if proc.returncode != 0:
            raise RuntimeError(f"tfdp-train failed with exit code {proc.returncode}; "
                               f"{output} not written")

        def read(name: str) -> dict:
            with open(os.path.join(run_dir, name), encoding="utf-8") as f:
                return json.load(f)

        metrics = read("metrics.json")
        rec = {
            "row": row,
            "command": " ".join(["tfdp-train", *train_args, *extra, "--model_dir=RUN_DIR",
                                 "--verbose=0"]),
            "config": read("config.json"),
            "ledger": read("ledger.json"),
            "metrics": {k: metrics[k] for k in PUBLIC_METRICS if k in metrics},
            "exit_code": proc.returncode,
            "started_utc": started,
            "finished_utc": finished,
            "versions": runner.versions(),
        }
    tmp_out = output + ".tmp"
    with open(tmp_out, "w", encoding="utf-8") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp_out, output)
    return rec


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command-line entry point; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print("record: put the tfdp-train arguments after `--`", file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--row", required=True, help="the result's name")
    parser.add_argument("--output", required=True, help="the JSON file to write")
    parser.add_argument("--data_dir", default=None,
                        help="handed to tfdp-train (kept out of the recorded command "
                             "when unset: TFDP_DATA_DIR applies)")
    args = parser.parse_args(argv[:split])
    try:
        rec = record(args.row, argv[split + 1:], args.output, args.data_dir)
    except (ValueError, RuntimeError) as e:
        print(f"record: {e}", file=sys.stderr)
        return 2 if isinstance(e, ValueError) else 1
    print(f"{args.output}: test accuracy {rec['metrics'].get('test_accuracy')}, "
          f"{rec['metrics'].get('seconds', 0):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
