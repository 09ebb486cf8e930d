"""Shared privatisers: per-example clipping, noise on a clipped sum, and their ledger entries.

DP-SGD (Abadi et al. 2016), Secure-SGD (HGM Alg. 1) and StoBatch reuse these pieces
instead of copying them. Each function runs inside `strategy.run` (one replica's slice of
the global batch); noise that must be drawn once per global batch is added on replica 0
only, from a seed every replica shares.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Sequence

import tensorflow as tf

from layers import noise_streams
from tfdp import accounting, mechanisms, options
from tfdp.train import example_grads, ghost, metrics
from tfdp.train.base import StepContext

# "vectorized": per-example gradients of the whole model (tf.vectorized_map).
# "ghost": per-example norms from each layer's inputs and output gradients (Gram / "ghost
#   norm"), then one re-weighted batched gradient; unsupported layers fall back per layer.
# "auto": like "ghost", but each Dense / Conv2D layer takes the cheaper of the ghost norm and
#   per-example kernel gradients from image patches.
CLIPPING_METHODS = ("vectorized", "ghost", "auto")

# Lot sampling of DP-SGD-style methods: Poisson lots (what the accountant analyses) or
# fixed-size shuffled batches (the Poisson number is then only claimed).
SAMPLINGS = ("poisson", "shuffle")

# A loss of one example: (model, x[None], y[None], training) -> (loss scalar, logits [1, K]).
ExampleLoss = Callable[[tf.Tensor, tf.Tensor], tuple]


def per_example_gradients(model, variables: Sequence[tf.Variable], x: tf.Tensor, y: tf.Tensor,
                          example_loss: Callable) -> tuple[list, tf.Tensor, tf.Tensor]:
    """Per-example gradients of `example_loss` (tf.vectorized_map over the batch, or a loop
    where a grouped convolution cannot be vectorised: `example_grads.map_examples`).

    Args:
      model: the Keras model (called by `example_loss`).
      variables: the variables to differentiate.
      x: inputs [B, ...].
      y: labels [B].
      example_loss: `f(xi, yi) -> (loss, logits)` for ONE example given with a leading batch
        axis of 1 (`xi` is [1, ...], `yi` is [1]); `loss` is a scalar, `logits` [1, K].

    Returns:
      (grads, losses, correct): list of [B, *param_shape] tensors, per-example losses [B],
      per-example 0/1 accuracy [B].
    """
    def one_example(args):
        xi, yi, index = args
        # Fresh per-example noise layers key their draw by the example's position; without
        # this every example of the batch would get the same draw (layers/noise.py).
        with noise_streams.example_index_scope(index), tf.GradientTape() as tape:
            loss, logits = example_loss(xi[None], yi[None])
        correct = metrics.correct_predictions(logits[0], yi)
        return tape.gradient(loss, variables), loss, correct

    index = tf.range(tf.shape(y)[0], dtype=tf.int64)
    return example_grads.map_examples(one_example, (x, y, index), model)


def clip_and_sum(per_example_grads: Sequence[tf.Tensor], l2_clip: float,
                 mask: tf.Tensor | None = None) -> list:
    """Sum over examples of per-example gradients, each clipped to L2 norm `l2_clip`.

    The norm of example i is taken over all parameter tensors together; its gradient is
    scaled by min(1, C / ||g_i||_2) (Abadi et al. 2016, Alg. 1: g / max(1, ||g||_2 / C)).

    Args:
      per_example_grads: list of tensors, each [batch, *param_shape].
      l2_clip: the bound C > 0.
      mask: optional float [batch], 0.0 for padding rows (their factor becomes 0: they add
        nothing to the sum) and 1.0 for real records.

    Returns:
      List of tensors of the parameter shapes.
    """
    sq_norms = tf.add_n([tf.reduce_sum(tf.reshape(tf.square(g), [tf.shape(g)[0], -1]), 1)
                         for g in per_example_grads])
    factors = example_grads.clip_factors(sq_norms, l2_clip, mask)
    return [tf.tensordot(factors, g, axes=1) for g in per_example_grads]


def clipped_gradient_sum(model, variables: Sequence[tf.Variable], x: tf.Tensor, y: tf.Tensor,
                         example_loss: Callable, l2_clip: float, method: str = "vectorized",
                         mask: tf.Tensor | None = None) -> tuple[list, tf.Tensor, tf.Tensor]:
    """Sum of per-example gradients clipped to L2 norm `l2_clip` (one replica's slice).

    Args:
      model, variables, x, y, example_loss: as in `per_example_gradients`.
      l2_clip: clipping bound C > 0.
      method: how per-example norms are computed; one of CLIPPING_METHODS. All give the
        same clipped sum up to float rounding (tests/train/test_privatize.py); "ghost" and
        "auto" fall back to "vectorized" for models they do not support as a whole
        (see `tfdp.train.ghost.plan_model`) and per layer for layers they do not support.
      mask: optional float [B]: 0.0 marks padding rows, which add nothing to the sums (their
        losses and accuracies are returned as computed; weight them with the mask).

    Returns:
      (sums, losses, correct): clipped gradient sums (parameter shapes), per-example losses
      [B] and 0/1 accuracy [B].

    Raises:
      ValueError: on an unknown `method`.
    """
    if method not in CLIPPING_METHODS:
        raise ValueError(f"method: expected one of {CLIPPING_METHODS}, got {method!r}")
    if method != "vectorized":
        out = ghost.clipped_gradient_sum(model, variables, x, y, example_loss, l2_clip,
                                         method=method, mask=mask)
        if out is not None:
            return out
        # The model as a whole is not supported (see ghost.plan_model): same result the
        # slow way.
    grads, losses, correct = per_example_gradients(model, variables, x, y, example_loss)
    return clip_and_sum(grads, l2_clip, mask), losses, correct


def add_gaussian_noise_once(ctx: StepContext, sums: Sequence[tf.Tensor], stddev: float,
                            salt: int = 1) -> list:
    """Adds N(0, stddev^2 I) to each tensor of a global sum, once per global batch.

    Every replica holds its share of a sum that the optimizer adds up across replicas; the
    noise is added on replica 0 only, drawn from the step seed that all replicas share, so
    the global sum carries exactly one draw, the same one a single device draws.

    Args:
      ctx: the step's context (its seed and replica).
      sums: per-replica shares of the summed (clipped) gradients.
      stddev: the noise standard deviation (sigma * C for DP-SGD).
      salt: first salt folded into the step seed (tensor i uses salt + i).

    Returns:
      The noisy shares.
    """
    on_first = ctx.first_replica_mask()
    out = []
    for i, total in enumerate(sums):
        noise = mechanisms.tf_gaussian(tf.shape(total), stddev, seed=ctx.step_seed(salt + i))
        out.append(total + on_first * tf.cast(noise, total.dtype))
    return out


def dpsgd_gradients(ctx: StepContext, model, variables: Sequence[tf.Variable], x: tf.Tensor,
                    y: tf.Tensor, example_loss: Callable, *, l2_clip: float,
                    noise_multiplier: float, clipping: str = "vectorized",
                    mask: tf.Tensor | None = None) -> tuple[list, dict]:
    """One replica's DP-SGD gradients: clip per example, sum, noise once, divide by the lot.

    Abadi et al. 2016 Alg. 1: g_i / max(1, ||g_i||/C), summed, plus N(0, sigma^2 C^2 I)
    (once per lot, not per example), divided by the expected lot size.

    Args:
      ctx: the step's context; `ctx.global_batch_size` is the (expected) lot size the sum
        is divided by.
      model, variables, x, y, example_loss: as in `per_example_gradients`.
      l2_clip: C.
      noise_multiplier: sigma.
      clipping: see `clipped_gradient_sum`.
      mask: optional float [B], 0.0 for the padding rows of a padded lot
        (`StepContext.row_mask()`): they add nothing to the clipped sum, loss or accuracy,
        so the update is that of the real lot; the noise, drawn from the step seed with the
        parameters' shapes, does not depend on the padding.

    Returns:
      (gradients, metrics) with metrics "loss" and "accuracy" as this replica's share of the
      global means.
    """
    sums, losses, correct = clipped_gradient_sum(model, variables, x, y, example_loss, l2_clip,
                                                 clipping, mask)
    if mask is not None:
        losses, correct = losses * mask, correct * mask
    global_batch_size = ctx.global_batch_size
    noisy = add_gaussian_noise_once(ctx, sums, noise_multiplier * l2_clip)
    grads = [g / float(global_batch_size) for g in noisy]
    return grads, {"loss": tf.reduce_sum(losses) / float(global_batch_size),
                   "accuracy": tf.reduce_sum(correct) / float(global_batch_size)}


@dataclasses.dataclass(frozen=True)
class DPSGDSettings:
    """The DP-SGD settings DP-SGD (`dpsgd_*`) and Secure-SGD (`hgm_*`) share: clip norm,
    noise, accountant, sampling. Their `tfdp.options.declare`d settings classes extend it."""

    l2_clip: float = options.field(
        1.0, "L2 norm bound C of each per-example gradient (the DP-SGD step).",
        check=options.positive)
    noise_multiplier: Optional[float] = options.field(
        None, "DP-SGD noise multiplier sigma (noise stddev = sigma * C). Unset: the smallest "
        "sigma whose accounted epsilon over --epochs is <= --epsilon. Set together with "
        "--epsilon: train until the next step would exceed --epsilon.",
        check=options.positive)
    accountant: str = options.field(
        accounting.DEFAULT_ACCOUNTANT, "DP-SGD accountant (dp_accounting): pld (privacy loss "
        "distributions, pessimistic discretisation; tighter) or rdp (Renyi DP). It computes "
        "the ledger's epsilon and solves sigma from --epsilon.",
        choices=accounting.ACCOUNTANTS)
    sampling: str = options.field(
        "poisson", "DP-SGD lot sampling: poisson (each example joins each lot with "
        "probability q = batch_size/n; what the accountant analyses) or shuffle (fixed-size "
        "shuffled batches; the ledger then records the Poisson number as claimed and the "
        "no-amplification bound as sound).", choices=SAMPLINGS)
