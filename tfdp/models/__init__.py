"""Model builders: generic small networks (common) and the papers' architectures."""

from tfdp.models.common import mlp, small_cnn

__all__ = ["mlp", "small_cnn"]
