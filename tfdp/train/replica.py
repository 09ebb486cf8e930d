"""The calling replica's place in its sync group (0 / 1 under the default strategy).

A training step gets its seed and replica through `tfdp.train.base.StepContext`; these
helpers serve code that runs inside `strategy.run` without one.
"""

from __future__ import annotations

import tensorflow as tf


def replica_id() -> tf.Tensor:
    """This replica's index in its sync group (0 under the default strategy)."""
    return tf.convert_to_tensor(
        tf.distribute.get_replica_context().replica_id_in_sync_group, dtype=tf.int32)


def num_replicas() -> int:
    """Number of replicas in sync (1 under the default strategy)."""
    return int(tf.distribute.get_replica_context().num_replicas_in_sync)


def is_first_replica() -> tf.Tensor:
    """Boolean tensor, True on replica 0 (the replica that adds once-per-global-batch noise)."""
    return tf.equal(replica_id(), 0)
