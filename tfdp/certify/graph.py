"""TensorFlow (graph) versions of the certification statistics of `tfdp.certify.core`.

Used by the certificates' `radius_tf` and by the SavedModel's `certify` signature: the same
formulas in float64, so that the numpy and TensorFlow radii agree to float rounding.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from tfdp.certify import core
from tfdp.mechanisms import gaussian as gaussian_mechanism

# Bisection steps of the in-graph Beta quantile (Clopper-Pearson): the bracket [0, 1]
# halves each step, 2^-100 is far below float64 resolution.
_BETA_STEPS = 100
# The analytic Gaussian calibration (tfdp.mechanisms.analytic_gaussian_sigma): bisection on
# log sigma for at most 200 steps, stopping once the bracket is narrower than 1e-15.
_AGM_STEPS = 200
_AGM_WIDTH = 1e-15


def tf_beta_ppf(p: tf.Tensor, a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
    """Quantile of Beta(a, b) at p (float64, elementwise) by bisection on tf.math.betainc."""
    p, a, b = (f64(v) for v in (p, a, b))
    shape = tf.shape(a + b + p)
    lo = tf.zeros(shape, tf.float64)
    hi = tf.ones(shape, tf.float64)

    def body(i, lo, hi):
        mid = 0.5 * (lo + hi)
        below = tf.math.betainc(a, b, mid) < p
        return i + 1, tf.where(below, mid, lo), tf.where(below, hi, mid)

    _, lo, hi = tf.while_loop(lambda i, *_: i < _BETA_STEPS, body,
                              [tf.constant(0), lo, hi])
    return 0.5 * (lo + hi)


def tf_clopper_pearson_bounds(counts: tf.Tensor, alpha: tf.Tensor
                              ) -> tuple[tf.Tensor, tf.Tensor]:
    """Graph version of `tfdp.certify.clopper_pearson_bounds` (Bonferroni over classes).

    Args:
        counts: (b, K) integer counts.
        alpha: float64 scalar in (0, 1).

    Returns:
        (lower, upper) float64 (b, K).
    """
    c = tf.cast(counts, tf.float64)
    n = tf.reduce_sum(c, axis=-1, keepdims=True) + tf.zeros_like(c)
    a = alpha / tf.cast(tf.shape(c)[-1], tf.float64)
    # Clopper & Pearson (1934): lower = Beta.ppf(a; c, n-c+1), upper = Beta.ppf(1-a; c+1, n-c)
    lower = tf_beta_ppf(a + tf.zeros_like(c), tf.where(c > 0, c, 1.0), n - c + 1.0)
    upper = tf_beta_ppf(1.0 - a + tf.zeros_like(c), c + 1.0, tf.where(c < n, n - c, 1.0))
    return tf.where(c > 0, lower, 0.0), tf.where(c < n, upper, 1.0)


def tf_hoeffding_bounds(mean: tf.Tensor, num_draws: tf.Tensor, alpha: tf.Tensor
                        ) -> tuple[tf.Tensor, tf.Tensor]:
    """Graph version of `tfdp.certify.hoeffding_bounds`."""
    k = tf.cast(tf.shape(mean)[-1], tf.float64)
    n = tf.cast(num_draws, tf.float64)
    half = tf.sqrt(tf.math.log(k / alpha) / (2.0 * n))
    return (tf.clip_by_value(mean - half, 0.0, 1.0), tf.clip_by_value(mean + half, 0.0, 1.0))


def tf_bernstein_bounds(mean: tf.Tensor, var: tf.Tensor, num_draws: tf.Tensor,
                        alpha: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Graph version of `tfdp.certify.empirical_bernstein_bounds` (Maurer & Pontil 2009, Thm 4)."""
    k = tf.cast(tf.shape(mean)[-1], tf.float64)
    n = tf.cast(num_draws, tf.float64)
    log_term = tf.math.log(2.0 * k / alpha)
    half = tf.sqrt(2.0 * var * log_term / n) + 7.0 * log_term / (3.0 * (n - 1.0))
    return (tf.clip_by_value(mean - half, 0.0, 1.0), tf.clip_by_value(mean + half, 0.0, 1.0))


