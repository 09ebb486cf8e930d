"""The one-run canary audit of a `DPModel.fit` run (Steinke, Nasr, Jagielski 2023).

The same black-box audit as `tfdp-audit training` (`tfdp.audit.training`): m canaries
(training images relabelled to a random wrong class, or uniform-noise images with random
labels), each included in the training set with probability 1/2 from the audit seed; ONE
DP-SGD fit of the user's model; every canary scored by the trained model's log-probability of
its label; guesses for the k+ highest and k- lowest scores; the count of correct guesses turned
into an epsilon lower bound (Theorem 3). audit.json has the CLI's keys.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Optional

import numpy as np

from tfdp import checks, rundir
from tfdp.audit import training
from tfdp.keras import model as dp_model

CANARY_TEXT = {
    "mislabelled": ("training images (taken out of the training set) relabelled to a "
                    "uniformly random wrong class",
                    "log-probability of the canary label under the trained model"),
    "ood": ("uniform-noise images in the data range with uniformly random labels",
            "log-probability of the canary label under the trained model"),
}


def audit_fit(build_model: Callable[[], Any], x: np.ndarray, y: np.ndarray, *,
              num_classes: int, private: Mapping[str, Any], compile_args: Mapping[str, Any],
              fit_args: Optional[Mapping[str, Any]] = None, num_canaries: int = 1000,
              canary: str = "mislabelled", value_range: tuple = (0.0, 1.0),
              k_plus: Optional[int] = None, k_minus: Optional[int] = None,
              delta: Optional[float] = None, confidence: float = 0.95, seed: int = 0,
              out_dir: Optional[str] = None) -> dict:
    """Trains `build_model()` once with canaries by `make_private(...).fit` and audits it.

    Args:
      build_model: returns a fresh Keras model (the user's).
      x, y: the training set (canaries are taken out of it / added to it).
      num_classes: classes of the labels.
      private: `make_private` keyword arguments (epsilon, delta, epochs, batch_size, ...).
      compile_args: `DPModel.compile` keyword arguments.
      fit_args: further `DPModel.fit` keyword arguments.
      num_canaries: m.
      canary: "mislabelled" or "ood".
      value_range: the inputs' range (for "ood" canaries).
      k_plus, k_minus: guesses "in" / "out" (default m // 10 each, as tfdp-audit).
      delta: delta of the lower bound (default the run's).
      confidence: confidence of the lower bound.
      seed: the audit seed (canary choice and inclusion bits; recorded).
      out_dir: if given, audit.json is written there.

    Returns:
      The audit report (audit.json's content).

    Raises:
      ValueError: on invalid arguments, before any training.
    """
    if canary not in CANARY_TEXT:
        raise ValueError(f"canary: expected one of {sorted(CANARY_TEXT)}, got {canary!r}")
    m = checks.check_int(num_canaries, "num_canaries", minimum=2)
    k_plus = m // 10 if k_plus is None else checks.check_int(k_plus, "k_plus", minimum=0)
    k_minus = m // 10 if k_minus is None else checks.check_int(k_minus, "k_minus", minimum=0)
    if k_plus + k_minus > m:
        raise ValueError(f"k_plus, k_minus: {k_plus} + {k_minus} guesses exceed {m} canaries")
    checks.check_unit_interval(confidence, "confidence")
    x, y = np.asarray(x), np.asarray(y)
    rng = np.random.default_rng(int(seed))
    if canary == "ood":
        canaries, x_rest, y_rest = training.make_ood_canaries(x, y, num_classes, m,
                                                              value_range, rng)
    else:
        canaries, x_rest, y_rest = training.make_canaries(x, y, num_classes, m, rng)
    x_train, y_train, _ = training.insert_canaries(x_rest, y_rest, canaries, rng)
    model = build_model()
    dp = dp_model.make_private(model, **dict(private))
    dp.compile(**dict(compile_args))
    dp.fit(x_train, y_train, **dict(fit_args or {}))
    scores = training.log_prob_scores(model, canaries.x, canaries.y)
    ledger = dp.ledger()
    claimed, sound, claim_delta = training.ledger_epsilons(ledger)
    delta = claim_delta if delta is None else float(delta)
    res = training.audit_result(scores, canaries, k_plus=k_plus, k_minus=k_minus, delta=delta,
                                confidence=confidence)
    report = {"method": "keras_dpsgd", "dataset": "user",
              "epsilon_lower_bound": res.pop("epsilon_lower_bound"),
              "claimed_epsilon": training.json_epsilon(claimed),
              "sound_epsilon": training.json_epsilon(sound), **res,
              "claimed_delta": claim_delta, "audit_seed": int(seed), "canary_type": canary,
              "canaries": CANARY_TEXT[canary][0], "score": CANARY_TEXT[canary][1],
              "bound": "Steinke, Nasr, Jagielski 2023, Theorem 3 (eps, delta with abstentions)",
              "num_train_with_canaries": int(len(x_train)),
              "model_dir": dp.run_dir}
    if out_dir is not None:
        rundir.write_json_atomic(os.path.join(rundir.RunDir(out_dir, create=True).path,
                                              "audit.json"), report)
    return report
