"""Model builders: generic small networks (common) and the papers' architectures."""

from tfdp.models.common import mlp, small_cnn
# The papers' architectures register their custom layers with Keras on import, so that
# `import tfdp.models` is enough to load any saved tfdp model.
from tfdp.models import adlm  # noqa: F401  pylint: disable=unused-import
from tfdp.models import hgm  # noqa: F401  pylint: disable=unused-import
from tfdp.models import stobatch  # noqa: F401  pylint: disable=unused-import

__all__ = ["mlp", "small_cnn"]
