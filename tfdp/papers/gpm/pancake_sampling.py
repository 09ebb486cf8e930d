"""GPM's samplers: key generation, discrete Gaussian samplers (exact Canonne-Kamath-Steinke
rejection and a fast table path), the pancake sampler in numpy and TensorFlow (float64), and
the mechanism object.

RESEARCH AND ATTACK CODE; see `tfdp.papers.gpm.pancake`. All arithmetic is float64.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import tensorflow as tf

from tfdp import checks
from tfdp.papers.gpm.pancake_bounds import distinguish
from tfdp.papers.gpm.pancake_params import (_SQRT_2PI, _check_key, _float64_array,
                                            _warn_research, check_parameters)

_TABLE_MAX_STD = 1e5   # tfdp: table path for sqrt(v) up to about 1e5
_CKS_MAX_STD = 1e7     # float64 geometric draws stay exact far beyond sqrt(v) = 1e6


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
