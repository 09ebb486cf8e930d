"""Registry of Keras layer types: how each one's per-example gradient norm is computed.

DP-SGD needs, for every example i, the norm of its gradient over all parameters. For a layer
called once as z = f(a; W), example i's gradient is the vector-Jacobian product of f at a_i with
g_i = dl_i / dz_i, so it follows from the layer's input a and output gradient g of ONE batched
backward pass. A `LayerRule` computes it for one layer type (as Opacus registers grad samplers):

* Dense and Conv2D reuse tfdp's ghost-clipping norms (`tfdp.train.ghost`): the product of norms,
  the Gram-matrix "ghost norm" or per-example kernel gradients from image patches, whichever
  is cheaper. An ungrouped Conv2D over 128 output positions or more gets every example's
  kernel from one grouped filter-gradient op; a strided one whose kernel sides are multiples
  of the stride s is a stride-1 convolution of the space-to-depth(s) input, whose grouped op
  or position Gram needs no patch tensor.
* Conv1D / Conv3D: per-example kernel gradients from N-d patches (the same construction).
* DepthwiseConv2D: per-channel patches (each output channel sees one input channel).
* Embedding: ||sum_t e_{a_t} g_t||^2 = sum_{t,s} [a_t = a_s] <g_t, g_s> (no table materialised).
* LayerNormalization / GroupNormalization: their output is gamma * x_hat + beta, so each
  per-example gradient is x_hat * g (gamma), resp. g (beta), summed over the non-parameter
  axes (tiny: two vectors per example); x_hat is recomputed as the layer does.

Layers that mix the examples of a batch (BatchNormalization) have no per-example gradient and
are refused (`check_model`); any other layer with trainable variables takes the vectorized
fallback (`tf.vectorized_map` over that layer alone).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import keras
import numpy as np
import tensorflow as tf

from tfdp.train import example_grads, ghost

# Per-example squared norms [B] and, when computed anyway, per-example gradients of the layer's
# own trainable variables ([B, *shape] each, in `layer._trainable_variables` order).
# A rule with `uses_output` also gets the recorded output as the keyword argument `z`.
NormFn = Callable[..., tuple]


@dataclasses.dataclass(frozen=True)
class LayerRule:
    """How one layer type's per-example gradient norms are obtained.

    Attributes:
      name: short description for logs and `describe`.
      sq_norms: `f(layer, a, g) -> (sq [B], per_example or None)`; `a` is the layer's input,
        `g` the gradient of the summed loss with respect to its pre-activation output.
        per_example is a list of per-example gradients ([B, *shape] per variable), or a
        callable mapping the clip factors c [B] to the clipped sums sum_i c_i grad_i (one per
        variable) when the per-example gradients exist in another layout; None: the clipped
        sum is one batched vector-Jacobian product with output gradient c g.
      supports: `f(layer) -> bool`; False sends this layer to the vectorized fallback
        (e.g. an unusual padding or data format).
      pre_activation: True when the layer has an `activation` applied last in its `call`
        (the recorded output is taken before it).
      uses_output: True when `sq_norms` also takes the layer's recorded (pre-activation)
        output as the keyword argument `z`.
    """

    name: str
    sq_norms: NormFn
    supports: Callable[[Any], bool] = lambda layer: True
    pre_activation: bool = False
    uses_output: bool = False


_RULES: dict[type, LayerRule] = {}
# Layer types whose output for one example depends on the others: type -> what to use instead.
_MIXING: dict[type, str] = {}


def register(layer_type: type, rule: LayerRule) -> None:
    """Registers `rule` for `layer_type` (and subclasses that do not override `call`).

    Raises:
      TypeError: if `layer_type` is not a Keras layer class or `rule` not a LayerRule.
    """
    if not (isinstance(layer_type, type) and issubclass(layer_type, keras.layers.Layer)):
        raise TypeError(f"layer_type: expected a keras.layers.Layer subclass, got {layer_type!r}")
    if not isinstance(rule, LayerRule):
        raise TypeError(f"rule: expected a LayerRule, got {rule!r}")
    _RULES[layer_type] = rule


def register_batch_mixing(layer_type: type, instead: str) -> None:
    """Declares that `layer_type` mixes the examples of a batch; models using it are refused.

    Args:
      layer_type: the Keras layer class.
      instead: what to use instead (said in the refusal).
    """
    _MIXING[layer_type] = str(instead)


def rule_for(layer: Any) -> Optional[LayerRule]:
    """The registered rule of `layer`, or None (vectorized fallback).

    A subclass of a registered type gets its rule only if it keeps the registered `call` (a
    changed `call` may compute something else).
    """
    for cls in type(layer).__mro__:
        rule = _RULES.get(cls)
        if rule is not None:
            if type(layer).call is not cls.call:
                return None
            return rule if rule.supports(layer) else None
    return None


def check_model(model: Any) -> None:
    """Refuses a model containing a layer that mixes the examples of a batch.

    Raises:
      ValueError: one line naming the layer and what to use instead.
    """
    for layer in model._flatten_layers(include_self=False):  # pylint: disable=protected-access
        for cls, instead in _MIXING.items():
            if isinstance(layer, cls):
                raise ValueError(
                    f"model: layer '{layer.name}' ({type(layer).__name__}) mixes the examples of "
                    f"a batch, so it has no per-example gradient and cannot be trained with "
                    f"DP-SGD; use {instead} instead")


# --------------------------------------------------------------------------- rules


def _plain(layer: Any) -> bool:
    return (not getattr(layer, "lora_enabled", False)
            and getattr(layer, "quantization_mode", None) is None
            and layer.compute_dtype == "float32" and layer.variable_dtype == "float32")


def _ghost_plan(layer: Any, kind: str, norm: str) -> ghost.LayerPlan:
    return ghost.LayerPlan(layer, kind, norm, [])


def _cheaper(t: int, k: int, o: int) -> str:
    """ghost.py's choice: Gram matrices T^2 (k + o) against per-example A^T G: T k o."""
    if t == 1:
        return "direct"
    return "ghost" if t * t * (k + o) < t * k * o else "direct"


