"""Gaussian mechanism calibration: classical, analytic (Balle & Wang), HGM, GPM's tail bound."""

from __future__ import annotations

import math

from scipy import special

from tfdp.mechanisms import _validate

# HGM appendix: Condition 2 alone is binding when s >= 1/2, i.e. delta < sqrt(2/pi) e^{-1/2}.
HGM_CONDITION2_DELTA = math.sqrt(2.0 / math.pi) * math.exp(-0.5)  # 0.48394...

_BISECTION_STEPS = 200
# Relative safety margin added to the analytic Gaussian sigma. The bisection keeps the
# float64 delta(sigma) <= delta, but that evaluation is off by up to ~7e-12 (relative) for
# small epsilon and delta (e.g. eps = 0.005, delta = 1e-10, against a 60-digit mpmath
# reference), which would leave the true delta above the target. Raising sigma by 1e-9
# (relative) lowers delta by more than that error over the tested grid of eps in
# [0.005, 50] and delta in [1e-12, 0.1] (tests/mechanisms/test_gaussian.py checks the true
# delta with mpmath at 60 digits); the noise grows by a negligible 1e-9.
SIGMA_MARGIN = 1e-9


def classical_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float,
                             allow_zero: bool = False) -> float:
    """Noise standard deviation of the classical Gaussian mechanism.

    sigma = sqrt(2 ln(1.25/delta)) * sensitivity / epsilon (Dwork & Roth 2014, Thm A.1;
    HGM Theorem 1). The theorem only holds for epsilon <= 1; beyond that the formula can
    return a sigma that is not DP (e.g. eps = 10, delta = 1e-5 has exact delta 2.27e-5),
    so this function refuses.

    Args:
        epsilon: privacy budget in (0, 1].
        delta: in (0, 1).
        sensitivity: l2 sensitivity >= 0.

    Returns:
        sigma in float64.

    Raises:
        ValueError: on invalid arguments, including epsilon > 1, a zero sensitivity without
            allow_zero, or a sigma that is 0 or inf in float32.
    """
    eps = _validate.check_epsilon(epsilon)
    dlt = _validate.check_delta(delta)
    sens = _validate.check_calibration_sensitivity(sensitivity, allow_zero)
    if eps > 1.0:
        raise ValueError(
            f"epsilon must be <= 1 for the classical Gaussian mechanism (got {epsilon!r}); "
            "use analytic_gaussian_sigma or hgm_sigma for larger epsilon")
    return _validate.check_noise_scale(classical_gaussian_multiplier(dlt) * sens / eps,
                                       allow_zero, "sigma")  # HGM Theorem 1


def classical_gaussian_multiplier(delta: float) -> float:
    """m_GM(delta) = sqrt(2 ln(1.25/delta)) (HGM Theorem 1), the classical GM constant.

    Raises:
        ValueError: if delta is not in (0, 1).
    """
    dlt = _validate.check_delta(delta)
    return math.sqrt(2.0 * math.log(1.25 / dlt))  # HGM Theorem 1


def gaussian_delta(*, sigma: float, epsilon: float, sensitivity: float) -> float:
    """Exact delta(epsilon) of the Gaussian mechanism with noise std sigma.

    Balle & Wang 2018, Theorem 8: the mechanism is (eps, delta)-DP iff
    Phi(D/(2s) - eps s/D) - e^eps Phi(-D/(2s) - eps s/D) <= delta, with D the l2
    sensitivity and s = sigma. Computed as Phi(a) * (1 - exp(eps + log Phi(b) - log Phi(a)))
    with log-CDFs so that large eps and tiny deltas keep full precision.

    Args:
        sigma: noise standard deviation > 0.
        epsilon: finite epsilon >= 0 (0 gives the total variation distance).
        sensitivity: l2 sensitivity >= 0.

    Returns:
        The smallest delta for which the mechanism is (epsilon, delta)-DP.

    Raises:
        ValueError: on invalid arguments.
    """
    sig = _validate.check_positive(sigma, "sigma")
    eps = _validate.as_float(epsilon, "epsilon")
    if not math.isfinite(eps) or eps < 0.0:
        raise ValueError(f"epsilon must be a finite number >= 0, got {epsilon!r}")
    sens = _validate.check_sensitivity(sensitivity)
    if sens == 0.0:
        return 0.0
    return _gaussian_delta_unit(sig / sens, eps)


