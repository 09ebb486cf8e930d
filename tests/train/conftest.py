"""Shared fixtures of the trainer tests."""

import pytest

from tfdp import data
from tfdp.train import loop


@pytest.fixture(scope="session")
def synthetic_data():
    """Returns make(shape, num_classes, num_train, num_test, seed) -> loop.Data (synthetic)."""
    def make(shape, num_classes, num_train, num_test, seed):
        x_train, y_train = data.load("synthetic", "train", shape=shape, num_classes=num_classes,
                                     num_examples=num_train, seed=seed)
        x_test, y_test = data.load("synthetic", "test", shape=shape, num_classes=num_classes,
                                   num_examples=num_test, seed=seed)
        return loop.Data(x_train, y_train, x_test, y_test, shape, num_classes)
    return make