def _dense_norms(layer: Any, a: tf.Tensor, g: tf.Tensor) -> tuple:
    t = int(np.prod(a.shape[1:-1])) if len(a.shape) > 2 else 1
    kernel = ghost._kernel_var(layer)  # pylint: disable=protected-access
    norm = _cheaper(t, int(kernel.shape[0]), int(kernel.shape[1]))
    return ghost._sq_norms(_ghost_plan(layer, "dense", norm), a, g)  # pylint: disable=protected-access


# Largest patch width (prod(kernel size) * input channels) built by an identity convolution
# (whose cost grows with the patch width squared); measured on CPU, see docs/keras.md.
_IDENTITY_PATCH_MAX = 256
# From this many input channels on, 2-D patches come from `tf.image.extract_patches` (a copy)
# rather than the identity convolution; measured on CPU: 1 channel favours the convolution,
# 16 the copy.
_EXTRACT_MIN_CHANNELS = 8
# Largest extracted patch tensor per example (output positions * patch width, floats).
_EXTRACT_MAX = 1 << 17
# Per-example kernel gradients are kept for the clipped sum (c-weighted sum, no second
# vector-Jacobian product) up to this many values per example.
_MATERIALISE_MAX = 1 << 14
# From this many output positions (height * width) on, an ungrouped 2-D convolution's
# per-example kernel gradients come from one grouped filter-gradient op
# (`_conv2d_batched_kernels`); below it the per-offset blocks / patches are faster (measured
# on CPU with oneDNN, 264 examples, 3x3 kernels: 1.3-2.3x faster at 12x12 to 32x32 outputs of
# 8 to 32 channels, 1.1-2x slower at 8x8 outputs of 64 channels).
_GROUPED_MIN_POSITIONS = 128
# Whether grouped filter gradients are exact here (example_grads.grouped_filter_gradients_ok).
_GROUPED_OK = example_grads.GROUPED_FILTER_GRADIENTS
_grouped_filter_grad_ok = example_grads.grouped_filter_gradients_ok


