"""Noise mechanisms: calibration (float64) and numpy / TensorFlow samplers."""

from tfdp import tf_options
from tfdp.mechanisms.gaussian import (
    HGM_CONDITION2_DELTA,
    analytic_gaussian_sigma,
    classical_gaussian_multiplier,
    classical_gaussian_sigma,
    gaussian_delta,
    gaussian_tail_epsilon,
    gaussian_tail_sigma,
    hgm_conditions,
    hgm_multiplier,
    hgm_s,
    hgm_sigma,
)
from tfdp.mechanisms.heterogeneous import (
    check_redistribution,
    heterogeneous_stddevs,
    layer_sensitivity,
    redistribution_from_scores,
    uniform_redistribution,
    weighted_sensitivity,
)
from tfdp.mechanisms.laplace import laplace_scale
from tfdp.mechanisms.pixeldp import pixeldp_gaussian_multiplier, pixeldp_laplace_multiplier
from tfdp.mechanisms.sampling import (
    replica_seed,
    sample_gaussian,
    sample_laplace,
    tf_gaussian,
    tf_laplace,
)

# Every tfdp module that runs TensorFlow imports the mechanisms, tfdp.train.loop or attacks:
# bit-reproducible tf.function graphs (tfdp/tf_options.py).
tf_options.configure_tensorflow()

__all__ = [
    "HGM_CONDITION2_DELTA",
    "analytic_gaussian_sigma",
    "check_redistribution",
    "classical_gaussian_multiplier",
    "classical_gaussian_sigma",
    "gaussian_delta",
    "gaussian_tail_epsilon",
    "gaussian_tail_sigma",
    "heterogeneous_stddevs",
    "hgm_conditions",
    "hgm_multiplier",
    "hgm_s",
    "hgm_sigma",
    "laplace_scale",
    "layer_sensitivity",
    "pixeldp_gaussian_multiplier",
    "pixeldp_laplace_multiplier",
    "redistribution_from_scores",
    "replica_seed",
    "sample_gaussian",
    "sample_laplace",
    "tf_gaussian",
    "tf_laplace",
    "uniform_redistribution",
    "weighted_sensitivity",
]
