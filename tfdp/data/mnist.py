"""MNIST and Fashion-MNIST readers (IDX files, Keras mnist.npz) and the embedded sample."""

from __future__ import annotations

import os
import zipfile
import zlib
from typing import Sequence

import numpy as np

from tfdp.data import _common
from tfdp.data import sources


# tfdp/data_files/mnist_sample.npz, shipped as package data.
SAMPLE_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "data_files", "mnist_sample.npz")
# tfdp/data_files/mnist_sample_20k.npz: the first 2,000 training images of each digit and
# the sample's test images (the main job's data; `make_sample.py --train_per_class=2000`).
SAMPLE_20K_PATH = os.path.join(os.path.dirname(SAMPLE_PATH), "mnist_sample_20k.npz")


def _idx_names(stem: str) -> list[str]:
    """Accepted spellings of an IDX file: official, and the 'train-images.idx3-ubyte' form."""
    dotted = stem.replace("-idx", ".idx")
    return [stem + ".gz", stem, dotted + ".gz", dotted]


_IDX_STEMS = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
              "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def load_mnist_like(name: str, split: str, dirs: Sequence[str], download: bool,
                    data_dir: str | None = None,
                    npz_files: Sequence[str] = ()) -> tuple[np.ndarray, np.ndarray]:
    """Finds and reads MNIST-format files in the first directory that has them.

    npz_files: further mnist.npz paths tried after the directories (Keras' own cache
    location `<root>/mnist.npz`).
    """
    img_stem, lbl_stem = _IDX_STEMS[split]

    def _scan() -> tuple[np.ndarray, np.ndarray] | list[str]:
        notes = []
        for d in dirs:
            if not os.path.isdir(d):
                continue
            img = _common.find_file(d, _idx_names(img_stem))
            lbl = _common.find_file(d, _idx_names(lbl_stem))
            if img and lbl:
                x = _read_idx(img, 3)
                y = _read_idx(lbl, 1)
                if len(x) != len(y):
                    raise _common.DataCorruptError(f"{img} holds {len(x)} images but {lbl} holds "
                                                   f"{len(y)} labels")
                return _common.check_labels(x[..., None], y, 10, lbl)
            npz = _common.find_file(d, ["mnist.npz"]) if name == "mnist" else None
            if npz:
                return read_mnist_npz(npz, split)
            if img or lbl:
                notes.append(f"{d} has {os.path.basename(img or lbl)} but not the "
                             f"{'labels' if img else 'images'} file")
        for npz in npz_files:
            if os.path.isfile(npz):
                return read_mnist_npz(npz, split)
        return notes

    found = _scan()
    if not isinstance(found, list):
        return found
    failure = None
    target = os.path.join(sources.roots(data_dir)[0], sources.DIR_NAMES[name][0])
    if download and name in sources.DOWNLOADS and dirs:
        failure = sources.try_download(name, target)
        if not failure:
            dirs = [target] + list(dirs)
            found = _scan()
            if not isinstance(found, list):
                return found
            failure = "the downloaded files were not found afterwards"
    expected = (f"{_idx_names(img_stem)[0]} and {_idx_names(lbl_stem)[0]} (gzipped, or raw "
                f"without .gz; the spellings {_idx_names(img_stem)[3]} / "
                f"{_idx_names(lbl_stem)[3]} are accepted too)")
    if name == "mnist":
        expected += ", or Keras' mnist.npz"
    raise sources.not_found(name, split, list(dirs) + list(npz_files), expected, found,
                            sources.download_note(name, download, target, failure))


