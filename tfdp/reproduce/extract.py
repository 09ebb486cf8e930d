"""Metric extractors (job outputs -> our value) and verdicts (our value vs the published one).

An extractor receives `outs`: role -> list of job outputs (one per seed) as stored in the job
JSONs (`train`: metrics/ledger; `evaluate`: evaluation.json; `audit`: its CSV rows; `bench`:
its JSON; `python`: the returned dict), and the row's parameters. It returns a `Value`, or
None when this scale's jobs do not cover the row (e.g. a GPM cell outside the smoke grid).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any, Callable

from tfdp.reproduce.registry import Row

VERDICTS = ("reproduced", "within band", "ordering holds", "not reproduced")
NOT_RUN = "not run at this scale"
RECORDED = "recorded"
NOT_AVAILABLE = "not available in this build"


@dataclasses.dataclass
class Value:
    """Our measurement for a row.

    Attributes:
      value: the number compared with the published one (None for check-only rows).
      text: how the report prints it.
      per_seed: the value of each seed (several seeds), else [value].
      ok: the extractor's own pass/fail for `check` criteria, else None.
      detail: a short explanation (which cells failed, the spread, ...).
    """

    value: float | None
    text: str
    per_seed: list[float] = dataclasses.field(default_factory=list)
    ok: bool | None = None
    detail: str = ""


def _fmt(v: float, unit: str = "") -> str:
    if unit in ("%", " pts"):
        return f"{v:.2f}{unit}"
    if v == 0 or 1e-3 <= abs(v) < 1e5:
        return f"{v:.6g}"
    return f"{v:.4g}"


def _acc(out: dict) -> float:
    return 100.0 * float(out["metrics"]["test_accuracy"])


def _mean(xs: list[float]) -> float:
    return float(statistics.fmean(xs))


def _seed_text(per_seed: list[float], unit: str) -> str:
    if len(per_seed) <= 1:
        return _fmt(per_seed[0], unit)
    sd = statistics.stdev(per_seed)
    return f"{_fmt(_mean(per_seed), unit)} ± {sd:.2f} ({len(per_seed)} seeds)"


def accuracy(outs, row: Row) -> Value:
    """Mean over seeds of the final test accuracy (%) of role `run`."""
    per = [_acc(o) for o in outs["run"]]
    return Value(_mean(per), _seed_text(per, "%"), per)


def accuracy_recorded(outs, row: Row) -> Value:
    """A recorded accuracy with no published number."""
    return accuracy(outs, row)


def accuracy_mean(outs, row: Row) -> Value:
    """Mean over roles (an eps grid) of each role's mean accuracy."""
    means = {r: _mean([_acc(o) for o in os]) for r, os in sorted(outs.items())}
    m = _mean(list(means.values()))
    detail = ", ".join(f"{r}: {v:.2f}" for r, v in means.items())
    return Value(m, f"{m:.2f}%", [m], detail=detail)


def accuracy_diff(outs, row: Row) -> Value:
    """Accuracy of role a minus role b (points), seeds averaged first."""
    a = _mean([_acc(o) for o in outs["a"]])
    b = _mean([_acc(o) for o in outs["b"]])
    return Value(a - b, f"{a - b:+.2f} pts ({a:.2f}% vs {b:.2f}%)", [a - b])


def closed(outs, row: Row) -> Value:
    """One named value of a closed-form job."""
    v = float(outs["cf"][0]["result"][row.param["key"]])
    return Value(v, _fmt(v), [v])


def closed_all(outs, row: Row) -> Value:
    """All named booleans of a closed-form job must be true."""
    res = outs["cf"][0]["result"]
    flags = {k: bool(res[k]) for k in row.param["keys"]}
    ok = all(flags.values())
    return Value(None, "yes" if ok else "no", ok=ok,
                 detail=", ".join(f"{k} = {v}" for k, v in flags.items()))


def _hist_rows(outs) -> list[dict]:
    return outs["hist"][0]["csv"]["gpm_hist.csv"]


def _close(a: float, b: float) -> bool:
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)


