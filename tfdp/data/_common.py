"""Shared constants, errors, argument checks and pixel scaling of tfdp.data."""

from __future__ import annotations

import gzip
import os
import zlib
from typing import Any, Iterable, Sequence

import numpy as np

from tfdp import checks

DATASETS = ("mnist", "fashion_mnist", "cifar10", "tiny_imagenet", "synthetic", "sample",
            "sample_20k")
SPLITS = ("train", "test")

MNIST_CLASSES = tuple(str(i) for i in range(10))
FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot")
# The CIFAR-10 label order (batches.meta of the official release).
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck")

# Environment variable naming the data root when no data_dir is passed.
ENV_DATA_DIR = "TFDP_DATA_DIR"


class DataNotFoundError(FileNotFoundError):
    """The files of a data set are not where the loader looked (and could not be downloaded)."""


class DataCorruptError(ValueError):
    """A data file exists but is truncated, corrupt or not in the expected format."""


# Shown (and pickled) under the public package that exports them.
DataNotFoundError.__module__ = DataCorruptError.__module__ = "tfdp.data"


def check_value_range(value_range: Sequence[float]) -> tuple[float, float]:
    """Validates a (low, high) pixel range.

    Args:
      value_range: a pair of finite numbers with low < high.

    Returns:
      (low, high) as Python floats.

    Raises:
      ValueError: naming value_range, if it is not such a pair.
    """
    return checks.check_interval(value_range, "value_range")


def check_name(name: str) -> str:
    """Returns name if it is one of DATASETS, else raises ValueError naming name."""
    if name not in DATASETS:
        raise ValueError(f"name must be one of {DATASETS}, got {name!r}")
    return name


def check_split(split: str) -> str:
    """Returns split if it is "train" or "test", else raises ValueError naming split."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return split


def check_positive_int(value: Any, arg: str, allow_none: bool = False) -> int | None:
    """Returns value as int if it is a positive integer (or None if allowed), else ValueError."""
    return checks.check_positive_int(value, arg, allow_none=allow_none)


def check_seed(value: Any, arg: str) -> int | None:
    """Returns value as int if it is a non-negative integer, None for None, else ValueError."""
    return checks.check_seed(value, arg)


def scale_pixels(x: np.ndarray, value_range: Sequence[float] = (-1.0, 1.0)) -> np.ndarray:
    """Maps uint8 pixels 0..255 linearly onto value_range as float32 (0 -> low, 255 -> high).

    Args:
      x: uint8 array.
      value_range: (low, high).

    Returns:
      float32 array of x's shape.

    Raises:
      ValueError: naming x or value_range.
    """
    low, high = check_value_range(value_range)
    x = np.asarray(x)
    if x.dtype != np.uint8:
        raise ValueError(f"x must be uint8 pixels, got dtype {x.dtype}")
    # One float64 lookup table, then one cast: low*(1-t) + high*t is exact at both ends.
    t = np.arange(256, dtype=np.float64) / 255.0
    table = low * (1.0 - t) + high * t
    table[0], table[255] = low, high
    return table.astype(np.float32)[x]


def selection(n: int, num_examples: int | None, shuffle_seed: int | None) -> np.ndarray | None:
    """Indices to keep: a seeded permutation (if asked) cut to num_examples (if given)."""
    if num_examples is not None and num_examples > n:
        raise ValueError(f"num_examples={num_examples} exceeds the {n} examples of the split")
    if shuffle_seed is None and (num_examples is None or num_examples == n):
        return None
    order = (np.random.default_rng(shuffle_seed).permutation(n) if shuffle_seed is not None
             else np.arange(n))
    return order[:num_examples] if num_examples is not None else order


def select_arrays(x: np.ndarray, y: np.ndarray, num_examples: int | None,
                  shuffle_seed: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Applies `selection` to arrays and returns the labels as int64."""
    sel = selection(len(x), num_examples, shuffle_seed)
    if sel is not None:
        x, y = x[sel], y[sel]
    return x, y.astype(np.int64)


def check_labels(x: np.ndarray, y: np.ndarray, num_classes: int,
                 path: str) -> tuple[np.ndarray, np.ndarray]:
    """Returns (x, y as int64 [N]); DataCorruptError naming path for labels out of range."""
    y = np.asarray(y).astype(np.int64).reshape(-1)
    if len(y) and (y.min() < 0 or y.max() >= num_classes):
        raise DataCorruptError(f"{path} has labels outside 0..{num_classes - 1} "
                               f"(range {y.min()}..{y.max()})")
    return x, y


def find_file(directory: str, names: Iterable[str]) -> str | None:
    """The first of names that is a file in directory, else None."""
    for n in names:
        path = os.path.join(directory, n)
        if os.path.isfile(path):
            return path
    return None


def read_bytes(path: str) -> bytes:
    """Reads a file, gunzipping it if it is gzip data; DataCorruptError on gzip errors."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise DataCorruptError(f"cannot read {path}: {e}") from e
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise DataCorruptError(f"{path} is not a valid gzip file (truncated or corrupt): "
                                   f"{e}") from e
    elif path.endswith(".gz"):
        raise DataCorruptError(f"{path} is named .gz but is not gzip data")
    return data