def _read_idx(path: str, ndim: int) -> np.ndarray:
    """Reads an unsigned-byte IDX file (LeCun's format: 0,0,0x08,ndim, big-endian dims)."""
    data = _common.read_bytes(path)
    header = 4 + 4 * ndim
    if len(data) < header or data[:3] != b"\x00\x00\x08" or data[3] != ndim:
        raise _common.DataCorruptError(
            f"{path} is not an unsigned-byte IDX file with {ndim} dimension(s) "
            f"(magic {data[:4].hex() if len(data) >= 4 else data.hex()!r}, expected "
            f"00000{800 + ndim})")
    dims = tuple(int(d) for d in np.frombuffer(data, ">u4", count=ndim, offset=4))
    size = int(np.prod(dims, dtype=np.int64))
    if len(data) - header != size:
        raise _common.DataCorruptError(f"{path} is truncated or has trailing data: header says "
                                       f"{dims} = {size} bytes, found {len(data) - header}")
    return np.frombuffer(data, np.uint8, offset=header).reshape(dims)


def read_mnist_npz(path: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Reads one split of Keras' mnist.npz (x_train, y_train, x_test, y_test)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            x, y = f[f"x_{split}"], f[f"y_{split}"]
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError, zlib.error) as e:
        raise _common.DataCorruptError(f"{path} is not a valid mnist.npz (x_train, y_train, "
                                       f"x_test, y_test): {type(e).__name__}: {e}") from e
    if x.dtype != np.uint8 or x.ndim != 3 or x.shape[1:] != (28, 28) or len(y) != len(x):
        raise _common.DataCorruptError(f"{path}: x_{split} must be uint8 [N, 28, 28] with N "
                                       f"labels, got {x.dtype} {x.shape} and {len(y)} labels")
    return _common.check_labels(x[..., None], y, 10, path)


def load_sample(split: str, path: str = SAMPLE_PATH) -> tuple[np.ndarray, np.ndarray]:
    """Reads one split of an embedded MNIST sample (default: the 5,000-image sample)."""
    if not os.path.isfile(path):
        raise _common.DataNotFoundError(f"the embedded MNIST sample {path} is missing "
                                        f"from the installed package; rebuild it with "
                                        f"`python tfdp/data_files/make_sample.py --mnist_dir=DIR`")
    try:
        with np.load(path, allow_pickle=False) as f:
            x, y = f[f"x_{split}"], f[f"y_{split}"]
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError, zlib.error) as e:
        raise _common.DataCorruptError(f"{path} is corrupt: {type(e).__name__}: {e}") from e
    return _common.check_labels(x[..., None], y, 10, path)


def build_mnist_sample(mnist_dir: str, out_path: str = SAMPLE_PATH, train_per_class: int = 500,
                       test_per_class: int = 100) -> dict[str, np.ndarray]:
    """Writes the embedded MNIST sample from the real MNIST files.

    The sample holds, for each digit 0..9, the first `train_per_class` training images of
    that digit (in the order of the official training file) and the first `test_per_class`
    test images of that digit; the chosen indices are stored sorted ascending, so the
    sample keeps the official file order. Saved with np.savez_compressed as uint8.

    Args:
      mnist_dir: directory with the four MNIST IDX files (gzipped or raw) or mnist.npz.
      out_path: where to write the .npz.
      train_per_class: training images per class.
      test_per_class: test images per class.

    Returns:
      The arrays written: x_train, y_train, x_test, y_test, train_indices, test_indices.

    Raises:
      ValueError: naming an argument; DataNotFoundError / DataCorruptError for the files.
    """
    _common.check_positive_int(train_per_class, "train_per_class")
    _common.check_positive_int(test_per_class, "test_per_class")
    arrays: dict[str, np.ndarray] = {}
    for split, per_class in (("train", train_per_class), ("test", test_per_class)):
        x, y = load_mnist_like("mnist", split, [os.path.abspath(mnist_dir)], download=False)
        idx = np.sort(np.concatenate([np.flatnonzero(y == c)[:per_class] for c in range(10)]))
        arrays[f"x_{split}"] = x[idx, :, :, 0]
        arrays[f"y_{split}"] = y[idx].astype(np.uint8)
        arrays[f"{split}_indices"] = idx.astype(np.int64)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    np.savez_compressed(out_path, **arrays)
    return arrays
