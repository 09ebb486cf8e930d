"""checks.check_trackables and checks.check_train_test_arrays (the run's start-up checks)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdp import checks


def test_trackable_objects_pass_through():
    objects = {"v": tf.Variable(1.0), "gen": tf.random.Generator.from_seed(1),
               "model": keras.Sequential([keras.layers.Dense(2)]),
               "opt": keras.optimizers.Adam(0.1), "module": tf.Module()}
    assert checks.check_trackables(objects, "build: M") == objects


@pytest.mark.parametrize("value, kind", [(np.zeros(3), "ndarray"), (1.5, "float"),
                                         ([tf.Variable(1.0)], "list")])
def test_untrackable_object_names_source_key_and_type(value, kind):
    with pytest.raises(ValueError, match=f"build: M returned 'x' of type {kind}.*resume"):
        checks.check_trackables({"ok": tf.Variable(0), "x": value}, "build: M")


def test_trackables_must_be_a_mapping():
    with pytest.raises(ValueError, match="build: M returned list"):
        checks.check_trackables([tf.Variable(0)], "build: M")


def test_train_test_arrays():
    x, y = np.zeros((4, 2, 2, 1)), np.zeros(4)
    checks.check_train_test_arrays(x, y, x[:2], y[:2], (2, 2, 1))
    with pytest.raises(ValueError, match=r"data: x_test images have shape \(3, 2, 1\)"):
        checks.check_train_test_arrays(x, y, np.zeros((2, 3, 2, 1)), y[:2], (2, 2, 1))
    with pytest.raises(ValueError, match="data: images and labels differ in number"):
        checks.check_train_test_arrays(x, y[:3], x[:2], y[:2], (2, 2, 1))
