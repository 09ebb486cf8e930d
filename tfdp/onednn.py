"""TensorFlow's CPU kernels for tfdp's command-line processes: oneDNN's on every x86 CPU.

TensorFlow's x86 builds carry two CPU kernel libraries: oneDNN's and its own (Eigen). Unless
``TF_ENABLE_ONEDNN_OPTS`` says otherwise, TensorFlow turns oneDNN on only on CPUs with
AVX-512 VNNI, AVX-512 BF16 or AMX (recent Intel Xeons) and runs its own kernels elsewhere
(AMD EPYC, older Intel CPUs). So the same tfdp command ran different arithmetic on different
x86 machines, and on the second kind:

- its steps were slower: on a 2-core AMD EPYC, StoBatch's, DP-SGD's and AdLM's MNIST steps
  took 1.3, 1.6 and 2.3 times as long (`tfdp-bench onednn`, docs/performance.md);
- a grouped convolution had no CPU gradient, so `tf.vectorized_map` over a model with one
  failed (tfdp.train.example_grads.map_examples now loops there instead);
- results differed from those written on the first kind beyond float rounding (a 1-epoch
  HGM smoke run: 0.450 against 0.426 test accuracy; with oneDNN on, the AMD machine's run passed the
  test's then 2-point band around the Intel machine's 0.426).

`use_onednn` sets ``TF_ENABLE_ONEDNN_OPTS=1`` on x86 machines when the variable is not set,
before TensorFlow is imported. Every tfdp command calls it (`tfdp.apps.cli.import_tensorflow`),
and so does the test suite; a user's script can call it first thing. A value the user set,
``TF_ENABLE_ONEDNN_OPTS=0`` included, is kept. `state` says which library is in force; the
run's platform record (config.json) keeps it, so a resume under the other library charges
its replayed steps again (docs/ledger.md).
"""

from __future__ import annotations

import os
import platform

__all__ = ["ENV", "use_onednn", "state"]

ENV = "TF_ENABLE_ONEDNN_OPTS"
_X86 = ("x86_64", "amd64", "x86", "i686", "i386")


def use_onednn() -> str | None:
    """Asks TensorFlow for oneDNN's CPU kernels on x86 unless `ENV` is set; idempotent.

    Call it before TensorFlow is imported: TensorFlow reads the variable once, when its first
    kernel is chosen.

    Returns:
      The variable's value after the call (None where unset: not an x86 machine).
    """
    if platform.machine().lower() in _X86:
        os.environ.setdefault(ENV, "1")
    return os.environ.get(ENV)


def state() -> str:
    """"on" if TensorFlow runs oneDNN's CPU kernels in this process, else "off"."""
    try:
        # lazy: loads TensorFlow; importing tfdp.onednn must not (it runs before that import)
        from tensorflow.python.util import _pywrap_util_port  # pylint: disable=import-outside-toplevel
        return "on" if _pywrap_util_port.IsMklEnabled() else "off"
    except (ImportError, AttributeError):
        return "off"
