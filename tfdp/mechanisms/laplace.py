"""Laplace mechanism calibration."""

from __future__ import annotations

from tfdp.mechanisms import _validate


def laplace_scale(*, epsilon: float, sensitivity: float,
                  allow_zero: bool = False) -> float:
    """Scale b of the Laplace mechanism for epsilon-DP.

    Adding Laplace(0, b) noise with b = sensitivity / epsilon to a query of l1
    sensitivity `sensitivity` is epsilon-DP (Dwork et al. 2006; used by AdLM and StoBatch).

    Args:
        epsilon: privacy budget, finite and > 0.
        sensitivity: l1 sensitivity, finite and > 0 (0 only with allow_zero).
        allow_zero: accept sensitivity 0 (no noise), for a deliberately non-private ablation.

    Returns:
        The scale b, in float64.

    Raises:
        ValueError: if epsilon <= 0 / not finite, sensitivity < 0 / not finite / 0 without
            allow_zero, or a scale that is 0 or inf in float32.
    """
    eps = _validate.check_epsilon(epsilon)
    sens = _validate.check_calibration_sensitivity(sensitivity, allow_zero)
    b = sens / eps  # Dwork et al. 2006, Laplace mechanism: b = Delta_1 / eps
    return _validate.check_noise_scale(b, allow_zero, "scale")
