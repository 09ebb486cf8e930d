"""Privacy ledger (named entries, composition, claimed vs. sound totals); DP-SGD accounting."""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, Optional

import dp_accounting
import numpy as np
from scipy import optimize

from tfdp.mechanisms import _validate

COMPOSITIONS = ("sequential", "parallel", "separate")
ACCOUNTANTS = ("rdp", "pld")
SAMPLINGS = ("poisson", "shuffle", "shuffle_no_amplification")

_ENTRY_FIELDS = ("name", "mechanism", "epsilon", "delta", "protects", "composition", "group",
                 "claimed_epsilon", "claimed_delta", "note")

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
      HGM spec §3.6).

    Entries may have epsilon = 0 (no privacy cost) and epsilon = inf (no finite bound).
    """

    def __init__(self) -> None:
        self._entries: dict[str, dict] = {}

    # -------------------------------------------------------------------------- entries

    def add(self, name: str, *, mechanism: str, epsilon: float, delta: float = 0.0,
            protects: str = "", composition: str = "sequential", group: Optional[str] = None,
            claimed_epsilon: Optional[float] = None, claimed_delta: Optional[float] = None,
            note: str = "") -> dict:
        """Adds a named entry; an identical re-add is a no-op.

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

        Returns:
            A copy of the stored entry.

        Raises:
            ValueError: on invalid arguments, or a re-add of `name` with different content.
        """
        entry = _make_entry(name, mechanism=mechanism, epsilon=epsilon, delta=delta,
                            protects=protects, composition=composition, group=group,
                            claimed_epsilon=claimed_epsilon, claimed_delta=claimed_delta,
                            note=note)
        existing = self._entries.get(entry["name"])
        if existing is not None:
            if _same_entry(existing, entry):
                return dict(existing)
            raise ValueError(f"name: entry {entry['name']!r} already exists with different "
                             f"content ({existing} vs {entry})")
        self._entries[entry["name"]] = entry
        return dict(entry)

    def add_dpsgd(self, name: str, *, num_examples: int, batch_size: int,
                  noise_multiplier: float, delta: float, epochs: Optional[float] = None,
                  steps: Optional[int] = None, accountant: str = "rdp",
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
            text = (SAMPLING_NOTES["shuffle"].format(accountant=accountant) + " Sound value: "
                    + SAMPLING_NOTES["shuffle_no_amplification"].format(accountant=accountant))
        else:
            sound_eps = dpsgd_epsilon(sampling=sampling, **kwargs)
            claimed = claimed_epsilon
            text = SAMPLING_NOTES[sampling].format(accountant=accountant)
        q = batch_size / num_examples
        n_steps = _resolve_steps(num_examples, batch_size, epochs, steps)
        text += (f" q={q:.6g}, steps={n_steps}, noise_multiplier={noise_multiplier:.6g}, "
                 f"delta={delta:.3g}.")
        if note:
            text += " " + note
        return self.add(name, mechanism=f"dpsgd_{accountant}", epsilon=sound_eps, delta=delta,
                        protects=protects, composition="sequential",
                        claimed_epsilon=claimed, claimed_delta=None, note=text)

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
        """Soundly accounted (epsilon, delta) over all non-"separate" entries."""
        return _compose(self._entries.values(), claimed=False)

    def claimed_total(self) -> tuple[float, float]:
        """(epsilon, delta) as the papers claim, falling back to the sound value per entry."""
        return _compose(self._entries.values(), claimed=True)

    def differs(self) -> bool:
        """True when the claimed total is not the sound total."""
        return not (_close(self.total()[0], self.claimed_total()[0])
                    and _close(self.total()[1], self.claimed_total()[1]))

    # -------------------------------------------------------------------------- I/O

    def to_dict(self) -> dict:
        """JSON-ready dict: sound totals, entries, claimed totals and whether they differ."""
        eps, dlt = self.total()
        c_eps, c_dlt = self.claimed_total()
        return {
            "epsilon": eps,
            "delta": dlt,
            "claimed_epsilon": c_eps,
            "claimed_delta": c_dlt,
            "differs": self.differs(),
            "entries": self.entries,
        }

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
            kwargs = {k: e[k] for k in _ENTRY_FIELDS if k in e and k != "name"}
            ledger.add(e["name"], **kwargs)
        for key, value in (("epsilon", ledger.total()[0]), ("delta", ledger.total()[1]),
                           ("claimed_epsilon", ledger.claimed_total()[0]),
                           ("claimed_delta", ledger.claimed_total()[1])):
            if key in data and not _close(float(data[key]), value):
                raise ValueError(f"data: stored {key} {data[key]!r} does not match the entries "
                                 f"({value!r})")
        return ledger

    def save(self, path: str) -> str:
        """Writes the ledger as JSON atomically; returns the path (inf is written as Infinity)."""
        from tfdp.rundir import write_json_atomic  # local import: keeps this module light
        return write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str) -> "PrivacyLedger":
        """Reads a ledger written by `save`.

        Raises:
            ValueError: if the file content is not a valid ledger.
        """
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))

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
        lines.append(f"total (sound): eps={eps:.4g} delta={dlt:.3g}")
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
    }
    return entry


def _ledger_epsilon(value: Any, name: str) -> float:
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
        x, y = a[k], b[k]
        if isinstance(x, float) and isinstance(y, float):
            if not _close(x, y):
                return False
        elif x != y:
            return False
    return True


def _compose(entries: Iterable[dict], claimed: bool) -> tuple[float, float]:
    """Basic sequential composition over entries and parallel groups (max within a group)."""
    eps_total, delta_total = 0.0, 0.0
    groups: dict[str, tuple[float, float]] = {}
    for e in entries:
        eps, dlt = e["epsilon"], e["delta"]
        if claimed:
            eps = eps if e["claimed_epsilon"] is None else e["claimed_epsilon"]
            dlt = dlt if e["claimed_delta"] is None else e["claimed_delta"]
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
                  accountant: str = "rdp", sampling: str = "poisson") -> float:
    """epsilon of DP-SGD at `delta` through dp_accounting (Abadi et al. 2016; HGM spec §3.6).

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
      composed, with steps_per_pass = ceil(num_examples / batch_size).

    With `epochs`, steps = ceil(epochs * num_examples / batch_size) (TF-Privacy's
    convention).

    Args:
        num_examples: training-set size n > 0.
        batch_size: (expected) batch size, 0 < batch_size <= n.
        noise_multiplier: sigma > 0 (noise std / clip norm).
        epochs: number of passes; exactly one of epochs / steps.
        steps: number of steps.
        delta: target delta in (0, 1).
        accountant: "rdp" (RdpAccountant, default orders) or "pld" (PLDAccountant,
            discretisation 1e-4).
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
                           epochs: Optional[float] = None, delta: float, accountant: str = "rdp",
                           steps: Optional[int] = None, sampling: str = "poisson",
                           rtol: float = 1e-6) -> float:
    """Smallest noise multiplier whose DP-SGD epsilon is <= target_epsilon.

    Bisection on log sigma of `dpsgd_epsilon` (which decreases in sigma); the returned
    sigma is on the valid side and within relative `rtol` of the optimum.

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

    def eps_of(sigma: float) -> float:
        event = _dpsgd_event(q, sigma, n_steps, num_examples, batch_size, sampling)
        return float(_make_accountant(accountant).compose(event).get_epsilon(dlt))

    # Bracket [lo, hi] with eps(lo) > target >= eps(hi), by doubling / halving from 1.
    hi = 1.0
    while eps_of(hi) > target:
        hi *= 2.0
        if hi > 1e7:
            raise ValueError(f"target_epsilon {target} unreachable with noise_multiplier <= 1e7")
    lo = hi / 2.0
    while eps_of(lo) <= target:
        hi, lo = lo, lo / 2.0
        if lo < 1e-4:
            return hi
    # Brent's method on log sigma, then step to the valid side of the root.
    root = optimize.brentq(lambda t: eps_of(math.exp(t)) - target, math.log(lo), math.log(hi),
                           xtol=rtol / 4.0, rtol=4 * np.finfo(float).eps)
    sigma = min(math.exp(root), hi)
    while eps_of(sigma) > target:
        sigma = min(sigma * (1.0 + rtol / 4.0), hi)
    return sigma


def dpsgd_note(*, sampling: str, accountant: str = "rdp") -> str:
    """The sentence that states which sampling assumption a DP-SGD epsilon rests on.

    Raises:
        ValueError: on unknown sampling or accountant.
    """
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    return SAMPLING_NOTES[sampling].format(accountant=accountant)


def _resolve_steps(num_examples: int, batch_size: int, epochs: Optional[float],
                   steps: Optional[int]) -> int:
    if steps is not None:
        return int(steps)
    return int(math.ceil(epochs * num_examples / batch_size))  # TF-Privacy convention


def _check_dpsgd(num_examples, batch_size, noise_multiplier, epochs, steps, delta, accountant,
                 sampling):
    n = _check_int(num_examples, "num_examples")
    b = _check_int(batch_size, "batch_size")
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
        steps = _check_int(steps, "steps")
    else:
        epochs = _validate.check_positive(epochs, "epochs")
    return _resolve_steps(n, b, epochs, steps), b / n, sigma, dlt


def _check_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int,)) and not (
            hasattr(value, "__index__")):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    out = int(value)
    if out <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return out


def _dpsgd_event(q: float, sigma: float, steps: int, num_examples: int, batch_size: int,
                 sampling: str) -> dp_accounting.DpEvent:
    if sampling == "shuffle_no_amplification":
        per_pass = int(math.ceil(num_examples / batch_size))
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
    "COMPOSITIONS",
    "PrivacyLedger",
    "SAMPLINGS",
    "dpsgd_epsilon",
    "dpsgd_noise_multiplier",
    "dpsgd_note",
]
