"""Privacy ledger (named entries, composition, claimed vs. sound totals); DP-SGD accounting."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Iterable, Optional

import dp_accounting
import numpy as np

from tfdp import checks
from tfdp.mechanisms import _validate
from tfdp import rundir

COMPOSITIONS = ("sequential", "parallel", "separate")
# Neighbouring relations a sound epsilon can refer to: "replace_one" (bounded DP: one record's
# value changes; the papers' sensitivity analyses) and "add_remove" (unbounded DP: one record is
# added or removed; dp_accounting's Poisson-subsampled analysis).
RELATIONS = ("replace_one", "add_remove")
ACCOUNTANTS = ("rdp", "pld")
# The default DP-SGD accountant: dp_accounting's PLDAccountant (privacy loss distributions,
# pessimistic discretisation: every rounding makes epsilon larger, truncated tail mass counts
# as a privacy failure), tighter than RDP and sound for every event a DP-SGD entry records
# (Poisson-subsampled Gaussian with add/remove-one neighbours, where it composes both the
# remove and the add direction; plain Gaussians for the shuffled per-pass bound). "rdp"
# (RdpAccountant) stays selectable.
DEFAULT_ACCOUNTANT = "pld"
# What the ledger note says about each accountant.
ACCOUNTANT_NAMES = {
    "rdp": "RDP (dp_accounting RdpAccountant)",
    "pld": "PLD (dp_accounting PLDAccountant, pessimistic discretisation 1e-4)",
}
SAMPLINGS = ("poisson", "shuffle", "shuffle_no_amplification")

# How an infinite epsilon ("no finite bound") is written in ledger.json and model cards: the
# JSON string "inf" (JSON has no infinity; Python's json would write the non-standard
# `Infinity`). `epsilon_value` reads it back.
INF_JSON = "inf"
NO_GUARANTEE = "no differential-privacy guarantee"
# Where the randomness of a run's privacy mechanisms came from (ledger and model card).
NOISE_SEEDS = ("os_entropy", "user_supplied")
NOISE_SEED_NOTES = {
    "os_entropy": ("the noise of every privacy mechanism came from at least 128 bits of OS "
                   "entropy, kept only in the run's checkpoint"),
    "user_supplied": ("the noise of every privacy mechanism was derived from a seed the user "
                      "supplied: epsilon holds only while that seed stays secret (anyone who "
                      "knows it can regenerate the noise)"),
}

_ENTRY_FIELDS = ("name", "mechanism", "epsilon", "delta", "protects", "composition", "group",
                 "claimed_epsilon", "claimed_delta", "note", "relation", "covers", "segments",
                 "dp_event")
# Fields a ledger file written before `relation` / `covers` / `segments` / `dp_event` existed
# may lack.
_OPTIONAL_DEFAULTS = {"relation": "replace_one", "covers": "", "segments": None,
                      "dp_event": None}
# Keys of one executed segment of a per-step spend (see `PrivacyLedger.record_steps`).
SEGMENT_KEYS = ("start_step", "steps", "passes", "num_examples", "batch_size",
                "noise_multiplier")

SAMPLING_NOTES = {
    "poisson": ("DP-SGD accounted with the {accountant} accountant for Poisson-subsampled "
                "Gaussian steps (q = batch_size / num_examples), add/remove-one neighbours; "
                "sound when batches are Poisson sampled."),
    "shuffle": ("DP-SGD accounted with the {accountant} accountant for Poisson subsampling, but "
                "batches were shuffled fixed-size batches: the Poisson analysis does not cover "
                "this sampling, so the number is the common practice, not a proven bound."),
    "shuffle_no_amplification": (
        "DP-SGD with shuffled fixed-size batches accounted without privacy amplification: each "
        "example is in at most one batch per pass, so each pass is one Gaussian mechanism with "
        "replace-one sensitivity 2C and noise sigma*C; passes composed with the {accountant} "
        "accountant. Sound for any batch order."),
}


class PrivacyLedger:
    """Named privacy-budget entries with sequential / parallel composition.

    Every entry carries the soundly accounted (epsilon, delta) and, where a paper claims
    something else, the claimed (epsilon, delta); `total()` and `claimed_total()` compose
    each column with the same rules:

    - "sequential": budgets add (basic composition).
    - "parallel": entries with the same `group` act on disjoint parts of the data and
      compose by the maximum epsilon and maximum delta within the group; each group then
      adds like one sequential entry.
    - "separate": recorded but not composed into the totals, because it protects a
      different neighbouring relation (e.g. PixelDP-style robustness noise, which is DP
      with respect to input pixels and does not compose with the training-data budget;
      docs/hgm.md, "Methods").

    Entries may have epsilon = 0 (no privacy cost) and epsilon = inf (no finite bound).
    """

    def __init__(self) -> None:
        self._entries: dict[str, dict] = {}
        self._noise_seed: Optional[str] = None

    @property
    def noise_seed(self) -> Optional[str]:
        """Where the run's noise came from: "os_entropy", "user_supplied" or None (unknown)."""
        return self._noise_seed

    @noise_seed.setter
    def noise_seed(self, value: Optional[str]) -> None:
        if value is not None and value not in NOISE_SEEDS:
            raise ValueError(f"noise_seed must be one of {NOISE_SEEDS} or None, got {value!r}")
        self._noise_seed = value

    def guarantee(self) -> bool:
        """True when the sound total is a finite epsilon (a differential-privacy guarantee).

        An empty ledger gives no guarantee: a model trained on the data with no accounted
        mechanism is not differentially private (its epsilon is infinite, never 0).
        """
        return bool(self._composed_entries()) and math.isfinite(self.total()[0])

    def _composed_entries(self) -> list[dict]:
        return [e for e in self._entries.values() if e["composition"] != "separate"]

    # -------------------------------------------------------------------------- entries

    def add(self, name: str, *, mechanism: str, epsilon: float, delta: float = 0.0,
            protects: str = "", composition: str = "sequential", group: Optional[str] = None,
            claimed_epsilon: Optional[float] = None, claimed_delta: Optional[float] = None,
            note: str = "", relation: str = "replace_one", covers: str = "",
            segments: Optional[list] = None, dp_event: Optional[dict] = None) -> dict:
        """Adds a named entry (one spend of privacy budget).

        Idempotence is explicit: re-adding an entry is a no-op only when it names the same
        spend, i.e. it has the same name, the same non-empty `covers` (what the spend covers,
        e.g. "setup" or "steps 0-59") and the same content. Any other re-use of a name raises,
        so a second genuine spend is never merged into the first.

        Args:
            name: unique entry name (e.g. "eps1_relevance").
            mechanism: mechanism description (e.g. "laplace", "dpsgd_rdp").
            epsilon: soundly accounted epsilon, >= 0 (inf allowed: no finite bound).
            delta: soundly accounted delta in [0, 1).
            protects: what the entry protects (e.g. "training records", "input pixels").
            composition: "sequential", "parallel" or "separate".
            group: parallel-composition group; required when composition is "parallel".
            claimed_epsilon: what the paper claims for this entry, if different.
            claimed_delta: the paper's delta for this entry, if different.
            note: free text (assumptions the number rests on).
            relation: neighbouring relation of the sound (epsilon, delta): "replace_one"
                (default; one record's value changes) or "add_remove" (one record added or
                removed).
            covers: what this spend covers (e.g. "setup", "steps 0-59"); a re-add with the
                same non-empty `covers` and content is recognised as a replay.
            segments: for per-step spends, the executed segments (see `record_steps`).
            dp_event: for per-step spends, the dp_accounting event of the sound epsilon in its
                JSON form (`event_to_json`); it must be the event of `segments` (None when the
                spend is unbounded). `record_steps` sets it.

        Returns:
            A copy of the stored entry.

        Raises:
            ValueError: on invalid arguments, or a re-use of `name` that is not a replay.
        """
        entry = _make_entry(name, mechanism=mechanism, epsilon=epsilon, delta=delta,
                            protects=protects, composition=composition, group=group,
                            claimed_epsilon=claimed_epsilon, claimed_delta=claimed_delta,
                            note=note, relation=relation, covers=covers, segments=segments,
                            dp_event=dp_event)
        existing = self._entries.get(entry["name"])
        if existing is not None:
            if entry["covers"] and existing["covers"] == entry["covers"]:
                if _same_entry(existing, entry):
                    return dict(existing)  # a replay of the same spend
                raise ValueError(f"name: entry {entry['name']!r} covering {entry['covers']!r} "
                                 f"already exists with different content ({existing} vs "
                                 f"{entry})")
            raise ValueError(
                f"name: entry {entry['name']!r} already exists (covers "
                f"{existing['covers'] or 'unspecified'!r}); a second spend needs its own name, "
                "and a replay of the same spend must carry the same non-empty `covers`")
        self._entries[entry["name"]] = entry
        return dict(entry)

    def record_steps(self, name: str, *, segments: list, delta: float, sampling: str,
                     accountant: str = DEFAULT_ACCOUNTANT, protects: str = "training records",
                     claimed_epsilon: Optional[float] = None, note: str = "",
                     unbounded: bool = False) -> dict:
        """Creates or extends the entry of a per-step (DP-SGD style) spend from what executed.

        The entry's epsilon is the composition of every executed segment (a segment is a
        stretch of steps run with one batch size, sampling rate q = batch_size / num_examples
        and noise multiplier sigma, e.g. one start or resume of a run), so it is the epsilon
        of the computation that ran, whatever was planned. Calling it again with the same
        segments is a no-op; with more segments or a longer last segment it replaces the
        entry; segments can never be dropped or shortened (the spend never shrinks).

        Args:
            name: entry name (e.g. "dpsgd").
            segments: list of dicts with keys `SEGMENT_KEYS`: start_step (global index of the
                first step), steps (steps executed), passes (epochs in which those steps ran;
                each is one pass over the data for shuffled batches), num_examples,
                batch_size and noise_multiplier.
            delta: target delta in (0, 1).
            sampling: "poisson" (sound for Poisson lots; add/remove-one) or "shuffle"
                (shuffled fixed-size batches: the sound value is the per-pass bound without
                amplification, replace-one; the Poisson number is recorded as claimed).
            accountant: "rdp" or "pld".
            protects: what the entry protects.
            claimed_epsilon: overrides the claimed value (default: see `sampling`).
            note: appended to the generated note.
            unbounded: the steps do not bound one record's influence (e.g. clipping of a
                batch-mean gradient): the sound epsilon is infinite and the accountant's value
                is recorded as claimed only; `note` should say why.

        Returns:
            A copy of the stored entry.

        Raises:
            ValueError: on invalid segments or arguments, or segments that do not extend the
                existing entry's.
        """
        segs = [_check_segment(seg, i) for i, seg in enumerate(segments)]
        if sampling not in ("poisson", "shuffle"):
            raise ValueError(f"sampling must be 'poisson' or 'shuffle', got {sampling!r}")
        if accountant not in ACCOUNTANTS:
            raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
        dlt = _validate.check_delta(delta)
        poisson_eps = segments_epsilon(segs, delta=dlt, accountant=accountant,
                                       sampling="poisson")
        if sampling == "poisson":
            sound, claimed, relation = poisson_eps, claimed_epsilon, "add_remove"
            text = SAMPLING_NOTES["poisson"].format(accountant=ACCOUNTANT_NAMES[accountant])
        else:
            sound = segments_epsilon(segs, delta=dlt, accountant=accountant,
                                     sampling="shuffle_no_amplification")
            claimed = poisson_eps if claimed_epsilon is None else claimed_epsilon
            relation = "replace_one"
            acc_name = ACCOUNTANT_NAMES[accountant]
            text = (SAMPLING_NOTES["shuffle"].format(accountant=acc_name) + " Sound value: "
                    + SAMPLING_NOTES["shuffle_no_amplification"].format(accountant=acc_name))
        if unbounded:
            claimed = poisson_eps if claimed_epsilon is None else claimed_epsilon
            sound = math.inf
            text = ("Sound value: unbounded (no finite epsilon: one record's influence on a step "
                    "is not bounded). Claimed: " + text)
        parts = [f"[{s['start_step']}, {s['start_step'] + s['steps']}): q={s['batch_size']}/"
                 f"{s['num_examples']}, sigma={s['noise_multiplier']:.6g}, {s['passes']} "
                 "pass(es)" for s in segs]
        text += (" Composed over the executed segments: " + "; ".join(parts)
                 + f"; delta={dlt:.3g}.") if segs else " No step has executed yet."
        if note:
            text += " " + note
        covers = "steps " + ", ".join(f"{s['start_step']}-{s['start_step'] + s['steps']}"
                                      for s in segs) if segs else "steps none"
        existing = self._entries.get(name)
        if existing is not None:
            old = existing.get("segments")
            if old is None:
                raise ValueError(f"name: entry {name!r} exists and is not a per-step spend")
            if not _extends(old, segs):
                raise ValueError(f"segments: the segments of {name!r} may only grow ({old} -> "
                                 f"{segs})")
            if old == segs:
                return dict(existing)
            del self._entries[name]
        event = None if unbounded else event_to_json(dp_accounting.ComposedDpEvent(
            _segment_events(segs, _EVENT_SAMPLING[relation])))
        try:
            return self.add(name, mechanism=f"dpsgd_{accountant}", epsilon=sound, delta=dlt,
                            protects=protects, composition="sequential",
                            claimed_epsilon=claimed, note=text, relation=relation,
                            covers=covers, segments=segs, dp_event=event)
        except ValueError:
            if existing is not None:
                self._entries[name] = existing
            raise

    def add_dpsgd(self, name: str, *, num_examples: int, batch_size: int,
                  noise_multiplier: float, delta: float, epochs: Optional[float] = None,
                  steps: Optional[int] = None, accountant: str = DEFAULT_ACCOUNTANT,
                  sampling: str = "poisson", protects: str = "training records",
                  claimed_epsilon: Optional[float] = None, note: str = "") -> dict:
        """Adds a DP-SGD entry whose epsilon comes from `dpsgd_epsilon`.

        For sampling="shuffle" the sound epsilon is the no-amplification bound and the
        Poisson-analysis number (what papers usually report) is the claimed epsilon, unless
        `claimed_epsilon` is given. The note states which assumption each number rests on.

        Returns:
            A copy of the stored entry.

        Raises:
            ValueError: on invalid arguments (see `dpsgd_epsilon`).
        """
        kwargs = dict(num_examples=num_examples, batch_size=batch_size,
                      noise_multiplier=noise_multiplier, epochs=epochs, steps=steps,
                      delta=delta, accountant=accountant)
        if sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
        if sampling == "shuffle":
            poisson_eps = dpsgd_epsilon(sampling="shuffle", **kwargs)
            sound_eps = dpsgd_epsilon(sampling="shuffle_no_amplification", **kwargs)
            claimed = poisson_eps if claimed_epsilon is None else claimed_epsilon
            acc_name = ACCOUNTANT_NAMES[accountant]
            text = (SAMPLING_NOTES["shuffle"].format(accountant=acc_name) + " Sound value: "
                    + SAMPLING_NOTES["shuffle_no_amplification"].format(accountant=acc_name))
        else:
            sound_eps = dpsgd_epsilon(sampling=sampling, **kwargs)
            claimed = claimed_epsilon
            text = SAMPLING_NOTES[sampling].format(accountant=ACCOUNTANT_NAMES[accountant])
        q = batch_size / num_examples
        n_steps = _resolve_steps(num_examples, batch_size, epochs, steps)
        text += (f" q={q:.6g}, steps={n_steps}, noise_multiplier={noise_multiplier:.6g}, "
                 f"delta={delta:.3g}.")
        if note:
            text += " " + note
        return self.add(name, mechanism=f"dpsgd_{accountant}", epsilon=sound_eps, delta=delta,
                        protects=protects, composition="sequential",
                        claimed_epsilon=claimed, claimed_delta=None, note=text,
                        relation="add_remove" if sampling == "poisson" else "replace_one",
                        covers=f"steps 0-{n_steps}")

    @property
    def entries(self) -> list[dict]:
        """Copies of the entries in insertion order."""
        return [dict(e) for e in self._entries.values()]

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def get(self, name: str) -> dict:
        """The entry called `name`.

        Raises:
            ValueError: if there is no such entry.
        """
        if name not in self._entries:
            raise ValueError(f"name: no ledger entry called {name!r}")
        return dict(self._entries[name])

    # -------------------------------------------------------------------------- totals

    def total(self) -> tuple[float, float]:
        """Soundly accounted (epsilon, delta) over all non-"separate" entries.

        Entries of different neighbouring relations are not added as they are: when both
        occur, add/remove-one entries are converted to replace-one first (group privacy for
        a group of two: (eps, delta) -> (2 eps, (1 + e^eps) delta)); `relation()` says which
        relation the total refers to.
        """
        if not self._composed_entries():
            return math.inf, 0.0  # nothing accounted: no guarantee (never epsilon = 0)
        return _compose(self._entries.values(), claimed=False)

    def relation(self) -> str:
        """Neighbouring relation of `total()`: "replace_one", or "add_remove" when every
        composed entry uses add/remove-one."""
        return _total_relation(self._entries.values())

    def claimed_total(self) -> tuple[float, float]:
        """(epsilon, delta) as the papers claim, falling back to the sound value per entry."""
        if not self._composed_entries():
            return math.inf, 0.0
        return _compose(self._entries.values(), claimed=True)

    def differs(self) -> bool:
        """True when the claimed total is not the sound total."""
        return not (_close(self.total()[0], self.claimed_total()[0])
                    and _close(self.total()[1], self.claimed_total()[1]))

    # -------------------------------------------------------------------------- I/O

    def to_dict(self) -> dict:
        """JSON-ready dict: sound totals, entries, claimed totals and whether they differ.

        An infinite epsilon is the string "inf" (`INF_JSON`; read numbers back with
        `epsilon_value`). Without a finite sound total, "guarantee" is false and "note" says
        "no differential-privacy guarantee". "noise_seed" says where the noise came from.
        """
        eps, dlt = self.total()
        c_eps, c_dlt = self.claimed_total()
        out = {
            "epsilon": _json_eps(eps),
            "delta": dlt,
            "claimed_epsilon": _json_eps(c_eps),
            "claimed_delta": c_dlt,
            "differs": self.differs(),
            "relation": self.relation(),
            "guarantee": self.guarantee(),
            "entries": [_json_entry(e) for e in self._entries.values()],
        }
        if not out["guarantee"]:
            out["note"] = (NO_GUARANTEE + ": the sound epsilon is infinite ("
                           + ("nothing protects the training data"
                              if not self._composed_entries() else
                              "an entry has no finite bound: see its note") + ")")
        if self._noise_seed is not None:
            out["noise_seed"] = self._noise_seed
            out["noise_seed_note"] = NOISE_SEED_NOTES[self._noise_seed]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "PrivacyLedger":
        """Rebuilds a ledger from `to_dict()` output and checks the stored totals.

        Raises:
            ValueError: if data is malformed or its totals disagree with its entries.
        """
        if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
            raise ValueError("data must be a dict with an 'entries' list")
        ledger = cls()
        for e in data["entries"]:
            if not isinstance(e, dict) or "name" not in e:
                raise ValueError(f"data: malformed entry {e!r}")
            unknown = set(e) - set(_ENTRY_FIELDS)
            if unknown:
                raise ValueError(f"data: entry {e['name']!r} has unknown fields {sorted(unknown)}")
            if e["name"] in ledger:
                # Never merged: two entries under one name may be two genuine spends.
                raise ValueError(f"data: entry {e['name']!r} appears more than once; each spend "
                                 "needs its own name")
            kwargs = {k: e[k] for k in _ENTRY_FIELDS if k in e and k != "name"}
            ledger.add(e["name"], **kwargs)
        if data.get("noise_seed") is not None:
            ledger.noise_seed = data["noise_seed"]
        for key, value in (("epsilon", ledger.total()[0]), ("delta", ledger.total()[1]),
                           ("claimed_epsilon", ledger.claimed_total()[0]),
                           ("claimed_delta", ledger.claimed_total()[1])):
            try:
                stored = epsilon_value(data[key]) if key in data else value
            except ValueError as e:
                raise ValueError(f"data: stored {key} {data[key]!r} is not a number") from e
            if not _close(stored, value):
                raise ValueError(f"data: stored {key} {data[key]!r} does not match the entries "
                                 f"({value!r})")
        if "relation" in data and data["relation"] != ledger.relation():
            raise ValueError(f"data: stored relation {data['relation']!r} does not match the "
                             f"entries ({ledger.relation()!r})")
        return ledger

    def save(self, path: str) -> str:
        """Writes the ledger as JSON atomically; returns the path (inf is written as "inf")."""
        return rundir.write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str) -> "PrivacyLedger":
        """Reads a ledger written by `save`.

        Raises:
            ValueError: if the file content is not a valid ledger.
        """
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: cannot read the privacy ledger ({e})") from e
        try:
            return cls.from_dict(data)
        except ValueError as e:
            raise ValueError(f"{path}: not a valid privacy ledger ({e})") from e

    def summary(self) -> str:
        """A short human-readable account, one line per entry plus the totals."""
        lines = []
        for e in self._entries.values():
            claimed = ""
            if e["claimed_epsilon"] is not None or e["claimed_delta"] is not None:
                c_eps = e["epsilon"] if e["claimed_epsilon"] is None else e["claimed_epsilon"]
                c_dlt = e["delta"] if e["claimed_delta"] is None else e["claimed_delta"]
                claimed = f" (paper claims eps={c_eps:.4g}, delta={c_dlt:.3g})"
            grp = f"[{e['group']}]" if e["group"] else ""
            lines.append(f"{e['name']}: {e['mechanism']} eps={e['epsilon']:.4g} "
                         f"delta={e['delta']:.3g} {e['composition']}{grp}{claimed}")
        eps, dlt = self.total()
        lines.append(f"total (sound): eps={eps:.4g} delta={dlt:.3g}"
                     + ("" if self.guarantee() else f" -- {NO_GUARANTEE}"))
        if self.differs():
            c_eps, c_dlt = self.claimed_total()
            lines.append(f"total (as claimed): eps={c_eps:.4g} delta={c_dlt:.3g} "
                         "-- differs from the sound total")
        return "\n".join(lines)


