"""Evaluation of in-memory test arrays: clean and attacked accuracy, certificates, summary.

`evaluate_arrays` runs the clean job and every (attack, size) job over the test arrays in
batches: attacks against the noise-free network (or the noisy one with EOT), predictions
by one noise-free pass or by Monte-Carlo certificates, and the evaluation.json summary with
binomial 95% intervals. `tfdp.evaluate` evaluates run directories and exports with it.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

import attacks
import layers as layers_lib
from tfdp import certify as certify_lib
from tfdp import clopper_pearson, exported_model, run_model, soundness
from tfdp.eval_checks import ATTACK_NORMS, check_certificate_norm, validate_options
from tfdp.eval_options import EvalOptions

__all__ = ["evaluate_arrays", "binomial_ci95", "proportion", "size_key"]

model_functions = run_model.model_functions


def _attack_batch(name, attack_fn, det_fn, xb, eps, low, high, labels, opts, rng):
    """One batch of adversarial examples; with restarts, the first restart that breaks each
    example (on the noise-free network) is kept."""
    eps_iter = None if opts.eps_iter_scale == 1.0 else (
        float(opts.eps_iter_scale) * float(eps) / int(opts.nb_iter))
    restarts = int(opts.restarts) if name == "madry" else 1
    best, target = None, None
    for _ in range(restarts):
        adv = attacks.run_attack(name, attack_fn, xb, eps, low, high, labels,
                                 ATTACK_NORMS[opts.attack_norm][1], nb_iter=opts.nb_iter, eot_draws=opts.eot_draws,
                                 eps_iter=eps_iter if eps > 0 else None,
                                 seed=rng.integers(0, 2**31 - 1, size=2)).numpy()
        if restarts == 1:
            return adv
        pred = np.argmax(det_fn(tf.constant(adv)).numpy(), axis=-1)
        if best is None:
            best = adv
            target = (labels if labels is not None else
                      np.argmax(det_fn(tf.constant(xb)).numpy(), axis=-1))
            broken = pred != target
            continue
        newly = (pred != target) & ~broken
        best[newly] = adv[newly]
        broken |= newly
    return best


def binomial_ci95(k: int, n: int) -> list:
    """Two-sided 95% Clopper-Pearson interval of a proportion k / n (tfdp.clopper_pearson)."""
    if n <= 0:
        return [0.0, 1.0]
    return list(clopper_pearson.interval(k, n, 0.05))


def proportion(k: int, n: int) -> dict:
    """{"value", "ci95", "n"} of a proportion k / n."""
    return {"value": k / n if n else None, "ci95": binomial_ci95(int(k), int(n)), "n": int(n)}


def size_key(size: float) -> str:
    """The JSON key of an attack size: shortest round-trip repr (0.1 -> "0.1")."""
    return repr(float(size))


def evaluate_arrays(model: Any, x: np.ndarray, y: np.ndarray, *, value_range: Sequence[float],
                    certification: Optional[Mapping[str, Any]], options: EvalOptions,
                    progress: Optional[Callable[[int, int], None]] = None
                    ) -> tuple[dict, list]:
    """Evaluates a model on (x, y): clean and per attack and size.

    Args:
        model: a Keras model mapping inputs in `value_range` to logits.
        x: test inputs, float32 in value_range.
        y: int labels.
        value_range: the data's (low, high).
        certification: the run's certification dict, or None.
        options: EvalOptions (validated here).
        progress: called with (examples done, examples total) after each batch.

    Returns:
        (summary dict as written to evaluation.json, list of per-example record tuples).

    Raises:
        ValueError: on bad options or data, before any work.
    """
    opts = validate_options(options)
    x, y, low, high = _checked_arrays(x, y, value_range, opts)
    c = _certification_plan(certification, opts)
    # Sizes on size_range -> the data's units.
    if opts.size_range is None:
        data_sizes = list(opts.attack_sizes)
    else:
        data_sizes = [attacks.rescale_size(s, opts.size_range, (low, high))
                      for s in opts.attack_sizes]
    fns = _model_fns(model, c, opts)
    predictor = (certify_lib.MonteCarloPredictor(fns.noisy, from_logits=fns.noisy_logits,
                                                 draws_per_step=opts.draws_per_step)
                 if c.do_certify and not fns.exported else None)
    # Seeds of the exported certify signature's noise (a stream apart from the attacks').
    cert_rng = np.random.default_rng(None if opts.seed is None else [int(opts.seed), 1])
    det_fn = tf.function(fns.noise_free, reduce_retracing=True)
    rng = np.random.default_rng(opts.seed)
    num_classes = int(fns.noise_free(tf.constant(x[:1])).shape[-1])
    predict = _Predictions(model, c, fns, predictor, cert_rng, det_fn, num_classes)
    # An l2 certificate evaluated against l_inf attacks (issue 23 item 4): the l_inf ball of
    # radius r lies inside the l2 ball of radius r sqrt(d), so l2 radius / sqrt(d) is a sound
    # l_inf radius. Radii compared with attack sizes (and recorded) are in the attacks' norm;
    # the soundness check keeps the certificate's own l2 radii.
    linf_from_l2 = bool(c.do_certify and c.certificate.norm == "l2"
                        and ATTACK_NORMS[opts.attack_norm][0] == "linf")
    input_dim = int(np.prod(x.shape[1:]))
    scale = 1.0 / math.sqrt(input_dim) if linf_from_l2 else 1.0
    tally = _run_jobs(x, y, opts, fns, det_fn, predict, (low, high), rng, data_sizes, scale,
                      progress)
    if not c.do_certify:
        tally.certified = {job: None for job in tally.certified}
    summary = _summary(tally, c, opts, fns, (low, high), data_sizes, len(x))
    if linf_from_l2:
        summary["radius_conversion"] = (
            f"l_inf radius = l2 radius / sqrt(d), d = {input_dim}: the l_inf ball of radius r "
            f"lies inside the l2 ball of radius r sqrt(d), so the certificate covers it")
    if c.do_certify:
        summary["certified_label"] = c.certificate.label()
        if not c.certificate.sound:
            summary["claimed_note"] = (f"CLAIMED, not certified: "
                                       f"{c.certificate.unsound_reason}")
    if c.do_certify and opts.soundness_check:
        summary["soundness_check"] = _soundness(c, fns, predictor, opts, x, y, tally,
                                                (low, high), num_classes,
                                                summary["clean_accuracy"])
    return summary, tally.records


def _checked_arrays(x: np.ndarray, y: np.ndarray, value_range: Sequence[float],
                    opts: EvalOptions) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(x float32, y int64, low, high), cut to opts.num_examples.

    Raises:
        ValueError: on a bad value_range, arrays of different or zero length, or x outside
            value_range.
    """
    low, high = (float(v) for v in value_range)
    if not low < high:
        raise ValueError(f"value_range must be (low, high) with low < high, got {value_range!r}")
    x = np.asarray(x, np.float32)
    y = np.asarray(y, np.int64).reshape(-1)
    if x.shape[0] != y.shape[0] or x.shape[0] == 0:
        raise ValueError("x and y must hold the same non-zero number of examples")
    if opts.num_examples is not None:
        x, y = x[:opts.num_examples], y[:opts.num_examples]
    if float(x.min()) < low - 1e-6 or float(x.max()) > high + 1e-6:
        raise ValueError(f"x lies outside value_range {value_range!r}")
    return x, y, low, high


