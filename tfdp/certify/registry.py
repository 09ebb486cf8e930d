"""Certificates as objects: one class per certificate, registered by name.

A certificate turns Monte-Carlo statistics of a noisy classifier into a prediction and a
robustness radius. Each class knows

* `name` (the registry key, also `config["mechanism"]` for the run's config.json),
* `norm`: the norm of the ball it certifies, "l2" or "linf",
* `sound`: True only when the sensitivity behind the radius is a proven upper bound
  (DESIGN principle 7); an unsound certificate's numbers are *claims*,
* `bounds(...)`: the prediction and the confidence bounds the radius needs,
* `radius(lower, upper, attack_size)` in numpy and `radius_tf(...)` in TensorFlow (the
  SavedModel's `certify` signature uses the latter; tests check they agree),
* `to_config()` / `from_config()`.

Adding a certificate means adding one class here and decorating it with `@register`.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Mapping, Optional

import numpy as np
import scipy.stats
import tensorflow as tf

from tfdp import checks, clopper_pearson
from tfdp import registry as paper_registry
from tfdp.certify import core, graph

NORMS = ("l2", "linf")
REGISTRY: dict[str, type["Certificate"]] = {}
# Keys every certificate's config may hold besides its own parameters.
_COMMON_KEYS = ("eps_cap", "bound", "alpha", "num_draws")


def register(cls: type["Certificate"]) -> type["Certificate"]:
    """Class decorator: adds a Certificate subclass to REGISTRY under its `name`."""
    if cls.name in REGISTRY:
        raise ValueError(f"certificate {cls.name!r} registered twice")
    REGISTRY[cls.name] = cls
    return cls


def names() -> tuple[str, ...]:
    """The certificate names: the shared ones, then those the papers declare (registry kind
    "certificate")."""
    return tuple(REGISTRY) + tuple(n for n in paper_registry.extensions("certificate")
                                   if n not in REGISTRY)


def lookup(name: str) -> type["Certificate"]:
    """The certificate class named `name`: a shared one, or a paper's (its module is
    imported on first use and registers it).

    Raises:
        ValueError: no certificate has that name.
    """
    if name not in REGISTRY:
        declared = paper_registry.extensions("certificate").get(name) if isinstance(
            name, str) else None
        if declared is None:
            raise ValueError(f"certification['mechanism'] must be one of {names()}, "
                             f"got {name!r}")
        cls = declared.load()
        if REGISTRY.get(name) is not cls:
            raise ValueError(f"certificate {name!r}: {declared.target} did not register "
                             f"itself under that name (decorate it with @register)")
    return REGISTRY[name]


class Certificate:
    """Base class: a certificate built from a run's `certification` dict.

    Attributes:
        config: the validated dict (defaults filled in).
    """

    name: ClassVar[str] = ""
    # Draws used only to select the predicted class (0: the class comes from the same
    # draws as the bounds).
    default_bound: ClassVar[str] = "clopper_pearson"

    def __init__(self, config: Mapping[str, Any]):
        cfg = dict(config)
        cfg["mechanism"] = self.name
        cfg.pop("name", None)
        cfg.pop("sound", None)  # derived, never trusted from a file
        if cfg.get("eps_cap") is not None:
            checks.check_positive(cfg["eps_cap"], "certification['eps_cap']")
        if "bound" in cfg:
            checks.check_choice(cfg["bound"], "bound", core.BOUNDS)
        if "alpha" in cfg:
            checks.check_unit_interval(cfg["alpha"], "alpha")
        if "num_draws" in cfg:
            checks.check_positive_int(cfg["num_draws"], "num_draws", allow_integral_float=True)
        self.config = self._validate(cfg)
        norm = self.config.get("norm", self.default_norm())
        if norm not in NORMS:
            raise ValueError(f"certification['norm'] must be one of {NORMS}, got {norm!r}")
        self.config["norm"] = norm

    # -- to override -------------------------------------------------------------------

    def _validate(self, cfg: dict) -> dict:
        """Checks the certificate's own keys; returns cfg with defaults filled in."""
        return cfg

    def default_norm(self) -> str:
        """The norm when the config does not name one."""
        return "linf"

    @property
    def sound(self) -> bool:
        """Whether the sensitivity behind the radius is a proven upper bound."""
        return False

    @property
    def unsound_reason(self) -> str:
        """Why the certificate is not sound ("" when it is)."""
        return "" if self.sound else "its sensitivity is not a proven bound"

    def radius(self, lower: Any, upper: Any, attack_size: Optional[float] = None
               ) -> np.ndarray:
        """Radii (numpy, float64; 0 = abstain) from the bounds of the top two classes."""
        raise NotImplementedError

    def radius_tf(self, lower: tf.Tensor, upper: tf.Tensor, attack_size: Any = 0.0
                  ) -> tf.Tensor:
        """The same radii in TensorFlow (float64)."""
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------------

    @property
    def norm(self) -> str:
        """"l2" or "linf"."""
        return self.config["norm"]

    @property
    def radius_depends_on_attack_size(self) -> bool:
        """Whether `radius` changes with the attack size being certified (then the
        evaluation certifies each size on its own; otherwise one call serves every size)."""
        return False

    @property
    def selection_draws(self) -> int:
        """Draws spent selecting the class before the bounds' draws (0: no separate set)."""
        return 0

    def bounds(self, result: core.MonteCarloResult, bound: str = "clopper_pearson",
               alpha: float = 0.05, selection: Optional[core.MonteCarloResult] = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prediction, lower bound of its class, upper bound of the runner-up), per input.

        Args:
            result: Monte-Carlo statistics of the estimation draws.
            bound: one of core.BOUNDS.
            alpha: failure probability in (0, 1).
            selection: statistics of separate selection draws (certificates with
                `selection_draws > 0`); ignored otherwise.
        """
        del selection
        return core.top_two_bounds(result, bound, alpha)

    def to_config(self) -> dict:
        """The JSON dict of the certificate: its parameters, name, norm and soundness."""
        out = dict(self.config)
        out["name"] = self.name
        out["sound"] = bool(self.sound)
        return out

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "Certificate":
        """The certificate a dict describes (the registered class named by it)."""
        return from_config(config)

    def label(self) -> str:
        """"certified" for a sound certificate, "claimed certified" for a claim."""
        return "certified" if self.sound else "claimed certified"

    def accuracy_key(self) -> str:
        """The result key of its accuracies: certified_accuracy or claimed_certified_accuracy."""
        return "certified_accuracy" if self.sound else "claimed_certified_accuracy"


def from_config(config: Any) -> Certificate:
    """The certificate of a run's `certification` dict.

    Raises:
        ValueError: naming the offending key.
    """
    if isinstance(config, Certificate):
        return config
    if not isinstance(config, Mapping):
        raise ValueError("certification must be a dict with a 'mechanism' key")
    name = config.get("mechanism", config.get("name"))
    return lookup(name)(config)


# ------------------------------------------------------------------ PixelDP-style (Eq. 4)


class _PixelDPFamily(Certificate):
    """Noise after a sensitivity-bounded layer; PixelDP Eq. 4 turned into a radius.

    Sound only when the run recorded that the layer's sensitivity is a proven bound in the
    certificate's norm (`sensitivity_sound`, set by the trainer from the sensitivity mode).
    """

    needs_delta: ClassVar[bool] = True

    def _validate(self, cfg: dict) -> dict:
        for key in ("construction_bound", "epsilon"):
            if key not in cfg:
                raise ValueError(f"certification['{key}'] is required for {self.name}")
            checks.check_positive(cfg[key], f"certification['{key}']")
        if self.needs_delta:
            if "delta" not in cfg:
                raise ValueError(f"certification['delta'] is required for {self.name}")
            delta = float(cfg["delta"])
            if not 0.0 < delta < 1.0:
                raise ValueError(f"certification['delta'] must lie in (0, 1), got {delta!r}")
        return cfg

    @property
    def sound(self) -> bool:
        # A dict that does not say its sensitivity is proven is a claim (principle 7).
        return bool(self.config.get("sensitivity_sound", False))

    @property
    def unsound_reason(self) -> str:
        if self.sound:
            return ""
        mode = self.config.get("sensitivity_mode")
        return (f"sensitivity mode {mode!r} is not a proven bound" if mode else
                "the certification does not record a proven sensitivity bound")

    def _cap(self) -> Optional[float]:
        cap = self.config.get("eps_cap")
        return None if cap is None else float(cap)

    def _ratio(self) -> float:
        """sigma (or b) divided by Delta_f: the noise-to-sensitivity ratio in radius units."""
        raise NotImplementedError

    def _multiplier(self) -> str:
        raise NotImplementedError

    def radius(self, lower, upper, attack_size=None):
        del attack_size
        return core.gaussian_radius(lower, upper, self._ratio(), self._multiplier(),
                                    eps_cap=self._cap())

    def radius_tf(self, lower, upper, attack_size=0.0):
        del attack_size
        lower, upper = graph.f64(lower), graph.f64(upper)
        return graph.tf_gaussian_radius(lower, upper, self._ratio(), self._multiplier(),
                                        self._cap())


@register
class PixelDPLaplace(_PixelDPFamily):
    """PixelDP's Laplace mechanism: b = Delta L / eps_r; radius = (b/Delta) eps* (Eq. 4)."""

    name = "pixeldp_laplace"
    needs_delta = False

    def _ratio(self) -> float:
        return float(self.config["construction_bound"]) / float(self.config["epsilon"])

    def radius(self, lower, upper, attack_size=None):
        del attack_size
        eps = core.max_epsilon(lower, upper, 0.0)
        if self._cap() is not None:
            eps = np.minimum(eps, self._cap())
        return self._ratio() * eps

    def radius_tf(self, lower, upper, attack_size=0.0):
        del attack_size
        eps = graph.tf_max_epsilon(graph.f64(lower), graph.f64(upper), 0.0)
        if self._cap() is not None:
            eps = tf.minimum(eps, self._cap())
        return self._ratio() * eps