def _make_entry(name: Any, **kw: Any) -> dict:
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if not isinstance(kw["mechanism"], str) or not kw["mechanism"]:
        raise ValueError(f"mechanism must be a non-empty string, got {kw['mechanism']!r}")
    for field in ("protects", "note"):
        if not isinstance(kw[field], str):
            raise ValueError(f"{field} must be a string, got {kw[field]!r}")
    comp = kw["composition"]
    if comp not in COMPOSITIONS:
        raise ValueError(f"composition must be one of {COMPOSITIONS}, got {comp!r}")
    group = kw["group"]
    if comp == "parallel" and (not isinstance(group, str) or not group):
        raise ValueError("group must be a non-empty string for composition='parallel'")
    if group is not None and not isinstance(group, str):
        raise ValueError(f"group must be a string or None, got {group!r}")
    entry = {
        "name": name,
        "mechanism": kw["mechanism"],
        "epsilon": _ledger_epsilon(kw["epsilon"], "epsilon"),
        "delta": _ledger_delta(kw["delta"], "delta"),
        "protects": kw["protects"],
        "composition": comp,
        "group": group,
        "claimed_epsilon": (None if kw["claimed_epsilon"] is None
                            else _ledger_epsilon(kw["claimed_epsilon"], "claimed_epsilon")),
        "claimed_delta": (None if kw["claimed_delta"] is None
                          else _ledger_delta(kw["claimed_delta"], "claimed_delta")),
        "note": kw["note"],
        "relation": kw["relation"],
        "covers": kw["covers"],
        "segments": (None if kw["segments"] is None
                     else [_check_segment(seg, i) for i, seg in enumerate(kw["segments"])]),
    }
    if entry["relation"] not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {kw['relation']!r}")
    event = kw.get("dp_event")
    if event is not None:
        if entry["segments"] is None:
            raise ValueError("dp_event: only a per-step spend (with segments) records one")
        if math.isinf(entry["epsilon"]):
            raise ValueError("dp_event: an unbounded spend (epsilon inf) has no event")
        want = event_to_json(dp_accounting.ComposedDpEvent(
            _segment_events(entry["segments"], _EVENT_SAMPLING[entry["relation"]])))
        if event != want:
            raise ValueError(f"dp_event: {event!r} is not the event of the entry's segments "
                             f"({want!r})")
    entry["dp_event"] = event
    if not isinstance(entry["covers"], str):
        raise ValueError(f"covers must be a string, got {kw['covers']!r}")
    return entry


