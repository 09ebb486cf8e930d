"""Empirical DP audit: a plug-in attacker's success rate turned into a lower bound on epsilon."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np

from tfdp import checks, clopper_pearson
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
      method: "balanced" (`audit`) or "threshold" (`audit_threshold`).
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
    method: str = "balanced"
    disclaimer: str = DISCLAIMER

    def to_dict(self) -> dict:
        """Plain dict (for CSV / JSON)."""
        return dataclasses.asdict(self)


def clopper_pearson_lower(successes: int, trials: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson lower bound: (1 - confidence) quantile of Beta(k, n - k + 1)."""
    trials = checks.check_int(trials, "trials", minimum=1)
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be in [0, trials], got {successes!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return clopper_pearson.lower(successes, trials, 1.0 - confidence)


def eps_from_success(p: float, delta: float) -> float:
    """Smallest epsilon consistent with success p of a balanced distinguishing game.

    An (eps, delta)-DP mechanism allows success at most (e^eps + delta) / (1 + e^eps), so
    eps >= log((p - delta) / (1 - p)) (docs/gpm.md, "Audits"). Returns 0 when p <= 1/2
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
    trials = checks.check_int(trials, "trials", minimum=1)
    if not (isinstance(claimed_eps, (int, float)) and claimed_eps >= 0):
        raise ValueError(f"claimed_eps must be a number >= 0, got {claimed_eps!r}")
    if not (isinstance(delta, (int, float)) and 0 <= delta < 1):
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    batch = checks.check_int(batch, "batch", minimum=1)
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


def clopper_pearson_upper(successes: int, trials: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound: confidence quantile of Beta(k + 1, n - k)."""
    return clopper_pearson.upper(successes, trials, 1.0 - confidence)


def audit_threshold(mechanism: Mechanism, x0: Any, x1: Any,
                    score: Callable[[np.ndarray], np.ndarray], *, trials: int,
                    claimed_eps: float, delta: float, seed: int, confidence: float = 0.95,
                    name: str = "mechanism", min_count: int = 50) -> AuditResult:
    """Threshold (tail) audit: eps_lb = log((TPR_lb - delta) / FPR_ub) at a chosen threshold.

    The balanced game of `audit` is weak for Gaussian noise, whose privacy loss is largest in
    the tails. Here the mechanism runs `trials` times on each input; the first half of the
    scores picks the threshold tau (largest empirical log((TPR - delta)/FPR) with at least
    `min_count` false positives), the second half bounds TPR from below and FPR from above
    with one-sided Clopper-Pearson bounds at confidence 1 - (1 - confidence)/2 each
    (Bonferroni), so the bound holds with probability >= `confidence`. For an (eps, delta)-DP
    mechanism every event satisfies TPR <= e^eps FPR + delta (the definition of DP).

    Args:
      mechanism: callable (x, num, rng) -> [num, ...] outputs.
      x0, x1: the neighbouring inputs.
      score: callable (outputs) -> [num] scores, high meaning "x1".
      trials: runs per input (split in halves).
      claimed_eps, delta: the claim.
      seed: numpy Generator seed.
      confidence: overall confidence.
      name: label.
      min_count: minimum false positives in the selection half.

    Returns:
      AuditResult (successes / success_rate refer to true positives of the evaluation half;
      p_lower is the TPR lower bound).
    """
    trials = checks.check_int(trials, "trials", minimum=200)
    if not (isinstance(claimed_eps, (int, float)) and claimed_eps >= 0):
        raise ValueError(f"claimed_eps must be a number >= 0, got {claimed_eps!r}")
    if not (isinstance(delta, (int, float)) and 0 <= delta < 1):
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    rng = np.random.default_rng(seed)
    x0, x1 = np.asarray(x0), np.asarray(x1)
    s0 = np.asarray(score(mechanism(x0, trials, rng)), dtype=np.float64)
    s1 = np.asarray(score(mechanism(x1, trials, rng)), dtype=np.float64)
    half = trials // 2
    sel0, ev0, sel1, ev1 = np.sort(s0[:half]), s0[half:], s1[:half], s1[half:]
    # Candidate thresholds: scores of the selection half of x0 leaving >= min_count above.
    cands = sel0[: max(1, half - min_count)][::max(1, half // 2000)]
    best_tau, best_val = float(cands[0]), -math.inf
    for tau in cands:
        fpr = np.mean(sel0 > tau)
        tpr = np.mean(sel1 > tau)
        if fpr > 0 and tpr > delta:
            val = math.log((tpr - delta) / fpr)
            if val > best_val:
                best_tau, best_val = float(tau), val
    n_ev = trials - half
    tp, fp = int(np.sum(ev1 > best_tau)), int(np.sum(ev0 > best_tau))
    each = 1.0 - (1.0 - confidence) / 2.0
    tpr_lb = clopper_pearson_lower(tp, n_ev, each) if tp else 0.0
    fpr_ub = clopper_pearson_upper(fp, n_ev, each)
    eps_lo = math.log((tpr_lb - delta) / fpr_ub) if tpr_lb > delta and fpr_ub > 0 else 0.0
    eps_lo = max(eps_lo, 0.0)
    return AuditResult(name=name, trials=int(n_ev), successes=tp, success_rate=tp / n_ev,
                       p_lower=tpr_lb, eps_lower=eps_lo, claimed_eps=float(claimed_eps),
                       delta=float(delta), confidence=float(confidence),
                       exceeds_claim=bool(eps_lo > claimed_eps), method="threshold")


# --------------------------------------------------------------------------------------------
# Plug-in attackers (likelihood-ratio tests for the noise family the mechanism claims).


def _flat(outputs: np.ndarray) -> np.ndarray:
    out = np.asarray(outputs, dtype=np.float64)
    return out.reshape(out.shape[0], -1)


def gaussian_score(x0: Any, x1: Any, stddevs: Any = 1.0) -> Callable[[np.ndarray], np.ndarray]:
    """Gaussian log-likelihood-ratio score (y - (x0 + x1)/2) . (x1 - x0) / s^2 (high -> x1)."""
    a, b = np.asarray(x0, np.float64).ravel(), np.asarray(x1, np.float64).ravel()
    s2 = np.broadcast_to(np.asarray(stddevs, np.float64).ravel() ** 2, a.shape)
    direction, mid = (b - a) / s2, (a + b) / 2.0
    return lambda y: (_flat(y) - mid) @ direction


def laplace_score(x0: Any, x1: Any, scales: Any = 1.0) -> Callable[[np.ndarray], np.ndarray]:
    """Laplace log-likelihood-ratio score sum (|y - x0| - |y - x1|) / b (high -> x1)."""
    a, b = np.asarray(x0, np.float64).ravel(), np.asarray(x1, np.float64).ravel()
    s = np.broadcast_to(np.asarray(scales, np.float64).ravel(), a.shape)
    return lambda y: np.sum((np.abs(_flat(y) - a) - np.abs(_flat(y) - b)) / s, axis=1)


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

