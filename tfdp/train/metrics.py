"""A training step's metrics: one definition of the step accuracy every trainer reports.

Inside `strategy.run`, a replica returns its share of the global batch's metrics (the run
sums them across replicas): the number of its correct predictions divided by the global
batch size. These are non-private monitoring statistics of the training data
(`tfdp.train.loop` stores them with a "never release" note).
"""

from __future__ import annotations

import tensorflow as tf

__all__ = ["correct_predictions", "step_accuracy", "step_metrics"]


def correct_predictions(logits: tf.Tensor, y: tf.Tensor, dtype: tf.DType = tf.float32
                        ) -> tf.Tensor:
    """1 where the argmax of `logits` (last axis) is the label `y`, else 0, as `dtype`.

    Args:
      logits: scores [..., K] (one example [K] or a batch [b, K]).
      y: integer labels of the same leading shape.
      dtype: the result's float type.
    """
    return tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int64),
                            tf.cast(y, tf.int64)), dtype)


def step_accuracy(logits: tf.Tensor, y: tf.Tensor, global_batch_size: int,
                  dtype: tf.DType = tf.float32) -> tf.Tensor:
    """A replica's share of the step's training accuracy: its correct predictions / the
    global batch size.

    Args:
      logits: the replica's logits [b, K].
      y: its integer labels [b].
      global_batch_size: the divisor of the shares (the global batch size, or the number
        of records a step averages over).
      dtype: the float type of the count.
    """
    return tf.reduce_sum(correct_predictions(logits, y, dtype)) / float(global_batch_size)


def step_metrics(loss: tf.Tensor, logits: tf.Tensor, y: tf.Tensor, global_batch_size: int
                 ) -> dict:
    """A replica's share of a step's metrics: `loss` as given, accuracy over the global batch.

    Args:
      loss: the replica's share of the global mean loss.
      logits: the replica's logits [b, K].
      y: its integer labels [b].
      global_batch_size: the global batch size the shares are normalised by.
    """
    return {"loss": loss, "accuracy": step_accuracy(logits, y, global_batch_size)}
