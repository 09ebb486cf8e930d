"""The clipped sum of per-example gradients of any Keras model, from one batched pass.

One batched forward pass records, for every layer owning trainable variables, its input a and
its (pre-activation) output z; one backward pass gives g = dl/dz for all of them. Each layer's
per-example squared gradient norms come from its registered rule (`tfdp.keras.layers`) or, for
unregistered layers, from per-example gradients of that layer alone (`tf.vectorized_map`).
With c_i = min(1, C / ||g_i||) (Abadi et al. 2016, Alg. 1) every layer's clipped sum
sum_i c_i grad_W <g_i, z_i> is ONE batched vector-Jacobian product of z with output gradient
c g (or, where per-example gradients were materialised anyway, their c-weighted sum, which a
rule may compute in its own layout).

A model on which this is not exact - a layer called more than once, a layer taking several
inputs, variables outside every layer (a subclassed model's own weights) - takes the
vectorized path over the whole model instead: per-example gradients by `tf.vectorized_map`
(`tfdp.train.privatize.clip_and_sum`), slower and the same result.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

import tensorflow as tf
from absl import logging

from tfdp.keras import layers as rules
from tfdp.train import example_grads, privatize

_LOGGED: set = set()


def _log_once(key: str, message: str) -> None:
    if key not in _LOGGED:
        _LOGGED.add(key)
        logging.info("%s", message)
        print(f"tfdp.keras: {message}")


@dataclasses.dataclass
class LayerEntry:
    """One layer owning trainable variables.

    Attributes:
      layer: the Keras layer.
      rule: its registered rule, or None (vectorized over this layer alone).
      var_index: positions in `variables` of `layer._trainable_variables`, in that order.
    """

    layer: Any
    rule: Optional[rules.LayerRule]
    var_index: list


def plan(model: Any, variables: Sequence[Any]) -> Optional[list]:
    """The per-layer plan, or None when the whole model takes the vectorized path.

    Raises:
      ValueError: if the model contains a layer that mixes the examples of a batch.
    """
    rules.check_model(model)
    index = {id(v): i for i, v in enumerate(variables)}
    entries, covered = [], set()
    for layer in model._flatten_layers(include_self=False):  # pylint: disable=protected-access
        own = [v for v in layer._trainable_variables if id(v) in index]  # pylint: disable=protected-access
        if not own:
            continue
        if len(own) != len(layer._trainable_variables):  # pylint: disable=protected-access
            _log_once(f"partial:{layer.name}", f"layer {layer.name} is partly trainable: the "
                      "whole model uses vectorized per-example gradients")
            return None
        rule = rules.rule_for(layer)
        if rule is None:
            _log_once(f"fallback:{type(layer).__name__}",
                      f"no registered per-example norm for {type(layer).__name__} (layer "
                      f"{layer.name}): vectorized per-example gradients for its layers")
        order = [index[id(v)] for v in own]
        if covered.intersection(order):
            return None
        covered.update(order)
        entries.append(LayerEntry(layer, rule, order))
    if len(covered) != len(variables):
        _log_once(f"uncovered:{model.name}", f"model {model.name} has trainable variables "
                  "outside its layers: vectorized per-example gradients for the whole model")
        return None
    return entries


def describe(model: Any) -> list:
    """(layer name, layer type, rule or "vectorized") for each layer with trainable variables."""
    entries = plan(model, model.trainable_variables)
    if entries is None:
        return [(model.name, type(model).__name__, "vectorized (whole model)")]
    return [(e.layer.name, type(e.layer).__name__, e.rule.name if e.rule else "vectorized")
            for e in entries]


class _NotExact(Exception):
    """The recorded pass cannot give exact per-example gradients (use the whole-model path)."""


class _Recorder:
    """Wraps each planned layer's `call` to record (input, pre-activation output, kwargs)."""

    def __init__(self, entries: list):
        self.entries = entries
        self.records: dict[int, list] = {id(e.layer): [] for e in entries}

    def _wrap(self, entry: LayerEntry) -> Callable:
        layer, rule = entry.layer, entry.rule
        original = type(layer).call
        records = self.records[id(layer)]

        def call(*args, **kwargs):
            activation = getattr(layer, "activation", None) if (
                rule is not None and rule.pre_activation) else None
            if activation is not None:
                object.__setattr__(layer, "activation", None)
                try:
                    z = original(layer, *args, **kwargs)
                finally:
                    object.__setattr__(layer, "activation", activation)
                out = activation(z)
            else:
                z = out = original(layer, *args, **kwargs)
            records.append((args, kwargs, z))
            return out

        return call

    def __enter__(self):
        for e in self.entries:
            if "call" in e.layer.__dict__:
                raise _NotExact(f"layer {e.layer.name} has an instance-level call")
            object.__setattr__(e.layer, "call", self._wrap(e))
        return self

    def __exit__(self, *exc):
        for e in self.entries:
            e.layer.__dict__.pop("call", None)
        return False


def _fallback_per_example(entry: LayerEntry, variables: Sequence[Any], a: tf.Tensor,
                          g: tf.Tensor, kwargs: dict) -> list:
    """Per-example gradients of one layer's own variables, [B, *shape] each."""
    layer = entry.layer
    own = [variables[i] for i in entry.var_index]
    return example_grads.layer_gradients(lambda ai: layer(ai, **kwargs), own, a, g)


