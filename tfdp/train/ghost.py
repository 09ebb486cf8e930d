"""Per-example clipping without per-example gradients of the whole model ("ghost" clipping).

For a layer z = a W (+ b) the gradient of example i's loss is a_i^T g_i with
g_i = dl_i / dz_i, so its squared norm follows from the layer's input a and output gradient g
of ONE batched backward pass:

* 2-D input (Dense): ||a_i^T g_i||_F^2 = ||a_i||^2 ||g_i||^2.
* T positions (Conv2D with a_i the image patches [T, k], Dense on sequences):
  the ghost norm ||A_i^T G_i||_F^2 = <A_i A_i^T, G_i G_i^T> (Gram matrices, cost T^2 (k + o)),
  or the per-example kernel gradient A_i^T G_i itself (cost T k o), whichever is cheaper
  ("auto"); "ghost" always takes the Gram form.
* bias: ||sum_t g_{i,t}||^2.

Layers with trainable variables that are neither (custom layers, nested models, ...) get
their per-example gradients by `tf.vectorized_map` over that layer alone, fed with the
recorded inputs and output gradients. The per-example norm over all layers gives the clip
factors c_i = min(1, C / ||g_i||) (Abadi et al. 2016, Alg. 1), and the clipped sum of each
layer is one batched vector-Jacobian product with output gradient c_i g_i (for Dense a^T (c g),
for Conv2D one batched filter gradient); no second pass through the network is needed.

The forward pass is run ONCE on the whole batch, so noise layers (layers/noise.py) draw their
noise once per call exactly as in a non-private step. Models whose layers mix examples
(batch normalisation, per-batch min-max bounding) have no per-example gradient in the batched
pass; for them, as for subclassed models and losses that read variables directly, `plan_model`
returns None and the caller uses the vectorized path.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf
from keras.src.layers.convolutional.base_conv import BaseConv
from keras.src.models import functional as keras_functional

from tfdp.train import example_grads, metrics

METHODS = ("ghost", "auto")

# Layers whose output for one example depends on the other examples of the batch.
_BATCH_MIXING = ("BatchNormalization", "BatchStatNorm", "MinMaxBound")


class _Unsupported(Exception):
    """The model as a whole cannot take the ghost path (caller falls back to vectorized)."""


@dataclasses.dataclass
class LayerPlan:
    """How one layer's per-example gradient norms are obtained.

    Attributes:
      layer: the Keras layer.
      kind: "dense", "conv2d" or "fallback".
      norm: "ghost" (Gram matrices), "direct" (per-example kernel gradients, for Conv2D from
        image patches; for 2-D Dense both are the same product of norms) or "vectorized".
      var_index: positions in `variables` of the layer's trainable variables, in the order
        (kernel, bias) for dense/conv2d and `layer.trainable_variables` order for fallback.
    """

    layer: Any
    kind: str
    norm: str
    var_index: list


def _var_key(v: Any) -> int:
    return id(v)


def _graph_of(model: Any) -> Any:
    if isinstance(model, keras.Sequential):
        model = getattr(model, "_functional", None)
    if not isinstance(model, keras_functional.Functional):
        raise _Unsupported("not a functional model")
    return model


def _kernel_var(layer: Any) -> Any:
    """The kernel variable itself (Keras keeps it in `_kernel`; `kernel` may be derived)."""
    kernel = getattr(layer, "_kernel", None)
    return layer.kernel if kernel is None else kernel


def _is_plain_dense(layer: Any) -> bool:
    return (type(layer).call is keras.layers.Dense.call and isinstance(layer, keras.layers.Dense)
            and not getattr(layer, "lora_enabled", False)
            and getattr(layer, "quantization_mode", None) is None)


def _is_plain_conv2d(layer: Any) -> bool:
    return (isinstance(layer, keras.layers.Conv2D) and type(layer).call is BaseConv.call
            and type(layer).convolution_op is BaseConv.convolution_op
            and layer.data_format == "channels_last" and layer.padding in ("same", "valid")
            and not getattr(layer, "lora_enabled", False)
            and getattr(layer, "quantization_mode", None) is None)


def plan_model(model: Any, variables: Sequence[Any], method: str = "auto",
               batch_size: Optional[int] = None) -> Optional[list]:
    """Per-layer plan of the ghost path, or None when the model must use the vectorized path.

    Args:
      model: a Keras functional or Sequential model.
      variables: the variables to differentiate (each must belong to one layer of the model).
      method: "ghost" or "auto".
      batch_size: unused by the plan (costs are per example); kept for diagnostics.

    Returns:
      A list of LayerPlan (one per layer owning some of `variables`), or None.

    Raises:
      ValueError: on an unknown `method`.
    """
    del batch_size
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    try:
        return _plan(model, variables, method)
    except _Unsupported:
        return None


def _plan(model: Any, variables: Sequence[Any], method: str) -> list:
    graph = _graph_of(model)
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        raise _Unsupported("the model has several inputs or outputs")
    for sub in graph._flatten_layers(include_self=False):
        if type(sub).__name__ in _BATCH_MIXING:
            raise _Unsupported(f"layer {sub.name} mixes the examples of a batch")
    index = {_var_key(v): i for i, v in enumerate(variables)}
    if len(index) != len(variables):
        raise _Unsupported("a variable is listed twice")
    node_count: dict[int, int] = {}
    for nodes in graph._nodes_by_depth.values():
        for node in nodes:
            if node.operation is not None and not node.is_input:
                node_count[id(node.operation)] = node_count.get(id(node.operation), 0) + 1
    plans, covered = [], set()
    for layer in graph.layers:
        own = [v for v in layer.trainable_variables if _var_key(v) in index]
        if not own:
            continue
        if node_count.get(id(layer), 0) != 1:
            raise _Unsupported(f"layer {layer.name} is called {node_count.get(id(layer), 0)} "
                               "times in the model")
        if layer.compute_dtype != "float32" or layer.variable_dtype != "float32":
            kind = "fallback"
        elif _is_plain_dense(layer) and len(own) == len(layer.trainable_variables):
            kind = "dense"
        elif _is_plain_conv2d(layer) and len(own) == len(layer.trainable_variables):
            kind = "conv2d"
        else:
            kind = "fallback"
        if kind == "fallback":
            order = [index[_var_key(v)] for v in own]
            norm = "vectorized"
        else:
            order = [index[_var_key(_kernel_var(layer))]]
            if layer.use_bias:
                order.append(index[_var_key(layer.bias)])
            norm = _choose_norm(layer, kind, method)
        plans.append(LayerPlan(layer, kind, norm, order))
        covered.update(order)
    if len(covered) != len(variables):
        raise _Unsupported("some variables belong to no layer of the model graph")
    return plans


def _positions_and_width(layer: Any, kind: str) -> tuple[int, int, int, int]:
    """(T positions per example, k inputs per group, o outputs per group, groups)."""
    if kind == "dense":
        in_shape = layer.input.shape if hasattr(layer, "input") else None
        t = int(np.prod(in_shape[1:-1])) if in_shape is not None and len(in_shape) > 2 else 1
        return t, int(_kernel_var(layer).shape[0]), int(_kernel_var(layer).shape[1]), 1
    out_shape = layer.output.shape
    t = int(out_shape[1]) * int(out_shape[2])
    kh, kw, cin_g, cout = (int(d) for d in _kernel_var(layer).shape)
    groups = int(layer.groups)
    return t, kh * kw * cin_g, cout // groups, groups


def _choose_norm(layer: Any, kind: str, method: str) -> str:
    t, k, o, _ = _positions_and_width(layer, kind)
    if t == 1:
        return "direct"  # ||a||^2 ||g||^2: both forms coincide
    if method == "ghost":
        return "ghost"
    # Multiply-adds per example and group: Gram matrices T^2 (k + o) against A^T G: T k o.
    return "ghost" if t * t * (k + o) < t * k * o else "direct"


# --------------------------------------------------------------------------- the pass


class _SubstitutedCall:
    """Temporarily makes `model(...)` return given outputs (to reuse the caller's loss)."""

    def __init__(self, model: Any, outputs: Callable[[Any, dict], Any]):
        self.model, self.outputs, self.calls = model, outputs, []

    def __enter__(self):
        model = self.model

        def call(inputs, *args, **kwargs):
            self.calls.append((inputs, args, kwargs))
            return self.outputs(inputs, kwargs)

        self._had = "call" in model.__dict__
        self._old = model.__dict__.get("call")
        model.call = call
        return self

    def __exit__(self, *exc):
        if self._had:
            self.model.call = self._old
        else:
            del self.model.call
        return False


def _probe(model: Any, variables: Sequence[Any], x: tf.Tensor, y: tf.Tensor,
           example_loss: Callable) -> dict:
    """Checks how `example_loss` uses the model; returns the call's keyword arguments.

    The ghost path reuses `example_loss` on the logits of one batched forward pass; this is
    exact only if the loss calls `model` once, on the example it is given, and reads no
    variable except through that call.
    """
    xi, yi = x[:1], y[:1]
    out_shape = [1] + [int(d) for d in model.output_shape[1:]]
    sub = _SubstitutedCall(model, lambda inputs, kwargs: tf.zeros(out_shape, model.compute_dtype))
    with tf.GradientTape() as tape:
        with sub:
            loss, _ = example_loss(xi, yi)
    if len(sub.calls) != 1:
        raise _Unsupported(f"example_loss calls the model {len(sub.calls)} times")
    inputs, args, kwargs = sub.calls[0]
    if inputs is not xi or args:
        raise _Unsupported("example_loss does not call the model on its example as given")
    if any(g is not None for g in tape.gradient(loss, list(variables),
                                                unconnected_gradients="none")):
        raise _Unsupported("example_loss reads model variables outside the model call")
    return dict(kwargs)


def _linear(plan: LayerPlan, a: tf.Tensor) -> tf.Tensor:
    """The layer's pre-activation z = a W (+ b), as the layer computes it."""
    layer = plan.layer
    if plan.kind == "dense":
        z = keras.ops.matmul(a, layer.kernel)
        if layer.bias is not None:
            z = keras.ops.add(z, layer.bias)
        return z
    z = layer.convolution_op(a, layer.kernel)
    if layer.use_bias:
        z = keras.ops.add(z, keras.ops.reshape(layer.bias, (1, 1, 1, layer.filters)))
    return z


def _forward(graph: Any, plans: list, x: tf.Tensor, call_kwargs: dict) -> tuple[Any, dict]:
    """One batched forward pass recording each planned layer's input and (pre-)output."""
    by_layer = {id(p.layer): p for p in plans}
    records: dict[int, tuple] = {}
    training = call_kwargs.get("training")

    def operation_fn(op):
        plan = by_layer.get(id(op))
        if plan is None:
            return keras_functional.operation_fn(op, training=training)
        if plan.kind == "fallback":
            inner = keras_functional.operation_fn(op, training=training)

            def call_fallback(*args, **kwargs):
                if len(args) != 1 or not tf.is_tensor(args[0]):
                    raise _Unsupported(f"layer {op.name} has several inputs")
                out = inner(*args, **kwargs)
                if not tf.is_tensor(out):
                    raise _Unsupported(f"layer {op.name} has several outputs")
                records[id(op)] = (args[0], out, kwargs)
                return out

            return call_fallback

        def call_linear(inputs, *args, **kwargs):
            del args, kwargs
            z = _linear(plan, inputs)
            records[id(op)] = (inputs, z, {})
            return op.activation(z) if op.activation is not None else z

        return call_linear

    inputs = graph._standardize_inputs(x)
    outputs = graph._run_through_graph(inputs, operation_fn=operation_fn)
    return keras_functional.unpack_singleton(outputs), records


def _same_or_valid_pad(size: int, k: int, stride: int, rate: int, padding: str
                       ) -> tuple[int, int, int]:
    """(output size, padding before, padding after) of one spatial axis, as tf.nn.conv2d."""
    eff = (k - 1) * rate + 1
    if padding == "same":
        out = -(-size // stride)
        total = max((out - 1) * stride + eff - size, 0)
        return out, total // 2, total - total // 2
    return -(-(size - eff + 1) // stride), 0, 0


def _patches(plan: LayerPlan, a: tf.Tensor) -> tf.Tensor:
    """Image patches of a Conv2D input, [B, groups, T, kh*kw*cin/groups].

    Built from kh*kw strided slices of the padded input (copies only, exact), laid out
    (kh, kw, cin) like the kernel; tf.image.extract_patches gives the same but is several
    times slower on CPU.
    """
    layer = plan.layer
    kh, kw, cin_g, _ = (int(d) for d in _kernel_var(layer).shape)
    groups = int(layer.groups)
    (sh, sw), (dh, dw) = layer.strides, layer.dilation_rate
    h, w, cin = (int(d) for d in a.shape[1:])
    oh, ph0, ph1 = _same_or_valid_pad(h, kh, sh, dh, layer.padding)
    ow, pw0, pw1 = _same_or_valid_pad(w, kw, sw, dw, layer.padding)
    if ph0 or ph1 or pw0 or pw1:
        a = tf.pad(a, [[0, 0], [ph0, ph1], [pw0, pw1], [0, 0]])
    cols = [a[:, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw]
            for i in range(kh) for j in range(kw)]
    p = tf.stack(cols, axis=3)                          # [B, oh, ow, kh*kw, cin]
    b = tf.shape(a)[0]
    if groups == 1:
        return tf.reshape(p, [b, 1, oh * ow, kh * kw * cin])
    p = tf.reshape(p, [b, oh * ow, kh * kw, groups, cin_g])
    p = tf.transpose(p, [0, 3, 1, 2, 4])
    return tf.reshape(p, [b, groups, oh * ow, kh * kw * cin_g])


def _sq_norms(plan: LayerPlan, a: tf.Tensor, g: tf.Tensor
              ) -> tuple[tf.Tensor, Optional[list]]:
    """Squared norm of each example's gradient of the layer's variables.

    Returns:
      (sq [B], per_example): per_example is None, or (for the "direct" form when it
      materialises them anyway) the per-example gradients [B, *shape] in `var_index` order.
    """
    b = tf.shape(g)[0]
    per_example = None
    if plan.kind == "dense":
        d, o = int(a.shape[-1]), int(g.shape[-1])
        a3 = tf.reshape(a, [b, -1, d])
        g3 = tf.reshape(g, [b, -1, o])
        if a3.shape[1] == 1:
            kernel = tf.reduce_sum(tf.square(a3[:, 0]), 1) * tf.reduce_sum(tf.square(g3[:, 0]), 1)
        elif plan.norm == "direct":
            pe = tf.matmul(a3, g3, transpose_a=True)                   # [B, d, o]
            kernel = tf.reduce_sum(tf.square(pe), [1, 2])
            per_example = [pe]
        else:
            kernel = tf.reduce_sum(tf.matmul(a3, a3, transpose_b=True)
                                   * tf.matmul(g3, g3, transpose_b=True), [1, 2])
        bias_g = tf.reduce_sum(g3, 1)
    else:
        groups = int(plan.layer.groups)
        cout = int(g.shape[-1])
        o_g = cout // groups
        pa = _patches(plan, a)                                      # [B, G, T, k]
        t = int(pa.shape[2])
        gg = tf.reshape(g, [b, t, groups, o_g])
        gg = tf.transpose(gg, [0, 2, 1, 3]) if groups > 1 else tf.reshape(gg, [b, 1, t, o_g])
        if plan.norm == "direct":
            pe = tf.matmul(pa, gg, transpose_a=True)                # [B, G, k, o]
            kernel = tf.reduce_sum(tf.square(pe), [1, 2, 3])
            kshape = [int(d) for d in _kernel_var(plan.layer).shape]
            if groups > 1:
                pe = tf.transpose(pe, [0, 2, 1, 3])                 # [B, k, G, o]
            per_example = [tf.reshape(pe, [b] + kshape)]
        else:
            kernel = tf.reduce_sum(tf.matmul(pa, pa, transpose_b=True)
                                   * tf.matmul(gg, gg, transpose_b=True), [1, 2, 3])
        bias_g = tf.reduce_sum(tf.reshape(g, [b, -1, cout]), 1)
    if plan.layer.use_bias:
        if per_example is not None:
            per_example.append(bias_g)
        return kernel + tf.reduce_sum(tf.square(bias_g), 1), per_example
    return kernel, per_example


def _fallback_per_example(plan: LayerPlan, variables: Sequence[Any], a: tf.Tensor,
                          g: tf.Tensor, kwargs: dict) -> list:
    """Per-example gradients of one layer's variables, [B, *shape] each (vectorized_map)."""
    op_call = keras_functional.operation_fn(plan.layer, training=kwargs.get("training"))
    extra = {k: v for k, v in kwargs.items() if k != "training"}
    own = [variables[i] for i in plan.var_index]
    return example_grads.layer_gradients(lambda ai: op_call(ai, **extra), own, a, g)


def _batched_pass(model: Any, variables: Sequence[Any], plans: list, x: tf.Tensor,
                  y: tf.Tensor, example_loss: Callable
                  ) -> tuple[tf.Tensor, tf.Tensor, dict, list]:
    """One batched forward and backward pass through the model.

    Returns:
      (losses [B], row logits [B, K], records {layer id: (input, output, kwargs)}, the loss
      gradients of each planned layer's output).

    Raises:
      _Unsupported: the loss or the model cannot take the ghost path.
    """
    graph = _graph_of(model)
    call_kwargs = _probe(model, variables, x, y, example_loss)
    with tf.GradientTape() as tape:
        logits, records = _forward(graph, plans, x, call_kwargs)
        xs = tf.convert_to_tensor(x)

        def loss_of(args):
            li, xi, yi = args
            sub = _SubstitutedCall(model, lambda inputs, kwargs: li[None])
            with sub:
                loss, lg = example_loss(xi[None], yi[None])
            return loss, lg[0]

        losses, row_logits = tf.vectorized_map(loss_of, (logits, xs, y))
        total = tf.reduce_sum(losses)
    missing = [p.layer.name for p in plans if id(p.layer) not in records]
    if missing:
        raise _Unsupported(f"layers {missing} were not reached by the forward pass")
    outs = [records[id(p.layer)][1] for p in plans]
    out_grads = tape.gradient(total, outs, unconnected_gradients="zero")
    return losses, row_logits, records, out_grads


def _squared_norms(plans: list, variables: Sequence[Any], records: dict, out_grads: list,
                   losses: tf.Tensor) -> tuple[tf.Tensor, dict]:
    """Per-example squared gradient norms over all planned layers.

    Returns:
      (sq [B], {layer id: per-example gradients} for the layers that materialised them).
    """
    sq = tf.zeros_like(losses)
    materialised = {}
    for plan, g in zip(plans, out_grads):
        a, _, kwargs = records[id(plan.layer)]
        if plan.kind == "fallback":
            per_example = _fallback_per_example(plan, variables, a, g, kwargs)
            materialised[id(plan.layer)] = per_example
            for pe in per_example:
                sq += tf.reduce_sum(tf.reshape(tf.square(pe), [tf.shape(pe)[0], -1]), 1)
        else:
            layer_sq, per_example = _sq_norms(plan, a, g)
            sq += layer_sq
            if per_example is not None:
                materialised[id(plan.layer)] = per_example
    return sq, materialised


def _clipped_sums(plans: list, variables: Sequence[Any], records: dict, out_grads: list,
                  factors: tf.Tensor, materialised: dict) -> list:
    """sum_i c_i g_i for every variable, in `variables` order."""
    sums: list = [None] * len(variables)
    for plan, g in zip(plans, out_grads):
        if id(plan.layer) in materialised:
            # sum_i c_i g_i from the per-example gradients already at hand.
            for i, pe in zip(plan.var_index, materialised[id(plan.layer)]):
                sums[i] = tf.tensordot(factors, pe, axes=1)
            continue
        a = tf.stop_gradient(records[id(plan.layer)][0])
        shape = [-1] + [1] * (len(g.shape) - 1)
        weighted = g * tf.reshape(factors, shape)
        own = [variables[i] for i in plan.var_index]
        with tf.GradientTape() as vjp:
            z = _linear(plan, a)
        # One batched vector-Jacobian product: sum_i c_i a_i^T g_i (and sum_i c_i sum_t g_i).
        for i, grad in zip(plan.var_index, vjp.gradient(z, own, output_gradients=weighted)):
            sums[i] = grad
    return sums


def clipped_gradient_sum(model: Any, variables: Sequence[Any], x: tf.Tensor, y: tf.Tensor,
                         example_loss: Callable, l2_clip: float, *, method: str = "auto",
                         mask: Optional[tf.Tensor] = None
                         ) -> Optional[tuple[list, tf.Tensor, tf.Tensor]]:
    """Sum of per-example gradients clipped to L2 norm `l2_clip`, by the ghost path.

    Same contract as `tfdp.train.privatize.clipped_gradient_sum`; returns None when the model
    as a whole is not supported (the caller then takes the vectorized path).

    Args:
      model: the Keras model `example_loss` calls.
      variables: variables to differentiate.
      x: inputs [B, ...].
      y: labels [B].
      example_loss: `f(xi, yi) -> (loss, logits)` for one example with a batch axis of 1.
      l2_clip: clipping bound C > 0.
      method: "ghost" or "auto" (see module docstring).
      mask: optional float [B]; rows with 0.0 (padding) get clip factor 0.

    Returns:
      (sums, losses, correct) or None.

    Raises:
      ValueError: on an unknown `method`.
    """
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    try:
        plans = _plan(model, variables, method)
        losses, row_logits, records, out_grads = _batched_pass(model, variables, plans, x, y,
                                                               example_loss)
    except _Unsupported:
        return None
    sq, materialised = _squared_norms(plans, variables, records, out_grads, losses)
    # Abadi et al. 2016, Alg. 1, as privatize.clip_and_sum; padding rows add nothing.
    factors = tf.stop_gradient(example_grads.clip_factors(sq, l2_clip, mask))
    sums = _clipped_sums(plans, variables, records, out_grads, factors, materialised)
    correct = metrics.correct_predictions(row_logits, y)
    return sums, losses, correct


def describe(model: Any, variables: Sequence[Any], method: str = "auto") -> list:
    """The per-layer plan as (layer name, kind, norm method) triples ([] if unsupported)."""
    plans = plan_model(model, variables, method)
    return [] if plans is None else [(p.layer.name, p.kind, p.norm) for p in plans]
