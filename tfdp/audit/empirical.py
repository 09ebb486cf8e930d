"""Empirical DP audit: a plug-in attacker's success rate turned into a lower bound on epsilon."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np
from scipy import stats

from tfdp.audit import DISCLAIMER

# mechanism(x, num, rng) -> [num, ...] outputs of the mechanism run num times on input x.
Mechanism = Callable[[np.ndarray, int, np.random.Generator], np.ndarray]
# attacker(outputs) -> [num] guesses in {0, 1} of which input produced each output.
Attacker = Callable[[np.ndarray], np.ndarray]


@dataclasses.dataclass
class AuditResult:
    """Outcome of `audit`.

    Attributes:
      name: label of the audited mechanism.
      trials, successes, success_rate: the distinguishing game.
      p_lower: one-sided Clopper-Pearson lower confidence bound on the success probability.
      eps_lower: the epsilon lower bound log((p_lower - delta) / (1 - p_lower)) (0 if none).
      claimed_eps, delta: the mechanism's claim.
      exceeds_claim: eps_lower > claimed_eps, i.e. the claim is refuted at this confidence.
      confidence: confidence level of p_lower.
    """

    name: str
    trials: int
    successes: int
    success_rate: float
    p_lower: float
    eps_lower: float
    claimed_eps: float
    delta: float
    confidence: float
    exceeds_claim: bool
    disclaimer: str = DISCLAIMER

    def to_dict(self) -> dict:
        """Plain dict (for CSV / JSON)."""
        return dataclasses.asdict(self)


def clopper_pearson_lower(successes: int, trials: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson lower bound: the (1 - confidence) quantile of Beta(k, n - k + 1)."""
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials <= 0:
        raise ValueError(f"trials must be a positive integer, got {trials!r}")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be in [0, trials], got {successes!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if successes == 0:
        return 0.0
    return float(stats.beta.ppf(1.0 - confidence, successes, trials - successes + 1))


def eps_from_success(p: float, delta: float) -> float:
    """Smallest epsilon consistent with success p of a balanced distinguishing game.

    An (eps, delta)-DP mechanism allows success at most (e^eps + delta) / (1 + e^eps), so
    eps >= log((p - delta) / (1 - p)) (GPM spec Sec. 9 item 5b). Returns 0 when p <= 1/2
    (no evidence) and inf when p = 1.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p!r}")
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    if p >= 1.0:
        return math.inf
    if p - delta <= 1.0 - p:
        return 0.0
    return math.log((p - delta) / (1.0 - p))


def audit(mechanism: Mechanism, x0: Any, x1: Any, attacker: Attacker, *, trials: int,
          claimed_eps: float, delta: float, seed: int, confidence: float = 0.95,
          name: str = "mechanism", batch: int = 10000) -> AuditResult:
    """Runs the balanced distinguishing game `trials` times and bounds epsilon from below.

    Each trial draws a fair bit b, releases mechanism(x_b), and asks the attacker for b.
    The success count gives a Clopper-Pearson lower bound p_lower at `confidence`, turned
    into eps_lower by `eps_from_success`. A sound mechanism exceeds its claim with
    probability at most 1 - confidence.

    Args:
      mechanism: callable (x, num, rng) -> [num, ...] outputs.
      x0, x1: the neighbouring inputs.
      attacker: callable (outputs [num, ...]) -> guesses [num].
      trials: number of games.
      claimed_eps, delta: the mechanism's claimed guarantee.
      seed: seed of the numpy Generator that draws the bits and is passed to the mechanism.
      confidence: confidence level of the lower bound.
      name: label for the report.
      batch: games per mechanism call.

    Returns:
      AuditResult.
    """
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 1:
        raise ValueError(f"trials must be a positive integer, got {trials!r}")
    if not (isinstance(claimed_eps, (int, float)) and claimed_eps >= 0):
        raise ValueError(f"claimed_eps must be a number >= 0, got {claimed_eps!r}")
    if not (isinstance(delta, (int, float)) and 0 <= delta < 1):
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    rng = np.random.default_rng(seed)
    x0, x1 = np.asarray(x0), np.asarray(x1)
    successes = 0
    done = 0
    while done < trials:
        m = min(batch, trials - done)
        b = rng.integers(2, size=m)
        n1 = int(b.sum())
        guesses = np.empty(m, dtype=np.int64)
        if m - n1:
            guesses[b == 0] = np.asarray(attacker(mechanism(x0, m - n1, rng))).reshape(-1)
        if n1:
            guesses[b == 1] = np.asarray(attacker(mechanism(x1, n1, rng))).reshape(-1)
        successes += int(np.sum(guesses == b))
        done += m
    p_lo = clopper_pearson_lower(successes, trials, confidence)
    eps_lo = eps_from_success(p_lo, delta)
    return AuditResult(name=name, trials=int(trials), successes=successes,
                       success_rate=successes / trials, p_lower=p_lo, eps_lower=eps_lo,
                       claimed_eps=float(claimed_eps), delta=float(delta),
                       confidence=float(confidence), exceeds_claim=bool(eps_lo > claimed_eps))


# --------------------------------------------------------------------------------------------
# Plug-in attackers (likelihood-ratio tests for the noise family the mechanism claims).


def _flat(outputs: np.ndarray) -> np.ndarray:
    out = np.asarray(outputs, dtype=np.float64)
    return out.reshape(out.shape[0], -1)


def gaussian_attacker(x0: Any, x1: Any, stddevs: Any = 1.0) -> Attacker:
    """Likelihood-ratio attacker for Gaussian noise with known (per-coordinate) stds.

    Guesses 1 when (y - (x0 + x1)/2) . (x1 - x0) / s^2 > 0 (Neyman-Pearson for two Gaussians
    with equal covariance diag(s^2)).
    """
    a, b = np.asarray(x0, np.float64).ravel(), np.asarray(x1, np.float64).ravel()
    s2 = np.broadcast_to(np.asarray(stddevs, np.float64).ravel() ** 2, a.shape)
    direction, mid = (b - a) / s2, (a + b) / 2.0
    return lambda y: (_flat(y) - mid) @ direction > 0


def laplace_attacker(x0: Any, x1: Any, scales: Any = 1.0) -> Attacker:
    """Likelihood-ratio attacker for Laplace noise: guesses 1 when sum (|y-x0| - |y-x1|)/b > 0."""
    a, b = np.asarray(x0, np.float64).ravel(), np.asarray(x1, np.float64).ravel()
    s = np.broadcast_to(np.asarray(scales, np.float64).ravel(), a.shape)

    def attack(y: np.ndarray) -> np.ndarray:
        f = _flat(y)
        return np.sum((np.abs(f - a) - np.abs(f - b)) / s, axis=1) > 0

    return attack


def gpm_key_attacker(x0: Any, x1: Any, key: np.ndarray, sigma: float, beta: float,
                     gamma: float) -> Attacker:
    """The GPM key holder's attacker (GPM Sec. 5), for auditing GPM with its key."""
    from tfdp.mechanisms import pancake  # pylint: disable=import-outside-toplevel

    a, b = np.asarray(x0, np.float64).ravel(), np.asarray(x1, np.float64).ravel()
    return lambda y: pancake.distinguish(_flat(y), a, b, key, sigma, beta, gamma)