def gpm_hist_cell(outs, row: Row) -> Value | None:
    """GPM Figure 5 cell: success per d, each within max(3 SE, 0.02) of the exact oracle.

    The tolerance is the spec's R1 (gpm.md §8.2): 3 binomial standard errors of the oracle
    success p at the cell's number of trials n, sqrt(p (1 - p) / n), floored at 0.02.
    """
    cells = [r for r in _hist_rows(outs)
             if _close(r["epsilon"], row.param["epsilon"]) and _close(r["beta"], row.param["beta"])]
    if not cells:
        return None
    cells.sort(key=lambda r: float(r["d"]))
    bad = []
    for r in cells:
        p, n = float(r["oracle_exact"]), float(r["trials"])
        tol = max(3.0 * math.sqrt(p * (1.0 - p) / n), 0.02)
        if abs(float(r["success_rate"]) - p) > tol:
            bad.append(f"d = {int(float(r['d']))}: {float(r['success_rate']):.3f} vs oracle "
                       f"{p:.3f} (tolerance {tol:.3f})")
    rates = [float(r["success_rate"]) for r in cells]
    ds = "/".join(str(int(float(r["d"]))) for r in cells)
    text = (f"{min(rates):.3f}-{max(rates):.3f}" if len(rates) > 1 else f"{rates[0]:.3f}")
    text += f" (d = {ds}; oracle {float(cells[0]['oracle_exact']):.3f}, " \
            f"{int(float(cells[0]['trials']))} trials)"
    return Value(_mean(rates), text, rates, ok=not bad, detail="; ".join(bad))


def gpm_hist_l2(outs, row: Row) -> Value | None:
    """GPM Table 4 cell: our RMS L2 error at beta = 1e-4, within 1.5% of sigma sqrt(d)."""
    cells = [r for r in _hist_rows(outs)
             if int(float(r["d"])) == row.param["d"] and _close(r["epsilon"], row.param["epsilon"])
             and _close(r["beta"], 1e-4)]
    if not cells:
        return None
    r = cells[0]
    ours = float(r[f"l2_error_{row.param['which']}"])
    expect = float(r["l2_error_expected"])
    rel = abs(ours / expect - 1.0)
    return Value(ours, f"{ours:.1f} ({100 * rel:.2f}% from sigma sqrt(d) = {expect:.1f})",
                 [ours], ok=rel <= 0.015)


def _dpsgd_rows(outs) -> list[dict]:
    out = outs["dpsgd"][0]["csv"]
    return [r for name, rows in sorted(out.items()) if name.startswith("gpm_dpsgd")
            for r in rows]


def gpm_dpsgd_cells(outs, row: Row) -> Value | None:
    """GPM Figure 6 / Table 2: the success range over (C, eps*) at one phase and beta."""
    phase, beta = row.param["phase"], row.param["beta"]
    cells = [r for r in _dpsgd_rows(outs)
             if (phase is None or r["phase"] == phase) and _close(r["beta"], beta)]
    if not cells:
        return None
    rates = [float(r["success_rate"]) for r in cells]
    low, high = row.param["low"], row.param["high"]
    ok = (low is None or min(rates) >= low) and (high is None or max(rates) <= high)
    trials = int(float(cells[0]["trials"]))
    oracle = [float(r["oracle_mean"]) for r in cells]
    return Value(_mean(rates), f"{min(rates):.2f}-{max(rates):.2f} ({len(cells)} cells, "
                 f"{trials} trials each; oracle {min(oracle):.2f}-{max(oracle):.2f})", rates,
                 ok=ok)


def gpm_dpsgd_gap(outs, row: Row) -> Value | None:
    """Mean success over cells: not converged minus converged."""
    rows = _dpsgd_rows(outs)
    nc = [float(r["success_rate"]) for r in rows if r["phase"] == "not_converged"]
    c = [float(r["success_rate"]) for r in rows if r["phase"] == "converged"]
    if not nc or not c:
        return None
    gap = _mean(nc) - _mean(c)
    return Value(gap, f"{gap:+.3f} ({_mean(nc):.3f} vs {_mean(c):.3f})", [gap])


def gpm_dpsgd_dq(outs, row: Row) -> Value | None:
    """Median ||dq|| at one phase and clip norm."""
    cells = [r for r in _dpsgd_rows(outs) if r["phase"] == row.param["phase"]
             and _close(r["clip_norm"], row.param["clip"])]
    if not cells:
        return None
    v = float(cells[0]["median_dq_norm"])
    return Value(v, f"{v:.3g}", [v])


