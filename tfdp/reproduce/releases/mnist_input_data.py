"""Stand-in for `tensorflow.examples.tutorials.mnist.input_data` (removed in TF 2).

Reads the MNIST files tfdp itself reads (`tfdp.data.load_uint8`, so TFDP_DATA_DIR and the
usual search path apply) and serves them with the tutorial module's interface: `read_data_sets`
returns `.train`, `.validation` and `.test`, each with `images` (float32, [N, 784], pixels / 255
in [0, 1]), `labels` (one-hot or integer), `num_examples`, `epochs_completed` and `next_batch`.
As in TF 1.x, the first `validation_size` training images form the validation split and
`next_batch` reshuffles (NumPy's global generator) at the start of every epoch, completing a
batch that crosses an epoch boundary with the first images of the next epoch.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from tfdp.data import api as data_api

# Which tfdp data set stands in for MNIST: "mnist" (the real files, the default) or
# "sample" / "sample_20k" (the embedded subsets, for tests without the real files).
DATASET_ENV = "TFDP_RELEASE_MNIST"
_DATASETS = ("mnist", "sample", "sample_20k")


class DataSet:
    """One split, batched like the TF 1.x tutorial's `DataSet`."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, shuffle_first: bool = True):
        """Wraps already-converted arrays.

        Args:
          images: float32, [N, 784].
          labels: [N] integers or [N, 10] one-hot.
          shuffle_first: whether the first epoch is shuffled too (TF >= 1.5 behaviour).

        Raises:
          ValueError: if images and labels differ in length.
        """
        if len(images) != len(labels):
            raise ValueError(f"images has {len(images)} rows but labels has {len(labels)}")
        self._images = images
        self._labels = labels
        self._num_examples = len(images)
        self._epochs_completed = 0
        self._index_in_epoch = 0
        self._shuffle_first = shuffle_first

    @property
    def images(self) -> np.ndarray:
        return self._images

    @property
    def labels(self) -> np.ndarray:
        return self._labels

    @property
    def num_examples(self) -> int:
        return self._num_examples

    @property
    def epochs_completed(self) -> int:
        return self._epochs_completed

    def _shuffled(self) -> None:
        order = np.arange(self._num_examples)
        np.random.shuffle(order)
        self._images = self._images[order]
        self._labels = self._labels[order]

    def next_batch(self, batch_size: int, fake_data: bool = False,
                   shuffle: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The next `batch_size` examples; a new shuffled epoch starts when this one runs out.

        Args:
          batch_size: examples per batch, 1..num_examples.
          fake_data: unsupported (the tutorial's test-only switch).
          shuffle: reshuffle at epoch starts.

        Returns:
          (images, labels) of the batch.

        Raises:
          ValueError: for fake_data or a batch_size outside 1..num_examples.
        """
        if fake_data:
            raise ValueError("fake_data is not supported by the tfdp stand-in")
        if not 1 <= batch_size <= self._num_examples:
            raise ValueError(f"batch_size must be in 1..{self._num_examples}, got {batch_size}")
        if self._epochs_completed == 0 and self._index_in_epoch == 0 and shuffle \
                and self._shuffle_first:
            self._shuffled()
        start = self._index_in_epoch
        if start + batch_size <= self._num_examples:
            self._index_in_epoch += batch_size
            return (self._images[start:self._index_in_epoch],
                    self._labels[start:self._index_in_epoch])
        rest_x, rest_y = self._images[start:], self._labels[start:]
        self._epochs_completed += 1
        if shuffle:
            self._shuffled()
        self._index_in_epoch = batch_size - len(rest_x)
        return (np.concatenate([rest_x, self._images[:self._index_in_epoch]]),
                np.concatenate([rest_y, self._labels[:self._index_in_epoch]]))


class DataSets:
    """The three splits, as attributes train / validation / test."""

    def __init__(self, train: DataSet, validation: DataSet, test: DataSet):
        self.train, self.validation, self.test = train, validation, test


def _convert(x: np.ndarray, y: np.ndarray, one_hot: bool, reshape: bool,
             dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    images = x.reshape(len(x), -1) if reshape else x
    if np.dtype(dtype) == np.float32:
        images = images.astype(np.float32) / 255.0  # the tutorial's [0, 1] scaling
    labels = np.eye(10, dtype=np.float64)[y] if one_hot else y.astype(np.uint8)
    return images, labels


def read_data_sets(train_dir: str = "", fake_data: bool = False, one_hot: bool = False,
                   dtype: Any = np.float32, reshape: bool = True, validation_size: int = 5000,
                   seed: int | None = None, source_url: str | None = None) -> DataSets:
    """The tutorial's `read_data_sets`, on tfdp's MNIST files (`train_dir` is ignored).

    Args:
      train_dir: ignored: the files come from tfdp's data search path (TFDP_DATA_DIR).
      fake_data: unsupported.
      one_hot: one-hot labels instead of integers.
      dtype: np.float32 (scaled to [0, 1]) or np.uint8.
      reshape: flatten images to [N, 784].
      validation_size: first training images held out as the validation split.
      seed: unused (shuffling uses NumPy's global generator, which the shim seeds).
      source_url: ignored (nothing is downloaded).

    Returns:
      DataSets with train, validation and test.

    Raises:
      ValueError: for fake_data, a validation_size larger than the training set, or a bad
        TFDP_RELEASE_MNIST.
    """
    del train_dir, seed, source_url
    if fake_data:
        raise ValueError("fake_data is not supported by the tfdp stand-in")
    name = os.environ.get(DATASET_ENV) or "mnist"
    if name not in _DATASETS:
        raise ValueError(f"{DATASET_ENV} must be one of {_DATASETS}, got {name!r}")
    data_dir = os.environ.get("TFDP_DATA_DIR") or None
    x_train, y_train = data_api.load_uint8(name, "train", data_dir)
    x_test, y_test = data_api.load_uint8(name, "test", data_dir)
    if not 0 <= validation_size <= len(x_train):
        raise ValueError(f"validation_size must be in 0..{len(x_train)}, got {validation_size}")
    xt, yt = _convert(x_train, y_train, one_hot, reshape, dtype)
    xs, ys = _convert(x_test, y_test, one_hot, reshape, dtype)
    return DataSets(DataSet(xt[validation_size:], yt[validation_size:]),
                    DataSet(xt[:validation_size], yt[:validation_size]), DataSet(xs, ys))