@dataclasses.dataclass
class _CertificationPlan:
    """How an evaluation certifies (from the run's certification and the options).

    Attributes:
        certificate: the certificate (a tfdp.certify certificate), or None.
        cert: its checked config, or None.
        do_certify: whether Monte-Carlo certificates are computed.
        key: the accuracy key ("claimed_certified_accuracy" for an unsound certificate).
        num_draws, alpha, bound: the Monte-Carlo settings.
        note: why there is no certified accuracy, or None.
    """

    certificate: Any
    cert: Optional[dict]
    do_certify: bool
    key: str
    num_draws: int
    alpha: float
    bound: str
    note: Optional[str]


def _certification_plan(certification: Optional[Mapping[str, Any]], opts: EvalOptions
                        ) -> _CertificationPlan:
    """The certificate and its Monte-Carlo settings (the options', else the run's).

    Raises:
        ValueError: for an attack norm that is not the certificate's, or a bound the
            certificate does not use.
    """
    certificate = certify_lib.from_config(certification) if certification else None
    cert = certificate.to_config() if certificate is not None else None
    check_certificate_norm(opts, cert)
    do_certify = bool(opts.certify and cert is not None)
    if do_certify and certificate.selection_draws and (opts.bound or "clopper_pearson") != \
            "clopper_pearson":
        raise ValueError(f"bound: {certificate.name} uses clopper_pearson, not {opts.bound!r}")
    # Accuracies behind an unsound certificate are claims, and named so (principle 7).
    key = certificate.accuracy_key() if certificate is not None else "certified_accuracy"
    num_draws = int(opts.num_draws or (cert or {}).get("num_draws") or 1000)
    alpha = float(opts.alpha or (cert or {}).get("alpha") or 0.05)
    bound = opts.bound or (cert or {}).get("bound") or "clopper_pearson"
    if opts.certify and cert is None:
        note = "config.json has no certification: the model has no robustness noise"
    elif not opts.certify:
        note = "certification not requested (--certify)"
    else:
        note = None
    return _CertificationPlan(certificate, cert, do_certify, key, num_draws, alpha, bound, note)


