"""Generic model builders shared by the papers (the papers' own networks are in
tfdp/papers/<paper>/models.py; `tfdp.registry.import_keras_objects()` registers them all)."""

from tfdp.models.common import mlp, small_cnn

__all__ = ["mlp", "small_cnn"]
