"""Argument checks, scaling, synthetic data, the embedded sample, batching and tf.data."""

import os

import numpy as np
import pytest

from tfdp import data


# ----------------------------------------------------------------------------------------
# Argument checks.


@pytest.mark.parametrize("bad", [(1.0, 1.0), (1.0, 0.0), (float("nan"), 1.0),
                                 (0.0, float("inf")), (0.0,), (0.0, 1.0, 2.0), "ab", 3, None])
def test_value_range_rejected(bad):
    with pytest.raises(ValueError, match="value_range"):
        data.load("synthetic", value_range=bad)
    with pytest.raises(ValueError, match="value_range"):
        data.scale_pixels(np.zeros(3, np.uint8), bad)


def test_bad_name_split_and_options():
    with pytest.raises(ValueError, match="name"):
        data.load("imagenet")
    with pytest.raises(ValueError, match="split"):
        data.load("sample", "validation")
    with pytest.raises(ValueError, match="num_classes is not an option of data set 'mnist'"):
        data.load("mnist", num_classes=3)
    with pytest.raises(ValueError, match="num_examples"):
        data.load("sample", num_examples=0)
    with pytest.raises(ValueError, match="num_examples=1001 exceeds the 1000"):
        data.load("sample", "test", num_examples=1001)
    with pytest.raises(ValueError, match="shuffle_seed"):
        data.load("sample", shuffle_seed=-1)
    with pytest.raises(ValueError, match="shape"):
        data.load("synthetic", shape=(28, 0, 1))
    with pytest.raises(ValueError, match="download"):
        data.load("mnist", download="yes")
    with pytest.raises(ValueError, match="num_classes"):
        data.info("tiny_imagenet", num_classes=201)


def test_bad_input_fails_before_any_file_access(tmp_path):
    # A bad value_range is reported even though the data directory does not exist.
    with pytest.raises(ValueError, match="value_range"):
        data.load("mnist", data_dir=str(tmp_path / "missing"), value_range=(2, 1))


def test_datasets_and_info():
    assert data.DATASETS == ("mnist", "fashion_mnist", "cifar10", "tiny_imagenet",
                             "synthetic", "sample", "sample_20k")
    assert data.info("mnist").input_shape == (28, 28, 1)
    assert data.info("cifar10").class_names[0] == "airplane"
    assert data.info("cifar10").class_names[9] == "truck"
    assert data.info("fashion_mnist").class_names[9] == "Ankle boot"
    assert data.info("sample").split_sizes == {"train": 5000, "test": 1000}
    assert data.info("sample_20k").split_sizes == {"train": 20000, "test": 1000}
    inf = data.info("synthetic", shape=(5,), num_classes=3, num_examples=12)
    assert (inf.input_shape, inf.num_classes, inf.split_sizes["test"]) == ((5,), 3, 12)
    ti = data.info("tiny_imagenet", num_classes=30)
    assert (ti.input_shape, ti.num_classes, ti.split_sizes) == (
        (64, 64, 3), 30, {"train": 15000, "test": 1500})


# ----------------------------------------------------------------------------------------
# Scaling.


def test_scale_exact_ends_and_linear():
    p = np.arange(256, dtype=np.uint8)
    for low, high in [(-1.0, 1.0), (0.0, 1.0), (-0.5, 0.7), (0.1, 0.3)]:
        x = data.scale_pixels(p, (low, high))
        assert x.dtype == np.float32
        assert x[0] == np.float32(low) and x[255] == np.float32(high)
        np.testing.assert_allclose(x, low + (high - low) * p / 255.0, rtol=0, atol=1e-6)
        assert np.all(np.diff(x) > 0)
    with pytest.raises(ValueError, match="x must be uint8"):
        data.scale_pixels(np.zeros(3, np.float32))


# ----------------------------------------------------------------------------------------
# Synthetic.


