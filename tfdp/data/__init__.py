"""Data sets: MNIST, Fashion-MNIST, CIFAR-10, Tiny ImageNet, synthetic, embedded sample; batching.

The public API:

  x, y = tfdp.data.load("mnist", "train", data_dir=None, value_range=(-1.0, 1.0))
  tfdp.data.info("cifar10").input_shape            # (32, 32, 3)
  batches = tfdp.data.fixed_batches(50000, 1851, seed=0)
  ds = tfdp.data.make_dataset(x, y, 1851, batches=batches, seed=0)
"""

from tfdp.data._common import CIFAR10_CLASSES
from tfdp.data._common import DATASETS
from tfdp.data._common import DataCorruptError
from tfdp.data._common import DataNotFoundError
from tfdp.data._common import ENV_DATA_DIR
from tfdp.data._common import FASHION_MNIST_CLASSES
from tfdp.data._common import MNIST_CLASSES
from tfdp.data._common import SPLITS
from tfdp.data._common import check_value_range
from tfdp.data._common import scale_pixels
from tfdp.data.api import DatasetInfo
from tfdp.data.api import info
from tfdp.data.api import load
from tfdp.data.api import load_uint8
from tfdp.data.batching import fixed_batches
from tfdp.data.batching import make_dataset
from tfdp.data.images import decode_images
from tfdp.data.mnist import SAMPLE_PATH
from tfdp.data.mnist import build_mnist_sample
from tfdp.data.sources import DEBIAN_FASHION_MNIST_DIR
from tfdp.data.sources import search_dirs

__all__ = [
    "CIFAR10_CLASSES", "DATASETS", "DEBIAN_FASHION_MNIST_DIR", "ENV_DATA_DIR",
    "FASHION_MNIST_CLASSES", "MNIST_CLASSES", "SAMPLE_PATH", "SPLITS", "DataCorruptError",
    "DataNotFoundError", "DatasetInfo", "build_mnist_sample", "check_value_range",
    "decode_images", "fixed_batches", "info", "load", "load_uint8", "make_dataset",
    "scale_pixels", "search_dirs",
]