@register
class PixelDPGaussian(_PixelDPFamily):
    """Classical Gaussian mechanism (PixelDP): sigma = sqrt(2 ln(1.25/delta)) Delta L / eps_r.

    Valid for eps' <= 1 only (HGM Theorem 1), so eps' is capped at 1.
    """

    name = "pixeldp_gaussian"

    def _validate(self, cfg):
        cfg = super()._validate(cfg)
        if float(cfg["epsilon"]) > 1.0:
            raise ValueError("certification['epsilon'] must be <= 1 for the classical "
                             "Gaussian mechanism (HGM Theorem 1)")
        return cfg

    def _cap(self):
        cap = super()._cap()
        return 1.0 if cap is None else min(cap, 1.0)

    def _ratio(self):
        c = self.config
        # pylint: disable=protected-access
        return (float(c["construction_bound"]) * float(core._gm_multiplier(
            np.float64(c["delta"]))) / float(c["epsilon"]))

    def _multiplier(self):
        return "gm"


@register
class HGM(_PixelDPFamily):
    """Heterogeneous Gaussian mechanism (HGM Theorem 2/3): any eps' > 0."""

    name = "hgm"

    def _ratio(self):
        c = self.config
        # HGM Eq. 10 (corrected): sigma_r = Delta_f L mult_HGM(eps_r, delta_r)
        return float(c["construction_bound"]) * float(core._hgm_multiplier(  # pylint: disable=protected-access
            float(c["epsilon"]), float(c["delta"])))

    def _multiplier(self):
        return "hgm"


