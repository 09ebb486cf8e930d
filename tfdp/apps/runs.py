"""tfdp-runs: a table of the runs under a folder, and their accuracy versus sound epsilon.

  tfdp-runs runs/                      # console table, one row per run directory
  tfdp-runs runs/ --format=csv         # or markdown
  tfdp-runs runs/ --plot=runs.png      # accuracy versus sound epsilon of those runs
  tfdp-runs runs/ --radius=0.1         # clean certified accuracy at radius 0.1

Each row: the run's method and data set, its claimed and sound epsilon (ledger.json; "inf"
for a run without a privacy guarantee), its test accuracy (metrics.json), the clean, attacked
accuracies of its latest evaluation (evaluation.json) with 95% Clopper-Pearson intervals over
the evaluated examples, its clean certified accuracy (unattacked test inputs whose certified
radius reaches r; sound certificates only) at the radius --radius names (default: the
smallest radius the run's evaluation certified at; the cell says which), and its status: finished, stopped (resumable with
--resume), running (its lock is held) or incomplete. Reads files only; imports no TensorFlow.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import fcntl
import io
import json
import math
import os
import sys
from typing import Any, Optional, Sequence
from tfdp import clopper_pearson as clopper_pearson_lib
from tfdp import rundir
from tfdp.train import report

CONFIDENCE = 0.95
_SKIP_DIRS = {"checkpoints", "logs", "saved_model", "workers", ".git"}


@dataclasses.dataclass
class Accuracy:
    """An accuracy over `n` examples, with its 95% Clopper-Pearson interval."""

    value: float
    n: Optional[int]
    low: Optional[float] = None
    high: Optional[float] = None
    label: str = ""

    def text(self) -> str:
        """'0.912 [0.89, 0.93]' (three decimals; the interval when n is known)."""
        out = f"{self.value:.3f}"
        if self.low is not None:
            out += f" [{self.low:.2f}, {self.high:.2f}]"
        return out


@dataclasses.dataclass
class RunRow:
    """One run directory's summary."""

    path: str
    method: str
    dataset: str
    claimed_epsilon: float
    sound_epsilon: float
    delta: Optional[float]
    status: str
    epochs: str
    test: Optional[Accuracy] = None
    clean: Optional[Accuracy] = None
    attacked: Optional[Accuracy] = None
    certified: Optional[Accuracy] = None


def clopper_pearson(successes: int, trials: int, confidence: float = CONFIDENCE
                    ) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval of a binomial proportion (tfdp.clopper_pearson)."""
    return clopper_pearson_lib.interval(successes, trials, 1.0 - confidence)


def accuracy(value: Any, n: Any, label: str = "") -> Optional[Accuracy]:
    """An Accuracy with its interval, or None when value is absent."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    if isinstance(n, int) and n > 0:
        low, high = clopper_pearson(int(round(float(value) * n)), n)
        return Accuracy(float(value), n, low, high, label)
    return Accuracy(float(value), None, label=label)


def epsilon_value(value: Any, has_entries: bool) -> float:
    """A ledger epsilon as a float: inf for a run without a privacy guarantee.

    Accepts a number, the string "inf" / "Infinity" or null (how runs without privacy report
    it); a legacy ledger with no entries and epsilon 0.0 also means "no guarantee".
    """
    if value is None or isinstance(value, str):
        if isinstance(value, str) and value.strip().lower() not in ("inf", "infinity", "+inf"):
            try:
                return float(value)
            except ValueError:
                return math.inf
        return math.inf
    x = float(value)
    if not has_entries and x == 0.0:
        return math.inf
    return x


