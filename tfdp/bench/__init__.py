"""Benchmarks: each reports a ratio against a reference measured in the same run."""

# name -> module with `run(**overrides) -> dict` (keys at least: ratio, target, reference,
# candidate).
BENCHMARKS = {
    "layers": "tfdp.bench.layers",
    "gpm": "tfdp.bench.gpm",
    "certify": "tfdp.bench.certify",
    "dpsgd": "tfdp.bench.dpsgd",
    "export": "tfdp.bench.export",
    "stobatch": "tfdp.bench.stobatch",
    "evaluate": "tfdp.bench.evaluate",
    "tf_options": "tfdp.bench.tf_options",
    "keras_fit": "tfdp.bench.keras_fit",
}
