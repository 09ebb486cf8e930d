"""Rebuilds tfdp/data_files/mnist_sample.npz from the real MNIST files.

Usage: python tfdp/data_files/make_sample.py --mnist_dir=/path/to/mnist
  The main job's 20,000-image sample: add --train_per_class=2000
  --out=tfdp/data_files/mnist_sample_20k.npz
"""

from absl import app, flags

from tfdp import data

_MNIST_DIR = flags.DEFINE_string("mnist_dir", None, "Directory with the four MNIST IDX files.",
                                 required=True)
_OUT = flags.DEFINE_string("out", data.SAMPLE_PATH, "Output .npz path.")
_TRAIN_PER_CLASS = flags.DEFINE_integer("train_per_class", 500, "Training images per digit.")
_TEST_PER_CLASS = flags.DEFINE_integer("test_per_class", 100, "Test images per digit.")


def main(argv: list[str]) -> None:
    """Writes the sample and prints what it holds."""
    del argv
    arrays = data.build_mnist_sample(_MNIST_DIR.value, _OUT.value, _TRAIN_PER_CLASS.value,
                                     _TEST_PER_CLASS.value)
    for split in ("train", "test"):
        idx = arrays[f"{split}_indices"]
        print(f"{split}: {len(idx)} images, official indices {idx[0]}..{idx[-1]}")
    print(f"wrote {_OUT.value}")


if __name__ == "__main__":
    app.run(main)
