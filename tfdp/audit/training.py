"""One-run black-box audit of a trained model: mislabelled canaries, loss scores, eps lower bound.

Steinke, Nasr, Jagielski 2023 ("Privacy Auditing with One (1) Training Run"), black-box
setting: m canaries are training images relabelled to a random wrong class, each included in
the training set independently with probability 1/2 (the inclusion bits come from the audit
seed, which is recorded). The method trains once with its own settings; the auditor scores
every canary by the trained model's log-probability of the canary's (wrong) label, guesses
"included" for the k+ highest scores and "excluded" for the k- lowest, and turns the number of
correct guesses into an eps lower bound with `tfdp.audit.one_run`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from tfdp import checks
from tfdp.audit import one_run


@dataclasses.dataclass
class Canaries:
    """m canaries drawn from the training set.

    Attributes:
      x: canary inputs [m, ...] (training images removed from the ordinary training set).
      y: their wrong labels [m].
      included: inclusion bits [m] (Bernoulli(1/2)).
      pool_index: positions of the canary images in the loaded training set (-1: synthetic).
    """

    x: np.ndarray
    y: np.ndarray
    included: np.ndarray
    pool_index: np.ndarray


def make_canaries(x_train: np.ndarray, y_train: np.ndarray, num_classes: int, m: int,
                  rng: np.random.Generator) -> tuple[Canaries, np.ndarray, np.ndarray]:
    """Takes m random training examples out as canaries with random wrong labels.

    Returns:
      (canaries, x_rest, y_rest): the canaries and the training set without them.
    """
    n = len(x_train)
    m = checks.check_int(m, "num_canaries", minimum=2)
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2 for mislabelled canaries, got {num_classes}")
    if m >= n:
        raise ValueError(f"num_canaries: {m} canaries need more than the {n} training examples")
    idx = np.sort(rng.choice(n, size=m, replace=False))
    shift = rng.integers(1, num_classes, size=m)  # a uniformly random wrong class
    y_true = np.asarray(y_train[idx]).astype(np.int64)
    y_wrong = ((y_true + shift) % num_classes).astype(np.asarray(y_train).dtype)
    included = rng.random(m) < 0.5
    keep = np.ones(n, bool)
    keep[idx] = False
    return (Canaries(np.asarray(x_train[idx]), y_wrong, included, idx),
            np.asarray(x_train[keep]), np.asarray(y_train[keep]))


def make_ood_canaries(x_train: np.ndarray, y_train: np.ndarray, num_classes: int, m: int,
                      value_range: tuple[float, float], rng: np.random.Generator
                      ) -> tuple[Canaries, np.ndarray, np.ndarray]:
    """m out-of-distribution canaries: uniform-noise images in the data range, random labels.

    Such inputs lie far from the data, so a model can fit their labels without the rest of
    the training set interfering (Steinke et al. 2023 use input-space canaries of this kind).
    The training set is returned unchanged.
    """
    m = checks.check_int(m, "num_canaries", minimum=2)
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    low, high = (float(v) for v in value_range)
    x = rng.uniform(low, high, size=(m,) + tuple(x_train.shape[1:])).astype(x_train.dtype)
    y = rng.integers(0, num_classes, size=m).astype(np.asarray(y_train).dtype)
    included = rng.random(m) < 0.5
    return (Canaries(x, y, included, np.full(m, -1, np.int64)), np.asarray(x_train),
            np.asarray(y_train))


def insert_canaries(x_rest: np.ndarray, y_rest: np.ndarray, canaries: Canaries,
                    rng: np.random.Generator, allowed: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training set = the rest plus the included canaries, at random positions.

    Args:
      allowed: positions (in the combined set) the canaries may take, e.g. those a method's
        public split will not take; default any.

    Returns:
      (x, y, positions of the included canaries in x).
    """
    k = int(np.sum(canaries.included))
    total = len(x_rest) + k
    pool = np.arange(total) if allowed is None else np.asarray(allowed, np.int64)
    if len(pool) < k:
        raise ValueError(f"only {len(pool)} positions are open to {k} canaries")
    pos = np.sort(rng.choice(pool, size=k, replace=False))
    is_canary = np.zeros(total, bool)
    is_canary[pos] = True
    x = np.empty((total,) + x_rest.shape[1:], x_rest.dtype)
    y = np.empty((total,), y_rest.dtype)
    x[~is_canary], y[~is_canary] = x_rest, y_rest
    x[pos] = canaries.x[canaries.included]
    y[pos] = canaries.y[canaries.included]
    return x, y, pos


def log_prob_scores(model: Any, x: np.ndarray, y: np.ndarray, batch_size: int = 500
                    ) -> np.ndarray:
    """log p(y | x) under the trained model in inference mode (high: likely a member).

    Outputs that are non-negative and sum to 1 per row are read as probabilities; anything
    else as logits (log-softmax).
    """
    out = []
    for start in range(0, len(x), batch_size):
        z = np.asarray(model(x[start:start + batch_size], training=False), np.float64)
        z = z.reshape(z.shape[0], -1)
        if np.all(z >= 0) and np.allclose(z.sum(axis=1), 1.0, atol=1e-3):
            logp = np.log(np.clip(z, 1e-300, None))
        else:
            zmax = z.max(axis=1, keepdims=True)
            logp = z - zmax - np.log(np.sum(np.exp(z - zmax), axis=1, keepdims=True))
        yy = np.asarray(y[start:start + batch_size]).astype(np.int64)
        out.append(logp[np.arange(len(yy)), yy])
    return np.concatenate(out)


def read_epsilon(value: Any, *, unbounded: bool = False) -> float:
    """A ledger epsilon as a float: inf for null, "inf"/"Infinity", or `unbounded`."""
    if unbounded or value is None:
        return math.inf
    if isinstance(value, str):
        if value.strip().lower() in ("inf", "+inf", "infinity"):
            return math.inf
        return float(value)
    return float(value)


def ledger_epsilons(ledger: Mapping[str, Any]) -> tuple[float, float, float]:
    """(claimed eps, sound eps, delta of the claim) of a run's ledger dict.

    A run with no ledger entry (non-private training) has no guarantee: eps = inf, whatever
    the stored total says (legacy ledgers wrote 0.0 for it).
    """
    entries = ledger.get("entries") or []
    none = not entries
    sound = read_epsilon(ledger.get("epsilon"), unbounded=none)
    claimed = read_epsilon(ledger.get("claimed_epsilon", ledger.get("epsilon")), unbounded=none)
    delta = ledger.get("claimed_delta", ledger.get("delta"))
    return claimed, sound, float(delta or 0.0)


def json_epsilon(value: float) -> float | str:
    """inf as the string "inf" (plain JSON has no infinity), else the float."""
    return "inf" if math.isinf(value) else float(value)


def audit_result(scores: np.ndarray, canaries: Canaries, *, k_plus: int, k_minus: int,
                 delta: float, confidence: float) -> dict:
    """Guesses from the scores, their count, and the eps lower bound (one-run Theorem 3)."""
    t = one_run.guesses(scores, k_plus, k_minus)
    r, v = one_run.count(t, canaries.included)
    m = len(canaries.included)
    eps_lb = one_run.epsilon_lower_bound(m, r, v, delta, confidence)
    return {"epsilon_lower_bound": eps_lb, "num_canaries": m,
            "num_included": int(np.sum(canaries.included)), "k_plus": int(k_plus),
            "k_minus": int(k_minus), "guesses_made": r, "correct_guesses": v,
            "delta": float(delta), "confidence": float(confidence)}
