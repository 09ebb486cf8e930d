"""Benchmarks: each reports a ratio against a reference measured in the same run."""

from tfdp import registry

# name -> module with `run(**overrides) -> dict` (keys at least: ratio, target, reference,
# candidate): the shared benchmarks, then those the papers add (registry kind "benchmark",
# e.g. GPM's sampling time and StoBatch's step), read when this package is imported.
BENCHMARKS = {
    "layers": "tfdp.bench.layers",
    "certify": "tfdp.bench.certify",
    "dpsgd": "tfdp.bench.dpsgd",
    "export": "tfdp.bench.export",
    "evaluate": "tfdp.bench.evaluate",
    "tf_options": "tfdp.bench.tf_options",
    "keras_fit": "tfdp.bench.keras_fit",
    "allocator": "tfdp.bench.allocator",
    "onednn": "tfdp.bench.onednn",
}
BENCHMARKS.update({name: declared.target.partition(":")[0]
                   for name, declared in registry.extensions("benchmark").items()})
