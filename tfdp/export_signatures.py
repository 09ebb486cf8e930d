"""The SavedModel signatures of an export, and the same computations in process.

`build_module` traces the signatures `tfdp.export.export_run` saves (`serving_default`,
`serve`, `noisy_predict`, `certify`; see `tfdp.export` for what each takes and returns).
Noise seeds: a draw of the exported graph takes the stateless seed
fold_in(fold_in([seed, tag], chunk), site), where tag separates `noisy_predict` from
`certify`, chunk is the Monte-Carlo step (0 for `noisy_predict`) and site counts the
model's noise draws in call order. `certify_in_process` and `noisy_in_process` draw the same
noise through `tfdp.certify.MonteCarloPredictor`, which is how the export is checked
against tfdp.certify.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

import layers as layers_lib
from layers import noise as noise_layers
from tfdp import certify as certify_lib
from tfdp import checks, run_model, serving_inputs
from tfdp.certify import graph as certify_graph
from tfdp.certify import smoothing as certify_smoothing

__all__ = ["DEFAULT_DRAWS_PER_STEP", "SIGNATURES", "build_module", "certify_in_process",
           "noisy_in_process", "tf_clopper_pearson_bounds", "tf_hoeffding_bounds",
           "tf_bernstein_bounds", "tf_max_epsilon", "tf_certified_radius"]

DEFAULT_DRAWS_PER_STEP = 256
SIGNATURES = ("serving_default", "serve", "noisy_predict", "certify")

# Tags folded into the user's seed, so noisy_predict and certify never share a draw.
_TAG_NOISY = 1
_TAG_CERTIFY = 2
_TAG_SELECT = 3  # the selection draws (n0) of a two-stage certificate
_TAG_SMOOTHING = certify_smoothing.SALT  # folded into a draw's key for smoothing's input noise


# ----------------------------------------------------------------------- seeded noise


class _DrawSites:
    """Trace-time state of the seeded noise: the current key and the draws made so far."""

    def __init__(self, key: tf.Tensor):
        self.key = key
        self.count = 0


@contextlib.contextmanager
def _seeded_noise(model: Any, key: tf.Tensor) -> Iterator[None]:
    """Within the block, every fresh noise draw of `model` is seeded from `key`.

    The noise layers draw their stateless seed through `_next_seed`; here it becomes
    fold_in(key, site) with site = 1, 2, ... counting the draws in call order while a
    graph is traced, so the draws are a pure function of `key` (no counter variable is
    read or advanced, and the exported signatures are stateless).
    """
    sites = _DrawSites(key)
    noise_layers = layers_lib.noise_layers(model)

    def next_seed(tag: int, per_replica: bool) -> tf.Tensor:
        del tag, per_replica
        sites.count += 1
        return tf.random.experimental.stateless_fold_in(sites.key, sites.count)

    for layer in noise_layers:
        object.__setattr__(layer, "_next_seed", next_seed)
    try:
        yield
    finally:
        for layer in noise_layers:
            if "_next_seed" in vars(layer):
                object.__delattr__(layer, "_next_seed")


@contextlib.contextmanager
def _all_noise_off(model: Any) -> Iterator[None]:
    """Switches the inference noise of every noise layer off for the enclosed trace."""
    noise_layers = layers_lib.noise_layers(model)
    saved = [(layer, layer.inference_noise) for layer in noise_layers]
    try:
        for layer in noise_layers:
            layer.inference_noise = False
        yield
    finally:
        for layer, on in saved:
            layer.inference_noise = on


def _base_key(seed: Any, tag: int) -> tf.Tensor:
    """The [2] int64 stateless key of a user seed and a signature tag."""
    seed = tf.cast(seed, tf.int64)
    return tf.stack([seed, tf.constant(tag, tf.int64)])


def _chunk_key(key: tf.Tensor, chunk: Any) -> tf.Tensor:
    return tf.random.experimental.stateless_fold_in(key, tf.cast(chunk, tf.int64))


@dataclasses.dataclass
class _Functions:
    """The model functions the signatures are built from.

    Attributes:
        noise_free: x -> logits with every noise layer off.
        noisy: (x, key) -> logits, every noise layer's inference noise on, seeded by key.
        score: (x, key) -> certification scores (logits when `score_is_logits`), seeded.
        score_is_logits: whether `score` returns logits (False: StoBatch's product of
            softmax outputs, already in [0, 1]).
        has_noise: whether the model has tfdp noise layers.
    """

    noise_free: Callable
    noisy: Callable
    score: Callable
    score_is_logits: bool
    has_noise: bool


def _model_functions(model: Any, certification: Optional[Mapping[str, Any]]) -> _Functions:
    noise_free, noisy, _ = run_model.model_functions(model, None)
    _, score, score_is_logits = run_model.model_functions(model, certification)

    def seeded(fn: Callable) -> Callable:
        def g(x, key):
            with _seeded_noise(model, key):
                return fn(x)
        return g

    def deterministic(x):
        # Noise layers the harness does not switch (e.g. inside custom layers) are off too.
        with _all_noise_off(model):
            return noise_free(x)

    has_noise = bool(layers_lib.noise_layers(model))
    if certify_smoothing.is_smoothing(certification):
        # Randomized smoothing: the noise is on the input, one stateless draw per key.
        sigma = float(certification["sigma"])

        def smoothed(x, key):
            seed = tf.random.experimental.stateless_fold_in(key, _TAG_SMOOTHING)
            return deterministic(certify_smoothing.add_gaussian_noise(x, sigma, seed))

        return _Functions(deterministic, smoothed, smoothed, True, True)
    return _Functions(deterministic, seeded(noisy), seeded(score), score_is_logits, has_noise)


# ------------------------------------------------------- in-graph certification statistics


# The graph statistics live in tfdp.certify.graph; the names stay importable from here.
tf_clopper_pearson_bounds = certify_graph.tf_clopper_pearson_bounds
tf_hoeffding_bounds = certify_graph.tf_hoeffding_bounds
tf_bernstein_bounds = certify_graph.tf_bernstein_bounds
tf_max_epsilon = certify_graph.tf_max_epsilon
tf_certified_radius = certify_lib.tf_certified_radius


def _monte_carlo(score: Callable, from_logits: bool, x: tf.Tensor, num_draws: tf.Tensor,
                 key: tf.Tensor, num_classes: int, draws_per_step: int):
    """Counts, sums and sums of squares of num_draws noisy scores per input.

    The same tiling as tfdp.certify.MonteCarloPredictor (draw-major, draws_per_step draws
    per forward pass); chunk i's noise is seeded by fold_in(key, i).
    """
    batch = tf.shape(x)[0]
    # 64-bit counting: num_draws near 2^31 must not wrap (tfdp.serving_inputs bounds it too).
    num_draws = tf.cast(num_draws, tf.int64)
    step = tf.constant(draws_per_step, tf.int64)
    full_steps = num_draws // step
    remainder = num_draws - full_steps * step
    ones = tf.ones([tf.rank(x) - 1], tf.int32)

    def chunk(i, k, counts, total, total_sq):
        # k is a Python int (the full passes: a static draw count, as MonteCarloPredictor)
        # or a tensor (the last, shorter pass); chunk i's noise is fold_in(key, i) either way.
        multiples = tf.concat([tf.reshape(tf.cast(k, tf.int32), [1]), ones], 0)
        out = score(tf.tile(x, multiples), _chunk_key(key, i))
        if from_logits:
            out = tf.nn.softmax(out, axis=-1)
        scores = tf.reshape(tf.cast(out, tf.float64), tf.stack([tf.cast(k, tf.int32), batch,
                                                                num_classes]))
        winners = tf.one_hot(tf.argmax(scores, axis=-1), num_classes, dtype=tf.int64)
        return (counts + tf.reduce_sum(winners, axis=0),
                total + tf.reduce_sum(scores, axis=0),
                total_sq + tf.reduce_sum(tf.square(scores), axis=0))

    def body(i, counts, total, total_sq):
        return (i + 1,) + chunk(i, draws_per_step, counts, total, total_sq)

    zeros = tf.zeros([batch, num_classes], tf.float64)
    _, counts, total, total_sq = tf.while_loop(
        lambda i, *_: i < full_steps, body,
        [tf.constant(0, tf.int64), tf.zeros([batch, num_classes], tf.int64), zeros, zeros])
    return tf.cond(remainder > 0,
                   lambda: chunk(full_steps, remainder, counts, total, total_sq),
                   lambda: (counts, total, total_sq))


def _outputs(logits: tf.Tensor) -> dict:
    logits = tf.cast(logits, tf.float32)
    return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
            "class": tf.argmax(logits, axis=-1, output_type=tf.int64)}


def build_module(model: Any, certification: Optional[Mapping[str, Any]],
                 input_shape: Sequence[int], num_classes: int, *,
                 bound: str = "clopper_pearson",
                 draws_per_step: int = DEFAULT_DRAWS_PER_STEP,
                 value_range: Sequence[float] = (-1.0, 1.0),
                 out_of_range: str = "reject") -> tuple[tf.Module, dict]:
    """The tf.Module whose tf.functions become the SavedModel's signatures.

    The functions are traced with the portable noise kernel whatever the process uses
    (layers.noise_kernel): a SavedModel must load where tfdp's compiled op does not exist.

    Args:
        model: the run's Keras model (inputs -> logits).
        certification: the run's certification dict, or None (no `certify` signature).
        input_shape: shape of one example.
        num_classes: K.
        bound: confidence bound of `certify`, one of tfdp.certify.BOUNDS.
        draws_per_step: Monte-Carlo draws per forward pass of `certify`.
        value_range: the pixel range every signature checks x against.
        out_of_range: "reject" (fail the call) or "clip" for x outside value_range
            (tfdp.serving_inputs; NaN and Inf are always rejected).

    Returns:
        (module, signatures): a tf.Module with the tf.functions serving_default, serve, and
        (when the model has noise layers) noisy_predict and (with a certification) certify;
        and the dict of their concrete functions to save as signatures.

    Raises:
        ValueError: on a bad bound, draws_per_step or certification.
    """
    with noise_layers.noise_kernel("portable"):
        return _build_module(model, certification, input_shape, num_classes, bound=bound,
                             draws_per_step=draws_per_step, value_range=value_range,
                             out_of_range=out_of_range)


def _build_module(model: Any, certification: Optional[Mapping[str, Any]],
                  input_shape: Sequence[int], num_classes: int, *, bound: str,
                  draws_per_step: int, value_range: Sequence[float] = (-1.0, 1.0),
                  out_of_range: str = "reject") -> tuple[tf.Module, dict]:
    if bound not in certify_lib.BOUNDS:
        raise ValueError(f"bound must be one of {certify_lib.BOUNDS}, got {bound!r}")
    draws_per_step = checks.check_int(draws_per_step, "draws_per_step", minimum=1)
    certificate = (certify_lib.from_config(certification)
                   if certification is not None else None)
    cert = certificate.to_config() if certificate is not None else None
    if certificate is not None and certificate.selection_draws and bound != "clopper_pearson":
        raise ValueError(f"bound: {certificate.name} uses clopper_pearson, not {bound!r}")
    out_of_range = serving_inputs.check_out_of_range(out_of_range)
    value_range = checks.check_interval(value_range, "value_range")
    fns = _model_functions(model, cert)

    def checked(x):
        return serving_inputs.checked_x(x, value_range, out_of_range)
    x_spec = tf.TensorSpec([None] + [int(d) for d in input_shape], tf.float32, name="x")
    root = tf.__internal__.tracking.AutoTrackable()
    # The model's variables (weights and drawn-once noise), tracked so that they are saved.
    root.variables = list(model.variables)
    functions = _prediction_functions(fns, x_spec, checked)
    if cert is not None:
        functions["certify"] = _certify_function(fns, certificate, bound, x_spec, checked,
                                                 int(num_classes), draws_per_step)
    signatures = {}
    for name, fn in functions.items():
        setattr(root, name, fn)
        signatures[name] = fn.get_concrete_function()
    # The tf.Variables the traced functions capture, tracked too: loaders without the object
    # graph (TF Serving, saved_model_cli's TF1 session) restore variables only through them.
    captured: dict[int, Any] = {}
    for fn in signatures.values():
        for v in fn.variables:
            captured.setdefault(id(v), v)
    root.captured_variables = list(captured.values())
    return root, signatures


def _prediction_functions(fns: _Functions, x_spec: tf.TensorSpec, checked: Callable) -> dict:
    """serving_default, serve and (with noise layers) noisy_predict, by signature name."""
    @tf.function(input_signature=[x_spec])
    def serving_default(x):
        return _outputs(fns.noise_free(checked(x)))

    @tf.function(input_signature=[x_spec])
    def serve(x):
        return tf.cast(fns.noise_free(checked(x)), tf.float32)

    functions = {"serving_default": serving_default, "serve": serve}
    if fns.has_noise:
        @tf.function(input_signature=[x_spec, tf.TensorSpec([], tf.int64, name="seed")])
        def noisy_predict(x, seed):
            return _outputs(fns.noisy(checked(x), _chunk_key(_base_key(seed, _TAG_NOISY), 0)))

        functions["noisy_predict"] = noisy_predict
    return functions


def _certify_function(fns: _Functions, certificate: Any, bound: str, x_spec: tf.TensorSpec,
                      checked: Callable, num_classes: int, draws_per_step: int) -> Callable:
    """The `certify` signature's tf.function (its arguments checked in the graph)."""
    @tf.function(input_signature=[
        x_spec, tf.TensorSpec([], tf.int32, name="num_draws"),
        tf.TensorSpec([], tf.float64, name="alpha"),
        tf.TensorSpec([], tf.float64, name="attack_size"),
        tf.TensorSpec([], tf.int64, name="seed")])
    def certify(x, num_draws, alpha, attack_size, seed):
        num_draws = serving_inputs.checked_num_draws(num_draws,
                                                     2 if bound == "bernstein" else 1)
        x = checked(x)
        asserts = [
            tf.debugging.assert_greater(alpha, tf.constant(0.0, tf.float64),
                                        message="alpha must lie in (0, 1)"),
            tf.debugging.assert_less(alpha, tf.constant(1.0, tf.float64),
                                     message="alpha must lie in (0, 1)"),
            tf.debugging.assert_greater_equal(
                attack_size, tf.constant(0.0, tf.float64),
                message="attack_size must be a finite number >= 0"),
            tf.debugging.assert_all_finite(
                attack_size, message="attack_size must be a finite number >= 0"),
            tf.debugging.assert_greater(tf.shape(x)[0], 0,
                                        message="x must be a non-empty batch"),
        ]
        with tf.control_dependencies(asserts):
            x = tf.identity(x)
        return _certify_outputs(fns, certificate, bound, x, num_draws, alpha, attack_size,
                                seed, num_classes, draws_per_step)

    return certify


