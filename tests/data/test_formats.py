"""Loader tests on small files written in each data set's exact on-disk format."""

import gzip
import os
import pickle
import struct
import time

import numpy as np
import pytest
from PIL import Image

from tfdp import data
from tfdp.data import sources


# ----------------------------------------------------------------------------------------
# Writers for the official formats.


def _idx_bytes(arr: np.ndarray) -> bytes:
    """LeCun's IDX format: 0, 0, 0x08 (unsigned byte), ndim, big-endian uint32 dims, data."""
    arr = np.asarray(arr, np.uint8)
    return bytes([0, 0, 8, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


def _write(path: str, payload: bytes, gz: bool) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if gz:
        payload = gzip.compress(payload)
    with open(path, "wb") as f:
        f.write(payload)
    return path


def _mnist_arrays(seed: int):
    rng = np.random.default_rng(seed)
    x_tr = rng.integers(0, 256, (7, 28, 28), dtype=np.uint8)
    x_tr[0, 0, 0], x_tr[0, 0, 1] = 0, 255  # both ends of the pixel range are present
    y_tr = np.array([0, 1, 2, 3, 4, 5, 9], np.uint8)
    x_te = rng.integers(0, 256, (3, 28, 28), dtype=np.uint8)
    y_te = np.array([7, 8, 0], np.uint8)
    return x_tr, y_tr, x_te, y_te


def _write_mnist_idx(directory: str, arrays, gz: bool = True, dotted: bool = False) -> None:
    x_tr, y_tr, x_te, y_te = arrays
    for stem, arr in (("train-images-idx3-ubyte", x_tr), ("train-labels-idx1-ubyte", y_tr),
                      ("t10k-images-idx3-ubyte", x_te), ("t10k-labels-idx1-ubyte", y_te)):
        name = stem.replace("-idx", ".idx") if dotted else stem
        _write(os.path.join(directory, name + (".gz" if gz else "")), _idx_bytes(arr), gz)


def _cifar_rows(x: np.ndarray) -> np.ndarray:
    """NHWC uint8 -> the release's rows: 1024 red, 1024 green, 1024 blue values each."""
    return x.transpose(0, 3, 1, 2).reshape(len(x), 3072)


def _python2_style_pickle(obj) -> bytes:
    """Protocol-2 pickle naming numpy.core.multiarray, as the Python-2 era release files do."""
    raw = pickle.dumps(obj, protocol=2)
    return raw.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")


def _write_cifar_pickles(directory: str, seed: int, per_batch: int = 4):
    """Writes data_batch_1..5, test_batch, batches.meta; returns the NHWC arrays written."""
    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    out = {}
    for split, names in (("train", [f"data_batch_{i}" for i in range(1, 6)]),
                         ("test", ["test_batch"])):
        xs, ys = [], []
        for name in names:
            x = rng.integers(0, 256, (per_batch, 32, 32, 3), dtype=np.uint8)
            y = [int(v) for v in rng.integers(0, 10, per_batch)]
            batch = {b"batch_label": name.encode(), b"labels": y, b"data": _cifar_rows(x),
                     b"filenames": [f"img_{i}.png".encode() for i in range(per_batch)]}
            with open(os.path.join(directory, name), "wb") as f:
                f.write(_python2_style_pickle(batch))
            xs.append(x)
            ys.extend(y)
        out[split] = (np.concatenate(xs), np.asarray(ys))
    meta = {b"label_names": [c.encode() for c in data.CIFAR10_CLASSES],
            b"num_cases_per_batch": per_batch, b"num_vis": 3072}
    with open(os.path.join(directory, "batches.meta"), "wb") as f:
        f.write(_python2_style_pickle(meta))
    return out


# ----------------------------------------------------------------------------------------
# MNIST / Fashion-MNIST.


@pytest.mark.parametrize("gz,dotted", [(True, False), (False, False), (False, True),
                                       (True, True)])
def test_mnist_idx_files_all_spellings(tmp_path, gz, dotted):
    arrays = _mnist_arrays(1)
    _write_mnist_idx(str(tmp_path / "mnist"), arrays, gz=gz, dotted=dotted)
    x, y = data.load("mnist", "train", data_dir=str(tmp_path), download=False)
    assert x.shape == (7, 28, 28, 1) and x.dtype == np.float32
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, arrays[1])
    # [-1, 1]: p -> -1 + 2p/255 (exact at both ends).
    np.testing.assert_allclose(x[..., 0], -1.0 + 2.0 * arrays[0] / 255.0, rtol=0, atol=1e-7)
    assert x[0, 0, 0, 0] == -1.0 and x[0, 0, 1, 0] == 1.0
    xt, yt = data.load("mnist", "test", data_dir=str(tmp_path), download=False)
    assert xt.shape == (3, 28, 28, 1)
    np.testing.assert_array_equal(yt, arrays[3])


def test_mnist_keras_npz(tmp_path):
    x_tr, y_tr, x_te, y_te = _mnist_arrays(2)
    os.makedirs(tmp_path / "mnist")
    np.savez(tmp_path / "mnist" / "mnist.npz", x_train=x_tr, y_train=y_tr, x_test=x_te,
             y_test=y_te)
    x, y = data.load_uint8("mnist", "test", data_dir=str(tmp_path), download=False)
    np.testing.assert_array_equal(x[..., 0], x_te)
    np.testing.assert_array_equal(y, y_te)


def test_mnist_keras_npz_in_keras_cache_layout(tmp_path, monkeypatch):
    """keras.datasets.mnist caches <KERAS_HOME>/datasets/mnist.npz; the loader finds it."""
    x_tr, y_tr, x_te, y_te = _mnist_arrays(3)
    cache = tmp_path / "kh" / "datasets"
    os.makedirs(cache)
    np.savez(cache / "mnist.npz", x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te)
    monkeypatch.delenv("TFDP_DATA_DIR", raising=False)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "kh"))
    x, y = data.load_uint8("mnist", "train", download=False)
    np.testing.assert_array_equal(x[..., 0], x_tr)
    assert data.search_dirs("mnist") == [str(cache / "mnist")]


