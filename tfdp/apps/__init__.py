"""absl entry points of tfdp: train, evaluate, audit, bench."""
