"""Black-box conformance suite for Gaussian and Laplace noise samplers (docs/gpm.md, "Audits")."""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
from scipy import special, stats

from tfdp import checks
from tfdp.audit import DISCLAIMER

# sampler(num, seed) -> float array [num, d] of noise claimed iid Gaussian(0, scale^2) or
# Laplace(0, scale) per coordinate.
Sampler = Callable[[int, int], np.ndarray]

FAMILIES = ("gaussian", "laplace")


@dataclasses.dataclass
class TestResult:
    """One hypothesis test of the suite."""

    name: str
    statistic: float
    p_value: float
    rejected: bool = False


@dataclasses.dataclass
class ConformanceReport:
    """Outcome of `conformance_suite`.

    Attributes:
      passed: no test rejected after Holm-Bonferroni control of the family-wise error.
      alpha: family-wise significance level.
      family, scale, n, d: what was tested.
      results: every individual test (p-values before correction, `rejected` after).
      notes: informational findings (e.g. seed reproducibility).
      disclaimer: passing does not prove the absence of a cryptographic backdoor.
    """

    passed: bool
    alpha: float
    family: str
    scale: float
    n: int
    d: int
    results: list[TestResult]
    notes: list[str]
    disclaimer: str = DISCLAIMER

    @property
    def rejected(self) -> list[TestResult]:
        """The tests rejected after multiple-testing control."""
        return [r for r in self.results if r.rejected]

    def groups(self) -> dict[str, dict]:
        """Per test group (name prefix before ':'): count, rejections, smallest p-value."""
        out: dict[str, dict] = {}
        for r in self.results:
            g = out.setdefault(r.name.split(":")[0], {"tests": 0, "rejected": 0, "min_p": 1.0})
            g["tests"] += 1
            g["rejected"] += int(r.rejected)
            g["min_p"] = min(g["min_p"], r.p_value)
        return out

    def to_text(self) -> str:
        """A human-readable report (always ends with the disclaimer)."""
        lines = [f"sampler conformance ({self.family}, scale={self.scale:g}, n={self.n}, "
                 f"d={self.d}): {'PASS' if self.passed else 'FAIL'} "
                 f"(Holm-Bonferroni, family-wise alpha={self.alpha:g}, "
                 f"{len(self.results)} tests)"]
        for name, g in self.groups().items():
            lines.append(f"  {name:<14s} tests={g['tests']:<6d} rejected={g['rejected']:<5d} "
                         f"min p={g['min_p']:.3g}")
        lines += [f"  note: {n}" for n in self.notes]
        lines.append(f"  {self.disclaimer}")
        return "\n".join(lines)


def holm_bonferroni(p_values: np.ndarray, alpha: float) -> np.ndarray:
    """Holm's step-down procedure: boolean rejections with family-wise error <= alpha."""
    p = np.asarray(p_values, dtype=np.float64)
    order = np.argsort(p, kind="stable")
    m = p.size
    thresholds = alpha / (m - np.arange(m))
    ok = p[order] <= thresholds
    # Reject the smallest p-values up to the first one that fails its threshold.
    k = m if ok.all() else int(np.argmin(ok))
    rejected = np.zeros(m, dtype=bool)
    rejected[order[:k]] = True
    return rejected


def _cdf(family: str, scale: float) -> Callable[[np.ndarray], np.ndarray]:
    if family == "gaussian":
        return lambda x: special.ndtr(x / scale)
    return lambda x: stats.laplace.cdf(x, scale=scale)


def _char_fn(family: str, f: np.ndarray) -> np.ndarray:
    """Characteristic function of the standardised marginal (unit scale) at f."""
    if family == "gaussian":
        return np.exp(-0.5 * f * f)
    return 1.0 / (1.0 + f * f)


def _ecf_tests(x: np.ndarray, family: str, freqs: np.ndarray, label: str) -> list[TestResult]:
    """Empirical characteristic function of x (unit scale) vs the model at each frequency.

    With phi real (symmetric law), Re and Im of the empirical CF are uncorrelated with
    variances ((1 + phi(2f))/2 - phi(f)^2)/n and ((1 - phi(2f))/2)/n, so the normalised
    squared distance is asymptotically chi^2 with 2 degrees of freedom (p = exp(-stat/2)).
    At frequencies where phi ~ 0 this is the Rayleigh test of uniform phases.
    """
    n = x.shape[0]
    phase = np.outer(freqs, x)
    re = np.cos(phase).mean(axis=1)
    im = np.sin(phase).mean(axis=1)
    phi, phi2 = _char_fn(family, freqs), _char_fn(family, 2.0 * freqs)
    var_re = np.maximum((1.0 + phi2) / 2.0 - phi * phi, 1e-12) / n
    var_im = np.maximum((1.0 - phi2) / 2.0, 1e-12) / n
    stat = (re - phi) ** 2 / var_re + im * im / var_im
    return [TestResult(f"{label}:f={f:.3g}", float(s), float(math.exp(-s / 2.0)))
            for f, s in zip(freqs, stat)]