def test_fashion_mnist_dash_folder_and_env_var(tmp_path, monkeypatch):
    arrays = _mnist_arrays(4)
    _write_mnist_idx(str(tmp_path / "fashion-mnist"), arrays)
    monkeypatch.setenv("TFDP_DATA_DIR", str(tmp_path))
    x, y = data.load("fashion_mnist", "train", value_range=(0.0, 1.0), download=False)
    np.testing.assert_allclose(x[..., 0], arrays[0] / 255.0, rtol=0, atol=1e-7)
    np.testing.assert_array_equal(y, arrays[1])
    assert data.search_dirs("fashion_mnist")[:2] == [str(tmp_path / "fashion_mnist"),
                                                     str(tmp_path / "fashion-mnist")]


def test_data_dir_argument_wins_over_env(tmp_path, monkeypatch):
    _write_mnist_idx(str(tmp_path / "a" / "mnist"), _mnist_arrays(5))
    _write_mnist_idx(str(tmp_path / "b" / "mnist"), _mnist_arrays(6))
    monkeypatch.setenv("TFDP_DATA_DIR", str(tmp_path / "b"))
    xa, _ = data.load_uint8("mnist", data_dir=str(tmp_path / "a"), download=False)
    xb, _ = data.load_uint8("mnist", download=False)
    np.testing.assert_array_equal(xa[..., 0], _mnist_arrays(5)[0])
    np.testing.assert_array_equal(xb[..., 0], _mnist_arrays(6)[0])


def _corrupt_cases():
    good_img = _idx_bytes(np.zeros((7, 28, 28), np.uint8))
    bad_magic = b"\x00\x00\x0d\x03" + good_img[4:]  # type 0x0d = float, not ubyte
    truncated = good_img[:-100]
    return {
        "bad_magic": (bad_magic, False),
        "truncated_raw": (truncated, False),
        "truncated_gzip": (gzip.compress(good_img)[:-40], "raw"),
        "not_gzip_named_gz": (good_img, "plain_gz"),
    }