def tf_max_epsilon(lower: tf.Tensor, upper: tf.Tensor, delta: Any = 0.0) -> tf.Tensor:
    """Graph version of `tfdp.certify.max_epsilon` (PixelDP Eq. 4 solved for eps')."""
    lo, up, d = f64(lower), f64(upper), f64(delta)
    lo, up, d = lo + 0.0 * (up + d), up + 0.0 * (lo + d), d + 0.0 * (lo + up)
    # t* = (-delta + sqrt(delta^2 + 4 upper (lower - delta))) / (2 upper)
    disc = d * d + 4.0 * up * (lo - d)
    safe_up = tf.where(up > 0, up, 1.0)
    t_quad = (-d + tf.sqrt(tf.maximum(disc, 0.0))) / (2.0 * safe_up)
    safe_d = tf.where(d > 0, d, 1.0)
    t_lin = (lo - d) / safe_d
    inf = tf.constant(np.inf, tf.float64)
    t = tf.where(up > 0, t_quad, tf.where(d > 0, t_lin, inf))
    eps = tf.where(t > 1.0, tf.math.log(tf.maximum(t, 1.0)), 0.0)
    return tf.where(lo - d > 0, eps, 0.0)


def f64(value: Any) -> tf.Tensor:
    """float64 tensor of value (Python floats converted directly, never through float32)."""
    if isinstance(value, (tf.Tensor, tf.Variable)):
        return tf.cast(value, tf.float64)
    return tf.constant(np.asarray(value, np.float64))


def tf_log_ndtr(x: tf.Tensor) -> tf.Tensor:
    """log Phi(x) in float64: erfc in the body, the asymptotic series in the far left tail."""
    x = tf.cast(x, tf.float64)
    sqrt_half = math.sqrt(0.5)
    right = tf.math.log1p(-0.5 * tf.math.erfc(tf.maximum(x, 6.0) * sqrt_half))
    middle = tf.math.log(0.5 * tf.math.erfc(-tf.clip_by_value(x, -20.0, 6.0) * sqrt_half))
    xl = tf.minimum(x, -20.0)
    z = 1.0 / (xl * xl)
    # Phi(x) ~ phi(x)/(-x) * (1 - 1/x^2 + 3/x^4 - 15/x^6 + 105/x^8), x -> -inf
    series = 1.0 - z * (1.0 - 3.0 * z * (1.0 - 5.0 * z * (1.0 - 7.0 * z)))
    left = (-0.5 * xl * xl - tf.math.log(-xl) - 0.5 * math.log(2.0 * math.pi)
            + tf.math.log(series))
    return tf.where(x > 6.0, right, tf.where(x < -20.0, left, middle))


def _tf_gaussian_delta_unit(sigma: tf.Tensor, eps: tf.Tensor) -> tf.Tensor:
    """Balle & Wang 2018 Thm 8 at sensitivity 1 (as tfdp.mechanisms.gaussian)."""
    a = 0.5 / sigma - eps * sigma
    b = -0.5 / sigma - eps * sigma
    log_pa = tf_log_ndtr(a)
    log_pb = tf_log_ndtr(b)
    delta = tf.exp(log_pa) * -tf.math.expm1(eps + log_pb - log_pa)
    return tf.maximum(delta, 0.0)


def tf_hgm_multiplier(eps: tf.Tensor, delta: tf.Tensor) -> tf.Tensor:
    """mult_HGM(eps, delta), HGM Theorem 2 (tfdp.mechanisms.hgm_multiplier)."""
    s = tf.math.log(math.sqrt(2.0 / math.pi) / delta)  # HGM Theorem 2, s(delta)
    cond1 = (1.0 + tf.sqrt(1.0 + 2.0 * eps)) / (2.0 * eps)
    s_safe = tf.maximum(s, 0.0)
    cond2 = (tf.sqrt(s_safe) + tf.sqrt(s_safe + eps)) / (math.sqrt(2.0) * eps)
    return tf.where(s < 0.0, cond1, tf.maximum(cond1, cond2))