def _check_segment(seg: Any, index: int) -> dict:
    if not isinstance(seg, dict) or set(seg) != set(SEGMENT_KEYS):
        raise ValueError(f"segments[{index}]: expected a dict with keys {SEGMENT_KEYS}, got "
                         f"{seg!r}")
    out = {}
    for key in ("start_step", "steps", "passes"):
        value = seg[key]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"segments[{index}].{key}: expected an integer >= 0, got {value!r}")
        out[key] = int(value)
    for key in ("num_examples", "batch_size"):
        out[key] = checks.check_positive_int(seg[key], f"segments[{index}].{key}")
    if out["batch_size"] > out["num_examples"]:
        raise ValueError(f"segments[{index}].batch_size: exceeds num_examples")
    out["noise_multiplier"] = _validate.check_positive(seg["noise_multiplier"],
                                                       f"segments[{index}].noise_multiplier")
    if out["steps"] > 0 and out["passes"] < 1:
        raise ValueError(f"segments[{index}].passes: steps ran in at least one pass")
    return {k: out[k] for k in SEGMENT_KEYS}


def _extends(old: list, new: list) -> bool:
    """True when `new` equals `old` except for more segments or a longer last segment."""
    if len(new) < len(old):
        return False
    for i, (a, b) in enumerate(zip(old, new)):
        fixed = [k for k in SEGMENT_KEYS if k not in ("steps", "passes")]
        if any(a[k] != b[k] for k in fixed):
            return False
        if i < len(old) - 1 and (a["steps"], a["passes"]) != (b["steps"], b["passes"]):
            return False
        if b["steps"] < a["steps"] or b["passes"] < a["passes"]:
            return False
    return True


