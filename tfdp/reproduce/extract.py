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

from tfdp import registry as _papers
from tfdp.reproduce import registry as _rows_registry
from tfdp.reproduce.registry import Row

VERDICTS = ("reproduced", "within band", "ordering holds", "not reproduced")
NOT_RUN = "not run at this scale"
RECORDED = "recorded"
NOT_AVAILABLE = "not available in this build"
# A row whose evidence cannot decide (issue 29 item 3): a model within CHANCE_MARGIN points of
# chance, or certificates that certify nothing / fewer than MIN_CERTIFIED examples. Counted
# apart from the verdicts above in the report.
INCONCLUSIVE = "inconclusive"
# A row whose definition (its jobs) changed since its JSON was written: the old number is kept
# only as `previous_value`, never presented as a result of the new definition.
STALE = "stale (rerun)"
CHANCE_MARGIN = 5.0
MIN_CERTIFIED = 20
NUM_CLASSES = {"mnist": 10, "cifar10": 10, "sample": 10, "tiny_imagenet": 30}
# Extractors whose number rests on certificates.
CERTIFIED_EXTRACTORS = ("certified_accuracy", "certified_gap", "eot_soundness")


@dataclasses.dataclass
class Value:
    """Our measurement for a row.

    Attributes:
      value: the number compared with the published one (None for check-only rows).
      text: how the report prints it.
      per_seed: the value of each seed (several seeds), else [value].
      ok: the extractor's own pass/fail for `check` criteria, else None.
      detail: a short explanation (which cells failed, the spread, ...).
      cells: per_seed holds the values of a grid's cells (sizes, eps, d), not of seeds:
        their spread is not a seed spread (sd is None).
    """

    value: float | None
    text: str
    per_seed: list[float] = dataclasses.field(default_factory=list)
    ok: bool | None = None
    detail: str = ""
    cells: bool = False

    @property
    def sd(self) -> float | None:
        """Sample standard deviation over seeds (None with fewer than 2 seeds, or cells)."""
        if self.cells:
            return None
        vals = [v for v in self.per_seed if v is not None and math.isfinite(v)]
        return float(statistics.stdev(vals)) if len(vals) >= 2 else None


@dataclasses.dataclass
class Model:
    """What one role's model was, read from its job files (the report's generated reasons).

    Attributes:
      role: the row's role (run, a, b, a0.2, ...).
      method: training method (adlm, dpsgd, secure_sgd, stobatch, ...).
      dataset: mnist | cifar10 | tiny_imagenet | sample, or "" when unknown.
      accuracy: clean test accuracy (%), mean over seeds (Monte-Carlo prediction when the
        evaluation used it), or None.
      epochs, steps: training length run (mean over seeds), or None.
      paper_epochs, paper_steps: the paper-scale flagfile's length (steps estimated for the
        same data-set size and batch), or None.
      paper_command: this scale ran the paper-scale training command itself (e.g. a recipe
        that stops when its budget is spent), so its length is the paper's.
      claimed_epsilon, sound_epsilon: the ledger's claimed and sound epsilon (None if absent).
      certified: certified examples at each of the row's attack sizes (certificate rows).
      claimed_certificates: the evaluation reported the paper's claimed (unsound)
        certificates (any `claimed_certified_accuracy*` field).
      config: the run's settings (flagfile + overrides) named in reasons.
      seed_accuracies: (seed, clean accuracy %) of each seed's model; a row is inconclusive
        when any one of them is near chance, whatever the mean.
    """

    role: str
    method: str = ""
    dataset: str = ""
    accuracy: float | None = None
    epochs: float | None = None
    steps: float | None = None
    paper_epochs: float | None = None
    paper_steps: float | None = None
    paper_command: bool = False
    claimed_epsilon: float | None = None
    sound_epsilon: float | None = None
    certified: list[int] = dataclasses.field(default_factory=list)
    claimed_certificates: bool = False
    config: dict = dataclasses.field(default_factory=dict)
    seed_accuracies: list[tuple[int | None, float]] = dataclasses.field(default_factory=list)

    @property
    def chance(self) -> float | None:
        """Chance accuracy (%) of the data set, or None when unknown."""
        k = NUM_CLASSES.get(self.dataset)
        return None if k is None else 100.0 / k

    def _near(self, acc: float | None) -> bool:
        return (acc is not None and self.chance is not None
                and acc <= self.chance + CHANCE_MARGIN)

    @property
    def seeds_near_chance(self) -> list[tuple[int | None, float]]:
        """The (seed, accuracy) of every seed's model within CHANCE_MARGIN points of chance."""
        return [(s, a) for s, a in self.seed_accuracies if self._near(a)]

    @property
    def near_chance(self) -> bool:
        """The mean clean accuracy, or any one seed's, within CHANCE_MARGIN points of chance
        (or below it): one seed's model at chance is evidence the criterion cannot use."""
        return self._near(self.accuracy) or bool(self.seeds_near_chance)


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
    """Mean over roles (an eps grid) of each role's mean accuracy."""
    means = {r: _mean([_acc(o) for o in os]) for r, os in sorted(outs.items())}
    m = _mean(list(means.values()))
    detail = ", ".join(f"{r}: {v:.2f}" for r, v in means.items())
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