@dataclasses.dataclass
class _ModelFns:
    """The functions an evaluation calls: noise-free and noisy logits (or StoBatch's score),
    and the function the attacks differentiate."""

    exported: bool
    noise_free: Callable
    noisy: Callable
    noisy_logits: bool
    attack_fn: Callable


def _model_fns(model: Any, c: _CertificationPlan, opts: EvalOptions) -> _ModelFns:
    """The model's functions: of a Keras model, or of an exported SavedModel's endpoints.

    Raises:
        ValueError: when an export's certify signature uses another bound than asked.
    """
    exported = _is_exported(model)
    if not exported and opts.seed is not None and hasattr(model, "_flatten_layers"):
        # model.keras carries no layer seed (the training streams stay secret): key the
        # Monte-Carlo noise to the evaluation seed so that --seed reruns are identical.
        layers_lib.set_noise_seeds(model, int(opts.seed))
    if exported:
        # An exported SavedModel (tfdp.export.ExportedModel): attacks use the gradients of its
        # `serve` / `noisy_predict` endpoints, certificates come from its `certify` signature.
        if c.do_certify and c.bound != model.certify_bound:
            raise ValueError(f"bound: the exported certify signature uses "
                             f"{model.certify_bound!r}, not {c.bound!r}")
        noise_free = model.noise_free
        noisy = model.noisy if model.has_noise else noise_free
        noisy_logits = True
    else:
        noise_free, noisy, noisy_logits = model_functions(model, c.cert, seed=opts.seed)
    attack_fn = noisy if (opts.eot_draws > 1 and noisy_logits) else noise_free
    if opts.eot_draws > 1 and not noisy_logits:
        logging.warning("eot_draws: StoBatch's composed score is not a logits function; "
                        "attacking the noise-free network")
    return _ModelFns(exported, noise_free, noisy, noisy_logits, attack_fn)


class _Predictions:
    """A batch's predictions and, when certifying, its radius for each attack size."""

    def __init__(self, model: Any, c: _CertificationPlan, fns: _ModelFns,
                 predictor: Any, cert_rng: np.random.Generator, det_fn: Callable,
                 num_classes: int):
        self.model, self.c, self.fns, self.predictor = model, c, fns, predictor
        self.cert_rng, self.det_fn, self.num_classes = cert_rng, det_fn, num_classes

    def _exported(self, xb: np.ndarray, sizes_for_radius: Sequence[float]):
        c = self.c
        seed = int(self.cert_rng.integers(0, 2**62))
        # Few radii depend on the attack size (StoBatch's "mu_a"); the same seed gives the
        # same draws, so one call serves every size otherwise.
        per_size = c.certificate.radius_depends_on_attack_size
        radii = {}
        for s in (sizes_for_radius if per_size else sizes_for_radius[:1]):
            out = self.model.certify(xb, c.num_draws, c.alpha, s, seed)
            radii[s] = out["radius"] if "radius" in out else out["claimed_radius"]
        pred = out["prediction"]
        return pred, {s: radii[s if per_size else sizes_for_radius[0]]
                      for s in sizes_for_radius}

    def __call__(self, xb: np.ndarray, sizes_for_radius: Sequence[float]):
        """(predictions [b], {attack size: radius [b]} or None when not certifying)."""
        c = self.c
        if c.do_certify and self.fns.exported:
            return self._exported(xb, sizes_for_radius)
        if self.predictor is None:
            pred = np.argmax(self.det_fn(tf.constant(xb)).numpy(), axis=-1)
            return pred, None
        certificate = c.certificate
        selection = (self.predictor(xb, certificate.selection_draws, self.num_classes)
                     if certificate.selection_draws else None)
        result = self.predictor(xb, c.num_draws, self.num_classes)
        pred, lower, upper = certificate.bounds(result, c.bound, c.alpha, selection=selection)
        radii = {s: certificate.radius(lower, upper, attack_size=s) for s in sizes_for_radius}
        return pred, radii


