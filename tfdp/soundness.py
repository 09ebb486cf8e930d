"""Soundness check of certificates: attack every certified example at its certified radius.

DESIGN principle 7: a number is "certified" only if a strong adaptive attack cannot break it
beyond the confidence level. For each example whose clean input was certified for class c
with radius r_i > 0, projected-gradient attacks with EOT gradients (Athalye et al. 2018: the
cross-entropy averaged over noise draws of the noisy classifier) search the ball of radius
r_i in the certificate's norm:

- untargeted (away from c), started at x;
- untargeted, from `restarts` uniformly random points of the ball (Madry et al. 2018);
- targeted at the runner-up class (the most likely other class at x under the noise).

Of these candidates the one with the smallest estimated margin p_c - max_{k != c} p_k (from
`eot_draws` fresh noise draws) is tested with fresh Monte-Carlo draws (the evaluation's n).

A *flip* is a change of the smoothed plurality: the smoothed prediction at the attacked
point is no longer c. It is decided by one-sided tests at the certificate's alpha, split
over the K - 1 other classes (Bonferroni):

- Clopper-Pearson (counts): for each class k != c, given the m = n_c + n_k draws that gave
  c or k, n_c ~ Binomial(m, theta) with theta = p_c / (p_c + p_k). The point flips when for
  some k the one-sided Clopper-Pearson upper bound of theta at level alpha / (K - 1) is
  below 1/2 (then p_k > p_c, unless a test at that level erred).
- Hoeffding / Bernstein (mean scores): the per-draw difference s_c - s_k lies in [-1, 1],
  so its mean plus 2 sqrt(ln((K - 1) / alpha) / (2 n)) bounds E[s_c - s_k] from above with
  probability >= 1 - alpha / (K - 1) (Hoeffding 1963); the point flips when that bound is
  below 0 for some k.

A sound certificate keeps c the smoothed prediction on the whole ball, so a flip needs a
failure of the clean certificate (probability <= alpha) or of the flip test (<= alpha):
flips ~ Binomial(certified, <= 2 alpha), and the reported p-value is
P(Binomial(certified, 2 alpha) >= flipped) (scipy.stats.binom). The check is inconclusive
with fewer than MIN_CERTIFIED certified examples or a model within CHANCE_MARGIN of chance
accuracy.

Power: the same attacks and test at `power_factor` times each radius (2 by default), where
sound certificates promise nothing; the number of flips there is reported as the check's
power on the same examples. A check that flips few examples at 2r could not have seen a
radius inflated by less than 2.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence

import numpy as np
import scipy.stats
import tensorflow as tf
from absl import logging

from tfdp import clopper_pearson, tf_options

tf_options.configure_tensorflow()  # bit-reproducible tf.function graphs (tfdp/tf_options.py)

MIN_CERTIFIED = 20
CHANCE_MARGIN = 0.05
# The check fails when the flips are this unlikely under soundness.
REJECT_LEVEL = 0.05


def _per_example(v: tf.Tensor, rank: int) -> tf.Tensor:
    return tf.reshape(v, [-1] + [1] * (rank - 1))


def pgd_eot(model_fn: Callable[[tf.Tensor], tf.Tensor], x: Any, labels: Any, radius: Any,
            norm: str, *, value_range: Sequence[float], nb_iter: int, eot_draws: int,
            step_scale: float = 2.5, start: Any = None, targeted: bool = False
            ) -> np.ndarray:
    """PGD with per-example radii and EOT gradients, in the l2 or l_inf norm.

    Madry et al. 2018 with the radius of example i being radius[i]: nb_iter steps of size
    step_scale * radius / nb_iter along the normalised gradient (l2) or its sign (l_inf) of
    the cross-entropy averaged over eot_draws noise draws (ascent away from `labels`, or
    descent towards them when `targeted`), each followed by projection onto the ball around
    x and clipping to value_range.

    Args:
        model_fn: noisy logits function (draws its own noise per call and per row).
        x: (b, ...) inputs (the centres of the balls).
        labels: (b,) the classes to move away from (towards them when `targeted`).
        radius: (b,) radii >= 0.
        norm: "l2" or "linf".
        value_range: (low, high) of valid inputs.
        nb_iter: PGD steps.
        eot_draws: noise draws per gradient.
        step_scale: step size in units of radius / nb_iter.
        start: (b, ...) starting points inside the balls (default: x).
        targeted: minimise the cross-entropy of `labels` instead of maximising it.

    Returns:
        adversarial inputs, float32 numpy (b, ...).
    """
    if norm not in ("l2", "linf"):
        raise ValueError(f"norm must be 'l2' or 'linf', got {norm!r}")
    x = tf.convert_to_tensor(np.asarray(x, np.float32))
    x0 = x if start is None else tf.convert_to_tensor(np.asarray(start, np.float32))
    direction = -1.0 if targeted else 1.0
    rank = x.shape.rank
    r = _per_example(tf.constant(np.asarray(radius, np.float32)), rank)
    y = tf.constant(np.asarray(labels, np.int64))
    low, high = (float(v) for v in value_range)
    step = step_scale * r / float(nb_iter)
    draws = int(eot_draws)
    ones = [1] * (rank - 1)

    def loss(adv):
        tiled = tf.tile(adv, [draws] + ones)
        logits = model_fn(tiled)
        yy = tf.tile(y, [draws])
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yy, logits=logits)
        return tf.reduce_sum(ce) / float(draws)  # EOT: mean over draws, summed over rows

    @tf.function
    def run(x, x0):
        adv = x0
        for _ in tf.range(int(nb_iter)):
            with tf.GradientTape() as tape:
                tape.watch(adv)
                value = loss(adv)
            g = direction * tape.gradient(value, adv)
            if norm == "l2":
                gn = tf.sqrt(tf.reduce_sum(tf.square(g), axis=list(range(1, rank)),
                                           keepdims=True))
                adv = adv + step * g / tf.maximum(gn, 1e-12)
                delta = adv - x
                dn = tf.sqrt(tf.reduce_sum(tf.square(delta), axis=list(range(1, rank)),
                                           keepdims=True))
                delta = delta * tf.minimum(1.0, r / tf.maximum(dn, 1e-12))
            else:
                adv = adv + step * tf.sign(g)
                delta = tf.clip_by_value(adv - x, -r, r)
            adv = tf.clip_by_value(x + delta, low, high)
        return adv

    return run(x, x0).numpy()


def random_starts(x: np.ndarray, radius: np.ndarray, norm: str, value_range: Sequence[float],
                  rng: np.random.Generator) -> np.ndarray:
    """Uniformly random points of each example's ball (clipped to value_range).

    l2: a uniform direction (a normalised Gaussian) at distance r u^(1/d), u ~ U(0, 1), which
    is uniform in the d-dimensional ball; l_inf: a uniform offset in [-r, r]^d.
    """
    x = np.asarray(x, np.float32)
    b, d = x.shape[0], int(np.prod(x.shape[1:]))
    r = np.asarray(radius, np.float64).reshape(b, 1)
    if norm == "l2":
        g = rng.standard_normal((b, d))
        g /= np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
        offset = g * r * rng.random((b, 1)) ** (1.0 / d)
    else:
        offset = rng.uniform(-1.0, 1.0, (b, d)) * r
    low, high = (float(v) for v in value_range)
    return np.clip(x + offset.reshape(x.shape).astype(np.float32), low, high)


def _mean_probs(model_fn: Callable, x: np.ndarray, draws: int) -> np.ndarray:
    """Softmax of the noisy model averaged over `draws` fresh noise draws, (b, K)."""
    x = tf.convert_to_tensor(np.asarray(x, np.float32))
    tiled = tf.tile(x, [draws] + [1] * (x.shape.rank - 1))
    probs = tf.nn.softmax(model_fn(tiled), axis=-1).numpy()
    return probs.reshape(draws, x.shape[0], -1).mean(axis=0)


def _margin(probs: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """p_c - max_{k != c} p_k per row."""
    rows = np.arange(probs.shape[0])
    others = probs.copy()
    others[rows, cls] = -np.inf
    return probs[rows, cls] - others.max(axis=1)


def plurality_flipped(result: Any, cls: np.ndarray, bound: str, alpha: float) -> np.ndarray:
    """Whether the smoothed prediction at each point is no longer `cls` (see module doc).

    Args:
        result: the Monte-Carlo result at the attacked points (counts, mean_scores,
            num_draws; tfdp.certify.MonteCarloResult).
        cls: (b,) the certified classes.
        bound: "clopper_pearson" (test on the counts) or "hoeffding" / "empirical_bernstein"
            (test on the mean scores, with Hoeffding's bound).
        alpha: the certificate's failure probability, split over the K - 1 other classes.

    Returns:
        (b,) bool.
    """
    cls = np.asarray(cls, np.int64)
    rows = np.arange(cls.shape[0])
    if bound == "clopper_pearson":
        counts = np.asarray(result.counts, np.float64)
        k = counts.shape[1]
        level = float(alpha) / max(k - 1, 1)
        n_c = counts[rows, cls][:, None]
        m = n_c + counts
        # One-sided Clopper-Pearson upper bound of theta = p_c / (p_c + p_k) from n_c of m:
        # the (1 - level) quantile of Beta(n_c + 1, m - n_c); 1 when n_c = m.
        # (tfdp.clopper_pearson; m = 0 only where n_c = m, whose bound is 1.)
        upper = np.where(m > 0, clopper_pearson.upper(n_c, np.maximum(m, 1.0), level), 1.0)
        upper[rows, cls] = 1.0
        return np.any(upper < 0.5, axis=1)
    mean = np.asarray(result.mean_scores, np.float64)
    k = mean.shape[1]
    level = float(alpha) / max(k - 1, 1)
    # Hoeffding: s_c - s_k in [-1, 1] per draw, so P(E - mean >= t) <= exp(-n t^2 / 2).
    slack = 2.0 * np.sqrt(np.log(1.0 / level) / (2.0 * float(result.num_draws)))
    diff = mean[rows, cls][:, None] - mean + slack
    diff[rows, cls] = np.inf
    return np.any(diff < 0.0, axis=1)


def _attack_points(noisy: Callable, x: np.ndarray, cls: np.ndarray, radius: np.ndarray, norm: str,
                   *, value_range: Sequence[float], options: Any, rng: np.random.Generator
                   ) -> tuple[np.ndarray, int]:
    """The strongest of the candidate attacks per example (smallest estimated margin).

    Returns:
        (adversarial inputs, number of candidates per example).
    """
    nb_iter, draws = int(options.soundness_nb_iter), int(options.soundness_eot_draws)
    kw = dict(value_range=value_range, nb_iter=nb_iter, eot_draws=draws)
    candidates = [pgd_eot(noisy, x, cls, radius, norm, **kw)]
    for _ in range(int(options.soundness_restarts)):
        candidates.append(pgd_eot(noisy, x, cls, radius, norm,
                                  start=random_starts(x, radius, norm, value_range, rng), **kw))
    if options.soundness_targeted:
        probs = _mean_probs(noisy, x, draws)
        probs[np.arange(len(cls)), cls] = -np.inf
        runner_up = np.argmax(probs, axis=1)
        candidates.append(pgd_eot(noisy, x, runner_up, radius, norm, targeted=True, **kw))
    if len(candidates) == 1:
        return candidates[0], 1
    margins = np.stack([_margin(_mean_probs(noisy, c, draws), cls) for c in candidates])
    best = np.argmin(margins, axis=0)
    stacked = np.stack(candidates)
    return stacked[best, np.arange(len(cls))], len(candidates)


def _count_flips(certificate: Any, x: np.ndarray, clean_pred: np.ndarray, radius: np.ndarray,
                 idx: np.ndarray, *, noisy: Callable, monte_carlo_fn: Callable, bound: str,
                 value_range: Sequence[float], alpha: float, options: Any,
                 rng: np.random.Generator, label: str, log: Callable[[str], None]) -> int:
    flipped, batch = 0, int(options.batch_size)
    chunks = max(1, -(-idx.size // batch))
    started = time.perf_counter()
    for i, begin in enumerate(range(0, idx.size, batch)):
        b = idx[begin:begin + batch]
        adv, _ = _attack_points(noisy, x[b], clean_pred[b], radius[b], certificate.norm,
                                value_range=value_range, options=options, rng=rng)
        flips = plurality_flipped(monte_carlo_fn(adv), clean_pred[b], bound, alpha)
        flipped += int(np.sum(flips))
        elapsed = time.perf_counter() - started
        eta = elapsed / (i + 1) * (chunks - i - 1)
        log(f"soundness check ({label}): chunk {i + 1}/{chunks}, {begin + len(b)}/{idx.size} "
            f"certified examples, {flipped} flipped so far, {elapsed:.0f} s, ETA {eta:.0f} s")
    return flipped


def _attack_description(certificate: Any, options: Any, bound: str) -> dict:
    """The entry's description of the attack and of the flip rule (`attack`, `restarts`,
    `targeted`, `flip_rule`)."""
    starts = "x" + (f" and {int(options.soundness_restarts)} random start(s) in the ball"
                    if int(options.soundness_restarts) else "")
    targeted = ", plus a targeted attack on the runner-up class" if options.soundness_targeted \
        else ""
    test = ("one-sided Clopper-Pearson on n_c of n_c + n_k" if bound == "clopper_pearson"
            else "one-sided Hoeffding on the mean score difference")
    return {
        "attack": (f"PGD-EOT ({certificate.norm}), {int(options.soundness_nb_iter)} steps of "
                   f"2.5 r / steps, {int(options.soundness_eot_draws)} draws per gradient, "
                   f"untargeted from {starts}{targeted}; the candidate with the smallest "
                   "estimated margin is tested; at each example's certified radius r"),
        "restarts": int(options.soundness_restarts),
        "targeted": bool(options.soundness_targeted),
        "flip_rule": (f"the smoothed prediction at the attacked point is no longer the "
                      f"certified class c: for some other class k, {test} rejects "
                      f"p_c >= p_k at level alpha / (K - 1)"),
    }


def soundness_check(certificate: Any, x: np.ndarray, y: np.ndarray, clean_pred: np.ndarray,
                    clean_radius: np.ndarray, *, noisy: Callable, monte_carlo_fn: Callable,
                    bound: str, value_range: Sequence[float], alpha: float, options: Any,
                    num_classes: int, chance: float, clean_accuracy: float,
                    seed: Optional[int] = None,
                    log: Optional[Callable[[str], None]] = None) -> dict:
    """Runs the check on every clean-certified example; returns the evaluation.json entry.

    Args:
        certificate: the tfdp.certify Certificate.
        x, y: the evaluated examples and labels.
        clean_pred, clean_radius: the Monte-Carlo prediction and radius on clean inputs.
        noisy: noisy logits function (EOT gradients, margins of the candidates).
        monte_carlo_fn: xb -> MonteCarloResult with the evaluation's n draws (fresh noise).
        bound: the evaluation's confidence bound (decides the flip test; module doc).
        value_range: (low, high).
        alpha: the certificates' failure probability.
        options: EvalOptions (batch_size, soundness_nb_iter, soundness_eot_draws,
            soundness_restarts, soundness_targeted, soundness_power_factor).
        num_classes: K.
        chance: 1 / K.
        clean_accuracy: the evaluated clean accuracy.
        seed: seed of the random starts (None: OS entropy).
        log: where the progress lines go (default: absl logging.info).

    Returns:
        dict with certified, flipped, p_value, alpha, null_rate, passed, conclusive, norm,
        the attack and flip rule, the power at power_factor * r, radius statistics, a note.
    """
    del num_classes, y
    log = log or (lambda text: logging.info("%s", text))
    rng = np.random.default_rng(seed)
    idx = np.flatnonzero(np.asarray(clean_radius) > 0)
    clean_radius = np.asarray(clean_radius, np.float64)
    kw = dict(noisy=noisy, monte_carlo_fn=monte_carlo_fn, bound=bound,
              value_range=value_range, alpha=alpha, options=options, rng=rng, log=log)
    flipped = _count_flips(certificate, x, clean_pred, clean_radius, idx, label="at r", **kw)
    factor = float(options.soundness_power_factor)
    power_flipped = None
    if factor > 0 and idx.size:
        power_flipped = _count_flips(certificate, x, clean_pred, factor * clean_radius, idx,
                                     label=f"power, at {factor:g} r", **kw)
    certified = int(idx.size)
    null_rate = min(1.0, 2.0 * float(alpha))
    p_value = (float(scipy.stats.binom.sf(flipped - 1, certified, null_rate))
               if certified else 1.0)
    conclusive = certified >= MIN_CERTIFIED and clean_accuracy >= chance + CHANCE_MARGIN
    if not conclusive:
        note = (f"inconclusive: {certified} certified examples (need >= {MIN_CERTIFIED}) "
                f"and clean accuracy {clean_accuracy:.3f} (chance {chance:.3f})")
    else:
        note = ("flips consistent with the confidence level" if p_value >= REJECT_LEVEL else
                "certificates broken: more flips than the confidence level allows")
    return {
        "certified": certified, "flipped": int(flipped), "p_value": p_value,
        "alpha": float(alpha), "null_rate": null_rate,
        "passed": bool(conclusive and p_value >= REJECT_LEVEL),
        "conclusive": bool(conclusive), "norm": certificate.norm,
        "certificate": certificate.name, "sound": bool(certificate.sound),
        **_attack_description(certificate, options, bound),
        "power": (None if power_flipped is None else {
            "radius_factor": factor, "flipped": int(power_flipped), "of": certified,
            "rate": power_flipped / certified,
            "note": (f"the same attacks and test at {factor:g} r, beyond what the "
                     "certificates promise: how many flips the check finds where it may")}),
        "median_radius": float(np.median(clean_radius[idx])) if certified else None,
        "note": note,
    }
