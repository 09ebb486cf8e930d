"""SavedModel export of a run: deterministic, noisy and certifying signatures, and a model card.

`export_run(model_dir, export_dir)` turns a finished run directory (model.keras, config.json,
ledger.json) into a TensorFlow SavedModel that loads with `tf.saved_model.load` and serves
with TF Serving or `saved_model_cli` in a process that cannot import tfdp. Signatures (all
inputs float32 images of the run's input shape, pixel values in the run's value range):

* `serving_default(x)`: the noise-free prediction (every tfdp noise layer off):
  {"logits", "probabilities", "class"}.
* `serve(x)`: the logits alone, the endpoint Keras 3's `model.export()` writes (so
  `keras.layers.TFSMLayer(export_dir, call_endpoint="serve")` wraps the export).
* `noisy_predict(x, seed)` (models with tfdp noise layers): one forward pass with every
  noise layer's inference noise on; each row of x gets its own draw. The noise is a
  stateless function of the int64 `seed`: the same seed gives the same output.
* `certify(x, num_draws, alpha, attack_size, seed)` (runs whose config.json has a
  "certification" entry): the Monte-Carlo prediction, class counts, confidence bounds,
  robustness radius and `certified = radius >= attack_size and radius > 0`, computed in
  the graph with the formulas of `tfdp.certify` (same bound, same radius) for every
  mechanism `tfdp.certify.names()` lists. Noise drawn once ("once" mode) is part of
  the model's variables and saved with them; fresh noise is drawn from `seed`.

A model card (`model_card.json`, beside `saved_model.pb` and as the SavedModel asset
`assets/model_card.json`) states the ledger, the data set and its value range, the flags,
the certification parameters, the versions and, when the run has one, the evaluation
summary. It is built from an allow-list: it never holds training loss or accuracy, the
run's seed (which would let anyone regenerate its privacy noise) or local paths.

Noise seeds: a draw of the exported graph takes the stateless seed
fold_in(fold_in([seed, tag], chunk), site), where tag separates `noisy_predict` from
`certify`, chunk is the Monte-Carlo step (0 for `noisy_predict`) and site counts the
model's noise draws in call order. `certify_in_process` draws the same noise through
`tfdp.certify.MonteCarloPredictor`, which is how the export is checked against tfdp.certify.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib
import json
import os
import platform
import shutil
import tempfile
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

import layers as layers_lib
from layers import noise as noise_layers
from tfdp import certify as certify_lib
from tfdp import accounting, checks, run_model, rundir, serving_inputs
from tfdp.certify import graph as certify_graph
from tfdp.certify import smoothing as certify_smoothing
from tfdp.train import registry
from tfdp import registry as paper_registry
import keras
import tfdp

CARD_FILE = "model_card.json"
KERAS_FILE = "model.keras"
CARD_FORMAT = "tfdp-model-card/1"
# The SavedModel attribute holding the sha256 of model_card.json (hex, tf.string variable).
CARD_DIGEST = "model_card_sha256"
DEFAULT_DRAWS_PER_STEP = 256
SIGNATURES = ("serving_default", "serve", "noisy_predict", "certify")

# Tags folded into the user's seed, so noisy_predict and certify never share a draw.
_TAG_NOISY = 1
_TAG_CERTIFY = 2
_TAG_SELECT = 3  # the selection draws (n0) of a two-stage certificate
_TAG_SMOOTHING = certify_smoothing.SALT  # folded into a draw's key for smoothing's input noise

# ------------------------------------------------------------- model card allow-list
# The model card is built from an allow-list (issue 22): every key it may carry is declared
# below, section by section; a key not listed is dropped, whatever its value. A spec is a dict
# key -> ANY (any JSON value: a constant, a public hyper-parameter, a test-set figure or a
# quantity of the released weights), a nested spec (a dict filtered by it), a one-element
# list [spec] (a list of dicts, each filtered by spec) or a frozenset (a list of
# "--name=value" flag lines whose names are in it). Nothing computed from the training data
# outside the privately trained weights is listed: no training loss or accuracy, no r
# statistics or pre-training accuracy (Secure-SGD), no data fingerprint, no seed, no path.
ANY = True

# config.json keys of the card's "run" section.
_CONFIG_KEYS = ("method", "dataset", "value_range", "input_shape", "num_classes", "epochs",
                "batch_size", "learning_rate", "optimizer", "epsilon", "delta",
                "strategy", "num_replicas", "num_train", "num_test", "batch_schedule",
                "noise_seed")
# Generic flags of flags.txt that are public hyper-parameters (no seed, path or run control).
_CARD_FLAGS = ("method", "dataset", "epochs", "batch_size", "learning_rate", "optimizer",
               "epsilon", "delta", "value_range", "strategy", "num_train", "num_test",
               "num_classes", "noise_kernel", "smoothing_sigma",
               "allow_unsound_certificates")
# Names never copied to the model card, even when declared as a method option: the seed
# regenerates the run's privacy noise; the others are local paths or run-control switches.
_PRIVATE_FLAGS = ("seed", "model_dir", "data_dir", "resume", "stop_after_epochs", "verbose",
                  "download", "flagfile")  # (a paper's *_file flags: the suffix rule)
# metrics.json: only these test-set fields (no training statistics of any kind).
_METRICS_KEYS = ("test_accuracy",)
# evaluation.json: the test-set summary fields (computed on the test split only).
_EVALUATION_KEYS = ("clean_accuracy", "clean_accuracy_ci95", "clean_certified_accuracy",
                    "clean_claimed_certified_accuracy", "claimed_note", "certified_label",
                    "attack_norm", "soundness_check", "attacks", "num_examples",
                    "value_range", "size_range", "prediction", "attack_target",
                    "attack_labels", "nb_iter", "eot_draws", "certification",
                    "certified_accuracy_note", "num_draws", "alpha", "bound", "robust_rule")
# ledger.json: the public summary and the entries (mechanism, budget, notes, DP-SGD segments
# and their dp_accounting event).
_LEDGER_SPEC = {
    **{k: ANY for k in ("epsilon", "delta", "claimed_epsilon", "claimed_delta", "differs",
                        "relation", "guarantee", "note", "noise_seed", "noise_seed_note")},
    "entries": [{
        **{k: ANY for k in ("name", "mechanism", "epsilon", "delta", "protects",
                            "composition", "group", "claimed_epsilon", "claimed_delta",
                            "note", "relation", "covers")},
        "segments": [{k: ANY for k in accounting.SEGMENT_KEYS}],
        # the dp_accounting event of the segments (sampling rates, noise multipliers, counts)
        "dp_event": ANY}],
}
# The certification parameters: public hyper-parameters of the mechanisms, constants, and
# sensitivities of the released weights. The papers add their own (`_certification_spec`:
# StoBatch's radius parameters and Delta_r^h, Secure-SGD's r_stats without r's range).
_CERTIFICATION_SPEC = {
    **{k: ANY for k in (
        "mechanism", "construction_bound", "epsilon", "delta", "sigma", "sigma_multiplier",
        "sensitivity", "sensitivity_mode", "sensitivity_sound", "noised_layer", "layer",
        "num_units", "h1_shape", "redistribution", "train_noise", "test_noise", "norm",
        "num_draws", "alpha", "bound", "note", "eps_cap",
        # the certificate registry (tfdp.certify): name, derived soundness, smoothing
        "name", "sound", "lipschitz", "selection_draws", "noise", "input_dim")},
}


def _certification_spec() -> dict:
    """_CERTIFICATION_SPEC with the certification fields the papers add (registry kind
    "card_fields", e.g. StoBatch's radius parameters, Secure-SGD's r_stats)."""
    spec = dict(_CERTIFICATION_SPEC)
    for declared in paper_registry.extensions("card_fields").values():
        spec.update(declared.load().get("certification", {}))
    return spec


def _public_options(method: Any) -> tuple:
    """The options of `method` the card may show: its module's declared OPTIONS (settings the
    user chose, never values fitted on data), without seeds and paths."""
    try:
        module = registry.method_module(str(method))
    except ValueError:
        return ()  # not a registered method: no option is known to be public
    declared = getattr(importlib.import_module(module), "OPTIONS", None)
    return tuple(n for n in (declared.names if declared is not None else ())
                 if not _is_private_flag(n))


def card_allow_list(method: Any) -> dict:
    """The model card's allow-list for a run of `method` (see the spec format above)."""
    options = _public_options(method)
    return {
        **{k: ANY for k in ("format", "created_utc", "noise_seeding", "signatures",
                            "signatures_exported")},
        "run": {k: ANY for k in _CONFIG_KEYS},
        "options": {k: ANY for k in options},
        "flags": frozenset(_CARD_FLAGS + options),
        "data": {k: ANY for k in ("dataset", "value_range", "input_shape", "num_classes",
                                  "preprocessing")},
        "ledger": _LEDGER_SPEC,
        "certification": _certification_spec(),
        "versions": {k: ANY for k in ("tfdp", "tensorflow", "keras", "numpy", "python")},
        "test": {k: ANY for k in _METRICS_KEYS},
        "evaluation": {k: ANY for k in _EVALUATION_KEYS},
        "source": {"model_sha256": ANY},
        "input_validation": {k: ANY for k in ("value_range", "non_finite", "out_of_range",
                                              "out_of_range_meaning", "shape", "num_draws")},
    }


