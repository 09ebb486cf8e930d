"""Image-folder trees and parallel image decoding with PIL."""

from __future__ import annotations

import concurrent.futures
import os
from typing import Any, Sequence

import numpy as np

from tfdp.data import _common


IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".ppm", ".tif", ".tiff")


def round_robin(per_class: Sequence[Sequence[str]]) -> tuple[list[str], np.ndarray]:
    """Interleaves the classes' sorted file lists: c0[0], c1[0], ..., c0[1], c1[1], ...

    So that any prefix of the split (num_examples=N without shuffling) is class-balanced.
    """
    paths, labels = [], []
    longest = max((len(p) for p in per_class), default=0)
    for i in range(longest):
        for c, files in enumerate(per_class):
            if i < len(files):
                paths.append(files[i])
                labels.append(c)
    return paths, np.asarray(labels, np.int64)


def list_images(directory: str) -> list[str]:
    """Sorted paths of the image files in directory (hidden files skipped)."""
    return sorted(os.path.join(directory, f) for f in os.listdir(directory)
                  if f.lower().endswith(IMAGE_EXTENSIONS) and not f.startswith("."))


def image_tree(tree: str, classes: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Lists tree/<class>/* for the given classes (label = position in classes)."""
    present = {e for e in os.listdir(tree) if os.path.isdir(os.path.join(tree, e))}
    missing = [c for c in classes if c not in present]
    unknown = sorted(present - set(classes))
    if missing or unknown:
        raise _common.DataCorruptError(f"{tree}: expected one folder per class {list(classes)}; "
                                       f"missing {missing}, unexpected {unknown}")
    per_class = [list_images(os.path.join(tree, c)) for c in classes]
    empty = [c for c, files in zip(classes, per_class) if not files]
    if empty:
        raise _common.DataCorruptError(f"{tree}: no image files in the class folders {empty}")
    return round_robin(per_class)


def decode_selected(paths: Sequence[str], labels: np.ndarray, shape: tuple[int, int, int],
                    opts: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Applies num_examples / shuffle_seed to the file list, then decodes only those files."""
    sel = _common.selection(len(paths), opts["num_examples"], opts["shuffle_seed"])
    if sel is not None:
        paths = [paths[i] for i in sel]
        labels = labels[sel]
    return decode_images(paths, shape), labels.astype(np.int64)


def decode_images(paths: Sequence[str], shape: tuple[int, int, int],
                  num_threads: int | None = None) -> np.ndarray:
    """Decodes image files (JPEG, PNG, ...) with PIL into one uint8 array [N, H, W, C].

    Greyscale or palette images are converted to RGB when C == 3 (Tiny ImageNet has some
    greyscale JPEGs); C == 1 converts to greyscale.

    Args:
      paths: image files.
      shape: (H, W, C) every image must have, C in {1, 3}.
      num_threads: decoding threads (PIL releases the GIL while decoding); default
        min(8, cpu count).

    Returns:
      uint8 array of shape [len(paths), H, W, C].

    Raises:
      ValueError: naming shape.
      DataCorruptError: naming the file, for an unreadable image or one of another size.
    """
    # lazy: loads PIL; importing tfdp.data.images does not
    from PIL import Image  # pylint: disable=import-outside-toplevel

    h, w, c = shape
    if c not in (1, 3):
        raise ValueError(f"shape must end in 1 or 3 channels, got {shape}")
    mode = "RGB" if c == 3 else "L"
    out = np.empty((len(paths), h, w, c), np.uint8)

    def _decode_range(start: int, stop: int) -> None:
        for i in range(start, stop):
            path = paths[i]
            try:
                with Image.open(path) as img:
                    img = img.convert(mode) if img.mode != mode else img
                    arr = np.asarray(img, dtype=np.uint8)
            except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
                raise _common.DataCorruptError(f"cannot decode image {path}: {type(e).__name__}: "
                                               f"{e}") from e
            if arr.shape[:2] != (h, w):
                raise _common.DataCorruptError(f"image {path} is {arr.shape[1]}x{arr.shape[0]}, "
                                               f"expected {w}x{h}")
            out[i] = arr.reshape(h, w, c)

    threads = num_threads or min(8, os.cpu_count() or 1)
    chunk = max(1, -(-len(paths) // (threads * 4)))
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(_decode_range, s, min(s + chunk, len(paths)))
                   for s in range(0, len(paths), chunk)]
        for f in futures:
            f.result()
    return out
