"""Checks of an evaluation's options, before any work (`validate_options`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from absl import logging

import attacks
from tfdp import certify as certify_lib
from tfdp import checks, kernels
from tfdp.eval_options import EvalOptions

__all__ = ["ATTACK_NORMS", "validate_options", "check_certificate_norm"]

# --attack_norm -> the certificate norm it matches and the attacks' norm argument.
ATTACK_NORMS = {"inf": ("linf", np.inf), "2": ("l2", 2)}


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
