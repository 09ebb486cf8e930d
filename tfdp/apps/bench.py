"""tfdp-bench: performance benchmarks, each a ratio against a reference in the same run.

Usage: tfdp-bench NAME [--output=FILE.json] [benchmark flags], NAME one of BENCHMARKS.
"""

from __future__ import annotations

import importlib
import json
import sys

from absl import app, flags

# name -> module with `run() -> dict` (keys at least: ratio, target, reference, candidate).
BENCHMARKS = {
    "layers": "tfdp.bench.layers",
    "gpm": "tfdp.bench.gpm",
    "certify": "tfdp.bench.certify",
    "dpsgd": "tfdp.bench.dpsgd",
}

_OUTPUT = flags.DEFINE_string("output", None, "Also write the result as JSON to this file.")


def _load_named(argv: list[str]) -> None:
    # A benchmark module defines its own flags, so the named one is imported before flag
    # parsing; the others are not imported at all.
    names = [a for a in argv[1:] if not a.startswith("-")]
    if names and names[0] in BENCHMARKS:
        importlib.import_module(BENCHMARKS[names[0]])


def main(argv: list[str]) -> None:
    if len(argv) != 2 or argv[1] not in BENCHMARKS:
        raise app.UsageError(
            f"name one benchmark: tfdp-bench {{{'|'.join(BENCHMARKS)}}} [flags]")
    result = importlib.import_module(BENCHMARKS[argv[1]]).run()
    text = json.dumps(result, indent=2, sort_keys=True, default=float)
    print(text)
    if _OUTPUT.value:
        with open(_OUTPUT.value, "w", encoding="utf-8") as f:
            f.write(text + "\n")


def run() -> None:
    """Console-script entry point."""
    _load_named(sys.argv)
    app.run(main, argv=sys.argv)


if __name__ == "__main__":
    run()