@dataclasses.dataclass
class _Tally:
    """What the jobs found: records, correct and certified counts per (attack, size), and
    the clean certificates (per size; each example's prediction and largest radius)."""

    records: list
    correct: dict
    certified: dict
    clean_cert: dict
    clean_pred: np.ndarray
    clean_radius: np.ndarray


def _run_jobs(x: np.ndarray, y: np.ndarray, opts: EvalOptions, fns: _ModelFns,
              det_fn: Callable, predict: _Predictions, value_range: tuple[float, float],
              rng: np.random.Generator, data_sizes: list, scale: float,
              progress: Optional[Callable[[int, int], None]]) -> _Tally:
    """Runs the clean job and every (attack, size) job over x in batches."""
    low, high = value_range
    n = x.shape[0]
    jobs = [("clean", 0.0, 0.0)] + [(a, s, d) for a in opts.attacks
                                    for s, d in zip(opts.attack_sizes, data_sizes)]
    total = n * len(jobs)
    done = 0
    tally = _Tally([], {}, {}, {size_key(s): 0 for s in opts.attack_sizes},
                   np.zeros(x.shape[0], np.int64), np.zeros(x.shape[0], np.float64))
    for name, size, eps in jobs:
        correct_total = 0
        certified_total = 0
        for start in range(0, n, opts.batch_size):
            xb = x[start:start + opts.batch_size]
            yb = y[start:start + opts.batch_size]
            t0 = time.perf_counter()
            if name != "clean":
                labels = yb if opts.use_true_labels else None
                xb = _attack_batch(name, fns.attack_fn, det_fn, xb, eps, low, high, labels,
                                   opts, rng)
            radius_sizes = [eps] if name != "clean" else (list(data_sizes) or [0.0])
            pred, radii = predict(xb, radius_sizes)
            seconds = (time.perf_counter() - t0) / len(yb)
            correct = pred == yb
            correct_total += int(correct.sum())
            certified_total += _tally_batch(tally, opts, name, size, eps, start, yb, pred,
                                            correct, radii, radius_sizes, data_sizes, scale,
                                            seconds)
            done += len(yb)
            if progress is not None:
                progress(done, total)
        tally.correct[(name, size)] = correct_total
        tally.certified[(name, size)] = certified_total
    return tally


def _tally_batch(tally: _Tally, opts: EvalOptions, name: str, size: float, eps: float,
                 start: int, yb: np.ndarray, pred: np.ndarray, correct: np.ndarray,
                 radii: Optional[dict], radius_sizes: list, data_sizes: list, scale: float,
                 seconds: float) -> int:
    """Adds a batch's records and clean certificates; returns its certified count (attacked
    jobs; 0 for the clean job or without certificates)."""
    certified = 0
    if radii is not None:
        raw_radii = radii
        radii = {k: v * scale for k, v in radii.items()}
        radius = radii[radius_sizes[0]]
        if name == "clean":
            tally.clean_pred[start:start + len(yb)] = pred
            # The largest radius (radii differ per size only in StoBatch's mu_a mode).
            tally.clean_radius[start:start + len(yb)] = np.max(
                np.stack([raw_radii[d] for d in radius_sizes]), axis=0)
            for s, d in zip(opts.attack_sizes, data_sizes):
                tally.clean_cert[size_key(s)] += int(np.sum(
                    correct & certify_lib.is_robust(radii[d], d)))
        else:
            certified = int(np.sum(correct & certify_lib.is_robust(radius, eps)))
    else:
        radius = np.full(len(yb), np.nan)
    for i in range(len(yb)):
        certified_i = (bool(radius[i] >= eps and radius[i] > 0)
                       if radii is not None else None)
        tally.records.append((name, size, start + i, int(yb[i]), int(pred[i]),
                              float(radius[i]), bool(correct[i]), certified_i, seconds))
    return certified


