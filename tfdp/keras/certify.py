"""Randomized-smoothing certificates, l2 attacks and the soundness check for any Keras model.

`certify` runs tfdp-evaluate's own evaluation (`tfdp.evaluate.evaluate_arrays`) with the
Gaussian-smoothing certificate (`tfdp.certify.registry.GaussianSmoothing`, Cohen, Rosenfeld,
Kolter 2019, Algorithm CERTIFY: class from n0 draws, one-sided Clopper-Pearson lower bound of
p_A from n further draws, radius sigma Phi^-1(p_A_lower)), so its numbers are those of
`tfdp-evaluate --certify` on the same weights, and writes the same files (evaluation.json,
certificates.tsv, the accuracy plot). `predict` is Cohen et al.'s PREDICT (abstains unless a
two-sided binomial test separates the top two classes at level alpha).
"""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence

import keras
import numpy as np
import scipy.stats
import tensorflow as tf

from tfdp import checks, evaluate, rundir
from tfdp.certify import core, smoothing

ABSTAIN = -1


def _certification(sigma: float, n0: int, n: int, alpha: float) -> dict:
    cert = smoothing.certification(checks.check_positive(sigma, "sigma"))
    cert.update({"selection_draws": checks.check_positive_int(n0, "n0"),
                 "num_draws": checks.check_positive_int(n, "n"),
                 "alpha": checks.check_unit_interval(alpha, "alpha")})
    return cert


def certify(model: Any, x: np.ndarray, y: np.ndarray, *, sigma: float,
            value_range: Sequence[float], n0: int = 100, n: int = 1000, alpha: float = 0.001,
            attacks: Sequence[str] = (), attack_sizes: Sequence[float] = (0.5,),
            nb_iter: int = 10, eot_draws: int = 1, soundness_check: bool = False,
            soundness_nb_iter: int = 50, soundness_eot_draws: int = 32,
            batch_size: int = 100, seed: Optional[int] = None,
            out_dir: Optional[str] = None) -> dict:
    """Cohen et al.'s certificate (and optionally l2 attacks and the soundness check).

    Args:
      model: a Keras classifier mapping inputs in `value_range` to logits (e.g. one trained
        with Gaussian input noise of the same sigma).
      x: test inputs; y: their integer labels.
      sigma: the smoothing noise N(0, sigma^2 I) on the input.
      value_range: the inputs' (low, high).
      n0: draws that select the class; n: draws that bound its probability.
      alpha: failure probability of each certificate.
      attacks: l2 attacks to run (`attacks.ATTACKS` names, e.g. "fgsm", "madry").
      attack_sizes: l2 sizes mu_a (on `value_range`); also the radii at which the clean
        certified accuracy is reported.
      nb_iter, eot_draws: iterations and EOT draws of the attacks.
      soundness_check: attack every clean-certified example at its certified radius and
        re-certify it (`tfdp.soundness`).
      soundness_nb_iter, soundness_eot_draws: that attack's PGD steps and EOT draws.
      batch_size: examples per batch.
      seed: seed of the attacks' random starts and of the smoothing noise (reproducible);
        None: OS entropy.
      out_dir: if given, evaluation.json, certificates.tsv and the plot are written there,
        as tfdp-evaluate writes them into a run directory.

    Returns:
      The summary (evaluation.json's content).

    Raises:
      ValueError: on invalid arguments, before any work.
    """
    if not isinstance(model, keras.Model):
        raise TypeError(f"model: expected a keras.Model, got {type(model).__name__}")
    cert = _certification(sigma, n0, n, alpha)
    options = evaluate.EvalOptions(
        attacks=tuple(attacks), attack_sizes=tuple(float(s) for s in attack_sizes),
        nb_iter=nb_iter, eot_draws=eot_draws, certify=True, num_draws=cert["num_draws"],
        alpha=cert["alpha"], batch_size=batch_size, seed=seed, attack_norm="2",
        soundness_check=soundness_check, soundness_nb_iter=soundness_nb_iter,
        soundness_eot_draws=soundness_eot_draws, noise_kernel="portable")
    if seed is not None:
        tf.random.set_seed(int(seed))  # smoothing draws come from the global TF generator
    summary, records = evaluate.evaluate_arrays(model, x, y, value_range=value_range,
                                                certification=cert, options=options)
    if out_dir is not None:
        rd = rundir.RunDir(out_dir, create=True)
        evaluate.write_certificates(rd.file(rundir.CERTIFICATES_FILE), records,
                                    claimed=evaluate.certified_key(summary)
                                    != "certified_accuracy")
        summary["plot"] = evaluate.PLOT_FILE
        evaluate.plot_accuracy(rd.file(evaluate.PLOT_FILE), summary)
        rd.write_json(rundir.EVALUATION_FILE, summary)
    return summary


def predict(model: Any, x: np.ndarray, *, sigma: float, n: int = 1000, alpha: float = 0.001,
            draws_per_step: int = 256, seed: Optional[int] = None) -> np.ndarray:
    """Cohen et al. 2019 PREDICT: the smoothed class, or ABSTAIN (-1).

    Returns the top class of n noisy draws when a two-sided binomial test of its count
    against the runner-up's rejects equality at level alpha (then the probability of
    returning a class other than the smoothed classifier's is at most alpha).

    Raises:
      ValueError: on invalid arguments.
    """
    checks.check_positive(sigma, "sigma")
    n = checks.check_positive_int(n, "n")
    alpha = checks.check_unit_interval(alpha, "alpha")
    if seed is not None:
        tf.random.set_seed(int(seed))
    score = smoothing.smoothed_score(lambda v: model(v, training=False), float(sigma))
    result = core.MonteCarloPredictor(score, from_logits=True, draws_per_step=draws_per_step)(
        np.asarray(x, np.float32), n)
    order = np.argsort(-result.counts, axis=-1, kind="stable")
    top, second = order[:, 0], order[:, 1]
    rows = np.arange(len(top))
    n_a, n_b = result.counts[rows, top], result.counts[rows, second]
    out = np.full(len(top), ABSTAIN, np.int64)
    for i in range(len(top)):
        if scipy.stats.binomtest(int(n_a[i]), int(n_a[i] + n_b[i]), 0.5).pvalue <= alpha:
            out[i] = top[i]
    return out


def output_files(out_dir: str) -> list[str]:
    """The files `certify` wrote into `out_dir`."""
    return sorted(f for f in os.listdir(out_dir)
                  if f in (rundir.CERTIFICATES_FILE, rundir.EVALUATION_FILE, evaluate.PLOT_FILE))