def test_synthetic_deterministic_any_shape():
    x1, y1 = data.load("synthetic", shape=(6, 5, 2), num_classes=4, num_examples=40, seed=3)
    x2, y2 = data.load("synthetic", shape=(6, 5, 2), num_classes=4, num_examples=40, seed=3)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(y1, y2)
    assert x1.shape == (40, 6, 5, 2) and x1.dtype == np.float32 and y1.dtype == np.int64
    assert np.bincount(y1).tolist() == [10, 10, 10, 10]  # balanced labels
    assert x1.min() >= -1.0 and x1.max() <= 1.0
    x3, _ = data.load("synthetic", shape=(6, 5, 2), num_classes=4, num_examples=40, seed=4)
    assert not np.array_equal(x1, x3)
    xt, _ = data.load("synthetic", "test", shape=(6, 5, 2), num_classes=4, num_examples=40,
                      seed=3)
    assert not np.array_equal(x1, xt)
    xv, yv = data.load("synthetic", shape=(7,), num_classes=2)
    assert xv.shape == (1024, 7) and set(yv.tolist()) == {0, 1}
    assert data.load("synthetic", "test")[0].shape == (256, 28, 28, 1)


def test_synthetic_is_learnable():
    # Nearest class mean (estimated on train) classifies the test split far above chance,
    # so trainers' smoke tests on synthetic data can check that learning happens.
    x, y = data.load("synthetic", shape=(8, 8, 1), num_classes=5, num_examples=500, seed=0)
    xt, yt = data.load("synthetic", "test", shape=(8, 8, 1), num_classes=5, num_examples=500,
                       seed=0)
    means = np.stack([x[y == c].mean(0) for c in range(5)])
    pred = np.argmin(((xt[:, None] - means[None]) ** 2).sum((2, 3, 4)), axis=1)
    assert (pred == yt).mean() > 0.9


# ----------------------------------------------------------------------------------------
# The embedded sample.


def test_sample_contents():
    assert os.path.getsize(data.SAMPLE_PATH) < 3_000_000
    x, y = data.load("sample")
    assert x.shape == (5000, 28, 28, 1) and x.dtype == np.float32
    assert np.bincount(y).tolist() == [500] * 10
    assert x.min() == -1.0 and x.max() == 1.0
    xt, yt = data.load("sample", "test", value_range=(0.0, 1.0))
    assert xt.shape == (1000, 28, 28, 1) and np.bincount(yt).tolist() == [100] * 10
    # MNIST digits are mostly background: mean pixel ~0.13 (0.1307 over the full train set).
    assert 0.10 < xt.mean() < 0.16
    with np.load(data.SAMPLE_PATH) as f:
        assert f["train_indices"].tolist() == sorted(set(f["train_indices"].tolist()))
        assert len(f["test_indices"]) == 1000


def test_num_examples_and_seeded_shuffle():
    x_all, y_all = data.load_uint8("sample", "test")
    x5, y5 = data.load_uint8("sample", "test", num_examples=5)
    np.testing.assert_array_equal(x5, x_all[:5])
    xs, ys = data.load_uint8("sample", "test", num_examples=5, shuffle_seed=1)
    perm = np.random.default_rng(1).permutation(1000)[:5]
    np.testing.assert_array_equal(xs, x_all[perm])
    np.testing.assert_array_equal(ys, y_all[perm])
    xp, _ = data.load_uint8("sample", "test", shuffle_seed=1)
    assert len(xp) == 1000 and not np.array_equal(xp, x_all)


# ----------------------------------------------------------------------------------------
# Fixed batches.


def test_fixed_batches_stobatch_cifar_case():
    # StoBatch CIFAR-10: N = 50,000, m = 1,851 -> floor(N/m) = 27 batches, 23 examples dropped.
    b = data.fixed_batches(50000, 1851, seed=0)
    assert b.shape == (27, 1851) and b.dtype == np.int64
    assert len(np.unique(b)) == 27 * 1851  # disjoint
    assert b.min() >= 0 and b.max() < 50000
    np.testing.assert_array_equal(b, data.fixed_batches(50000, 1851, seed=0))
    assert not np.array_equal(b, data.fixed_batches(50000, 1851, seed=1))
    np.testing.assert_array_equal(
        b.reshape(-1), np.random.default_rng(0).permutation(50000)[:27 * 1851])