def segments_epsilon(segments: list, *, delta: float, accountant: str = DEFAULT_ACCOUNTANT,
                     sampling: str = "poisson") -> float:
    """epsilon at `delta` of executed DP-SGD segments composed in one accountant.

    Each segment is `SEGMENT_KEYS`. "poisson": steps compositions of the Poisson-subsampled
    Gaussian with q = batch_size / num_examples (Abadi et al. 2016; add/remove-one).
    "shuffle": the same Poisson analysis applied to shuffled batches (claimed, not a bound).
    "shuffle_no_amplification": each pass over the data releases every example in at most
    one batch, a Gaussian with replace-one sensitivity 2C and std sigma*C, i.e. noise
    multiplier sigma/2, composed over the passes that ran (sound for any batch order).

    Returns:
        epsilon (0 when no step executed).

    Raises:
        ValueError: on invalid arguments.
    """
    segs = [_check_segment(seg, i) for i, seg in enumerate(segments)]
    dlt = _validate.check_delta(delta)
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
    events = _segment_events(segs, sampling)
    if not events:
        return 0.0
    return float(_make_accountant(accountant).compose(
        dp_accounting.ComposedDpEvent(events)).get_epsilon(dlt))


# The event a per-step entry records, by its relation: Poisson lots (add/remove-one) or the
# per-pass bound of shuffled batches without amplification (replace-one).
_EVENT_SAMPLING = {"add_remove": "poisson", "replace_one": "shuffle_no_amplification"}
# The dp_accounting events a ledger entry can record, with their fields in order.
_EVENT_FIELDS = {
    "ComposedDpEvent": ("events",),
    "SelfComposedDpEvent": ("event", "count"),
    "PoissonSampledDpEvent": ("sampling_probability", "event"),
    "GaussianDpEvent": ("noise_multiplier",),
}