def bench_ratio(outs, row: Row) -> Value:
    """tfdp-bench gpm: GPM / GM sampling-time ratio."""
    v = float(outs["bench"][0]["result"]["ratio"])
    return Value(v, f"{v:.3f}", [v])


# HGM / StoBatch extractors over evaluation.json (tfdp.evaluate.evaluate_run summaries).

def _size_key(size: str) -> str:
    from tfdp import evaluate  # pylint: disable=import-outside-toplevel
    return evaluate.size_key(float(size))


def _attack_mean(summary: dict, size: str, field: str) -> float:
    key = _size_key(size)
    vals = [entry[key][field] for entry in summary["attacks"].values() if key in entry]
    if not vals or any(v is None for v in vals):
        raise ValueError(f"evaluation has no {field} at attack size {size}")
    return 100.0 * _mean([float(v) for v in vals])


def _role_mean(outs, role: str, size: str, field: str = "accuracy") -> float:
    return _mean([_attack_mean(o["evaluation"], size, field) for o in outs[role]])


def attack_accuracy(outs, row: Row) -> Value:
    """Conventional accuracy under attack at `size`, averaged over attacks and seeds."""
    per = [_attack_mean(o["evaluation"], row.param["size"], "accuracy") for o in outs["run"]]
    return Value(_mean(per), _seed_text(per, "%"), per)


def certified_accuracy(outs, row: Row) -> Value:
    """Certified accuracy at `size`, averaged over attacks and seeds."""
    per = [_attack_mean(o["evaluation"], row.param["size"], "certified_accuracy")
           for o in outs["run"]]
    return Value(_mean(per), _seed_text(per, "%"), per)


def attack_drop(outs, row: Row) -> Value:
    """Accuracy at the first size minus accuracy at the last (points)."""
    first, last = row.param["sizes"].split(",")[0], row.param["sizes"].split(",")[-1]
    drop = _role_mean(outs, "run", first) - _role_mean(outs, "run", last)
    return Value(drop, f"{drop:.2f} pts", [drop])


def _gap(outs, sizes: list[str], field: str) -> tuple[float, list[float]]:
    a_roles = sorted(r for r in outs if r.startswith("a"))
    diffs = []
    for ra in a_roles:
        rb = "b" + ra[1:]
        for s in sizes:
            diffs.append(_role_mean(outs, ra, s, field) - _role_mean(outs, rb, s, field))
    return _mean(diffs), diffs


def attack_gap(outs, row: Row) -> Value:
    """Mean over paired roles (a*, b*) of the accuracy-under-attack difference (points)."""
    gap, diffs = _gap(outs, [row.param["size"]], "accuracy")
    return Value(gap, f"{gap:+.2f} pts over {len(diffs)} cells", diffs)


def certified_gap(outs, row: Row) -> Value:
    """Mean over attack sizes of the certified-accuracy difference a - b (points)."""
    gap, diffs = _gap(outs, row.param["sizes"].split(","), "certified_accuracy")
    return Value(gap, f"{gap:+.2f} pts over {len(diffs)} cells", diffs)


def eot_soundness(outs, row: Row) -> Value:
    """Soundness of the certificates: the certified (noisy, Monte-Carlo) classifier attacked
    with EOT gradients at the certified size keeps at least its certified accuracy.

    For each attack size s: the Monte-Carlo accuracy under the EOT attack must not fall below
    the clean certified accuracy at s by more than the bound's statistical slack,
    alpha + 3 sqrt(p (1 - p) / n): each certificate fails with probability at most alpha
    (the confidence bound), and the n evaluated examples add binomial sampling error
    (3 standard errors of the certified fraction p).
    """
    failures, worst = [], math.inf
    for o in outs["run"]:
        summary = o["evaluation"]
        n = int(summary["num_examples"])
        alpha = float(summary.get("alpha") or 0.05)
        certified = summary.get("clean_certified_accuracy") or {}
        for name, entry in summary["attacks"].items():
            for key, cell in entry.items():
                if key not in certified or certified[key] is None:
                    continue
                p = float(certified[key])
                slack = alpha + 3.0 * math.sqrt(max(p * (1.0 - p), 1.0 / n) / n)
                margin = float(cell["accuracy"]) - (p - slack)
                worst = min(worst, margin)
                if margin < 0:
                    failures.append(f"{name} at {key}: accuracy {float(cell['accuracy']):.3f} < "
                                    f"certified {p:.3f} - slack {slack:.3f}")
    if worst == math.inf:
        raise ValueError("evaluation has no certified accuracy (run with --certify)")
    return Value(worst, f"smallest margin {worst:+.3f}", [worst], ok=not failures,
                 detail="; ".join(failures))


