"""Clopper-Pearson confidence bounds of a binomial proportion: the one implementation.

Clopper and Pearson (1934): after k successes in n trials, the one-sided lower bound at level
alpha is the alpha quantile of Beta(k, n - k + 1) (0 when k = 0), the one-sided upper bound
the 1 - alpha quantile of Beta(k + 1, n - k) (1 when k = n); the two-sided interval puts
alpha / 2 in each tail. Every caller (certificates, audits, evaluation, the runs table, GPM's
experiments) uses these functions; the TensorFlow graph form used inside exported models is
`tfdp.certify.graph.tf_clopper_pearson_bounds`, tested equal to `lower` / `upper`
(tests/test_clopper_pearson.py).

Arguments may be numbers or numpy arrays (broadcast together); the result is a float for
scalar arguments, else a float64 array. scipy is imported on first use only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Where a Beta parameter would be 0 (k = 0 for the lower bound, k = n for the upper one) the
# quantile is not used (the bound is 0 or 1); this keeps scipy's evaluation finite there.
_TINY = 1e-300


def _beta_ppf(q: Any, a: Any, b: Any) -> np.ndarray:
    # lazy: loads scipy; importing tfdp.clopper_pearson does not
    import scipy.stats  # pylint: disable=import-outside-toplevel
    with np.errstate(invalid="ignore", divide="ignore"):
        return scipy.stats.beta.ppf(q, a, b)


def _check(successes: Any, trials: Any, alpha: Any) -> tuple[np.ndarray, np.ndarray]:
    k = np.asarray(successes, np.float64)
    n = np.asarray(trials, np.float64)
    if not np.all(np.isfinite(k)) or not np.all(np.isfinite(n)):
        raise ValueError("successes and trials must be finite")
    if np.any(n < 1):
        raise ValueError(f"trials must be >= 1, got {trials!r}")
    if np.any(k < 0) or np.any(k > n):
        raise ValueError(f"successes must be in [0, trials], got {successes!r} of {trials!r}")
    a = np.asarray(alpha, np.float64)
    if not np.all((a > 0) & (a < 1)):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    return k, n


def _out(value: np.ndarray, *args: Any) -> Any:
    return float(value) if all(np.ndim(a) == 0 for a in args) else value


def lower(successes: Any, trials: Any, alpha: float) -> Any:
    """One-sided lower bound: P(true proportion < bound) <= alpha.

    Args:
      successes: k, 0 <= k <= trials.
      trials: n >= 1.
      alpha: the tail probability, in (0, 1) (e.g. 1 - confidence).

    Returns:
      The alpha quantile of Beta(k, n - k + 1); 0 where k = 0.

    Raises:
      ValueError: on counts outside 0 <= k <= n, n < 1, or alpha outside (0, 1).
    """
    k, n = _check(successes, trials, alpha)
    value = np.where(k > 0, _beta_ppf(alpha, np.maximum(k, _TINY), n - k + 1), 0.0)
    return _out(value, successes, trials, alpha)


def upper(successes: Any, trials: Any, alpha: float) -> Any:
    """One-sided upper bound: P(true proportion > bound) <= alpha.

    Args:
      successes: k, 0 <= k <= trials.
      trials: n >= 1.
      alpha: the tail probability, in (0, 1).

    Returns:
      The 1 - alpha quantile of Beta(k + 1, n - k); 1 where k = n.

    Raises:
      ValueError: as `lower`.
    """
    k, n = _check(successes, trials, alpha)
    value = np.where(k < n, _beta_ppf(1.0 - np.asarray(alpha, np.float64), k + 1,
                                      np.maximum(n - k, _TINY)), 1.0)
    return _out(value, successes, trials, alpha)


def interval(successes: Any, trials: Any, alpha: float = 0.05) -> tuple[Any, Any]:
    """Two-sided interval: `lower` and `upper` at alpha / 2 each (coverage 1 - alpha).

    Args:
      successes: k, 0 <= k <= trials.
      trials: n >= 1.
      alpha: the total tail probability, in (0, 1); 0.05 gives the 95% interval.

    Returns:
      (low, high).

    Raises:
      ValueError: as `lower`.
    """
    half = np.asarray(alpha, np.float64) / 2
    half = float(half) if np.ndim(half) == 0 else half
    return lower(successes, trials, half), upper(successes, trials, half)


def interval_by_root(successes: int, trials: int, confidence: float = 0.95
                     ) -> tuple[float, float]:
    """The two-sided interval found by root-finding on the binomial tails (scipy's
    `binomtest(...).proportion_ci(method="exact")`), the form GPM's committed experiment
    results were computed with. It is the same interval as `interval(k, n, 1 - confidence)`
    up to the root finder's tolerance (tests/test_clopper_pearson.py checks 1e-9).

    Raises:
      ValueError: on trials < 1 or successes outside [0, trials].
    """
    if trials <= 0:
        raise ValueError(f"trials must be > 0, got {trials}")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be in [0, trials], got {successes}")
    # lazy: loads scipy; importing tfdp.clopper_pearson does not
    import scipy.stats  # pylint: disable=import-outside-toplevel
    ci = scipy.stats.binomtest(int(successes), int(trials)).proportion_ci(confidence,
                                                                           method="exact")
    return float(ci.low), float(ci.high)
