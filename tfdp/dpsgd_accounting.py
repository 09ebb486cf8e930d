"""DP-SGD accounting: epsilon and noise multiplier of subsampled Gaussian steps.

The dp_accounting events of executed DP-SGD segments (a stretch of steps run with one batch
size, sampling rate and noise multiplier), their epsilon under each sampling assumption, the
noise multiplier for a target epsilon, the `StepSpend` a per-step method charges, and the
JSON form of the events a ledger entry records (`tfdp.accounting.PrivacyLedger.record_steps`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Protocol

import dp_accounting
import numpy as np

from tfdp import checks
from tfdp.mechanisms import _validate


class StepsLedger(Protocol):
    """What `StepSpend.record` needs of a ledger (`tfdp.accounting.PrivacyLedger`, which
    imports this module)."""

    def record_steps(self, name: str, **kwargs: Any) -> dict:
        """Creates or extends the entry of a per-step spend."""

__all__ = ["ACCOUNTANTS", "ACCOUNTANT_NAMES", "DEFAULT_ACCOUNTANT", "SAMPLINGS", "SAMPLING_NOTES",
           "SEGMENT_KEYS", "EVENT_SAMPLING", "StepSpend", "check_segment", "extends",
           "segments_epsilon", "segment_events", "event_to_json", "event_from_json",
           "entry_accountant", "dpsgd_epsilon", "dpsgd_noise_multiplier", "dpsgd_note",
           "resolve_steps", "steps_entry"]

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



def check_segment(seg: Any, index: int) -> dict:
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


def extends(old: list, new: list) -> bool:
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
    segs = [check_segment(seg, i) for i, seg in enumerate(segments)]
    dlt = _validate.check_delta(delta)
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
    events = segment_events(segs, sampling)
    if not events:
        return 0.0
    return float(_make_accountant(accountant).compose(
        dp_accounting.ComposedDpEvent(events)).get_epsilon(dlt))


# The event a per-step entry records, by its relation: Poisson lots (add/remove-one) or the
# per-pass bound of shuffled batches without amplification (replace-one).
EVENT_SAMPLING = {"add_remove": "poisson", "replace_one": "shuffle_no_amplification"}
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


def segment_events(segs: list, sampling: str) -> list:
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
        segs = [check_segment(seg, i) for i, seg in enumerate(segments)]
        sampling = ("shuffle_no_amplification" if sound and self.sampling == "shuffle"
                    else self.sampling)
        return dp_accounting.ComposedDpEvent(segment_events(segs, sampling))

    def record(self, ledger: StepsLedger, segments: list) -> dict:
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


def steps_entry(segs: list, dlt: float, accountant: str, sampling: str,
                claimed_epsilon: Optional[float], unbounded: bool, note: str
                ) -> tuple[float, Optional[float], str, str]:
    """The sound and claimed epsilon, relation and note of a per-step ledger entry.

    Args:
      segs: checked executed segments (`SEGMENT_KEYS`).
      dlt: checked delta.
      accountant, sampling, claimed_epsilon, unbounded, note: as in
        `tfdp.accounting.PrivacyLedger.record_steps` (checked there).

    Returns:
      (sound epsilon, claimed epsilon or None, neighbouring relation, the entry's note).
    """
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
    return sound, claimed, relation, text


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


def resolve_steps(num_examples: int, batch_size: int, epochs: Optional[float],
                  steps: Optional[int]) -> int:
    """`steps` if given, else ceil(epochs * num_examples / batch_size) (checked by the caller)."""
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
    return resolve_steps(n, b, epochs, steps), b / n, sigma, dlt


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