def _certify_outputs(fns: _Functions, certificate: Any, bound: str, x: tf.Tensor,
                     num_draws: tf.Tensor, alpha: tf.Tensor, attack_size: tf.Tensor,
                     seed: tf.Tensor, num_classes: int, draws_per_step: int) -> dict:
    """The `certify` signature's outputs for checked arguments (traced inside it)."""
    key = _base_key(seed, _TAG_CERTIFY)
    counts, total, total_sq = _monte_carlo(
        fns.score, fns.score_is_logits, x, num_draws, key, num_classes,
        draws_per_step)
    n = tf.cast(num_draws, tf.float64)
    mean = total / n
    var = tf.where(num_draws > 1,
                   tf.maximum(total_sq - n * mean ** 2, 0.0) / tf.maximum(n - 1.0, 1.0),
                   tf.zeros_like(mean))
    if certificate.selection_draws:
        # Two-stage certificate (Cohen et al. 2019, CERTIFY): the class comes from
        # n0 separate draws (their own key), p_A's one-sided lower bound from the n.
        sel_counts, _, _ = _monte_carlo(
            fns.score, fns.score_is_logits, x,
            tf.constant(certificate.selection_draws, tf.int32),
            _base_key(seed, _TAG_SELECT), num_classes, draws_per_step)
        pred = tf.argmax(sel_counts, axis=-1, output_type=tf.int64)
        top = tf.gather(tf.cast(counts, tf.float64), pred, axis=1, batch_dims=1)
        lower_cp = certify_graph.tf_beta_ppf(
            alpha + tf.zeros_like(top), tf.where(top > 0, top, 1.0), n - top + 1.0)
        lower_top = tf.where(top > 0, lower_cp, 0.0)
        upper_other = 1.0 - lower_top
    else:
        if bound == "clopper_pearson":
            lower, upper = tf_clopper_pearson_bounds(counts, alpha)
            pred = tf.argmax(counts, axis=-1, output_type=tf.int64)
        elif bound == "hoeffding":
            lower, upper = tf_hoeffding_bounds(mean, num_draws, alpha)
            pred = tf.argmax(mean, axis=-1, output_type=tf.int64)
        else:
            lower, upper = tf_bernstein_bounds(mean, var, num_draws, alpha)
            pred = tf.argmax(mean, axis=-1, output_type=tf.int64)
        lower_top, upper_other = certify_graph.tf_top_two(lower, upper, pred)
    radius = certificate.radius_tf(lower_top, upper_other, attack_size)
    # isRobust = radius >= mu_a and radius > 0 (HGM Algorithm 1, StoBatch Alg. 3)
    certified = tf.logical_and(radius >= attack_size, radius > 0.0)
    # An unsound certificate's outputs are claims, and are named so (principle 7).
    prefix = "" if certificate.sound else "claimed_"
    return {"prediction": pred, "counts": counts, "mean_scores": mean,
            "lower_bound": lower_top, "upper_bound": upper_other,
            prefix + "radius": radius, prefix + "certified": certified,
            "alpha": tf.identity(alpha)}  # echoed: the confidence is 1 - alpha