def _summary(tally: _Tally, c: _CertificationPlan, opts: EvalOptions, fns: _ModelFns,
             value_range: tuple[float, float], data_sizes: list, n: int) -> dict:
    """The evaluation.json summary of the jobs' counts (without the certificate's notes)."""
    low, high = value_range
    clean_key = "clean_" + c.key
    summary: dict[str, Any] = {
        "clean_accuracy": tally.correct[("clean", 0.0)] / n,
        "clean_accuracy_ci95": binomial_ci95(tally.correct[("clean", 0.0)], n),
        clean_key: ({k: proportion(v, n) for k, v in tally.clean_cert.items()}
                    if c.do_certify else None),
        "attacks": {},
        "attack_norm": ATTACK_NORMS[opts.attack_norm][0],
        "num_examples": int(n),
        "value_range": [low, high],
        "size_range": list(opts.size_range) if opts.size_range else [low, high],
        "prediction": "monte_carlo" if c.do_certify else "deterministic_noise_free",
        "attack_target": "eot_noisy" if fns.attack_fn is not fns.noise_free else "noise_free",
        "attack_labels": "true" if opts.use_true_labels else "predicted",
        "nb_iter": int(opts.nb_iter),
        "eps_iter_scale": float(opts.eps_iter_scale),
        "restarts": int(opts.restarts),
        "eot_draws": int(opts.eot_draws),
        "certification": c.cert,
        "certified_accuracy_note": c.note,
        "num_draws": c.num_draws if c.do_certify else None,
        "alpha": c.alpha if c.do_certify else None,
        "bound": c.bound if c.do_certify else None,
        "robust_rule": "radius >= attack size, radius > 0",
    }
    # Certified on attacked inputs (the HGM / StoBatch papers' metric): named so.
    attacked_key = c.key + "_on_attacked_inputs"
    for name in opts.attacks:
        entry = {}
        for s, d in zip(opts.attack_sizes, data_sizes):
            k = tally.correct[(name, s)]
            cert = tally.certified[(name, s)]
            entry[size_key(s)] = {"accuracy": k / n, "accuracy_ci95": binomial_ci95(k, n),
                                  "n": int(n),
                                  attacked_key: None if cert is None else cert / n,
                                  attacked_key + "_ci95": (None if cert is None
                                                           else binomial_ci95(cert, n)),
                                  "eps_data": d}
        summary["attacks"][name] = entry
    return summary


def _soundness(c: _CertificationPlan, fns: _ModelFns, predictor: Any, opts: EvalOptions,
               x: np.ndarray, y: np.ndarray, tally: _Tally, value_range: tuple[float, float],
               num_classes: int, clean_accuracy: float) -> dict:
    """The soundness check of the clean certificates (tfdp.soundness)."""
    noisy, noisy_logits = fns.noisy, fns.noisy_logits
    # Fresh Monte-Carlo draws at the attacked points (the flip test needs the counts or
    # mean scores, which an export's certify signature does not return).
    checker = predictor or certify_lib.MonteCarloPredictor(
        noisy, from_logits=noisy_logits, draws_per_step=opts.draws_per_step)
    return soundness.soundness_check(
        c.certificate, x, y, tally.clean_pred, tally.clean_radius,
        noisy=(noisy if noisy_logits else
               (lambda v: tf.math.log(noisy(v) + 1e-12))),  # StoBatch: log of the score
        monte_carlo_fn=lambda xb: checker(xb, c.num_draws, num_classes), bound=c.bound,
        value_range=value_range, alpha=c.alpha, options=opts, num_classes=num_classes,
        chance=1.0 / num_classes, clean_accuracy=clean_accuracy,
        seed=None if opts.seed is None else int(opts.seed) + 2)


def _is_exported(model: Any) -> bool:
    """Whether `model` is an exported SavedModel (tfdp.export.ExportedModel)."""
    return isinstance(model, exported_model.ExportedModel)
