"""The one-run audit bound: guesses about m randomly included canaries -> an eps lower bound.

Steinke, Nasr, Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023. Each of
m canaries is included in the training set independently with probability 1/2 (S_i = +-1);
after one training run the auditor guesses T_i in {-1, 0, +1} (0 = abstain) for every canary,
making r = sum |T_i| guesses of which W are correct. Their main theorem (Theorem 3, the
(eps, delta) case with abstentions): if training is (eps, delta)-DP, then for every v

    P[W >= v] <= f(v) + 2 m delta max_{i = 1..v} (f(v - i) - f(v)) / i,
    f(v) = P[Binomial(r, e^eps / (1 + e^eps)) >= v].

With delta = 0 this is the binomial tail (Theorem 2: eps-DP guesses are no better than
randomized response). The right-hand side is the p-value of the hypothesis "(eps, delta)-DP"
given v correct guesses; it grows with eps, and the eps lower bound at confidence c is the
largest eps whose p-value is below 1 - c: every smaller eps is rejected at level 1 - c.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats

from tfdp import checks


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Upper bound on P[W >= v] for an (epsilon, delta)-DP run (Steinke et al. Theorem 3).

    Args:
      m: number of canaries (each included with probability 1/2).
      r: guesses made (abstentions excluded), r <= m.
      v: correct guesses, v <= r.
      epsilon: eps >= 0 of the null hypothesis.
      delta: delta in [0, 1] of the null hypothesis.

    Returns:
      The bound, capped at 1.
    """
    m = checks.check_int(m, "m", minimum=1)
    r = checks.check_int(r, "r", minimum=0)
    v = checks.check_int(v, "v", minimum=0)
    if not v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta must be in [0, 1], got {delta!r}")
    q = 1.0 / (1.0 + math.exp(-epsilon))  # accuracy of eps-DP randomized response
    f_v = float(stats.binom.sf(v - 1, r, q))  # f(v) = P[Bin(r, q) >= v]
    if delta == 0.0 or v == 0:
        return min(1.0, f_v)
    # f(v - i) - f(v) = P[v - i <= Bin(r, q) < v] for i = 1..v (a cumulative pmf sum).
    pmf = stats.binom.pmf(np.arange(v - 1, -1, -1), r, q)  # P[Bin = v-1], ..., P[Bin = 0]
    gaps = np.cumsum(pmf)
    slope = float(np.max(gaps / np.arange(1, v + 1)))
    return min(1.0, f_v + 2.0 * m * delta * slope)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float,
                        confidence: float = 0.95) -> float:
    """Largest eps rejected at level 1 - confidence: sup{eps : p_value(eps) < 1 - confidence}.

    Returns 0 when even eps = 0 is not rejected. If the training run is (eps, delta)-DP, the
    returned bound exceeds eps with probability at most 1 - confidence (over the canary
    inclusion and the training randomness).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    alpha = 1.0 - confidence
    if p_value(m, r, v, 0.0, delta) >= alpha:
        return 0.0
    hi = 1.0
    while p_value(m, r, v, hi, delta) < alpha:
        hi *= 2.0
        if hi > 1e4:  # pragma: no cover - r, v bounded; the p-value reaches 1 long before
            return math.inf
    return float(optimize.brentq(lambda e: p_value(m, r, v, e, delta) - alpha, 0.0, hi,
                                 xtol=1e-9))


def guesses(scores: np.ndarray, k_plus: int, k_minus: int) -> np.ndarray:
    """T in {-1, 0, +1}: +1 for the k_plus highest scores, -1 for the k_minus lowest, else 0.

    Ties are broken by position (a stable sort), never by the inclusion bits.
    """
    s = np.asarray(scores, np.float64).ravel()
    k_plus = checks.check_int(k_plus, "k_plus", minimum=0)
    k_minus = checks.check_int(k_minus, "k_minus", minimum=0)
    if k_plus + k_minus > s.size:
        raise ValueError(f"k_plus + k_minus = {k_plus + k_minus} exceeds the {s.size} canaries")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores: every canary score must be finite")
    order = np.argsort(s, kind="stable")
    t = np.zeros(s.size, np.int64)
    if k_minus:
        t[order[:k_minus]] = -1
    if k_plus:
        t[order[s.size - k_plus:]] = 1
    return t


def count(t: np.ndarray, included: np.ndarray) -> tuple[int, int]:
    """(r, v): guesses made and correct guesses, for T and the inclusion bits."""
    t = np.asarray(t).ravel()
    s = np.where(np.asarray(included, bool).ravel(), 1, -1)
    return int(np.sum(t != 0)), int(np.sum(t * s > 0))