# ------------------------------------------------------------- in-process reference


def certify_in_process(model: Any, certification: Mapping[str, Any], x: Any, num_draws: int,
                       alpha: float, attack_size: float, seed: int, *,
                       bound: str = "clopper_pearson",
                       draws_per_step: int = DEFAULT_DRAWS_PER_STEP) -> dict:
    """tfdp.certify on the noise the exported `certify` signature draws for `seed`.

    The Monte-Carlo statistics come from tfdp.certify.MonteCarloPredictor (one call per
    chunk of draws_per_step draws, each chunk's noise seeded as in the export), the bounds
    from tfdp.certify.top_two_bounds, the radius from certified_radius and the decision from
    is_robust.

    Args:
        model: the run's Keras model.
        certification: its certification dict.
        x: inputs (b, ...).
        num_draws: n >= 1.
        alpha: in (0, 1).
        attack_size: >= 0.
        seed: int64 seed.
        bound: one of tfdp.certify.BOUNDS.
        draws_per_step: as the export's.

    Returns:
        dict with prediction, counts, mean_scores, lower_bound, upper_bound, radius,
        certified (numpy arrays).

    Raises:
        ValueError: on bad arguments.
    """
    n = checks.check_positive_int(num_draws, "num_draws", allow_integral_float=True)
    alpha = checks.check_unit_interval(alpha, "alpha")
    attack_size = checks.check_nonnegative(attack_size, "attack_size")
    step = checks.check_int(draws_per_step, "draws_per_step", minimum=1)
    cert = certify_lib.validate_certification(certification)
    fns = _model_functions(model, cert)
    key_var = tf.Variable(tf.zeros([2], tf.int64), trainable=False)

    def score(xb):
        return fns.score(xb, key_var.read_value())

    predictor = certify_lib.MonteCarloPredictor(score, from_logits=fns.score_is_logits,
                                                draws_per_step=step)
    x = np.asarray(x, np.float32)
    num_classes = int(fns.noise_free(tf.constant(x[:1])).shape[-1])

    def stats(tag: int, n: int) -> certify_lib.MonteCarloResult:
        base = _base_key(int(seed), tag)
        counts = np.zeros((x.shape[0], num_classes), np.int64)
        total = np.zeros((x.shape[0], num_classes), np.float64)
        total_sq = np.zeros((x.shape[0], num_classes), np.float64)
        for i in range(-(-n // step)):
            k = min(step, n - i * step)
            key_var.assign(_chunk_key(base, i))
            res = predictor(x, k, num_classes)
            counts += res.counts
            total += res.mean_scores * k
            total_sq += res.var_scores * (k - 1) + k * res.mean_scores ** 2
        mean = total / n
        var = (np.maximum(total_sq - n * mean ** 2, 0.0) / (n - 1) if n > 1
               else np.zeros_like(mean))
        return certify_lib.MonteCarloResult(counts, mean, var, n)

    certificate = certify_lib.from_config(cert)
    result = stats(_TAG_CERTIFY, n)
    selection = (stats(_TAG_SELECT, certificate.selection_draws)
                 if certificate.selection_draws else None)
    pred, lower, upper = certificate.bounds(result, bound, alpha, selection=selection)
    radius = certificate.radius(lower, upper, attack_size)
    prefix = "" if certificate.sound else "claimed_"
    return {"prediction": pred, "counts": result.counts, "mean_scores": result.mean_scores,
            "lower_bound": lower, "upper_bound": upper, prefix + "radius": radius,
            prefix + "certified": certify_lib.is_robust(radius, attack_size)}


def noisy_in_process(model: Any, x: Any, seed: int) -> np.ndarray:
    """Logits of the noise the exported `noisy_predict` draws for `seed` (in process)."""
    fns = _model_functions(model, None)
    key = _chunk_key(_base_key(int(seed), _TAG_NOISY), 0)
    return tf.function(fns.noisy)(tf.constant(np.asarray(x, np.float32)), key).numpy()