def _conv_fast_norms(layer: Any, a: tf.Tensor, g: tf.Tensor) -> Optional[tuple]:
    """Per-example norms of an ungrouped N-d convolution, or None (use the slice path).

    Three exact constructions of example i's kernel gradient A_i^T G_i (A_i: its patches):

    * narrow patches from ONE convolution with an identity kernel (each output channel copies
      one input value; fastest on CPU for few input channels), then the cheaper of A_i^T G_i
      and the Gram form;
    * strided 2-D convolutions (or where the Gram form is cheaper) with 8 or more input
      channels: patches by `tf.image.extract_patches` (a copy), then the same choice;
    * otherwise, e.g. stride-1 2-D convolutions over many positions: the per-example gradient
      block of each kernel offset, sum_t a_{i,t+offset} g_{i,t} ([B, C, O]), one batched
      matmul per offset (no patch tensor; measured 2-3x faster on CPU than extracted patches
      for 3x3 stride-1 kernels, and strided slices make it slow for strides > 1).

    Per-example kernel gradients computed this way are returned (for the clipped sum) when
    they hold at most `_MATERIALISE_MAX` values per example.
    """
    if int(getattr(layer, "groups", 1)) != 1:
        return None
    kernel = ghost._kernel_var(layer)  # pylint: disable=protected-access
    kshape = [int(d) for d in kernel.shape]
    ksize, cin, cout = kshape[:-2], kshape[-2], kshape[-1]
    strides = [int(v) for v in layer.strides]
    rates = [int(v) for v in layer.dilation_rate]
    spatial = [int(d) for d in a.shape[1:-1]]
    outs, pads = _pads(layer, spatial, ksize)
    if any(p for pair in pads for p in pair):
        a = tf.pad(a, [[0, 0]] + pads + [[0, 0]])
    b = tf.shape(g)[0]
    t = int(np.prod(outs))
    width = int(np.prod(ksize)) * cin
    keep = int(np.prod(kshape)) <= _MATERIALISE_MAX
    gg = tf.reshape(g, [b, t, cout])
    strided, dilated = max(strides) > 1, max(rates) > 1
    per_example = None
    use_extract = (len(ksize) == 2 and cin >= _EXTRACT_MIN_CHANNELS and t * width <= _EXTRACT_MAX
                   and (strided or _cheaper(t, width, cout) == "ghost"))
    use_identity = (width <= _IDENTITY_PATCH_MAX and not (strided and dilated)
                    and (len(ksize) != 2 or cin < _EXTRACT_MIN_CHANNELS))
    if use_extract or use_identity:
        if use_extract:
            # A copy op, ordered (kh, kw, cin) as the kernel's rows.
            p = tf.image.extract_patches(a, [1] + ksize + [1], [1] + strides + [1],
                                         [1] + rates + [1], "VALID")
        else:
            eye = tf.reshape(tf.eye(width, dtype=a.dtype), ksize + [cin, width])
            p = tf.nn.convolution(a, eye, strides=strides, padding="VALID", dilations=rates)
        p = tf.reshape(p, [b, t, width])
        if _cheaper(t, width, cout) == "ghost":
            sq = tf.reduce_sum(tf.matmul(p, p, transpose_b=True)
                               * tf.matmul(gg, gg, transpose_b=True), [1, 2])
        else:
            pe = tf.matmul(p, gg, transpose_a=True)                # [B, width, O]
            sq = tf.reduce_sum(tf.square(pe), [1, 2])
            if keep:
                per_example = [tf.reshape(pe, [b] + kshape)]
    else:
        sq = tf.zeros([b], a.dtype)
        blocks = []
        for offsets in np.ndindex(*ksize):
            index = [slice(None)]
            for i, off in enumerate(offsets):
                start = off * rates[i]
                index.append(slice(start, start + (outs[i] - 1) * strides[i] + 1, strides[i]))
            block = tf.matmul(tf.reshape(a[tuple(index)], [b, t, cin]), gg, transpose_a=True)
            if keep:
                blocks.append(block)
            else:
                sq += tf.reduce_sum(tf.square(block), [1, 2])
        if keep:
            # Offsets in np.ndindex order are the kernel's leading axes in row-major order.
            pe = tf.stack(blocks, 1)                               # [B, K, C, O]
            sq = tf.reduce_sum(tf.square(pe), [1, 2, 3])
            per_example = [tf.reshape(pe, [b] + kshape)]
    if layer.use_bias:
        bias_g = tf.reduce_sum(gg, 1)
        sq += tf.reduce_sum(tf.square(bias_g), 1)
        if per_example is not None:
            per_example.append(bias_g)
    return sq, per_example


def _kernel_major_sums(dw: tf.Tensor, b: Any, kshape: list, g: tf.Tensor,
                       use_bias: bool, order: Optional[tuple] = None) -> tuple:
    """(sq [B], clipped-sum callable) of per-example kernels in a grouped filter-gradient
    op's layout [K, B, O] (kernel rows K, examples B, output channels O), without moving the
    batch axis first: sum_i c_i dW_i is a c-weighted reduction over the middle axis.

    Args:
      dw: the op's output, reshapeable to [K, B, O].
      b: the batch size (tensor).
      kshape: the kernel's shape.
      g: the output gradient [B, ..., O] (for the bias).
      use_bias: whether the layer has a bias.
      order: (shape, permutation) taking the reduced [K, O] to the kernel's shape, when K is
        not in kernel order; None: it is.
    """
    cout = kshape[-1]
    d3 = tf.reshape(dw, [-1, b, cout])
    # Reduced over the contiguous axis first (measured 1.3-2.5x faster than over both at once).
    sq = tf.reduce_sum(tf.reduce_sum(tf.square(d3), 2), 0)
    bias_g = None
    if use_bias:
        bias_g = tf.reduce_sum(tf.reshape(g, [b, -1, cout]), 1)
        sq += tf.reduce_sum(tf.square(bias_g), 1)

    def sums(factors: tf.Tensor) -> list:
        # [1, 1, B] x [K, B, O]: one broadcast batched matmul, no [K, B, O] temporary.
        kernel = tf.reshape(tf.matmul(tf.reshape(factors, [1, 1, -1]), d3), [-1, cout])
        if order is not None:
            kernel = tf.transpose(tf.reshape(kernel, order[0]), order[1])
        out = [tf.reshape(kernel, kshape)]
        if bias_g is not None:
            out.append(tf.tensordot(factors, bias_g, axes=1))
        return out

    return sq, sums