def tf_agm_multiplier(eps: tf.Tensor, delta: tf.Tensor) -> tf.Tensor:
    """Analytic Gaussian sigma at sensitivity 1 (tfdp.mechanisms.analytic_gaussian_sigma)."""
    hi = tf_hgm_multiplier(eps, delta)
    lo = hi / 2.0

    # Bracket: halve lo while it is still valid (delta(lo) <= delta).
    def bracket_cond(i, lo, hi):
        return tf.logical_and(i < 1100, tf.reduce_any(
            tf.logical_and(_tf_gaussian_delta_unit(lo, eps) <= delta, lo >= 1e-300)))

    def bracket_body(i, lo, hi):
        grow = tf.logical_and(_tf_gaussian_delta_unit(lo, eps) <= delta, lo >= 1e-300)
        return i + 1, tf.where(grow, lo / 2.0, lo), tf.where(grow, lo, hi)

    _, lo, hi = tf.while_loop(bracket_cond, bracket_body, [tf.constant(0), lo, hi])
    log_lo, log_hi = tf.math.log(lo), tf.math.log(hi)

    def body(i, log_lo, log_hi):
        active = log_hi - log_lo >= _AGM_WIDTH
        mid = 0.5 * (log_lo + log_hi)
        valid = _tf_gaussian_delta_unit(tf.exp(mid), eps) <= delta
        return (i + 1, tf.where(active & ~valid, mid, log_lo),
                tf.where(active & valid, mid, log_hi))

    _, _, log_hi = tf.while_loop(lambda i, *_: i < _AGM_STEPS, body,
                                 [tf.constant(0), log_lo, log_hi])
    # Rounded toward more noise as tfdp.mechanisms.analytic_gaussian_sigma (a smaller radius).
    return tf.exp(log_hi) * (1.0 + gaussian_mechanism.SIGMA_MARGIN)


def tf_gaussian_radius(lower: tf.Tensor, upper: tf.Tensor, ratio: float, multiplier: str,
                        eps_cap: Optional[float]) -> tf.Tensor:
    """Graph version of `tfdp.certify.gaussian_radius` on the default delta' grid."""
    grid = tf.constant(np.asarray(core.DEFAULT_DELTA_GRID, np.float64))[None, :]
    eps = tf_max_epsilon(lower[:, None], upper[:, None], grid)  # (b, grid)
    if eps_cap is not None:
        eps = tf.minimum(eps, float(eps_cap))
    passed = eps > 0
    safe_eps = tf.where(passed, eps, 1.0)
    d = grid + tf.zeros_like(eps)
    if multiplier == "gm":
        mult = tf.sqrt(2.0 * tf.math.log(1.25 / d)) / safe_eps  # HGM Theorem 1 constant
    elif multiplier == "hgm":
        mult = tf_hgm_multiplier(safe_eps, d)  # HGM Eq. 10 (dividing by eps' once)
    else:
        mult = tf.where(passed, tf_agm_multiplier(safe_eps, d), 1.0)
    return tf.reduce_max(tf.where(passed, ratio / mult, 0.0), axis=-1)


def tf_top_two(lower: tf.Tensor, upper: tf.Tensor, pred: tf.Tensor
                ) -> tuple[tf.Tensor, tf.Tensor]:
    """Lower bound of the predicted class and the largest upper bound of the others."""
    lower_top = tf.gather(lower, pred, axis=1, batch_dims=1)
    is_pred = tf.one_hot(pred, tf.shape(upper)[-1], on_value=True, off_value=False)
    others = tf.where(is_pred, tf.constant(-np.inf, tf.float64), upper)
    return lower_top, tf.reduce_max(others, axis=-1)


# ------------------------------------------------------------------ the exported module


