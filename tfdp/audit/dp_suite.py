"""Empirical DP audits of every noise mechanism tfdp ships, plus GPM with and without its key."""

from __future__ import annotations

import math
import warnings
from typing import Callable

import numpy as np

from tfdp import mechanisms
from tfdp.audit import empirical
from tfdp.audit import gdp
from tfdp import accounting
from tfdp import registry
import layers

_D = 16  # dimension of the audited query outputs


def _gaussian_mech(stddevs) -> empirical.Mechanism:
    s = np.asarray(stddevs, dtype=np.float64)
    return lambda x, num, rng: x + mechanisms.sample_gaussian(s, (num, x.size), rng=rng)


def _laplace_mech(scale) -> empirical.Mechanism:
    s = np.asarray(scale, dtype=np.float64)
    return lambda x, num, rng: x + mechanisms.sample_laplace(s, (num, x.size), rng=rng)


def _layer_mech(layer) -> empirical.Mechanism:
    def run(x, num, rng):
        del rng  # the layer draws from its own seeded stream
        batch = np.broadcast_to(x.astype(np.float32), (num, x.size))
        return np.asarray(layer(batch, training=True), dtype=np.float64)
    return run


# The DP-SGD smoke configuration (flags/baselines/dpsgd_smoke.flags on the 5000-record
# sample): q = 128/5000 and sigma solved for eps = 2 over 2 epochs of floor(5000/128) steps.
DPSGD_SMOKE = dict(num_examples=5000, batch_size=128, epochs=2, target_epsilon=2.0, delta=1e-5)


