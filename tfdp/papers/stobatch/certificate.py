"""StoBatch's certificate: the radius of StoBatch Eq. 13 and its registered class.

Shared code finds it through the paper's declaration (registry kind "certificate", name
"stobatch"): `tfdp.certify.registry.from_config` imports this module when a run's
certification names it.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from tfdp import checks
from tfdp.certify import core, graph, registry

DELTA_RX_MODES = ("unit", "mu_a", "mu_train")


def stobatch_radius(lower: Any, upper: Any, *, sensitivity: float, batch_size: float,
                    epsilon1: float, d_cert: float, delta_rh: float,
                    delta_rx_mode: str = "unit", mu_train: float = 0.05,
                    attack_size: Optional[float] = None, psi: float = 1.0,
                    radius_psi_correction: bool = True,
                    radius_divisor: float = 1.0) -> np.ndarray:
    """StoBatch's certified radius for the composed input + latent Laplace mechanisms.

    StoBatch Eq. 13 (Corollary 1): eps_r* = ln(E_lb / E_ub) / 2 and
    r = eps_r* Delta_R / (m eps1 (Delta_r^x + Delta_r^h / 2)) = kappa phi / (kappa + phi)
    at eps_r*. Delta_r^x = mu d_cert with mu = 1, the attack size or mu_train;
    the radius is divided by psi when `radius_psi_correction` and by `radius_divisor`
    (the code release's dp_epsilon); docs/stobatch.md, "Verified inference".

    Args:
        lower: lower bound(s) of the top class's expected composed score.
        upper: upper bound(s) of the runner-up.
        sensitivity: Delta_R.
        batch_size: m.
        epsilon1: eps1.
        d_cert: input dimension used in Delta_r^x.
        delta_rh: Delta_r^h (latent sensitivity).
        delta_rx_mode: one of DELTA_RX_MODES.
        mu_train: mu for delta_rx_mode="mu_train".
        attack_size: mu_a for delta_rx_mode="mu_a".
        psi: shrink factor of the fresh inference noise.
        radius_psi_correction: divide the radius by psi.
        radius_divisor: extra divisor (1.0 = paper-literal).

    Returns:
        radii (0 = abstain).

    Raises:
        ValueError: on bad arguments.
    """
    delta_r = checks.check_positive(sensitivity, "sensitivity")
    m = checks.check_positive(batch_size, "batch_size")
    eps1 = checks.check_positive(epsilon1, "epsilon1")
    d_cert = checks.check_positive(d_cert, "d_cert")
    delta_rh = checks.check_positive(delta_rh, "delta_rh")
    psi = checks.check_positive(psi, "psi")
    divisor = checks.check_positive(radius_divisor, "radius_divisor")
    if delta_rx_mode == "unit":
        mu = 1.0
    elif delta_rx_mode == "mu_train":
        mu = checks.check_positive(mu_train, "mu_train")
    elif delta_rx_mode == "mu_a":
        if attack_size is None:
            raise ValueError("attack_size is required when delta_rx_mode='mu_a'")
        mu = checks.check_nonnegative(attack_size, "attack_size")
    else:
        raise ValueError(f"delta_rx_mode must be one of {DELTA_RX_MODES}, got "
                         f"{delta_rx_mode!r}")
    delta_rx = mu * d_cert
    eps_star = core.max_epsilon(lower, upper, 0.0)
    # StoBatch Eq. 13
    radius = eps_star * delta_r / (m * eps1 * (delta_rx + delta_rh / 2.0))
    if radius_psi_correction:
        radius = radius / psi
    return radius / divisor



@registry.register
class StoBatch(registry.Certificate):
    """StoBatch Eq. 13 for the composed input + latent Laplace mechanisms.

    Sound only in the paper-literal reading: Delta_r^x = d (delta_rx_mode "unit", d the
    full input dimension), the psi correction on and no extra divisor (the code release's
    `dp_epsilon` scaling); docs/stobatch.md, "Verified inference".
    """

    name = "stobatch"

    def _validate(self, cfg):
        for key in ("sensitivity", "batch_size", "epsilon1", "d_cert", "delta_rh"):
            if key not in cfg:
                raise ValueError(f"certification['{key}'] is required for stobatch")
            checks.check_positive(cfg[key], f"certification['{key}']")
        cfg.setdefault("delta_rx_mode", "unit")
        cfg.setdefault("mu_train", 0.05)
        cfg.setdefault("psi", 1.0)
        cfg.setdefault("radius_psi_correction", True)
        cfg.setdefault("radius_divisor", 1.0)
        if cfg["delta_rx_mode"] not in DELTA_RX_MODES:
            raise ValueError(f"certification['delta_rx_mode'] must be one of "
                             f"{DELTA_RX_MODES}, got {cfg['delta_rx_mode']!r}")
        checks.check_positive(cfg["psi"], "certification['psi']")
        checks.check_positive(cfg["radius_divisor"], "certification['radius_divisor']")
        passes = cfg.get("passes")
        if passes is not None and (not isinstance(passes, (list, tuple)) or not all(
                isinstance(p, (list, tuple)) for p in passes)):
            raise ValueError("certification['passes'] must be a list of lists of layer "
                             "names")
        return cfg

    @property
    def unsound_reason(self) -> str:
        c = self.config
        reasons = []
        if c["delta_rx_mode"] != "unit":
            reasons.append(f"delta_rx_mode={c['delta_rx_mode']!r}")
        if float(c["radius_divisor"]) < 1.0:
            reasons.append(f"radius_divisor={c['radius_divisor']!r} (code-release scaling)")
        if not c["radius_psi_correction"] and float(c["psi"]) > 1.0:
            reasons.append("radius_psi_correction off")
        if c.get("input_dim") is not None and float(c["d_cert"]) < float(c["input_dim"]):
            reasons.append(f"d_cert={c['d_cert']!r} below the input dimension")
        return "; ".join(reasons)

    @property
    def sound(self) -> bool:
        return not self.unsound_reason

    @property
    def radius_depends_on_attack_size(self) -> bool:
        return self.config["delta_rx_mode"] == "mu_a"  # Delta_r^x = mu_a d_cert

    def _kwargs(self) -> dict:
        keys = ("sensitivity", "batch_size", "epsilon1", "d_cert", "delta_rh",
                "delta_rx_mode", "mu_train", "psi", "radius_psi_correction",
                "radius_divisor")
        return {k: self.config[k] for k in keys}

    def radius(self, lower, upper, attack_size=None):
        kwargs = self._kwargs()
        radius = stobatch_radius(lower, upper, attack_size=attack_size, **kwargs)
        cap = self.config.get("eps_cap")
        if cap is not None:  # cap eps_r* through the radius's linear dependence
            capped = stobatch_radius(np.exp(2.0 * float(cap)), 1.0,
                                          attack_size=attack_size, **kwargs)
            radius = np.minimum(radius, capped)
        return radius

    def _radius_tf(self, lower, upper, attack_size):
        c = self.config
        mode = c["delta_rx_mode"]
        if mode == "unit":
            mu = tf.constant(1.0, tf.float64)
        elif mode == "mu_train":
            mu = tf.constant(float(c["mu_train"]), tf.float64)
        else:
            mu = graph.f64(attack_size)
        delta_rx = mu * float(c["d_cert"])
        eps_star = graph.tf_max_epsilon(lower, upper, 0.0)
        # StoBatch Eq. 13
        radius = eps_star * float(c["sensitivity"]) / (
            float(c["batch_size"]) * float(c["epsilon1"])
            * (delta_rx + float(c["delta_rh"]) / 2.0))
        if c["radius_psi_correction"]:
            radius = radius / float(c["psi"])
        return radius / float(c["radius_divisor"])

    def radius_tf(self, lower, upper, attack_size=0.0):
        lower, upper, attack_size = graph.f64(lower), graph.f64(upper), graph.f64(attack_size)
        radius = self._radius_tf(lower, upper, attack_size)
        cap = self.config.get("eps_cap")
        if cap is not None:
            capped = self._radius_tf(tf.constant([math.exp(2.0 * float(cap))], tf.float64),
                                     tf.constant([1.0], tf.float64), attack_size)
            radius = tf.minimum(radius, capped)
        return radius