def _read(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _locked(run_dir: str) -> bool:
    """Whether a live process holds the run's lock (.lock; the lock file is not created)."""
    path = os.path.join(run_dir, ".lock")
    if not os.path.exists(path):
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def find_runs(root: str) -> list[str]:
    """Every run directory (one holding config.json) at or below `root`, sorted."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        if "config.json" in filenames:
            found.append(dirpath)
            dirnames[:] = []  # a run's own subfolders are not runs
    return sorted(found)


def _attacked(evaluation: dict, n: Optional[int]) -> tuple[Optional[Accuracy],
                                                             Optional[Accuracy]]:
    """The worst attack at the largest attack size, and the certified accuracy at that size."""
    best: Optional[tuple] = None
    for name, entry in (evaluation.get("attacks") or {}).items():
        for size, res in (entry or {}).items():
            try:
                key = float(size)
            except ValueError:
                continue
            acc = res.get("accuracy")
            if not isinstance(acc, (int, float)):
                continue
            if best is None or key > best[0] or (key == best[0] and acc < best[1]):
                # Only a sound certificate's number is shown as certified (claimed ones are
                # named claimed_certified_accuracy_* in evaluation.json and left out here).
                best = (key, acc, f"{name}@{size}",
                        res.get("certified_accuracy_on_attacked_inputs"))
    if best is None:
        return None
    return accuracy(best[1], n, best[2])


def clean_certified(evaluation: dict, n: Optional[int], radius: Optional[float] = None
                    ) -> Optional[Accuracy]:
    """Clean certified accuracy at `radius` (default: the smallest radius evaluated).

    Reads evaluation.json's `clean_certified_accuracy` (a sound certificate's; an unsound
    one's numbers are named clean_claimed_certified_accuracy and left out): the fraction of
    unattacked test inputs classified correctly with a certified radius of at least r.
    """
    table = evaluation.get("clean_certified_accuracy")
    if not isinstance(table, dict):
        return None
    sizes = {}
    for size, res in table.items():
        try:
            sizes[float(size)] = res
        except ValueError:
            continue
    if not sizes:
        return None
    key = min(sizes) if radius is None else next(
        (s for s in sizes if math.isclose(s, radius, rel_tol=1e-9, abs_tol=1e-12)), None)
    if key is None:
        return None
    res = sizes[key]
    value = res.get("value") if isinstance(res, dict) else res
    count = res.get("n", n) if isinstance(res, dict) else n
    return accuracy(value, count if isinstance(count, int) else n, f"@{key:g}")


def summarize(run_dir: str, radius: Optional[float] = None) -> RunRow:
    """The row of one run directory (clean certified accuracy at `radius`, see
    `clean_certified`)."""
    config = _read(os.path.join(run_dir, "config.json")) or {}
    ledger = _read(os.path.join(run_dir, "ledger.json")) or {}
    metrics = _read(os.path.join(run_dir, "metrics.json"))
    evaluation = _read(os.path.join(run_dir, "evaluation.json"))
    has_entries = bool(ledger.get("entries"))
    sound = epsilon_value(ledger.get("epsilon"), has_entries)
    claimed_raw = ledger.get("claimed_epsilon", ledger.get("epsilon"))
    claimed = epsilon_value(claimed_raw, has_entries)
    if _locked(run_dir):
        status = "running"
    elif metrics is not None and rundir.model_file_problem(
            os.path.join(run_dir, rundir.MODEL_FILE)):
        status = "damaged (model.keras corrupt)"
    elif metrics is not None and os.path.exists(os.path.join(run_dir, "model.keras")):
        status = "finished"
        if metrics.get("stopped_early"):
            status = "finished (budget reached early)"
    elif os.path.isdir(os.path.join(run_dir, "checkpoints")) and any(
            f.startswith("checkpoint") for f in os.listdir(os.path.join(run_dir, "checkpoints"))):
        status = "stopped"
    else:
        status = "incomplete"
    planned = config.get("epochs")
    done = (metrics or {}).get("epochs_completed")
    if done is None:  # a stopped run: the last checkpointed segment
        segments = _read(os.path.join(run_dir, "checkpoints", "segments.json")) or {}
        ends = [s.get("end_epoch") for s in segments.get("segments") or []]
        done = ends[-1] if ends else None
    epochs = f"{done}/{planned}" if done is not None else f"?/{planned}"
    num_test = config.get("num_test")
    row = RunRow(path=run_dir, method=str(config.get("method", "?")),
                 dataset=str(config.get("dataset", "?")), claimed_epsilon=claimed,
                 sound_epsilon=sound, delta=ledger.get("delta"), status=status, epochs=epochs,
                 test=accuracy((metrics or {}).get("test_accuracy"),
                               num_test if isinstance(num_test, int) else None))
    if evaluation:
        n = evaluation.get("num_examples")
        n = n if isinstance(n, int) else None
        row.clean = accuracy(evaluation.get("clean_accuracy"), n)
        row.attacked = _attacked(evaluation, n)
        row.certified = clean_certified(evaluation, n, radius)
    return row


def _eps_text(x: float) -> str:
    return "inf" if math.isinf(x) else report.round_up(x)


HEADER = ("run", "method", "data", "claimed eps", "sound eps", "test acc", "clean acc",
          "attacked acc", "attack", "clean certified acc @r", "status")


def header(radius: Optional[float] = None) -> tuple:
    """The column titles; the certified column names its radius."""
    name = (f"clean certified acc @r={radius:g}" if radius is not None
            else "clean certified acc @r (smallest evaluated)")
    return tuple(name if h == "clean certified acc @r" else h for h in HEADER)


def table_rows(rows: Sequence[RunRow], root: str) -> list[list[str]]:
    """The rows as text cells (console / markdown)."""
    out = []
    for r in rows:
        rel = os.path.relpath(r.path, root)
        out.append([
            "." if rel == "." else rel, r.method, r.dataset, _eps_text(r.claimed_epsilon),
            _eps_text(r.sound_epsilon), r.test.text() if r.test else "-",
            r.clean.text() if r.clean else "-", r.attacked.text() if r.attacked else "-",
            r.attacked.label if r.attacked else "-",
            f"{r.certified.text()} {r.certified.label}" if r.certified else "-", r.status])
    return out


def format_console(rows: Sequence[RunRow], root: str, radius: Optional[float] = None) -> str:
    """A fixed-width table."""
    cells = [list(header(radius))] + table_rows(rows, root)
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(HEADER))).rstrip()
             for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(f"({len(rows)} run{'s' if len(rows) != 1 else ''}; accuracies with 95% "
                 "Clopper-Pearson intervals; eps rounded up; inf: no privacy guarantee; "
                 "clean certified acc: unattacked test inputs certified at radius r, the @ "
                 "value; attacked acc: the worst attack at the largest size)")
    return "\n".join(lines)


def format_markdown(rows: Sequence[RunRow], root: str, radius: Optional[float] = None) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header(radius)) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
              for cells in table_rows(rows, root)]
    return "\n".join(lines)


def _num(x: Optional[float]) -> str:
    if x is None:
        return ""
    return "inf" if math.isinf(x) else repr(float(x))


def format_csv(rows: Sequence[RunRow], root: str, radius: Optional[float] = None) -> str:
    """CSV with full precision (one column per number); `certified_*` is the clean certified
    accuracy at `certified_radius`."""
    del radius  # each row names its radius
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = ["run", "method", "dataset", "claimed_epsilon", "sound_epsilon", "delta", "status",
            "epochs"]
    for kind in ("test", "clean", "attacked", "certified"):
        cols += [f"{kind}_accuracy", f"{kind}_ci_low", f"{kind}_ci_high", f"{kind}_n"]
    cols += ["attack", "certified_radius"]
    w.writerow(cols)
    for r in rows:
        line = [os.path.relpath(r.path, root), r.method, r.dataset, _num(r.claimed_epsilon),
                _num(r.sound_epsilon), "" if r.delta is None else repr(r.delta), r.status,
                r.epochs]
        for acc in (r.test, r.clean, r.attacked, r.certified):
            line += ([_num(acc.value), _num(acc.low), _num(acc.high),
                      "" if acc.n is None else str(acc.n)] if acc else ["", "", "", ""])
        line.append(r.attacked.label if r.attacked else "")
        line.append(r.certified.label.lstrip("@") if r.certified else "")
        w.writerow(line)
    return buf.getvalue()


def plot(rows: Sequence[RunRow], path: str, title: str = "") -> str:
    """Accuracy versus sound epsilon of the runs (runs without a guarantee at the right edge).

    One series per kind of accuracy present (test, attacked, certified), with the 95%
    intervals as error bars; the x axis is logarithmic.
    """
    # lazy: matplotlib only when a figure is drawn
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    # lazy: matplotlib only when a figure is drawn
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    import matplotlib.ticker  # pylint: disable=import-outside-toplevel,unused-import

    finite = [r.sound_epsilon for r in rows if not math.isinf(r.sound_epsilon)
              and r.sound_epsilon > 0]
    right = (max(finite) * 4) if finite else 10.0
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for kind, marker in (("test", "o"), ("attacked", "s"), ("certified", "^")):
        pts = [(right if math.isinf(r.sound_epsilon) else r.sound_epsilon, getattr(r, kind),
                r.method) for r in rows if getattr(r, kind) is not None]
        pts = [p for p in pts if p[0] > 0]
        if not pts:
            continue
        xs = [p[0] for p in pts]
        ys = [p[1].value for p in pts]
        err = [[p[1].value - p[1].low if p[1].low is not None else 0 for p in pts],
               [p[1].high - p[1].value if p[1].high is not None else 0 for p in pts]]
        label = {"test": "test accuracy", "attacked": "accuracy under the worst attack",
                 "certified": "clean certified accuracy at r"}[kind]
        ax.errorbar(xs, ys, yerr=err, fmt=marker, capsize=3, label=label)
        if kind == "test":
            for x, y, m in zip(xs, ys, [p[2] for p in pts]):
                ax.annotate(m, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xscale("log")
    low = (min(finite) / 2) if finite else 0.1
    ax.set_xlim(low, right * 1.6)
    ticks = sorted(set(finite))
    labels = [f"{t:.3g}" for t in ticks]
    if any(math.isinf(r.sound_epsilon) for r in rows):
        ax.axvline(right, color="0.7", ls=":")
        ticks.append(right)
        labels.append("inf\n(no DP)")
    ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(ticks))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FixedFormatter(labels))
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("sound epsilon (ledger.json; log scale)")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1.02)
    ax.set_title(title or f"accuracy vs sound epsilon, {len(rows)} runs (95% CIs)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Console entry point."""
    parser = argparse.ArgumentParser(
        prog="tfdp-runs", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2] if __doc__.count("\n\n") >= 2 else None,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", help="a run directory, or a folder holding run directories")
    parser.add_argument("--format", choices=("table", "csv", "markdown"), default="table",
                        help="output format (default: a console table)")
    parser.add_argument("--plot", metavar="FILE.png", default=None,
                        help="also draw accuracy versus sound epsilon into this file")
    parser.add_argument("--radius", type=float, default=None, metavar="R",
                        help="the radius of the clean certified accuracy column (default: the "
                             "smallest radius each run's evaluation certified at)")
    args = parser.parse_args(argv)
    if args.radius is not None and not (math.isfinite(args.radius) and args.radius >= 0):
        print(f"tfdp-runs: error: --radius: expected a finite number >= 0, got {args.radius}",
              file=sys.stderr)
        return 2
    if not os.path.isdir(args.dir):
        print(f"tfdp-runs: error: DIR: {args.dir} is not a directory", file=sys.stderr)
        return 2
    if args.plot is not None and not args.plot.lower().endswith((".png", ".pdf", ".svg")):
        print(f"tfdp-runs: error: --plot: expected a .png, .pdf or .svg file, got {args.plot}",
              file=sys.stderr)
        return 2
    root = os.path.abspath(args.dir)
    rows = [summarize(d, args.radius) for d in find_runs(root)]
    if not rows:
        print(f"tfdp-runs: no run directories (folders with config.json) under {args.dir}",
              file=sys.stderr)
        return 1
    text = {"table": format_console, "csv": format_csv,
            "markdown": format_markdown}[args.format](rows, root, args.radius)
    sys.stdout.write(text.rstrip("\n") + "\n")
    if args.plot:
        print(f"wrote {plot(rows, args.plot)}", file=sys.stderr)
    return 0


def run() -> None:
    """Console-script entry point (tfdp-runs)."""
    sys.exit(main())


if __name__ == "__main__":
    run()