def _eps(v: float | None) -> str:
    return "—" if v is None else ("inf" if not math.isfinite(v) else f"{v:.3g}")


def _name(m: Model) -> str:
    return m.method if m.role == "run" else f"{m.method} ({m.role})"


def _length_fact(models: list[Model]) -> str:
    """Training length run vs the paper's, one phrase per distinct setting."""
    out = []
    seen = set()
    for m in models:
        if m.epochs is None or m.paper_epochs is None:
            continue
        key = (m.method, m.epochs, m.steps, m.paper_epochs, m.paper_steps)
        if key in seen:
            continue
        seen.add(key)
        text = f"{_name(m)} trained {m.epochs:g} epochs"
        if m.steps is not None:
            text += f" ({m.steps:g} steps)"
        if m.paper_command:
            out.append(text + " with the paper-scale command itself (the paper's length)")
            continue
        text += f" vs the paper-scale {m.paper_epochs:g} epochs"
        if m.paper_steps:
            text += f" (about {m.paper_steps:.0f} steps)"
        if m.steps is not None and m.paper_steps:
            text += f": {100.0 * m.steps / m.paper_steps:.2g}% of the paper's steps"
        elif m.paper_epochs:
            text += f": {100.0 * m.epochs / m.paper_epochs:.2g}% of the paper's epochs"
        out.append(text)
    return "; ".join(out)


def _privacy_fact(models: list[Model]) -> str:
    """Sound vs claimed privacy setting of the models whose ledger differs."""
    out, seen = [], set()
    for m in models:
        if m.claimed_epsilon is None or m.sound_epsilon is None:
            continue
        if math.isclose(m.claimed_epsilon, m.sound_epsilon, rel_tol=1e-6):
            continue
        key = (m.method, m.claimed_epsilon, m.sound_epsilon)
        if key in seen:
            continue
        seen.add(key)
        out.append(f"{_name(m)}: claimed eps {_eps(m.claimed_epsilon)} (the paper's "
                   f"accounting), sound eps {_eps(m.sound_epsilon)} (ledger)")
    if any(m.claimed_certificates for m in models):
        out.append("certificates are the paper's claimed (unsound) ones")
    return "; ".join(out)


def _rows_hook(paper_name: str | None, name: str):
    """A paper's optional rows-module hook (`baseline_for`, `model_note`), or None."""
    paper = _papers.papers().get(paper_name or "")
    module = None if paper is None else _rows_registry.rows_module(paper)
    return getattr(module, name, None)


def _settings_text(config: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in config.items()}


def _baseline_of(row: Row, method: str, config: dict[str, Any]):
    """The Baseline its paper's rows module (`baseline_for`) gives a model's method and
    settings, or None when the paper declares none."""
    baseline_for = _rows_hook(row.paper, "baseline_for")
    return None if baseline_for is None else baseline_for(method, _settings_text(config))


