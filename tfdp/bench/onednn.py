"""`tfdp-bench onednn`: tfdp-train's step time with oneDNN's CPU kernels vs TensorFlow's own.

Every tfdp command asks TensorFlow for oneDNN's CPU kernels on x86 (`tfdp.onednn`), which
TensorFlow otherwise turns on only on CPUs with AVX-512 VNNI / BF16 or AMX. This benchmark runs
the same seeded tfdp-train command in fresh processes, alternately with tfdp's setting
(``TF_ENABLE_ONEDNN_OPTS=1``) and with TensorFlow's own kernels (``TF_ENABLE_ONEDNN_OPTS=0``),
timed as `tfdp-bench allocator` times them (seconds per step after the first epoch; the
worker must report the kernels it ran with). The ratio is tfdp's over TensorFlow's own kernels,
median over rounds, worst case; below 1 is a speed-up. On a CPU where TensorFlow turns oneDNN on
by default, tfdp's setting is TensorFlow's default there.
"""

from __future__ import annotations

from typing import Any

from tfdp import options
from tfdp.bench import allocator

OPTIONS = options.OptionSet("onednn_bench_")

allocator.declare_options(OPTIONS)

TARGET_RATIO = 1.05  # oneDNN's kernels no slower than TensorFlow's own, within noise
_VARIANTS = {"tfdp": ({"TF_ENABLE_ONEDNN_OPTS": "1"}, {"onednn": "on"}),
             "eigen": ({"TF_ENABLE_ONEDNN_OPTS": "0"}, {"onednn": "off"})}


def run(**overrides: Any) -> dict:
    """Per case: seconds per step with oneDNN's kernels and with TensorFlow's own."""
    return allocator.run_benchmark(
        "onednn", OPTIONS, _VARIANTS, overrides, target=TARGET_RATIO,
        reference="TensorFlow's own (Eigen) CPU kernels (TF_ENABLE_ONEDNN_OPTS=0)",
        candidate="tfdp's setting: oneDNN's CPU kernels (TF_ENABLE_ONEDNN_OPTS=1)")
