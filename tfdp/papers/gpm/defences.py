"""Defences against a backdoored Gaussian sampler: Haar rotation and trusted top-up (GPM Sec. 6)."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from tfdp import checks
from tfdp.papers.gpm import pancake

_HAAR_MAX_DIM = 4096  # tfdp's limit: a dense Haar matrix is d^2 memory

StandardSampler = Callable[[int, np.random.Generator], np.ndarray]


def haar_rotation(d: int, *, rng: np.random.Generator) -> np.ndarray:
    """Draws Q uniformly (Haar) from SO(d), float64 (GPM Algorithm 1).

    QR of a standard Gaussian matrix with the signs of R's diagonal moved into Q (Mezzadri
    2007) gives Haar on O(d); flipping one column when det = -1 gives Haar on SO(d).

    Args:
      d: dimension, 1 <= d <= 4096 (dense d x d matrix).
      rng: numpy Generator (it must itself be trustworthy: GPM Sec. 6.1, "cat and mouse").

    Returns:
      float64 [d, d] orthogonal matrix with determinant +1.
    """
    d = checks.check_int(d, "d", minimum=1)
    if d > _HAAR_MAX_DIM:
        raise ValueError(f"d={d} > {_HAAR_MAX_DIM}: a dense Haar rotation needs d^2 memory; use "
                         "trusted_top_up for large d")
    checks.check_rng(rng)
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    q *= np.sign(np.diag(r))[None, :]
    if np.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


def _fwht(x: np.ndarray) -> np.ndarray:
    """Orthonormal fast Walsh-Hadamard transform of each row of x ([m, d], d a power of 2)."""
    m, d = x.shape
    h = 1
    x = x.copy()
    while h < d:
        v = x.reshape(m, d // (2 * h), 2, h)
        a, b = v[:, :, 0, :].copy(), v[:, :, 1, :]
        v[:, :, 0, :] += b
        v[:, :, 1, :] = a - b
        h *= 2
    return x / math.sqrt(d)


def hadamard_rotation(d: int, *, rng: np.random.Generator,
                      rounds: int = 3) -> Callable[[np.ndarray], np.ndarray]:
    """A structured random rotation r -> (H D_k) ... (H D_1) r for large d (HEURISTIC).

    H is the orthonormal Walsh-Hadamard matrix and D_i are random sign diagonals, so the map
    is orthogonal and costs O(d log d) per vector instead of the d^2 of a dense Haar Q. It
    is NOT Haar and NOT covered by GPM Prop A.5 (docs/gpm.md): use it as a heuristic only; the
    trusted top-up is the defence with an argument behind it at large d.

    Args:
      d: dimension, a power of two.
      rng: numpy Generator for the signs.
      rounds: number of H D blocks.

    Returns:
      function mapping [m, d] (or [d]) arrays to their rotations.
    """
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 2 or d & (d - 1):
        raise ValueError(f"d must be a power of two >= 2, got {d!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    checks.check_rng(rng)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(rounds, d))

    def rotate(r: np.ndarray) -> np.ndarray:
        x = np.atleast_2d(np.asarray(r, dtype=np.float64))
        for s in signs:
            x = _fwht(x * s)
        return x[0] if np.ndim(r) == 1 else x

    return rotate


def rotated_release(q: Any, sigma: float, rotation: Any, standard_sampler: StandardSampler,
                    *, rng: np.random.Generator, num: int | None = None) -> np.ndarray:
    """Releases q + sigma Q r with r from an untrusted sampler claiming N(0, I) (GPM Algorithm 1).

    If the sampler is honest the output law is unchanged; if it is GPM with key w, the key
    becomes Qw, uniform on the sphere and unknown to the key holder (GPM Prop A.5).

    Args:
      q: query answer, float64 [d].
      sigma: noise std, > 0.
      rotation: Q from `haar_rotation` (kept secret from the sampler's author), or a
        function [m, d] -> [m, d] such as `hadamard_rotation` (heuristic).
      standard_sampler: callable (num, rng) -> [num, d] array claimed to be N(0, I).
      rng: numpy Generator passed to the sampler.
      num: number of releases; None returns one release of shape [d].

    Returns:
      float64 [d] or [num, d].
    """
    q = np.asarray(q, dtype=np.float64)
    if q.ndim != 1:
        raise ValueError(f"q must have shape [d], got {q.shape}")
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be finite and > 0, got {sigma}")
    if not callable(rotation):
        rotation = np.asarray(rotation, dtype=np.float64)
        if rotation.shape != (q.shape[0], q.shape[0]):
            raise ValueError(f"rotation must have shape {(q.shape[0], q.shape[0])}, "
                             f"got {rotation.shape}")
    checks.check_rng(rng)
    r = np.asarray(standard_sampler(1 if num is None else num, rng), dtype=np.float64)
    rotated = rotation(r) if callable(rotation) else r @ rotation.T
    out = q + sigma * rotated  # y = q + sigma Q r, row-wise (GPM Algorithm 1)
    return out[0] if num is None else out


def trusted_top_up(y1: Any, sigma: float, *, rng: np.random.Generator) -> np.ndarray:
    """Server 2 of the two-server reduction publishes y1 + N(0, sigma^2 I) (GPM Sec. 6.2.1).

    The key holder then faces at least a genuine Gaussian mechanism with std sigma; the RMS
    error grows by sqrt(2) when both servers add the full sigma (see `top_up_costs`).

    Args:
      y1: server 1's (possibly GPM) output, float64 [d] or [m, d].
      sigma: std of the trusted noise.
      rng: the honest server's numpy Generator.

    Returns:
      float64 array like y1.
    """
    y1 = np.asarray(y1)
    if y1.dtype != np.float64:
        raise ValueError(f"y1 must be float64, got {y1.dtype}")
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be finite and > 0, got {sigma}")
    checks.check_rng(rng)
    return y1 + sigma * rng.standard_normal(y1.shape)


def top_up_costs(sigma: float, d: int, delta: float, sensitivity: float = 1.0,
                 split: str = "full") -> dict:
    """Costs of the trusted top-up (GPM Sec. 6.2.1; docs/gpm.md).

    split="full": both servers add N(0, sigma^2 I); the key holder faces the honest sigma, so
    the claimed (GM) guarantee holds; RMS error sigma sqrt(2d) (x sqrt(2)).
    split="half": both add sigma / sqrt(2); the error stays sigma sqrt(d), but against the key
    holder only the honest sigma / sqrt(2) protects, so the guarantee weakens to GM at
    sigma / sqrt(2) (GPM Thm 2.3).

    Returns:
      dict with rms_error, rms_error_ratio (vs one GM), eps_claimed, eps_vs_key_holder.
    """
    if split not in ("full", "half"):
        raise ValueError(f"split must be 'full' or 'half', got {split!r}")
    d = checks.check_int(d, "d", minimum=1)
    claimed = pancake.gm_eps(sigma, delta, sensitivity)
    if split == "full":
        return {"split": split, "rms_error": sigma * math.sqrt(2.0 * d),
                "rms_error_ratio": math.sqrt(2.0), "eps_claimed": claimed,
                "eps_vs_key_holder": claimed}
    honest = sigma / math.sqrt(2.0)
    return {"split": split, "rms_error": sigma * math.sqrt(d), "rms_error_ratio": 1.0,
            "eps_claimed": claimed,
            "eps_vs_key_holder": pancake.gm_eps(honest, delta, sensitivity)}


def distributed_effective_sigma(n_servers: int, n_backdoored: int, n_colluding: int,
                                threshold: int, sigma: float) -> float | None:
    """Protective noise std of distributed GM with secure aggregation (GPM Sec. 6.2).

    With fewer colluders than the secret-sharing threshold, the backdoored servers' noise is
    post-processing for the key holder and the honest noise is sqrt(N - N_b - N_c) sigma.
    (The paper compares it with sqrt(N - N_b) sigma "without backdoor"; the intended value is
    sqrt(N - N_c) sigma, tfdp's reading.) With N_c >= threshold the colluders reconstruct each
    backdoored server's output and GPM's single-server bounds apply: returns None.

    Returns:
      the effective std, or None when the aggregation no longer protects.
    """
    for name, v in (("n_servers", n_servers), ("n_backdoored", n_backdoored),
                    ("n_colluding", n_colluding), ("threshold", threshold)):
        checks.check_int(v, name, minimum=0)
    if n_backdoored + n_colluding > n_servers:
        raise ValueError("n_backdoored + n_colluding must be <= n_servers")
    if n_colluding >= threshold:
        return None
    return math.sqrt(n_servers - n_backdoored - n_colluding) * sigma