def _baseline_fact(row: Row, models: list[Model]) -> str:
    """Which baseline deviates from its paper's network / settings, and how."""
    out, done = [], set()
    for declared in getattr(row, "baselines", ()) or ():
        ms = [m for m in models if m.method == declared.method]
        if not ms or declared.method in done:
            continue
        done.add(declared.method)
        got = ms[0].config
        # A row may declare several descriptions of one baseline method (one per scale: the
        # reduced scale's substitute, the full scale's paper network); the model's own
        # settings pick the one that describes it.
        spec = _baseline_of(row, declared.method, got) or declared
        diffs = []
        for key, want in spec.paper_settings:
            have = got.get(key)
            if have is not None and str(have) != str(want):
                diffs.append(f"{key} {have} (paper {want})")
        network = got.get(spec.network_flag, "?") if spec.network_flag else spec.tfdp_network
        text = (f"baseline {spec.method} runs {spec.tfdp_network} [{network}] where the paper "
                f"used {spec.paper_network}")
        if diffs:
            text += "; differs in " + ", ".join(diffs)
        if spec.note:
            text += f" ({spec.note})"
        out.append(text)
    return "; ".join(out)


def facts(row: Row, models: list[Model] | None) -> str:
    """The data-generated part of a reason: chance level, training length vs the paper's,
    sound vs claimed setting, which baseline deviates and how (issue 29 item 4)."""
    if not models:
        return ""
    parts = []
    accs = [m for m in models if m.accuracy is not None and m.chance is not None]
    if accs:
        parts.append("clean accuracy " + ", ".join(
            f"{_name(m)} {m.accuracy:.1f}%" for m in accs) +
            f" (chance {accs[0].chance:.0f}%)")
    for fn in (_length_fact, _privacy_fact):
        text = fn(models)
        if text:
            parts.append(text)
    text = _baseline_fact(row, models)
    if text:
        parts.append(text)
    text = _method_notes(models)
    if text:
        parts.append(text)
    return "; ".join(parts)


def _method_notes(models: list[Model]) -> str:
    """What the paper of each model's method says of it (its rows module's `model_note`),
    once per distinct note (named by the first model it concerns)."""
    out, seen = [], set()
    _papers.ensure_loaded()  # METHOD_PAPER is filled on first use
    for m in models:
        note = _rows_hook(_papers.METHOD_PAPER.get(m.method), "model_note")
        text = None if note is None else note(m.method, _settings_text(m.config),
                                              m.near_chance)
        if text and text not in seen:
            seen.add(text)
            out.append(f"{_name(m)}: {text}")
    return "; ".join(out)


def inconclusive(row: Row, models: list[Model] | None) -> str | None:
    """Why the row's evidence cannot decide, or None (issue 29 item 3)."""
    if not models:
        return None
    near = [m for m in models if m.near_chance]
    if near:
        out = []
        for m in near:
            if m._near(m.accuracy):  # pylint: disable=protected-access
                out.append(f"{_name(m)} is within {CHANCE_MARGIN:g} points of chance "
                           f"({m.accuracy:.1f}% clean, chance {m.chance:.0f}%)")
            else:
                seeds = ", ".join(f"seed {s} {a:.1f}%" for s, a in m.seeds_near_chance)
                out.append(f"{_name(m)}: a seed's model is within {CHANCE_MARGIN:g} points of "
                           f"chance ({seeds} clean, chance {m.chance:.0f}%; mean "
                           f"{m.accuracy:.1f}%)")
        return "; ".join(out)
    if row.extractor in CERTIFIED_EXTRACTORS:
        counts = [c for m in models for c in m.certified]
        if counts:
            most = max(counts)
            if most == 0:
                return "certifies nothing (0 certified examples at every size and model)"
            if most < MIN_CERTIFIED:
                return (f"rests on fewer than {MIN_CERTIFIED} certified examples (at most "
                        f"{most} at any size and model)")
    return None