def _gaussian_delta_unit(sigma: float, eps: float) -> float:
    """Balle & Wang 2018 Thm 8 at sensitivity 1."""
    a = 0.5 / sigma - eps * sigma
    b = -0.5 / sigma - eps * sigma
    log_pa = float(special.log_ndtr(a))
    log_pb = float(special.log_ndtr(b))
    # delta = Phi(a) - e^eps Phi(b) = Phi(a) * (1 - exp(eps + log Phi(b) - log Phi(a)))
    delta = math.exp(log_pa) * -math.expm1(eps + log_pb - log_pa)
    return max(delta, 0.0)


def analytic_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float,
                            allow_zero: bool = False) -> float:
    """Smallest sigma for which the Gaussian mechanism is (epsilon, delta)-DP (exact).

    Analytic Gaussian mechanism of Balle & Wang 2018 (Theorem 8): bisection on
    log sigma of the exact delta (which decreases in sigma) to relative precision ~1e-15,
    then raised by a relative 1e-9 so that the true delta (not only its float64 value) is
    at most `delta`: calibration rounds toward more noise.

    Args:
        epsilon: privacy budget > 0 (any size).
        delta: in (0, 1).
        sensitivity: l2 sensitivity >= 0.

    Returns:
        sigma in float64 (linear in sensitivity).

    Raises:
        ValueError: on invalid arguments, a zero sensitivity without allow_zero, or a
            scale that is 0, inf or underflows in float32.
    """
    eps = _validate.check_epsilon(epsilon)
    dlt = _validate.check_delta(delta)
    sens = _validate.check_calibration_sensitivity(sensitivity, allow_zero)
    if sens == 0.0:
        return 0.0
    # Our own bisection, not dp_accounting: its analytic calibration
    # (gaussian_mechanism.get_sigma_gaussian) stops Brent's method at an absolute tolerance of
    # 1e-12 on either side of the root (45 of 70 (eps, delta) pairs with eps in [0.01, 50],
    # delta in [1e-12, 0.1] came out with delta(sigma) > delta, i.e. slightly too little
    # noise; results/calibration/agm_vs_dp_accounting.json), and calibrate_dp_mechanism's
    # accountants are not exact for one Gaussian. This bisection keeps delta(sigma) <= delta
    # at relative precision ~1e-15.
    # HGM's sigma is always valid (HGM Theorem 2), so it brackets from above.
    hi = hgm_multiplier(epsilon=eps, delta=dlt)
    lo = hi / 2.0
    while _gaussian_delta_unit(lo, eps) <= dlt:
        hi, lo = lo, lo / 2.0
        if lo < 1e-300:  # pragma: no cover - unreachable for delta < 1
            break
    log_lo, log_hi = math.log(lo), math.log(hi)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (log_lo + log_hi)
        if _gaussian_delta_unit(math.exp(mid), eps) <= dlt:
            log_hi = mid
        else:
            log_lo = mid
        if log_hi - log_lo < 1e-15:
            break
    # Round toward more noise (see SIGMA_MARGIN); AGM sigma is linear in the sensitivity.
    sigma = math.exp(log_hi) * (1.0 + SIGMA_MARGIN)
    return _validate.check_noise_scale(sigma * sens, allow_zero, "sigma")


def hgm_s(delta: float) -> float:
    """s(delta) = ln(sqrt(2/pi) / delta) of HGM Theorem 2 (the appendix's other form is a typo).

    Raises:
        ValueError: if delta is not in (0, 1).
    """
    dlt = _validate.check_delta(delta)
    return math.log(math.sqrt(2.0 / math.pi) / dlt)  # HGM Theorem 2


