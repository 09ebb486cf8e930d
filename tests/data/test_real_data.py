"""Loaders on the real MNIST (gzipped IDX) and CIFAR-10 (JPEG tree) files."""

import numpy as np
import pytest

from tfdp import data

MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


def test_mnist_train_real(real_data_dir):
    x, y = data.load("mnist", "train", data_dir=real_data_dir, download=False)
    assert x.shape == (60000, 28, 28, 1) and x.dtype == np.float32 and y.dtype == np.int64
    assert x.min() == -1.0 and x.max() == 1.0
    assert np.bincount(y).tolist() == MNIST_TRAIN_COUNTS
    # Mean pixel of MNIST train is 0.1307 on [0, 1] -> -1 + 2 * 0.1307 = -0.7386 on [-1, 1].
    assert abs(float(x.mean(dtype=np.float64)) - (-1 + 2 * 0.13066)) < 1e-4


def test_mnist_test_real_and_sample_matches(real_data_dir):
    x, y = data.load_uint8("mnist", "test", data_dir=real_data_dir, download=False)
    assert x.shape == (10000, 28, 28, 1)
    assert np.bincount(y).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    # The embedded sample holds exactly the real images at its recorded indices.
    with np.load(data.SAMPLE_PATH) as f:
        idx_te, idx_tr = f["test_indices"], f["train_indices"]
        np.testing.assert_array_equal(f["x_test"], x[idx_te, ..., 0])
        np.testing.assert_array_equal(f["y_test"], y[idx_te])
        xtr, ytr = data.load_uint8("mnist", "train", data_dir=real_data_dir, download=False)
        np.testing.assert_array_equal(f["x_train"], xtr[idx_tr, ..., 0])
        np.testing.assert_array_equal(f["y_train"], ytr[idx_tr])
    # ... and they are the first 100 test / 500 train images of each digit.
    for c in range(10):
        np.testing.assert_array_equal(idx_te[y[idx_te] == c], np.flatnonzero(y == c)[:100])
        np.testing.assert_array_equal(idx_tr[ytr[idx_tr] == c], np.flatnonzero(ytr == c)[:500])


def test_cifar10_test_real_jpeg_tree(real_data_dir):
    x, y = data.load("cifar10", "test", data_dir=real_data_dir, download=False)
    assert x.shape == (10000, 32, 32, 3) and x.dtype == np.float32
    assert np.bincount(y).tolist() == [1000] * 10
    assert x.min() == -1.0 and x.max() == 1.0
    # Natural images: every channel uses most of the range and the images differ.
    assert x.std() > 0.3 and not np.array_equal(x[0], x[1])


@pytest.mark.slow
def test_cifar10_train_real_jpeg_tree(real_data_dir):
    x, y = data.load_uint8("cifar10", "train", data_dir=real_data_dir, download=False)
    assert x.shape == (50000, 32, 32, 3)
    assert np.bincount(y).tolist() == [5000] * 10
