"""Soundness check of certificates: attack every certified example at its certified radius.

DESIGN principle 7: a number is "certified" only if a strong adaptive attack cannot break it
beyond the confidence level. For each example whose clean input was certified (radius
r_i > 0), a projected-gradient attack with EOT gradients (Athalye et al. 2018: the
cross-entropy averaged over noise draws of the noisy classifier) searches the ball of radius
r_i in the certificate's norm, and the adversarial input is certified again with the same
procedure. The example *flips* when the Monte-Carlo classifier then certifies a different
class (radius > 0 for another class), i.e. two certificates contradict each other.

If the certificates are sound, a flip needs a failure of the clean certificate (probability
<= alpha) or of the adversarial one (<= alpha), so flips ~ Binomial(certified, <= 2 alpha);
the reported p-value is P(Binomial(certified, 2 alpha) >= flipped) (scipy.stats.binom). The
check is inconclusive with fewer than MIN_CERTIFIED certified examples or a model within
CHANCE_MARGIN of chance accuracy.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import scipy.stats
import tensorflow as tf

from tfdp import tf_options

tf_options.configure_tensorflow()  # bit-reproducible tf.function graphs (tfdp/tf_options.py)

MIN_CERTIFIED = 20
CHANCE_MARGIN = 0.05
# The check fails when the flips are this unlikely under soundness.
REJECT_LEVEL = 0.05


def _per_example(v: tf.Tensor, rank: int) -> tf.Tensor:
    return tf.reshape(v, [-1] + [1] * (rank - 1))


def pgd_eot(model_fn: Callable[[tf.Tensor], tf.Tensor], x: Any, labels: Any, radius: Any,
            norm: str, *, value_range: Sequence[float], nb_iter: int, eot_draws: int,
            step_scale: float = 2.5) -> np.ndarray:
    """PGD with per-example radii and EOT gradients, in the l2 or l_inf norm.

    Madry et al. 2018 with the radius of example i being radius[i]: nb_iter steps of size
    step_scale * radius / nb_iter along the normalised gradient (l2) or its sign (l_inf) of
    the cross-entropy averaged over eot_draws noise draws, each followed by projection onto
    the ball and clipping to value_range.

    Args:
        model_fn: noisy logits function (draws its own noise per call and per row).
        x: (b, ...) inputs.
        labels: (b,) the classes to move away from.
        radius: (b,) radii >= 0.
        norm: "l2" or "linf".
        value_range: (low, high) of valid inputs.
        nb_iter: PGD steps.
        eot_draws: noise draws per gradient.
        step_scale: step size in units of radius / nb_iter.

    Returns:
        adversarial inputs, float32 numpy (b, ...).
    """
    if norm not in ("l2", "linf"):
        raise ValueError(f"norm must be 'l2' or 'linf', got {norm!r}")
    x = tf.convert_to_tensor(np.asarray(x, np.float32))
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
    def run(x):
        adv = x
        for _ in tf.range(int(nb_iter)):
            with tf.GradientTape() as tape:
                tape.watch(adv)
                value = loss(adv)
            g = tape.gradient(value, adv)
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

    return run(x).numpy()


def soundness_check(certificate: Any, x: np.ndarray, y: np.ndarray, clean_pred: np.ndarray,
                    clean_radius: np.ndarray, *, noisy: Callable, certify_fn: Callable,
                    value_range: Sequence[float], alpha: float, options: Any,
                    num_classes: int, chance: float, clean_accuracy: float) -> dict:
    """Runs the check on every clean-certified example; returns the evaluation.json entry.

    Args:
        certificate: the tfdp.certify Certificate.
        x, y: the evaluated examples and labels.
        clean_pred, clean_radius: the Monte-Carlo prediction and radius on clean inputs.
        noisy: noisy logits function (EOT gradients).
        certify_fn: xb -> (prediction, {0.0: radius}) with the evaluation's procedure.
        value_range: (low, high).
        alpha: the certificates' failure probability.
        options: EvalOptions (batch_size, soundness_nb_iter, soundness_eot_draws).
        num_classes: K.
        chance: 1 / K.
        clean_accuracy: the evaluated clean accuracy.

    Returns:
        dict with certified, flipped, p_value, alpha, null_rate, passed, conclusive, norm,
        radius statistics and a note.
    """
    del num_classes, y
    idx = np.flatnonzero(np.asarray(clean_radius) > 0)
    flipped = 0
    adv_radius = []
    for start in range(0, idx.size, int(options.batch_size)):
        b = idx[start:start + int(options.batch_size)]
        adv = pgd_eot(noisy, x[b], clean_pred[b], clean_radius[b], certificate.norm,
                      value_range=value_range, nb_iter=int(options.soundness_nb_iter),
                      eot_draws=int(options.soundness_eot_draws))
        pred, radii = certify_fn(adv)
        r = radii[0.0]
        flipped += int(np.sum((pred != clean_pred[b]) & (r > 0)))
        adv_radius.extend(np.asarray(r, np.float64).tolist())
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
        "attack": (f"PGD-EOT ({certificate.norm}), {int(options.soundness_nb_iter)} steps of "
                   f"2.5 r / steps, {int(options.soundness_eot_draws)} draws per gradient, "
                   f"at each example's certified radius r"),
        "flip_rule": "the adversarial input is certified (radius > 0) for another class",
        "median_radius": float(np.median(clean_radius[idx])) if certified else None,
        "note": note,
    }
