"""Evaluation of a trained run: accuracy clean and under attack, certified accuracy, records.

Definitions (the HGM and StoBatch papers' metrics):

    conventional accuracy = (1/|test|) sum_i isCorrect(x_i)
    certified accuracy    = (1/|test|) sum_i [isCorrect(x_i) and isRobust(x_i)],
    isRobust(x_i)         = radius(x_i) >= mu_a,

with x_i the adversarial version of test example i crafted at size mu_a. Adversarial
examples are crafted against the noise-free network (as in both papers' code releases),
or, with `eot_draws > 1`, against the noisy network with gradients averaged over noise
draws. When certifying, the prediction is the Monte-Carlo prediction of the noisy network
(argmax of the counts for Clopper-Pearson, of the mean softmax otherwise); otherwise it is
one forward pass of the noise-free network. A run whose `config.json` has
`"certification": null` gets `certified_accuracy: null` and a note saying why.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging

import attacks
from tfdp import certify as certify_lib
from tfdp import checks, clopper_pearson, export, run_model, rundir
from tfdp import kernels
import layers as layers_lib
from tfdp import soundness
import json
from tfdp.train import report
from tfdp import data as data_lib

PLOT_FILE = "accuracy_vs_attack_size.png"
# Test examples a --certify evaluation of a run directory uses when --num_examples is unset:
# the run's own num_test (config.json), at most this many (a Monte-Carlo certificate per
# example and per attack; 1,000 examples give a binomial standard error <= 1.6 points).
DEFAULT_CERTIFY_EXAMPLES = 1000
TSV_COLUMNS = ("attack", "attack_size", "index", "label", "prediction", "radius", "correct",
               "certified", "seconds")


@dataclasses.dataclass
class EvalOptions:
    """What to evaluate.

    Attributes:
        attacks: attack names (from attacks.ATTACKS).
        attack_sizes: sizes mu_a >= 0, measured on `size_range`.
        size_range: the (low, high) range the sizes refer to; None = the data's own range
            (e.g. (0, 1) to give sizes on [0, 1] for a model trained on [-1, 1]: a size
            0.1 on [0, 1] becomes 0.2 on [-1, 1]).
        nb_iter: iterations of the iterative attacks (T_a).
        eot_draws: > 1 attacks the noisy model, averaging gradients over that many draws.
        use_true_labels: craft against the true labels instead of the model's predictions.
        certify: Monte-Carlo prediction and certificates (needs a certification config).
        num_draws: Monte-Carlo draws n per input; None = the run's or 1000.
        alpha: failure probability of the confidence bounds (eta = 1 - alpha); None = the
            run's or 0.05.
        bound: confidence bound, one of certify.BOUNDS; None = the run's or Clopper-Pearson.
        num_examples: evaluate the first N test examples (None = all; with `certify`,
            `evaluate_run` uses the run's num_test, at most DEFAULT_CERTIFY_EXAMPLES).
        batch_size: examples per attack / prediction batch.
        draws_per_step: Monte-Carlo draws per forward pass.
        seed: seed of the random starts of the Madry attack; None = OS entropy.
        data_dir: where the data lives (None = the run's data_dir, then defaults).
        eps_iter_scale: step of the iterative attacks in units of mu_a / T_a (1 = the
            authors' code; the "strong" preset uses 2.5).
        restarts: random restarts of the Madry (PGD) attack; an example counts as broken if
            any restart breaks the noise-free network.
        noise_kernel: how the noise layers draw: "auto" (fused wherever it builds, else
            portable), "portable" or "fused"; run directories only (an export's graph is
            fixed when it is written). validate_options resolves "auto".
        noise_kernel_fallback: why "auto" fell back to portable (set by validate_options).
        attack_norm: "inf" (l_inf attacks and sizes) or "2" (l2); must match the norm of
            the certificate when certifying.
        soundness_check: attack every clean-certified example at its certified radius
            (EOT, the certificate's norm) and test whether its smoothed prediction changed
            (tfdp.soundness).
        soundness_nb_iter: PGD steps of the soundness attack.
        soundness_eot_draws: noise draws averaged per gradient of the soundness attack.
        soundness_restarts: random starts in the ball, besides the start at x.
        soundness_targeted: also attack towards the runner-up class.
        soundness_power_factor: also attack at this multiple of each radius and report the
            flips there as the check's power (0: skip).
    """

    attacks: Sequence[str] = ("fgsm", "ifgsm", "mim", "madry")
    attack_sizes: Sequence[float] = (0.1, 0.2)
    size_range: Optional[Sequence[float]] = None
    nb_iter: int = 10
    eot_draws: int = 1
    use_true_labels: bool = False
    certify: bool = False
    num_draws: Optional[int] = None
    alpha: Optional[float] = None
    bound: Optional[str] = None
    num_examples: Optional[int] = None
    batch_size: int = 100
    draws_per_step: int = 256
    seed: Optional[int] = None
    data_dir: Optional[str] = None
    eps_iter_scale: float = 1.0
    restarts: int = 1
    noise_kernel: str = "auto"
    noise_kernel_fallback: Optional[str] = None
    attack_norm: str = "inf"
    soundness_check: bool = False
    soundness_nb_iter: int = 50
    soundness_eot_draws: int = 32
    soundness_restarts: int = 1
    soundness_targeted: bool = True
    soundness_power_factor: float = 2.0


# Attack presets (issue 13 item 5): the papers' setting (step mu/T, as the authors' code) and
# a stronger PGD (step 2.5 mu/T, 5x the iterations, 5 random restarts).
ATTACK_PRESETS = {
    "paper": {"eps_iter_scale": 1.0, "nb_iter_factor": 1, "restarts": 1},
    "strong": {"eps_iter_scale": 2.5, "nb_iter_factor": 5, "restarts": 5},
}


def apply_attack_preset(options: EvalOptions, preset: str) -> EvalOptions:
    """The options with an attack preset applied ("paper" or "strong").

    Raises:
        ValueError: for an unknown preset.
    """
    if preset not in ATTACK_PRESETS:
        raise ValueError(f"attack_preset: unknown preset {preset!r}; choose from "
                         f"{sorted(ATTACK_PRESETS)}")
    p = ATTACK_PRESETS[preset]
    return dataclasses.replace(options, eps_iter_scale=p["eps_iter_scale"],
                               nb_iter=int(options.nb_iter) * p["nb_iter_factor"],
                               restarts=p["restarts"])


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


def validate_options(options: EvalOptions) -> EvalOptions:
    """Checks every option; returns a copy with names and sizes normalised.

    Raises:
        ValueError: naming the offending option.
    """
    names = [str(a).strip().lower() for a in options.attacks if str(a).strip()]
    for name in names:
        if name not in attacks.ATTACKS:
            raise ValueError(f"attacks: unknown attack {name!r}; choose from {attacks.ATTACKS}")
    if len(set(names)) != len(names):
        raise ValueError(f"attacks: duplicate names in {names!r}")
    sizes = []
    for s in options.attack_sizes:
        try:
            v = float(s)
        except (TypeError, ValueError):
            raise ValueError(f"attack_sizes: {s!r} is not a number") from None
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"attack_sizes: every size must be a finite number >= 0, got {s!r}")
        sizes.append(v)
    if names and not sizes:
        raise ValueError("attack_sizes: give at least one size when attacks are requested")
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"attack_sizes: duplicate sizes in {sizes!r}")
    size_range = options.size_range
    if size_range is not None:
        size_range = tuple(float(v) for v in size_range)
        if len(size_range) != 2 or not size_range[0] < size_range[1]:
            raise ValueError(f"size_range must be (low, high) with low < high, got "
                             f"{options.size_range!r}")
    if int(options.nb_iter) < 1:
        raise ValueError(f"nb_iter must be >= 1, got {options.nb_iter!r}")
    if int(options.eot_draws) < 1:
        raise ValueError(f"eot_draws must be >= 1, got {options.eot_draws!r}")
    if options.num_draws is not None:
        checks.check_positive_int(options.num_draws, "num_draws", allow_integral_float=True)
    if options.alpha is not None:
        checks.check_unit_interval(options.alpha, "alpha")
    if options.bound is not None:
        checks.check_choice(options.bound, "bound", certify_lib.BOUNDS)
    if options.num_examples is not None and int(options.num_examples) < 1:
        raise ValueError(f"num_examples must be >= 1, got {options.num_examples!r}")
    if int(options.batch_size) < 1:
        raise ValueError(f"batch_size must be >= 1, got {options.batch_size!r}")
    if int(options.draws_per_step) < 1:
        raise ValueError(f"draws_per_step must be >= 1, got {options.draws_per_step!r}")
    if not (math.isfinite(float(options.eps_iter_scale)) and float(options.eps_iter_scale) > 0):
        raise ValueError(f"eps_iter_scale must be > 0, got {options.eps_iter_scale!r}")
    if int(options.restarts) < 1:
        raise ValueError(f"restarts must be >= 1, got {options.restarts!r}")
    attack_norm = str(options.attack_norm).strip().lower()
    if attack_norm not in ATTACK_NORMS:
        raise ValueError(f"attack_norm: expected one of {sorted(ATTACK_NORMS)}, got "
                         f"{options.attack_norm!r}")
    if options.soundness_check and not options.certify:
        raise ValueError("soundness_check: needs --certify (it attacks the certified examples)")
    if int(options.soundness_nb_iter) < 1:
        raise ValueError(f"soundness_nb_iter must be >= 1, got {options.soundness_nb_iter!r}")
    if int(options.soundness_eot_draws) < 1:
        raise ValueError(f"soundness_eot_draws must be >= 1, got "
                         f"{options.soundness_eot_draws!r}")
    if int(options.soundness_restarts) < 0:
        raise ValueError(f"soundness_restarts must be >= 0, got {options.soundness_restarts!r}")
    factor = float(options.soundness_power_factor)
    if not (math.isfinite(factor) and (factor == 0.0 or factor > 1.0)):
        raise ValueError(f"soundness_power_factor must be 0 (off) or > 1, got "
                         f"{options.soundness_power_factor!r}")

    kernel, fallback = kernels.resolve_noise_kernel(options.noise_kernel, "noise_kernel")
    if fallback:
        logging.info("%s", fallback)
    elif kernel == options.noise_kernel:
        # Validated again (the app validates, then evaluate_run): "auto" was resolved the
        # first time, and why it fell back stays with the options (evaluation.json).
        fallback = options.noise_kernel_fallback
    return dataclasses.replace(options, attacks=tuple(names), attack_sizes=tuple(sizes),
                               noise_kernel=kernel, noise_kernel_fallback=fallback,
                               size_range=size_range, attack_norm=attack_norm)


# --attack_norm -> the certificate norm it matches and the attacks' norm argument.
ATTACK_NORMS = {"inf": ("linf", np.inf), "2": ("l2", 2)}


def check_certificate_norm(options: EvalOptions, certification: Any) -> None:
    """A certifying evaluation attacks in the certificate's own norm (principle 7).

    Raises:
        ValueError: naming --attack_norm when the norms differ.
    """
    if not (options.certify and certification):
        return
    cert = certify_lib.from_config(certification)
    want = ATTACK_NORMS[str(options.attack_norm).strip().lower()][0]
    if cert.norm == "l2" and want == "linf":
        return  # derived soundly: an l_inf ball of radius r lies in the l2 ball r sqrt(d)
    if cert.norm != want:
        flag = "2" if cert.norm == "l2" else "inf"
        raise ValueError(f"attack_norm: the {cert.name} certificate is {cert.norm}; "
                         f"certified accuracy is reported only in its norm "
                         f"(use --attack_norm={flag})")


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


# A run's model and its noise-free / noisy / score functions live in tfdp.run_model, below
# this module and tfdp.export (both use them); the names stay importable from here.
load_run = run_model.load_run
model_functions = run_model.model_functions


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

    certificate = certify_lib.from_config(certification) if certification else None
    cert = certificate.to_config() if certificate is not None else None
    check_certificate_norm(opts, cert)
    do_certify = bool(opts.certify and cert is not None)
    if do_certify and certificate.selection_draws and (opts.bound or "clopper_pearson") != \
            "clopper_pearson":
        raise ValueError(f"bound: {certificate.name} uses clopper_pearson, not {opts.bound!r}")
    # Accuracies behind an unsound certificate are claims, and named so (principle 7).
    cert_key = certificate.accuracy_key() if certificate is not None else "certified_accuracy"
    num_draws = int(opts.num_draws or (cert or {}).get("num_draws") or 1000)
    alpha = float(opts.alpha or (cert or {}).get("alpha") or 0.05)
    bound = opts.bound or (cert or {}).get("bound") or "clopper_pearson"
    if opts.certify and cert is None:
        note = "config.json has no certification: the model has no robustness noise"
    elif not opts.certify:
        note = "certification not requested (--certify)"
    else:
        note = None
    # Sizes on size_range -> the data's units.
    if opts.size_range is None:
        data_sizes = list(opts.attack_sizes)
    else:
        data_sizes = [attacks.rescale_size(s, opts.size_range, (low, high))
                      for s in opts.attack_sizes]

    exported = _is_exported(model)
    if not exported and opts.seed is not None and hasattr(model, "_flatten_layers"):
        # model.keras carries no layer seed (the training streams stay secret): key the
        # Monte-Carlo noise to the evaluation seed so that --seed reruns are identical.
        layers_lib.set_noise_seeds(model, int(opts.seed))
    if exported:
        # An exported SavedModel (tfdp.export.ExportedModel): attacks use the gradients of its
        # `serve` / `noisy_predict` endpoints, certificates come from its `certify` signature.
        if do_certify and bound != model.certify_bound:
            raise ValueError(f"bound: the exported certify signature uses "
                             f"{model.certify_bound!r}, not {bound!r}")
        noise_free = model.noise_free
        noisy = model.noisy if model.has_noise else noise_free
        noisy_logits = True
    else:
        noise_free, noisy, noisy_logits = model_functions(model, cert)
    attack_fn = noisy if (opts.eot_draws > 1 and noisy_logits) else noise_free
    if opts.eot_draws > 1 and not noisy_logits:
        logging.warning("eot_draws: StoBatch's composed score is not a logits function; "
                        "attacking the noise-free network")
    predictor = (certify_lib.MonteCarloPredictor(noisy, from_logits=noisy_logits,
                                                 draws_per_step=opts.draws_per_step)
                 if do_certify and not exported else None)
    # Seeds of the exported certify signature's noise (a stream apart from the attacks').
    cert_rng = np.random.default_rng(None if opts.seed is None else [int(opts.seed), 1])
    det_fn = tf.function(noise_free, reduce_retracing=True)
    rng = np.random.default_rng(opts.seed)
    num_classes = int(noise_free(tf.constant(x[:1])).shape[-1])

    def predict_exported(xb: np.ndarray, sizes_for_radius: Sequence[float]):
        seed = int(cert_rng.integers(0, 2**62))
        # Few radii depend on the attack size (StoBatch's "mu_a"); the same seed gives the
        # same draws, so one call serves every size otherwise.
        per_size = certificate.radius_depends_on_attack_size
        radii = {}
        for s in (sizes_for_radius if per_size else sizes_for_radius[:1]):
            out = model.certify(xb, num_draws, alpha, s, seed)
            radii[s] = out["radius"] if "radius" in out else out["claimed_radius"]
        pred = out["prediction"]
        return pred, {s: radii[s if per_size else sizes_for_radius[0]]
                      for s in sizes_for_radius}

    def predict(xb: np.ndarray, sizes_for_radius: Sequence[float]):
        if do_certify and exported:
            return predict_exported(xb, sizes_for_radius)
        if predictor is None:
            pred = np.argmax(det_fn(tf.constant(xb)).numpy(), axis=-1)
            return pred, None
        selection = (predictor(xb, certificate.selection_draws, num_classes)
                     if certificate.selection_draws else None)
        result = predictor(xb, num_draws, num_classes)
        pred, lower, upper = certificate.bounds(result, bound, alpha, selection=selection)
        radii = {s: certificate.radius(lower, upper, attack_size=s) for s in sizes_for_radius}
        return pred, radii

    # An l2 certificate evaluated against l_inf attacks (issue 23 item 4): the l_inf ball of
    # radius r lies inside the l2 ball of radius r sqrt(d), so l2 radius / sqrt(d) is a sound
    # l_inf radius. Radii compared with attack sizes (and recorded) are in the attacks' norm;
    # the soundness check keeps the certificate's own l2 radii.
    linf_from_l2 = bool(do_certify and certificate.norm == "l2"
                        and ATTACK_NORMS[opts.attack_norm][0] == "linf")
    input_dim = int(np.prod(x.shape[1:]))
    scale = 1.0 / math.sqrt(input_dim) if linf_from_l2 else 1.0
    n = x.shape[0]
    jobs = [("clean", 0.0, 0.0)] + [(a, s, d) for a in opts.attacks
                                    for s, d in zip(opts.attack_sizes, data_sizes)]
    total = n * len(jobs)
    done = 0
    records = []
    correct_by_job = {}
    certified_by_job = {}
    clean_cert = {size_key(s): 0 for s in opts.attack_sizes}
    clean_pred = np.zeros(x.shape[0], np.int64)
    clean_radius = np.zeros(x.shape[0], np.float64)
    for name, size, eps in jobs:
        correct_total = 0
        certified_total = 0
        for start in range(0, n, opts.batch_size):
            xb = x[start:start + opts.batch_size]
            yb = y[start:start + opts.batch_size]
            t0 = time.perf_counter()
            if name != "clean":
                labels = yb if opts.use_true_labels else None
                xb = _attack_batch(name, attack_fn, det_fn, xb, eps, low, high, labels, opts,
                                   rng)
            radius_sizes = [eps] if name != "clean" else (list(data_sizes) or [0.0])
            pred, radii = predict(xb, radius_sizes)
            seconds = (time.perf_counter() - t0) / len(yb)
            correct = pred == yb
            correct_total += int(correct.sum())
            if radii is not None:
                raw_radii = radii
                radii = {k: v * scale for k, v in radii.items()}
                radius = radii[radius_sizes[0]]
                if name == "clean":
                    clean_pred[start:start + len(yb)] = pred
                    # The largest radius (radii differ per size only in StoBatch's mu_a mode).
                    clean_radius[start:start + len(yb)] = np.max(
                        np.stack([raw_radii[d] for d in radius_sizes]), axis=0)
                    for s, d in zip(opts.attack_sizes, data_sizes):
                        clean_cert[size_key(s)] += int(np.sum(
                            correct & certify_lib.is_robust(radii[d], d)))
                else:
                    certified_total += int(np.sum(correct & certify_lib.is_robust(radius, eps)))
            else:
                radius = np.full(len(yb), np.nan)
            for i in range(len(yb)):
                certified_i = (bool(radius[i] >= eps and radius[i] > 0)
                               if radii is not None else None)
                records.append((name, size, start + i, int(yb[i]), int(pred[i]),
                                float(radius[i]), bool(correct[i]), certified_i, seconds))
            done += len(yb)
            if progress is not None:
                progress(done, total)
        correct_by_job[(name, size)] = correct_total
        certified_by_job[(name, size)] = certified_total if do_certify else None

    clean_key = "clean_" + cert_key
    summary: dict[str, Any] = {
        "clean_accuracy": correct_by_job[("clean", 0.0)] / n,
        "clean_accuracy_ci95": binomial_ci95(correct_by_job[("clean", 0.0)], n),
        clean_key: ({k: proportion(v, n) for k, v in clean_cert.items()}
                    if do_certify else None),
        "attacks": {},
        "attack_norm": ATTACK_NORMS[opts.attack_norm][0],
        "num_examples": int(n),
        "value_range": [low, high],
        "size_range": list(opts.size_range) if opts.size_range else [low, high],
        "prediction": "monte_carlo" if do_certify else "deterministic_noise_free",
        "attack_target": "eot_noisy" if attack_fn is not noise_free else "noise_free",
        "attack_labels": "true" if opts.use_true_labels else "predicted",
        "nb_iter": int(opts.nb_iter),
        "eps_iter_scale": float(opts.eps_iter_scale),
        "restarts": int(opts.restarts),
        "eot_draws": int(opts.eot_draws),
        "certification": cert,
        "certified_accuracy_note": note,
        "num_draws": num_draws if do_certify else None,
        "alpha": alpha if do_certify else None,
        "bound": bound if do_certify else None,
        "robust_rule": "radius >= attack size, radius > 0",
    }
    if linf_from_l2:
        summary["radius_conversion"] = (
            f"l_inf radius = l2 radius / sqrt(d), d = {input_dim}: the l_inf ball of radius r "
            f"lies inside the l2 ball of radius r sqrt(d), so the certificate covers it")
    if do_certify:
        summary["certified_label"] = certificate.label()
        if not certificate.sound:
            summary["claimed_note"] = (f"CLAIMED, not certified: {certificate.unsound_reason}")
    # Certified on attacked inputs (the HGM / StoBatch papers' metric): named so.
    attacked_key = cert_key + "_on_attacked_inputs"
    for name in opts.attacks:
        entry = {}
        for s, d in zip(opts.attack_sizes, data_sizes):
            k = correct_by_job[(name, s)]
            c = certified_by_job[(name, s)]
            entry[size_key(s)] = {"accuracy": k / n, "accuracy_ci95": binomial_ci95(k, n),
                                  "n": int(n),
                                  attacked_key: None if c is None else c / n,
                                  attacked_key + "_ci95": (None if c is None
                                                           else binomial_ci95(c, n)),
                                  "eps_data": d}
        summary["attacks"][name] = entry
    if do_certify and opts.soundness_check:
        # Fresh Monte-Carlo draws at the attacked points (the flip test needs the counts or
        # mean scores, which an export's certify signature does not return).
        checker = predictor or certify_lib.MonteCarloPredictor(
            noisy, from_logits=noisy_logits, draws_per_step=opts.draws_per_step)
        summary["soundness_check"] = soundness.soundness_check(
            certificate, x, y, clean_pred, clean_radius,
            noisy=(noisy if noisy_logits else
                   (lambda v: tf.math.log(noisy(v) + 1e-12))),  # StoBatch: log of the score
            monte_carlo_fn=lambda xb: checker(xb, num_draws, num_classes), bound=bound,
            value_range=(low, high), alpha=alpha, options=opts, num_classes=num_classes,
            chance=1.0 / num_classes, clean_accuracy=summary["clean_accuracy"],
            seed=None if opts.seed is None else int(opts.seed) + 2)
    return summary, records


def _is_exported(model: Any) -> bool:
    """Whether `model` is an exported SavedModel (tfdp.export.ExportedModel)."""
    return isinstance(model, export.ExportedModel)


def certified_key(summary: Mapping[str, Any]) -> str:
    """"certified_accuracy", or "claimed_certified_accuracy" for an unsound certificate."""
    cert = summary.get("certification") or {}
    return "certified_accuracy" if cert.get("sound", False) or not cert else \
        "claimed_certified_accuracy"


def _ci(res: Mapping[str, Any], key: str = "ci95") -> str:
    lo, hi = res.get(key) or (float("nan"), float("nan"))
    return f"95% CI {lo:.3f}-{hi:.3f}"


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """Console lines of an evaluation summary; unsound certificates' numbers say CLAIMED.

    The headline is the clean certified accuracy per radius (the standard metric), with the
    accuracy under attack beside it; every accuracy has its N and 95% CI.
    """
    key = certified_key(summary)
    label = "certified" if key == "certified_accuracy" else "CLAIMED certified"
    n = summary["num_examples"]
    norm = {"l2": "l2", "linf": "l_inf"}.get(summary.get("attack_norm", "linf"), "l_inf")
    lines = [f"clean accuracy {summary['clean_accuracy']:.4f} "
             f"({_ci(summary, 'clean_accuracy_ci95')}, N={n}, {summary.get('prediction')})"]
    cert = summary.get("certification") or {}
    if summary.get("num_draws") and cert:
        params = ", ".join(f"{k}={cert[k]}" for k in ("sigma", "lipschitz", "selection_draws",
                                                      "epsilon", "delta",
                                                      "construction_bound",
                                                      "sensitivity_mode") if k in cert)
        lines.append(f"certificate {cert.get('name')} ({cert.get('norm')}, "
                     f"{'sound' if cert.get('sound') else 'NOT sound: numbers are claims'}; "
                     f"{params}), n={summary.get('num_draws')} draws, alpha="
                     f"{summary.get('alpha')}, {summary.get('bound')}")
    for size, res in sorted((summary.get("clean_" + key) or {}).items(),
                            key=lambda kv: float(kv[0])):
        lines.append(f"clean {label} accuracy at {norm} radius {size}: {res['value']:.4f} "
                     f"({_ci(res)}, N={res['n']})")
    for name, entry in summary["attacks"].items():
        for size, res in sorted(entry.items(), key=lambda kv: float(kv[0])):
            on_attacked = res.get(key + "_on_attacked_inputs")
            extra = ("" if on_attacked is None else
                     f"; {label} on attacked inputs {on_attacked:.4f}")
            lines.append(f"{name} ({norm}) at {size}: accuracy {res['accuracy']:.4f} "
                         f"({_ci(res, 'accuracy_ci95')}, N={res.get('n', n)}){extra}")
    if summary.get("radius_conversion"):
        lines.append("radii in l_inf from the l2 certificate: " + summary["radius_conversion"])
    if summary.get("claimed_note"):
        lines.append(summary["claimed_note"])
    check = summary.get("soundness_check")
    if check:
        verdict = ("passed" if check["passed"] else
                   "inconclusive" if not check["conclusive"] else "FAILED")
        lines.append(f"soundness check ({verdict}): {check['flipped']} of "
                     f"{check['certified']} certified examples flipped under {check['attack']}"
                     f"; p-value {check['p_value']:.3g} (flips ~ Binomial(certified, "
                     f"{check['null_rate']:g}) if sound); {check['note']}")
        power = check.get("power")
        if power:
            lines.append(f"soundness check power: {power['flipped']} of {power['of']} flipped "
                         f"at {power['radius_factor']:g} r (the same attacks beyond the "
                         "certified radius)")
    return lines


def write_certificates(path: str, records: Sequence[tuple], claimed: bool = False) -> str:
    """Writes the per-example records as a TSV (header TSV_COLUMNS); returns the path.

    With `claimed` (an unsound certificate) the radius and certified columns are named
    claimed_radius and claimed_certified.
    """
    columns = [("claimed_" + c if claimed and c in ("radius", "certified") else c)
               for c in TSV_COLUMNS]
    lines = ["\t".join(columns)]
    for name, size, index, label, pred, radius, correct, certified, seconds in records:
        lines.append("\t".join([
            name, repr(float(size)), str(index), str(label), str(pred),
            "nan" if math.isnan(radius) else f"{radius:.6g}", str(int(correct)),
            "" if certified is None else str(int(certified)), f"{seconds:.6f}"]))
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, ".tmp-" + os.path.basename(path))
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return path


def _plot_title(path: str, summary: Mapping[str, Any], n: Optional[int]) -> str:
    """Method, data, sound epsilon (the run's ledger.json), N and the certificates' soundness."""
    parts = [f"{summary.get('method', '?')} on {summary.get('dataset', '?')}"]
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(path)), "ledger.json"),
                  encoding="utf-8") as f:
            eps = json.load(f).get("epsilon")
        parts.append(f"sound eps {report.round_up(eps)}")
    except (OSError, ValueError):
        pass
    if n:
        parts.append(f"N = {n}")
    cert = summary.get("certification")
    if isinstance(cert, Mapping):
        sound = cert.get("sound", cert.get("sensitivity_sound", False))
        parts.append("certificates sound" if sound else "certificates CLAIMED (not sound)")
    return ", ".join(parts)


def plot_accuracy(path: str, summary: Mapping[str, Any]) -> str:
    """PNG of accuracy (solid) and certified accuracy (dashed) against attack size.

    The x axis is the attack size as a fraction of the pixel range (comparable across
    methods whatever their value range); the bands are 95% Clopper-Pearson intervals over the
    N evaluated examples; the title names the method, data, sound epsilon, N and whether the
    certificates are sound.
    """
    # lazy: matplotlib only when a figure is drawn
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    # lazy: matplotlib only when a figure is drawn
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    n = summary.get("num_examples")
    n = n if isinstance(n, int) and n > 0 else None
    lo, hi = (float(v) for v in summary["size_range"])

    def band(ax, xs, ys, color):
        if n is None:
            return
        bounds = [clopper_pearson.interval(int(round(y * n)), n, 1.0 - 0.95) for y in ys]
        ax.fill_between(xs, [b[0] for b in bounds], [b[1] for b in bounds], color=color,
                        alpha=0.15, linewidth=0)

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for i, (name, entry) in enumerate(sorted(summary["attacks"].items())):
        sizes = sorted(entry, key=float)
        xs = [0.0] + [float(s) / (hi - lo) for s in sizes]
        ys = [summary["clean_accuracy"]] + [entry[s]["accuracy"] for s in sizes]
        color = f"C{i}"
        ax.plot(xs, ys, "o-", color=color, label=f"{name}")
        band(ax, xs, ys, color)
        key = certified_key(summary)
        cert = [entry[s].get(key + "_on_attacked_inputs") for s in sizes]
        if all(c is not None for c in cert) and cert:
            label = "certified" if key == "certified_accuracy" else "CLAIMED certified"
            cx = [float(s) / (hi - lo) for s in sizes]
            ax.plot(cx, cert, "s--", color=color, label=f"{name} ({label}, attacked inputs)")
            band(ax, cx, cert, color)
    clean = summary.get("clean_" + certified_key(summary)) or {}
    if clean:
        sizes = sorted(clean, key=float)
        label = ("certified" if certified_key(summary) == "certified_accuracy"
                 else "CLAIMED certified")
        cx = [float(s) / (hi - lo) for s in sizes]
        cy = [clean[s]["value"] for s in sizes]
        ax.plot(cx, cy, "k^:", label=f"clean {label} accuracy")
        band(ax, cx, cy, "k")
    norm = {"l2": "l2", "linf": "l_inf"}.get(summary.get("attack_norm", "linf"), "l_inf")
    ax.set_xlabel(f"attack size / radius ({norm}, as a fraction of the pixel range)")
    ax.set_ylabel("accuracy" + (" (95% CI bands)" if n else ""))
    ax.set_ylim(0.0, 1.02)
    ax.set_title(_plot_title(path, summary, n), fontsize=9)
    ax.grid(alpha=0.3)
    if summary["attacks"]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def default_num_examples(options: EvalOptions, config: Mapping[str, Any]
                         ) -> tuple[Optional[int], str]:
    """The number of test examples an evaluation of a run uses, and where it comes from.

    --num_examples when given; else, with --certify (a Monte-Carlo certificate per example
    and per attack, minutes per hundred examples on a CPU), the run's own num_test from
    config.json, at most DEFAULT_CERTIFY_EXAMPLES; else every test example.
    """
    if options.num_examples is not None:
        return int(options.num_examples), "--num_examples"
    if not options.certify:
        return None, "all test examples"
    num_test = config.get("num_test")
    if isinstance(num_test, int) and 0 < num_test <= DEFAULT_CERTIFY_EXAMPLES:
        return num_test, f"the run's --num_test={num_test}"
    return DEFAULT_CERTIFY_EXAMPLES, (f"--certify's default cap of {DEFAULT_CERTIFY_EXAMPLES}"
                                      + (f" (the run used {num_test})"
                                         if isinstance(num_test, int) else ""))


def work_plan(n: int, options: EvalOptions, certification: Optional[Mapping[str, Any]],
              source: str) -> str:
    """One line naming the planned work: examples, attack jobs, Monte-Carlo draws, flags."""
    jobs = 1 + len(options.attacks) * len(options.attack_sizes)
    certify = bool(options.certify and certification)
    draws = int(options.num_draws or (certification or {}).get("num_draws") or 1000)
    what = (f"{n} test examples ({source}) x {jobs} jobs (clean"
            + (f" + {len(options.attacks)} attacks x {len(options.attack_sizes)} sizes"
               if jobs > 1 else "") + ")")
    if certify:
        what += f", {draws} Monte-Carlo draws each"
    return (f"evaluating {what}; --num_examples=N sets the number of examples"
            + (", --num_draws the draws, --attacks/--attack_sizes the jobs" if certify else ""))


def evaluate_run(model_dir: str, options: EvalOptions,
                 say: Optional[Callable[[str], None]] = None) -> dict:
    """Evaluates a run directory; writes evaluation.json, certificates.tsv and a PNG.

    Before any work, `say` gets the planned work (`work_plan`); then a progress line with
    the rate and the ETA after the first batch and at least every 30 s.

    Args:
        model_dir: a run directory left by tfdp-train (model.keras + config.json).
        options: what to evaluate; with `certify` and no `num_examples`, the run's num_test
            examples (at most DEFAULT_CERTIFY_EXAMPLES) are evaluated.
        say: where the plan and progress lines go (default: absl logging.info).

    Returns:
        the summary written to evaluation.json.

    Raises:
        ValueError: on bad options or an incomplete run directory, before any work.
    """
    opts = validate_options(options)
    model, config = load_run(model_dir)
    check_certificate_norm(opts, config.get("certification"))
    rd = rundir.RunDir(model_dir)
    value_range = tuple(config.get("value_range") or (-1.0, 1.0))
    load_kwargs = dict(config.get("data_options") or {})  # e.g. Tiny ImageNet's num_classes
    num_examples, source = default_num_examples(opts, config)
    if num_examples is not None:
        load_kwargs["num_examples"] = num_examples
        opts = dataclasses.replace(opts, num_examples=num_examples)
    x, y = data_lib.load(config["dataset"], "test",
                         data_dir=opts.data_dir or config.get("data_dir"),
                         value_range=value_range, **load_kwargs)
    say = say or (lambda text: logging.info("%s", text))
    say(work_plan(len(x), opts, config.get("certification"), source))
    start = time.perf_counter()
    last = [None]

    def progress(done: int, total: int) -> None:
        now = time.perf_counter()
        if last[0] is None or now - last[0] >= 30.0 or done == total:
            last[0] = now
            rate = done / max(now - start, 1e-9)
            eta = (total - done) / max(rate, 1e-9)
            say(f"evaluated {done}/{total} example-jobs ({rate:.2f}/s, ETA "
                f"{report.seconds_text(eta)}; attacked jobs run slower than the clean one)")


    with kernels.noise_kernel_flag(opts.noise_kernel, flag="noise_kernel"):
        summary, records = evaluate_arrays(model, x, y, value_range=value_range,
                                           certification=config.get("certification"),
                                           options=opts, progress=progress)
    summary["num_examples_source"] = source
    summary["noise_kernel"] = opts.noise_kernel
    if opts.noise_kernel_fallback:
        summary["noise_kernel_fallback"] = opts.noise_kernel_fallback
    summary["model_dir"] = rd.path
    summary["method"] = config.get("method")
    summary["dataset"] = config.get("dataset")
    summary["seconds"] = time.perf_counter() - start
    write_certificates(rd.file(rundir.CERTIFICATES_FILE), records,
                       claimed=certified_key(summary) != "certified_accuracy")
    summary["plot"] = PLOT_FILE
    plot_accuracy(rd.file(PLOT_FILE), summary)
    rd.write_json(rundir.EVALUATION_FILE, summary)
    return summary


def evaluate_saved_model(saved_model: str, options: EvalOptions,
                         output_dir: Optional[str] = None) -> dict:
    """Evaluates a SavedModel written by tfdp-export, e.g. one received from someone else.

    The data set and value range come from the export's model card. Attacks differentiate
    through the exported `serve` endpoint (or `noisy_predict` with `eot_draws > 1`);
    certification calls the exported `certify` signature, whose bound is fixed at export.

    Args:
        saved_model: the export directory.
        options: what to evaluate.
        output_dir: where evaluation.json, certificates.tsv and the plot go (default:
            SAVED_MODEL-evaluation beside the export; the export itself is never written).

    Returns:
        the summary written to evaluation.json.

    Raises:
        ValueError: on bad options, a directory without an export, or data that does not
            fit the export's input shape; before any work.
    """
    opts = validate_options(options)
    model = export.ExportedModel(saved_model)
    check_certificate_norm(opts, model.certification)
    card = model.card
    data_card = card.get("data") or {}
    if not data_card.get("dataset"):
        raise ValueError(f"saved_model: the model card of {model.path} names no dataset")
    value_range = tuple(data_card.get("value_range") or (-1.0, 1.0))
    out_path = os.path.abspath(output_dir) if output_dir else model.path + "-evaluation"
    if os.path.commonpath([out_path, model.path]) == model.path:
        raise ValueError("model_dir: the evaluation output must not go inside the export")
    load_kwargs = {}
    if opts.num_examples is not None:
        load_kwargs["num_examples"] = int(opts.num_examples)
    x, y = data_lib.load(data_card["dataset"], "test", data_dir=opts.data_dir,
                         value_range=value_range, **load_kwargs)
    want_shape = list(data_card.get("input_shape") or [])
    if want_shape and list(x.shape[1:]) != [int(d) for d in want_shape]:
        raise ValueError(f"data_dir: test examples of shape {list(x.shape[1:])} do not fit "
                         f"the export's input shape {want_shape}")
    start = time.perf_counter()
    summary, records = evaluate_arrays(model, x, y, value_range=value_range,
                                       certification=model.certification, options=opts)
    rd = rundir.RunDir(out_path, create=True)
    summary["saved_model"] = model.path
    summary["method"] = (card.get("run") or {}).get("method")
    summary["dataset"] = data_card["dataset"]
    summary["seconds"] = time.perf_counter() - start
    write_certificates(rd.file(rundir.CERTIFICATES_FILE), records,
                       claimed=certified_key(summary) != "certified_accuracy")
    summary["plot"] = PLOT_FILE
    plot_accuracy(rd.file(PLOT_FILE), summary)
    rd.write_json(rundir.EVALUATION_FILE, summary)
    summary["output_dir"] = rd.path
    return summary
