"""Per-step context a training method reads inside `strategy.run` (seed, replica id)."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import tensorflow as tf

_LOCAL = threading.local()


@contextlib.contextmanager
def step_context(seed: tf.Tensor) -> Iterator[None]:
    """Makes `seed` the current step's seed for code running in this (replica) thread.

    The loop draws `seed` once per step, in cross-replica context, from the run's
    checkpointed tf.random.Generator and passes the same value to every replica.

    Args:
      seed: int64 tensor of shape [2] (a stateless seed).

    Yields:
      Nothing; `step_seed()` returns `seed` inside the block.
    """
    previous = getattr(_LOCAL, "seed", None)
    _LOCAL.seed = seed
    try:
        yield
    finally:
        _LOCAL.seed = previous


def step_seed(salt: int = 0) -> tf.Tensor:
    """The current training step's stateless seed, identical on every replica.

    Use it for noise that must be drawn once per global batch (e.g. DP-SGD's Gaussian noise),
    together with `is_first_replica()`; use it with `replica_id()` folded in for noise that
    must be independent per replica.

    Args:
      salt: folded into the seed so that different noise tensors of one step are independent.

    Returns:
      int64 tensor of shape [2].

    Raises:
      RuntimeError: outside a training step of `tfdp.train.loop`.
    """
    seed = getattr(_LOCAL, "seed", None)
    if seed is None:
        raise RuntimeError("step_seed() is only available inside a tfdp.train.loop training step")
    if salt:
        seed = tf.random.experimental.stateless_fold_in(seed, int(salt))
    return seed


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
