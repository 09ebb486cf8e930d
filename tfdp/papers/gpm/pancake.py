"""Gaussian pancake mechanism (GPM): a backdoored Gaussian mechanism, its attack and bounds.

RESEARCH AND ATTACK CODE. GPM (Sun and He, "GPM: The Gaussian Pancake Mechanism for Planting
Undetectable Backdoors in Differential Privacy") replaces the Gaussian noise of the Gaussian
mechanism (GM) by scaled homogeneous-CLWE noise. Without the key its outputs are believed to be
computationally indistinguishable from GM outputs; with the key, a distinguishing attack succeeds
with probability close to 1 and the statistical epsilon is of order 1/beta^2. It is never a
default anywhere in tfdp and it is not exported from `tfdp.mechanisms`; import it explicitly
(`from tfdp.papers.gpm import pancake`). Every use emits a `GPMResearchWarning`.

Contents: the paper's Gaussian-mechanism calibration (its Theorem 2.3 form, which is not the
analytic calibration of `tfdp.mechanisms`), key generation, discrete Gaussian samplers (exact
Canonne-Kamath-Steinke rejection and a fast table path), the pancake sampler in numpy and
TensorFlow (float64), the key holder's distinguishing attack, exact and key-averaged
success-rate oracles, and the privacy bounds (lower, upper, Renyi, key-holder view).
All arithmetic is float64.

This module is GPM's interface: the parameters live in `pancake_params`, the samplers and the
mechanism in `pancake_sampling`, the attack, its oracles and the bounds in `pancake_bounds`.
"""

from __future__ import annotations

from tfdp.papers.gpm.pancake_bounds import (best_gm_success, distinguish, eps_lower, eps_upper,
                                            hockey_stick_delta, key_holder_noise_multiplier,
                                            key_holder_view, lemma41_probabilities, pair_rdp,
                                            rdp_upper, realisable_t, success_averaged,
                                            success_exact, success_paper_bound)
from tfdp.papers.gpm.pancake_params import (GPMResearchWarning, check_parameters, covert_gamma,
                                            gm_eps, gm_sigma, pancake_std, spacing, tau)
from tfdp.papers.gpm.pancake_sampling import (GaussianPancakeMechanism, generate_key, gm, gpm,
                                              pancake_noise, sample_discrete_gaussian,
                                              sample_hclwe_rejection, tf_pancake_noise)

__all__ = [
    "GPMResearchWarning", "GaussianPancakeMechanism", "gm_sigma", "gm_eps", "covert_gamma",
    "generate_key", "spacing", "pancake_std", "tau", "check_parameters",
    "sample_discrete_gaussian", "pancake_noise", "gpm", "gm", "tf_pancake_noise",
    "sample_hclwe_rejection", "distinguish", "realisable_t", "success_exact",
    "success_paper_bound", "success_averaged", "best_gm_success", "eps_lower", "eps_upper",
    "rdp_upper", "pair_rdp", "key_holder_noise_multiplier", "lemma41_probabilities",
    "hockey_stick_delta", "key_holder_view",
]
