"""Longest-first order of the test scopes sent to the pytest-xdist workers (`make test`).

`--dist loadfile` sends each test file (a scope) to one worker, in an order that does not
know how long a file takes, so the last long file could start when the other worker has
almost nothing left. tests/conftest.py orders the scopes by an estimate instead, longest
first (the classic longest-processing-time rule: the workers then end close together), and
sends the tests of a few heavy files one by one (`SPLIT_FILES`) so that two workers can share
them.

The estimate comes from tests/durations.json: the seconds each test took in a measured run
(a JUnit file, see `main`), kept for the tests of a second or more; an unlisted test counts
`DEFAULT_SECONDS`. The table only orders the work: an outdated table makes a run slower, never
different.

Regenerate the table from a JUnit file of a whole default run:

    python tests/schedule.py results/testing/<run>.xml > tests/durations.json

and replay a run's tests in xdist's own order and in this one (each worker's busy seconds):

    python tests/schedule.py --replay results/testing/<run>.xml
"""

import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping

# The table (test node id -> seconds) and the smallest duration it keeps.
DURATIONS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.json")
MIN_LISTED_SECONDS = 1.0
# The estimate of a test the table does not list (most tests take well under a second).
DEFAULT_SECONDS = 0.3

# The files of tests/export share session-scoped trained runs (tests/export/conftest.py):
# one scope, so the runs are trained on one worker only.
GROUPED_DIRS = ("tests/export/",)

