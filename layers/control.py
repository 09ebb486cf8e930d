"""Switching inference noise on and off across (nested) Keras models."""

from __future__ import annotations

from typing import Any

import keras

from layers.noise import _NoiseLayer


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


def set_inference_noise(model_or_layer: Any, enabled: bool) -> int:
    """Turns inference noise on or off on every tfdp noise layer inside a (nested) model.

    With inference noise on, a noise layer adds noise also when called with
    `training=False` (certification needs this: every row of the batch gets an independent
    Monte-Carlo draw). Keras' cached `predict`/`evaluate`/`fit` functions of every model
    found are reset so they retrace; tf.functions of your own that call the model must be
    re-traced (e.g. re-created) after switching, because the switch is a Python attribute
    read at trace time.

    Args:
        model_or_layer: a Keras model or layer; nested models and sub-layers are searched.
        enabled: True to add noise at inference, False to switch it off.

    Returns:
        The number of noise layers found (and set).

    Raises:
        ValueError: if model_or_layer is not a Keras layer or enabled is not a bool.
    """
    if not isinstance(model_or_layer, keras.layers.Layer):
        raise ValueError(f"model_or_layer must be a Keras layer or model, got "
                         f"{type(model_or_layer).__name__}")
    if not isinstance(enabled, bool):
        raise ValueError(f"enabled must be a bool, got {enabled!r}")
    count = 0
    for layer in _walk(model_or_layer, set()):
        if isinstance(layer, _NoiseLayer):
            layer.inference_noise = enabled
            count += 1
    for layer in _walk(model_or_layer, set()):
        if isinstance(layer, keras.Model):
            for attr in ("predict_function", "test_function", "train_function"):
                if getattr(layer, attr, None) is not None:
                    setattr(layer, attr, None)
    return count