def dpsgd_smoke_step() -> tuple[float, float]:
    """(q, sigma) of one step of the DP-SGD smoke run, as its setup computes them."""
    c = DPSGD_SMOKE
    steps = c["epochs"] * (c["num_examples"] // c["batch_size"])
    sigma = accounting.dpsgd_noise_multiplier(
        target_epsilon=c["target_epsilon"], num_examples=c["num_examples"],
        batch_size=c["batch_size"], steps=steps, delta=c["delta"],
        accountant="rdp")  # the smoke flagfile's --dpsgd_accountant
    return c["batch_size"] / c["num_examples"], sigma


def _subsampled_gaussian_mech(q: float, sigma: float) -> empirical.Mechanism:
    """One DP-SGD step on a neighbouring pair (add/remove-one, clip norm C = 1).

    The released sum of clipped gradients is x * Bernoulli(q) + N(0, sigma^2 I): the target
    record (gradient x, ||x|| = C) joins the Poisson lot with probability q, every other
    record contributes 0 (the worst case), and the noise is added once to the sum.
    """
    def run(x, num, rng):
        joined = rng.random(num) < q
        noise = mechanisms.sample_gaussian(np.full(x.size, sigma), (num, x.size), rng=rng)
        return np.asarray(x, np.float64)[None, :] * joined[:, None] + noise
    return run


def dpsgd_step_case(q: float, sigma: float, delta: float = 1e-5,
                    name: str = "dpsgd_step") -> dict:
    """Audit case of one DP-SGD step with sampling rate q and noise multiplier sigma.

    The claim is what the ledger composes per step: the Poisson-subsampled Gaussian at
    (q, sigma), add/remove-one, epsilon at `delta` from the RDP accountant (Abadi et al.
    2016; `tfdp.accounting.segments_epsilon` with one step). The attacker is the
    likelihood-ratio test of the pair, which is monotone in the projection on x1 - x0.
    """
    claimed = accounting.segments_epsilon(
        [dict(start_step=0, steps=1, passes=1, num_examples=1_000_000,
              batch_size=max(1, round(q * 1_000_000)), noise_multiplier=sigma)],
        delta=delta, sampling="poisson", accountant="rdp")
    x0, x1 = np.zeros(_D), np.zeros(_D)
    x1[0] = 1.0
    return dict(name=name, mechanism=_subsampled_gaussian_mech(q, sigma), x0=x0, x1=x1,
                attacker=empirical.gaussian_attacker(x0, x1, sigma),
                score=empirical.gaussian_score(x0, x1, sigma), claimed_eps=claimed,
                delta=delta, q=q, sigma=sigma)


def dpsgd_cases_from_ledger(ledger: dict, delta: float | None = None) -> list[dict]:
    """One audit case per executed DP-SGD segment of a run's ledger.json (its q and sigma)."""
    out = []
    for entry in ledger.get("entries", []):
        for i, seg in enumerate(entry.get("segments") or []):
            if seg["steps"] == 0:
                continue
            q = seg["batch_size"] / seg["num_examples"]
            out.append(dpsgd_step_case(q, seg["noise_multiplier"],
                                       delta if delta is not None else entry["delta"],
                                       name=f"dpsgd_step[{entry['name']}:{i}]"))
    return out


def _gaussian_cases(eps: float, delta: float, x0: np.ndarray, x1: np.ndarray) -> list[dict]:
    """The Gaussian calibrations' cases, and the control that a tight audit must flag."""
    cases = []
    for name, fn in (("gaussian_classical", mechanisms.classical_gaussian_sigma),
                     ("gaussian_analytic", mechanisms.analytic_gaussian_sigma),
                     ("gaussian_hgm", mechanisms.hgm_sigma),
                     ("gaussian_tail_thm2.3", mechanisms.gaussian_tail_sigma)):
        if name == "gaussian_classical" and eps >= 1.0:
            # The classical bound is proved for eps < 1 only; audit it at its valid edge.
            e = 0.99
        else:
            e = eps
        sigma = fn(epsilon=e, delta=delta, sensitivity=1.0)
        cases.append(dict(name=name, mechanism=_gaussian_mech(sigma),
                          attacker=empirical.gaussian_attacker(x0, x1, sigma),
                          score=empirical.gaussian_score(x0, x1, sigma),
                          claimed_eps=e, delta=delta, stddevs=sigma))
    # Control: the analytic Gaussian with 10% less noise than calibrated, claiming the same
    # eps. A tight audit must flag it (its true eps at delta is about 1.13 x the claim).
    sigma_low = 0.9 * mechanisms.analytic_gaussian_sigma(epsilon=eps, delta=delta,
                                                         sensitivity=1.0)
    cases.append(dict(name="control_gaussian_analytic_sigma_x0.9",
                      mechanism=_gaussian_mech(sigma_low),
                      attacker=empirical.gaussian_attacker(x0, x1, sigma_low),
                      score=empirical.gaussian_score(x0, x1, sigma_low),
                      claimed_eps=eps, delta=delta, stddevs=sigma_low, control=True))
    return cases


def _layer_cases(b: float, sigma: float, r: np.ndarray, stds: np.ndarray, eps: float,
                 delta: float, seed: int, x0: np.ndarray, x1: np.ndarray) -> list[dict]:
    """The noise layers' cases at the scales of the Laplace, analytic Gaussian and HGM cases."""
    cases = []
    lap = layers.LaplaceNoise(b, seed=seed + 1)
    cases.append(dict(name="layer_LaplaceNoise", mechanism=_layer_mech(lap),
                      attacker=empirical.laplace_attacker(x0, x1, b),
                      score=empirical.laplace_score(x0, x1, b), claimed_eps=eps,
                      delta=0.0))
    sigma_g = mechanisms.analytic_gaussian_sigma(epsilon=eps, delta=delta, sensitivity=1.0)
    gl = layers.GaussianNoise(sigma_g, seed=seed + 2)
    cases.append(dict(name="layer_GaussianNoise", mechanism=_layer_mech(gl),
                      attacker=empirical.gaussian_attacker(x0, x1, sigma_g),
                      score=empirical.gaussian_score(x0, x1, sigma_g),
                      claimed_eps=eps, delta=delta, stddevs=sigma_g))
    hl = layers.HeterogeneousGaussianNoise(sigma, r=r, seed=seed + 3)
    cases.append(dict(name="layer_HeterogeneousGaussianNoise", mechanism=_layer_mech(hl),
                      attacker=empirical.gaussian_attacker(x0, x1, stds),
                      score=empirical.gaussian_score(x0, x1, stds),
                      claimed_eps=eps, delta=delta, stddevs=stds))
    return cases


def audit_cases(eps: float = 1.0, delta: float = 1e-5, seed: int = 0,
                include_layers: bool = True,
                dpsgd_steps: list[tuple[float, float]] | None = None) -> list[dict]:
    """Builds (mechanism, neighbours, attacker, claim) for every shipped mechanism, then the
    cases the papers add (registry kind "audit_cases", e.g. GPM's), last and in paper order.

    Each case uses a neighbouring pair at exactly the sensitivity the calibration assumes
    (L1 distance 1 for Laplace, L2 distance 1 / r-weighted distance 1 for HGM) and the
    likelihood-ratio attacker of the claimed noise family, i.e. the strongest generic test.

    Args:
      dpsgd_steps: (q, sigma) of the DP-SGD steps to audit (default: the smoke run's).

    Returns:
      list of dicts with keys name, mechanism, x0, x1, attacker, claimed_eps, delta.
    """
    rng = np.random.default_rng(seed)
    x0 = np.zeros(_D)
    x1 = np.zeros(_D)
    x1[0] = 1.0  # ||x1 - x0||_1 = ||x1 - x0||_2 = 1
    cases = []
    b = mechanisms.laplace_scale(epsilon=eps, sensitivity=1.0)
    cases.append(dict(name="laplace", mechanism=_laplace_mech(b),
                      attacker=empirical.laplace_attacker(x0, x1, b),
                      score=empirical.laplace_score(x0, x1, b), claimed_eps=eps, delta=0.0))
    cases.extend(_gaussian_cases(eps, delta, x0, x1))
    # PixelDP multipliers (attack bound L = 1, unit sensitivity: the pair is at distance L).
    b_px = mechanisms.pixeldp_laplace_multiplier(epsilon=eps)
    cases.append(dict(name="pixeldp_laplace", mechanism=_laplace_mech(b_px),
                      attacker=empirical.laplace_attacker(x0, x1, b_px),
                      score=empirical.laplace_score(x0, x1, b_px), claimed_eps=eps, delta=0.0))
    e_px = min(eps, 1.0)
    s_px = mechanisms.pixeldp_gaussian_multiplier(epsilon=e_px, delta=delta)
    cases.append(dict(name="pixeldp_gaussian", mechanism=_gaussian_mech(s_px),
                      attacker=empirical.gaussian_attacker(x0, x1, s_px),
                      score=empirical.gaussian_score(x0, x1, s_px), claimed_eps=e_px,
                      delta=delta, stddevs=s_px))
    # Heterogeneous Gaussian mechanism with a non-uniform redistribution (HGM Theorem 3).
    r = rng.uniform(0.2, 1.0, _D)
    r /= r.sum()
    sens_r = mechanisms.weighted_sensitivity(x1 - x0, r)
    sigma = mechanisms.hgm_sigma(epsilon=eps, delta=delta, sensitivity=sens_r)
    stds = mechanisms.heterogeneous_stddevs(sigma=sigma, r=r)
    cases.append(dict(name="heterogeneous_gaussian", mechanism=_gaussian_mech(stds),
                      attacker=empirical.gaussian_attacker(x0, x1, stds),
                      score=empirical.gaussian_score(x0, x1, stds),
                      claimed_eps=eps, delta=delta, stddevs=stds))
    if include_layers:
        cases.extend(_layer_cases(b, sigma, r, stds, eps, delta, seed, x0, x1))
    # DP-SGD's per-step mechanism at the executed sampling rate and noise multiplier.
    for q, sig in (dpsgd_steps if dpsgd_steps is not None else [dpsgd_smoke_step()]):
        cases.append(dpsgd_step_case(q, sig, delta))
    for case in cases:
        case.setdefault("x0", x0)
        case.setdefault("x1", x1)
    # The papers' cases (GPM: claims to be the Gaussian mechanism at (0.125, 1e-10)), drawing
    # from the same generator after the shared cases.
    for declared in registry.extensions("audit_cases").values():
        cases.extend(declared.load()(rng))
    return cases


def run_dp_suite(trials: int = 20000, seed: int = 0, include_layers: bool = True,
                 confidence: float = 0.95, gpm_trials: int = 1000,
                 threshold_trials: int = 200000, gdp_trials: int = 200000,
                 progress: Callable[[str], None] | None = None) -> list[empirical.AuditResult]:
    """Audits every case of `audit_cases`.

    Every case gets the balanced game (`empirical.audit`; research cases, such as GPM's,
    with `gpm_trials` games); the shipped mechanisms also get the tail-threshold audit
    (`empirical.audit_threshold`, `threshold_trials` runs per input), which is much closer
    to their true epsilon, and the Gaussian mechanisms the Gaussian-DP audit
    (`gdp.audit_gaussian_dp`, `gdp_trials` runs per input), which uses the whole output
    distribution and is tight under its Gaussian-output assumption. Each result holds at
    `confidence` on its own.

    Returns:
      AuditResults (names as in `audit_cases`; `method` tells the audits apart).
    """
    if threshold_trials and threshold_trials < 200:
        raise ValueError(f"threshold_trials must be 0 or >= 200, got {threshold_trials!r}")
    if gdp_trials and gdp_trials < 100:
        raise ValueError(f"gdp_trials must be 0 or >= 100, got {gdp_trials!r}")
    out = []
    for i, case in enumerate(audit_cases(seed=seed, include_layers=include_layers)):
        n = gpm_trials if case.get("research") else trials
        with warnings.catch_warnings():
            for category in case.get("ignore_warnings", ()):  # a case's own research warnings
                warnings.simplefilter("ignore", category)
            runs = [empirical.audit(case["mechanism"], case["x0"], case["x1"], case["attacker"],
                                    trials=n, claimed_eps=case["claimed_eps"],
                                    delta=case["delta"], seed=seed * 1000 + i,
                                    confidence=confidence, name=case["name"])]
            if "score" in case and threshold_trials:
                runs.append(empirical.audit_threshold(
                    case["mechanism"], case["x0"], case["x1"], case["score"],
                    trials=threshold_trials, claimed_eps=case["claimed_eps"],
                    delta=case["delta"], seed=seed * 1000 + 500 + i, confidence=confidence,
                    name=case["name"]))
            if "stddevs" in case and gdp_trials:
                runs.append(gdp.audit_gaussian_dp(
                    case["mechanism"], case["x0"], case["x1"], case["score"],
                    trials=gdp_trials, claimed_eps=case["claimed_eps"], delta=case["delta"],
                    seed=seed * 1000 + 700 + i, confidence=confidence, name=case["name"],
                    exact_eps=gdp.exact_epsilon(case["x0"], case["x1"], case["stddevs"],
                                                case["delta"])))
        for res in runs:
            if progress:
                extra = ""
                if isinstance(res, gdp.GDPAuditResult):
                    extra = (f" (mu_lower {res.mu_lower:.4f}, exact eps of the noise "
                             f"{res.exact_eps:.3f}{', FLAGGED' if res.exceeds_claim else ''})")
                progress(f"{res.name} [{res.method}]: eps_lower {res.eps_lower:.3f} vs "
                         f"claimed {res.claimed_eps:g}{extra}")
            out.append(res)
    return out


def optimal_success(name: str, eps: float = 1.0) -> float:
    """Success of the likelihood-ratio attacker on the Laplace cases (reporting and tests).

    Balanced test between Laplace(0, b) and Laplace(1, b) with b = 1/eps, threshold at the
    midpoint: success = 1 - e^{-eps/2} / 2 (closed form of the Laplace CDF).
    """
    if "laplace" in name.lower():
        return 1.0 - 0.5 * math.exp(-eps / 2.0)
    raise ValueError(f"no closed form for {name!r}")
