"""The key holder's distinguishing attack on GPM, its exact and key-averaged success-rate
oracles, and the privacy bounds against the key holder (lower, upper, Renyi, key-holder view).

RESEARCH AND ATTACK CODE; see `tfdp.papers.gpm.pancake`. All arithmetic is float64.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special, stats

from tfdp import checks
from tfdp.papers.gpm.pancake_params import (_check_key, _float64_array, gm_eps, pancake_std,
                                            spacing, tau)


# --------------------------------------------------------------------------------------------
# The key holder's distinguishing attack and its oracles.


def distinguish(y: Any, q0: Any, q1: Any, w: Any, sigma: float, beta: float, gamma: float
                ) -> np.ndarray:
    """Key holder's attack: which of q0, q1 lies on the pancakes through y (GPM Sec. 5).

    r_i = (y - q_i).w / S, e_i = |r_i - round(r_i)|, guess argmin_i e_i, ties -> 1 (as the
    authors' code does). The attacker must use exactly the q0, q1 the mechanism used.

    Args:
      y: released output(s), float64 [d] or [m, d].
      q0, q1: the neighbours' query answers, [d] or [m, d].
      w: key(s), [d] or [m, d].
      sigma, beta, gamma: GPM parameters.

    Returns:
      int64 array [m] of guesses in {0, 1} (shape [] for a single y).
    """
    y = _float64_array("y", y)
    q0 = _float64_array("q0", q0)
    q1 = _float64_array("q1", q1)
    w = _check_key(w)
    s = spacing(sigma, beta, gamma)
    for name, arr in (("q0", q0), ("q1", q1), ("w", w)):
        if arr.shape[-1] != y.shape[-1]:
            raise ValueError(f"{name} has dimension {arr.shape[-1]} but y has {y.shape[-1]}")
    # GPM Sec. 5 attack: distance of the projected residual to the nearest pancake.
    r0 = np.sum((y - q0) * w, axis=-1) / s
    r1 = np.sum((y - q1) * w, axis=-1) / s
    e0 = np.abs(r0 - np.round(r0))
    e1 = np.abs(r1 - np.round(r1))
    return np.where(e0 < e1, 0, 1).astype(np.int64)


def realisable_t(dq: Any, w: Any, sigma: float, beta: float, gamma: float
                 ) -> tuple[int, float]:
    """Splits w.dq = S (T + t) into its integer T and fractional t in [-0.5, 0.5) (GPM Thm 4.2).

    Args:
      dq: q(D1) - q(D0), float64 [d].
      w: key [d].
      sigma, beta, gamma: GPM parameters.

    Returns:
      (T, t).
    """
    dq = _float64_array("dq", dq)
    w = _check_key(w)
    x = float(dq @ w) / spacing(sigma, beta, gamma)
    big_t = math.floor(x + 0.5)
    return int(big_t), x - big_t


def _periodic_interval_mass(center: Any, half_width: float, scale: float) -> Any:
    """P[dist(u - center, Z) < half_width] for u ~ N(0, scale^2), summed over copies of Z.

    `center` may be an array; returns a float for a scalar center, else an array.
    """
    k_max = int(math.ceil(10.0 * scale)) + 3
    ks = np.arange(-k_max, k_max + 1, dtype=np.float64)
    c = np.asarray(center, dtype=np.float64)[..., None]
    hi = special.ndtr((ks + c + half_width) / scale)
    lo = special.ndtr((ks + c - half_width) / scale)
    mass = np.sum(hi - lo, axis=-1)
    return float(mass) if mass.ndim == 0 else mass


def success_exact(t: float, beta: float, gamma: float) -> float:
    """Exact success of the key attack when w.dq = S (T + t), for a fixed key and pair.

    P_succ(t) = P[dist(u, Z) < dist(u - t, Z)], u ~ N(0, tau^2) (derived here, not in the paper):
    the set {u: dist(u, Z) < dist(u - t, Z)} is the union over k of the intervals
    (k + |t|/2 - 1/2, k + |t|/2) shifted to the side away from t.

    Args:
      t: fractional shift in [-0.5, 0.5].
      beta, gamma: GPM parameters.

    Returns:
      success probability in [0.5, 1].
    """
    t = float(t)
    if not -0.5 <= t <= 0.5:
        raise ValueError(f"t must be in [-0.5, 0.5], got {t}")
    scale = tau(beta, gamma)
    a = abs(t)
    # Interval (a/2 - 1/2, a/2) has centre a/2 - 1/4 and half-width 1/4 (the sum over k).
    return _periodic_interval_mass(a / 2.0 - 0.25, 0.25, scale)


def success_paper_bound(t: float, beta: float, gamma: float) -> float:
    """The paper's lower bound 1 - 2 Phi(-x) on the attack's success (GPM Thm 5.1)."""
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    x = (gamma * abs(float(t)) / beta) * math.sqrt(math.pi / (2.0 * (beta * beta + gamma * gamma)))
    return 1.0 - 2.0 * float(special.ndtr(-x))  # GPM Thm 5.1


def success_averaged(dq_norm: float, sigma: float, beta: float, gamma: float, d: int, *,
                     exact: bool = False) -> float:
    """Success of the key attack averaged over a uniformly random key (derived, not in the paper).

    Approximation (w.dq ~ ||dq|| N(0, 1/d), pancake spacing much larger than |w.dq|):
    1/2 + arctan(||dq|| sqrt(beta^2 + gamma^2) / (2 sqrt(d) sigma beta)) / pi.
    With exact=True, integrates `success_exact` over the exact law of w.dq (GPM Lemma B.1:
    the projection of a fixed unit vector on a uniform key has density proportional to
    (1 - u^2)^((d-3)/2)), including the wrap-around of the fractional part.

    Args:
      dq_norm: ||q(D1) - q(D0)||, >= 0.
      sigma, beta, gamma: GPM parameters.
      d: dimension (>= 2).
      exact: numerical integration instead of the arctan formula.

    Returns:
      success probability.
    """
    dq_norm = float(dq_norm)
    if not math.isfinite(dq_norm) or dq_norm < 0:
        raise ValueError(f"dq_norm must be finite and >= 0, got {dq_norm}")
    sigma = checks.check_positive(sigma, "sigma")
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    d = checks.check_positive_int(d, "d")
    if not exact:
        c = dq_norm * math.hypot(beta, gamma) / (2.0 * math.sqrt(d) * sigma * beta)
        return 0.5 + math.atan(c) / math.pi  # E|Phi(c|Z|)| = 1/2 + arctan(c)/pi
    if d < 3:
        raise ValueError("d must be >= 3 for exact=True")
    s = spacing(sigma, beta, gamma)
    # u = w.e for a unit e: density of P_T (GPM Lemma B.1); integrate over z = u sqrt(d) on a
    # grid that is dense near z = 0, where the success drops to 1/2 within |z| ~ sigma_w.
    z_max = min(12.0, math.sqrt(d) * (1.0 - 1e-12))
    grid = np.linspace(-1.0, 1.0, 200001)
    z = z_max * np.sinh(12.0 * grid) / math.sinh(12.0)
    u = z / math.sqrt(d)
    log_dens = 0.5 * (d - 3) * np.log1p(-u * u)
    dens = np.exp(log_dens - log_dens.max())
    x = dq_norm * u / s
    frac = x - np.floor(x + 0.5)
    succ = _periodic_interval_mass(np.abs(frac) / 2.0 - 0.25, 0.25, tau(beta, gamma))
    return float(np.trapezoid(succ * dens, z) / np.trapezoid(dens, z))


def best_gm_success(dq_norm: float, sigma: float) -> float:
    """Best possible success against the genuine GM: Phi(||dq|| / (2 sigma)) (derived)."""
    return float(special.ndtr(float(dq_norm) / (2.0 * checks.check_positive(sigma, "sigma"))))


# --------------------------------------------------------------------------------------------
# Privacy bounds against the key holder.


def eps_lower(t: float, beta: float, gamma: float, delta: float) -> float:
    """Lower bound on GPM's epsilon for a pair realising fractional shift t (GPM Thm 4.2).

    GPM is not (eps, delta)-DP for eps < log((1 - delta) / (2 Phi(-x)) - 1), x as in
    Thm 5.1; computed with a stable log-CDF.

    Args:
      t: fractional shift in [-0.5, 0.5].
      beta: in (0, 1).
      gamma: > 1.
      delta: in (0, 0.5).

    Returns:
      the bound (float64; <= 0 means the bound says nothing).
    """
    t = float(t)
    if not -0.5 <= t <= 0.5:
        raise ValueError(f"t must be in [-0.5, 0.5], got {t}")
    beta = checks.check_unit_interval(beta, "beta")
    gamma = checks.check_positive(gamma, "gamma")
    if gamma <= 1.0:
        raise ValueError(f"gamma must be > 1 for GPM Thm 4.2, got {gamma}")
    delta = checks.check_unit_interval(delta, "delta")
    if delta >= 0.5:
        raise ValueError(f"delta must be in (0, 0.5) for GPM Thm 4.2, got {delta!r}")
    x = (gamma * abs(t) / beta) * math.sqrt(math.pi / (2.0 * (beta * beta + gamma * gamma)))
    log_two_phi = math.log(2.0) + float(special.log_ndtr(-x))  # log(2 Phi(-x))
    inner = -delta - math.exp(log_two_phi)
    if inner <= -1.0:
        return -math.inf
    return math.log1p(inner) - log_two_phi  # GPM Thm 4.2: log((1-delta)/(2Phi(-x)) - 1)


def eps_upper(delta: float, sigma: float, beta: float, gamma: float,
              sensitivity: float = 1.0) -> float:
    """Upper bound: GPM is (eps_up, delta)-DP (GPM Thm 4.4, App. B.3).

    eps_up = Thm 2.3 epsilon with the sensitivity inflated to Delta sqrt(beta^2+gamma^2)/beta.
    """
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    sensitivity = checks.check_positive(sensitivity, "sensitivity")
    return gm_eps(sigma, delta, sensitivity * math.hypot(beta, gamma) / beta)  # GPM Thm 4.4


def rdp_upper(alpha: float, sigma: float, beta: float, gamma: float,
              sensitivity: float = 1.0) -> float:
    """Renyi-DP upper bound alpha (beta^2+gamma^2) Delta^2 / (2 beta^2 sigma^2) (derived)."""
    alpha = checks.check_positive(alpha, "alpha")
    if alpha <= 1.0:
        raise ValueError(f"alpha must be > 1, got {alpha}")
    sigma = checks.check_positive(sigma, "sigma")
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    sensitivity = checks.check_positive(sensitivity, "sensitivity")
    return alpha * (beta * beta + gamma * gamma) * sensitivity ** 2 / (
        2.0 * beta * beta * sigma * sigma)


def pair_rdp(alpha: float, dq: Any, w: Any, sigma: float, beta: float, gamma: float) -> float:
    """Renyi divergence of order alpha for one pair: alpha M^2 / 2 (derived).

    M^2 = (||dq||^2 + (gamma^2/beta^2) (w.dq)^2) / sigma^2.
    """
    alpha = checks.check_positive(alpha, "alpha")
    if alpha <= 1.0:
        raise ValueError(f"alpha must be > 1, got {alpha}")
    dq = _float64_array("dq", dq)
    w = _check_key(w)
    sigma = checks.check_positive(sigma, "sigma")
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    m2 = (float(dq @ dq) + (gamma / beta) ** 2 * float(dq @ w) ** 2) / sigma ** 2
    return 0.5 * alpha * m2


def key_holder_noise_multiplier(noise_multiplier: float, beta: float, gamma: float) -> float:
    """DP-SGD noise multiplier that protects against the key holder (derived).

    GPM is post-processing of a Gaussian whose smallest std (along w) is beta/sqrt(beta^2 +
    gamma^2) times the nominal one, so a key-holder accountant runs the usual subsampled
    Gaussian analysis with z_eff = z beta / sqrt(beta^2 + gamma^2) (e.g. z = 50.97,
    beta = 1e-5, gamma = 12483 gives about 4e-8: no meaningful guarantee).
    """
    z = checks.check_positive(noise_multiplier, "noise_multiplier")
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    return z * beta / math.hypot(beta, gamma)


def lemma41_probabilities(t: float, beta: float, gamma: float) -> tuple[float, float]:
    """Exact P[Y in A(t)] and P[Y' in A(t)] of GPM Lemma 4.1.

    Y ~ H_{1,beta,gamma} is a mixture of Gaussians of equal std centred on the lattice
    gamma Z / (beta^2 + gamma^2) with weights summing to 1; A(t) is a periodic union of
    intervals of half-width |t|/2 (lattice units) around that lattice. Summing the
    component CDFs over all intervals therefore reduces to the mass of N(0, tau^2) within
    |t|/2 of Z (for Y) and within |t|/2 of Z - t (for Y' = Y + (T + t) lattice units).

    Returns:
      (P[Y in A(t)], P[Y' in A(t)]).
    """
    t = float(t)
    if not -0.5 <= t <= 0.5:
        raise ValueError(f"t must be in [-0.5, 0.5], got {t}")
    scale = tau(beta, gamma)
    half = abs(t) / 2.0
    return (_periodic_interval_mass(0.0, half, scale),
            _periodic_interval_mass(-t, half, scale))


def hockey_stick_delta(eps: Any, sigma: float, beta: float, gamma: float,
                       shift: float, *, points_per_std: int = 40) -> np.ndarray:
    """delta(eps) = int max(0, p0 - e^eps p1) for the 1-D GPM projections.

    p0 is the law of GPM noise along w (a mixture of N(k S, sigma_w^2) with discrete Gaussian
    weights) and p1 the same law shifted by `shift` (= w.dq; for dq parallel to w the
    orthogonal parts are identical and the full-dimensional divergence equals this one).

    Args:
      eps: scalar or array of epsilons.
      sigma, beta, gamma: GPM parameters.
      shift: w.dq.
      points_per_std: grid resolution per pancake std.

    Returns:
      float64 array of deltas, one per eps.
    """
    sigma = checks.check_positive(sigma, "sigma")
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    eps_arr = np.atleast_1d(np.asarray(eps, dtype=np.float64))
    s = spacing(sigma, beta, gamma)
    sw = pancake_std(sigma, beta, gamma)
    v = (beta * beta + gamma * gamma) / (2.0 * math.pi)
    k_max = int(math.ceil(12.0 * math.sqrt(v))) + 2
    ks = np.arange(-k_max, k_max + 1, dtype=np.float64)
    wts = np.exp(-ks ** 2 / (2.0 * v))
    wts /= wts.sum()
    lo = ks[0] * s - 12.0 * sw + min(0.0, shift)
    hi = ks[-1] * s + 12.0 * sw + max(0.0, shift)
    n = int((hi - lo) / sw * points_per_std) + 1
    if n > 20_000_000:
        raise ValueError("grid too large: use moderate beta and gamma")
    x = np.linspace(lo, hi, n)

    def density(offset: float) -> np.ndarray:
        out = np.zeros(n)
        for k, a in zip(ks, wts):
            c = k * s + offset
            sel = slice(max(0, int((c - 12 * sw - lo) / (hi - lo) * (n - 1))),
                        min(n, int((c + 12 * sw - lo) / (hi - lo) * (n - 1)) + 2))
            out[sel] += a * stats.norm.pdf(x[sel], loc=c, scale=sw)
        return out

    p0, p1 = density(0.0), density(shift)
    return np.array([np.trapezoid(np.maximum(0.0, p0 - math.exp(e) * p1), x)
                     for e in eps_arr])


def key_holder_view(sigma: float, delta: float, beta: float, gamma: float, *,
                    sensitivity: float = 1.0, t: float = 0.25) -> dict:
    """The guarantee GPM claims (that of GM) next to what holds against the key holder.

    Args:
      sigma: noise std (as calibrated for the claimed guarantee).
      delta: delta of the claim, in (0, 0.5).
      beta, gamma: GPM parameters.
      sensitivity: L2 sensitivity.
      t: fractional shift for the lower bound (the paper plots t = 0.25).

    Returns:
      dict with claimed_eps (GPM Thm 2.3), eps_lower (Thm 4.2), eps_upper (Thm 4.4),
      delta, and a one-line `statement`.
    """
    claimed = gm_eps(sigma, delta, sensitivity)
    low = eps_lower(t, beta, gamma, delta)
    up = eps_upper(delta, sigma, beta, gamma, sensitivity)
    return {
        "claimed_eps": claimed, "eps_lower": low, "eps_upper": up, "delta": delta, "t": t,
        "statement": (f"claimed ({claimed:.4g}, {delta:g})-DP as a Gaussian mechanism; against "
                      f"the key holder it is ({up:.4g}, {delta:g})-DP (GPM Thm 4.4) and not "
                      f"(eps, {delta:g})-DP for any eps < {low:.4g} once a neighbouring pair "
                      f"realises the fractional shift t = {t:g} (GPM Thm 4.2)"),
    }
