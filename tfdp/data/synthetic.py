"""Deterministic synthetic data of any shape."""

from __future__ import annotations

import numpy as np

from tfdp.data import _common


DEFAULT_SIZES = {"train": 1024, "test": 256}


def generate(split: str, n: int, shape: tuple[int, ...], num_classes: int,
             seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic, learnable random data: class prototypes plus Gaussian noise, uint8.

    The prototypes depend only on the seed, so train and test share them; the examples of
    each split come from their own stream (seed, split).
    """
    proto_rng = np.random.default_rng([seed, 0])
    prototypes = proto_rng.uniform(0.0, 1.0, size=(num_classes,) + shape)
    rng = np.random.default_rng([seed, 1 + _common.SPLITS.index(split)])
    y = rng.permutation(np.arange(n) % num_classes).astype(np.int64)  # balanced labels
    values = prototypes[y] + rng.normal(0.0, 0.25, size=(n,) + shape)
    x = np.rint(np.clip(values, 0.0, 1.0) * 255.0).astype(np.uint8)
    return x, y