def verdict(row: Row, value: Value, models: list[Model] | None = None,
            seeds: int | None = None) -> tuple[str, str]:
    """(verdict, reason) of our value against the row's criterion.

    Verdicts: "reproduced" (closed forms and checks that pass), "within band" (a measured
    number inside its tolerance), "ordering holds" (a sign or ordering), "not reproduced"
    (with the reason: how far off, and the row's note on why a gap is expected), or
    "inconclusive" when the evidence cannot decide (a model within 5 points of chance, or
    fewer than 20 certified examples); see `inconclusive`. `models` (from the job files)
    adds the data-generated facts to the reason (see `facts`). `seeds`: the number of seeds
    the result rests on, checked against the row's `min_seeds` (None: not checked); fewer
    make a deciding verdict inconclusive, and a recorded value says so.
    """
    verdict_, reason = _criterion_verdict(row, value)
    few = few_seeds(row, seeds)
    if few is not None and verdict_ == RECORDED:
        reason = f"{few}; {reason}"
    why = None if verdict_ == RECORDED else inconclusive(row, models)
    if few is not None and verdict_ != RECORDED:
        why = few if why is None else f"{few}; {why}"
    extra = facts(row, models)
    if models and len(value.per_seed) == 1 and row.published is not None:
        extra += ("; " if extra else "") + "one seed: the run-to-run spread is not measured"
    if why is not None:
        return INCONCLUSIVE, f"{why} (criterion alone: {verdict_}, {reason})" + (
            f"; {extra}" if extra else "")
    return verdict_, reason + (f"; {extra}" if extra else "")


def few_seeds(row: Row, seeds: int | None) -> str | None:
    """"<n> seed(s) of the <min_seeds> this row needs" when the result rests on fewer seeds
    than the row's `min_seeds`, else None."""
    if seeds is None or seeds >= row.min_seeds:
        return None
    return (f"{seeds} seed{'' if seeds == 1 else 's'} of the {row.min_seeds} this row needs: "
            f"the other seeds did not run")


def _criterion_verdict(row: Row, value: Value) -> tuple[str, str]:
    """(verdict, reason) from the criterion alone."""
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
        # The band is the published value's tolerance as it stands: a row passes only when
        # its gap is inside it. Several seeds: the 95% interval of the mean gap (2 standard
        # errors) is shown beside it, never used to widen the band (issue 39).
        sd, k = value.sd, len(value.per_seed)
        spread = ""
        if sd is not None:
            half = 2.0 * sd / math.sqrt(k)
            spread = (f"; seed sd {sd:.2g}{unit} over {k} seeds, 95% interval of the gap "
                      f"[{gap - half:+.3g}, {gap + half:+.3g}]{unit}")
        if abs(gap) <= c.tol:
            # A closed form equal to the printed digits is reproduced, not merely close.
            return (("reproduced" if row.extractor.startswith("closed") else "within band"),
                    f"gap {gap:+.3g}{unit}, band ±{c.tol:g}{unit}{spread}")
        return "not reproduced", f"gap {gap:+.3g}{unit}, outside ±{c.tol:g}{unit}{spread}{note}"
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
        sd, k = value.sd, len(value.per_seed)
        if sd is not None and abs(v) <= 2.0 * sd / math.sqrt(k):
            # Several seeds whose 95% interval of the mean difference contains zero: the
            # seeds do not decide the sign, so neither "holds" nor "fails" is shown.
            return INCONCLUSIVE, (f"difference {_fmt(v)}{unit} lies within 2 SE "
                                  f"({2.0 * sd / math.sqrt(k):.2g}{unit}) of zero, seed sd "
                                  f"{sd:.2g}{unit} over {k} seeds: the seeds do not decide "
                                  f"the sign{note}")
        if v <= 0:
            return "not reproduced", f"ordering fails: difference {_fmt(v)}{unit}{note}"
        if (c.low is not None and v < c.low) or (c.high is not None and v > c.high):
            return "not reproduced", (f"sign holds, magnitude {_fmt(v)}{unit} outside "
                                      f"[{c.low:g}, {c.high:g}]{note}")
        return "ordering holds", c.describe(unit)
    raise ValueError(f"row {row.id}: unknown criterion kind {c.kind!r}")


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