def _per_example_loss(loss_fn: Callable, y: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
    losses = loss_fn(y, y_pred)
    losses = tf.convert_to_tensor(losses)
    if losses.shape.rank is None or losses.shape.rank == 0:
        raise ValueError("loss: must give one value per example (reduction=None), got a scalar")
    if losses.shape.rank > 1:
        losses = tf.reduce_mean(tf.reshape(losses, [tf.shape(losses)[0], -1]), 1)
    return losses


def _whole_model(model: Any, variables: Sequence[Any], x: tf.Tensor, y: tf.Tensor,
                 loss_fn: Callable, l2_clip: float, mask: Optional[tf.Tensor], training: bool
                 ) -> tuple[list, tf.Tensor, tf.Tensor]:
    def one(args):
        xi, yi = args
        with tf.GradientTape() as tape:
            pred = model(xi[None], training=training)
            loss = _per_example_loss(loss_fn, yi[None], pred)[0]
        return tape.gradient(loss, variables, unconnected_gradients="zero"), loss, pred[0]

    grads, losses, preds = example_grads.map_examples(one, (x, y), model)
    return privatize.clip_and_sum(grads, l2_clip, mask), losses, preds


def clipped_gradient_sum(model: Any, entries: Optional[list], variables: Sequence[Any],
                         x: tf.Tensor, y: tf.Tensor, loss_fn: Callable, l2_clip: float, *,
                         mask: Optional[tf.Tensor] = None, training: bool = True
                         ) -> tuple[list, tf.Tensor, tf.Tensor]:
    """sum_i clip_C(grad of loss_i), per-example losses and the batch's predictions.

    Args:
      model: the Keras model.
      entries: `plan(model, variables)` (None: vectorized over the whole model).
      variables: the variables to differentiate.
      x: inputs [B, ...].
      y: targets [B, ...].
      loss_fn: `f(y, y_pred) -> [B]` per-example losses (extra axes are averaged).
      l2_clip: the clipping bound C > 0.
      mask: optional float [B]; rows with 0.0 (padding) add nothing.
      training: the `training` argument of the model call.

    Returns:
      (sums, losses [B], y_pred [B, ...]).
    """
    if entries is not None:
        try:
            return _recorded(model, entries, variables, x, y, loss_fn, l2_clip, mask, training)
        except _NotExact as err:
            _log_once(f"notexact:{model.name}:{err}", f"{err}: vectorized per-example gradients "
                      "for the whole model")
    return _whole_model(model, variables, x, y, loss_fn, l2_clip, mask, training)


def _recorded(model, entries, variables, x, y, loss_fn, l2_clip, mask, training):
    recorder = _Recorder(entries)
    with tf.GradientTape(persistent=True) as tape:
        with recorder:
            y_pred = model(x, training=training)
        losses = _per_example_loss(loss_fn, y, y_pred)
        total = tf.reduce_sum(losses)
    outs = []
    for e in entries:
        calls = recorder.records[id(e.layer)]
        if len(calls) != 1:
            raise _NotExact(f"layer {e.layer.name} ran {len(calls)} times in one pass")
        args, _, z = calls[0]
        if len(args) != 1 or not tf.is_tensor(args[0]) or not tf.is_tensor(z):
            raise _NotExact(f"layer {e.layer.name} does not map one tensor to one tensor")
        outs.append(z)
    out_grads = tape.gradient(total, outs, unconnected_gradients="zero")

    sq = tf.zeros_like(losses)
    materialised: dict[int, list] = {}
    for e, g, z in zip(entries, out_grads, outs):
        args, kwargs, _ = recorder.records[id(e.layer)][0]
        a = tf.stop_gradient(args[0])
        if e.rule is None:
            per_example = _fallback_per_example(e, variables, a, g, kwargs)
            layer_sq = tf.add_n([tf.reduce_sum(tf.reshape(tf.square(pe), [tf.shape(pe)[0], -1]), 1)
                                 for pe in per_example])
        elif e.rule.uses_output:
            layer_sq, per_example = e.rule.sq_norms(e.layer, a, g, z=tf.stop_gradient(z))
        else:
            layer_sq, per_example = e.rule.sq_norms(e.layer, a, g)
        sq += layer_sq
        if per_example is not None:
            materialised[id(e.layer)] = per_example
    # Abadi et al. 2016, Alg. 1: g_i / max(1, ||g_i||_2 / C).
    factors = tf.stop_gradient(example_grads.clip_factors(sq, l2_clip, mask))

    sums: list = [None] * len(variables)
    for e, g, z in zip(entries, out_grads, outs):
        if id(e.layer) in materialised:
            per_example = materialised[id(e.layer)]
            weighted_sums = (per_example(factors) if callable(per_example) else
                             [tf.tensordot(factors, pe, axes=1) for pe in per_example])
            for i, total in zip(e.var_index, weighted_sums):
                sums[i] = total
            continue
        weighted = g * tf.reshape(factors, [-1] + [1] * (len(g.shape) - 1))
        own = [variables[i] for i in e.var_index]
        # One batched vector-Jacobian product: sum_i c_i grad_W <g_i, z_i>.
        for i, grad in zip(e.var_index, tape.gradient(z, own, output_gradients=weighted,
                                                      unconnected_gradients="zero")):
            sums[i] = tf.convert_to_tensor(grad)
    del tape
    return sums, losses, y_pred
