"""tfdp-bench: performance benchmarks, each a ratio against a reference in the same run.

Usage: tfdp-bench NAME [--output=FILE.json] [benchmark flags], NAME one of BENCHMARKS;
`tfdp-bench all [--report]` runs every benchmark into --results_dir (and renders
BENCHMARKS.md); `tfdp-bench report` re-renders BENCHMARKS.md from the result files.
"""

from __future__ import annotations

import importlib
import json
import os
import sys

from absl import app, flags

from tfdp import rundir
from tfdp.apps import cli, option_flags
from tfdp.bench import BENCHMARKS  # name -> module with `run(**overrides) -> dict`
from tfdp.bench import report

_BEFORE = set(flags.FLAGS)

_OUTPUT = flags.DEFINE_string("output", None, "Also write the result as JSON to this file.")
_REPORT = flags.DEFINE_bool("report", False,
                            "With `all`: also render --report_file from the result files.")
_RESULTS_DIR = flags.DEFINE_string("results_dir", "runs/bench",
                                   "`all` / `report`: directory of the JSON result files (the "
                                   "committed ones: results/bench).")
_REPORT_FILE = flags.DEFINE_string("report_file", "runs/bench/BENCHMARKS.md",
                                   "`all --report` / `report`: the Markdown report to write "
                                   "(the committed one: BENCHMARKS.md).")
_ONLY = flags.DEFINE_list("only", None, "`all`: run only these result stems (e.g. dpsgd).")
cli.define_verbose()
COMMANDS = ("all", "report")
OWN_FLAGS = cli.new_flags(_BEFORE)


def _load_named(argv: list[str]) -> None:
    # The named benchmark's flags (from its module's OPTIONS) are defined before flag
    # parsing; the other benchmark modules are not imported at all.
    # A benchmark module imported by the named one (export imports certify) has its flags
    # accepted too.
    names = [a for a in argv[1:] if not a.startswith("-")]
    if names and names[0] in BENCHMARKS:
        importlib.import_module(BENCHMARKS[names[0]])
    elif names and names[0] == "all":
        for module in BENCHMARKS.values():
            importlib.import_module(module)
    for module in BENCHMARKS.values():
        if module in sys.modules:
            option_flags.define_module_flags(module)


def flag_overrides(name: str) -> dict:
    """Parsed flag values of benchmark `name`, as keyword overrides of its `run`."""
    return option_flags.overrides(importlib.import_module(BENCHMARKS[name]).OPTIONS)


def main(argv: list[str]) -> None:
    if len(argv) != 2 or argv[1] not in tuple(BENCHMARKS) + COMMANDS:
        raise app.UsageError(
            f"name one benchmark: tfdp-bench {{{'|'.join(tuple(BENCHMARKS) + COMMANDS)}}} "
            "[flags]")
    if argv[1] in COMMANDS:
        if argv[1] == "all":
            base = {name: flag_overrides(name) for name in BENCHMARKS}
            for path in report.run_all(_RESULTS_DIR.value, _ONLY.value, base):
                print(f"wrote {path}")
        if argv[1] == "report" or _REPORT.value:
            try:
                report.write_report(_RESULTS_DIR.value, _REPORT_FILE.value)
            except ValueError as e:
                sys.exit(f"tfdp-bench: {e}")
            print(f"wrote {_REPORT_FILE.value}")
        return
    if _OUTPUT.value:
        # Checked before the benchmark runs (it may take many minutes); missing folders are
        # created when the result is written, atomically.
        try:
            rundir.check_output_file(_OUTPUT.value, "--output")
        except ValueError as e:
            raise app.UsageError(str(e)) from e
    before = list(os.getloadavg())
    result = importlib.import_module(BENCHMARKS[argv[1]]).run(**flag_overrides(argv[1]))
    report.add_context(result, " ".join(["tfdp-bench"] + sys.argv[1:]), before)
    text = json.dumps(result, indent=2, sort_keys=True, default=float)
    print(text)
    if _OUTPUT.value:
        rundir.atomic_write_bytes(_OUTPUT.value, (text + "\n").encode("utf-8"))
        print(f"wrote {_OUTPUT.value}")


def _help(kind: str) -> list[str]:
    """tfdp-bench's help: the benchmarks and commands; with NAME, that benchmark's flags."""
    names = [a for a in sys.argv[1:] if not a.startswith("-")]
    extra = ["", "Benchmarks: " + ", ".join(BENCHMARKS) + "; commands: " + ", ".join(COMMANDS),
             "tfdp-bench NAME --help shows the flags of benchmark NAME."]
    lines = cli.app_help(__doc__, OWN_FLAGS, kind, extra=extra)
    if names and names[0] in BENCHMARKS:
        cli.quiet_start(sys.argv)
        option_set = importlib.import_module(BENCHMARKS[names[0]]).OPTIONS
        tail = lines[-3:]
        lines = lines[:-3] + ["", f"Flags of {names[0]}:"]
        for opt in option_set:
            flag = flags.FLAGS[opt.name] if opt.name in flags.FLAGS else None
            default = cli.flag_default(flag) if flag is not None else str(opt.default or "")
            lines += cli.format_flag(opt.name, default, opt.help)
        lines += tail
    return lines


def run() -> None:
    """Console-script entry point."""
    if [a for a in sys.argv[1:] if not a.startswith("-")]:  # a benchmark: TensorFlow
        cli.quiet_start(sys.argv)
    _load_named(sys.argv)
    cli.handle_help(sys.argv, _help)
    app.run(main, argv=sys.argv)


if __name__ == "__main__":
    run()
