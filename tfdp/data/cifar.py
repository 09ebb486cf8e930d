"""CIFAR-10 readers: the official python pickles and image-folder trees."""

from __future__ import annotations

import os
import pickle
from typing import Any

import numpy as np

from tfdp.data import _common
from tfdp.data import images
from tfdp.data import sources


_CIFAR_PICKLES = {"train": tuple(f"data_batch_{i}" for i in range(1, 6)),
                  "test": ("test_batch",)}


class _CifarUnpickler(pickle.Unpickler):
    """Unpickler that only builds plain containers and numpy arrays (no arbitrary code)."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"): ("numpy._core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"): ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"): ("numpy", "ndarray"),
        ("numpy", "dtype"): ("numpy", "dtype"),
        ("_codecs", "encode"): ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str):
        target = self._ALLOWED.get((module, name))
        if target is None:
            raise pickle.UnpicklingError(f"unexpected object {module}.{name} in a CIFAR pickle")
        return super().find_class(*target)


def _read_cifar_pickle(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Reads one batch file of the official python release as NHWC uint8 and int64 labels."""
    try:
        with open(path, "rb") as f:
            batch = _CifarUnpickler(f, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            ImportError, IndexError, KeyError, OSError) as e:
        raise _common.DataCorruptError(f"{path} is not a readable CIFAR-10 pickle (truncated or "
                                       f"corrupt): {type(e).__name__}: {e}") from e
    if not isinstance(batch, dict):
        raise _common.DataCorruptError(f"{path}: a CIFAR-10 batch must be a dict, got "
                                       f"{type(batch)}")
    batch = {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}
    if "data" not in batch or "labels" not in batch:
        raise _common.DataCorruptError(f"{path}: a CIFAR-10 batch needs 'data' and 'labels', has "
                                       f"{sorted(batch)}")
    data = np.asarray(batch["data"])
    labels = np.asarray(batch["labels"])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072 or (
            labels.shape != (len(data),)):
        raise _common.DataCorruptError(f"{path}: 'data' must be uint8 [N, 3072] with N labels, got "
                                       f"{data.dtype} {data.shape} and labels {labels.shape}")
    # CIFAR-10 python release: each row is 1024 red, 1024 green, 1024 blue values, row-major.
    x = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return _common.check_labels(np.ascontiguousarray(x), labels, 10, path)


def _cifar_pickle_dir(directory: str) -> str | None:
    for d in (directory, os.path.join(directory, "cifar-10-batches-py")):
        if os.path.isfile(os.path.join(d, "test_batch")) or os.path.isfile(
                os.path.join(d, "data_batch_1")):
            return d
    return None


def load_cifar10(split: str, data_dir: str | None,
                 opts: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Loads a CIFAR-10 split from the pickles (preferred, lossless) or an image tree."""
    dirs = sources.candidate_dirs("cifar10", data_dir)

    def _scan():
        notes = []
        for d in dirs:
            if not os.path.isdir(d):
                continue
            pdir = _cifar_pickle_dir(d)
            if pdir is not None:
                paths = [os.path.join(pdir, f) for f in _CIFAR_PICKLES[split]]
                missing = [p for p in paths if not os.path.isfile(p)]
                if missing:
                    notes.append(f"{pdir} lacks {', '.join(os.path.basename(p) for p in missing)}")
                    continue
                parts = [_read_cifar_pickle(p) for p in paths]
                x = np.concatenate([p[0] for p in parts])
                y = np.concatenate([p[1] for p in parts])
                return _common.select_arrays(x, y, opts["num_examples"], opts["shuffle_seed"])
            tree = os.path.join(d, split)
            if os.path.isdir(tree):
                paths, labels = images.image_tree(tree, _common.CIFAR10_CLASSES)
                return images.decode_selected(paths, labels, (32, 32, 3), opts)
            if os.path.isdir(os.path.join(d, "train" if split == "test" else "test")):
                notes.append(f"{d} has no {split}/ folder")
        return notes

    found = _scan()
    if not isinstance(found, list):
        return found
    target = os.path.join(sources.roots(data_dir)[0], "cifar10")
    failure = None
    if opts["download"]:
        failure = sources.try_download("cifar10", target)
        if not failure:
            found = _scan()
            if not isinstance(found, list):
                return found
            failure = "the downloaded files were not found afterwards"
    expected = (f"{', '.join(_CIFAR_PICKLES[split])} of the official python release, in "
                f"<dir>/ or <dir>/cifar-10-batches-py/; or an image tree "
                f"{split}/<class>/*.jpg|png with the classes {' '.join(_common.CIFAR10_CLASSES)}")
    raise sources.not_found("cifar10", split, dirs, expected, found,
                            sources.download_note("cifar10", opts["download"], target, failure))