@register
class AGM(_PixelDPFamily):
    """Analytic Gaussian mechanism (Balle & Wang 2018), the Secure-SGD-AGM baseline."""

    name = "agm"

    def _ratio(self):
        c = self.config
        return float(c["construction_bound"]) * float(core._agm_multiplier(  # pylint: disable=protected-access
            float(c["epsilon"]), float(c["delta"])))

    def _multiplier(self):
        return "agm"


# ---------------------------------------------------------------- randomized smoothing


def smoothing_lower_bound(counts_top: Any, num_draws: Any, alpha: float) -> np.ndarray:
    """One-sided Clopper-Pearson lower bound on p_A (Cohen et al. 2019, Algorithm CERTIFY).

    lower = Beta.ppf(alpha; k, n - k + 1) for k > 0, else 0 (Clopper & Pearson 1934).

    Args:
        counts_top: draws (of n) that returned the selected class.
        num_draws: n >= 1.
        alpha: failure probability in (0, 1).

    Returns:
        float64 lower bounds.
    """
    alpha = checks.check_unit_interval(alpha, "alpha")
    k = np.asarray(counts_top, np.float64)
    n = np.asarray(num_draws, np.float64) + np.zeros_like(k)
    if np.any(k < 0) or np.any(k > n) or np.any(n < 1):
        raise ValueError("counts must satisfy 0 <= count <= num_draws, num_draws >= 1")
    return clopper_pearson.lower(k, n, alpha)