def _flag_name(line: str) -> str:
    return line.strip()[2:].partition("=")[0] if line.strip().startswith("--") else ""


def apply_allow_list(value: Any, spec: Any) -> Any:
    """`value` with every key (at any depth) that `spec` does not list dropped."""
    if spec is ANY or value is None:
        return value
    if not isinstance(value, list) and isinstance(spec, (frozenset, list)):
        return None
    if isinstance(spec, frozenset):
        return [v for v in value if isinstance(v, str) and _flag_name(v) in spec]
    if isinstance(spec, list):
        return [apply_allow_list(v, spec[0]) for v in value if isinstance(v, dict)]
    if not isinstance(value, Mapping):
        return None
    return {k: apply_allow_list(v, spec[k]) for k, v in value.items() if k in spec}


def disallowed_paths(value: Any, spec: Any, path: str = "") -> list:
    """The paths ("ledger.entries[0].x", "flags[--seed]") of `value` that `spec` does not list."""
    if spec is ANY or value is None:
        return []
    if isinstance(spec, frozenset):
        if not isinstance(value, list):
            return [path]
        return [f"{path}[{v}]" for v in value if not isinstance(v, str)
                or _flag_name(v) not in spec]
    if isinstance(spec, list):
        if not isinstance(value, list):
            return [path]
        return [p for i, v in enumerate(value)
                for p in disallowed_paths(v, spec[0], f"{path}[{i}]")]
    if not isinstance(value, Mapping):
        return [path]
    out = []
    for k, v in value.items():
        sub = f"{path}.{k}" if path else str(k)
        out += [sub] if k not in spec else disallowed_paths(v, spec[k], sub)
    return out


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
    num_classes = int(num_classes)

    def checked(x):
        return serving_inputs.checked_x(x, value_range, out_of_range)
    x_spec = tf.TensorSpec([None] + [int(d) for d in input_shape], tf.float32, name="x")
    root = tf.__internal__.tracking.AutoTrackable()
    # The model's variables (weights and drawn-once noise), tracked so that they are saved.
    root.variables = list(model.variables)

    @tf.function(input_signature=[x_spec])
    def serving_default(x):
        return _outputs(fns.noise_free(checked(x)))

    @tf.function(input_signature=[x_spec])
    def serve(x):
        return tf.cast(fns.noise_free(checked(x)), tf.float32)

    root.serving_default = serving_default
    root.serve = serve
    signatures = {"serving_default": serving_default.get_concrete_function(),
                  "serve": serve.get_concrete_function()}

    if fns.has_noise:
        @tf.function(input_signature=[x_spec, tf.TensorSpec([], tf.int64, name="seed")])
        def noisy_predict(x, seed):
            return _outputs(fns.noisy(checked(x), _chunk_key(_base_key(seed, _TAG_NOISY), 0)))

        root.noisy_predict = noisy_predict
        signatures["noisy_predict"] = noisy_predict.get_concrete_function()

    if cert is not None:
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

        root.certify = certify
        signatures["certify"] = certify.get_concrete_function()
    # The tf.Variables the traced functions capture, tracked too: loaders without the object
    # graph (TF Serving, saved_model_cli's TF1 session) restore variables only through them.
    captured: dict[int, Any] = {}
    for fn in signatures.values():
        for v in fn.variables:
            captured.setdefault(id(v), v)
    root.captured_variables = list(captured.values())
    return root, signatures