@pytest.mark.parametrize("case", sorted(_corrupt_cases()))
def test_corrupt_idx_image_file(tmp_path, case):
    payload, mode = _corrupt_cases()[case]
    d = tmp_path / "mnist"
    _write_mnist_idx(str(d), _mnist_arrays(7), gz=True)
    target = d / "train-images-idx3-ubyte.gz"
    if mode is False:
        os.remove(target)
        target = d / "train-images-idx3-ubyte"
    with open(target, "wb") as f:
        f.write(payload)
    with pytest.raises(data.DataCorruptError, match="train-images-idx3-ubyte"):
        data.load("mnist", "train", data_dir=str(tmp_path), download=False)


def test_idx_label_count_mismatch_and_bad_label(tmp_path):
    d = tmp_path / "mnist"
    _write_mnist_idx(str(d), _mnist_arrays(8))
    _write(str(d / "train-labels-idx1-ubyte.gz"), _idx_bytes(np.zeros(6, np.uint8)), True)
    with pytest.raises(data.DataCorruptError, match="7 images but .* 6 labels"):
        data.load("mnist", data_dir=str(tmp_path), download=False)
    _write(str(d / "train-labels-idx1-ubyte.gz"), _idx_bytes(np.full(7, 10, np.uint8)), True)
    with pytest.raises(data.DataCorruptError, match="train-labels-idx1-ubyte.gz has labels"):
        data.load("mnist", data_dir=str(tmp_path), download=False)


def test_corrupt_npz(tmp_path):
    os.makedirs(tmp_path / "mnist")
    with open(tmp_path / "mnist" / "mnist.npz", "wb") as f:
        f.write(b"PK\x03\x04 definitely not a zip archive")
    with pytest.raises(data.DataCorruptError, match="mnist.npz"):
        data.load("mnist", data_dir=str(tmp_path), download=False)


# ----------------------------------------------------------------------------------------
# Missing files.


def test_missing_directory_clear_error(tmp_path):
    with pytest.raises(data.DataNotFoundError) as err:
        data.load("mnist", "train", data_dir=str(tmp_path / "nowhere"), download=False)
    msg = str(err.value)
    assert isinstance(err.value, FileNotFoundError)
    for needle in ("'mnist'", str(tmp_path / "nowhere" / "mnist"),
                   str(tmp_path / "nowhere" / "mnist.npz"), "train-images-idx3-ubyte.gz",
                   "train-labels-idx1-ubyte.gz", "mnist.npz", "TFDP_DATA_DIR", "--data_dir",
                   "download=False"):
        assert needle in msg, needle


def test_missing_labels_file_is_reported(tmp_path):
    d = tmp_path / "mnist"
    _write_mnist_idx(str(d), _mnist_arrays(9))
    os.remove(d / "t10k-labels-idx1-ubyte.gz")
    with pytest.raises(data.DataNotFoundError, match="t10k-images-idx3-ubyte.gz but not the "
                                                     "labels file"):
        data.load("mnist", "test", data_dir=str(tmp_path), download=False)


