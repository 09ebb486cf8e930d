"""Laplace mechanism calibration."""

from __future__ import annotations

from tfdp.mechanisms import _validate


def laplace_scale(*, epsilon: float, sensitivity: float) -> float:
    """Scale b of the Laplace mechanism for epsilon-DP.

    Adding Laplace(0, b) noise with b = sensitivity / epsilon to a query of l1
    sensitivity `sensitivity` is epsilon-DP (Dwork et al. 2006; AdLM §3, StoBatch §2).

    Args:
        epsilon: privacy budget, finite and > 0.
        sensitivity: l1 sensitivity, finite and >= 0.

    Returns:
        The scale b, in float64.

    Raises:
        ValueError: if epsilon <= 0 / not finite, or sensitivity < 0 / not finite.
    """
    eps = _validate.check_epsilon(epsilon)
    sens = _validate.check_sensitivity(sensitivity)
    return sens / eps  # Dwork et al. 2006, Laplace mechanism: b = Delta_1 / eps
