"""Monte-Carlo prediction, confidence bounds and the PixelDP radius formulas.

The certificates that use these formulas are the classes of `tfdp.certify.registry`.

The certificate follows PixelDP (Lecuyer et al. 2019): a scorer whose noise makes it
(eps', delta')-DP for perturbations in a norm ball satisfies Eq. 4,

    E_lb f_k(x) > exp(2 eps') max_{i != k} E_ub f_i(x) + (1 + exp(eps')) delta',

and then its argmax cannot change inside the ball. The radius of the ball is a property
of the noise that was actually added; each mechanism below turns (eps', delta') into a
radius.

The run directory's `config.json` carries a `"certification"` entry that says how the
model can be certified. It is `null` for models without robustness noise, or a dict:

    {"mechanism": "pixeldp_laplace", "construction_bound": L, "epsilon": eps_r}
        Laplace noise of scale Delta_f * L / eps_r after the sensitivity-bounded layer.
    {"mechanism": "pixeldp_gaussian", "construction_bound": L, "epsilon": eps_r,
     "delta": delta_r}
        classical Gaussian mechanism, sigma = sqrt(2 ln(1.25/delta_r)) Delta_f L / eps_r,
        eps_r <= 1; certificates use eps' <= 1.
    {"mechanism": "hgm", "construction_bound": L, "epsilon": eps_r, "delta": delta_r}
        heterogeneous Gaussian mechanism (HGM Theorem 2/3); any eps' > 0.
    {"mechanism": "agm", "construction_bound": L, "epsilon": eps_r, "delta": delta_r}
        analytic Gaussian mechanism (Balle & Wang 2018), Secure-SGD-AGM baseline.
    {"mechanism": "stobatch", "sensitivity": Delta_R,  (tfdp/papers/stobatch/certificate.py) "batch_size": m, "epsilon1": eps1,
     "d_cert": d, "delta_rh": Delta_r^h, "psi": psi,
     "delta_rx_mode": "unit" | "mu_a" | "mu_train", "mu_train": 0.05,
     "radius_psi_correction": true, "radius_divisor": 1.0,
     "passes": [[names of the input-noise layers], [names of the latent-noise layers]]}
        StoBatch Eq. 13 with the radius options of docs/stobatch.md. `passes` lists,
        per Monte-Carlo pass, the noise layers that get fresh noise; the passes' softmax
        outputs are multiplied (StoBatch Theorem 5 / Corollary 1).

Every dict may also hold the optional keys "eps_cap" (float; largest eps' searched),
"bound" (one of BOUNDS), "alpha" and "num_draws" (defaults for the evaluation).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

from tfdp import checks, clopper_pearson, mechanisms

BOUNDS = ("clopper_pearson", "hoeffding", "bernstein")

# PixelDP code release: delta' grid {0.001, ..., 0.299} for the Gaussian certificate search
# (also used for HGM); it keeps delta' below HGM's 0.48394 validity limit.
DEFAULT_DELTA_GRID = np.round(np.arange(1, 300) * 1e-3, 6)

# Score functions map a batch of inputs to a (batch, num_classes) tensor.
ScoreFn = Callable[[tf.Tensor], tf.Tensor]


# ------------------------------------------------------------------ Monte-Carlo prediction


@dataclasses.dataclass(frozen=True)
class MonteCarloResult:
    """Monte-Carlo statistics of a noisy scorer, per input.

    Attributes:
        counts: (batch, K) int64, how often each class was the argmax of a draw's scores.
        mean_scores: (batch, K) float64, mean of the scores over the draws.
        var_scores: (batch, K) float64, unbiased sample variance of the scores.
        num_draws: draws per input.
    """

    counts: np.ndarray
    mean_scores: np.ndarray
    var_scores: np.ndarray
    num_draws: int


class MonteCarloPredictor:
    """Runs n noisy forward passes per input inside one TensorFlow graph.

    The inputs are tiled `draws_per_step` times along the batch axis, so one forward pass
    evaluates many draws at once; a graph `while` loop runs ceil(n / draws_per_step) such
    passes. The noise is whatever `score_fn` draws itself (e.g. a model whose noise layers
    were switched on with `layers.set_inference_noise(model, True)`); each tiled copy gets
    its own draw when the noise is drawn element-wise.

    Args:
        score_fn: maps a batch (b, ...) to logits (if `from_logits`) or scores in [0, 1]
            of shape (b, K).
        from_logits: apply a softmax to `score_fn`'s output (PixelDP scores are softmax
            outputs, which lie in [0, 1] as Lemma 1 needs).
        draws_per_step: draws evaluated per forward pass; bounds memory.
    """

    def __init__(self, score_fn: ScoreFn, from_logits: bool = True,
                 draws_per_step: int = 256):
        if not callable(score_fn):
            raise ValueError("score_fn must be callable")
        if int(draws_per_step) < 1:
            raise ValueError(f"draws_per_step must be >= 1, got {draws_per_step!r}")
        self._score_fn = score_fn
        self._from_logits = bool(from_logits)
        self._draws_per_step = int(draws_per_step)
        self._fn = tf.function(self._run, reduce_retracing=True)

    def _scores(self, x: tf.Tensor) -> tf.Tensor:
        out = self._score_fn(x)
        return tf.nn.softmax(out, axis=-1) if self._from_logits else out

    def _pass(self, x: tf.Tensor, k: int, num_classes: int):
        """Counts, score sums and squared sums of k draws per input (static k)."""
        batch = tf.shape(x)[0]
        ones = [1] * (x.shape.rank - 1)
        tiled = tf.tile(x, [k] + ones)  # draw-major: (k * b, ...)
        scores = tf.reshape(tf.cast(self._scores(tiled), tf.float64), [k, batch, num_classes])
        scores = tf.ensure_shape(scores, [k, x.shape[0], num_classes])
        winners = tf.one_hot(tf.argmax(scores, axis=-1), num_classes, dtype=tf.int64)
        return (tf.reduce_sum(winners, axis=0), tf.reduce_sum(scores, axis=0),
                tf.reduce_sum(tf.square(scores), axis=0))

    def _run(self, x: tf.Tensor, full_steps: tf.Tensor, remainder: int, num_classes: int):
        # Every pass has a static number of draws (draws_per_step, then the remainder): the
        # forward pass keeps a known batch size, which the CPU kernels run about 1.5x faster
        # than the dynamic one a single loop with a shrinking last pass would force.
        batch = tf.shape(x)[0]
        counts = tf.zeros([batch, num_classes], tf.int64)
        total = tf.zeros([batch, num_classes], tf.float64)
        total_sq = tf.zeros([batch, num_classes], tf.float64)
        for _ in tf.range(full_steps):
            c, t, q = self._pass(x, self._draws_per_step, num_classes)
            counts, total, total_sq = counts + c, total + t, total_sq + q
        if remainder:
            c, t, q = self._pass(x, remainder, num_classes)
            counts, total, total_sq = counts + c, total + t, total_sq + q
        return counts, total, total_sq

    def __call__(self, x: Any, num_draws: int, num_classes: Optional[int] = None
                 ) -> MonteCarloResult:
        """Monte-Carlo statistics of `num_draws` noisy passes for every input of `x`.

        Args:
            x: batch of inputs (b, ...).
            num_draws: n >= 1 draws per input.
            num_classes: K; found from one forward pass when None.

        Returns:
            a MonteCarloResult.

        Raises:
            ValueError: if num_draws < 1 or x is empty.
        """
        n = checks.check_positive_int(num_draws, "num_draws", allow_integral_float=True)
        x = tf.convert_to_tensor(x, tf.float32)
        if x.shape.rank is None or x.shape.rank < 1 or int(tf.shape(x)[0]) == 0:
            raise ValueError("x must be a non-empty batch")
        if num_classes is None:
            num_classes = int(self._scores(x[:1]).shape[-1])
        counts, total, total_sq = self._fn(
            x, tf.constant(n // self._draws_per_step, tf.int32), n % self._draws_per_step,
            int(num_classes))
        mean = total.numpy() / n
        if n > 1:
            var = np.maximum(total_sq.numpy() - n * mean ** 2, 0.0) / (n - 1)
        else:
            var = np.zeros_like(mean)
        return MonteCarloResult(counts.numpy(), mean, var, n)


def monte_carlo_predict(score_fn: ScoreFn, x: Any, num_draws: int, *,
                        from_logits: bool = True, draws_per_step: int = 256,
                        num_classes: Optional[int] = None) -> MonteCarloResult:
    """One-off Monte-Carlo prediction; see MonteCarloPredictor (reuse it for many batches).

    Args:
        score_fn: maps a batch to logits (or scores when from_logits=False).
        x: batch of inputs.
        num_draws: n >= 1 noise draws per input.
        from_logits: apply a softmax to score_fn's output.
        draws_per_step: draws per forward pass.
        num_classes: K, or None to infer.

    Returns:
        a MonteCarloResult with class counts and mean / variance of the softmax scores.

    Raises:
        ValueError: if num_draws < 1.
    """
    checks.check_positive_int(num_draws, "num_draws", allow_integral_float=True)
    return MonteCarloPredictor(score_fn, from_logits, draws_per_step)(x, num_draws,
                                                                      num_classes)


def product_of_softmax(model_fns: Sequence[ScoreFn]) -> ScoreFn:
    """Scorer whose output is the element-wise product of the models' softmax outputs.

    StoBatch Theorem 5 / Corollary 1: the composed score of S independently randomised
    mechanisms is prod_s f^s(x), where f^s is the network with only mechanism s freshly
    randomised. Use the result with `from_logits=False`.

    Args:
        model_fns: one logits function per mechanism.

    Returns:
        a score function.

    Raises:
        ValueError: if model_fns is empty.
    """
    fns = list(model_fns)
    if not fns or not all(callable(f) for f in fns):
        raise ValueError("model_fns must be a non-empty list of callables")

    def score(x: tf.Tensor) -> tf.Tensor:
        out = tf.nn.softmax(fns[0](x), axis=-1)
        for f in fns[1:]:
            out = out * tf.nn.softmax(f(x), axis=-1)
        return out

    return score


# ------------------------------------------------------------------------ confidence bounds


def clopper_pearson_bounds(counts: Any, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-class Clopper-Pearson bounds on argmax probabilities, Bonferroni over classes.

    Each bound is one-sided at level alpha / K, so all statements used by the
    certificate (lower bound of the top class, upper bounds of the others) hold together
    with probability >= 1 - alpha. PixelDP code release convention.

    Args:
        counts: (..., K) non-negative integer counts summing to n over the last axis.
        alpha: failure probability in (0, 1).

    Returns:
        (lower, upper), float64 arrays shaped like counts.

    Raises:
        ValueError: on alpha outside (0, 1) or negative counts.
    """
    alpha = checks.check_unit_interval(alpha, "alpha")
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim < 1 or c.shape[-1] < 2:
        raise ValueError("counts must have a class axis of length >= 2")
    if np.any(c < 0) or not np.all(np.isfinite(c)):
        raise ValueError("counts must be finite and >= 0")
    n = c.sum(axis=-1, keepdims=True)
    if np.any(n < 1):
        raise ValueError("counts must sum to n >= 1")
    a = alpha / c.shape[-1]
    # Clopper & Pearson (1934), one-sided at a = alpha / K each (tfdp.clopper_pearson).
    return clopper_pearson.lower(c, n, a), clopper_pearson.upper(c, n, a)


