"""Switching inference noise on and off across (nested) Keras models."""

from __future__ import annotations

import hashlib
from typing import Any, Optional, Sequence

import keras

from layers.noise import _NoiseLayer
from layers.noise_checks import _check_nonneg_float


def _walk(layer: Any, seen: set) -> list:
    """All layers reachable from `layer` (itself included), each once."""
    out = []
    stack = [layer]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        out.append(current)
        children = current._flatten_layers(include_self=False, recursive=False) \
            if hasattr(current, "_flatten_layers") else []
        stack.extend(children)
    return out


def noise_layers(model_or_layer: Any) -> list:
    """Every tfdp noise layer inside a model or layer (itself included): nested models and
    layers' own sublayers, each once. The one walker the evaluation and the export use."""
    return [layer for layer in _walk(model_or_layer, set()) if isinstance(layer, _NoiseLayer)]


def _reset_cached_functions(model_or_layer: Any) -> None:
    """Drops Keras' cached predict/test/train functions of every model found, so they retrace
    (noise settings and seeds are read when a graph is traced)."""
    for layer in _walk(model_or_layer, set()):
        if isinstance(layer, keras.Model):
            for attr in ("predict_function", "test_function", "train_function"):
                if getattr(layer, attr, None) is not None:
                    setattr(layer, attr, None)


def set_inference_noise(model_or_layer: Any, enabled: bool, *,
                        fresh_scale: Optional[float] = None,
                        include_fixed: Optional[bool] = None,
                        names: Optional[Sequence[str]] = None) -> int:
    """Turns inference noise on or off on every tfdp noise layer inside a (nested) model.

    With inference noise on, a noise layer adds noise also when called with
    `training=False` (certification needs this: every row of the batch gets an independent
    Monte-Carlo draw). Keras' cached `predict`/`evaluate`/`fit` functions of every model
    found are reset so they retrace; tf.functions of your own that call the model must be
    re-traced (e.g. re-created) after switching, because the switch is a Python attribute
    read at trace time.

    StoBatch's two-pass Monte-Carlo score (StoBatch Alg. 3, Corollary 1) is, for example:
    `set_inference_noise(model, True, fresh_scale=0.0)` (stored draws only), then
    `set_inference_noise(model, True, fresh_scale=1 / psi, names=["input_noise"])` for the
    pass that randomises the input only. Pass the model (not a single layer) so that its
    cached predict function is reset.

    Args:
        model_or_layer: a Keras model or layer; nested models and sub-layers are searched.
        enabled: True to add noise at inference, False to switch it off.
        fresh_scale: if given, also sets every found layer's `inference_fresh_scale` (>= 0).
        include_fixed: if given, also sets every found layer's `inference_fixed_noise`.
        names: if given, only noise layers with these names are switched.

    Returns:
        The number of noise layers found (and set).

    Raises:
        ValueError: if model_or_layer is not a Keras layer, enabled / include_fixed is not a
            bool, fresh_scale is negative or not finite, or names is not a list of strings.
    """
    if not isinstance(model_or_layer, keras.layers.Layer):
        raise ValueError(f"model_or_layer must be a Keras layer or model, got "
                         f"{type(model_or_layer).__name__}")
    if not isinstance(enabled, bool):
        raise ValueError(f"enabled must be a bool, got {enabled!r}")
    if fresh_scale is not None:
        fresh_scale = _check_nonneg_float(fresh_scale, "fresh_scale")
    if include_fixed is not None and not isinstance(include_fixed, bool):
        raise ValueError(f"include_fixed must be a bool or None, got {include_fixed!r}")
    if names is not None:
        if isinstance(names, str) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"names must be a sequence of layer names, got {names!r}")
        names = set(names)
    count = 0
    for layer in _walk(model_or_layer, set()):
        if isinstance(layer, _NoiseLayer) and (names is None or layer.name in names):
            layer.inference_noise = enabled
            if fresh_scale is not None:
                layer.inference_fresh_scale = fresh_scale
            if include_fixed is not None:
                layer.inference_fixed_noise = include_fixed
            count += 1
    _reset_cached_functions(model_or_layer)
    return count


def set_noise_seeds(model_or_layer: Any, seed: int) -> int:
    """Keys every tfdp noise layer's inference stream to an evaluation seed.

    A model loaded from `model.keras` carries no layer seed (the training run's streams stay
    secret, in its checkpoint), so each load draws fresh OS entropy and two evaluations of the
    same model see different Monte-Carlo noise. An evaluation run with `--seed` calls this
    after loading: each layer's stream becomes a hash of the evaluation seed and the layer's
    position in the model (its path), never of any training seed or data. Call it before any
    function that calls the model is traced (the seed is read at trace time).

    Args:
        model_or_layer: a Keras model or layer; nested models and sub-layers are searched.
        seed: the evaluation seed (a non-negative int).

    Returns:
        The number of noise layers keyed.

    Raises:
        ValueError: if model_or_layer is not a Keras layer or seed is not a non-negative int.
    """
    if not isinstance(model_or_layer, keras.layers.Layer):
        raise ValueError(f"model_or_layer must be a Keras layer or model, got "
                         f"{type(model_or_layer).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, (int,)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    count = 0
    for layer in _walk(model_or_layer, set()):
        if isinstance(layer, _NoiseLayer):
            where = getattr(layer, "path", None) or layer.name
            digest = hashlib.sha256(f"tfdp-evaluation-noise:{int(seed)}:{where}".encode())
            layer._base_seed = int.from_bytes(digest.digest()[:8], "big") % (2**63 - 1)
            count += 1
    _reset_cached_functions(model_or_layer)
    return count
