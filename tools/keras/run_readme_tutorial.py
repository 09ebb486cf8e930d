"""Runs README.md's "Your own model" block as written and records its numbers.

    python tools/keras/run_readme_tutorial.py [--python=PYTHON] [--output=results/keras/own_model.json]

The block runs in a fresh interpreter in a scratch folder (so its runs/ folder is new);
the JSON keeps the command, the block's printed lines, the three numbers it prints, the wall
time and the load average before and after.
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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SECTION = "## Your own model"
LINE = re.compile(r"test accuracy (?P<acc>[\d.]+), epsilon (?P<eps>[\d.]+), clean certified "
                  r"accuracy at l2 radius (?P<radius>[\d.]+): (?P<cert>[\d.]+)")
# Keras' progress lines carry the non-private training loss and accuracy: withheld from the
# result file (like tfdp-train's statistics, they stay with the user's run, never in results/).
TRAIN_STAT = re.compile(r" - (?!epsilon)\w+: [\d.eE+-]+")
WITHHELD = " - [non-private training statistics withheld]"


def redact(line: str) -> str:
    """A progress line without its non-private training statistics (epsilon is kept)."""
    if not TRAIN_STAT.search(line):
        return line
    kept = TRAIN_STAT.sub("", line)
    head, sep, tail = kept.partition(" - epsilon:")
    return head + WITHHELD + sep + tail


def readme_block(readme: str = os.path.join(ROOT, "README.md")) -> str:
    """The first python block of the README's "Your own model" section."""
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    body = text.split(SECTION + "\n", 1)[1]
    return body.split("```python\n", 1)[1].split("\n```", 1)[0] + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--output", default=os.path.join(ROOT, "results", "keras",
                                                         "own_model.json"))
    args = parser.parse_args()
    block = readme_block()
    with tempfile.TemporaryDirectory() as scratch:
        script = os.path.join(scratch, "own_model.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(block)
        load_before = os.getloadavg()
        start = time.time()
        proc = subprocess.run([args.python, script], cwd=scratch, capture_output=True,
                              text=True, check=False)
        seconds = time.time() - start
        load_after = os.getloadavg()
    if proc.returncode:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(proc.returncode)
    lines = [l for l in proc.stdout.splitlines() if l.strip()]
    match = LINE.search(lines[-1])
    if not match:
        raise SystemExit(f"unexpected last line: {lines[-1]!r}")
    record = {
        "command": "python tools/keras/run_readme_tutorial.py",
        "block": block,
        "stdout": [redact(l) for l in lines],
        "test_accuracy": float(match["acc"]),
        "epsilon": float(match["eps"]),
        "l2_radius": float(match["radius"]),
        "clean_certified_accuracy": float(match["cert"]),
        "seconds": round(seconds, 1),
        "load_average_before": [round(v, 2) for v in load_before],
        "load_average_after": [round(v, 2) for v in load_after],
        "cpus": os.cpu_count(),
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    print(lines[-1])
    print(f"wrote {args.output} ({seconds:.0f} s)")


if __name__ == "__main__":
    main()