def hoeffding_bounds(mean_scores: Any, num_draws: int, alpha: float
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Hoeffding bounds on expected scores in [0, 1], Bonferroni over classes.

    HGM paper: E_lb/ub = E_hat -/+ sqrt(ln(K/alpha) / (2n)) (Hoeffding 1963, one-sided
    at level alpha / K).

    Args:
        mean_scores: (..., K) Monte-Carlo means of scores in [0, 1].
        num_draws: n >= 1.
        alpha: failure probability in (0, 1).

    Returns:
        (lower, upper), clipped to [0, 1].

    Raises:
        ValueError: on bad n or alpha.
    """
    n = checks.check_positive_int(num_draws, "num_draws", allow_integral_float=True)
    alpha = checks.check_unit_interval(alpha, "alpha")
    mean = np.asarray(mean_scores, dtype=np.float64)
    k = mean.shape[-1]
    half = math.sqrt(math.log(k / alpha) / (2.0 * n))
    return np.clip(mean - half, 0.0, 1.0), np.clip(mean + half, 0.0, 1.0)


def empirical_bernstein_bounds(mean_scores: Any, var_scores: Any, num_draws: int,
                               alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Empirical Bernstein bounds on expected scores in [0, 1], Bonferroni over classes.

    Maurer & Pontil (2009), Theorem 4: with probability >= 1 - a,
    E <= mean + sqrt(2 V ln(2/a) / n) + 7 ln(2/a) / (3 (n - 1)), V the unbiased sample
    variance; here a = alpha / K per one-sided bound.

    Args:
        mean_scores: (..., K) Monte-Carlo means of scores in [0, 1].
        var_scores: (..., K) unbiased sample variances.
        num_draws: n >= 2.
        alpha: failure probability in (0, 1).

    Returns:
        (lower, upper), clipped to [0, 1].

    Raises:
        ValueError: on n < 2, bad alpha or negative variances.
    """
    n = checks.check_positive_int(num_draws, "num_draws", allow_integral_float=True)
    if n < 2:
        raise ValueError(f"num_draws must be >= 2 for the empirical Bernstein bound, got {n}")
    alpha = checks.check_unit_interval(alpha, "alpha")
    mean = np.asarray(mean_scores, dtype=np.float64)
    var = np.asarray(var_scores, dtype=np.float64)
    if mean.shape != var.shape:
        raise ValueError("var_scores must have the shape of mean_scores")
    if np.any(var < 0):
        raise ValueError("var_scores must be >= 0")
    log_term = math.log(2.0 * mean.shape[-1] / alpha)
    half = np.sqrt(2.0 * var * log_term / n) + 7.0 * log_term / (3.0 * (n - 1))
    return np.clip(mean - half, 0.0, 1.0), np.clip(mean + half, 0.0, 1.0)


def top_two_bounds(result: MonteCarloResult, bound: str = "clopper_pearson",
                   alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Prediction, lower bound of its class and upper bound of the runner-up, per input.

    The prediction is the argmax of the counts for Clopper-Pearson and of the mean scores
    for Hoeffding / Bernstein (tfdp's choice: the rule matches the bound type). The
    runner-up bound is the largest upper bound among the other classes.

    Args:
        result: Monte-Carlo statistics.
        bound: one of BOUNDS.
        alpha: failure probability in (0, 1).

    Returns:
        (prediction int64 (b,), lower (b,), upper (b,)).

    Raises:
        ValueError: on an unknown bound or bad alpha.
    """
    bound = checks.check_choice(bound, "bound", BOUNDS)
    alpha = checks.check_unit_interval(alpha, "alpha")
    if bound == "clopper_pearson":
        lower, upper = clopper_pearson_bounds(result.counts, alpha)
        pred = np.argmax(result.counts, axis=-1)
    elif bound == "hoeffding":
        lower, upper = hoeffding_bounds(result.mean_scores, result.num_draws, alpha)
        pred = np.argmax(result.mean_scores, axis=-1)
    else:
        lower, upper = empirical_bernstein_bounds(result.mean_scores, result.var_scores,
                                                  result.num_draws, alpha)
        pred = np.argmax(result.mean_scores, axis=-1)
    rows = np.arange(pred.shape[0])
    lower_top = lower[rows, pred]
    others = upper.copy()
    others[rows, pred] = -np.inf
    return pred.astype(np.int64), lower_top, others.max(axis=-1)


# ------------------------------------------------------------------- noise multipliers


# The calibrations live in tfdp.mechanisms (one implementation of each formula);
# here they are applied elementwise over (examples x delta' grid).
_gm_multiplier = np.vectorize(
    lambda d: mechanisms.classical_gaussian_multiplier(d), otypes=[np.float64])
_hgm_multiplier = np.vectorize(
    lambda e, d: mechanisms.hgm_multiplier(epsilon=e, delta=d), otypes=[np.float64])
_agm_multiplier = np.vectorize(
    lambda e, d: mechanisms.analytic_gaussian_sigma(epsilon=e, delta=d, sensitivity=1.0),
    otypes=[np.float64])


# ------------------------------------------------------------------------- radii


def max_epsilon(lower: Any, upper: Any, delta: Any = 0.0) -> np.ndarray:
    """Largest eps' for which the PixelDP robustness check (Eq. 4) holds; 0 if none.

    PixelDP Eq. 4 / HGM Eq. 4: lower > exp(2 eps') upper + (1 + exp(eps')) delta.
    With t = exp(eps') this is upper t^2 + delta t + (delta - lower) < 0, a quadratic,
    so the supremum is t* = (-delta + sqrt(delta^2 + 4 upper (lower - delta))) / (2 upper)
    (t* = (lower - delta) / delta when upper = 0). Exact, so no bisection is needed.

    Args:
        lower: lower bound(s) of the top class's expected score.
        upper: upper bound(s) of the runner-up's expected score.
        delta: delta' (broadcasts).

    Returns:
        eps' >= 0 (float64 array); 0 means the check fails for every eps' > 0.
    """
    lo, up, d = np.broadcast_arrays(np.asarray(lower, np.float64),
                                    np.asarray(upper, np.float64),
                                    np.asarray(delta, np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        disc = d * d + 4.0 * up * (lo - d)
        t_quad = (-d + np.sqrt(np.maximum(disc, 0.0))) / (2.0 * up)
        t_lin = (lo - d) / d
        t = np.where(up > 0, t_quad, np.where(d > 0, t_lin, np.inf))
        eps = np.where(t > 1.0, np.log(np.maximum(t, 1.0)), 0.0)
    return np.where(lo - d > 0, eps, 0.0)


def laplace_radius(lower: Any, upper: Any, noise_to_sensitivity: float) -> np.ndarray:
    """Radius certified by Laplace noise of scale b = noise_to_sensitivity * Delta.

    PixelDP code release: size = L ln(p_lb / p_ub) / (2 eps) with b = Delta L / eps, i.e.
    radius = (b / Delta) * eps*, eps* = ln(p_lb / p_ub) / 2 (Eq. 4 with delta = 0).

    Args:
        lower: lower bound(s) of the top class.
        upper: upper bound(s) of the runner-up.
        noise_to_sensitivity: b / Delta > 0.

    Returns:
        radii (0 = abstain).

    Raises:
        ValueError: if noise_to_sensitivity <= 0.
    """
    ratio = checks.check_positive(noise_to_sensitivity, "noise_to_sensitivity")
    return ratio * max_epsilon(lower, upper, 0.0)


def gaussian_radius(lower: Any, upper: Any, noise_to_sensitivity: float, multiplier: str,
                    eps_cap: Optional[float] = None,
                    delta_grid: Any = DEFAULT_DELTA_GRID) -> np.ndarray:
    """Radius certified by Gaussian noise with sigma = noise_to_sensitivity * Delta.

    HGM Eq. 10: mu(eps', delta') = (sigma / Delta) / mult(eps', delta'), maximised
    over the delta' grid, with eps' the largest value passing Eq. 4 (optionally capped).

    Args:
        lower: lower bound(s) of the top class, shape (b,) or scalar.
        upper: upper bound(s) of the runner-up, same shape.
        noise_to_sensitivity: sigma / Delta > 0.
        multiplier: "gm" (classical, PixelDP), "hgm" (HGM Theorem 2) or "agm"
            (Balle & Wang).
        eps_cap: largest eps' allowed (1 for the classical GM), None for none.
        delta_grid: candidate delta' values in (0, 1).

    Returns:
        radii (0 = abstain), shaped like lower.

    Raises:
        ValueError: on bad arguments.
    """
    ratio = checks.check_positive(noise_to_sensitivity, "noise_to_sensitivity")
    if multiplier not in ("gm", "hgm", "agm"):
        raise ValueError(f"multiplier must be 'gm', 'hgm' or 'agm', got {multiplier!r}")
    grid = np.asarray(delta_grid, np.float64).reshape(-1)
    if grid.size == 0 or np.any(grid <= 0) or np.any(grid >= 1):
        raise ValueError("delta_grid must hold values in (0, 1)")
    if eps_cap is not None:
        eps_cap = checks.check_positive(eps_cap, "eps_cap")
    lo = np.asarray(lower, np.float64)
    up = np.asarray(upper, np.float64)
    shape = np.broadcast(lo, up).shape
    lo = np.broadcast_to(lo, shape).reshape(-1, 1)
    up = np.broadcast_to(up, shape).reshape(-1, 1)
    eps = max_epsilon(lo, up, grid[None, :])  # (b, grid)
    if eps_cap is not None:
        eps = np.minimum(eps, eps_cap)
    passed = eps > 0
    safe_eps = np.where(passed, eps, 1.0)
    d = np.broadcast_to(grid[None, :], eps.shape)
    if multiplier == "gm":
        mult = _gm_multiplier(d) / safe_eps  # HGM Eq. 10, PixelDP counterpart
    elif multiplier == "hgm":
        mult = _hgm_multiplier(safe_eps, d)  # HGM Eq. 10 (dividing by eps' once)
    else:
        mult = np.ones_like(safe_eps)
        if np.any(passed):
            mult[passed] = _agm_multiplier(safe_eps[passed], d[passed])
    radius = np.where(passed, ratio / mult, 0.0).max(axis=-1)
    return radius.reshape(shape)


def is_robust(radius: Any, attack_size: float) -> np.ndarray:
    """isRobust = radius >= mu_a (HGM Algorithm 1, StoBatch Alg. 3), false for radius 0.

    Args:
        radius: certified radii.
        attack_size: mu_a >= 0.

    Returns:
        boolean array.

    Raises:
        ValueError: if attack_size < 0.
    """
    mu = checks.check_nonnegative(attack_size, "attack_size")
    r = np.asarray(radius, np.float64)
    return (r >= mu) & (r > 0)
