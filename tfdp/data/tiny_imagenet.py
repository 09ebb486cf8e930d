"""Tiny ImageNet reader for the official tiny-imagenet-200/ layout."""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from tfdp.data import _common
from tfdp.data import images
from tfdp.data import sources


def tiny_imagenet_root(directory: str) -> str | None:
    """directory or directory/tiny-imagenet-200, whichever holds wnids.txt, else None."""
    for d in (directory, os.path.join(directory, "tiny-imagenet-200")):
        if os.path.isfile(os.path.join(d, "wnids.txt")):
            return d
    return None


def read_wnids(root: str) -> list[str]:
    """The wnids of wnids.txt in file order (labels are positions in this list)."""
    path = os.path.join(root, "wnids.txt")
    try:
        with open(path, encoding="utf-8") as f:
            wnids = [line.strip() for line in f if line.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise _common.DataCorruptError(f"cannot read {path}: {e}") from e
    if not wnids or len(set(wnids)) != len(wnids):
        raise _common.DataCorruptError(f"{path} must list distinct wnids, one per line")
    return wnids


def tiny_imagenet_words(root: str, wnids: Sequence[str]) -> list[str]:
    """Class names from words.txt ('wnid<TAB>names'), falling back to the wnid itself."""
    names: dict[str, str] = {}
    path = os.path.join(root, "words.txt")
    if os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.rstrip("\n").split("\t", 1)
                if len(parts) == 2:
                    names[parts[0]] = parts[1]
    return [names.get(w, w) for w in wnids]


def load_tiny_imagenet(split: str, data_dir: str | None,
                       opts: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Loads the first K classes; train from train/<wnid>/images, test from val/."""
    dirs = sources.candidate_dirs("tiny_imagenet", data_dir)
    root = next((r for r in (tiny_imagenet_root(d) for d in dirs if os.path.isdir(d))
                 if r is not None), None)
    if root is None:
        raise sources.not_found("tiny_imagenet", split, dirs,
                                "tiny-imagenet-200/ with wnids.txt, train/<wnid>/images/*.JPEG, "
                                "val/val_annotations.txt and val/images/*.JPEG (the folder itself "
                                "or its parent)",
                                download_note=sources.download_note("tiny_imagenet", False,
                                                                    "", None))
    wnids = read_wnids(root)
    k = opts["num_classes"] or len(wnids)
    if k > len(wnids):
        raise ValueError(f"num_classes={k} exceeds the {len(wnids)} wnids in "
                         f"{os.path.join(root, 'wnids.txt')}")
    keep = {w: i for i, w in enumerate(wnids[:k])}
    if split == "train":
        per_class = []
        for w in wnids[:k]:
            d = os.path.join(root, "train", w, "images")
            if not os.path.isdir(d):
                raise _common.DataCorruptError(f"{root}: the training folder {d} is missing")
            files = images.list_images(d)
            if not files:
                raise _common.DataCorruptError(f"{d} holds no images")
            per_class.append(files)
        paths, labels = images.round_robin(per_class)
    else:
        ann = os.path.join(root, "val", "val_annotations.txt")
        if not os.path.isfile(ann):
            raise _common.DataCorruptError(f"{root}: {ann} is missing (needed for the test split, "
                                           f"which is Tiny ImageNet's labelled validation set)")
        paths, label_list = [], []
        known = set(wnids)
        with open(ann, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                parts = line.split("\t")
                if len(parts) < 2:
                    raise _common.DataCorruptError(
                        f"{ann}:{lineno}: expected 'file<TAB>wnid<TAB>...'")
                fname, wnid = parts[0].strip(), parts[1].strip()
                if wnid not in known:
                    raise _common.DataCorruptError(
                        f"{ann}:{lineno}: wnid {wnid!r} is not in wnids.txt")
                if wnid in keep:
                    paths.append(os.path.join(root, "val", "images", fname))
                    label_list.append(keep[wnid])
        labels = np.asarray(label_list, np.int64)
        if not paths:
            raise _common.DataCorruptError(f"{ann} has no images of the first {k} classes")
    return images.decode_selected(paths, labels, (64, 64, 3), opts)