def test_fashion_mnist_error_names_debian_package(tmp_path):
    with pytest.raises(data.DataNotFoundError) as err:
        data.load("fashion_mnist", data_dir=str(tmp_path), download=False)
    msg = str(err.value)
    assert "dataset-fashion-mnist" in msg and data.DEBIAN_FASHION_MNIST_DIR in msg
    assert str(tmp_path / "fashion_mnist") in msg and str(tmp_path / "fashion-mnist") in msg


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist", "cifar10"])
def test_failed_download_becomes_not_found_quickly(tmp_path, monkeypatch, name):
    # Port 9 (discard) on the loopback interface is closed: the connection is refused at once,
    # exactly like an offline machine but without depending on the real network.
    files = [(f, "http://127.0.0.1:9/" + f, h) for f, _, h in sources.DOWNLOADS[name]]
    monkeypatch.setitem(sources.DOWNLOADS, name, files)
    start = time.monotonic()
    with pytest.raises(data.DataNotFoundError) as err:
        data.load(name, "test", data_dir=str(tmp_path), download=True)
    assert time.monotonic() - start < 10.0
    msg = str(err.value)
    assert "Download through Keras" in msg and "failed" in msg and "refused" in msg.lower()
    assert str(tmp_path) in msg


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist", "cifar10"])
def test_no_download_unless_asked(tmp_path, monkeypatch, name):
    # Issue 40: a missing data set is reported, never fetched, unless download=True.
    def no_network(*args):
        raise AssertionError(f"download attempted: {args}")

    monkeypatch.setattr(sources, "try_download", no_network)
    with pytest.raises(data.DataNotFoundError, match=r"Download not attempted"):
        data.load(name, "test", data_dir=str(tmp_path))


def test_datasets_without_download_say_so(tmp_path):
    with pytest.raises(data.DataNotFoundError, match="cannot be downloaded automatically"):
        data.load("tiny_imagenet", data_dir=str(tmp_path))


# ----------------------------------------------------------------------------------------
# CIFAR-10.


@pytest.mark.parametrize("layout", ["cifar10/cifar-10-batches-py", "cifar10",
                                    "cifar-10-batches-py"])
def test_cifar10_official_pickles(tmp_path, layout):
    written = _write_cifar_pickles(str(tmp_path / layout), seed=10)
    for split in ("train", "test"):
        x, y = data.load_uint8("cifar10", split, data_dir=str(tmp_path), download=False)
        np.testing.assert_array_equal(x, written[split][0])
        np.testing.assert_array_equal(y, written[split][1])
        assert x.shape[1:] == (32, 32, 3) and y.dtype == np.int64
    assert len(x) == 4  # test_batch only


def test_cifar10_pickle_channel_layout(tmp_path):
    """A pure-red image must stay red: rows are R plane, then G, then B (row-major)."""
    d = tmp_path / "cifar10"
    written = _write_cifar_pickles(str(d), seed=11, per_batch=1)
    red = np.zeros((1, 32, 32, 3), np.uint8)
    red[..., 0] = 255
    red[0, 0, 1, 2] = 7  # one blue value at row 0, column 1
    batch = {b"labels": [3], b"data": _cifar_rows(red), b"batch_label": b"t",
             b"filenames": [b"r.png"]}
    with open(d / "test_batch", "wb") as f:
        f.write(_python2_style_pickle(batch))
    assert _cifar_rows(red)[0, 2048 + 1] == 7  # blue plane, index 0*32 + 1
    x, y = data.load("cifar10", "test", data_dir=str(tmp_path), value_range=(0, 1),
                     download=False)
    assert y.tolist() == [3]
    assert np.all(x[0, ..., 0] == 1.0) and x[0, 0, 1, 2] == np.float32(7 / 255)
    assert written["train"][0].shape == (5, 32, 32, 3)


