"""The privacy ledger: named entries, composed into claimed and sound totals, as JSON.

The ledger's parts live in their own modules and are re-exported here, so
`tfdp.accounting.<name>` keeps working: composition of entries and epsilon's JSON form in
`tfdp.composition`, DP-SGD accounting (events of executed segments, `dpsgd_epsilon`,
`dpsgd_noise_multiplier`, `StepSpend`) in `tfdp.dpsgd_accounting`.
"""

from __future__ import annotations

import json
import math
from typing import Any, Optional

import dp_accounting

from tfdp.mechanisms import _validate
from tfdp import rundir
from tfdp.composition import (COMPOSITIONS, INF_JSON, NO_GUARANTEE, RELATIONS,  # noqa: F401
                              close as _close, compose as _compose, epsilon_value,
                              format_epsilon, json_entry as _json_entry,
                              json_epsilon as _json_eps, total_relation as _total_relation)
from tfdp.dpsgd_accounting import (ACCOUNTANT_NAMES, ACCOUNTANTS,  # noqa: F401
                                   DEFAULT_ACCOUNTANT, EVENT_SAMPLING as _EVENT_SAMPLING,
                                   SAMPLING_NOTES, SAMPLINGS, SEGMENT_KEYS, StepSpend,
                                   check_segment as _check_segment, dpsgd_epsilon,
                                   dpsgd_noise_multiplier, dpsgd_note, entry_accountant,
                                   event_from_json, event_to_json, extends as _extends,
                                   resolve_steps, steps_entry,
                                   segment_events as _segment_events, segments_epsilon)

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
        sound, claimed, relation, text = steps_entry(segs, dlt, accountant, sampling,
                                                     claimed_epsilon, unbounded, note)
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
        n_steps = resolve_steps(num_examples, batch_size, epochs, steps)
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


def _same_entry(a: dict, b: dict) -> bool:
    for k in _ENTRY_FIELDS:
        x, y = a.get(k, _OPTIONAL_DEFAULTS.get(k)), b.get(k, _OPTIONAL_DEFAULTS.get(k))
        if isinstance(x, float) and isinstance(y, float):
            if not _close(x, y):
                return False
        elif x != y:
            return False
    return True


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
