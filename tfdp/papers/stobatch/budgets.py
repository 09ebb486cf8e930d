"""StoBatch's budget bookkeeping: auto-encoder sensitivity, Lemma 3 gammas, Theorem 4."""

from __future__ import annotations

from tfdp import checks
from tfdp.mechanisms import _validate
from tfdp.papers.stobatch import losses as stobatch_losses


def stobatch_autoencoder_sensitivity(*, fan_in: int, num_neurons: int) -> float:
    """Delta_R = d (beta + 2) of the DP auto-encoder objective (StoBatch Lemma 2): the
    budget-side name of `tfdp.papers.stobatch.losses.stobatch_delta_r` (one formula).

    Args:
        fan_in: d, the fan-in of one h1 neuron (k*k*C_in for a conv layer).
        num_neurons: beta, neurons of h1 (one feature map for a conv layer, App. P).

    Returns:
        Delta_R (float64).

    Raises:
        ValueError: if either count is not a positive integer.
    """
    beta = checks.check_positive_int(num_neurons, "num_neurons")
    return stobatch_losses.stobatch_delta_r(fan_in=fan_in, beta=beta)


def stobatch_gammas(*, sensitivity: float, batch_size: int, first_layer_norm: float,
                    input_sensitivity: float = 1.0) -> tuple[float, float]:
    """(gamma_x, gamma) of StoBatch Lemma 3.

    gamma_x = Delta_R / (m Delta_x) (Delta_x = 1) and gamma = 2 Delta_R / (m Delta_h1),
    so the perturbed inputs are (eps1/gamma_x)-DP and the perturbed first layer
    (eps1/gamma)-DP.

    Args:
        sensitivity: Delta_R > 0.
        batch_size: m, the fixed DP batch size.
        first_layer_norm: Delta_h1 > 0, the first-layer norm (docs/stobatch.md).
        input_sensitivity: Delta_x > 0 (1 for inputs in [-1, 1]).

    Returns:
        (gamma_x, gamma).

    Raises:
        ValueError: on invalid arguments.
    """
    sens = _validate.check_positive(sensitivity, "sensitivity")
    m = checks.check_positive_int(batch_size, "batch_size")
    dh1 = _validate.check_positive(first_layer_norm, "first_layer_norm")
    dx = _validate.check_positive(input_sensitivity, "input_sensitivity")
    return sens / (m * dx), 2.0 * sens / (m * dh1)  # StoBatch Lemma 3


def stobatch_noise_scales(*, sensitivity: float, epsilon1: float,
                          batch_size: int,
                          allow_zero: bool = False) -> tuple[float, float]:
    """Per-coordinate Laplace scales (b_x, b_h) of chi1/m and 2 chi2/m (StoBatch Lemma 3).

    b_x = Delta_R / (m eps1) and b_h = 2 Delta_R / (m eps1).

    Raises:
        ValueError: on invalid arguments, a zero sensitivity without allow_zero, or a
            scale that is 0, inf or underflows in float32.
    """
    sens = _validate.check_calibration_sensitivity(sensitivity, allow_zero)
    eps1 = _validate.check_epsilon(epsilon1, "epsilon1")
    m = checks.check_positive_int(batch_size, "batch_size")
    b_x = sens / (m * eps1)  # StoBatch Lemma 3: chi1 ~ Lap(Delta_R / eps1), added as chi1 / m
    _validate.check_noise_scale([b_x, 2.0 * b_x], allow_zero, "scales")
    return b_x, 2.0 * b_x  # StoBatch Lemma 3: 2 chi2 / m


def stobatch_total_epsilon(*, epsilon1: float, epsilon2: float, gamma_x: float,
                           gamma: float) -> float:
    """eps1 + eps1/gamma_x + eps1/gamma + eps2 (StoBatch Theorem 4).

    Raises:
        ValueError: on invalid arguments.
    """
    e1 = _validate.check_epsilon(epsilon1, "epsilon1")
    e2 = _validate.check_epsilon(epsilon2, "epsilon2")
    gx = _validate.check_positive(gamma_x, "gamma_x")
    g = _validate.check_positive(gamma, "gamma")
    return e1 + e1 / gx + e1 / g + e2  # StoBatch Theorem 4


def stobatch_epsilon1(*, total_epsilon: float, epsilon2: float, gamma_x: float,
                      gamma: float) -> float:
    """eps1 = (eps_total - eps2) / (1 + 1/gamma + 1/gamma_x) (StoBatch App. P).

    Raises:
        ValueError: on invalid arguments, or total_epsilon <= epsilon2.
    """
    tot = _validate.check_epsilon(total_epsilon, "total_epsilon")
    e2 = _validate.check_epsilon(epsilon2, "epsilon2")
    gx = _validate.check_positive(gamma_x, "gamma_x")
    g = _validate.check_positive(gamma, "gamma")
    if tot <= e2:
        raise ValueError(f"total_epsilon ({tot}) must exceed epsilon2 ({e2})")
    return (tot - e2) / (1.0 + 1.0 / g + 1.0 / gx)  # StoBatch App. P