def event_to_json(event: dp_accounting.DpEvent) -> dict:
    """A dp_accounting event as JSON data: {"type": class name, field: value, ...}.

    Raises:
        ValueError: for an event type a ledger does not record (`_EVENT_FIELDS`).
    """
    kind = type(event).__name__
    if kind not in _EVENT_FIELDS:
        raise ValueError(f"event: a ledger records {sorted(_EVENT_FIELDS)}, got {kind}")
    out: dict = {"type": kind}
    for field in _EVENT_FIELDS[kind]:
        value = getattr(event, field)
        if field == "events":
            out[field] = [event_to_json(e) for e in value]
        elif field == "event":
            out[field] = event_to_json(value)
        else:
            out[field] = int(value) if field == "count" else float(value)
    return out


def event_from_json(data: Any) -> dp_accounting.DpEvent:
    """The dp_accounting event of `event_to_json` data (e.g. a ledger entry's `dp_event`).

    Raises:
        ValueError: on data that is not such an event.
    """
    if not isinstance(data, dict) or data.get("type") not in _EVENT_FIELDS:
        raise ValueError(f"dp_event: expected one of {sorted(_EVENT_FIELDS)}, got {data!r}")
    kind = data["type"]
    if set(data) != {"type", *_EVENT_FIELDS[kind]}:
        raise ValueError(f"dp_event: {kind} takes {_EVENT_FIELDS[kind]}, got {sorted(data)}")
    args = []
    for field in _EVENT_FIELDS[kind]:
        value = data[field]
        if field == "events":
            args.append([event_from_json(e) for e in value])
        elif field == "event":
            args.append(event_from_json(value))
        else:
            args.append(value)
    return getattr(dp_accounting, kind)(*args)


