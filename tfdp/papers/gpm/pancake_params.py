"""GPM's parameters: the research warning, argument checks, the paper's Gaussian-mechanism
calibration (its Theorem 2.3 form) and the geometry of the pancakes.

RESEARCH AND ATTACK CODE; see `tfdp.papers.gpm.pancake`. All arithmetic is float64.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from tfdp import checks
from tfdp.mechanisms import gaussian

_SQRT_2PI = math.sqrt(2.0 * math.pi)
_UNIT_TOL = 1e-9


class GPMResearchWarning(UserWarning):
    """Emitted whenever the backdoored Gaussian pancake mechanism is used."""


def _warn_research(what: str) -> None:
    warnings.warn(
        f"{what}: the Gaussian pancake mechanism is backdoored research/attack code; it is "
        "not differentially private against the key holder and must never be used to "
        "protect data.", GPMResearchWarning, stacklevel=3)


# --------------------------------------------------------------------------------------------
# Validation helpers.


def _float64_array(name: str, value: Any) -> np.ndarray:
    """Returns value as a float64 array; float32 (or lower) input is an error (docs/gpm.md)."""
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    arr = np.asarray(value)
    if arr.dtype.kind == "f" and arr.dtype != np.float64:
        raise ValueError(
            f"{name} must be float64, got {arr.dtype}: GPM and its attack need float64 "
            "(docs/gpm.md)")
    if arr.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be a real float64 array, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    return arr


def _check_key(w: Any, name: str = "w") -> np.ndarray:
    """Validates a key: float64, shape [d] or [m, d], every row a unit vector."""
    if hasattr(w, "numpy") and not isinstance(w, np.ndarray):
        w = w.numpy()
    arr = np.asarray(w)
    if arr.dtype != np.float64:
        raise ValueError(f"{name} (the key) must be a float64 array, got {arr.dtype}")
    if arr.ndim not in (1, 2) or arr.shape[-1] < 1:
        raise ValueError(f"{name} (the key) must have shape [d] or [m, d], got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} (the key) must be finite")
    norms = np.linalg.norm(arr, axis=-1)
    if np.any(np.abs(norms - 1.0) > _UNIT_TOL):
        raise ValueError(f"{name} (the key) must be a unit vector; got norm(s) "
                         f"{np.atleast_1d(norms)[:3]}")
    return arr


def covert_gamma(d: int) -> float:
    """Returns the smallest gamma covered by the covertness theorem, 2 sqrt(d).

    GPM Thm 2.7 / Thm 3.4 need 2 sqrt(d) <= gamma <= poly(d); the experiments use exactly
    2 sqrt(d) (GPM experiments).
    """
    return 2.0 * math.sqrt(checks.check_positive_int(d, "d"))


def check_parameters(d: int, beta: float, gamma: float, *,
                     require_covertness: bool = False) -> tuple[float, float]:
    """Validates (beta, gamma) for dimension d.

    Args:
      d: dimension of the query output.
      beta: pancake width parameter, > 0.
      gamma: pancake spacing parameter, > 0.
      require_covertness: if True, gamma < 2 sqrt(d) is an error; otherwise (experiments, the
        paper's d = 2 picture, tests) it is a warning.

    Returns:
      (beta, gamma) as floats.

    Raises:
      ValueError: beta or gamma not > 0, or gamma < 2 sqrt(d) when covertness is required.
    """
    checks.check_positive_int(d, "d")
    beta = checks.check_positive(beta, "beta")
    gamma = checks.check_positive(gamma, "gamma")
    lowest = covert_gamma(d)
    if gamma < lowest * (1.0 - 1e-12):
        msg = (f"gamma={gamma:g} < 2*sqrt(d)={lowest:g}: outside the covertness theorem's "
               "range (GPM Thm 2.7 needs gamma >= 2 sqrt(d)); outputs may be detectable")
        if require_covertness:
            raise ValueError(msg)
        warnings.warn(msg, GPMResearchWarning, stacklevel=3)
    if beta >= 1.0:
        warnings.warn(f"beta={beta:g} >= 1: the privacy bounds of GPM Thm 4.2 assume "
                      "0 < beta < 1", GPMResearchWarning, stacklevel=3)
    return beta, gamma


# --------------------------------------------------------------------------------------------
# The paper's Gaussian-mechanism calibration (Thm 2.3 form).


def gm_eps(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Epsilon of the Gaussian mechanism in the GPM paper's Theorem 2.3 form.

    eps = Delta^2 / (2 sigma^2) - (Delta / sigma) Phi^{-1}(delta), the tail bound of the
    Gaussian privacy-loss variable (`tfdp.mechanisms.gaussian_tail_epsilon`), NOT the
    analytic Gaussian mechanism calibration; GPM uses it only to reproduce the paper.

    Args:
      sigma: noise standard deviation, > 0.
      delta: in (0, 1).
      sensitivity: L2 sensitivity Delta, > 0.

    Returns:
      epsilon (float64).

    Raises:
      ValueError: on an argument out of range.
    """
    sensitivity = checks.check_positive(sensitivity, "sensitivity")
    return gaussian.gaussian_tail_epsilon(sigma=sigma, delta=delta,
                                          sensitivity=sensitivity)  # GPM Thm 2.3


def gm_sigma(eps: float, delta: float, sensitivity: float = 1.0) -> float:
    """Noise std for which the GPM paper's Theorem 2.3 gives (eps, delta).

    Inverse of `gm_eps`: with a = Phi^{-1}(delta), sigma = Delta / (a + sqrt(a^2 + 2 eps))
    (`tfdp.mechanisms.gaussian_tail_sigma`).

    Args:
      eps: target epsilon, > 0.
      delta: in (0, 1).
      sensitivity: L2 sensitivity Delta, > 0.

    Returns:
      sigma (float64).

    Raises:
      ValueError: on an argument out of range.
    """
    eps = checks.check_positive(eps, "eps")
    sensitivity = checks.check_positive(sensitivity, "sensitivity")
    return gaussian.gaussian_tail_sigma(epsilon=eps, delta=delta,
                                        sensitivity=sensitivity)  # GPM Thm 2.3, inverted


# --------------------------------------------------------------------------------------------
# Geometry of the pancakes.


def spacing(sigma: float, beta: float, gamma: float) -> float:
    """Distance S between neighbouring pancakes of GPM noise along the key.

    S = sqrt(2 pi) sigma gamma / (beta^2 + gamma^2)  (GPM Def 3.1 with Lemma 2.6).
    """
    sigma = checks.check_positive(sigma, "sigma")
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    return _SQRT_2PI * sigma * gamma / (beta * beta + gamma * gamma)


def pancake_std(sigma: float, beta: float, gamma: float) -> float:
    """Standard deviation of one pancake along the key, sigma beta / sqrt(beta^2 + gamma^2)."""
    sigma = checks.check_positive(sigma, "sigma")
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    return sigma * beta / math.hypot(beta, gamma)  # GPM Lemma 2.6, scaled by sqrt(2 pi) sigma


def tau(beta: float, gamma: float) -> float:
    """Pancake std divided by spacing: beta sqrt(beta^2 + gamma^2) / (sqrt(2 pi) gamma)."""
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    return beta * math.hypot(beta, gamma) / (_SQRT_2PI * gamma)  # GPM Lemma 2.6