def _conv2d_batched_kernels(layer: Any, a: tf.Tensor, g: tf.Tensor) -> tuple:
    """Every example's kernel gradient from ONE grouped filter-gradient op.

    With the batch moved into the channels (input [1, H, W, B*C], output gradient
    [1, oh, ow, B*O]), a convolution with B groups has, as the kernel of group i, exactly
    example i's gradient sum_t a_{i,t+offset} g_{i,t}: the same sums as per-example
    gradients, computed by the backend's (oneDNN's) filter-gradient kernel.
    """
    kshape = [int(d) for d in ghost._kernel_var(layer).shape]  # pylint: disable=protected-access
    kh, kw, cin, cout = kshape
    b = tf.shape(g)[0]
    x1 = tf.reshape(tf.transpose(a, [1, 2, 0, 3]), [1, int(a.shape[1]), int(a.shape[2]), -1])
    g1 = tf.reshape(tf.transpose(g, [1, 2, 0, 3]), [1, int(g.shape[1]), int(g.shape[2]), -1])
    dw = tf.compat.v1.nn.conv2d_backprop_filter(
        x1, tf.stack([kh, kw, cin, b * cout]), g1, [1] + [int(v) for v in layer.strides] + [1],
        layer.padding.upper())
    return _kernel_major_sums(dw, b, kshape, g, layer.use_bias)


def _space_to_depth_stride(layer: Any) -> int:
    """The stride s of an ungrouped, undilated 2-D convolution with equal strides s > 1 and a
    kernel whose sides are multiples of s (then it is a stride-1 convolution of the input
    rearranged by `tf.nn.space_to_depth(., s)`), else 0."""
    strides = [int(v) for v in layer.strides]
    if (int(layer.groups) != 1 or max(int(v) for v in layer.dilation_rate) != 1
            or strides[0] != strides[1] or strides[0] < 2):
        return 0
    s = strides[0]
    return s if all(int(k) % s == 0 for k in layer.kernel_size) else 0


def _space_to_depth_input(layer: Any, a: tf.Tensor, s: int) -> tuple[tf.Tensor, list]:
    """The input padded as the convolution pads it, cut to the rows / columns the kernel reads
    and rearranged by space_to_depth(s), [B, oh - 1 + kh/s, ow - 1 + kw/s, s*s*C] (depth
    ordered by row in block, column in block, channel), and the output sizes [oh, ow]."""
    spatial = [int(d) for d in a.shape[1:3]]
    ksize = [int(k) for k in layer.kernel_size]
    outs, pads = _pads(layer, spatial, ksize)
    # The rows / columns read: (o - 1) s + k <= the padded size, a multiple of s.
    need = [(o - 1) * s + k for o, k in zip(outs, ksize)]
    x = _padded_rows(a, pads, need)
    return tf.nn.space_to_depth(tf.reshape(x, [-1, need[0], need[1], int(a.shape[3])]), s), outs


def _padded_rows(a: tf.Tensor, pads: list, need: list) -> tf.Tensor:
    """The 2-D input [B, H, W, C] padded as the convolution pads it and cut to the `need`
    rows and columns the kernel reads, as [B, need_h, need_w * C]: padded and cut with the
    columns and channels merged, so the copies move runs of W * C values rather than C
    (measured 2x faster than padding [B, H, W, C] at C = 1)."""
    h, w, c = (int(d) for d in a.shape[1:])
    x = tf.reshape(a, [-1, h, w * c])
    if any(p for pair in pads for p in pair):
        x = tf.pad(x, [[0, 0], pads[0], [pads[1][0] * c, pads[1][1] * c]])
    if int(x.shape[1]) != need[0] or int(x.shape[2]) != need[1] * c:
        x = x[:, :need[0], :need[1] * c]
    return x


