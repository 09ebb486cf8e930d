"""Certified robustness: Monte-Carlo prediction, confidence bounds, certificates and radii.

* `tfdp.certify.core`: Monte-Carlo prediction of a noisy scorer, confidence bounds
  (Clopper-Pearson, Hoeffding, empirical Bernstein) and the radius formulas.
* `tfdp.certify.graph`: the same statistics in TensorFlow (for the SavedModel).
* `tfdp.certify.registry`: one class per certificate (name, norm, soundness, numpy and
  TensorFlow radius, config round trip), looked up by the run's `certification` dict; a
  paper's own certificates (StoBatch's) live in its package and are found through its
  declaration (`names()` lists them all).

Everything callers used from the former `tfdp/certify.py` module is importable from here.
"""

from tfdp.certify import core, graph, registry
from tfdp.certify.core import (BOUNDS, DEFAULT_DELTA_GRID, MonteCarloPredictor,
                               MonteCarloResult, ScoreFn, _agm_multiplier, _gm_multiplier,
                               _hgm_multiplier, clopper_pearson_bounds,
                               empirical_bernstein_bounds, gaussian_radius, hoeffding_bounds,
                               is_robust, laplace_radius, max_epsilon, monte_carlo_predict,
                               product_of_softmax, top_two_bounds)
from tfdp.certify.registry import (NORMS, REGISTRY, Certificate, certified_radius, certify,
                                   from_config, lookup, names, smoothing_lower_bound,
                                   tf_certified_radius, validate_certification)