def hgm_conditions(*, epsilon: float, delta: float) -> tuple[float, float | None]:
    """The two sufficient conditions of the HGM proof, as noise multipliers.

    Condition 1 (u >= 1): (1 + sqrt(1 + 2 eps)) / (2 eps).
    Condition 2 (u^2/2 >= s): (sqrt(s) + sqrt(s + eps)) / (sqrt(2) eps); None when
    s < 0 (delta > sqrt(2/pi)), where it is not needed (proof of HGM Theorem 2, appendix).

    Returns:
        (condition1, condition2 or None).

    Raises:
        ValueError: on invalid arguments.
    """
    eps = _validate.check_epsilon(epsilon)
    s = hgm_s(delta)
    cond1 = (1.0 + math.sqrt(1.0 + 2.0 * eps)) / (2.0 * eps)  # HGM appendix, Condition 1
    if s < 0.0:
        return cond1, None
    cond2 = (math.sqrt(s) + math.sqrt(s + eps)) / (math.sqrt(2.0) * eps)  # HGM Theorem 2
    return cond1, cond2


def hgm_multiplier(*, epsilon: float, delta: float) -> float:
    """mult_HGM(eps, delta): HGM noise std per unit of (r-weighted) l2 sensitivity.

    The maximum of both proof conditions (proof of HGM Theorem 2); equals Condition 2 whenever
    delta <= 0.48394.

    Raises:
        ValueError: on invalid arguments.
    """
    cond1, cond2 = hgm_conditions(epsilon=epsilon, delta=delta)
    return cond1 if cond2 is None else max(cond1, cond2)


def hgm_sigma(*, epsilon: float, delta: float, sensitivity: float,
              allow_zero: bool = False) -> float:
    """sigma of HGM's extended / heterogeneous Gaussian mechanism (HGM Theorems 2 and 3).

    Valid for every epsilon > 0. For the heterogeneous mechanism pass the r-weighted
    sensitivity (`weighted_sensitivity`) and spread sigma with `heterogeneous_stddevs`.

    Args:
        epsilon: privacy budget > 0.
        delta: in (0, 1).
        sensitivity: (r-weighted) l2 sensitivity >= 0.

    Returns:
        sigma in float64.

    Raises:
        ValueError: on invalid arguments, a zero sensitivity without allow_zero, or a
            scale that is 0, inf or underflows in float32.
    """
    mult = hgm_multiplier(epsilon=epsilon, delta=delta)
    sens = _validate.check_calibration_sensitivity(sensitivity, allow_zero)
    # HGM Theorem 3: sigma = Delta_A(r) * c(eps, delta) / eps.
    return _validate.check_noise_scale(mult * sens, allow_zero, "sigma")


def gaussian_tail_sigma(*, epsilon: float, delta: float, sensitivity: float,
                        allow_zero: bool = False) -> float:
    """sigma from the privacy-loss tail bound used by GPM (GPM Thm 2.3).

    eps = D^2/(2 s^2) - (D/s) Phi^{-1}(delta) solved for s:
    s = D / (a + sqrt(a^2 + 2 eps)), a = Phi^{-1}(delta). This sets P[L > eps] = delta
    for the privacy loss L ~ N(D^2/2s^2, D^2/s^2); it is valid for any eps > 0 but is
    not the exact (analytic) calibration.

    Raises:
        ValueError: on invalid arguments, a zero sensitivity without allow_zero, or a
            scale that is 0, inf or underflows in float32.
    """
    eps = _validate.check_epsilon(epsilon)
    dlt = _validate.check_delta(delta)
    sens = _validate.check_calibration_sensitivity(sensitivity, allow_zero)
    a = float(special.ndtri(dlt))
    sigma = sens / (a + math.sqrt(a * a + 2.0 * eps))  # GPM Thm 2.3, inverted
    return _validate.check_noise_scale(sigma, allow_zero, "sigma")


def gaussian_tail_epsilon(*, sigma: float, delta: float, sensitivity: float) -> float:
    """epsilon of GPM Thm 2.3: D^2/(2 sigma^2) - (D/sigma) Phi^{-1}(delta).

    Raises:
        ValueError: on invalid arguments.
    """
    sig = _validate.check_positive(sigma, "sigma")
    dlt = _validate.check_delta(delta)
    sens = _validate.check_sensitivity(sensitivity)
    t = sens / sig
    return t * t / 2.0 - t * float(special.ndtri(dlt))  # GPM Thm 2.3