# Heavy files whose tests go to the workers one by one. A file qualifies when its tests share
# no expensive module-scoped fixture: a worker that runs another file's test in between tears
# the file's module fixtures down and builds them again (here: small synthetic arrays).
SPLIT_FILES = frozenset({
    "tests/reproduce/test_smoke_training.py",
    "tests/train/test_integrity.py",
    "tests/train/test_loop.py",
    "tests/train/test_replay.py",
    "tests/train/test_resume_ledger.py",
    "tests/stobatch/test_training.py",
    "tests/adlm/test_cli.py",
    "tests/layers/test_noise_kernel.py",
    "tests/hgm/test_pipeline.py",
    "tests/keras/test_model.py",
    "tests/reproduce/test_record.py",
    "tests/train/test_secret.py",
    "tests/train/test_storage.py",
    "tests/audit/test_samplers.py",
    "tests/architecture/test_plugins.py",
})


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to.

    Args:
      nodeid: a pytest node id, `path.py::name[params]`.

    Returns:
      `tests/export` for the tests of that folder, the node id itself for a test of
      `SPLIT_FILES`, else the test's file.
    """
    path = nodeid.split("::", 1)[0]
    for folder in GROUPED_DIRS:
        if path.startswith(folder):
            return folder.rstrip("/")
    return nodeid if path in SPLIT_FILES else path


def estimate(nodeid: str, durations: Mapping[str, float]) -> float:
    """Seconds a test is expected to take.

    Args:
      nodeid: a pytest node id.
      durations: the table, node id -> seconds.

    Returns:
      The table's value for the node id; else the longest listed parametrization of the
      same test function (a test newly parametrized keeps a high estimate); else
      `DEFAULT_SECONDS`.
    """
    if nodeid in durations:
        return durations[nodeid]
    base = nodeid.split("[", 1)[0]
    listed = [s for n, s in durations.items() if n == base or n.startswith(base + "[")]
    return max(listed) if listed else DEFAULT_SECONDS


def longest_first(scopes: Mapping[str, Iterable[str]],
                  durations: Mapping[str, float]) -> list[str]:
    """The scopes ordered by their estimated time, longest first.

    Args:
      scopes: scope -> the node ids of its tests.
      durations: the table, node id -> seconds.

    Returns:
      The scope names; ties keep their given order (Python's sort is stable).
    """
    totals = {s: sum(estimate(n, durations) for n in ids) for s, ids in scopes.items()}
    return sorted(totals, key=lambda s: -totals[s])


def load_durations(path: str = DURATIONS_PATH) -> dict[str, float]:
    """Reads the table; a missing file gives an empty table (every test the default)."""
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return dict(json.load(f)["seconds"])


def _nodeid(classname: str, name: str, root: str) -> str:
    """A JUnit test case's pytest node id (its classname is the dotted path, then classes)."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if os.path.exists(os.path.join(root, path)):
            return "::".join([path] + parts[cut:] + [name])
    raise ValueError(f"no test file for JUnit classname {classname!r}")


def durations_from_junit(xml_path: str, root: str,
                         min_seconds: float = MIN_LISTED_SECONDS) -> dict[str, float]:
    """The table from a JUnit file (`pytest --junitxml`): node id -> seconds, rounded.

    Args:
      xml_path: the JUnit file of a run.
      root: the repository the run's node ids are relative to.
      min_seconds: tests faster than this are left out.

    Returns:
      The durations of the tests of at least `min_seconds`, sorted by node id.

    Raises:
      ValueError: a test case whose classname names no file under `root`.
    """
    table = {}
    for case in ET.parse(xml_path).iter("testcase"):
        seconds = float(case.get("time", "0"))
        if seconds >= min_seconds:
            table[_nodeid(case.get("classname", ""), case.get("name", ""), root)] = round(
                seconds, 1)
    return dict(sorted(table.items()))


def replay(order: Iterable[str], scopes: Mapping[str, Iterable[str]],
           seconds: Mapping[str, float], workers: int = 2) -> list[float]:
    """Each worker's sum of test time when the scopes go out in `order` (to a free worker).

    Args:
      order: the scope names, in the order they are handed out.
      scopes: scope -> the node ids of its tests.
      seconds: node id -> the seconds the test took.
      workers: the number of workers.

    Returns:
      The workers' busy seconds; the largest is the replayed wall time.
    """
    busy = [0.0] * workers
    for scope in order:
        free = busy.index(min(busy))
        busy[free] += sum(seconds[n] for n in scopes[scope])
    return busy


def _replay_report(xml_path: str, root: str) -> str:
    """The JUnit run's tests replayed in xdist's own order and in the longest-first one."""
    seconds = {}
    for case in ET.parse(xml_path).iter("testcase"):
        try:
            nodeid = _nodeid(case.get("classname", ""), case.get("name", ""), root)
        except ValueError:  # a file removed since the run: left out of both orders
            continue
        seconds[nodeid] = float(case.get("time", "0"))
    by_file, by_scope = {}, {}
    for nodeid in seconds:
        path = nodeid.split("::", 1)[0]
        path = next((d.rstrip("/") for d in GROUPED_DIRS if path.startswith(d)), path)
        by_file.setdefault(path, []).append(nodeid)
        by_scope.setdefault(scope_of(nodeid), []).append(nodeid)
    # pytest-xdist's own order (--loadscope-reorder): files with more tests first.
    xdist_order = sorted(by_file, key=lambda s: -len(by_file[s]))
    old = replay(xdist_order, by_file, seconds)
    new = replay(longest_first(by_scope, load_durations()), by_scope, seconds)
    return (f"tests: {len(seconds)}, sum of durations {sum(seconds.values()):.0f} s\n"
            f"files in xdist's order: workers busy {old[0]:.0f} s and {old[1]:.0f} s\n"
            f"longest first (tests/durations.json): workers busy {new[0]:.0f} s and "
            f"{new[1]:.0f} s\n")


def main(argv: list[str]) -> int:
    """Prints the table made from the JUnit file `argv[1]` as JSON, or with `--replay` first,
    the run's tests replayed in the two orders."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if len(argv) == 3 and argv[1] == "--replay" and argv[2].endswith(".xml"):
        sys.stdout.write(_replay_report(argv[2], root))
        return 0
    if len(argv) != 2 or not argv[1].endswith(".xml"):
        print("usage: python tests/schedule.py [--replay] RUN.xml", file=sys.stderr)
        return 2
    source = os.path.relpath(os.path.abspath(argv[1]), root)
    table = durations_from_junit(argv[1], root)
    json.dump({"source": re.sub(r"\\", "/", source), "seconds": table}, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