# ------------------------------------------------------------------------- model card


def _read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _is_private_flag(name: str) -> bool:
    return name in _PRIVATE_FLAGS or name.endswith(("_seed", "_dir", "_file", "_path"))


def _flags_from_text(text: str) -> list:
    """The "--name[=value]" lines of flags.txt, without seeds, paths and run controls."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("--"):
            continue
        name = line[2:].partition("=")[0]
        if _is_private_flag(name) or (name.startswith("no") and _is_private_flag(name[2:])):
            continue
        out.append(line)
    return out


def _signature_docs(has_noise: bool, cert: Optional[dict], input_shape: Sequence[int],
                    value_range: Sequence[float], bound: str, draws_per_step: int) -> dict:
    x_doc = {"dtype": "float32", "shape": [None] + [int(d) for d in input_shape],
             "range": [float(v) for v in value_range],
             "meaning": "images, pixel p in 0..255 scaled to low + (high - low) * p / 255"}
    label = {"logits": "float32 [batch, K]", "probabilities": "float32 [batch, K] (softmax)",
             "class": "int64 [batch] (argmax)"}
    docs = {
        "serving_default": {"inputs": {"x": x_doc}, "outputs": label,
                            "noise": "off (deterministic)"},
        "serve": {"inputs": {"x": x_doc}, "outputs": {"output_0": "float32 [batch, K] logits"},
                  "noise": "off (deterministic); the endpoint keras Model.export() writes"},
    }
    if has_noise:
        docs["noisy_predict"] = {
            "inputs": {"x": x_doc, "seed": {"dtype": "int64", "shape": [],
                                            "meaning": "stateless noise seed"}},
            "outputs": label,
            "noise": "every noise layer's inference noise on; one draw per row of x; the "
                     "same seed gives the same output"}
    if cert is not None:
        prefix = "" if cert.get("sound") else "claimed_"
        docs["certify"] = {
            "inputs": {
                "x": x_doc,
                "num_draws": {"dtype": "int32", "shape": [], "range": ">= 1"
                              + (" (>= 2 for bernstein)" if bound == "bernstein" else "")},
                "alpha": {"dtype": "float64", "shape": [], "range": "(0, 1)",
                          "meaning": "failure probability; confidence 1 - alpha"},
                "attack_size": {"dtype": "float64", "shape": [], "range": ">= 0",
                                "meaning": "l-norm attack size in the units of x's range"},
                "seed": {"dtype": "int64", "shape": [], "meaning": "stateless noise seed; "
                         "use a fresh random seed for a certificate"}},
            "outputs": {"prediction": "int64 [batch]", "counts": "int64 [batch, K]",
                        "mean_scores": "float64 [batch, K]",
                        "lower_bound": "float64 [batch]", "upper_bound": "float64 [batch]",
                        prefix + "radius": "float64 [batch] (0 = abstain)",
                        prefix + "certified": "bool [batch]: radius >= attack_size and "
                                              "radius > 0"},
            "certificate": {"name": cert.get("name"), "norm": cert.get("norm"),
                            "sound": bool(cert.get("sound")),
                            "meaning": ("a proven bound" if cert.get("sound") else
                                        "CLAIMED, not certified: the sensitivity behind the "
                                        "radius is not a proven bound")},
            "bound": bound, "draws_per_step": int(draws_per_step)}
        if cert.get("selection_draws"):
            docs["certify"]["selection_draws"] = int(cert["selection_draws"])
    return docs


def build_model_card(run: rundir.RunDir, config: Mapping[str, Any], *, has_noise: bool,
                     bound: str, draws_per_step: int) -> dict:
    """The model card of a run, filtered by `card_allow_list` (a key not listed is dropped).

    Contains the ledger (sound and claimed totals, entries with their notes), the data set,
    value range and preprocessing, the flags (without the seed and local paths), the
    certification parameters, the versions, the test accuracy and the evaluation summary
    when the run has one. Never training loss, training accuracy or any other statistic of
    the training data.

    Args:
        run: the run directory.
        config: its config.json.
        has_noise: whether the model has noise layers (noisy_predict exists).
        bound: the certify signature's bound.
        draws_per_step: the certify signature's draws per forward pass.

    Returns:
        a JSON-ready dict.
    """
    cert = config.get("certification")
    if cert is not None:  # with the certificate's name, norm and (derived) soundness
        cert = certify_lib.validate_certification(cert)
    value_range = config.get("value_range") or [-1.0, 1.0]
    card: dict[str, Any] = {
        "format": CARD_FORMAT,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"),
        "run": {k: config[k] for k in _CONFIG_KEYS if k in config},
        "options": dict(config.get("options") or {}),
        "data": {
            "dataset": config.get("dataset"),
            "value_range": [float(v) for v in value_range],
            "input_shape": config.get("input_shape"),
            "num_classes": config.get("num_classes"),
            "preprocessing": ("float32 NHWC pixels; 8-bit value p becomes low + (high - low) "
                              "* p / 255 for value_range [low, high]; any further steps are "
                              "layers of the model"),
        },
        "ledger": _read_json(run.file(rundir.LEDGER_FILE)),
        "certification": cert,
        "versions": {"tfdp": tfdp.__version__, "tensorflow": tf.__version__,
                     "keras": keras.__version__, "numpy": np.__version__,
                     "python": platform.python_version()},
        "signatures": _signature_docs(has_noise, cert, config.get("input_shape") or [],
                                      value_range, bound, draws_per_step),
        "noise_seeding": ("draw seed = fold_in(fold_in([seed, tag], chunk), site); tag 1 "
                          "noisy_predict, 2 certify; chunk = Monte-Carlo step; site = the "
                          "model's noise draws in call order"),
        "source": {"model_sha256": rundir.file_sha256(run.file(rundir.MODEL_FILE))},
    }
    if run.exists(rundir.FLAGS_FILE):
        with open(run.file(rundir.FLAGS_FILE), encoding="utf-8") as f:
            card["flags"] = _flags_from_text(f.read())
    if run.exists(rundir.METRICS_FILE):
        card["test"] = _read_json(run.file(rundir.METRICS_FILE))
    if run.exists(rundir.EVALUATION_FILE):
        card["evaluation"] = _read_json(run.file(rundir.EVALUATION_FILE))
    return apply_allow_list(card, card_allow_list(config.get("method")))


# ------------------------------------------------------------------------- export


@dataclasses.dataclass
class ExportResult:
    """What `export_run` wrote.

    Attributes:
        export_dir: the SavedModel directory.
        signatures: the signature names.
        card: the model card.
    """

    export_dir: str
    signatures: list
    card: dict


def check_export_dir(export_dir: str, overwrite: bool) -> str:
    """Absolute export path; refuses an existing non-empty directory without overwrite.

    Raises:
        ValueError: naming export_dir.
    """
    if not export_dir:
        raise ValueError("export_dir: an output directory is required")
    path = os.path.abspath(os.path.expanduser(export_dir))
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"export_dir: {path} exists and is not a directory")
    if os.path.isdir(path) and os.listdir(path) and not overwrite:
        raise ValueError(f"export_dir: {path} exists and is not empty; pass overwrite=True "
                         "(--overwrite) to replace it")
    return path


def export_run(model_dir: str, export_dir: str, *, overwrite: bool = False,
               bound: Optional[str] = None,
               draws_per_step: int = DEFAULT_DRAWS_PER_STEP,
               include_keras: bool = True, out_of_range: str = "reject") -> ExportResult:
    """Exports a finished run directory as a SavedModel with a model card.

    The SavedModel is written to a temporary directory beside `export_dir` and renamed into
    place only when complete, so a failed export leaves no half-written directory.

    Args:
        model_dir: the run directory (model.keras, config.json and ledger.json).
        export_dir: the SavedModel directory to create.
        overwrite: replace an existing non-empty export_dir.
        bound: confidence bound of the certify signature (default: the run's certification
            "bound", else Clopper-Pearson).
        draws_per_step: Monte-Carlo draws per forward pass of certify.
        include_keras: also copy model.keras into the export (Keras users load it with
            tfdp's custom layers; see docs/export.md).
        out_of_range: what the signatures do with x outside the run's value range:
            "reject" (fail the call) or "clip"; recorded in the card's "input_validation".

    Returns:
        an ExportResult.

    Raises:
        ValueError: on an unfinished run directory, an existing export_dir without
            overwrite, or bad options; before any work.
    """
    run = rundir.RunDir(model_dir)
    if not os.path.isdir(run.path):
        raise ValueError(f"model_dir: {run.path} is not a directory")
    for name in (rundir.CONFIG_FILE, rundir.MODEL_FILE, rundir.LEDGER_FILE):
        if not run.exists(name):
            raise ValueError(f"model_dir: {run.path} has no {name}; is it a finished run?")
    problem = rundir.model_file_problem(run.file(rundir.MODEL_FILE))
    if problem:
        raise ValueError(rundir.corrupt_model_message(run.file(rundir.MODEL_FILE), problem))
    target = check_export_dir(export_dir, overwrite)
    if os.path.commonpath([target, run.path]) == target:
        raise ValueError("export_dir: must not be the run directory or a folder holding it")
    draws_per_step = checks.check_int(draws_per_step, "draws_per_step", minimum=1)
    out_of_range = serving_inputs.check_out_of_range(out_of_range)
    config = run.read_json(rundir.CONFIG_FILE)
    cert = config.get("certification")
    if cert is not None:
        cert = certify_lib.validate_certification(cert)
    bound = bound or (cert or {}).get("bound") or "clopper_pearson"
    if bound not in certify_lib.BOUNDS:
        raise ValueError(f"bound must be one of {certify_lib.BOUNDS}, got {bound!r}")
    for key in ("input_shape", "num_classes"):
        if not config.get(key):
            raise ValueError(f"model_dir: config.json has no {key!r}")

    model, _ = run_model.load_run(run.path)
    module, signatures = build_module(model, cert, config["input_shape"],
                                      config["num_classes"], bound=bound,
                                      draws_per_step=draws_per_step,
                                      value_range=config.get("value_range") or (-1.0, 1.0),
                                      out_of_range=out_of_range)
    card = build_model_card(run, config, has_noise="noisy_predict" in signatures,
                            bound=bound, draws_per_step=draws_per_step)
    card["signatures_exported"] = sorted(signatures)
    card["input_validation"] = serving_inputs.card_entry(
        config.get("value_range") or (-1.0, 1.0), out_of_range)
    card = apply_allow_list(card, card_allow_list(config.get("method")))

    parent = os.path.dirname(target)
    created_parent = not os.path.exists(parent)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".tmp-{os.path.basename(target)}-")
    staging = tempfile.mkdtemp(prefix="tfdp-card-")
    try:
        card_path = rundir.write_json_atomic(os.path.join(staging, CARD_FILE), card)
        module.model_card = tf.saved_model.Asset(card_path)
        # The card bound to the model: its sha256, a variable of the SavedModel, checked at
        # load (`ExportedModel`, docs/export.md).
        module.model_card_sha256 = tf.Variable(rundir.file_sha256(card_path), trainable=False,
                                               name=CARD_DIGEST)
        with noise_layers.noise_kernel("portable"):  # any retrace stays portable
            tf.saved_model.save(module, tmp, signatures=signatures)
        shutil.copyfile(card_path, os.path.join(tmp, CARD_FILE))
        if include_keras:
            shutil.copyfile(run.file(rundir.MODEL_FILE), os.path.join(tmp, KERAS_FILE))
        _replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if created_parent:
            with contextlib.suppress(OSError):
                os.rmdir(parent)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ExportResult(target, sorted(signatures), card)


def latest_run(folder: str) -> str:
    """The most recently finished run directory directly inside `folder`.

    Args:
        folder: a folder of run directories (e.g. runs/).

    Returns:
        the path of the subdirectory whose model.keras is newest.

    Raises:
        ValueError: naming --latest_under, if the folder holds no finished run.
    """
    candidates = []
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            model = os.path.join(folder, name, rundir.MODEL_FILE)
            if os.path.isfile(model):
                candidates.append((os.path.getmtime(model), os.path.join(folder, name)))
    if not candidates:
        raise ValueError(f"latest_under: {folder} holds no finished run directory "
                         f"(none has {rundir.MODEL_FILE})")
    return max(candidates)[1]


def _replace_dir(src: str, dst: str) -> None:
    """Renames the finished directory src to dst, replacing dst (old copy removed last)."""
    if not os.path.exists(dst):
        os.replace(src, dst)
        return
    if os.path.isdir(dst) and not os.listdir(dst):
        os.rmdir(dst)
        os.replace(src, dst)
        return
    old = tempfile.mkdtemp(dir=os.path.dirname(dst), prefix=f".old-{os.path.basename(dst)}-")
    os.rmdir(old)
    os.replace(dst, old)
    try:
        os.replace(src, dst)
    except BaseException:
        os.replace(old, dst)
        raise
    shutil.rmtree(old, ignore_errors=True)


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


# ------------------------------------------------------------------ loading an export


def check_card_binding(loaded: Any, export_dir: str) -> Optional[str]:
    """Checks that the export's model_card.json files are the card it was exported with.

    Args:
      loaded: the loaded SavedModel (`tf.saved_model.load(export_dir)`).
      export_dir: the export directory.

    Returns:
      The card's sha256, or None for an export made before cards were bound (no digest).

    Raises:
      ValueError: one line naming the edited card file and both digests.
    """
    if not hasattr(loaded, CARD_DIGEST):
        return None
    want = getattr(loaded, CARD_DIGEST).numpy().decode("ascii")
    for path in (os.path.join(export_dir, CARD_FILE),
                 os.path.join(export_dir, "assets", CARD_FILE)):
        if os.path.isfile(path):
            got = rundir.file_sha256(path)
            if got != want:
                raise ValueError(f"saved_model: {path} is not the card this model was exported "
                                 f"with (sha256 {got[:16]}..., the SavedModel's "
                                 f"{CARD_DIGEST} is {want[:16]}...); it was edited: export the "
                                 "run again")
    return want


class ExportedModel:
    """An exported SavedModel and its model card, as the evaluation harness uses it.

    Needs only TensorFlow to load; tfdp is used only for argument checks.

    Args:
        path: the export directory.

    Raises:
        ValueError: if the directory holds no SavedModel or no model card.
    """

    def __init__(self, path: str):
        self.path = os.path.abspath(os.path.expanduser(path or ""))
        if not path or not os.path.isfile(os.path.join(self.path, "saved_model.pb")):
            raise ValueError(f"saved_model: {self.path} holds no saved_model.pb")
        card_path = os.path.join(self.path, CARD_FILE)
        if not os.path.isfile(card_path):
            card_path = os.path.join(self.path, "assets", CARD_FILE)
        if not os.path.isfile(card_path):
            raise ValueError(f"saved_model: {self.path} has no {CARD_FILE}")
        self.loaded = tf.saved_model.load(self.path)
        self.card = _read_json(card_path)
        check_card_binding(self.loaded, self.path)
        self.signatures = sorted(self.loaded.signatures.keys())

    @property
    def certification(self) -> Optional[dict]:
        return self.card.get("certification")

    @property
    def certify_bound(self) -> Optional[str]:
        sig = self.card.get("signatures", {}).get("certify")
        return sig.get("bound") if sig else None

    @property
    def has_noise(self) -> bool:
        return hasattr(self.loaded, "noisy_predict")

    def check_input(self, x: Any) -> None:
        """Refuses inputs whose shape the signatures do not take, naming the card's.

        Raises:
          ValueError: naming the expected shape and dtype (from the card) and the given.
        """
        shape = (self.card.get("data") or {}).get("input_shape")
        if not shape:
            return
        got = list(getattr(x, "shape", np.shape(x)))
        dtype = getattr(getattr(x, "dtype", None), "name", None) or str(np.asarray(x).dtype)
        if len(got) != len(shape) + 1 or [int(d) for d in got[1:]] != [int(d) for d in shape]:
            raise ValueError(f"x: the model takes float32 batches of shape [batch, "
                             f"{', '.join(str(int(d)) for d in shape)}] (model card "
                             f"data.input_shape), got shape {got} ({dtype})")
        if not (dtype.startswith("float") or dtype.startswith("int")
                or dtype.startswith("uint")):
            raise ValueError(f"x: the model takes float32 values, got {dtype}")

    def noise_free(self, x: tf.Tensor) -> tf.Tensor:
        """Noise-free logits (the `serve` endpoint); differentiable."""
        self.check_input(x)
        return self.loaded.serve(tf.cast(x, tf.float32))

    def noisy(self, x: tf.Tensor) -> tf.Tensor:
        """Logits of one noisy pass with a fresh random seed per call; differentiable."""
        self.check_input(x)
        seed = tf.random.uniform([], 0, 2**62, dtype=tf.int64)
        return self.loaded.noisy_predict(tf.cast(x, tf.float32), seed)["logits"]

    def certify(self, x: Any, num_draws: int, alpha: float, attack_size: float,
                seed: int) -> dict:
        """Calls the `certify` signature; returns numpy arrays.

        Raises:
            ValueError: without a certify signature, or on bad arguments (before calling).
        """
        if not hasattr(self.loaded, "certify"):
            raise ValueError("saved_model: the export has no certify signature (the run has "
                             "no certification entry)")
        self.check_input(x)
        n = checks.check_positive_int(num_draws, "num_draws", allow_integral_float=True)
        if n > serving_inputs.MAX_NUM_DRAWS:
            raise ValueError(f"num_draws must be <= {serving_inputs.MAX_NUM_DRAWS}, got {n}")
        alpha = checks.check_unit_interval(alpha, "alpha")
        size = checks.check_nonnegative(attack_size, "attack_size")
        out = self.loaded.certify(tf.constant(np.asarray(x, np.float32)),
                                  tf.constant(n, tf.int32), tf.constant(alpha, tf.float64),
                                  tf.constant(size, tf.float64),
                                  tf.constant(int(seed), tf.int64))
        return {k: v.numpy() for k, v in out.items()}