def _conv2d_space_to_depth_kernels(layer: Any, a: tf.Tensor, g: tf.Tensor, s: int) -> tuple:
    """Every example's kernel gradient of a strided convolution from ONE grouped filter-gradient
    op of the equivalent stride-1 convolution on the space-to-depth input (as
    `_conv2d_batched_kernels`, on s*s times fewer positions and no stride).

    The padded input is rearranged by one transpose, [B, h2, s, w2, s, C] to
    [h2, w2, B, s, s, C] (measured about 1% of the MNIST CNN's DP step faster than moving the
    batch first and rearranging after).
    """
    kh, kw, cin, cout = (int(d) for d in ghost._kernel_var(layer).shape)  # pylint: disable=protected-access
    outs, pads = _pads(layer, [int(d) for d in a.shape[1:3]], [kh, kw])
    # The rows / columns read: (o - 1) s + k <= the padded size, a multiple of s.
    need = [(o - 1) * s + k for o, k in zip(outs, [kh, kw])]
    b = tf.shape(g)[0]
    h2, w2 = need[0] // s, need[1] // s
    x = _padded_rows(a, pads, need)
    # One transpose [B, h2, s, w2, s, C] -> [h2, w2, B, s, s, C]: group i (example i) of the
    # channels holds its space-to-depth block (row in block, column in block, channel).
    x = tf.reshape(tf.transpose(tf.reshape(x, [b, h2, s, w2, s, cin]), [1, 3, 0, 2, 4, 5]),
                   [1, h2, w2, -1])
    g1 = tf.reshape(tf.transpose(g, [1, 2, 0, 3]), [1, outs[0], outs[1], -1])
    dw = tf.compat.v1.nn.conv2d_backprop_filter(
        x, tf.stack([kh // s, kw // s, s * s * cin, b * cout]), g1, [1, 1, 1, 1], "VALID")
    # Rows (p, q, di, dj, c) hold kernel entry [s p + di, s q + dj, c] of each example.
    order = ([kh // s, kw // s, s, s, cin, cout], [0, 2, 1, 3, 4, 5])
    return _kernel_major_sums(dw, b, [kh, kw, cin, cout], g, layer.use_bias, order)


def _conv2d_space_to_depth_ghost(layer: Any, a: tf.Tensor, g: tf.Tensor, s: int) -> tuple:
    """Ghost norms <A_i A_i^T, G_i G_i^T> of a strided convolution without a patch tensor.

    On the space-to-depth input M_i (positions u x depth), the patch Gram is the sum over the
    (kh/s) * (kw/s) kernel offsets d of (M_i M_i^T)[t + d, t' + d]: one batched Gram of all
    positions, then shifted blocks of it (the patch Gram is only used where the ghost norm is
    cheaper, i.e. over few output positions).
    """
    kh, kw, _, cout = (int(d) for d in ghost._kernel_var(layer).shape)  # pylint: disable=protected-access
    a2, (oh, ow) = _space_to_depth_input(layer, a, s)
    b = tf.shape(g)[0]
    h2, w2, c2 = (int(d) for d in a2.shape[1:])
    m = tf.reshape(a2, [b, h2 * w2, c2])
    # The batch last, so each shifted block is a copy of contiguous runs of oh * B values
    # rather than oh (measured about 2% of the MNIST CNN's DP step faster).
    full = tf.transpose(tf.reshape(tf.matmul(m, m, transpose_b=True), [b, h2, w2, h2, w2]),
                        [1, 2, 3, 4, 0])
    gram = None
    for p, q in np.ndindex(kh // s, kw // s):
        block = full[p:p + oh, q:q + ow, p:p + oh, q:q + ow]
        gram = block if gram is None else gram + block
    gg = tf.reshape(g, [b, oh * ow, cout])
    output_gram = tf.transpose(tf.matmul(gg, gg, transpose_b=True), [1, 2, 0])
    sq = tf.reduce_sum(tf.reshape(gram, [oh * ow, oh * ow, b]) * output_gram, [0, 1])
    if layer.use_bias:
        sq += tf.reduce_sum(tf.square(tf.reduce_sum(gg, 1)), 1)
    return sq, None


def _conv2d_norms(layer: Any, a: tf.Tensor, g: tf.Tensor) -> tuple:
    s = _space_to_depth_stride(layer)
    if s:
        kh, kw, cin, cout = (int(d) for d in ghost._kernel_var(layer).shape)  # pylint: disable=protected-access
        outs, _ = _pads(layer, [int(d) for d in a.shape[1:3]], [kh, kw])
        if _cheaper(outs[0] * outs[1], kh * kw * cin, cout) == "ghost":
            return _conv2d_space_to_depth_ghost(layer, a, g, s)
        if _grouped_filter_grad_ok():
            return _conv2d_space_to_depth_kernels(layer, a, g, s)
    if (int(layer.groups) == 1 and max(int(v) for v in layer.dilation_rate) == 1
            and int(np.prod(layer.kernel_size)) > 1
            and int(g.shape[1]) * int(g.shape[2]) >= _GROUPED_MIN_POSITIONS
            and _grouped_filter_grad_ok()):
        return _conv2d_batched_kernels(layer, a, g)
    fast = _conv_fast_norms(layer, a, g)
    if fast is not None:
        return fast
    kh, kw, cin_g, cout = (int(d) for d in ghost._kernel_var(layer).shape)  # pylint: disable=protected-access
    t = int(g.shape[1]) * int(g.shape[2])
    norm = _cheaper(t, kh * kw * cin_g, cout // int(layer.groups))
    return ghost._sq_norms(_ghost_plan(layer, "conv2d", norm), a, g)  # pylint: disable=protected-access


def _pads(layer: Any, spatial: list, ksize: list) -> tuple[list, list]:
    """(output sizes, [before, after] paddings) of each spatial axis, as the convolution."""
    outs, pads = [], []
    for i, (size, k) in enumerate(zip(spatial, ksize)):
        stride, rate = int(layer.strides[i]), int(layer.dilation_rate[i])
        if layer.padding == "causal":
            eff = (k - 1) * rate
            out, _, _ = ghost._same_or_valid_pad(size + eff, k, stride, rate, "valid")  # pylint: disable=protected-access
            outs.append(out)
            pads.append([eff, 0])
        else:
            out, before, after = ghost._same_or_valid_pad(size, k, stride, rate, layer.padding)  # pylint: disable=protected-access
            outs.append(out)
            pads.append([before, after])
    return outs, pads


def _patches_nd(layer: Any, a: tf.Tensor, ksize: list) -> tf.Tensor:
    """Patches of an N-d channels-last input, [B, T, prod(ksize), C] (copies only, exact)."""
    spatial = [int(d) for d in a.shape[1:-1]]
    outs, pads = _pads(layer, spatial, ksize)
    if any(p for pair in pads for p in pair):
        a = tf.pad(a, [[0, 0]] + pads + [[0, 0]])
    cols = []
    for offsets in np.ndindex(*ksize):
        index = [slice(None)]
        for i, off in enumerate(offsets):
            stride, rate = int(layer.strides[i]), int(layer.dilation_rate[i])
            start = off * rate
            index.append(slice(start, start + (outs[i] - 1) * stride + 1, stride))
        cols.append(a[tuple(index)])
    p = tf.stack(cols, axis=-2)                               # [B, *outs, K, C]
    return tf.reshape(p, [tf.shape(a)[0], int(np.prod(outs)), len(cols), int(a.shape[-1])])


def _conv_nd_norms(layer: Any, a: tf.Tensor, g: tf.Tensor) -> tuple:
    """Conv1D / Conv3D: per-example kernel gradients A_i^T G_i from N-d patches, per group."""
    fast = _conv_fast_norms(layer, a, g)
    if fast is not None:
        return fast
    kernel = ghost._kernel_var(layer)  # pylint: disable=protected-access
    kshape = [int(d) for d in kernel.shape]
    ksize, cin_g, cout = kshape[:-2], kshape[-2], kshape[-1]
    groups = int(layer.groups)
    o_g = cout // groups
    b = tf.shape(g)[0]
    p = _patches_nd(layer, a, ksize)                          # [B, T, K, C]
    t, k = int(p.shape[1]), int(p.shape[2])
    p = tf.reshape(p, [b, t, k, groups, cin_g])
    p = tf.reshape(tf.transpose(p, [0, 3, 1, 2, 4]), [b, groups, t, k * cin_g])
    gg = tf.transpose(tf.reshape(g, [b, t, groups, o_g]), [0, 2, 1, 3])   # [B, G, T, o]
    pe = tf.matmul(p, gg, transpose_a=True)                   # [B, G, k*cin_g, o]
    sq = tf.reduce_sum(tf.square(pe), [1, 2, 3])
    pe = tf.reshape(tf.transpose(pe, [0, 2, 1, 3]), [b] + kshape)
    per_example = [pe]
    if layer.use_bias:
        bias_g = tf.reduce_sum(tf.reshape(g, [b, -1, cout]), 1)
        sq += tf.reduce_sum(tf.square(bias_g), 1)
        per_example.append(bias_g)
    return sq, per_example


def _depthwise_norms(layer: Any, a: tf.Tensor, g: tf.Tensor) -> tuple:
    """DepthwiseConv2D: output channel c*M + m sees input channel c only."""
    kh, kw, c, m = (int(d) for d in layer.kernel.shape)
    b = tf.shape(g)[0]
    p = _patches_nd(layer, a, [kh, kw])                       # [B, T, K, C]
    t = int(p.shape[1])
    gg = tf.reshape(g, [b, t, c, m])
    pe = tf.einsum("btkc,btcm->bkcm", p, gg)                  # [B, K, C, M]
    sq = tf.reduce_sum(tf.square(pe), [1, 2, 3])
    per_example = [tf.reshape(pe, [b, kh, kw, c, m])]
    if layer.use_bias:
        bias_g = tf.reduce_sum(tf.reshape(g, [b, t, c * m]), 1)
        sq += tf.reduce_sum(tf.square(bias_g), 1)
        per_example.append(bias_g)
    return sq, per_example


def _embedding_norms(layer: Any, a: tf.Tensor, g: tf.Tensor) -> tuple:
    """||sum_t onehot(a_t) g_t||^2 = sum_{t,s} [a_t = a_s] <g_t, g_s> (Gram over positions)."""
    del layer
    b = tf.shape(g)[0]
    ids = tf.reshape(a, [b, -1])
    g3 = tf.reshape(g, [b, tf.shape(ids)[1], int(g.shape[-1])])
    same = tf.cast(tf.equal(ids[:, :, None], ids[:, None, :]), g.dtype)
    return tf.reduce_sum(same * tf.matmul(g3, g3, transpose_b=True), [1, 2]), None


def _param_axes(layer: Any, rank: int) -> list:
    axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    return sorted(int(ax) % rank for ax in axes)


def _normalized(layer: Any, a: tf.Tensor) -> Optional[tf.Tensor]:
    """The normalised input x_hat of a Keras LayerNormalization / GroupNormalization (the
    output is gamma * x_hat + beta), computed as the layer does; None for other types."""
    if type(layer) is keras.layers.GroupNormalization:  # pylint: disable=unidiomatic-typecheck
        grouped = layer._reshape_into_groups(a)  # pylint: disable=protected-access
        axes = list(range(1, len(grouped.shape)))
        axes.pop(-2 if layer.axis == -1 else layer.axis - 1)   # the group axis
        mean, variance = tf.nn.moments(grouped, axes, keepdims=True)
        return tf.reshape((grouped - mean) * tf.math.rsqrt(variance + layer.epsilon),
                          tf.shape(a))
    if (type(layer) is keras.layers.LayerNormalization  # pylint: disable=unidiomatic-typecheck
            and not layer.rms_scaling):
        return keras.ops.layer_normalization(a, None, None, layer.axis, layer.epsilon)
    return None


# Up to this many channels, a channels-last GroupNormalization's per-channel sums over
# positions come from batched C x C matmuls (each input read once, nothing written) rather
# than elementwise products and reductions (`_group_norm_scale_from_input`,
# `_group_norm_affine_grads`).
_GROUP_NORM_MATMUL_MAX_CHANNELS = 64


def _group_norm_scale_from_input(layer: Any, a: tf.Tensor, g3: tf.Tensor) -> tf.Tensor:
    """Per-example gradients of a channels-last GroupNormalization's gamma, [B, C], from its
    input.

    sum_t x_hat_{t,c} g_{t,c} = r_k sum_t d_{t,c} g_{t,c} with d = a - mean_k and
    r_k = 1 / sqrt(var_k + eps) of channel c's group k, var_k = mean of d^2 over the group
    (the layer's two-pass moments); the sums over positions t of d*d and d*g are the
    diagonals of the batched matmuls d^T d and d^T g, so x_hat is never materialised.
    """
    channels, groups = int(a.shape[-1]), int(layer.groups)
    b = tf.shape(a)[0]
    a3 = tf.reshape(a, [b, -1, channels])
    positions = tf.cast(tf.shape(a3)[1], a.dtype)

    def per_channel(group_stat):                              # [B, G] -> [B, C]
        return tf.reshape(tf.repeat(group_stat[:, :, None], channels // groups, 2),
                          [b, channels])

    mean = per_channel(tf.reduce_mean(tf.reshape(tf.reduce_mean(a3, 1),
                                                 [b, groups, channels // groups]), 2))
    d = a3 - mean[:, None, :]
    sq = tf.linalg.diag_part(tf.matmul(d, d, transpose_a=True)) / positions       # [B, C]
    var = per_channel(tf.reduce_mean(tf.reshape(sq, [b, groups, channels // groups]), 2))
    dg = tf.linalg.diag_part(tf.matmul(d, g3, transpose_a=True))                  # [B, C]
    return dg * tf.math.rsqrt(var + layer.epsilon)


# A GroupNormalization's gamma gradients come from its recorded output z while every |gamma|
# is at least this; below it, from its input (x_hat = (z - beta) / gamma loses precision as
# gamma nears 0, and is undefined at 0).
_GROUP_NORM_OUTPUT_MIN_GAMMA = 1e-2


def _group_norm_affine_grads(layer: Any, a: tf.Tensor, g: tf.Tensor,
                             z: Optional[tf.Tensor]) -> Optional[tuple]:
    """Per-example gradients (gamma's, beta's) of a channels-last GroupNormalization, [B, C]
    each (None for an absent parameter), or None for another layout (the x_hat path).

    The output is z = gamma * x_hat + beta, so sum_t x_hat_{t,c} g_{t,c} =
    (sum_t z_{t,c} g_{t,c} - beta_c sum_t g_{t,c}) / gamma_c: one batched matmul diagonal
    over the recorded output, and the sums of g that are beta's gradients (measured 2-3% of
    the CIFAR-10 GroupNorm network's DP step faster than recomputing the moments). While some
    |gamma_c| < `_GROUP_NORM_OUTPUT_MIN_GAMMA`, the moments are recomputed from the input
    instead, as for a half-precision output. Either way the gradients of example i depend on
    example i alone, and its clip factor is computed from exactly these gradients.
    """
    axis = layer.axis % len(a.shape)
    channels = int(a.shape[-1])
    if axis != len(a.shape) - 1 or channels > _GROUP_NORM_MATMUL_MAX_CHANNELS:
        return None
    b = tf.shape(a)[0]
    g3 = tf.reshape(g, [b, -1, channels])
    g_sum = tf.reduce_sum(g3, 1)                                   # beta's gradients
    beta_grads = g_sum if layer.beta is not None else None
    if layer.gamma is None:
        return None, beta_grads
    if z is None or z.dtype != g.dtype or z.dtype not in (tf.float32, tf.float64):
        return _group_norm_scale_from_input(layer, a, g3), beta_grads
    gamma = tf.convert_to_tensor(layer.gamma)

    def from_output():
        zg = tf.linalg.diag_part(tf.matmul(tf.reshape(z, [b, -1, channels]), g3,
                                           transpose_a=True))
        if layer.beta is not None:
            zg -= tf.convert_to_tensor(layer.beta) * g_sum
        return zg / gamma

    usable = tf.reduce_min(tf.abs(gamma)) >= _GROUP_NORM_OUTPUT_MIN_GAMMA
    return tf.cond(usable, from_output,
                   lambda: _group_norm_scale_from_input(layer, a, g3)), beta_grads


def _affine_norms(layer: Any, a: tf.Tensor, g: tf.Tensor,
                  z: Optional[tf.Tensor] = None) -> tuple:
    """LayerNormalization / GroupNormalization: the output is affine in each parameter P with
    P broadcast along the non-parameter axes, so example i's gradient of P is dz/dP . 1 times
    g, summed over those axes: x_hat * g for the scale gamma, g for the offset beta; for other
    parameters, dz/dP . 1 is a forward derivative. `z`: the recorded output (used by a
    channels-last GroupNormalization, `_group_norm_affine_grads`)."""
    own = list(layer._trainable_variables)  # pylint: disable=protected-access
    rank = len(g.shape)
    keep = _param_axes(layer, rank)
    reduce_axes = [ax for ax in range(1, rank) if ax not in keep]
    b = tf.shape(g)[0]
    gamma, beta = getattr(layer, "gamma", None), getattr(layer, "beta", None)
    given: dict = {}
    if type(layer) is keras.layers.GroupNormalization:  # pylint: disable=unidiomatic-typecheck
        grads = _group_norm_affine_grads(layer, a, g, z)
        if grads is not None:
            for v, pe in zip((gamma, beta), grads):
                if v is not None and pe is not None:
                    given[id(v)] = pe
    x_hat = (_normalized(layer, a) if gamma is not None and id(gamma) not in given
             and any(v is gamma for v in own) else None)
    per_example = []
    for v in own:
        if id(v) in given:
            per_example.append(given[id(v)])
            continue
        if v is beta and beta is not None:
            direction = None                           # dz/dbeta . 1 = 1
        elif v is gamma and x_hat is not None:
            direction = x_hat
        else:
            tv = getattr(v, "value", v)  # the backend tf.Variable of a Keras variable
            with tf.autodiff.ForwardAccumulator(tv, tf.ones_like(tv)) as acc:
                out = type(layer).call(layer, a)
            direction = acc.jvp(out, unconnected_gradients="zero")
        prod = g if direction is None else direction * g
        pe = tf.reduce_sum(prod, reduce_axes) if reduce_axes else prod
        per_example.append(tf.reshape(pe, [b] + [int(d) for d in v.shape]))
    sq = tf.add_n([tf.reduce_sum(tf.reshape(tf.square(pe), [b, -1]), 1) for pe in per_example])
    return sq, per_example


def _conv_supports(layer: Any) -> bool:
    return (_plain(layer) and layer.data_format == "channels_last"
            and layer.padding in ("same", "valid", "causal"))


def _install_defaults() -> None:
    register(keras.layers.Dense, LayerRule(
        "dense: product of norms / ghost norm / per-example kernel (ghost.py)", _dense_norms,
        ghost._is_plain_dense, pre_activation=True))  # pylint: disable=protected-access
    register(keras.layers.Conv2D, LayerRule(
        "conv2d: space-to-depth or grouped filter-gradient kernels, patches or per-offset "
        "blocks (grouped layers: ghost.py)", _conv2d_norms,
        ghost._is_plain_conv2d, pre_activation=True))  # pylint: disable=protected-access
    for conv in (keras.layers.Conv1D, keras.layers.Conv3D):
        register(conv, LayerRule("conv: identity-convolution patches or per-offset blocks", _conv_nd_norms,
                                 _conv_supports, pre_activation=True))
    register(keras.layers.DepthwiseConv2D, LayerRule(
        "depthwise conv2d: per-channel patches", _depthwise_norms,
        lambda layer: _conv_supports(layer) and layer.padding != "causal",
        pre_activation=True))
    register(keras.layers.Embedding, LayerRule(
        "embedding: Gram of output gradients over equal ids", _embedding_norms,
        lambda layer: _plain(layer) and type(layer).call is keras.layers.Embedding.call))
    register(keras.layers.LayerNormalization, LayerRule(
        "normalisation: forward derivative of the affine parameters", _affine_norms, _plain))
    register(keras.layers.GroupNormalization, LayerRule(
        "normalisation: forward derivative of the affine parameters (gamma's from the "
        "recorded output)", _affine_norms, _plain, uses_output=True))
    register_batch_mixing(keras.layers.BatchNormalization,
                          "keras.layers.GroupNormalization or keras.layers.LayerNormalization")


_install_defaults()


def registered() -> dict[str, str]:
    """Registered layer type name -> how its norms are computed (for docs and logs)."""
    return {cls.__name__: rule.name for cls, rule in _RULES.items()}
