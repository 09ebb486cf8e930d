"""Keras 3 layers of tfdp: noise injection, bounding and normalisation layers."""