def _directions(d: int, num: int, rng: np.random.Generator) -> np.ndarray:
    if d == 2:
        # The small-d scan: `num` equally spaced directions in [0, pi) (docs/gpm.md, "Audits").
        theta = np.arange(num) * math.pi / num
        return np.stack([np.cos(theta), np.sin(theta)], axis=1)
    g = rng.standard_normal((num, d))
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def _check_suite_arguments(sampler: Sampler, family: str, scale: float, n: int,
                           alpha: float) -> int:
    """Checks `conformance_suite`'s arguments; returns n.

    Raises:
      ValueError: naming the argument.
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
    n = checks.check_int(n, "n", minimum=100)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not callable(sampler):
        raise ValueError("sampler must be callable as sampler(num, seed)")
    return n


def _moment_tests(x: np.ndarray, family: str, scale: float, n: int) -> list[TestResult]:
    """Per-coordinate z-tests of the mean and of the mean square (known scale)."""
    results = []
    m2 = scale ** 2 if family == "gaussian" else 2.0 * scale ** 2
    m4 = 3.0 * scale ** 4 if family == "gaussian" else 24.0 * scale ** 4
    z_mean = x.mean(axis=0) * math.sqrt(n / m2)
    z_var = (np.mean(x * x, axis=0) - m2) / math.sqrt((m4 - m2 * m2) / n)
    for name, z in (("mean", z_mean), ("variance", z_var)):
        p = 2.0 * special.ndtr(-np.abs(z))
        results += [TestResult(f"{name}:{j}", float(zj), float(pj))
                    for j, (zj, pj) in enumerate(zip(z, p))]
    return results


def _marginal_tests(x: np.ndarray, family: str, scale: float, cdf: Callable,
                    coords: np.ndarray, num_projections: int,
                    rng: np.random.Generator) -> list[TestResult]:
    """KS of the coordinates (and, Gaussian, of random projections) against the marginal, and
    of the norm against its law."""
    d = x.shape[1]
    results = []
    for j in coords:
        ks = stats.kstest(x[:, j], cdf)
        results.append(TestResult(f"ks_coord:{j}", float(ks.statistic), float(ks.pvalue)))

    if family == "gaussian":
        for i, u in enumerate(_directions(d, num_projections, rng) if d > 2 else []):
            ks = stats.kstest(x @ u, cdf)
            results.append(TestResult(f"ks_proj:{i}", float(ks.statistic), float(ks.pvalue)))
        ks = stats.kstest(np.sum(x * x, axis=1) / scale ** 2, stats.chi2(d).cdf)
    else:
        ks = stats.kstest(np.sum(np.abs(x), axis=1) / scale, stats.gamma(d).cdf)
    results.append(TestResult("norm", float(ks.statistic), float(ks.pvalue)))
    return results


def _scan_tests(x: np.ndarray, scale: float, cdf: Callable, dirs: np.ndarray, family: str,
                frequencies: np.ndarray) -> list[TestResult]:
    """KS and empirical characteristic function along each scan direction."""
    results = []
    for i, u in enumerate(dirs):
        proj = x @ u
        ks = stats.kstest(proj, cdf)
        results.append(TestResult(f"scan_ks:{i}", float(ks.statistic), float(ks.pvalue)))
        results += _ecf_tests(proj / scale, family, frequencies, f"scan_cf:{i}")
    return results


def _seed_reuse_tests(x: np.ndarray, x2: np.ndarray, x_again: np.ndarray
                      ) -> tuple[list[TestResult], list[str]]:
    """Repeated rows and correlation across two seeds; whether the same seed repeats."""
    results: list[TestResult] = []
    notes: list[str] = []
    both = np.concatenate([x, x2], axis=0)
    unique_rows = np.unique(both, axis=0).shape[0]
    dup = both.shape[0] - unique_rows
    results.append(TestResult("seed_reuse:repeated_rows", float(dup), 0.0 if dup else 1.0))
    a, b = x.ravel()[:1_000_000], x2.ravel()[:1_000_000]
    if np.std(a) > 0 and np.std(b) > 0:
        r = float(np.corrcoef(a, b)[0, 1])
    else:
        r = 1.0
    z = r * math.sqrt(a.size)
    results.append(TestResult("seed_reuse:correlation", r, float(2.0 * special.ndtr(-abs(z)))))
    if np.array_equal(x, x_again):
        notes.append("same seed gives identical output: known-answer tests against a public "
                     "reference implementation are possible (and are the only check that "
                     "catches a substituted sampler with a secret key)")
    else:
        notes.append("same seed gives different output: the sampler is not reproducible, so "
                     "no known-answer test is possible")
    return results, notes


def conformance_suite(sampler: Sampler, *, family: str, scale: float, n: int = 20000,
                      seed: int = 0, alpha: float = 1e-3, max_coordinates: int = 64,
                      num_projections: int = 32, scan_directions: int | None = None,
                      frequencies: np.ndarray | None = None) -> ConformanceReport:
    """Runs the black-box conformance tests on a noise sampler.

    Tests (each a p-value; Holm-Bonferroni over all of them at family-wise level alpha):
      mean        per-coordinate z-test of the mean (known scale);
      variance    per-coordinate z-test of the mean square against the model's second moment
                  (variance of x^2 from the model's fourth moment);
      ks_coord    Kolmogorov-Smirnov of up to `max_coordinates` coordinates against the marginal;
      ks_proj     (Gaussian) KS of random unit projections against N(0, scale^2);
      norm        (Gaussian) KS of ||x||^2 / scale^2 against chi^2_d; (Laplace) KS of
                  ||x||_1 / scale against Gamma(d);
      scan        direction/frequency scan: KS and empirical characteristic function (Rayleigh)
                  along `scan_directions` directions (equally spaced for d = 2, random
                  otherwise; coordinates only for Laplace) at `frequencies` (units 1/scale);
      seed_reuse  repeated rows within or across two calls with different seeds, and the
                  correlation of the two calls' outputs.
    A sampler that returns the same output for the same seed is noted (that enables
    known-answer tests), not failed.

    Args:
      sampler: callable (num, seed) -> [num, d] array.
      family: "gaussian" or "laplace".
      scale: claimed std (Gaussian) or Laplace scale b.
      n: samples per call.
      seed: seed of the first call; the second uses seed + 1; the suite's own directions
        come from a Generator seeded with `seed`.
      alpha: family-wise significance level.
      max_coordinates: coordinates tested by KS.
      num_projections: random projections (Gaussian).
      scan_directions: directions of the scan; default 360 for d = 2 (the small-d pancake
        detector of docs/gpm.md), else `num_projections`.
      frequencies: scan frequencies (units 1/scale); default 1, 2, ..., 32.

    Returns:
      ConformanceReport.
    """
    n = _check_suite_arguments(sampler, family, scale, n, alpha)
    if frequencies is None:
        frequencies = np.arange(1, 33, dtype=np.float64)
    frequencies = np.asarray(frequencies, dtype=np.float64)
    x = np.asarray(sampler(n, seed), dtype=np.float64)
    if x.ndim != 2 or x.shape[0] != n:
        raise ValueError(f"sampler must return an array [num, d]; got shape {x.shape}")
    x2 = np.asarray(sampler(n, seed + 1), dtype=np.float64)
    x_again = np.asarray(sampler(n, seed), dtype=np.float64)
    d = x.shape[1]
    if scan_directions is None:
        scan_directions = 360 if d == 2 else num_projections
    rng = np.random.default_rng(seed)
    cdf = _cdf(family, scale)
    results: list[TestResult] = []
    results += _moment_tests(x, family, scale, n)

    coords = (np.arange(d) if d <= max_coordinates
              else np.sort(rng.choice(d, max_coordinates, replace=False)))
    results += _marginal_tests(x, family, scale, cdf, coords, num_projections, rng)

    # Direction / frequency scan.
    if family == "gaussian":
        dirs = _directions(d, scan_directions, rng)
    else:
        dirs = np.eye(d)[coords]
    results += _scan_tests(x, scale, cdf, dirs, family, frequencies)

    # Seed reuse / repeated outputs (GPM Example 3.3).
    reuse, notes = _seed_reuse_tests(x, x2, x_again)
    results += reuse

    rejected = holm_bonferroni(np.array([r.p_value for r in results]), alpha)
    for res, rej in zip(results, rejected):
        res.rejected = bool(rej)
    return ConformanceReport(passed=not rejected.any(), alpha=alpha, family=family,
                             scale=float(scale), n=int(n), d=int(d), results=results,
                             notes=notes)


def known_answer_test(sampler: Sampler, reference: Sampler, seeds: tuple[int, ...] = (0, 1, 2),
                      num: int = 16) -> dict:
    """Bit-exact comparison of a seeded sampler with a public reference (GPM Sec. 6.3).

    Black-box statistics cannot tell GPM with an unknown key from GM; a known-answer test
    can, when the sampler is deterministic given its seed and the reference implementation
    is open: any substitution changes the bits.

    Args:
      sampler: the sampler under audit, (num, seed) -> array.
      reference: the open reference implementation, same signature.
      seeds: seeds to compare.
      num: draws per seed.

    Returns:
      dict with passed (all outputs identical), mismatched_seeds, max_abs_difference.
    """
    if not callable(sampler) or not callable(reference):
        raise ValueError("sampler and reference must be callable as f(num, seed)")
    if not seeds:
        raise ValueError("seeds must not be empty")
    bad, worst = [], 0.0
    for seed in seeds:
        a = np.asarray(sampler(num, seed))
        b = np.asarray(reference(num, seed))
        if a.shape != b.shape or a.dtype != b.dtype or not np.array_equal(a, b):
            bad.append(int(seed))
            if a.shape == b.shape:
                worst = max(worst, float(np.max(np.abs(a.astype(np.float64)
                                                        - b.astype(np.float64)))))
            else:
                worst = math.inf
    return {"passed": not bad, "mismatched_seeds": bad, "max_abs_difference": worst}
