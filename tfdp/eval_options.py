"""What tfdp-evaluate evaluates: `EvalOptions`, the one declaration of its flags.

`EvalOptions` is a plain dataclass (the evaluation checks it, `tfdp.evaluate.validate_options`);
its fields declared with `tfdp.options.flag` are tfdp-evaluate's flags, with their names,
defaults, help texts and choices (`tfdp.apps.evaluate` defines them from
`tfdp.options.flag_options(EvalOptions)`), so the library and the app cannot drift. Light:
no TensorFlow import (tfdp-evaluate's `--help` reads it).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from tfdp import options

__all__ = ["EvalOptions", "ATTACK_PRESETS", "apply_attack_preset", "BOUNDS", "NOISE_KERNELS",
           "ATTACK_NORM_NAMES"]

# Choices of the enum flags (tests check them against tfdp.certify.BOUNDS, "auto" +
# tfdp.kernels.NOISE_KERNELS and tfdp.evaluate.ATTACK_NORMS, which import TensorFlow).
BOUNDS = ("clopper_pearson", "hoeffding", "bernstein")
NOISE_KERNELS = ("auto", "portable", "fused")
ATTACK_NORM_NAMES = ("inf", "2")


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

    attacks: Sequence[str] = options.flag(
        ("fgsm", "ifgsm", "mim", "madry"),
        "Attacks, comma-separated, from fgsm, ifgsm, mim, madry (empty: clean only).")
    attack_sizes: Sequence[float] = options.flag(
        (0.1, 0.2),
        "l_inf attack sizes, comma-separated, on --attack_size_range.")
    size_range: Optional[Sequence[float]] = options.flag(
        None,
        "low,high of the range the sizes refer to, e.g. 0,1 for sizes on [0,1] of a model"
        " trained on [-1,1] (a size doubles). Default: the data's own range.",
        name="attack_size_range")
    nb_iter: int = options.flag(
        10,
        "Iterations of ifgsm, mim and madry (T_a).")
    eot_draws: int = options.flag(
        1,
        "> 1: attack the noisy model, averaging gradients over this many noise draws "
        "(expectation over transformation).")
    use_true_labels: bool = options.flag(
        False,
        "Craft against the true labels instead of the model's predictions.")
    certify: bool = options.flag(
        False,
        "Monte-Carlo prediction and certified accuracy.")
    num_draws: Optional[int] = options.flag(
        None,
        "Monte-Carlo draws per input (default: the run's certification config, else "
        "1000).")
    alpha: Optional[float] = options.flag(
        None,
        "Failure probability of the bounds, in (0, 1) (default 0.05, i.e. 95% "
        "confidence).")
    bound: Optional[str] = options.flag(
        None,
        "Confidence bound (default: Clopper-Pearson on argmax counts).",
        choices=BOUNDS)
    num_examples: Optional[int] = options.flag(
        None,
        "Evaluate only the first N test examples (default: all; with --certify, the run's"
        " --num_test, at most 1000).")
    batch_size: int = options.flag(
        100,
        "Examples per batch.")
    draws_per_step: int = options.flag(
        256,
        "Monte-Carlo draws per forward pass.")
    seed: Optional[int] = options.flag(
        None,
        "Seed of the Madry random starts (unset: OS entropy).")
    data_dir: Optional[str] = options.flag(
        None,
        "Data root (default: the run's data_dir).")
    eps_iter_scale: float = 1.0
    restarts: int = 1
    noise_kernel: str = options.flag(
        "auto",
        "How the noise layers draw fresh noise (Monte-Carlo prediction, EOT attacks): "
        "'portable' TensorFlow ops, the 'fused' compiled CPU op (built with g++ on first "
        "use), or 'auto': fused wherever it builds, else portable (evaluation.json "
        "records the kernel used and any fallback). The two draw the same noise to a few "
        "float32 ulps. Run directories only.",
        choices=NOISE_KERNELS)
    noise_kernel_fallback: Optional[str] = None
    attack_norm: str = options.flag(
        "inf",
        "Norm of the attacks and attack sizes: inf (l_inf) or 2 (l2). With --certify it "
        "must be the certificate's norm (gaussian_smoothing: 2), except that an l2 "
        "certificate with inf reports l_inf radii = l2 radius / sqrt(d).",
        choices=ATTACK_NORM_NAMES)
    soundness_check: bool = options.flag(
        False,
        "With --certify: attack every clean-certified example at its certified radius "
        "(PGD with EOT gradients, the certificate's norm, from x, a random start and "
        "towards the runner-up class), test with fresh draws whether the smoothed "
        "prediction changed and report how many flipped, with a binomial p-value against "
        "alpha, and the same at 2 r (the check's power).")
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