def _segment_events(segs: list, sampling: str) -> list:
    """One dp_accounting event per executed segment (see `segments_epsilon`)."""
    events = []
    for seg in segs:
        if seg["steps"] == 0:
            continue
        sigma = seg["noise_multiplier"]
        if sampling == "shuffle_no_amplification":
            events.append(dp_accounting.SelfComposedDpEvent(
                dp_accounting.GaussianDpEvent(sigma / 2.0), seg["passes"]))
        else:
            q = seg["batch_size"] / seg["num_examples"]
            events.append(dp_accounting.SelfComposedDpEvent(
                dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)),
                seg["steps"]))
    return events


@dataclasses.dataclass(frozen=True)
class StepSpend:
    """The privacy a per-step method (DP-SGD, Secure-SGD) spends at every training step.

    A method returns one from `Method.step_spend()`; the run charges the steps that executed,
    segment by segment, to the ledger entry `name` (`record`), and `dp_event` gives the
    dp_accounting event of those segments.

    Attributes:
      name: the ledger entry's name.
      noise_multiplier: sigma of the Gaussian noise, in units of the clipping norm.
      sampling: "poisson" (Poisson lots) or "shuffle" (shuffled fixed-size batches: the
        sound value is the per-pass bound without amplification).
      delta: target delta in (0, 1).
      accountant: "rdp" or "pld".
      protects: what the entry protects.
      note: appended to the ledger entry's generated note.
      unbounded: the steps do not bound one record's influence: the sound epsilon is
        infinite and the accountant's value is only claimed (`note` says why).
    """

    name: str
    noise_multiplier: float
    sampling: str
    delta: float
    accountant: str = DEFAULT_ACCOUNTANT
    protects: str = "training records"
    note: str = ""
    unbounded: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"StepSpend.name must be a non-empty string, got {self.name!r}")
        checks.check_positive(self.noise_multiplier, "StepSpend.noise_multiplier")
        if self.sampling not in ("poisson", "shuffle"):
            raise ValueError(f"StepSpend.sampling must be 'poisson' or 'shuffle', got "
                             f"{self.sampling!r}")
        _validate.check_delta(self.delta)
        if self.accountant not in ACCOUNTANTS:
            raise ValueError(f"StepSpend.accountant must be one of {ACCOUNTANTS}, got "
                             f"{self.accountant!r}")

    def segment(self, start_step: int, steps: int, passes: int, num_examples: int,
                batch_size: int) -> dict:
        """One executed segment of this spend (`SEGMENT_KEYS`)."""
        return {"start_step": int(start_step), "steps": int(steps), "passes": int(passes),
                "num_examples": int(num_examples), "batch_size": int(batch_size),
                "noise_multiplier": float(self.noise_multiplier)}

    def dp_event(self, segments: list, *, sound: bool = True) -> dp_accounting.DpEvent:
        """The dp_accounting event of the executed `segments`.

        Args:
          segments: executed segments (`SEGMENT_KEYS`).
          sound: for sampling "shuffle", the event of the sound bound (no amplification);
            False gives the Poisson analysis the "shuffle" entry records as claimed.

        Raises:
          ValueError: on invalid segments, or for an unbounded spend asked for a sound event
            (it has none: one record's influence is not bounded).
        """
        if sound and self.unbounded:
            raise ValueError(f"{self.name}: an unbounded spend has no sound event")
        segs = [_check_segment(seg, i) for i, seg in enumerate(segments)]
        sampling = ("shuffle_no_amplification" if sound and self.sampling == "shuffle"
                    else self.sampling)
        return dp_accounting.ComposedDpEvent(_segment_events(segs, sampling))

    def record(self, ledger: "PrivacyLedger", segments: list) -> dict:
        """Creates or extends this spend's ledger entry (`PrivacyLedger.record_steps`)."""
        return ledger.record_steps(self.name, segments=segments, delta=self.delta,
                                   sampling=self.sampling, accountant=self.accountant,
                                   protects=self.protects, note=self.note,
                                   unbounded=self.unbounded)


def entry_accountant(entry: Any) -> Optional[str]:
    """The accountant ("rdp" or "pld") that produced a per-step entry's epsilon, else None.

    A DP-SGD entry names it in its mechanism ("dpsgd_rdp", "dpsgd_pld"); ledgers written
    before PLD became the default say "dpsgd_rdp" and so read as RDP.
    """
    mechanism = entry.get("mechanism") if isinstance(entry, dict) else None
    if isinstance(mechanism, str) and mechanism.startswith("dpsgd_"):
        name = mechanism[len("dpsgd_"):]
        return name if name in ACCOUNTANTS else None
    return None


def epsilon_value(value: Any) -> float:
    """A ledger epsilon as a float: numbers as they are, "inf" (`INF_JSON`) as math.inf.

    Raises:
        ValueError: for anything else (other strings, None, bools).
    """
    if isinstance(value, str):
        if value.strip().lower() in (INF_JSON, "infinity", "+inf"):
            return math.inf
        raise ValueError(f"epsilon must be a number or {INF_JSON!r}, got {value!r}")
    if value is None:
        raise ValueError(f"epsilon must be a number or {INF_JSON!r}, got None")
    eps = _validate.as_float(value, "epsilon", allow_nonfinite=True)
    if math.isnan(eps) or eps < 0.0:
        raise ValueError(f"epsilon must be >= 0 (or {INF_JSON!r}), got {value!r}")
    return eps


def format_epsilon(value: Any) -> str:
    """An epsilon for people: "inf (no differential-privacy guarantee)" or the number."""
    eps = epsilon_value(value)
    return f"inf ({NO_GUARANTEE})" if math.isinf(eps) else f"{eps:.4g}"


def _json_eps(value: Optional[float]) -> Any:
    return INF_JSON if value is not None and math.isinf(value) else value


def _json_entry(entry: dict) -> dict:
    out = dict(entry)
    for key in ("epsilon", "claimed_epsilon"):
        out[key] = _json_eps(out[key])
    return out


