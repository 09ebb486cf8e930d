"""tfdp.reproduce.releases.compat and mnist_input_data: the stand-ins for removed TF1 modules."""

import sys

import numpy as np
import pytest

from tfdp.reproduce.releases import compat, mnist_input_data


def test_contrib_layers_without_tf_slim_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tf_slim", None)  # import tf_slim now fails
    layers = compat._contrib_layers()
    with pytest.raises(ImportError, match=r"tfdp\[releases\]"):
        layers.batch_norm  # pylint: disable=pointless-statement


def test_usage_errors_before_anything_is_installed(tmp_path):
    with pytest.raises(SystemExit, match="usage"):
        compat.main(["compat", "x", "script.py"])
    with pytest.raises(SystemExit, match="does not exist"):
        compat.main(["compat", "1", str(tmp_path / "missing.py")])


def test_next_batch_reshuffles_each_epoch_and_completes_a_crossing_batch():
    images = np.arange(10, dtype=np.float32).reshape(10, 1)
    labels = np.arange(10)
    np.random.seed(0)
    data = mnist_input_data.DataSet(images, labels)
    seen = [data.next_batch(4)[1] for _ in range(2)]
    first_epoch = np.concatenate(seen)
    assert sorted(first_epoch.tolist()) == sorted(set(first_epoch.tolist()))  # no repeats
    crossing, _ = data.next_batch(4)  # 2 left in epoch 1, then 2 from the reshuffled epoch 2
    assert len(crossing) == 4 and data.epochs_completed == 1
    leftover = set(range(10)) - set(first_epoch.tolist())
    assert set(crossing[:2, 0].astype(int).tolist()) == leftover
    with pytest.raises(ValueError, match="batch_size"):
        data.next_batch(11)


def test_read_data_sets_scales_to_unit_range_and_holds_out_validation(monkeypatch):
    monkeypatch.setenv(mnist_input_data.DATASET_ENV, "sample")
    sets = mnist_input_data.read_data_sets("ignored/", one_hot=True, validation_size=1000)
    assert sets.train.images.shape == (4000, 784) and sets.validation.num_examples == 1000
    assert sets.test.images.dtype == np.float32
    assert 0.0 <= sets.test.images.min() and sets.test.images.max() <= 1.0
    assert sets.train.labels.shape == (4000, 10) and np.all(sets.train.labels.sum(1) == 1)
    monkeypatch.setenv(mnist_input_data.DATASET_ENV, "cifar10")
    with pytest.raises(ValueError, match="TFDP_RELEASE_MNIST"):
        mnist_input_data.read_data_sets()
