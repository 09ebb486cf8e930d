"""Gaussian input noise for randomized smoothing (Cohen, Rosenfeld, Kolter, ICML 2019).

The same noise is used in training (`--smoothing_sigma`, each example's input perturbed
once per step, before the per-example gradient and its clipping) and at certification
(each Monte-Carlo draw perturbs the input). The certificate is
`tfdp.certify.registry.GaussianSmoothing`.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import tensorflow as tf

SMOOTHING = "gaussian_smoothing"
# The one salt of smoothing's input noise: folded into a training step's seed (apart from the
# step's other draws) and into an exported model's draw key (tfdp.export).
SALT = 0x534D
STEP_SALT = SALT


def add_gaussian_noise(x: tf.Tensor, sigma: float, seed: Optional[tf.Tensor] = None
                       ) -> tf.Tensor:
    """x + N(0, sigma^2 I), element-wise; stateless when `seed` (int [2]) is given.

    Args:
        x: a batch of inputs.
        sigma: noise standard deviation (> 0).
        seed: a stateless seed, or None for the global TensorFlow generator.

    Returns:
        the perturbed batch, dtype of x.
    """
    shape = tf.shape(x)
    if seed is None:
        noise = tf.random.normal(shape, dtype=x.dtype)
    else:
        noise = tf.random.stateless_normal(shape, seed=seed, dtype=x.dtype)
    return x + tf.cast(sigma, x.dtype) * noise


def training_noise(ctx: Any, x: tf.Tensor, sigma: Optional[float]) -> tf.Tensor:
    """The training hook: each example's input plus fresh N(0, sigma^2 I) from the step seed.

    The noise depends only on the step's seed (and the replica), never on the data, so it is
    per-example data processing: DP-SGD's analysis and ledger are unchanged.

    Args:
        ctx: the step's `tfdp.train.base.StepContext`.
        x: the replica's batch.
        sigma: --smoothing_sigma, or None/0 for no noise (x is returned unchanged).
    """
    if not sigma:
        return x
    return add_gaussian_noise(x, float(sigma), ctx.replica_seed(STEP_SALT))


# Monte-Carlo defaults recorded in the run's certification entry (Cohen et al. 2019, Sec. 4).
DEFAULT_SELECTION_DRAWS = 100
DEFAULT_NUM_DRAWS = 1000
DEFAULT_ALPHA = 0.001


def check_smoothing_sigma(method: str, sigma: Any, takes_smoothing: bool,
                          methods_that_do: Callable[[], Sequence[str]] = tuple
                          ) -> Optional[float]:
    """Validates --smoothing_sigma for `method`; returns it as a float (None when unset).

    Args:
      method: the --method value.
      sigma: the flag's value (None when unset).
      takes_smoothing: whether the method takes input smoothing (its `Method.takes_smoothing`).
      methods_that_do: the names of the methods that do, for the error (called only then).

    Raises:
        ValueError: naming --smoothing_sigma.
    """
    if sigma is None:
        return None
    try:
        value = float(sigma)
    except (TypeError, ValueError):
        raise ValueError(f"--smoothing_sigma: expected a positive number, got {sigma!r}") from None
    if not (value > 0 and value < float("inf")):
        raise ValueError(f"--smoothing_sigma: expected a positive number, got {sigma!r}")
    if not takes_smoothing:
        raise ValueError(f"--smoothing_sigma: input smoothing is for --method="
                         f"{' or '.join(methods_that_do())}, not {method!r}")
    return value


def certification(sigma: float) -> dict:
    """The run's certification entry for a model trained with input noise sigma."""
    return {"mechanism": SMOOTHING, "sigma": float(sigma), "lipschitz": 1.0, "norm": "l2",
            "noise": "N(0, sigma^2 I) added to the input of the base classifier",
            "selection_draws": DEFAULT_SELECTION_DRAWS, "num_draws": DEFAULT_NUM_DRAWS,
            "alpha": DEFAULT_ALPHA, "bound": "clopper_pearson",
            "note": "Cohen, Rosenfeld, Kolter (ICML 2019) Theorem 1: radius sigma "
                    "Phi^-1(p_A_lower) / L in l2, L = 1 for noise on the input."}


def smoothed_score(noise_free: Callable[[tf.Tensor], tf.Tensor], sigma: float,
                   seed: Optional[int] = None) -> Callable[[tf.Tensor], tf.Tensor]:
    """x -> noise_free(x + N(0, sigma^2 I)): one draw of the base classifier under noise.

    Args:
        noise_free: the base classifier.
        sigma: noise standard deviation.
        seed: an evaluation seed (public: the draws of a certificate are not private): the
            draws then come from a Philox generator keyed by it and SALT, so the same calls in
            the same order draw the same noise (tfdp-evaluate --seed reruns identically).
            None: the global TensorFlow generator.
    """
    if seed is None:
        def score(x):
            return noise_free(add_gaussian_noise(tf.convert_to_tensor(x, tf.float32), sigma))
        return score
    generator = tf.random.Generator.from_key_counter(
        key=int(seed) % 2**63, counter=[0, SALT], alg="philox")

    def seeded_score(x):
        x = tf.convert_to_tensor(x, tf.float32)
        return noise_free(x + tf.cast(sigma, x.dtype) * generator.normal(tf.shape(x),
                                                                         dtype=x.dtype))
    return seeded_score


def is_smoothing(certification: Any) -> bool:
    """Whether a certification dict describes Gaussian input smoothing."""
    return bool(certification) and (certification.get("mechanism") == SMOOTHING or
                                    certification.get("name") == SMOOTHING)
