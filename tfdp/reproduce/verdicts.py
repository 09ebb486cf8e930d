"""Verdicts (our value vs the published one) and the reasons the report gives for them.

A verdict follows the row's criterion; a row whose models sit near chance, or whose
certificates certify too few examples, is inconclusive; the facts (training length, sound vs
claimed privacy, baseline deviations, the methods' notes) explain a verdict.
"""

from __future__ import annotations

import math
from typing import Any

from tfdp import registry as _papers
from tfdp.reproduce import registry as _rows_registry
from tfdp.reproduce.registry import Row
from tfdp.reproduce.values import (CERTIFIED_EXTRACTORS, CHANCE_MARGIN, INCONCLUSIVE,
                                   MIN_CERTIFIED, RECORDED, Model, Value, _fmt)


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
