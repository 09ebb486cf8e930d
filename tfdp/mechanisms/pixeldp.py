"""PixelDP noise multipliers (Lecuyer et al. 2019), used as a baseline."""

from __future__ import annotations

from tfdp.mechanisms import _validate
from tfdp.mechanisms.gaussian import classical_gaussian_multiplier


def pixeldp_laplace_multiplier(*, epsilon: float, attack_bound: float = 1.0) -> float:
    """PixelDP Laplace multiplier L / eps: noise scale = multiplier * l1 sensitivity.

    PixelDP code release (models/pixeldp.py, _noise_layer): dp_mult = L / eps for the
    Laplace (l1) mechanism; the noise layer draws Laplace(multiplier * sensitivity).

    Args:
        epsilon: robustness budget eps_r > 0.
        attack_bound: construction attack bound L > 0 (l_p radius the noise is built for).

    Returns:
        The multiplier (float64).

    Raises:
        ValueError: on invalid arguments.
    """
    eps = _validate.check_epsilon(epsilon)
    bound = _validate.check_positive(attack_bound, "attack_bound")
    return bound / eps  # PixelDP, Laplace: b = Delta_{p,1} L / eps


def pixeldp_gaussian_multiplier(*, epsilon: float, delta: float,
                                attack_bound: float = 1.0) -> float:
    """PixelDP Gaussian multiplier L sqrt(2 ln(1.25/delta)) / eps; std = multiplier * l2 sens.

    PixelDP code release (models/pixeldp.py): dp_mult = L sqrt(2 ln(1.25/delta)) / eps;
    the classical Gaussian mechanism, so eps must be <= 1 (HGM Theorem 1).

    Args:
        epsilon: robustness budget eps_r in (0, 1].
        delta: delta_r in (0, 1).
        attack_bound: construction attack bound L > 0.

    Returns:
        The multiplier (float64).

    Raises:
        ValueError: on invalid arguments, including epsilon > 1.
    """
    eps = _validate.check_epsilon(epsilon)
    dlt = _validate.check_delta(delta)
    bound = _validate.check_positive(attack_bound, "attack_bound")
    if eps > 1.0:
        raise ValueError("epsilon must be <= 1 for PixelDP's classical Gaussian multiplier, "
                         f"got {epsilon!r}")
    # PixelDP Gaussian: L sqrt(2 ln(1.25/delta)) / eps
    return bound * classical_gaussian_multiplier(dlt) / eps
