"""A trained run's model and the functions the evaluation and the export build from it.

`load_run` reads a run directory's model (with every paper's Keras objects registered);
`model_functions` gives its noise-free logits, its noisy score (the Monte-Carlo input of the
certificates) and whether that score is logits. `tfdp.evaluate` and `tfdp.export` both use
them; this module uses neither.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import keras

import layers as layers_lib
from tfdp import certify as certify_lib
from tfdp import registry, rundir
from tfdp.certify import smoothing


def load_run(model_dir: str) -> tuple[Any, dict]:
    """Loads a run directory's model and config.

    Args:
        model_dir: the run directory.

    Returns:
        (keras model, config dict).

    Raises:
        ValueError: if the directory lacks config.json or model.keras, or model.keras is
            corrupt (truncated, bad CRC).
    """
    rd = rundir.RunDir(model_dir)
    for name in (rundir.CONFIG_FILE, rundir.MODEL_FILE):
        if not rd.exists(name):
            raise ValueError(f"model_dir: {rd.path} has no {name}; is it a finished run?")
    problem = rundir.model_file_problem(rd.file(rundir.MODEL_FILE))
    if problem:
        raise ValueError(rundir.corrupt_model_message(rd.file(rundir.MODEL_FILE), problem))
    registry.import_keras_objects()  # the papers' registered layers and models
    config = rd.read_json(rundir.CONFIG_FILE)
    model = keras.saving.load_model(rd.file(rundir.MODEL_FILE), compile=False)
    return model, config


@contextlib.contextmanager
def _noise(model: Any, enabled: bool, fresh_layers: Optional[Sequence[str]] = None
           ) -> Iterator[None]:
    """Sets the inference noise of the model's noise layers for the enclosed calls.

    Noise layers read their switch when a graph is traced, so this wraps the model call
    inside the traced function. With `fresh_layers`, only the named layers draw fresh noise;
    the others keep their stored noise ("once" mode) without a fresh draw (StoBatch
    Corollary 1: each pass randomises one mechanism, the other keeps its fixed noise).
    """
    noise_layers = layers_lib.noise_layers(model)
    saved = [(l, l.inference_noise, l.inference_fresh_scale) for l in noise_layers]
    try:
        layers_lib.set_inference_noise(model, enabled)
        if enabled and fresh_layers is not None:
            wanted = set(fresh_layers)
            for layer in noise_layers:
                if layer.name not in wanted:
                    layer.inference_fresh_scale = 0.0
        yield
    finally:
        for layer, on, scale in saved:
            layer.inference_noise = on
            layer.inference_fresh_scale = scale


def model_functions(model: Any, certification: Optional[Mapping[str, Any]],
                    seed: Optional[int] = None) -> tuple[Callable, Callable, bool]:
    """The noise-free logits function, the noisy score function and whether it is logits.

    Args:
        model: a Keras model built from tfdp layers.
        certification: the run's certification dict (or None).
        seed: the evaluation seed keying randomized smoothing's input draws (None: the
            global generator); the noise layers are keyed by `layers.set_noise_seeds`.

    Returns:
        (noise_free_fn, noisy_score_fn, noisy_fn_returns_logits).
    """
    def noise_free(x):
        with _noise(model, False):
            return model(x, training=False)

    def noisy(x):
        with _noise(model, True):
            return model(x, training=False)

    if smoothing.is_smoothing(certification):
        # Randomized smoothing (Cohen et al. 2019): noise on the input of the base classifier.
        return (noise_free,
                smoothing.smoothed_score(noise_free, float(certification["sigma"]), seed), True)
    passes = (certification or {}).get("passes")
    if passes:
        known = {layer.name for layer in layers_lib.noise_layers(model)}
        for names in passes:
            missing = set(names) - known
            if missing:
                raise ValueError(f"certification['passes'] names {sorted(missing)}, which are "
                                 f"not noise layers of the model (it has {sorted(known)})")

        def make_pass(names):
            def fn(x):
                with _noise(model, True, fresh_layers=names):
                    return model(x, training=False)
            return fn
        # StoBatch Theorem 5 / Corollary 1: product of the passes' softmax outputs
        return noise_free, certify_lib.product_of_softmax([make_pass(p) for p in passes]), False
    return noise_free, noisy, True
