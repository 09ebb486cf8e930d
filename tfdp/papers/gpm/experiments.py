"""GPM experiments: DP-hist game, L2 error, bounds, precision, and the GPM audit cases."""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Iterable

import numpy as np

from tfdp import checks
from tfdp import clopper_pearson as clopper_pearson_lib
from tfdp.audit import empirical
from tfdp.papers.gpm import pancake

_CHUNK_ELEMENTS = 1 << 22  # rows per chunk * d: about 32 MB per float64 matrix


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95
                    ) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval for a binomial proportion (scipy's exact method,
    through `tfdp.clopper_pearson.interval_by_root`)."""
    return clopper_pearson_lib.interval_by_root(successes, trials, confidence)


def _check_common(d: int, epsilon: float, beta: float, trials: int, seed: int, delta: float
                  ) -> None:
    """The arguments every histogram experiment shares (ValueError naming the argument)."""
    checks.check_int(d, "d", minimum=2)
    checks.check_positive(epsilon, "epsilon")
    checks.check_positive(beta, "beta")
    checks.check_positive_int(trials, "trials")
    checks.check_int(seed, "seed")
    checks.check_unit_interval(delta, "delta")


def _hist_games(d: int, trials: int, n_records: int, sigma: float, beta: float, gamma: float,
                rng: np.random.Generator, *, fresh_data: bool, fixed_key: bool,
                dg_method: str) -> tuple[int, int, float, float]:
    """Plays `hist_experiment`'s games in chunks of trials.

    Returns:
      (the key holder's successes on GPM releases, its successes on GM releases, the sums of
      the GM and GPM noises' squared L2 norms).
    """
    probs = np.full(d, 1.0 / d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pancake.GPMResearchWarning)
        key = pancake.generate_key(d, rng=rng) if fixed_key else None
        if not fresh_data:
            base = rng.multinomial(n_records - 1, probs).astype(np.float64)
            last = int(rng.integers(d))
        successes = gm_successes = 0
        sq_gm = sq_gpm = 0.0
        rows = max(1, min(trials, _CHUNK_ELEMENTS // d))
        done = 0
        while done < trials:
            m = min(rows, trials - done)
            if fresh_data:
                q1 = rng.multinomial(n_records - 1, probs, size=m).astype(np.float64)
                j = rng.integers(d, size=m)
            else:
                q1 = np.broadcast_to(base, (m, d)).copy()
                j = np.full(m, last)
            q0 = q1.copy()
            q0[np.arange(m), j] += 1.0  # D0 = D1 plus its last record
            w = key if fixed_key else pancake.generate_key(d, rng=rng, num=m)
            b = rng.integers(2, size=m)
            q_b = np.where(b[:, None] == 1, q1, q0)
            noise = pancake.pancake_noise(w, sigma, beta, gamma, m, rng=rng,
                                          dg_method=dg_method)
            y = q_b + noise
            guess = pancake.distinguish(y, q0, q1, w, sigma, beta, gamma)
            successes += int(np.sum(guess == b))
            sq_gpm += float(np.sum((y - q_b) ** 2))
            gm_noise = sigma * rng.standard_normal((m, d))
            y_gm = q_b + gm_noise
            gm_successes += int(np.sum(
                pancake.distinguish(y_gm, q0, q1, w, sigma, beta, gamma) == b))
            sq_gm += float(np.sum(gm_noise ** 2))
            done += m
    return successes, gm_successes, sq_gm, sq_gpm


def hist_experiment(d: int, epsilon: float, beta: float, trials: int, seed: int,
                    delta: float = 1e-10, gamma: float | None = None, *,
                    n_records: int = 1_000_000, fresh_data: bool = True,
                    fixed_key: bool = False, dg_method: str = "cks") -> dict:
    """DP-hist distinguishing game of GPM Sec. 5 (Figure 5, Table 4).

    Each trial: records uniform on d bins (n_records of them; D1 = D0 minus its last record,
    so q(D1) - q(D0) = -e_j, Delta = 1), a fresh key (unless fixed_key), a fair coin b, the
    release y = q(D_b) + GPM noise with sigma from the paper's Thm 2.3 calibration for
    (epsilon, delta), and the key holder's guess. A GM release with the same sigma is drawn
    alongside for the L2 error and for the key attack's baseline on genuine noise.

    Args:
      d: number of bins (query dimension).
      epsilon: the claimed epsilon* of the imitated Gaussian mechanism.
      beta: GPM pancake width parameter.
      trials: number of games.
      seed: integer seed of the numpy Generator.
      delta: the claimed delta* (the paper uses 1e-10).
      gamma: spacing parameter; default 2 sqrt(d) (the GPM experiments).
      n_records: records per database (the authors' code: 1e6; the paper gives none).
      fresh_data: draw a new database each trial (as the authors do); False draws it once.
        The attack depends on the data only through q(D1) - q(D0), which is -e_j either way.
      fixed_key: one key for all trials (the threat model) instead of a fresh key per trial
        (the authors' measurements).
      dg_method: discrete Gaussian sampler, "cks" or "table".

    Returns:
      dict with d, epsilon, beta, gamma, sigma, delta, trials, successes, success_rate,
      ci_low / ci_high (95% Clopper-Pearson), oracle (arctan formula), oracle_exact
      (integrated over the key), gm_baseline_success_rate (the key attack on GM outputs),
      l2_error_gm, l2_error_gpm (RMS of ||noise||), l2_error_expected (sigma sqrt(d)),
      claimed_eps, eps_lower_key_holder_t025 and eps_upper_key_holder.
    """
    _check_common(d, epsilon, beta, trials, seed, delta)
    if gamma is None:
        gamma = pancake.covert_gamma(d)
    n_records = checks.check_int(n_records, "n_records", minimum=2)
    beta, gamma = pancake.check_parameters(d, beta, gamma, require_covertness=False)
    sigma = pancake.gm_sigma(epsilon, delta, 1.0)  # GPM Thm 2.3, Delta = 1 (add/remove one)
    rng = np.random.default_rng(seed)
    successes, gm_successes, sq_gm, sq_gpm = _hist_games(
        d, trials, n_records, sigma, beta, gamma, rng, fresh_data=fresh_data,
        fixed_key=fixed_key, dg_method=dg_method)
    lo, hi = clopper_pearson(successes, trials)
    return {
        "d": int(d), "epsilon": float(epsilon), "beta": float(beta), "gamma": float(gamma),
        "sigma": sigma, "delta": float(delta), "trials": int(trials), "seed": int(seed),
        "fresh_data": bool(fresh_data), "fixed_key": bool(fixed_key),
        "successes": successes, "success_rate": successes / trials,
        "ci_low": lo, "ci_high": hi,
        "oracle": pancake.success_averaged(1.0, sigma, beta, gamma, d),
        "oracle_exact": (pancake.success_averaged(1.0, sigma, beta, gamma, d, exact=True)
                         if d >= 3 else float("nan")),
        "gm_baseline_success_rate": gm_successes / trials,
        "l2_error_gm": math.sqrt(sq_gm / trials),
        "l2_error_gpm": math.sqrt(sq_gpm / trials),
        "l2_error_expected": sigma * math.sqrt(d),
        # The claim next to what holds against the key holder (GPM Thm 2.3, 4.2, 4.4).
        "claimed_eps": pancake.gm_eps(sigma, delta, 1.0),
        "eps_lower_key_holder_t025": (pancake.eps_lower(0.25, beta, gamma, delta)
                                      if beta < 1.0 and gamma > 1.0 and delta < 0.5
                                      else float("nan")),
        "eps_upper_key_holder": pancake.eps_upper(delta, sigma, beta, gamma, 1.0),
    }


def hist_grid(ds: Iterable[int], epsilons: Iterable[float], betas: Iterable[float],
              trials: int, seed: int, **kwargs) -> list[dict]:
    """Runs `hist_experiment` over a grid; cell seeds are derived from seed and the cell index."""
    out = []
    for i, (d, eps, beta) in enumerate((d, e, b) for d in ds for e in epsilons for b in betas):
        cell_seed = int(np.random.SeedSequence([seed, i]).generate_state(1)[0])
        out.append(hist_experiment(int(d), float(eps), float(beta), trials, cell_seed, **kwargs))
    return out


def _distinguish_float32(y, q0, q1, w, s):
    """The key attack computed entirely in float32 (what a float32 implementation would do)."""
    y, q0, q1, w = (a.astype(np.float32) for a in (y, q0, q1, w))
    s = np.float32(s)
    r0, r1 = np.dot(y - q0, w) / s, np.dot(y - q1, w) / s
    return 0 if abs(r0 - np.round(r0)) < abs(r1 - np.round(r1)) else 1


def precision_check(d: int = 1_000_000, beta: float = 1e-5, gamma: float = 2e3,
                    sigma: float = 3.19, dq_norm: float = 0.0625, trials: int = 40,
                    seed: int = 0) -> dict:
    """Key attack on a float64 pipeline vs a float32 one (docs/gpm.md, "Precision").

    Each trial: fresh key, neighbours q0 ~ N(0, I) and q1 = q0 + dq (random direction, norm
    dq_norm), a float64 GPM release and the float64 attack; then the same release, key and
    neighbours rounded to float32 and the attack computed in float32. The float32 number is
    informational: it shows the loss of resolution that makes float64 mandatory.

    Returns:
      dict with success_float64, success_float32 and the parameters.
    """
    rng = np.random.default_rng(seed)
    s = pancake.spacing(sigma, beta, gamma)
    ok64 = ok32 = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pancake.GPMResearchWarning)
        for _ in range(trials):
            w = pancake.generate_key(d, rng=rng)
            q0 = rng.standard_normal(d)
            u = rng.standard_normal(d)
            q1 = q0 + dq_norm * u / np.linalg.norm(u)
            b = int(rng.integers(2))
            y = pancake.gpm(q1 if b else q0, w, sigma, beta, gamma, rng=rng)
            ok64 += int(pancake.distinguish(y, q0, q1, w, sigma, beta, gamma) == b)
            ok32 += int(_distinguish_float32(y, q0, q1, w, s) == b)
    return {"d": d, "beta": beta, "gamma": gamma, "sigma": sigma, "dq_norm": dq_norm,
            "trials": trials, "success_float64": ok64 / trials,
            "success_float32": ok32 / trials}


def bounds_curves(deltas: np.ndarray | None = None,
                  sigmas: Iterable[float] = (0.25, 1.0, 4.0, 16.0, 64.0),
                  betas: Iterable[float] = (1e-3, 1e-5), gammas: Iterable[float] = (1e2, 1e4),
                  t: float = 0.25, sensitivity: float = 1.0) -> list[dict]:
    """Figure 4 data: GM eps (Thm 2.3), GPM lower (Thm 4.2) and upper (Thm 4.4) bounds vs delta.

    Returns:
      rows with delta, sigma, beta, gamma, gm_eps, gpm_eps_lower, gpm_eps_upper.
    """
    if deltas is None:
        deltas = np.logspace(-15, -1, 57)
    rows = []
    for delta in np.asarray(deltas, dtype=np.float64):
        for sigma in sigmas:
            for beta in betas:
                for gamma in gammas:
                    rows.append({
                        "delta": float(delta), "sigma": float(sigma), "beta": float(beta),
                        "gamma": float(gamma),
                        "gm_eps": pancake.gm_eps(sigma, float(delta), sensitivity),
                        "gpm_eps_lower": pancake.eps_lower(t, beta, gamma, float(delta)),
                        "gpm_eps_upper": pancake.eps_upper(float(delta), sigma, beta, gamma,
                                                           sensitivity),
                    })
    return rows


# --------------------------------------------------------------------------------------------
# GPM cases of the empirical DP audit (`tfdp.audit.dp_suite`).


def key_attacker(x0: Any, x1: Any, key: np.ndarray, sigma: float, beta: float,
                 gamma: float) -> Callable[[np.ndarray], np.ndarray]:
    """The GPM key holder's attacker (GPM Sec. 5) in the form `tfdp.audit.empirical` takes.

    Args:
      x0, x1: the neighbours' query answers (flattened to [d]).
      key: the mechanism's key, float64 [d].
      sigma, beta, gamma: GPM parameters.

    Returns:
      attacker(outputs [num, ...]) -> [num] guesses in {0, 1}.
    """
    a, b = np.asarray(x0, np.float64).ravel(), np.asarray(x1, np.float64).ravel()

    def attack(y: np.ndarray) -> np.ndarray:
        flat = np.asarray(y, dtype=np.float64)
        return pancake.distinguish(flat.reshape(flat.shape[0], -1), a, b, key, sigma, beta,
                                   gamma)

    return attack


def audit_cases(rng: np.random.Generator, *, epsilon: float = 0.125, beta: float = 1e-4,
                d: int = 256) -> list[dict]:
    """GPM claiming to be the Gaussian mechanism at (epsilon, 1e-10) (GPM experiments), audited
    without the key (the Gaussian likelihood-ratio attacker) and with it.

    Args:
      rng: draws the key.
      epsilon: the claimed epsilon (calibrated with GPM Thm 2.3, Delta = 1).
      beta: GPM width parameter.
      d: dimension of the query outputs; gamma = 2 sqrt(d).

    Returns:
      two case dicts (names gpm_without_key, gpm_with_key) in the form of
      `tfdp.audit.dp_suite.audit_cases`, marked research=True, whose GPMResearchWarning the
      audit silences (ignore_warnings).
    """
    g0, g1 = np.zeros(d), np.zeros(d)
    g1[0] = 1.0
    gdelta = 1e-10
    gsigma = pancake.gm_sigma(epsilon, gdelta, 1.0)
    gamma = pancake.covert_gamma(d)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pancake.GPMResearchWarning)
        key = pancake.generate_key(d, rng=rng)
        mech = pancake.GaussianPancakeMechanism(key, gsigma, beta, gamma)

    def gpm_run(x, num, r_):
        return x + mech.noise(num, rng=r_)

    return [dict(name="gpm_without_key", mechanism=gpm_run, x0=g0, x1=g1,
                 attacker=empirical.gaussian_attacker(g0, g1, gsigma),
                 claimed_eps=epsilon, delta=gdelta, research=True,
                 ignore_warnings=(pancake.GPMResearchWarning,)),
            dict(name="gpm_with_key", mechanism=gpm_run, x0=g0, x1=g1,
                 attacker=key_attacker(g0, g1, key, gsigma, beta, gamma),
                 claimed_eps=epsilon, delta=gdelta, research=True,
                 ignore_warnings=(pancake.GPMResearchWarning,))]