def test_cifar10_truncated_pickle(tmp_path):
    d = tmp_path / "cifar10"
    _write_cifar_pickles(str(d), seed=12)
    raw = open(d / "data_batch_3", "rb").read()
    with open(d / "data_batch_3", "wb") as f:
        f.write(raw[: len(raw) // 2])
    with pytest.raises(data.DataCorruptError, match="data_batch_3"):
        data.load("cifar10", "train", data_dir=str(tmp_path), download=False)
    # the test split does not read data_batch_3
    assert len(data.load("cifar10", "test", data_dir=str(tmp_path), download=False)[0]) == 4


def test_cifar10_pickle_with_code_is_refused(tmp_path):
    d = tmp_path / "cifar10"
    _write_cifar_pickles(str(d), seed=13)
    marker = tmp_path / "executed"

    class _Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    with open(d / "test_batch", "wb") as f:
        pickle.dump({b"data": _Evil(), b"labels": []}, f, protocol=2)
    with pytest.raises(data.DataCorruptError, match="test_batch"):
        data.load("cifar10", "test", data_dir=str(tmp_path), download=False)
    assert not marker.exists()


def test_cifar10_missing_batch_file(tmp_path):
    d = tmp_path / "cifar10"
    _write_cifar_pickles(str(d), seed=14)
    os.remove(d / "data_batch_5")
    with pytest.raises(data.DataNotFoundError, match="lacks data_batch_5"):
        data.load("cifar10", "train", data_dir=str(tmp_path), download=False)


def _write_image_tree(root, split: str, per_class: int, seed: int, ext: str = ".png",
                      classes=data.CIFAR10_CLASSES, size=(32, 32)):
    rng = np.random.default_rng(seed)
    images = {}
    for c in classes:
        os.makedirs(root / split / c, exist_ok=True)
        for i in range(per_class):
            img = rng.integers(0, 256, size + (3,), dtype=np.uint8)
            Image.fromarray(img).save(root / split / c / f"{i:04d}{ext}")
            images[(c, i)] = img
    return images


def test_cifar10_image_tree_exact_pixels_and_order(tmp_path):
    images = _write_image_tree(tmp_path / "cifar10", "test", per_class=2, seed=15)
    x, y = data.load_uint8("cifar10", "test", data_dir=str(tmp_path), download=False)
    assert x.shape == (20, 32, 32, 3)
    # Classes interleaved in CIFAR-10 label order, files sorted within a class.
    assert y.tolist() == list(range(10)) * 2
    for k in range(20):
        c, i = data.CIFAR10_CLASSES[k % 10], k // 10
        np.testing.assert_array_equal(x[k], images[(c, i)])
    # The prefix of the split is class-balanced.
    _, y10 = data.load_uint8("cifar10", "test", data_dir=str(tmp_path), download=False,
                             num_examples=10)
    assert sorted(y10.tolist()) == list(range(10))


def test_cifar10_image_tree_jpeg_greyscale_converted(tmp_path):
    _write_image_tree(tmp_path / "cifar10", "train", per_class=1, seed=16, ext=".jpg")
    grey = Image.fromarray(np.full((32, 32), 200, np.uint8), mode="L")
    grey.save(tmp_path / "cifar10" / "train" / "cat" / "0001.jpg", quality=100)
    x, y = data.load_uint8("cifar10", "train", data_dir=str(tmp_path), download=False)
    assert x.shape == (11, 32, 32, 3)
    k = int(np.flatnonzero(y == data.CIFAR10_CLASSES.index("cat"))[1])
    # A uniform grey JPEG at quality 100 decodes to 200 +- 1 in all three channels.
    assert np.abs(x[k].astype(int) - 200).max() <= 1


def test_cifar10_image_tree_errors(tmp_path):
    root = tmp_path / "cifar10"
    _write_image_tree(root, "test", per_class=1, seed=17)
    with open(root / "test" / "dog" / "0000.png", "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n garbage")
    with pytest.raises(data.DataCorruptError, match="dog/0000.png"):
        data.load("cifar10", "test", data_dir=str(tmp_path), download=False)
    Image.fromarray(np.zeros((30, 32, 3), np.uint8)).save(root / "test" / "dog" / "0000.png")
    with pytest.raises(data.DataCorruptError, match="32x30, expected 32x32"):
        data.load("cifar10", "test", data_dir=str(tmp_path), download=False)
    os.rename(root / "test" / "dog", root / "test" / "doggo")
    with pytest.raises(data.DataCorruptError, match=r"missing \['dog'\], unexpected \['doggo'\]"):
        data.load("cifar10", "test", data_dir=str(tmp_path), download=False)


def test_cifar10_tree_without_requested_split(tmp_path):
    _write_image_tree(tmp_path / "cifar10", "test", per_class=1, seed=18)
    with pytest.raises(data.DataNotFoundError, match="has no train/ folder"):
        data.load("cifar10", "train", data_dir=str(tmp_path), download=False)


# ----------------------------------------------------------------------------------------
# Tiny ImageNet.

_WNIDS = ["n01443537", "n01629819", "n01641577", "n01644900"]
_WORDS = {"n01443537": "goldfish, Carassius auratus", "n01629819": "European fire salamander",
          "n01641577": "bullfrog", "n01644900": "tailed frog"}


def _write_tiny_imagenet(root, train_per_class: int = 3, val_per_class: int = 2):
    """The official layout; each image is one flat colour (class c, image i) for checking."""
    os.makedirs(root)
    with open(root / "wnids.txt", "w") as f:
        f.write("\n".join(_WNIDS) + "\n")
    with open(root / "words.txt", "w") as f:
        f.writelines(f"{w}\t{n}\n" for w, n in _WORDS.items())
        f.write("n99999999\tunused class\n")

    def colour(c, i, offset):
        return (40 * c + 10, 20 * i + offset, 128)

    for c, w in enumerate(_WNIDS):
        d = root / "train" / w / "images"
        os.makedirs(d)
        with open(root / "train" / w / f"{w}_boxes.txt", "w") as f:
            for i in range(train_per_class):
                f.write(f"{w}_{i}.JPEG\t0\t0\t63\t63\n")
        for i in range(train_per_class):
            Image.new("RGB", (64, 64), colour(c, i, 0)).save(d / f"{w}_{i}.JPEG", "JPEG",
                                                             quality=100)
    os.makedirs(root / "val" / "images")
    lines, k = [], 0
    for i in range(val_per_class):
        for c, w in reversed(list(enumerate(_WNIDS))):  # annotation order mixes classes
            name = f"val_{k}.JPEG"
            img = Image.new("RGB", (64, 64), colour(c, i, 100))
            if k == 1:
                img = img.convert("L")  # Tiny ImageNet has some greyscale JPEGs
            img.save(root / "val" / "images" / name, "JPEG", quality=100)
            lines.append(f"{name}\t{w}\t0\t0\t63\t63\n")
            k += 1
    with open(root / "val" / "val_annotations.txt", "w") as f:
        f.writelines(lines)
    os.makedirs(root / "test" / "images")  # unlabelled official test set: never read


@pytest.mark.parametrize("layout", ["tiny_imagenet/tiny-imagenet-200", "tiny_imagenet",
                                    "tiny-imagenet-200"])
def test_tiny_imagenet_first_k_classes(tmp_path, layout):
    _write_tiny_imagenet(tmp_path / layout)
    x, y = data.load_uint8("tiny_imagenet", "train", data_dir=str(tmp_path), num_classes=2)
    assert x.shape == (6, 64, 64, 3)
    assert y.tolist() == [0, 1, 0, 1, 0, 1]
    # Flat colours survive JPEG at quality 100 to within 2 levels.
    for k, (c, i) in enumerate([(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]):
        assert np.abs(x[k].astype(int) - [40 * c + 10, 20 * i, 128]).max() <= 2
    xt, yt = data.load("tiny_imagenet", "test", data_dir=str(tmp_path), num_classes=2)
    # val_annotations order: per i, classes 3,2,1,0; keep classes 1, 0.
    assert yt.tolist() == [1, 0, 1, 0] and xt.shape == (4, 64, 64, 3)
    assert xt.min() >= -1.0 and xt.max() <= 1.0
    xall, yall = data.load_uint8("tiny_imagenet", "test", data_dir=str(tmp_path))
    assert yall.tolist() == [3, 2, 1, 0] * 2
    assert np.ptp(xall[1].astype(int), axis=-1).max() == 0  # greyscale -> equal channels
    inf = data.info("tiny_imagenet", data_dir=str(tmp_path), num_classes=3)
    assert inf.num_classes == 3 and inf.input_shape == (64, 64, 3)
    assert inf.class_names == ("goldfish, Carassius auratus", "European fire salamander",
                               "bullfrog")


def test_tiny_imagenet_errors(tmp_path):
    root = tmp_path / "tiny_imagenet"
    _write_tiny_imagenet(root)
    with pytest.raises(ValueError, match="num_classes=5 exceeds the 4 wnids"):
        data.load("tiny_imagenet", data_dir=str(tmp_path), num_classes=5)
    os.rename(root / "train" / _WNIDS[1], root / "train" / "moved")
    with pytest.raises(data.DataCorruptError, match=_WNIDS[1]):
        data.load("tiny_imagenet", data_dir=str(tmp_path), num_classes=2)
    # The first class alone is still complete.
    assert len(data.load("tiny_imagenet", data_dir=str(tmp_path), num_classes=1)[0]) == 3
    with open(root / "val" / "images" / "val_0.JPEG", "wb") as f:
        f.write(b"\xff\xd8\xff truncated jpeg")
    with pytest.raises(data.DataCorruptError, match="val_0.JPEG"):
        data.load("tiny_imagenet", "test", data_dir=str(tmp_path))
    os.remove(root / "val" / "val_annotations.txt")
    with pytest.raises(data.DataCorruptError, match="val_annotations.txt"):
        data.load("tiny_imagenet", "test", data_dir=str(tmp_path))


# ----------------------------------------------------------------------------------------
# Downloads through Keras, from a local HTTP server (no outside network needed).


@pytest.fixture
def http_dir(tmp_path):
    """Serves a directory over HTTP on the loopback interface; yields (dir, base URL)."""
    import functools
    import http.server
    import threading

    served = tmp_path / "served"
    os.makedirs(served)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def _sha256(path) -> str:
    import hashlib

    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_download_cifar10_archive_is_fetched_checked_and_extracted(tmp_path, http_dir,
                                                                   monkeypatch):
    import tarfile

    served, base = http_dir
    written = _write_cifar_pickles(str(tmp_path / "build" / "cifar-10-batches-py"), seed=20)
    archive = served / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        t.add(tmp_path / "build" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    monkeypatch.setitem(sources.DOWNLOADS, "cifar10", [
        ("cifar-10-python.tar.gz", base + "cifar-10-python.tar.gz", _sha256(archive))])
    root = tmp_path / "root"
    x, y = data.load_uint8("cifar10", "test", data_dir=str(root), download=True)
    np.testing.assert_array_equal(x, written["test"][0])
    np.testing.assert_array_equal(y, written["test"][1])
    assert (root / "cifar10" / "cifar-10-batches-py" / "data_batch_5").is_file()
    assert not (root / "cifar10" / "cifar-10-python.tar.gz").exists()
    # The second call reads the extracted files: the server is no longer needed.
    monkeypatch.setitem(sources.DOWNLOADS, "cifar10", [])
    assert len(data.load_uint8("cifar10", "train", data_dir=str(root))[0]) == 20


def test_download_mnist_npz_with_bad_hash_is_refused(tmp_path, http_dir, monkeypatch):
    served, base = http_dir
    x_tr, y_tr, x_te, y_te = _mnist_arrays(21)
    np.savez(served / "mnist.npz", x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te)
    monkeypatch.setitem(sources.DOWNLOADS, "mnist",
                        [("mnist.npz", base + "mnist.npz", "0" * 64)])
    with pytest.raises(data.DataNotFoundError, match="hash"):
        data.load("mnist", data_dir=str(tmp_path / "root"), download=True)
    assert not (tmp_path / "root" / "mnist" / "mnist.npz").exists()  # not left to be read
    monkeypatch.setitem(sources.DOWNLOADS, "mnist",
                        [("mnist.npz", base + "mnist.npz", _sha256(served / "mnist.npz"))])
    x, y = data.load_uint8("mnist", "test", data_dir=str(tmp_path / "root"), download=True)
    np.testing.assert_array_equal(x[..., 0], x_te)
    assert (tmp_path / "root" / "mnist" / "mnist.npz").is_file()