@register
class GaussianSmoothing(Certificate):
    """Randomized smoothing with isotropic Gaussian noise (Cohen, Rosenfeld, Kolter 2019).

    g(x) = argmax_c P(f(x + e) = c), e ~ N(0, sigma^2 I) on the input of a map with l2
    Lipschitz constant L (1 for noise on the input). Cohen et al. Theorem 1: g is constant
    on the l2 ball of radius sigma Phi^-1(p_A_lower) / L when p_A_lower > 1/2. The class is
    selected from n0 draws, p_A is bounded from n separate draws with a one-sided
    Clopper-Pearson bound at level alpha (Algorithm CERTIFY); p_A_lower <= 1/2 abstains.

    Config keys: sigma (> 0), lipschitz (L > 0, default 1), selection_draws (n0 >= 1,
    default 100), norm "l2".
    """

    name = "gaussian_smoothing"

    def _validate(self, cfg):
        if "sigma" not in cfg:
            raise ValueError("certification['sigma'] is required for gaussian_smoothing")
        cfg["sigma"] = checks.check_positive(cfg["sigma"], "smoothing_sigma")
        cfg["lipschitz"] = checks.check_positive(cfg.get("lipschitz", 1.0),
                                                 "certification['lipschitz']")
        cfg["selection_draws"] = checks.check_positive_int(
            cfg.get("selection_draws", 100), "selection_draws", allow_integral_float=True)
        if cfg.get("norm", "l2") != "l2":
            raise ValueError("certification['norm'] must be 'l2' for gaussian_smoothing")
        if cfg.get("bound", "clopper_pearson") != "clopper_pearson":
            raise ValueError("bound: gaussian_smoothing uses clopper_pearson (one-sided, "
                             "Cohen et al. 2019)")
        return cfg

    def default_norm(self):
        return "l2"

    @property
    def sound(self) -> bool:
        return True  # Cohen et al. 2019, Theorem 1: the Gaussian tail bound is exact

    @property
    def selection_draws(self) -> int:
        return int(self.config["selection_draws"])

    def bounds(self, result, bound="clopper_pearson", alpha=0.05, selection=None):
        """Prediction from the selection counts (n0), lower bound of p_A from the estimation
        counts (n); the "upper" bound of the runner-up is 1 - lower (two-class form)."""
        if bound != "clopper_pearson":
            raise ValueError("bound: gaussian_smoothing uses clopper_pearson")
        if selection is None:
            raise ValueError("gaussian_smoothing needs separate selection draws (n0)")
        pred = np.argmax(selection.counts, axis=-1).astype(np.int64)
        top = result.counts[np.arange(pred.shape[0]), pred]
        lower = smoothing_lower_bound(top, result.num_draws, alpha)
        return pred, lower, 1.0 - lower

    def radius(self, lower, upper=None, attack_size=None):
        del upper, attack_size
        lo = np.asarray(lower, np.float64)
        c = self.config
        with np.errstate(invalid="ignore", divide="ignore"):
            # Cohen et al. 2019, Theorem 1: R = sigma Phi^-1(p_A_lower) / L
            r = float(c["sigma"]) * scipy.stats.norm.ppf(np.clip(lo, 0.5, 1.0)) / float(
                c["lipschitz"])
        return np.where(lo > 0.5, r, 0.0)

    def radius_tf(self, lower, upper=None, attack_size=0.0):
        del upper, attack_size
        lo = graph.f64(lower)
        c = self.config
        r = float(c["sigma"]) * tf.math.ndtri(tf.clip_by_value(lo, 0.5, 1.0)) / float(
            c["lipschitz"])
        return tf.where(lo > 0.5, r, tf.zeros_like(r))