EXTRACTORS: dict[str, Callable[[dict, Row], Value | None]] = {
    f.__name__: f for f in (accuracy, accuracy_recorded, accuracy_mean, accuracy_diff, closed,
                            closed_all, gpm_hist_cell, gpm_hist_l2, gpm_dpsgd_cells,
                            gpm_dpsgd_gap, gpm_dpsgd_dq, bench_ratio, attack_accuracy,
                            certified_accuracy, attack_drop, attack_gap, certified_gap,
                            eot_soundness)}


def verdict(row: Row, value: Value) -> tuple[str, str]:
    """(verdict, reason) of our value against the row's criterion.

    Verdicts: "reproduced" (closed forms and checks that pass), "within band" (a measured
    number inside its tolerance), "ordering holds" (a sign or ordering), "not reproduced"
    (with the reason: how far off, and the row's note on why a gap is expected).
    """
    c = row.criterion
    v = value.value
    note = f" ({row.note})" if row.note else ""
    unit = " pts" if row.unit == "%" else row.unit  # accuracy differences are points
    if c.kind == "record":
        return RECORDED, c.describe(unit)
    if c.kind == "check":
        if value.ok is None:
            raise ValueError(f"row {row.id}: a check criterion needs the extractor's ok")
        if value.ok:
            return "reproduced", c.describe(unit)
        return "not reproduced", f"fails: {c.describe(unit)}" + (
            f"; {value.detail}" if value.detail else "") + note
    if v is None or not math.isfinite(v):
        return "not reproduced", f"no finite value{note}"
    if c.kind == "band":
        gap = v - row.published
        if abs(gap) <= c.tol:
            # A closed form equal to the printed digits is reproduced, not merely close.
            return ("reproduced" if row.extractor.startswith("closed") else "within band"), f"gap {gap:+.3g}{unit}, band ±{c.tol:g}{unit}"
        return "not reproduced", f"gap {gap:+.3g}{unit}, outside ±{c.tol:g}{unit}{note}"
    if c.kind == "relerr":
        rel = abs(v - row.published) / abs(row.published)
        if rel <= c.tol:
            return "reproduced", f"relative error {rel:.2g}"
        return "not reproduced", f"relative error {rel:.2g} > {c.tol:g}{note}"
    if c.kind == "range":
        ok = (c.low is None or v >= c.low) and (c.high is None or v <= c.high)
        if ok:
            return ("reproduced" if row.published is None else "within band"), c.describe(unit)
        return "not reproduced", f"fails: {c.describe(unit)} (ours {_fmt(v)}){note}"
    if c.kind == "positive":
        if v <= 0:
            return "not reproduced", f"ordering fails: difference {_fmt(v)}{unit}{note}"
        if (c.low is not None and v < c.low) or (c.high is not None and v > c.high):
            return "not reproduced", (f"sign holds, magnitude {_fmt(v)}{unit} outside "
                                      f"[{c.low:g}, {c.high:g}]{note}")
        return "ordering holds", c.describe(unit)
    raise ValueError(f"row {row.id}: unknown criterion kind {c.kind!r}")


def extract(row: Row, outs: dict[str, list[dict]]) -> Value | None:
    """Runs the row's extractor.

    Raises:
      KeyError: if the row names an unknown extractor.
    """
    return EXTRACTORS[row.extractor](outs, row)


def as_jsonable(value: Any) -> Any:
    """Replaces non-finite floats by strings so the JSON stays standard."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: as_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_jsonable(v) for v in value]
    return value
