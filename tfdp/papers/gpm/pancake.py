"""Gaussian pancake mechanism (GPM): a backdoored Gaussian mechanism, its attack and bounds.

RESEARCH AND ATTACK CODE. GPM (Sun and He, "GPM: The Gaussian Pancake Mechanism for Planting
Undetectable Backdoors in Differential Privacy") replaces the Gaussian noise of the Gaussian
mechanism (GM) by scaled homogeneous-CLWE noise. Without the key its outputs are believed to be
computationally indistinguishable from GM outputs; with the key, a distinguishing attack succeeds
with probability close to 1 and the statistical epsilon is of order 1/beta^2. It is never a
default anywhere in tfdp and it is not exported from `tfdp.mechanisms`; import it explicitly
(`from tfdp.papers.gpm import pancake`). Every use emits a `GPMResearchWarning`.

Contents: the paper's Gaussian-mechanism calibration (its Theorem 2.3 form, which is not the
analytic calibration of `tfdp.mechanisms`), key generation, discrete Gaussian samplers (exact
Canonne-Kamath-Steinke rejection and a fast table path), the pancake sampler in numpy and
TensorFlow (float64), the key holder's distinguishing attack, exact and key-averaged
success-rate oracles, and the privacy bounds (lower, upper, Renyi, key-holder view).
All arithmetic is float64.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import numpy as np
from scipy import special, stats

from tfdp import checks
from tfdp.mechanisms import gaussian
import tensorflow as tf

__all__ = [
    "GPMResearchWarning", "GaussianPancakeMechanism", "gm_sigma", "gm_eps", "covert_gamma",
    "generate_key", "spacing", "pancake_std", "tau", "check_parameters",
    "sample_discrete_gaussian", "pancake_noise", "gpm", "gm", "tf_pancake_noise",
    "sample_hclwe_rejection", "distinguish", "realisable_t", "success_exact",
    "success_paper_bound", "success_averaged", "best_gm_success", "eps_lower", "eps_upper",
    "rdp_upper", "pair_rdp", "key_holder_noise_multiplier", "lemma41_probabilities",
    "hockey_stick_delta", "key_holder_view",
]

_SQRT_2PI = math.sqrt(2.0 * math.pi)
_TABLE_MAX_STD = 1e5   # tfdp: table path for sqrt(v) up to about 1e5
_CKS_MAX_STD = 1e7     # float64 geometric draws stay exact far beyond sqrt(v) = 1e6
_UNIT_TOL = 1e-9


class GPMResearchWarning(UserWarning):
    """Emitted whenever the backdoored Gaussian pancake mechanism is used."""


def _warn_research(what: str) -> None:
    warnings.warn(
        f"{what}: the Gaussian pancake mechanism is backdoored research/attack code; it is "
        "not differentially private against the key holder and must never be used to "
        "protect data.", GPMResearchWarning, stacklevel=3)


# --------------------------------------------------------------------------------------------
# Validation helpers.


def _float64_array(name: str, value: Any) -> np.ndarray:
    """Returns value as a float64 array; float32 (or lower) input is an error (docs/gpm.md)."""
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    arr = np.asarray(value)
    if arr.dtype.kind == "f" and arr.dtype != np.float64:
        raise ValueError(
            f"{name} must be float64, got {arr.dtype}: GPM and its attack need float64 "
            "(docs/gpm.md)")
    if arr.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be a real float64 array, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    return arr


def _check_key(w: Any, name: str = "w") -> np.ndarray:
    """Validates a key: float64, shape [d] or [m, d], every row a unit vector."""
    if hasattr(w, "numpy") and not isinstance(w, np.ndarray):
        w = w.numpy()
    arr = np.asarray(w)
    if arr.dtype != np.float64:
        raise ValueError(f"{name} (the key) must be a float64 array, got {arr.dtype}")
    if arr.ndim not in (1, 2) or arr.shape[-1] < 1:
        raise ValueError(f"{name} (the key) must have shape [d] or [m, d], got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} (the key) must be finite")
    norms = np.linalg.norm(arr, axis=-1)
    if np.any(np.abs(norms - 1.0) > _UNIT_TOL):
        raise ValueError(f"{name} (the key) must be a unit vector; got norm(s) "
                         f"{np.atleast_1d(norms)[:3]}")
    return arr


def covert_gamma(d: int) -> float:
    """Returns the smallest gamma covered by the covertness theorem, 2 sqrt(d).

    GPM Thm 2.7 / Thm 3.4 need 2 sqrt(d) <= gamma <= poly(d); the experiments use exactly
    2 sqrt(d) (GPM experiments).
    """
    return 2.0 * math.sqrt(checks.check_positive_int(d, "d"))


def check_parameters(d: int, beta: float, gamma: float, *,
                     require_covertness: bool = False) -> tuple[float, float]:
    """Validates (beta, gamma) for dimension d.

    Args:
      d: dimension of the query output.
      beta: pancake width parameter, > 0.
      gamma: pancake spacing parameter, > 0.
      require_covertness: if True, gamma < 2 sqrt(d) is an error; otherwise (experiments, the
        paper's d = 2 picture, tests) it is a warning.

    Returns:
      (beta, gamma) as floats.

    Raises:
      ValueError: beta or gamma not > 0, or gamma < 2 sqrt(d) when covertness is required.
    """
    checks.check_positive_int(d, "d")
    beta = checks.check_positive(beta, "beta")
    gamma = checks.check_positive(gamma, "gamma")
    lowest = covert_gamma(d)
    if gamma < lowest * (1.0 - 1e-12):
        msg = (f"gamma={gamma:g} < 2*sqrt(d)={lowest:g}: outside the covertness theorem's "
               "range (GPM Thm 2.7 needs gamma >= 2 sqrt(d)); outputs may be detectable")
        if require_covertness:
            raise ValueError(msg)
        warnings.warn(msg, GPMResearchWarning, stacklevel=3)
    if beta >= 1.0:
        warnings.warn(f"beta={beta:g} >= 1: the privacy bounds of GPM Thm 4.2 assume "
                      "0 < beta < 1", GPMResearchWarning, stacklevel=3)
    return beta, gamma


# --------------------------------------------------------------------------------------------
# The paper's Gaussian-mechanism calibration (Thm 2.3 form).


def gm_eps(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Epsilon of the Gaussian mechanism in the GPM paper's Theorem 2.3 form.

    eps = Delta^2 / (2 sigma^2) - (Delta / sigma) Phi^{-1}(delta), the tail bound of the
    Gaussian privacy-loss variable (`tfdp.mechanisms.gaussian_tail_epsilon`), NOT the
    analytic Gaussian mechanism calibration; GPM uses it only to reproduce the paper.

    Args:
      sigma: noise standard deviation, > 0.
      delta: in (0, 1).
      sensitivity: L2 sensitivity Delta, > 0.

    Returns:
      epsilon (float64).

    Raises:
      ValueError: on an argument out of range.
    """
    sensitivity = checks.check_positive(sensitivity, "sensitivity")
    return gaussian.gaussian_tail_epsilon(sigma=sigma, delta=delta,
                                          sensitivity=sensitivity)  # GPM Thm 2.3


def gm_sigma(eps: float, delta: float, sensitivity: float = 1.0) -> float:
    """Noise std for which the GPM paper's Theorem 2.3 gives (eps, delta).

    Inverse of `gm_eps`: with a = Phi^{-1}(delta), sigma = Delta / (a + sqrt(a^2 + 2 eps))
    (`tfdp.mechanisms.gaussian_tail_sigma`).

    Args:
      eps: target epsilon, > 0.
      delta: in (0, 1).
      sensitivity: L2 sensitivity Delta, > 0.

    Returns:
      sigma (float64).

    Raises:
      ValueError: on an argument out of range.
    """
    eps = checks.check_positive(eps, "eps")
    sensitivity = checks.check_positive(sensitivity, "sensitivity")
    return gaussian.gaussian_tail_sigma(epsilon=eps, delta=delta,
                                        sensitivity=sensitivity)  # GPM Thm 2.3, inverted


# --------------------------------------------------------------------------------------------
# Geometry of the pancakes.


def spacing(sigma: float, beta: float, gamma: float) -> float:
    """Distance S between neighbouring pancakes of GPM noise along the key.

    S = sqrt(2 pi) sigma gamma / (beta^2 + gamma^2)  (GPM Def 3.1 with Lemma 2.6).
    """
    sigma = checks.check_positive(sigma, "sigma")
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    return _SQRT_2PI * sigma * gamma / (beta * beta + gamma * gamma)


def pancake_std(sigma: float, beta: float, gamma: float) -> float:
    """Standard deviation of one pancake along the key, sigma beta / sqrt(beta^2 + gamma^2)."""
    sigma = checks.check_positive(sigma, "sigma")
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    return sigma * beta / math.hypot(beta, gamma)  # GPM Lemma 2.6, scaled by sqrt(2 pi) sigma


def tau(beta: float, gamma: float) -> float:
    """Pancake std divided by spacing: beta sqrt(beta^2 + gamma^2) / (sqrt(2 pi) gamma)."""
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    return beta * math.hypot(beta, gamma) / (_SQRT_2PI * gamma)  # GPM Lemma 2.6


# --------------------------------------------------------------------------------------------
# Key generation and discrete Gaussian sampling.


def generate_key(d: int, *, rng: np.random.Generator, num: int | None = None) -> np.ndarray:
    """Draws a backdoor key uniformly on the unit sphere S^{d-1} (float64).

    Args:
      d: dimension.
      rng: numpy Generator.
      num: if given, returns `num` independent keys as rows of a [num, d] array.

    Returns:
      float64 array of shape [d] (or [num, d]) with unit rows.
    """
    d = checks.check_positive_int(d, "d")
    checks.check_rng(rng)
    if num is not None:
        num = checks.check_positive_int(num, "num")
    _warn_research("generate_key")
    shape = (d,) if num is None else (num, d)
    g = rng.standard_normal(shape)  # GPM Sec. 3.1 threat model: w = g/||g||
    return g / np.linalg.norm(g, axis=-1, keepdims=True)


@functools.lru_cache(maxsize=16)
def _dg_table(variance: float) -> tuple[np.ndarray, np.ndarray]:
    """Support and CDF of N_Z(0, v) truncated to |z| <= ceil(14 sqrt(v)) + 1 (tfdp's cut-off)."""
    k = int(math.ceil(14.0 * math.sqrt(variance))) + 1
    z = np.arange(-k, k + 1, dtype=np.int64)
    logits = -(z.astype(np.float64) ** 2) / (2.0 * variance)
    p = np.exp(logits - logits.max())
    cdf = np.cumsum(p)
    cdf /= cdf[-1]
    return z, cdf


def _dg_cks(variance: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """Canonne-Kamath-Steinke rejection sampler for N_Z(0, v) (CKS 2020, Algorithm 3)."""
    t = math.floor(math.sqrt(variance)) + 1
    p_geo = -math.expm1(-1.0 / t)  # success probability 1 - exp(-1/t)
    out = np.empty(size, dtype=np.int64)
    filled = 0
    while filled < size:
        need = size - filled
        batch = int(need * 1.6) + 16  # measured acceptance 0.67-0.76 for v in [0.65, 1e10]
        # Difference of two iid geometrics is a discrete Laplace with scale t (CKS Alg. 2).
        y = rng.geometric(p_geo, batch) - rng.geometric(p_geo, batch)
        accept_p = np.exp(-((np.abs(y) - variance / t) ** 2) / (2.0 * variance))  # CKS Alg. 3
        keep = y[rng.random(batch) < accept_p][:need]
        out[filled:filled + keep.size] = keep
        filled += keep.size
    return out


def sample_discrete_gaussian(variance: float, size: int, *, rng: np.random.Generator,
                             method: str = "cks") -> np.ndarray:
    """Samples the discrete Gaussian N_Z(0, v) with pmf proportional to exp(-z^2 / (2 v)).

    Args:
      variance: the parameter v > 0 (for v >= 1 the variance of the discrete distribution
        equals v up to a relative error of order exp(-2 pi^2 v)).
      size: number of draws.
      rng: numpy Generator.
      method: "cks" (exact rejection sampler of Canonne, Kamath and Steinke; exact up to the
        float64 rounding of its acceptance probability) or "table" (inverse CDF on the support
        truncated at 14 standard deviations; sqrt(v) <= 1e5).

    Returns:
      int64 array of shape [size].
    """
    variance = checks.check_positive(variance, "variance")
    size = checks.check_positive_int(size, "size")
    checks.check_rng(rng)
    std = math.sqrt(variance)
    if method == "cks":
        if std > _CKS_MAX_STD:
            raise ValueError(f"variance: sqrt(v)={std:g} exceeds {_CKS_MAX_STD:g}")
        return _dg_cks(variance, size, rng)
    if method == "table":
        if std > _TABLE_MAX_STD:
            raise ValueError(f"variance: sqrt(v)={std:g} > {_TABLE_MAX_STD:g} is too large for "
                             "the table path; use method='cks'")
        z, cdf = _dg_table(variance)
        idx = np.searchsorted(cdf, rng.random(size), side="right")
        return z[np.minimum(idx, z.size - 1)]
    raise ValueError(f"method must be 'cks' or 'table', got {method!r}")


# --------------------------------------------------------------------------------------------
# Samplers.


def _pancake_noise(w: np.ndarray, sigma: float, beta: float, gamma: float, num: int,
                   rng: np.random.Generator, dg_method: str,
                   out: np.ndarray | None = None) -> np.ndarray:
    """Unvalidated core of `pancake_noise` (sampling from GPM Lemma 2.6's mixture form)."""
    d = w.shape[-1]
    b2g2 = beta * beta + gamma * gamma
    g = rng.standard_normal((num, d), out=out)                 # step 1
    # step 2; einsum keeps this single-threaded (multithreaded BLAS threads spin after the
    # call and slow down whatever runs next on a small machine).
    gw = np.einsum("md,d->m", g, w) if w.ndim == 1 else np.einsum("md,md->m", g, w)
    c = beta / math.sqrt(b2g2)                                 # step 3
    k = sample_discrete_gaussian(b2g2 / (2.0 * math.pi), num, rng=rng, method=dg_method)  # 4
    m_k = _SQRT_2PI * gamma * k.astype(np.float64) / b2g2      # step 5
    coef = (c - 1.0) * gw + m_k
    # step 6: g_i += coef_i w_i; row by row for long rows (no [num, d] temporary), in one
    # broadcast for short rows (where the Python loop would dominate).
    if d >= 2048:
        tmp = np.empty(d)
        for i in range(num):
            np.multiply(w if w.ndim == 1 else w[i], coef[i], out=tmp)
            np.add(g[i], tmp, out=g[i])
    else:
        g += coef[:, None] * w
    g *= sigma
    return g


def pancake_noise(w: Any, sigma: float, beta: float, gamma: float, num: int, *,
                  rng: np.random.Generator, dg_method: str = "cks",
                  require_covertness: bool = False, out: np.ndarray | None = None
                  ) -> np.ndarray:
    """Draws GPM noise sqrt(2 pi) sigma H_{w,beta,gamma} (GPM Def 3.1), float64.

    Sampling from GPM Lemma 2.6's mixture form: Gaussian noise whose component along w is shrunk by
    beta / sqrt(beta^2 + gamma^2) and moved to the pancake centre k S with k ~ N_Z(0,
    (beta^2 + gamma^2) / (2 pi)).

    Args:
      w: key(s), float64 unit vector [d], or [num, d] for one key per draw.
      sigma: the Gaussian mechanism's noise std, > 0.
      beta: pancake width parameter, > 0.
      gamma: pancake spacing parameter (>= 2 sqrt(d) for covertness).
      num: number of draws.
      rng: numpy Generator.
      dg_method: discrete Gaussian sampler, "cks" (exact) or "table" (fast).
      require_covertness: make gamma < 2 sqrt(d) an error instead of a warning.
      out: optional C-contiguous float64 [num, d] buffer to write into.

    Returns:
      float64 array [num, d] (`out` if given).
    """
    w = _check_key(w)
    sigma = checks.check_positive(sigma, "sigma")
    num = checks.check_positive_int(num, "num")
    beta, gamma = check_parameters(w.shape[-1], beta, gamma,
                                   require_covertness=require_covertness)
    if w.ndim == 2 and w.shape[0] != num:
        raise ValueError(f"w has {w.shape[0]} keys but num={num}")
    checks.check_rng(rng)
    if dg_method not in ("cks", "table"):
        raise ValueError(f"dg_method must be 'cks' or 'table', got {dg_method!r}")
    if out is not None and (not isinstance(out, np.ndarray) or out.dtype != np.float64
                            or out.shape != (num, w.shape[-1])
                            or not out.flags.c_contiguous):
        raise ValueError(f"out must be a C-contiguous float64 array of shape "
                         f"{(num, w.shape[-1])}")
    _warn_research("pancake_noise")
    return _pancake_noise(w, sigma, beta, gamma, num, rng, dg_method, out)


def gpm(q: Any, w: Any, sigma: float, beta: float, gamma: float, *, rng: np.random.Generator,
        dg_method: str = "cks", require_covertness: bool = False) -> np.ndarray:
    """Releases q + GPM noise (GPM Def 3.1), float64.

    Args:
      q: query answer(s), float64 [d] or [m, d].
      w: key, float64 unit vector [d] (or [m, d], one key per row of q).
      sigma, beta, gamma, rng, dg_method, require_covertness: as in `pancake_noise`.

    Returns:
      float64 array with the shape of q.
    """
    q = _float64_array("q", q)
    if q.ndim not in (1, 2):
        raise ValueError(f"q must have shape [d] or [m, d], got {q.shape}")
    w = _check_key(w)
    if q.shape[-1] != w.shape[-1]:
        raise ValueError(f"q has dimension {q.shape[-1]} but w has {w.shape[-1]}")
    num = 1 if q.ndim == 1 else q.shape[0]
    noise = pancake_noise(w, sigma, beta, gamma, num, rng=rng, dg_method=dg_method,
                          require_covertness=require_covertness)
    return q + (noise[0] if q.ndim == 1 else noise)


def gm(q: Any, sigma: float, *, rng: np.random.Generator) -> np.ndarray:
    """Releases q + N(0, sigma^2 I), float64: the genuine mechanism GPM imitates (GPM Sec. 2)."""
    q = _float64_array("q", q)
    sigma = checks.check_positive(sigma, "sigma")
    checks.check_rng(rng)
    return q + sigma * rng.standard_normal(q.shape)


def tf_pancake_noise(w: Any, sigma: float, beta: float, gamma: float, num: int, *,
                     seed: Any, require_covertness: bool = False):
    """TensorFlow float64 GPM noise with stateless seeds (GPM Lemma 2.6).

    The discrete Gaussian uses the table path (inverse CDF of N_Z(0, v) truncated at 14
    standard deviations), driven by `tf.random.stateless_uniform`.

    Args:
      w: key, float64 unit vector [d] (numpy or tf.float64 tensor).
      sigma, beta, gamma, require_covertness: as in `pancake_noise`.
      num: number of draws.
      seed: stateless seed, shape [2] integers.

    Returns:
      tf.float64 tensor [num, d].
    """

    w_np = _check_key(w)
    if w_np.ndim != 1:
        raise ValueError("w must have shape [d] for tf_pancake_noise")
    sigma = checks.check_positive(sigma, "sigma")
    num = checks.check_positive_int(num, "num")
    beta, gamma = check_parameters(w_np.shape[0], beta, gamma,
                                   require_covertness=require_covertness)
    b2g2 = beta * beta + gamma * gamma
    variance = b2g2 / (2.0 * math.pi)
    if math.sqrt(variance) > _TABLE_MAX_STD:
        raise ValueError("gamma too large for the TF table path (sqrt(v) > 1e5)")
    _warn_research("tf_pancake_noise")
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=2)
    d = w_np.shape[0]
    w_t = tf.constant(w_np, tf.float64)
    g = tf.random.stateless_normal([num, d], seed=seeds[0], dtype=tf.float64)
    gw = tf.linalg.matvec(g, w_t)
    z, cdf = _dg_table(variance)
    u = tf.random.stateless_uniform([num], seed=seeds[1], dtype=tf.float64)
    idx = tf.searchsorted(tf.constant(cdf, tf.float64), u, side="right")
    idx = tf.minimum(idx, z.size - 1)
    k = tf.gather(tf.constant(z.astype(np.float64), tf.float64), idx)
    c = beta / math.sqrt(b2g2)
    coef = (c - 1.0) * gw + (_SQRT_2PI * gamma / b2g2) * k
    return sigma * (g + coef[:, None] * w_t[None, :])


def sample_hclwe_rejection(w: Any, beta: float, gamma: float, num: int, *,
                           rng: np.random.Generator) -> np.ndarray:
    """Validation sampler for the UNSCALED hCLWE H_{w,beta,gamma} by rejection (GPM Def 2.5).

    Draws y ~ N(0, I/(2 pi)) and accepts with probability sum_z rho_beta(z - gamma y.w) / M,
    M = sum_z rho_beta(z) (the maximum, reached at integer arguments). Acceptance is about
    beta, so use it only in tests with small d and moderate beta (e.g. 0.3).

    Args:
      w: key, float64 unit vector [d].
      beta, gamma: hCLWE parameters.
      num: number of samples.
      rng: numpy Generator.

    Returns:
      float64 array [num, d].
    """
    w = _check_key(w)
    if w.ndim != 1:
        raise ValueError("w must have shape [d]")
    beta = checks.check_positive(beta, "beta")
    gamma = checks.check_positive(gamma, "gamma")
    num = checks.check_positive_int(num, "num")
    if beta < 0.05:
        raise ValueError(f"beta={beta:g} is too small for the rejection sampler (rate ~ beta)")
    _warn_research("sample_hclwe_rejection")
    d = w.shape[0]
    zs = np.arange(-8, 9, dtype=np.float64)[None, :]

    def periodic(u: np.ndarray) -> np.ndarray:  # sum_z rho_beta(z - u), GPM Def 2.5
        frac = u - np.round(u)
        return np.exp(-math.pi * ((zs - frac[:, None]) / beta) ** 2).sum(axis=1)

    top = float(periodic(np.zeros(1))[0])
    out = np.empty((num, d))
    filled = 0
    while filled < num:
        batch = int((num - filled) / beta * 1.3) + 64
        y = rng.standard_normal((batch, d)) / _SQRT_2PI
        keep = y[rng.random(batch) * top < periodic(gamma * (y @ w))][:num - filled]
        out[filled:filled + len(keep)] = keep
        filled += len(keep)
    return out


class GaussianPancakeMechanism:
    """A configured GPM (research/attack code; warns on construction).

    Attributes:
      key: the float64 unit key w.
      sigma, beta, gamma: mechanism parameters.
    """

    def __init__(self, key: Any, sigma: float, beta: float, gamma: float, *,
                 dg_method: str = "cks", require_covertness: bool = True):
        """Validates the parameters.

        Args:
          key: float64 unit vector [d].
          sigma: noise std of the imitated Gaussian mechanism.
          beta: pancake width parameter, > 0.
          gamma: spacing parameter; by default gamma < 2 sqrt(d) is an error.
          dg_method: "cks" or "table".
          require_covertness: set False to allow gamma < 2 sqrt(d) (with a warning).
        """
        self.key = _check_key(key)
        if self.key.ndim != 1:
            raise ValueError("key must have shape [d]")
        self.sigma = checks.check_positive(sigma, "sigma")
        self.beta, self.gamma = check_parameters(self.key.shape[0], beta, gamma,
                                                 require_covertness=require_covertness)
        if dg_method not in ("cks", "table"):
            raise ValueError(f"dg_method must be 'cks' or 'table', got {dg_method!r}")
        self.dg_method = dg_method
        _warn_research("GaussianPancakeMechanism")

    @property
    def dim(self) -> int:
        """Dimension d."""
        return int(self.key.shape[0])

    def noise(self, num: int, *, rng: np.random.Generator) -> np.ndarray:
        """Returns [num, d] float64 GPM noise."""
        return _pancake_noise(self.key, self.sigma, self.beta, self.gamma,
                              checks.check_positive_int(num, "num"), rng, self.dg_method)

    def __call__(self, q: Any, *, rng: np.random.Generator) -> np.ndarray:
        """Releases q + noise for q of shape [d] or [m, d]."""
        q = _float64_array("q", q)
        if q.shape[-1] != self.dim or q.ndim not in (1, 2):
            raise ValueError(f"q must have shape [{self.dim}] or [m, {self.dim}], got {q.shape}")
        noise = self.noise(1 if q.ndim == 1 else q.shape[0], rng=rng)
        return q + (noise[0] if q.ndim == 1 else noise)

    def attack(self, y: Any, q0: Any, q1: Any) -> np.ndarray:
        """The key holder's guess(es) of which neighbour produced y (see `distinguish`)."""
        return distinguish(y, q0, q1, self.key, self.sigma, self.beta, self.gamma)


# --------------------------------------------------------------------------------------------
# The key holder's distinguishing attack and its oracles.


def distinguish(y: Any, q0: Any, q1: Any, w: Any, sigma: float, beta: float, gamma: float
                ) -> np.ndarray:
    """Key holder's attack: which of q0, q1 lies on the pancakes through y (GPM Sec. 5).

    r_i = (y - q_i).w / S, e_i = |r_i - round(r_i)|, guess argmin_i e_i, ties -> 1 (as the
    authors' code does). The attacker must use exactly the q0, q1 the mechanism used.

    Args:
      y: released output(s), float64 [d] or [m, d].
      q0, q1: the neighbours' query answers, [d] or [m, d].
      w: key(s), [d] or [m, d].
      sigma, beta, gamma: GPM parameters.

    Returns:
      int64 array [m] of guesses in {0, 1} (shape [] for a single y).
    """
    y = _float64_array("y", y)
    q0 = _float64_array("q0", q0)
    q1 = _float64_array("q1", q1)
    w = _check_key(w)
    s = spacing(sigma, beta, gamma)
    for name, arr in (("q0", q0), ("q1", q1), ("w", w)):
        if arr.shape[-1] != y.shape[-1]:
            raise ValueError(f"{name} has dimension {arr.shape[-1]} but y has {y.shape[-1]}")
    # GPM Sec. 5 attack: distance of the projected residual to the nearest pancake.
    r0 = np.sum((y - q0) * w, axis=-1) / s
    r1 = np.sum((y - q1) * w, axis=-1) / s
    e0 = np.abs(r0 - np.round(r0))
    e1 = np.abs(r1 - np.round(r1))
    return np.where(e0 < e1, 0, 1).astype(np.int64)


def realisable_t(dq: Any, w: Any, sigma: float, beta: float, gamma: float
                 ) -> tuple[int, float]:
    """Splits w.dq = S (T + t) into its integer T and fractional t in [-0.5, 0.5) (GPM Thm 4.2).

    Args:
      dq: q(D1) - q(D0), float64 [d].
      w: key [d].
      sigma, beta, gamma: GPM parameters.

    Returns:
      (T, t).
    """
    dq = _float64_array("dq", dq)
    w = _check_key(w)
    x = float(dq @ w) / spacing(sigma, beta, gamma)
    big_t = math.floor(x + 0.5)
    return int(big_t), x - big_t


def _periodic_interval_mass(center: Any, half_width: float, scale: float) -> Any:
    """P[dist(u - center, Z) < half_width] for u ~ N(0, scale^2), summed over copies of Z.

    `center` may be an array; returns a float for a scalar center, else an array.
    """
    k_max = int(math.ceil(10.0 * scale)) + 3
    ks = np.arange(-k_max, k_max + 1, dtype=np.float64)
    c = np.asarray(center, dtype=np.float64)[..., None]
    hi = special.ndtr((ks + c + half_width) / scale)
    lo = special.ndtr((ks + c - half_width) / scale)
    mass = np.sum(hi - lo, axis=-1)
    return float(mass) if mass.ndim == 0 else mass


def success_exact(t: float, beta: float, gamma: float) -> float:
    """Exact success of the key attack when w.dq = S (T + t), for a fixed key and pair.

    P_succ(t) = P[dist(u, Z) < dist(u - t, Z)], u ~ N(0, tau^2) (derived here, not in the paper):
    the set {u: dist(u, Z) < dist(u - t, Z)} is the union over k of the intervals
    (k + |t|/2 - 1/2, k + |t|/2) shifted to the side away from t.

    Args:
      t: fractional shift in [-0.5, 0.5].
      beta, gamma: GPM parameters.

    Returns:
      success probability in [0.5, 1].
    """
    t = float(t)
    if not -0.5 <= t <= 0.5:
        raise ValueError(f"t must be in [-0.5, 0.5], got {t}")
    scale = tau(beta, gamma)
    a = abs(t)
    # Interval (a/2 - 1/2, a/2) has centre a/2 - 1/4 and half-width 1/4 (the sum over k).
    return _periodic_interval_mass(a / 2.0 - 0.25, 0.25, scale)


def success_paper_bound(t: float, beta: float, gamma: float) -> float:
    """The paper's lower bound 1 - 2 Phi(-x) on the attack's success (GPM Thm 5.1)."""
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    x = (gamma * abs(float(t)) / beta) * math.sqrt(math.pi / (2.0 * (beta * beta + gamma * gamma)))
    return 1.0 - 2.0 * float(special.ndtr(-x))  # GPM Thm 5.1


def success_averaged(dq_norm: float, sigma: float, beta: float, gamma: float, d: int, *,
                     exact: bool = False) -> float:
    """Success of the key attack averaged over a uniformly random key (derived, not in the paper).

    Approximation (w.dq ~ ||dq|| N(0, 1/d), pancake spacing much larger than |w.dq|):
    1/2 + arctan(||dq|| sqrt(beta^2 + gamma^2) / (2 sqrt(d) sigma beta)) / pi.
    With exact=True, integrates `success_exact` over the exact law of w.dq (GPM Lemma B.1:
    the projection of a fixed unit vector on a uniform key has density proportional to
    (1 - u^2)^((d-3)/2)), including the wrap-around of the fractional part.

    Args:
      dq_norm: ||q(D1) - q(D0)||, >= 0.
      sigma, beta, gamma: GPM parameters.
      d: dimension (>= 2).
      exact: numerical integration instead of the arctan formula.

    Returns:
      success probability.
    """
    dq_norm = float(dq_norm)
    if not math.isfinite(dq_norm) or dq_norm < 0:
        raise ValueError(f"dq_norm must be finite and >= 0, got {dq_norm}")
    sigma = checks.check_positive(sigma, "sigma")
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    d = checks.check_positive_int(d, "d")
    if not exact:
        c = dq_norm * math.hypot(beta, gamma) / (2.0 * math.sqrt(d) * sigma * beta)
        return 0.5 + math.atan(c) / math.pi  # E|Phi(c|Z|)| = 1/2 + arctan(c)/pi
    if d < 3:
        raise ValueError("d must be >= 3 for exact=True")
    s = spacing(sigma, beta, gamma)
    # u = w.e for a unit e: density of P_T (GPM Lemma B.1); integrate over z = u sqrt(d) on a
    # grid that is dense near z = 0, where the success drops to 1/2 within |z| ~ sigma_w.
    z_max = min(12.0, math.sqrt(d) * (1.0 - 1e-12))
    grid = np.linspace(-1.0, 1.0, 200001)
    z = z_max * np.sinh(12.0 * grid) / math.sinh(12.0)
    u = z / math.sqrt(d)
    log_dens = 0.5 * (d - 3) * np.log1p(-u * u)
    dens = np.exp(log_dens - log_dens.max())
    x = dq_norm * u / s
    frac = x - np.floor(x + 0.5)
    succ = _periodic_interval_mass(np.abs(frac) / 2.0 - 0.25, 0.25, tau(beta, gamma))
    return float(np.trapezoid(succ * dens, z) / np.trapezoid(dens, z))


def best_gm_success(dq_norm: float, sigma: float) -> float:
    """Best possible success against the genuine GM: Phi(||dq|| / (2 sigma)) (derived)."""
    return float(special.ndtr(float(dq_norm) / (2.0 * checks.check_positive(sigma, "sigma"))))


# --------------------------------------------------------------------------------------------
# Privacy bounds against the key holder.


def eps_lower(t: float, beta: float, gamma: float, delta: float) -> float:
    """Lower bound on GPM's epsilon for a pair realising fractional shift t (GPM Thm 4.2).

    GPM is not (eps, delta)-DP for eps < log((1 - delta) / (2 Phi(-x)) - 1), x as in
    Thm 5.1; computed with a stable log-CDF.

    Args:
      t: fractional shift in [-0.5, 0.5].
      beta: in (0, 1).
      gamma: > 1.
      delta: in (0, 0.5).

    Returns:
      the bound (float64; <= 0 means the bound says nothing).
    """
    t = float(t)
    if not -0.5 <= t <= 0.5:
        raise ValueError(f"t must be in [-0.5, 0.5], got {t}")
    beta = checks.check_unit_interval(beta, "beta")
    gamma = checks.check_positive(gamma, "gamma")
    if gamma <= 1.0:
        raise ValueError(f"gamma must be > 1 for GPM Thm 4.2, got {gamma}")
    delta = checks.check_unit_interval(delta, "delta")
    if delta >= 0.5:
        raise ValueError(f"delta must be in (0, 0.5) for GPM Thm 4.2, got {delta!r}")
    x = (gamma * abs(t) / beta) * math.sqrt(math.pi / (2.0 * (beta * beta + gamma * gamma)))
    log_two_phi = math.log(2.0) + float(special.log_ndtr(-x))  # log(2 Phi(-x))
    inner = -delta - math.exp(log_two_phi)
    if inner <= -1.0:
        return -math.inf
    return math.log1p(inner) - log_two_phi  # GPM Thm 4.2: log((1-delta)/(2Phi(-x)) - 1)


def eps_upper(delta: float, sigma: float, beta: float, gamma: float,
              sensitivity: float = 1.0) -> float:
    """Upper bound: GPM is (eps_up, delta)-DP (GPM Thm 4.4, App. B.3).

    eps_up = Thm 2.3 epsilon with the sensitivity inflated to Delta sqrt(beta^2+gamma^2)/beta.
    """
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    sensitivity = checks.check_positive(sensitivity, "sensitivity")
    return gm_eps(sigma, delta, sensitivity * math.hypot(beta, gamma) / beta)  # GPM Thm 4.4


def rdp_upper(alpha: float, sigma: float, beta: float, gamma: float,
              sensitivity: float = 1.0) -> float:
    """Renyi-DP upper bound alpha (beta^2+gamma^2) Delta^2 / (2 beta^2 sigma^2) (derived)."""
    alpha = checks.check_positive(alpha, "alpha")
    if alpha <= 1.0:
        raise ValueError(f"alpha must be > 1, got {alpha}")
    sigma = checks.check_positive(sigma, "sigma")
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    sensitivity = checks.check_positive(sensitivity, "sensitivity")
    return alpha * (beta * beta + gamma * gamma) * sensitivity ** 2 / (
        2.0 * beta * beta * sigma * sigma)


def pair_rdp(alpha: float, dq: Any, w: Any, sigma: float, beta: float, gamma: float) -> float:
    """Renyi divergence of order alpha for one pair: alpha M^2 / 2 (derived).

    M^2 = (||dq||^2 + (gamma^2/beta^2) (w.dq)^2) / sigma^2.
    """
    alpha = checks.check_positive(alpha, "alpha")
    if alpha <= 1.0:
        raise ValueError(f"alpha must be > 1, got {alpha}")
    dq = _float64_array("dq", dq)
    w = _check_key(w)
    sigma = checks.check_positive(sigma, "sigma")
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    m2 = (float(dq @ dq) + (gamma / beta) ** 2 * float(dq @ w) ** 2) / sigma ** 2
    return 0.5 * alpha * m2


def key_holder_noise_multiplier(noise_multiplier: float, beta: float, gamma: float) -> float:
    """DP-SGD noise multiplier that protects against the key holder (derived).

    GPM is post-processing of a Gaussian whose smallest std (along w) is beta/sqrt(beta^2 +
    gamma^2) times the nominal one, so a key-holder accountant runs the usual subsampled
    Gaussian analysis with z_eff = z beta / sqrt(beta^2 + gamma^2) (e.g. z = 50.97,
    beta = 1e-5, gamma = 12483 gives about 4e-8: no meaningful guarantee).
    """
    z = checks.check_positive(noise_multiplier, "noise_multiplier")
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    return z * beta / math.hypot(beta, gamma)


def lemma41_probabilities(t: float, beta: float, gamma: float) -> tuple[float, float]:
    """Exact P[Y in A(t)] and P[Y' in A(t)] of GPM Lemma 4.1.

    Y ~ H_{1,beta,gamma} is a mixture of Gaussians of equal std centred on the lattice
    gamma Z / (beta^2 + gamma^2) with weights summing to 1; A(t) is a periodic union of
    intervals of half-width |t|/2 (lattice units) around that lattice. Summing the
    component CDFs over all intervals therefore reduces to the mass of N(0, tau^2) within
    |t|/2 of Z (for Y) and within |t|/2 of Z - t (for Y' = Y + (T + t) lattice units).

    Returns:
      (P[Y in A(t)], P[Y' in A(t)]).
    """
    t = float(t)
    if not -0.5 <= t <= 0.5:
        raise ValueError(f"t must be in [-0.5, 0.5], got {t}")
    scale = tau(beta, gamma)
    half = abs(t) / 2.0
    return (_periodic_interval_mass(0.0, half, scale),
            _periodic_interval_mass(-t, half, scale))


def hockey_stick_delta(eps: Any, sigma: float, beta: float, gamma: float,
                       shift: float, *, points_per_std: int = 40) -> np.ndarray:
    """delta(eps) = int max(0, p0 - e^eps p1) for the 1-D GPM projections.

    p0 is the law of GPM noise along w (a mixture of N(k S, sigma_w^2) with discrete Gaussian
    weights) and p1 the same law shifted by `shift` (= w.dq; for dq parallel to w the
    orthogonal parts are identical and the full-dimensional divergence equals this one).

    Args:
      eps: scalar or array of epsilons.
      sigma, beta, gamma: GPM parameters.
      shift: w.dq.
      points_per_std: grid resolution per pancake std.

    Returns:
      float64 array of deltas, one per eps.
    """
    sigma = checks.check_positive(sigma, "sigma")
    beta, gamma = checks.check_positive(beta, "beta"), checks.check_positive(gamma, "gamma")
    eps_arr = np.atleast_1d(np.asarray(eps, dtype=np.float64))
    s = spacing(sigma, beta, gamma)
    sw = pancake_std(sigma, beta, gamma)
    v = (beta * beta + gamma * gamma) / (2.0 * math.pi)
    k_max = int(math.ceil(12.0 * math.sqrt(v))) + 2
    ks = np.arange(-k_max, k_max + 1, dtype=np.float64)
    wts = np.exp(-ks ** 2 / (2.0 * v))
    wts /= wts.sum()
    lo = ks[0] * s - 12.0 * sw + min(0.0, shift)
    hi = ks[-1] * s + 12.0 * sw + max(0.0, shift)
    n = int((hi - lo) / sw * points_per_std) + 1
    if n > 20_000_000:
        raise ValueError("grid too large: use moderate beta and gamma")
    x = np.linspace(lo, hi, n)

    def density(offset: float) -> np.ndarray:
        out = np.zeros(n)
        for k, a in zip(ks, wts):
            c = k * s + offset
            sel = slice(max(0, int((c - 12 * sw - lo) / (hi - lo) * (n - 1))),
                        min(n, int((c + 12 * sw - lo) / (hi - lo) * (n - 1)) + 2))
            out[sel] += a * stats.norm.pdf(x[sel], loc=c, scale=sw)
        return out

    p0, p1 = density(0.0), density(shift)
    return np.array([np.trapezoid(np.maximum(0.0, p0 - math.exp(e) * p1), x)
                     for e in eps_arr])


def key_holder_view(sigma: float, delta: float, beta: float, gamma: float, *,
                    sensitivity: float = 1.0, t: float = 0.25) -> dict:
    """The guarantee GPM claims (that of GM) next to what holds against the key holder.

    Args:
      sigma: noise std (as calibrated for the claimed guarantee).
      delta: delta of the claim, in (0, 0.5).
      beta, gamma: GPM parameters.
      sensitivity: L2 sensitivity.
      t: fractional shift for the lower bound (the paper plots t = 0.25).

    Returns:
      dict with claimed_eps (GPM Thm 2.3), eps_lower (Thm 4.2), eps_upper (Thm 4.4),
      delta, and a one-line `statement`.
    """
    claimed = gm_eps(sigma, delta, sensitivity)
    low = eps_lower(t, beta, gamma, delta)
    up = eps_upper(delta, sigma, beta, gamma, sensitivity)
    return {
        "claimed_eps": claimed, "eps_lower": low, "eps_upper": up, "delta": delta, "t": t,
        "statement": (f"claimed ({claimed:.4g}, {delta:g})-DP as a Gaussian mechanism; against "
                      f"the key holder it is ({up:.4g}, {delta:g})-DP (GPM Thm 4.4) and not "
                      f"(eps, {delta:g})-DP for any eps < {low:.4g} once a neighbouring pair "
                      f"realises the fractional shift t = {t:g} (GPM Thm 4.2)"),
    }
