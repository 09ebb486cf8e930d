"""Metric extractors (job outputs -> our value); the verdicts are in `verdicts`.

An extractor receives `outs`: role -> list of job outputs (one per seed) as stored in the job
JSONs (`train`: metrics/ledger; `evaluate`: evaluation.json; `audit`: its CSV rows; `bench`:
its JSON; `python`: the returned dict), and the row's parameters. It returns a `Value`, or
None when this scale's jobs do not cover the row (e.g. a GPM cell outside the smoke grid).
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable

from tfdp import registry as _papers
from tfdp.reproduce.registry import Row
from tfdp.reproduce.values import Value, _fmt


def _acc(out: dict) -> float:
    return 100.0 * float(out["metrics"]["test_accuracy"])


def _mean(xs: list[float]) -> float:
    return float(statistics.fmean(xs))


def mean(xs: list[float]) -> float:
    """The mean of the values (float), for extractors of papers."""
    return _mean(xs)


def close(a: float, b: float) -> bool:
    """Whether two grid parameters (read back from a CSV) are the same number."""
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)


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
    """Mean over roles (an eps grid) of each role's mean accuracy.

    With the same number (> 1) of seeds in every role, `per_seed` holds each seed's mean over
    the grid (the runs of a role are in seed order), so the row shows its spread over seeds
    like any other row; else the one grid mean.
    """
    accs = {r: [_acc(o) for o in os] for r, os in sorted(outs.items())}
    means = {r: _mean(v) for r, v in accs.items()}
    m = _mean(list(means.values()))
    detail = ", ".join(f"{r}: {v:.2f}" for r, v in means.items())
    counts = {len(v) for v in accs.values()}
    if len(counts) == 1 and min(counts) > 1:
        per = [_mean([v[i] for v in accs.values()]) for i in range(min(counts))]
        return Value(m, _seed_text(per, "%"), per, detail=detail)
    return Value(m, f"{m:.2f}%", [m], detail=detail)


def accuracy_diff(outs, row: Row) -> Value:
    """Accuracy of role a minus role b (points), mean over seeds.

    With several seeds of both roles the differences are paired by seed (both runs of a
    seed share the data order), so `per_seed` holds one difference per seed and the row's
    spread is the spread of the differences.
    """
    pa, pb = [_acc(o) for o in outs["a"]], [_acc(o) for o in outs["b"]]
    a, b = _mean(pa), _mean(pb)
    per = ([x - y for x, y in zip(pa, pb)] if len(pa) == len(pb) and len(pa) > 1
           else [a - b])
    spread = ""
    if len(per) > 1:
        spread = f", seed sd {statistics.stdev(per):.2f} over {len(per)} seeds"
    return Value(a - b, f"{a - b:+.2f} pts ({a:.2f}% vs {b:.2f}%{spread})", per)


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


def bench_ratio(outs, row: Row) -> Value:
    """tfdp-bench gpm: GPM / GM sampling-time ratio."""
    v = float(outs["bench"][0]["result"]["ratio"])
    return Value(v, f"{v:.3f}", [v])


# HGM / StoBatch extractors over evaluation.json (tfdp.evaluate.evaluate_run summaries).

def _size_key(size: str) -> str:
    # lazy: loads scipy; importing tfdp.reproduce.extract does not
    from tfdp import evaluate  # pylint: disable=import-outside-toplevel
    return evaluate.size_key(float(size))


# Names of the certified accuracy on attacked inputs: sound, claimed (unsound certificate,
# tfdp.evaluate), and the name evaluation.json files written before the distinction used.
_CERTIFIED_FIELDS = ("certified_accuracy_on_attacked_inputs",
                     "claimed_certified_accuracy_on_attacked_inputs", "certified_accuracy")


def _field(cell: dict, field: str):
    """cell[field]; a certified field falls back to the claimed (unsound) name.

    Evaluations run with --allow_unsound_certificates store the paper's unsound certificates
    as `claimed_certified_accuracy_on_attacked_inputs` (and
    `clean_claimed_certified_accuracy`).
    """
    if field == "certified_accuracy":
        for name in _CERTIFIED_FIELDS:
            if name in cell:
                return cell[name]
        return None
    if field in cell:
        return cell[field]
    if "certified_accuracy" in field:
        return cell.get(field.replace("certified_accuracy", "claimed_certified_accuracy"))
    return None


def _clean_certified(summary: dict) -> dict:
    """Clean (claimed) certified accuracy per size, as plain numbers."""
    raw = (summary.get("clean_certified_accuracy")
           or summary.get("clean_claimed_certified_accuracy") or {})
    return {k: (v.get("value") if isinstance(v, dict) else v) for k, v in raw.items()}


def _attack_mean(summary: dict, size: str, field: str) -> float:
    key = _size_key(size)
    vals = [_field(entry[key], field) for entry in summary["attacks"].values() if key in entry]
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


def _gap(outs, sizes: list[str], field: str) -> tuple[float, list[float], bool]:
    """(mean a - b over paired roles and sizes, the values behind it, whether they are seeds).

    With several seeds of every role (the same number each), the differences are paired by
    seed, as in `accuracy_diff`: one value per seed (the mean over roles and sizes of that
    seed's differences), so the spread is the seeds'. Otherwise one value per (role pair,
    size) cell.
    """
    a_roles = sorted(r for r in outs if r.startswith("a"))
    pairs = [(ra, "b" + ra[1:]) for ra in a_roles]
    counts = {len(outs[r]) for pair in pairs for r in pair}
    if len(counts) == 1 and counts.pop() > 1:
        n = len(outs[pairs[0][0]])
        per = [_mean([_attack_mean(outs[ra][i]["evaluation"], s, field)
                      - _attack_mean(outs[rb][i]["evaluation"], s, field)
                      for ra, rb in pairs for s in sizes]) for i in range(n)]
        return _mean(per), per, True
    diffs = [_role_mean(outs, ra, s, field) - _role_mean(outs, rb, s, field)
             for ra, rb in pairs for s in sizes]
    return _mean(diffs), diffs, False


def _gap_value(gap: float, values: list[float], seeded: bool) -> Value:
    if seeded:
        return Value(gap, f"{gap:+.2f} pts (seed sd {statistics.stdev(values):.2f} over "
                          f"{len(values)} seeds, paired)", values)
    return Value(gap, f"{gap:+.2f} pts over {len(values)} cells", values, cells=True)


def attack_gap(outs, row: Row) -> Value:
    """Mean over paired roles (a*, b*) of the accuracy-under-attack difference (points);
    paired by seed when every role has the same several seeds."""
    return _gap_value(*_gap(outs, [row.param["size"]], "accuracy"))


def certified_gap(outs, row: Row) -> Value:
    """Mean over attack sizes of the certified-accuracy difference a - b (points); paired by
    seed when every role has the same several seeds."""
    return _gap_value(*_gap(outs, row.param["sizes"].split(","), "certified_accuracy"))


def eot_soundness(outs, row: Row) -> Value:
    """Soundness of the certificates: the certified (noisy, Monte-Carlo) classifier attacked
    with EOT gradients at the certified size keeps at least its certified accuracy.

    For each attack size s: the Monte-Carlo accuracy under the EOT attack must not fall below
    the clean certified accuracy at s by more than the bound's statistical slack,
    alpha + 3 sqrt(p (1 - p) / n): each certificate fails with probability at most alpha
    (the confidence bound), and the n evaluated examples add binomial sampling error
    (3 standard errors of the certified fraction p).
    """
    failures, worst, soundness_notes = [], math.inf, []
    for o in outs["run"]:
        summary = o["evaluation"]
        n = int(summary["num_examples"])
        alpha = float(summary.get("alpha") or 0.05)
        certified = _clean_certified(summary)
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
        check = summary.get("soundness_check")
        if check:  # tfdp-evaluate --soundness_check: attacks at each certified radius
            text = (f"soundness check: {check['flipped']} of {check['certified']} certified "
                    f"examples flipped, p = {float(check['p_value']):.3g}")
            if check.get("conclusive") and not check.get("passed"):
                failures.append(text + " (fails)")
            elif not check.get("conclusive"):
                soundness_notes.append(text + " (inconclusive)")
            else:
                soundness_notes.append(text + " (passes)")
    if worst == math.inf:
        raise ValueError("evaluation has no certified accuracy (run with --certify)")
    return Value(worst, f"smallest margin {worst:+.3f}", [worst], ok=not failures,
                 detail="; ".join(failures + soundness_notes))


EXTRACTORS: dict[str, Callable[[dict, Row], Value | None]] = {
    f.__name__: f for f in (accuracy, accuracy_recorded, accuracy_mean, accuracy_diff, closed,
                            closed_all, bench_ratio, attack_accuracy,
                            certified_accuracy, attack_drop, attack_gap, certified_gap,
                            eot_soundness)}


def extractor(name: str) -> Callable[[dict, Row], Value | None]:
    """The extractor named `name`: a shared one (EXTRACTORS) or one a paper declares
    (registry kind "extractor"), imported on first use.

    Raises:
      KeyError: no extractor has that name.
    """
    if name in EXTRACTORS:
        return EXTRACTORS[name]
    declared = _papers.extensions("extractor").get(name)
    if declared is None:
        raise KeyError(f"unknown extractor {name!r}: neither shared (EXTRACTORS) nor declared "
                       f"by a paper")
    return declared.load()


def extract(row: Row, outs: dict[str, list[dict]]) -> Value | None:
    """Runs the row's extractor.

    Raises:
      KeyError: if the row names an unknown extractor.
    """
    return extractor(row.extractor)(outs, row)


def as_jsonable(value: Any) -> Any:
    """Replaces non-finite floats by strings so the JSON stays standard."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: as_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_jsonable(v) for v in value]
    return value
