"""A StoBatch run's privacy budget: the split of StoBatch Theorem 4 (`solve_budget`), the
ledger entries of the claimed and sound epsilons, and the host Laplace draws of its noise.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tfdp.papers.stobatch import budgets
from tfdp.papers.stobatch import losses as stobatch_losses


@dataclasses.dataclass
class Budget:
    """The solved budget split of StoBatch Theorem 4 and the constants behind it."""

    epsilon: float
    eps1: float
    eps2: float
    gamma: float
    gamma_x: float
    delta_r: float
    delta_l2: float
    first_layer_norm: float
    norm_mode: str
    fan_in: int
    beta: int
    m: int

    @property
    def a22_term(self) -> float:
        """eps1 Delta_g / Delta_R with Delta_g = 3 beta (Theorem 1's proof), dropped."""
        return self.eps1 * 3.0 * self.beta / self.delta_r

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["theorem4_total"] = budgets.stobatch_total_epsilon(
            epsilon1=self.eps1, epsilon2=self.eps2, gamma_x=self.gamma_x, gamma=self.gamma)
        out["a22_term"] = self.a22_term
        out["theorem4_total_with_a22"] = out["theorem4_total"] + self.a22_term
        return out


def solve_budget(*, epsilon: float, eps2: float, fan_in: int, beta: int, m: int,
                 first_layer_norm: float, norm_mode: str = "paper_l1",
                 hidden_units: int = 256) -> Budget:
    """Solves eps = eps1 + eps1/gamma_x + eps1/gamma + eps2 for eps1 (StoBatch Theorem 4, App. P).

    Args:
        epsilon: target total eps.
        eps2: budget of the output coefficients.
        fan_in: d of Lemma 2 (k*k*C_in).
        beta: neurons of one h1 feature map.
        m: DP batch size.
        first_layer_norm: Delta_h1 of theta1_0 (Lemma 3).
        norm_mode: which norm `first_layer_norm` is (recorded).
        hidden_units: |h_pi| (Delta_L2 = 2 |h_pi|, Lemma 4).

    Returns:
        The Budget.

    Raises:
        ValueError: naming --epsilon / --stobatch_eps2 when the split does not solve.
    """
    if not (math.isfinite(eps2) and eps2 > 0):
        raise ValueError(f"--stobatch_eps2: expected a finite number > 0, got {eps2!r}")
    if not (math.isfinite(epsilon) and epsilon > eps2):
        raise ValueError(f"--epsilon: the StoBatch split eps = eps1 + eps1/gamma_x + eps1/gamma "
                         f"+ eps2 needs --epsilon > --stobatch_eps2 ({eps2}), got {epsilon!r}")
    delta_r = stobatch_losses.stobatch_delta_r(fan_in=fan_in, beta=beta)  # Lemma 2
    delta_l2 = stobatch_losses.stobatch_delta_l2(hidden_units=hidden_units)  # Lemma 4
    gamma_x, gamma = budgets.stobatch_gammas(sensitivity=delta_r, batch_size=m,
                                             first_layer_norm=first_layer_norm)  # Lemma 3
    eps1 = budgets.stobatch_epsilon1(total_epsilon=epsilon, epsilon2=eps2, gamma_x=gamma_x,
                                     gamma=gamma)  # App. P
    return Budget(epsilon=float(epsilon), eps1=eps1, eps2=float(eps2), gamma=gamma,
                  gamma_x=gamma_x, delta_r=delta_r, delta_l2=delta_l2,
                  first_layer_norm=float(first_layer_norm), norm_mode=norm_mode,
                  fan_in=int(fan_in), beta=int(beta), m=int(m))


_NOTE_SHARED = (
    "The paper's argument (Lemma 3, Theorems 1-4, App. J) treats this noise as a "
    "functional-mechanism perturbation of batch-summed coefficients and everything else as "
    "post-processing. The noise is ONE draw shared by every example and reused at every step "
    "(docs/stobatch.md, \"Privacy ledger\"): x_bar_i - x_bar_j = x_i - x_j exactly, and the "
    "network's per-example nonlinear computations (BN, ReLU, the attacks) are not functions "
    "of the noisy sums, so the post-processing step does not hold and no finite bound "
    "follows from the paper's proof; the sound value is therefore inf. ")


_NOTE_MAPS = ("Conv layers: Delta_R is computed for ONE feature map while all C maps read the "
              "same inputs; the claimed value follows the paper and is not "
              "independently verified. ")


def add_ledger_entries(ledger, budget: Budget) -> None:
    """Records the paper's claimed eps (Theorem 4) beside the sound accounting.

    Every entry's sound epsilon is inf (see the notes: the shared-noise argument above
    supports no finite bound); the claimed epsilons sum to Theorem 4's total. The Theorem 1
    gradient-term entry carries the term the paper drops (claimed 0 as in the paper) and its
    value.
    """
    b = budget
    ledger.add("stobatch_input_perturbation", mechanism="laplace_shared_input_noise",
               epsilon=math.inf, claimed_epsilon=b.eps1 / b.gamma_x,
               protects="training records",
               note=_NOTE_SHARED + f"Claimed eps1/gamma_x (Lemma 3) with gamma_x = Delta_R/m = "
               f"{b.gamma_x:.6g}, Delta_R = {b.delta_r:.6g}, m = {b.m}.")
    ledger.add("stobatch_first_layer", mechanism="laplace_shared_latent_noise",
               epsilon=math.inf, claimed_epsilon=b.eps1 / b.gamma,
               protects="training records",
               note=_NOTE_SHARED + _NOTE_MAPS + f"Claimed eps1/gamma (Lemma 3) with gamma = "
               f"2 Delta_R/(m Delta_h1) = {b.gamma:.6g}, Delta_h1 = {b.first_layer_norm:.6g} "
               f"({b.norm_mode} norm of theta1 at initialisation).")
    ledger.add("stobatch_autoencoder", mechanism="functional_mechanism_laplace",
               epsilon=math.inf, claimed_epsilon=b.eps1, protects="training records",
               note=_NOTE_SHARED + _NOTE_MAPS + "Claimed eps1 (Theorem 1, Delta_R = d(beta+2) "
               f"= {b.delta_r:.6g}). The objective optimised has a per-element absolute value "
               "(as in the code release), so it is not the linear perturbed polynomial the proof "
               "covers.")
    ledger.add("stobatch_output_coefficients", mechanism="functional_mechanism_laplace",
               epsilon=math.inf, claimed_epsilon=b.eps2, protects="training labels",
               note=_NOTE_SHARED + "Claimed eps2 (Theorem 3, Delta_L2 = 2|h_pi| = "
               f"{b.delta_l2:.6g}). chi3 enters as a data-independent term in W_pi, while the "
               "label coefficients sum_i h_pi_i y_i change with theta at every step, so the one "
               "draw protects one evaluation, not the sequence of gradients.")
    ledger.add("stobatch_theorem1_gradient_term", mechanism="functional_mechanism_laplace",
               epsilon=math.inf, claimed_epsilon=0.0, protects="training records",
               note=(f"Theorem 1's proof adds eps1*Delta_g/Delta_R with Delta_g = 3 beta, i.e. "
                     f"{b.a22_term:.6g} (factor {3.0 * b.beta / b.delta_r:.4f}); the paper drops "
                     "it (claimed 0). Theorem 4 total with this term: "
                     f"{b.to_dict()['theorem4_total_with_a22']:.6g}."))


def draw_laplace(rng: np.random.Generator, scale: float, shape) -> np.ndarray:
    """[Lap(scale)]^shape from the host RNG, as float32 (the generator of chi1, chi2, chi3)."""
    return rng.laplace(0.0, float(scale), size=tuple(shape)).astype(np.float32)
