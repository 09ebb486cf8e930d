"""Tight audit of Gaussian mechanisms: a Gaussian-DP mu lower bound from all their outputs.

The balanced game and the one-threshold audit of `tfdp.audit.empirical` use one bit or one
event per output, which wastes most of the information a Gaussian output carries. Here the
whole output distribution is used: for a mechanism whose output is y ~ N(x, Sigma), every
linear score s = w . y is Gaussian with the same variance under both neighbours, so the pair
(s | x0, s | x1) has exactly the Gaussian trade-off curve G_mu with mu = |E s1 - E s0| / sd(s)
(Dong, Roth, Su 2019, "Gaussian Differential Privacy", Sec. 2.3: N(0, 1) vs N(mu, 1)). The
score is post-processing of the output, so the mechanism is no more private than G_mu, and an
(eps, delta)-DP claim requires delta_mu(eps) <= delta (Dong-Roth-Su Corollary 2.13).

The statistic: mu_hat = (mean(s1) - mean(s0)) / pooled sd from n runs on each input.
sqrt(n/2) mu_hat follows a noncentral t distribution with 2n - 2 degrees of freedom and
noncentrality sqrt(n/2) mu, which is inverted for a one-sided lower confidence bound mu_lower;
eps_lower = eps_{mu_lower}(delta) is then a lower bound on epsilon at that confidence.

Assumption (say it wherever the number is shown): the audited outputs are Gaussian with a
covariance that does not depend on the input. That is what a Gaussian mechanism claims; the
audit tests it (D'Agostino-Pearson normality of each score sample, F test of equal variances)
and reports no bound when the test rejects. Under-noising (a wrong sigma) keeps the outputs
Gaussian and shows up as a larger mu.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np
from scipy import optimize, special, stats

from tfdp import checks
from tfdp.audit import empirical

# p-value below which the Gaussian assumption counts as rejected (no bound reported).
GAUSSIAN_CHECK_LEVEL = 1e-3


def gdp_delta(mu: float, epsilon: float) -> float:
    """delta(eps) of mu-GDP: Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2).

    Dong, Roth, Su 2019, Corollary 2.13 (the same curve as Balle & Wang 2018 Thm 8 with
    mu = sensitivity / sigma). Log-CDFs keep small deltas and large eps precise.
    """
    if not (math.isfinite(mu) and mu >= 0):
        raise ValueError(f"mu must be a finite number >= 0, got {mu!r}")
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    if mu == 0.0:
        return 0.0
    log_pa = float(special.log_ndtr(-epsilon / mu + mu / 2.0))
    log_pb = float(special.log_ndtr(-epsilon / mu - mu / 2.0))
    return max(math.exp(log_pa) * -math.expm1(epsilon + log_pb - log_pa), 0.0)


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest eps with delta_mu(eps) <= delta: the (eps, delta) guarantee of mu-GDP.

    delta_mu(eps) decreases in eps and increases in mu, so eps_mu(delta) increases in mu and
    a lower confidence bound on mu gives one on eps.

    Args:
      mu: GDP parameter >= 0.
      delta: in (0, 1).

    Returns:
      epsilon >= 0 (0 when the total variation distance 2 Phi(mu/2) - 1 is already <= delta).
    """
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if gdp_delta(mu, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta(mu, hi) > delta:
        hi *= 2.0
    return float(optimize.brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi,
                                 xtol=1e-12, rtol=1e-12))


def mu_lower_bound(s0: np.ndarray, s1: np.ndarray, confidence: float = 0.95
                   ) -> tuple[float, float]:
    """(mu_hat, one-sided lower confidence bound on mu) from equal-size score samples.

    With n scores per input, t = sqrt(n/2) (mean1 - mean0) / s_pooled follows the
    noncentral t distribution with 2n - 2 degrees of freedom and noncentrality sqrt(n/2) mu
    when both samples are Gaussian with equal variance (the two-sample t statistic). Its
    survival function increases in mu, so mu_lower = the mu at which P(T >= t_obs) equals
    1 - confidence (0 if even mu = 0 makes t_obs that likely): P(mu_lower > mu) <= 1 - conf.
    """
    s0 = np.asarray(s0, np.float64).ravel()
    s1 = np.asarray(s1, np.float64).ravel()
    if s0.size != s1.size or s0.size < 2:
        raise ValueError("s0 and s1 must have the same size >= 2")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    n = s0.size
    df = 2 * n - 2
    pooled = math.sqrt((np.var(s0, ddof=1) + np.var(s1, ddof=1)) / 2.0)
    if pooled == 0.0:
        raise ValueError("scores have zero variance: the outputs carry no noise")
    mu_hat = float((s1.mean() - s0.mean()) / pooled)
    k = math.sqrt(n / 2.0)
    t_obs = mu_hat * k
    alpha = 1.0 - confidence

    def excess(mu: float) -> float:
        return float(stats.nct.sf(t_obs, df, mu * k)) - alpha

    if excess(0.0) >= 0.0:
        return mu_hat, 0.0
    hi = max(2.0 * mu_hat, 1.0)
    while excess(hi) < 0.0:
        hi *= 2.0
    return mu_hat, float(optimize.brentq(excess, 0.0, hi, xtol=1e-10))