# ----------------------------------------------------------- unsound training options


def unsound_training_options(options: Mapping[str, Any]) -> list[str]:
    """The training options (flag name=value) whose certificates would not be sound.

    Each paper declares its own (registry kind "unsound_options"; e.g. HGM's per_map and
    code_spectral sensitivity modes, StoBatch's code-release radius scaling). Such runs need
    --allow_unsound_certificates; their certificates are named "claimed" everywhere.
    """
    found = []
    for extension in paper_registry.extensions("unsound_options").values():
        found.extend(extension.load()(options))
    return found


def check_unsound_allowed(options: Mapping[str, Any], allowed: bool) -> None:
    """Raises unless unsound certificate options come with --allow_unsound_certificates.

    Args:
      options: the training options by flag name (each paper's "unsound_options" reads its
        own).
      allowed: the run's typed --allow_unsound_certificates (`CommonOptions`).

    Raises:
        ValueError: naming --allow_unsound_certificates and the unsound options.
    """
    found = unsound_training_options(options)
    if found and not allowed:
        raise ValueError(f"--allow_unsound_certificates: {', '.join(found)} gives certificates "
                         f"that are not sound; pass --allow_unsound_certificates to reproduce "
                         f"the papers' numbers (they are reported as claimed)")


# ------------------------------------------------------------------- module-level API


def validate_certification(certification: Any) -> dict:
    """Checks a `certification` dict and returns a copy with defaults, name, norm, sound.

    Raises:
        ValueError: naming the offending key.
    """
    return from_config(certification).to_config()


def certified_radius(lower: Any, upper: Any, certification: Any,
                     attack_size: Optional[float] = None) -> np.ndarray:
    """Robustness radius for the certificate a run's `certification` dict describes.

    Args:
        lower: lower bound(s) of the predicted class.
        upper: upper bound(s) of the runner-up.
        certification: the dict (or a Certificate).
        attack_size: the attack size being certified (only StoBatch's "mu_a" mode uses it).

    Returns:
        radii in the data's input units (0 = abstain).
    """
    return from_config(certification).radius(lower, upper, attack_size)


def tf_certified_radius(lower: Any, upper: Any, certification: Any, attack_size: Any = 0.0
                        ) -> tf.Tensor:
    """Graph version of `certified_radius`."""
    return from_config(certification).radius_tf(lower, upper, attack_size)


def certify(result: core.MonteCarloResult, certification: Any, *,
            bound: str = "clopper_pearson", alpha: float = 0.05,
            attack_size: Optional[float] = None,
            selection: Optional[core.MonteCarloResult] = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """Predictions and certified radii from Monte-Carlo statistics.

    Args:
        result: Monte-Carlo statistics of the noisy model (estimation draws).
        certification: the run's certification dict (or a Certificate).
        bound: one of core.BOUNDS.
        alpha: failure probability in (0, 1) (confidence 1 - alpha).
        attack_size: the attack size being certified (StoBatch "mu_a" mode).
        selection: the selection draws of a two-stage certificate (gaussian_smoothing).

    Returns:
        (prediction (b,), radius (b,)); radius 0 means the model abstains from certifying.
    """
    cert = from_config(certification)
    pred, lower, upper = cert.bounds(result, bound, alpha, selection=selection)
    return pred, cert.radius(lower, upper, attack_size)
