"""Runs a TF1-era script on TensorFlow 2: `tensorflow` is `tensorflow.compat.v1` (v2 behaviour
disabled), plus stand-ins for modules TF 2 removed.

  python -m tfdp.reproduce.releases.compat SEED SCRIPT [ARGS...]

The script runs as `__main__` from its own directory, unedited by this module. Stand-ins:
`tensorflow.examples.tutorials.mnist.input_data` (tfdp's MNIST files, see
`mnist_input_data`) and `tf.contrib.layers` (from the `tf_slim` package, installed through the
optional `releases` extra, never by default). NumPy's, Python's and the graph-level TF seeds are
set to SEED before the script starts.
"""

from __future__ import annotations

import os
import random
import runpy
import sys
import types
from typing import Sequence

import numpy as np

from tfdp.reproduce.releases import mnist_input_data

CONTRIB_HINT = ("tf.contrib.layers needs the tf_slim package: pip install 'tfdp[releases]' "
                "(or pip install --target DIR tf_slim and put DIR on PYTHONPATH)")


def _contrib_layers() -> types.ModuleType:
    """A `tensorflow.contrib.layers` stand-in backed by tf_slim (imported on first use)."""
    module = types.ModuleType("tensorflow.contrib.layers")

    def _lookup(name: str):
        try:
            # optional: tf_slim comes with the releases extra only
            import tf_slim  # pylint: disable=import-outside-toplevel
        except ImportError as e:
            raise ImportError(CONTRIB_HINT) from e
        for source in (tf_slim.layers, tf_slim):
            if hasattr(source, name):
                return getattr(source, name)
        raise AttributeError(f"tf_slim has no stand-in for tf.contrib.layers.{name}")

    module.__getattr__ = _lookup  # PEP 562: consulted for names the module lacks
    return module


def _restore_removed_aliases() -> None:
    """Puts back `tensorflow.python.framework.ops.Tensor`, which tf_slim 1.1 (the last release)
    still reads and TF 2.21 moved to `tensorflow.python.framework.tensor`."""
    # lazy: TensorFlow only in the process that runs a release
    from tensorflow.python.framework import ops  # pylint: disable=import-outside-toplevel
    if not hasattr(ops, "Tensor"):
        # lazy: TensorFlow only in the process that runs a release
        from tensorflow.python.framework import tensor  # pylint: disable=import-outside-toplevel
        ops.Tensor = tensor.Tensor


def install() -> types.ModuleType:
    """Replaces `tensorflow` in sys.modules by a tf.compat.v1 view with the stand-ins.

    Returns:
      The module now imported as `tensorflow`.
    """
    # lazy: TensorFlow only in the process that runs a release
    import tensorflow as real_tf  # pylint: disable=import-outside-toplevel
    v1 = real_tf.compat.v1
    v1.disable_v2_behavior()
    _restore_removed_aliases()
    view = types.ModuleType("tensorflow")
    view.__getattr__ = lambda name: getattr(v1, name)
    view.__path__ = list(real_tf.__path__)  # `import tensorflow.python.X` keeps working
    contrib = types.ModuleType("tensorflow.contrib")
    contrib.layers = _contrib_layers()
    view.contrib = contrib
    names = ["tensorflow.examples", "tensorflow.examples.tutorials",
             "tensorflow.examples.tutorials.mnist"]
    parents = [types.ModuleType(n) for n in names]
    view.examples = parents[0]
    parents[0].tutorials = parents[1]
    parents[1].mnist = parents[2]
    parents[2].input_data = mnist_input_data
    sys.modules.update({"tensorflow": view, "tensorflow.contrib": contrib,
                        "tensorflow.contrib.layers": contrib.layers,
                        "tensorflow.examples.tutorials.mnist.input_data": mnist_input_data})
    sys.modules.update(dict(zip(names, parents)))
    return view


def seed_all(seed: int) -> None:
    """Seeds Python's and NumPy's global generators and TF's default-graph seed."""
    # lazy: TensorFlow only in the process that runs a release
    import tensorflow.compat.v1 as v1  # pylint: disable=import-outside-toplevel
    random.seed(seed)
    np.random.seed(seed)
    v1.set_random_seed(seed)  # graph mode (after install): the default graph's seed


def main(argv: Sequence[str]) -> None:
    """`compat SEED SCRIPT [ARGS...]`: installs the shim, seeds, runs SCRIPT as __main__.

    Raises:
      SystemExit: with a usage message on bad arguments.
    """
    if len(argv) < 3 or not argv[1].lstrip("-").isdigit():
        raise SystemExit("usage: python -m tfdp.reproduce.releases.compat SEED SCRIPT [ARGS...]")
    seed, script = int(argv[1]), os.path.abspath(argv[2])
    if not os.path.isfile(script):
        raise SystemExit(f"SCRIPT {script} does not exist")
    install()
    seed_all(seed)
    sys.argv = [script] + list(argv[3:])
    sys.path.insert(0, os.path.dirname(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv)
