"""Fixed disjoint batches and tf.data pipelines."""

from __future__ import annotations

import numpy as np

from tfdp.data import _common


def fixed_batches(num_examples: int, batch_size: int, seed: int | np.random.Generator | None,
                  *, shuffle: bool = True) -> np.ndarray:
    """Cuts N example indices once into fixed, disjoint batches of exactly batch_size.

    The indices are permuted once with the seed (StoBatch code release: permute once, cut into
    floor(N/m) batches, drop the remainder), then cut in order. The last N mod batch_size
    indices of the permutation are DROPPED, so every batch has exactly batch_size examples
    (e.g. N=50,000, m=1,851 gives 27 batches and 23 unused examples). The same seed always
    gives the same batches.

    Args:
      num_examples: N, the number of examples.
      batch_size: m, examples per batch (1 <= m <= N).
      seed: integer seed or np.random.Generator for the permutation; None draws from OS
        entropy (not reproducible).
      shuffle: False cuts 0..N-1 in order without permuting (the StoBatch MNIST code reads
        the data sequentially).

    Returns:
      int64 array of shape [N // m, m]; row b holds the indices of batch b.

    Raises:
      ValueError: naming num_examples, batch_size or seed.
    """
    n = _common.check_positive_int(num_examples, "num_examples")
    m = _common.check_positive_int(batch_size, "batch_size")
    if m > n:
        raise ValueError(f"batch_size must be at most num_examples={n}, got {m}")
    if isinstance(seed, np.random.Generator):
        rng = seed
    else:
        rng = np.random.default_rng(_common.check_seed(seed, "seed"))
    order = rng.permutation(n) if shuffle else np.arange(n)
    num_batches = n // m  # StoBatch: n_b = floor(N/m), remainder dropped
    return order[:num_batches * m].astype(np.int64).reshape(num_batches, m)


def make_dataset(x: np.ndarray, y: np.ndarray, batch_size: int, *, shuffle: bool = True,
                 seed: int | None = None, drop_remainder: bool = False, repeat: bool = False,
                 batches: np.ndarray | None = None):
    """Builds a tf.data pipeline of (x, y) batches.

    Only the indices are shuffled and batched; each batch is gathered from x and y, so the
    pipeline stays fast for large arrays.

    Args:
      x: examples, first axis N.
      y: labels, first axis N.
      batch_size: examples per batch. With `batches`, must equal batches.shape[1].
      shuffle: reshuffle the order every epoch (with `batches`: the order of the fixed
        batches; their contents never change).
      seed: seed of the shuffle (same seed, same sequence of epochs); None is not
        reproducible.
      drop_remainder: drop a last, smaller batch (ignored with `batches`, which are full).
      repeat: repeat forever (each repetition is an epoch, reshuffled).
      batches: output of `fixed_batches`: yield exactly these batches each epoch.

    Returns:
      A tf.data.Dataset of (x_batch, y_batch).

    Raises:
      ValueError: naming x, y, batch_size, seed or batches.
    """
    # lazy: loads tensorflow; importing tfdp.data.batching does not
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    x = np.asarray(x)
    y = np.asarray(y)
    if x.ndim < 1 or y.ndim < 1 or len(x) != len(y):
        raise ValueError(f"x and y must have the same first dimension, got x {x.shape} and "
                         f"y {y.shape}")
    n = len(x)
    if n == 0:
        raise ValueError("x must hold at least one example")
    m = _common.check_positive_int(batch_size, "batch_size")
    seed = _common.check_seed(seed, "seed")
    if batches is not None:
        batches = np.asarray(batches)
        if batches.ndim != 2 or not np.issubdtype(batches.dtype, np.integer):
            raise ValueError(f"batches must be an integer array [num_batches, batch_size], got "
                             f"shape {batches.shape} dtype {batches.dtype}")
        if batches.shape[1] != m:
            raise ValueError(f"batch_size must equal batches.shape[1]={batches.shape[1]}, got {m}")
        if batches.size and (batches.min() < 0 or batches.max() >= n):
            raise ValueError(f"batches must hold indices in [0, {n}), got "
                             f"[{batches.min()}, {batches.max()}]")
        index_ds = tf.data.Dataset.from_tensor_slices(batches.astype(np.int64))
        if shuffle:
            index_ds = index_ds.shuffle(len(batches), seed=seed, reshuffle_each_iteration=True)
    else:
        if m > n and drop_remainder:
            raise ValueError(f"batch_size={m} exceeds the {n} examples and drop_remainder is "
                             f"set: no batch would be produced")
        index_ds = tf.data.Dataset.range(n)
        if shuffle:
            index_ds = index_ds.shuffle(n, seed=seed, reshuffle_each_iteration=True)
        index_ds = index_ds.batch(m, drop_remainder=drop_remainder)
    if repeat:
        index_ds = index_ds.repeat()
    x_t = tf.constant(x)
    y_t = tf.constant(y)
    ds = index_ds.map(lambda idx: (tf.gather(x_t, idx), tf.gather(y_t, idx)),
                      num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)
