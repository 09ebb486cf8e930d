"""An epoch's inputs and the traced training step of a run, and test accuracy.

The run (`tfdp.train.loop`) feeds each epoch's batches as a distributed dataset of
(x, y, record indices) and calls one traced step per batch: `strategy.run` of the method's
`train_step` with a step seed drawn in cross-replica context.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf

from tfdp.train.base import Method, StepContext

__all__ = ["flat_batches", "epoch_dataset", "make_step_fn", "evaluate_accuracy", "EVAL_BATCH"]

EVAL_BATCH = 1000


def flat_batches(batches: list) -> list[np.ndarray]:
    """Index arrays of the steps; a tuple of arrays (e.g. a pair) is concatenated in order."""
    out = []
    for b in batches:
        if isinstance(b, (tuple, list)):
            b = np.concatenate([np.asarray(p) for p in b])
        out.append(np.asarray(b, dtype=np.int64))
    return out


def _padded(x: np.ndarray, y: np.ndarray, b: np.ndarray, size: int) -> tuple:
    """(x, y, indices) of the records `b`, padded with zero rows of index -1 to `size` rows."""
    xb = np.zeros((size,) + x.shape[1:], x.dtype)
    yb = np.zeros((size,) + y.shape[1:], y.dtype)
    ib = np.full([size], -1, np.int64)
    xb[:len(b)], yb[:len(b)], ib[:len(b)] = x[b], y[b], b
    return xb, yb, ib


def epoch_dataset(strategy, x: np.ndarray, y: np.ndarray, batches: list[np.ndarray],
                   pad_to: Callable[[int], int] | None = None):
    """Distributed dataset of (x, y, record indices) batches.

    With `pad_to`, batches of varying size are padded to `pad_to(len(batch))` rows (zeros,
    record index -1; see `Method.pads_lots`).
    """
    if pad_to is not None and len({len(b) for b in batches}) > 1:
        def padded_gen():
            for b in batches:
                yield _padded(x, y, b, pad_to(len(b)))
        signature = (tf.TensorSpec((None,) + x.shape[1:], tf.as_dtype(x.dtype)),
                     tf.TensorSpec((None,) + y.shape[1:], tf.as_dtype(y.dtype)),
                     tf.TensorSpec((None,), tf.int64))
        ds = tf.data.Dataset.from_generator(padded_gen, output_signature=signature)
    elif not batches:
        empty = np.zeros([0], np.int64)
        ds = tf.data.Dataset.from_tensor_slices((x[empty], y[empty], empty)).batch(1)
    elif len({len(b) for b in batches}) == 1:
        # Batches of one size: gathered per step by a generator with the static batch shape
        # (the same elements as slicing a gathered epoch array, without copying the epoch's
        # data into a dataset constant first, which cost about 1 s per 12,800 MNIST images).
        def fixed_gen():
            for b in batches:
                yield x[b], y[b], b
        m = len(batches[0])
        signature = (tf.TensorSpec((m,) + x.shape[1:], tf.as_dtype(x.dtype)),
                     tf.TensorSpec((m,) + y.shape[1:], tf.as_dtype(y.dtype)),
                     tf.TensorSpec((m,), tf.int64))
        ds = tf.data.Dataset.from_generator(fixed_gen, output_signature=signature)
    else:
        def gen():
            for b in batches:
                yield x[b], y[b], b
        signature = (tf.TensorSpec((None,) + x.shape[1:], tf.as_dtype(x.dtype)),
                     tf.TensorSpec((None,), tf.as_dtype(y.dtype)),
                     tf.TensorSpec((None,), tf.int64))
        ds = tf.data.Dataset.from_generator(gen, output_signature=signature)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return strategy.experimental_distribute_dataset(ds.prefetch(2).with_options(options))


def make_step_fn(strategy, method: Method, generator: tf.random.Generator,
                  global_batch_size: int, reduce_retracing: bool = True) -> Callable:
    def replica_fn(seed, x, y, indices):
        ctx = StepContext.current(seed, global_batch_size, indices)
        metrics = method.train_step(ctx, x, y)
        return {k: tf.cast(v, tf.float32) for k, v in dict(metrics).items()}

    @tf.function(reduce_retracing=reduce_retracing)
    def step(x, y, indices):
        # One seed per step, drawn in cross-replica context so that every replica sees it.
        seed = generator.make_seeds(1)[:, 0]
        per_replica = strategy.run(replica_fn, args=(seed, x, y, indices))
        return {k: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
                for k, v in per_replica.items()}

    return step


def evaluate_accuracy(model, x: np.ndarray, y: np.ndarray, batch_size: int = EVAL_BATCH
                      ) -> float:
    """Fraction of examples whose argmax logit equals the label (inference mode)."""
    if len(x) == 0:
        raise ValueError("x: no test examples")

    @tf.function
    def predict(xb):
        return tf.argmax(model(xb, training=False), axis=-1, output_type=tf.int64)

    correct = 0
    for start in range(0, len(x), batch_size):
        pred = predict(tf.convert_to_tensor(x[start:start + batch_size])).numpy()
        correct += int(np.sum(pred == np.asarray(y[start:start + batch_size]).astype(np.int64)))
    return correct / len(x)
