"""Benchmarks: each reports a ratio against a reference measured in the same run."""