def test_fixed_batches_sequential_and_errors():
    b = data.fixed_batches(10, 3, seed=None, shuffle=False)
    assert b.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    g = data.fixed_batches(10, 5, seed=np.random.default_rng(7))
    assert sorted(g.reshape(-1).tolist()) == list(range(10))
    with pytest.raises(ValueError, match="batch_size"):
        data.fixed_batches(10, 11, seed=0)
    with pytest.raises(ValueError, match="batch_size"):
        data.fixed_batches(10, 0, seed=0)
    with pytest.raises(ValueError, match="num_examples"):
        data.fixed_batches(-1, 2, seed=0)
    with pytest.raises(ValueError, match="seed"):
        data.fixed_batches(10, 2, seed=-3)


# ----------------------------------------------------------------------------------------
# tf.data.


def _epochs(ds, num_batches):
    out = []
    for xb, yb in ds.take(num_batches):
        out.append((xb.numpy(), yb.numpy()))
    return out


def test_make_dataset_covers_each_example_once_per_epoch():
    x = np.arange(10, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
    y = np.arange(10, dtype=np.int64)
    batches = _epochs(data.make_dataset(x, y, 4, seed=3), 10)
    assert [len(b[1]) for b in batches] == [4, 4, 2]
    ys = np.concatenate([b[1] for b in batches])
    assert sorted(ys.tolist()) == list(range(10)) and ys.tolist() != list(range(10))
    for xb, yb in batches:  # x and y stay paired
        np.testing.assert_array_equal(xb[:, 0], yb.astype(np.float32))
    again = _epochs(data.make_dataset(x, y, 4, seed=3), 10)
    assert [b[1].tolist() for b in again] == [b[1].tolist() for b in batches]
    dropped = _epochs(data.make_dataset(x, y, 4, shuffle=False, drop_remainder=True), 10)
    assert [b[1].tolist() for b in dropped] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    rep = _epochs(data.make_dataset(x, y, 5, seed=1, repeat=True), 6)
    epoch1 = np.concatenate([b[1] for b in rep[:2]])
    epoch2 = np.concatenate([b[1] for b in rep[2:4]])
    assert sorted(epoch1.tolist()) == sorted(epoch2.tolist()) == list(range(10))
    assert epoch1.tolist() != epoch2.tolist()  # reshuffled between epochs


def test_make_dataset_fixed_batches():
    x = np.arange(20, dtype=np.float32)[:, None]
    y = np.arange(20, dtype=np.int64)
    fixed = data.fixed_batches(20, 6, seed=5)  # 3 batches, 2 examples unused
    ds = data.make_dataset(x, y, 6, batches=fixed, seed=2, repeat=True)
    got = _epochs(ds, 9)
    want = sorted(tuple(r) for r in fixed.tolist())
    orders = []
    for e in range(3):
        epoch = [tuple(b[1].tolist()) for b in got[3 * e:3 * e + 3]]
        assert sorted(epoch) == want  # exactly the fixed batches, each once, every epoch
        orders.append(epoch)
    assert len(set(map(tuple, orders))) > 1  # their order is reshuffled
    unshuffled = _epochs(data.make_dataset(x, y, 6, batches=fixed, shuffle=False), 5)
    assert [b[1].tolist() for b in unshuffled] == fixed.tolist()
    with pytest.raises(ValueError, match="batch_size must equal"):
        data.make_dataset(x, y, 5, batches=fixed)
    with pytest.raises(ValueError, match="batches must hold indices"):
        data.make_dataset(x[:10], y[:10], 6, batches=fixed)
    with pytest.raises(ValueError, match="same first dimension"):
        data.make_dataset(x, y[:5], 6)


def test_make_dataset_distributes_over_two_replicas():
    import tensorflow as tf

    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    assert len(devices) == 2, "tests/conftest.py configures two logical CPUs"
    strategy = tf.distribute.MirroredStrategy(devices)
    x = np.arange(16, dtype=np.float32)[:, None]
    y = np.arange(16, dtype=np.int64)
    fixed = data.fixed_batches(16, 8, seed=0)
    dist = strategy.experimental_distribute_dataset(
        data.make_dataset(x, y, 8, batches=fixed, seed=0))
    seen = []
    for _, yb in dist:
        parts = strategy.experimental_local_results(yb)
        assert [len(p) for p in parts] == [4, 4]
        seen.append(sorted(np.concatenate([p.numpy() for p in parts]).tolist()))
    assert sorted(seen) == sorted(sorted(r) for r in fixed.tolist())