def gaussian_check(s0: np.ndarray, s1: np.ndarray) -> float:
    """Smallest p-value (Bonferroni x3) of: s0 normal, s1 normal, equal variances.

    D'Agostino-Pearson omnibus test (`scipy.stats.normaltest`, skewness and kurtosis) on each
    sample and the two-sided F test of var(s1) = var(s0).
    """
    s0 = np.asarray(s0, np.float64).ravel()
    s1 = np.asarray(s1, np.float64).ravel()
    p0 = float(stats.normaltest(s0).pvalue)
    p1 = float(stats.normaltest(s1).pvalue)
    f = np.var(s1, ddof=1) / np.var(s0, ddof=1)
    cdf = float(stats.f.cdf(f, s1.size - 1, s0.size - 1))
    p_f = 2.0 * min(cdf, 1.0 - cdf)
    return min(1.0, 3.0 * min(p0, p1, p_f))


def exact_epsilon(x0: Any, x1: Any, stddevs: Any, delta: float) -> float:
    """The eps that a Gaussian mechanism with these stds actually achieves on (x0, x1).

    mu = ||(x1 - x0) / stddevs||_2 (the Mahalanobis distance of the pair), eps = eps_mu(delta).
    For a pair at the calibration's sensitivity this is the tightest claim the noise supports.
    """
    a = np.asarray(x0, np.float64).ravel()
    b = np.asarray(x1, np.float64).ravel()
    s = np.broadcast_to(np.asarray(stddevs, np.float64).ravel(), a.shape)
    return gdp_epsilon(float(np.linalg.norm((b - a) / s)), delta)


@dataclasses.dataclass
class GDPAuditResult(empirical.AuditResult):
    """`empirical.AuditResult` of a Gaussian-DP audit (method "gdp") plus its statistics.

    Attributes:
      mu_hat, mu_lower: the GDP estimate and its lower confidence bound.
      gaussian_p: p-value of `gaussian_check`; below GAUSSIAN_CHECK_LEVEL the Gaussian
        assumption is rejected and eps_lower is reported as nan (no bound).
      exact_eps: eps that the mechanism's nominal noise achieves on the pair (nan if unknown).
    """

    mu_hat: float = math.nan
    mu_lower: float = math.nan
    gaussian_p: float = math.nan
    exact_eps: float = math.nan


def audit_gaussian_dp(mechanism: empirical.Mechanism, x0: Any, x1: Any,
                      score: Callable[[np.ndarray], np.ndarray], *, trials: int,
                      claimed_eps: float, delta: float, seed: int, confidence: float = 0.95,
                      name: str = "mechanism", exact_eps: float = math.nan,
                      batch: int = 50000) -> GDPAuditResult:
    """Gaussian-DP audit: mu lower bound from `trials` outputs per input, then eps at delta.

    Args:
      mechanism: callable (x, num, rng) -> [num, ...] outputs, claimed Gaussian.
      x0, x1: the neighbouring inputs (at the calibration's sensitivity).
      score: a linear score of the output, high meaning x1 (e.g. `empirical.gaussian_score`);
        the direction only matters for power, not soundness (any post-processing is valid).
      trials: mechanism runs per input (>= 100).
      claimed_eps, delta: the claim; eps_lower is computed at this delta.
      seed: numpy Generator seed.
      confidence: confidence of mu_lower and hence eps_lower.
      name: label.
      exact_eps: eps the nominal noise achieves (reported beside the bound).
      batch: runs per mechanism call.

    Returns:
      GDPAuditResult; eps_lower = eps_{mu_lower}(delta), or nan when the outputs fail the
      Gaussian check; exceeds_claim when eps_lower > claimed_eps.
    """
    trials = checks.check_int(trials, "trials", minimum=100)
    if not (isinstance(claimed_eps, (int, float)) and claimed_eps >= 0):
        raise ValueError(f"claimed_eps must be a number >= 0, got {claimed_eps!r}")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    batch = checks.check_int(batch, "batch", minimum=1)
    rng = np.random.default_rng(seed)
    x0, x1 = np.asarray(x0), np.asarray(x1)

    def scores(x):
        parts, done = [], 0
        while done < trials:
            m = min(batch, trials - done)
            parts.append(np.asarray(score(mechanism(x, m, rng)), np.float64).ravel())
            done += m
        return np.concatenate(parts)

    s0, s1 = scores(x0), scores(x1)
    mu_hat, mu_lo = mu_lower_bound(s0, s1, confidence)
    p_gauss = gaussian_check(s0, s1)
    eps_lo = gdp_epsilon(mu_lo, delta) if p_gauss >= GAUSSIAN_CHECK_LEVEL else math.nan
    return GDPAuditResult(
        name=name, trials=int(trials), successes=int(np.sum(s1 > 0) + np.sum(s0 <= 0)),
        success_rate=float((np.sum(s1 > 0) + np.sum(s0 <= 0)) / (2 * trials)),
        p_lower=math.nan, eps_lower=eps_lo, claimed_eps=float(claimed_eps),
        delta=float(delta), confidence=float(confidence),
        exceeds_claim=bool(eps_lo > claimed_eps), method="gdp", mu_hat=mu_hat,
        mu_lower=mu_lo, gaussian_p=p_gauss, exact_eps=float(exact_eps))