def _ledger_epsilon(value: Any, name: str) -> float:
    if isinstance(value, str):
        try:
            return epsilon_value(value)
        except ValueError:
            raise ValueError(f"{name} must be a number >= 0 or {INF_JSON!r}, got {value!r}") from None
    eps = _validate.as_float(value, name, allow_nonfinite=True)
    if math.isnan(eps) or eps < 0.0:
        raise ValueError(f"{name} must be >= 0 (inf allowed), got {value!r}")
    return eps


def _ledger_delta(value: Any, name: str) -> float:
    dlt = _validate.as_float(value, name)
    if not (0.0 <= dlt < 1.0):
        raise ValueError(f"{name} must lie in [0, 1), got {value!r}")
    return dlt


def _close(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)


def _same_entry(a: dict, b: dict) -> bool:
    for k in _ENTRY_FIELDS:
        x, y = a.get(k, _OPTIONAL_DEFAULTS.get(k)), b.get(k, _OPTIONAL_DEFAULTS.get(k))
        if isinstance(x, float) and isinstance(y, float):
            if not _close(x, y):
                return False
        elif x != y:
            return False
    return True


def _total_relation(entries: Iterable[dict]) -> str:
    rels = {e["relation"] for e in entries if e["composition"] != "separate"}
    return "add_remove" if rels == {"add_remove"} else "replace_one"


def _to_replace_one(eps: float, dlt: float) -> tuple[float, float]:
    """add/remove-one (eps, delta)-DP implies replace-one (2 eps, (1 + e^eps) delta)-DP.

    A replacement is a removal followed by an addition: group privacy for k = 2 (Dwork &
    Roth 2014, Thm 2.2 and its (eps, delta) form).
    """
    if math.isinf(eps):
        return math.inf, dlt
    return 2.0 * eps, min((1.0 + math.exp(min(eps, 700.0))) * dlt, 1.0)


def _compose(entries: Iterable[dict], claimed: bool) -> tuple[float, float]:
    """Basic sequential composition over entries and parallel groups (max within a group).

    Sound totals mixing neighbouring relations convert add/remove-one entries to
    replace-one first (`_to_replace_one`); claimed totals compose the numbers as claimed.
    """
    entries = list(entries)
    convert = not claimed and _total_relation(entries) == "replace_one"
    eps_total, delta_total = 0.0, 0.0
    groups: dict[str, tuple[float, float]] = {}
    for e in entries:
        eps, dlt = e["epsilon"], e["delta"]
        if claimed:
            eps = eps if e["claimed_epsilon"] is None else e["claimed_epsilon"]
            dlt = dlt if e["claimed_delta"] is None else e["claimed_delta"]
        elif convert and e["relation"] == "add_remove" and e["composition"] != "separate":
            eps, dlt = _to_replace_one(eps, dlt)
        if e["composition"] == "sequential":
            eps_total += eps  # basic sequential composition (Dwork & Roth 2014, Thm 3.16)
            delta_total += dlt
        elif e["composition"] == "parallel":
            g_eps, g_dlt = groups.get(e["group"], (0.0, 0.0))
            groups[e["group"]] = (max(g_eps, eps), max(g_dlt, dlt))  # parallel composition
    for g_eps, g_dlt in groups.values():
        eps_total += g_eps
        delta_total += g_dlt
    return eps_total, min(delta_total, 1.0)


# ------------------------------------------------------------------------------ DP-SGD


def dpsgd_epsilon(*, num_examples: int, batch_size: int, noise_multiplier: float,
                  epochs: Optional[float] = None, steps: Optional[int] = None, delta: float,
                  accountant: str = DEFAULT_ACCOUNTANT, sampling: str = "poisson") -> float:
    """epsilon of DP-SGD at `delta` through dp_accounting (Abadi et al. 2016).

    Sampling assumptions (say which one a reported number rests on):

    - "poisson": each step includes every example independently with probability
      q = batch_size / num_examples; the Poisson-subsampled Gaussian, add/remove-one
      neighbours. This is what the accountant analyses; the number is sound for it.
    - "shuffle": the same Poisson analysis, applied to shuffled fixed-size batches. This
      is the common practice (TF-Privacy's compute_dp_sgd_privacy does the same), but
      dp_accounting's Poisson analysis does not cover shuffled fixed-size batches, so
      the number is not a proven bound for that sampling.
    - "shuffle_no_amplification": a sound bound for shuffled (or any fixed, disjoint)
      batches: each example is in at most one batch per pass, so each pass is one
      Gaussian mechanism with replace-one sensitivity 2C and std sigma*C, i.e. a
      Gaussian with noise multiplier sigma/2; ceil(steps / steps_per_pass) passes are
      composed, with steps_per_pass = floor(num_examples / batch_size) (the training loop
      drops the remainder, so a pass has floor(n/b) steps; counting with floor never counts
      fewer passes than ran).

    With `epochs`, steps = ceil(epochs * num_examples / batch_size) (TF-Privacy's
    convention).

    Args:
        num_examples: training-set size n > 0.
        batch_size: (expected) batch size, 0 < batch_size <= n.
        noise_multiplier: sigma > 0 (noise std / clip norm).
        epochs: number of passes; exactly one of epochs / steps.
        steps: number of steps.
        delta: target delta in (0, 1).
        accountant: "pld" (the default, `DEFAULT_ACCOUNTANT`: PLDAccountant, pessimistic
            discretisation 1e-4) or "rdp" (RdpAccountant, default orders).
        sampling: "poisson", "shuffle" or "shuffle_no_amplification".

    Returns:
        epsilon (float).

    Raises:
        ValueError: on invalid arguments.
    """
    n_steps, q, sigma, dlt = _check_dpsgd(num_examples, batch_size, noise_multiplier, epochs,
                                          steps, delta, accountant, sampling)
    event = _dpsgd_event(q, sigma, n_steps, num_examples, batch_size, sampling)
    return float(_make_accountant(accountant).compose(event).get_epsilon(dlt))


