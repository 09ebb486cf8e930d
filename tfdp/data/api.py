"""The data-set front end: load, load_uint8, info."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

import numpy as np

from tfdp.data import _common
from tfdp.data import cifar
from tfdp.data import mnist
from tfdp.data import sources
from tfdp.data import synthetic
from tfdp.data import tiny_imagenet


_COMMON_OPTIONS = ("num_examples", "shuffle_seed", "download")

_DATASET_OPTIONS = {
    "mnist": _COMMON_OPTIONS,
    "fashion_mnist": _COMMON_OPTIONS,
    "cifar10": _COMMON_OPTIONS,
    "tiny_imagenet": _COMMON_OPTIONS + ("num_classes",),
    "synthetic": ("num_examples", "shuffle_seed", "shape", "num_classes", "seed"),
    "sample": ("num_examples", "shuffle_seed"),
    "sample_20k": ("num_examples", "shuffle_seed"),
}


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """Static description of a data set.

    Attributes:
      name: the data set name (one of DATASETS).
      input_shape: shape of one example, HWC for images.
      num_classes: number of labels.
      class_names: label names in label order; None for Tiny ImageNet when its files are not
        found (the names come from its wnids.txt).
      split_sizes: number of examples per split ("train", "test") in the full data set.
    """

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    class_names: tuple[str, ...] | None
    split_sizes: dict[str, int]


def _check_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    allowed = _DATASET_OPTIONS[name]
    for key in options:
        if key not in allowed:
            raise ValueError(f"{key} is not an option of data set {name!r}; options: {allowed}")
    opts = dict(options)
    opts["num_examples"] = _common.check_positive_int(opts.get("num_examples"), "num_examples",
                                                      allow_none=True)
    opts["shuffle_seed"] = _common.check_seed(opts.get("shuffle_seed"), "shuffle_seed")
    if "download" in allowed:
        if not isinstance(opts.get("download", False), bool):
            raise ValueError(f"download must be a bool, got {opts['download']!r}")
        opts.setdefault("download", False)  # never a network access unless asked (issue 40)
    if name == "tiny_imagenet":
        opts["num_classes"] = _common.check_positive_int(opts.get("num_classes"), "num_classes",
                                                         allow_none=True)
        if opts["num_classes"] is not None and opts["num_classes"] > 200:
            raise ValueError(f"num_classes must be at most 200 for tiny_imagenet, got "
                             f"{opts['num_classes']}")
    if name == "synthetic":
        shape = opts.get("shape", (28, 28, 1))
        try:
            shape = tuple(int(s) for s in shape)
        except (TypeError, ValueError):
            raise ValueError(f"shape must be a tuple of positive integers, got {shape!r}") from None
        if not shape or any(s <= 0 for s in shape):
            raise ValueError(f"shape must be a tuple of positive integers, got {shape!r}")
        opts["shape"] = shape
        opts["num_classes"] = _common.check_positive_int(opts.get("num_classes", 10), "num_classes")
        opts["seed"] = _common.check_seed(opts.get("seed", 0), "seed")
        if opts["seed"] is None:
            raise ValueError("seed must be a non-negative integer for synthetic data, got None")
    return opts


def info(name: str, data_dir: str | None = None, **options) -> DatasetInfo:
    """Describes a data set without loading its pixels.

    Args:
      name: one of DATASETS.
      data_dir: where to look for Tiny ImageNet's wnids.txt (for its class names); see `load`.
      **options: the data set's options as in `load` (`num_classes` for tiny_imagenet;
        `shape`, `num_classes`, `num_examples` for synthetic).

    Returns:
      A DatasetInfo.

    Raises:
      ValueError: naming the argument, for an unknown name or bad option.
    """
    _common.check_name(name)
    opts = _check_options(name, options)
    if name in ("mnist", "sample", "sample_20k"):
        sizes = {"train": 60000, "test": 10000}
        if name == "sample":
            sizes = {"train": 5000, "test": 1000}
        if name == "sample_20k":
            sizes = {"train": 20000, "test": 1000}
        return DatasetInfo(name, (28, 28, 1), 10, _common.MNIST_CLASSES, sizes)
    if name == "fashion_mnist":
        return DatasetInfo(name, (28, 28, 1), 10, _common.FASHION_MNIST_CLASSES,
                           {"train": 60000, "test": 10000})
    if name == "cifar10":
        return DatasetInfo(name, (32, 32, 3), 10, _common.CIFAR10_CLASSES,
                           {"train": 50000, "test": 10000})
    if name == "tiny_imagenet":
        k = opts["num_classes"] or 200
        class_names = None
        for directory in sources.candidate_dirs("tiny_imagenet", data_dir):
            root = tiny_imagenet.tiny_imagenet_root(directory)
            if root is not None:
                wnids = tiny_imagenet.read_wnids(root)
                class_names = tuple(tiny_imagenet.tiny_imagenet_words(root, wnids[:k]))
                break
        return DatasetInfo(name, (64, 64, 3), k, class_names, {"train": 500 * k, "test": 50 * k})
    # synthetic
    n = opts["num_examples"]
    sizes = {s: n or synthetic.DEFAULT_SIZES[s] for s in _common.SPLITS}
    return DatasetInfo(name, opts["shape"], opts["num_classes"],
                       tuple(str(i) for i in range(opts["num_classes"])), sizes)


def load(name: str, split: str = "train", data_dir: str | None = None,
         value_range: Sequence[float] = (-1.0, 1.0), **options) -> tuple[np.ndarray, np.ndarray]:
    """Loads one split of a data set as float32 NHWC pixels in value_range and int64 labels.

    Files for data set NAME are looked for in `<root>/<NAME>/` (and the usual names of the
    official archives, e.g. `<root>/cifar10/cifar-10-batches-py/`), where root is `data_dir`
    if given, else the TFDP_DATA_DIR environment variable, else the Keras cache
    (`$KERAS_HOME/datasets` or `~/.keras/datasets`). Fashion-MNIST is also looked for in
    /usr/share/datasets/fashion-mnist (Debian package dataset-fashion-mnist).

    Pixel value p in 0..255 becomes low + (high - low) * p / 255, exactly low for 0 and
    exactly high for 255.

    Args:
      name: one of DATASETS.
      split: "train" or "test" (Tiny ImageNet's "test" is its labelled validation set).
      data_dir: root directory holding `<NAME>/` folders; see above.
      value_range: (low, high) pixel range.
      **options:
        num_examples: keep only the first N examples (of the shuffled order if shuffle_seed
          is given); for synthetic, the number generated (default 1024 train, 256 test).
        shuffle_seed: permute the split with this seed before taking num_examples.
        download: for mnist, fashion_mnist, cifar10: download through Keras' file cache
          tools into `<root>/<NAME>/` when the files are absent (default False: no network
          access unless asked).
        num_classes: tiny_imagenet: keep the first K wnids of wnids.txt (labels 0..K-1;
          default all; StoBatch uses 30); synthetic: number of classes (default 10).
        shape: synthetic: shape of one example (default (28, 28, 1)).
        seed: synthetic: generation seed (default 0).

    Returns:
      (x, y): x float32 of shape [N, *input_shape], y int64 of shape [N].

    Raises:
      ValueError: naming the argument, for a bad name, split, value_range or option.
      DataNotFoundError: the files are absent (and could not be downloaded).
      DataCorruptError: a file is truncated, corrupt or in an unexpected format.
    """
    _common.check_name(name)
    _common.check_split(split)
    low, high = _common.check_value_range(value_range)
    opts = _check_options(name, options)
    x, y = _load_uint8(name, split, data_dir, opts)
    return _common.scale_pixels(x, (low, high)), y


def load_uint8(name: str, split: str = "train", data_dir: str | None = None,
               **options) -> tuple[np.ndarray, np.ndarray]:
    """Like `load`, but returns the raw uint8 pixels (0..255), NHWC, and int64 labels.

    Args:
      name: one of DATASETS.
      split: "train" or "test".
      data_dir: see `load`.
      **options: see `load`.

    Returns:
      (x, y): x uint8 of shape [N, *input_shape], y int64 of shape [N].

    Raises:
      ValueError, DataNotFoundError, DataCorruptError: as `load`.
    """
    _common.check_name(name)
    _common.check_split(split)
    opts = _check_options(name, options)
    return _load_uint8(name, split, data_dir, opts)


def _load_uint8(name: str, split: str, data_dir: str | None,
                opts: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Loads uint8 pixels and int64 labels after validation; applies num_examples."""
    if name == "synthetic":
        n = opts["num_examples"] or synthetic.DEFAULT_SIZES[split]
        x, y = synthetic.generate(split, n, opts["shape"], opts["num_classes"], opts["seed"])
        return _common.select_arrays(x, y, None, opts["shuffle_seed"])
    if name == "sample":
        x, y = mnist.load_sample(split)
    elif name == "sample_20k":
        x, y = mnist.load_sample(split, mnist.SAMPLE_20K_PATH)
    elif name in ("mnist", "fashion_mnist"):
        npz_files = ([os.path.join(r, "mnist.npz") for r in sources.roots(data_dir)]
                     if name == "mnist" else [])
        x, y = mnist.load_mnist_like(name, split, sources.candidate_dirs(name, data_dir),
                                     opts["download"], data_dir, npz_files)
    elif name == "cifar10":
        return cifar.load_cifar10(split, data_dir, opts)
    else:
        return tiny_imagenet.load_tiny_imagenet(split, data_dir, opts)
    return _common.select_arrays(x, y, opts["num_examples"], opts["shuffle_seed"])