def dpsgd_noise_multiplier(*, target_epsilon: float, num_examples: int, batch_size: int,
                           epochs: Optional[float] = None, delta: float,
                           accountant: str = DEFAULT_ACCOUNTANT,
                           steps: Optional[int] = None, sampling: str = "poisson",
                           rtol: float = 1e-6) -> float:
    """Smallest noise multiplier whose DP-SGD epsilon is <= target_epsilon.

    `dp_accounting.calibrate_dp_mechanism` on log sigma (Brent's method, with a bisection
    fall-back that guarantees epsilon <= target) on a bracket found by doubling / halving
    from 1 (RDP) or from the RDP-calibrated sigma (PLD); the returned sigma is on the valid
    side (its epsilon, computed with `accountant`, is <= target) and within relative `rtol`
    of the optimum.

    Args:
        target_epsilon: target epsilon > 0.
        num_examples, batch_size, epochs, steps, delta, accountant, sampling: as in
            `dpsgd_epsilon` (exactly one of epochs / steps).
        rtol: relative precision of the result.

    Returns:
        The noise multiplier (float).

    Raises:
        ValueError: on invalid arguments.
    """
    target = _validate.check_epsilon(target_epsilon, "target_epsilon")
    _validate.check_positive(rtol, "rtol")
    n_steps, q, _, dlt = _check_dpsgd(num_examples, batch_size, 1.0, epochs, steps, delta,
                                      accountant, sampling)

    def event_of(sigma: float) -> dp_accounting.DpEvent:
        return _dpsgd_event(q, sigma, n_steps, num_examples, batch_size, sampling)

    def eps_of(sigma: float) -> float:
        return float(_make_accountant(accountant).compose(event_of(sigma)).get_epsilon(dlt))

    # Bracket [lo, hi] with eps(lo) > target >= eps(hi), by doubling / halving from 1. A PLD
    # evaluation costs about a second, so PLD starts from the (cheap) RDP sigma, which is
    # almost always on the valid side (PLD is tighter) and a few percent above the PLD sigma; the
    # loops below check both ends either way.
    hi, shrink = 1.0, 0.5
    if accountant == "pld":
        hi = dpsgd_noise_multiplier(target_epsilon=target, num_examples=num_examples,
                                    batch_size=batch_size, epochs=epochs, steps=steps,
                                    delta=dlt, accountant="rdp", sampling=sampling, rtol=1e-3)
        shrink = 0.85
    while eps_of(hi) > target:
        hi *= 2.0
        if hi > 1e7:
            raise ValueError(f"target_epsilon {target} unreachable with noise_multiplier <= 1e7")
    lo = hi * shrink
    while eps_of(lo) <= target:
        hi, lo = lo, lo / 2.0
        if lo < 1e-4:
            return hi
    # Brent's method on log sigma (absolute tolerance rtol/4 there is a relative one on
    # sigma); calibrate_dp_mechanism returns a log sigma with eps <= target. Then step to the
    # valid side if exp() rounded the other way.
    log_sigma = dp_accounting.calibrate_dp_mechanism(
        lambda: _make_accountant(accountant), lambda t: event_of(math.exp(t)), target, dlt,
        bracket_interval=dp_accounting.ExplicitBracketInterval(math.log(lo), math.log(hi)),
        tol=rtol / 4.0)
    sigma = min(math.exp(log_sigma), hi)
    while eps_of(sigma) > target:
        sigma = min(sigma * (1.0 + rtol / 4.0), hi)
    return sigma


def dpsgd_note(*, sampling: str, accountant: str = DEFAULT_ACCOUNTANT) -> str:
    """The sentence that states which sampling assumption a DP-SGD epsilon rests on.

    Raises:
        ValueError: on unknown sampling or accountant.
    """
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    return SAMPLING_NOTES[sampling].format(accountant=ACCOUNTANT_NAMES[accountant])


def _resolve_steps(num_examples: int, batch_size: int, epochs: Optional[float],
                   steps: Optional[int]) -> int:
    if steps is not None:
        return int(steps)
    return int(math.ceil(epochs * num_examples / batch_size))  # TF-Privacy convention


def _check_dpsgd(num_examples, batch_size, noise_multiplier, epochs, steps, delta, accountant,
                 sampling):
    n = checks.check_positive_int(num_examples, "num_examples")
    b = checks.check_positive_int(batch_size, "batch_size")
    if b > n:
        raise ValueError(f"batch_size ({b}) must not exceed num_examples ({n})")
    sigma = _validate.check_positive(noise_multiplier, "noise_multiplier")
    dlt = _validate.check_delta(delta)
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
    if (epochs is None) == (steps is None):
        raise ValueError("exactly one of epochs or steps must be given")
    if steps is not None:
        steps = checks.check_positive_int(steps, "steps")
    else:
        epochs = _validate.check_positive(epochs, "epochs")
    return _resolve_steps(n, b, epochs, steps), b / n, sigma, dlt


def _dpsgd_event(q: float, sigma: float, steps: int, num_examples: int, batch_size: int,
                 sampling: str) -> dp_accounting.DpEvent:
    if sampling == "shuffle_no_amplification":
        per_pass = num_examples // batch_size  # steps of one pass (remainder dropped)
        passes = int(math.ceil(steps / per_pass))
        # Replace-one sensitivity 2C with noise std sigma*C: a Gaussian with multiplier sigma/2.
        return dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma / 2.0), passes)
    # Abadi et al. 2016: T compositions of the Poisson-subsampled Gaussian.
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)


def _make_accountant(accountant: str) -> dp_accounting.PrivacyAccountant:
    if accountant == "rdp":
        return dp_accounting.rdp.RdpAccountant()
    return dp_accounting.pld.PLDAccountant()


__all__ = [
    "ACCOUNTANTS",
    "ACCOUNTANT_NAMES",
    "DEFAULT_ACCOUNTANT",
    "COMPOSITIONS",
    "PrivacyLedger",
    "RELATIONS",
    "SAMPLINGS",
    "SEGMENT_KEYS",
    "StepSpend",
    "segments_epsilon",
    "dpsgd_epsilon",
    "dpsgd_noise_multiplier",
    "dpsgd_note",
    "entry_accountant",
]
