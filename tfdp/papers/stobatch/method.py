"""StoBatch (Phan et al., ICML 2020): DP adversarial learning with certified robustness.

One code path for every tf.distribute strategy (docs/stobatch.md). Per run (host, once,
`setup`): the first-layer kernel theta1_0 is drawn, its norm fixes gamma (Lemma 3), the budget
split of Theorem 4 is solved, chi1, chi2, chi3 are drawn ONCE from the run's seeded RNG, and the
training inputs are perturbed IN PLACE, x_bar = x + chi1/m (Lemma 3; the raw inputs never reach
the training loop). The noise is stored in the model as non-trainable weights, checkpointed
and restored on resume, never redrawn.

The loop hands each step one fixed block of 2 m N_tr examples (`batch_schedule` "fixed":
the blocks are drawn once with the run's seed and visited in a fresh order every epoch).
Block t of the step is local trainer t's fixed pair: positions [0, m) are its benign batch
B_i1, positions [m, 2m) its adversarial-source batch B_i2 (Alg. 4, pairing
"alg4_fixed_pairs"). With pairing "per_epoch_random" (the reference code's shared pool,
docs/stobatch.md) the blocks come from `epoch_batches` instead: [benign, adversarial source] drawn
without replacement from a pool of the fixed batches of m. Inside `strategy.run` every replica gathers the block (exact SUM
all-reduces of the uneven shards the loop distributed) and takes its own contiguous,
UNPADDED slices of both roles: with R replicas and M micro-batches per replica, slice g = r M + j of a role holds
positions [g m / (R M), (g + 1) m / (R M)). So:

- the benign / adversarial roles, the 3-way attack split (I-FGSM, MIM, Madry by position in
  the adversarial-source batch) and Madry's random start (stateless, keyed by the step seed
  and the global position) do not depend on R;
- every loss is a SUM over the replica's real rows divided by the global constants
  (m (1 + xi) N_tr for L_bar, m N_tr for R_bar), and the Keras optimisers SUM the replicas'
  gradients;
- the chi3 term -(1/m) sum_k chi3[:, k] . W_pi[:, k] enters once per update, on replica 0
  only, so its gradient is -chi3/m whatever R is;
- BN: `bn_stats="global"` uses synchronized BN (full-batch moments of each role, no padding
  rows); "per_microbatch" normalises every micro-batch alone, which equals
  R M replicas with per-replica BN.

theta1 (encoder conv, encoder BN, decoder bias) is updated only by the auto-encoder
objective R_bar with its own Adam optimizer; theta2 only by L_bar (stop-gradient at h1_bar in
the classification pass). Adversarial examples are crafted from x_bar against
f with chi2 and BN in inference mode, with the model's predicted labels (labels are never
read while crafting), no range clipping, one batched loop with per-example attack ids
(`attacks.graph.craft`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np
import tensorflow as tf

from attacks import graph as attack_graph
from tfdp import losses, options
from tfdp.papers.stobatch import budgets
from tfdp.papers.stobatch import losses as stobatch_losses
from tfdp.papers.stobatch import models
from tfdp.train import metrics, replica
from tfdp.train.base import Method
from tfdp import data
from tfdp.train import loop

PAIRINGS = ("alg4_fixed_pairs", "per_epoch_random", "release_reader")
BN_STATS = ("global", "per_microbatch")
NORM_MODES = ("paper_l1", "spectral_ref")
NOISE_TERMS = ("linear", "abs_mean", "linear_broadcast")
DTYPES = models.COMPUTE_DTYPES

ADV_SOURCES = ("noisy", "raw")
ADV_NOISES = ("train", "zero")


@options.declare("stobatch_")
class StoBatchConfig:
    """StoBatch settings (the stobatch_* flags without the prefix): the single declaration of
    their types, defaults, help and checks; `validate` holds the rules that join several of
    them. `StoBatchConfig(...).as_options()` is a `TrainConfig.options` mapping."""

    architecture: str = options.field(
        "auto", "StoBatch: network (mnist, cifar10, resnet18, tiny); auto picks it from the "
        "data set.", choices=("auto",) + models.ARCHITECTURES)
    eps2: float = options.field(
        0.1, "StoBatch: eps2 of the output coefficients (MNIST 0.1; CIFAR-10 1 + r/3; Tiny "
        "ImageNet 1). eps1 = (--epsilon - eps2) / (1 + 1/gamma + 1/gamma_x).",
        check=options.positive)
    xi: float = options.field(1.0, "StoBatch: weight xi of the adversarial loss (Eq. 9).",
                              check=options.nonnegative)
    psi: float = options.field(
        2.0, "StoBatch: fresh inference noise is 1/psi of the training scale (App. N).",
        check=options.positive)
    attack_iters: int = options.field(10, "StoBatch: T_mu, training attack iterations.",
                                      check=options.at_least(1))
    mu_max: float = options.field(1.0, "StoBatch: mu_t ~ U(0, mu_max] per trainer step.",
                                  check=options.positive)
    madry_eps_iter: Optional[float] = options.field(
        None, "StoBatch: step size of the training Madry (PGD) attack; unset: mu_t / T_mu "
        "(Eq. 8, as I-FGSM and MIM). The MNIST code release steps by the model's evaluation "
        "attack size / T_mu (0.05 / T_mu for its first model) while the ball is mu_t.",
        check=options.positive)
    hidden_units: int = options.field(256, "StoBatch: |h_pi|.", check=options.at_least(1))
    norm_mode: str = options.field(
        "paper_l1", "StoBatch: first-layer norm for gamma: paper_l1 or spectral_ref.",
        choices=NORM_MODES)
    enforce_norm_bound: bool = options.field(
        True, "StoBatch: project theta1 after every step so its norm stays <= the initial "
        "bound used for gamma.")
    pairing: str = options.field(
        "alg4_fixed_pairs", "StoBatch: benign / adversarial-source pairing: alg4_fixed_pairs "
        "(Alg. 4: fixed pairs) or per_epoch_random (the reference code's shared pool of fixed "
        "batches, both roles drawn without replacement; needs --stobatch_trainers=1; "
        "docs/stobatch.md) or release_reader (the MNIST code release's reader: each step "
        "reads the three adversarial thirds and then the benign batch as four successive "
        "slices of the training set in its stored order, never shuffled, a read that would "
        "pass the end starting again at the first record; needs --stobatch_trainers=1 and a "
        "batch size divisible by 3).", choices=PAIRINGS)
    trainers: int = options.field(1, "StoBatch: N_tr local trainers per step.",
                                  check=options.at_least(1))
    micro_batches: int = options.field(
        1, "StoBatch: gradient micro-batches per replica (M_dev = this x replicas).",
        check=options.at_least(1))
    bn_stats: str = options.field(
        "global", "StoBatch: BN grouping: global (synchronized BN) or per_microbatch.",
        choices=BN_STATS)
    ae_learning_rate: Optional[float] = options.field(
        None, "StoBatch: Adam learning rate of theta1 (default --learning_rate).",
        check=options.positive)
    bn_momentum: float = options.field(
        0.99, "StoBatch: momentum of the BN moving statistics (used at inference and by the "
        "training attacks; short runs need a smaller value).", check=options.below_one)
    bn_eval: str = options.field(
        "moving", "StoBatch: BN at inference and in the training attacks: moving (default) or "
        "batch (statistics of the evaluated batch; the reference code's MNIST/CIFAR-10 "
        "inference).", choices=models.BN_EVAL_MODES)
    ae_optimizer: str = options.field(
        "adam", "StoBatch: optimizer of theta1, adam (reference code) or sgd.",
        choices=("adam", "sgd"))
    noise_term: str = options.field(
        "linear", "StoBatch: output noise term: linear (paper), abs_mean (the CIFAR-10 code) or "
        "linear_broadcast (the MNIST code's arithmetic: its scalar -sum(N*W) is subtracted "
        "from every record and class of the Taylor loss, so the linear term counts K times).",
        choices=NOISE_TERMS)
    adam_epsilon: Optional[float] = options.field(
        None, "StoBatch: Adam's epsilon for theta2 (unset: Keras' 1e-7; the MNIST code: TF1's "
        "1e-8 on the same normalised loss).", check=options.positive)
    ae_adam_epsilon: Optional[float] = options.field(
        None, "StoBatch: Adam's epsilon for theta1 (unset: Keras' 1e-7). tfdp divides the "
        "reconstruction loss by m; the MNIST code minimises its sum with TF1's 1e-8, the same "
        "steps as epsilon 1e-8 / m here (4.0e-12 at m = 2,499).", check=options.positive)
    dtype: str = options.field(
        "float32", "StoBatch: compute dtype of the network, the attacks and the losses: "
        "float32, or float64 (slower; results do not depend on float32 summation order, e.g. "
        "to check that replica counts give the same weights).", choices=DTYPES)
    num_draws: int = options.field(2000, "StoBatch: Monte-Carlo draws n.",
                                   check=options.at_least(1))
    delta_rx_mode: str = options.field(
        "unit", "StoBatch: Delta_r^x = mu * d_cert with mu = 1 (unit), mu_a or mu_train "
        "(docs/stobatch.md).", choices=("unit", "mu_a", "mu_train"))
    radius_divisor: float = options.field(
        1.0, "StoBatch: extra radius divisor (1 = paper-literal; the code's 0.005).",
        check=options.positive)
    radius_psi_correction: bool = options.field(
        True, "StoBatch: divide the certified radius by psi.")
    # The authors' code release's data path (issue 29 item 5); the defaults are the paper's.
    adv_source: str = options.field(
        "noisy", "StoBatch: adversarial examples crafted from the perturbed inputs x_bar "
        "(noisy: the paper, Alg. 1) or from the raw inputs x (raw: the authors' code "
        "release; raw inputs then reach training outside the noise, see the ledger).",
        choices=ADV_SOURCES)
    adv_noise: str = options.field(
        "train", "StoBatch: input noise of the adversarial half of the loss: train (the "
        "training noise chi1/m, as x_bar carries it: the paper) or zero (the authors' "
        "code feeds the adversarial branch a zero noise budget).", choices=ADV_NOISES)
    input_clip: Optional[float] = options.field(
        None, "StoBatch: clip the (noisy) network inputs to [-c, c] before the first layer, "
        "in training and at inference (the authors' code: 10); unset: no clip (the paper).",
        check=options.positive)

    def validate(self) -> None:
        """The rules that join settings (pairing and trainers, BN grouping and micro-batches)."""
        if self.pairing == "per_epoch_random" and self.trainers != 1:
            raise ValueError(f"--stobatch_trainers: --stobatch_pairing=per_epoch_random draws "
                             f"one (benign, adversarial-source) pair per step from the shared "
                             f"pool (the reference code's N_tr = 1), got {self.trainers}")
        if self.pairing == "release_reader" and self.trainers != 1:
            raise ValueError(f"--stobatch_trainers: --stobatch_pairing=release_reader reads one "
                             f"(benign, adversarial-source) pair per step (the code release's "
                             f"N_tr = 1), got {self.trainers}")
        if self.bn_stats == "global" and self.micro_batches > 1:
            raise ValueError("--stobatch_micro_batches: gradient accumulation normalises each "
                             "micro-batch alone; use --stobatch_bn_stats=per_microbatch "
                             "(docs/stobatch.md, \"Distribution\")")


OPTIONS = StoBatchConfig.OPTIONS  # the stobatch_* flags (tfdp-train defines them from this)

# Default generic flags: the StoBatch paper's MNIST values.
_DEFAULTS = {"epochs": 1, "batch_size": 2499, "learning_rate": 1e-4, "optimizer": "adam",
             "epsilon": 1.0, "delta": 0.0}


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


def _default_architecture(input_shape) -> str:
    h, w, c = (int(v) for v in input_shape)
    if c == 1:
        return "mnist"
    return "resnet18" if h >= 64 else "cifar10"


class StoBatch(Method):
    """StoBatch trainer (see module doc). `--batch_size` is the DP batch size m."""

    name = "stobatch"
    default_flags = dict(_DEFAULTS)

    settings_class = StoBatchConfig

    def __init__(self, config):
        self.m = int(config.batch_size)
        settings = StoBatchConfig.from_options(config.options)  # raises naming the flag
        ae_lr = settings.ae_learning_rate
        # theta1's learning rate: --stobatch_ae_learning_rate, else --learning_rate.
        self.ae_lr = float(config.learning_rate if ae_lr is None else ae_lr)
        # The loop's step unit: N_tr pairs of (benign, adversarial-source) fixed batches.
        super().__init__(dataclasses.replace(config, batch_size=2 * self.m * settings.trainers))
        self.budget: Budget | None = None
        self.model = None
        self.ae_optimizer = None
        self._noise: dict | None = None
        self._theta1_0: np.ndarray | None = None
        self._spec: dict | None = None

    # ------------------------------------------------------------------ validation

    def validate(self) -> None:
        cfg = self.config
        if self.settings.pairing == "release_reader" and self.m % 3:
            raise ValueError(f"--batch_size: --stobatch_pairing=release_reader reads the "
                             f"adversarial-source batch as three slices of m/3; m = {self.m} "
                             "is not divisible by 3")
        if self.m < 3:
            raise ValueError(f"--batch_size: StoBatch's DP batch size m must be >= 3 (one "
                             f"example per attack), got {self.m}")
        if not (math.isfinite(self.ae_lr) and self.ae_lr > 0):
            raise ValueError(f"--stobatch_ae_learning_rate: expected a finite number > 0 (it "
                             f"defaults to --learning_rate), got {self.ae_lr!r}")
        if cfg.epsilon is None:
            raise ValueError("--epsilon: StoBatch needs a total privacy budget")
        if not cfg.epsilon > self.settings.eps2:
            raise ValueError(f"--epsilon: the StoBatch split eps = eps1 + eps1/gamma_x + "
                             f"eps1/gamma + eps2 needs --epsilon > --stobatch_eps2 "
                             f"({self.settings.eps2}), got {cfg.epsilon!r}")
        if cfg.delta != 0.0:
            raise ValueError(f"--delta: StoBatch is pure eps-DP; expected 0, got {cfg.delta!r}")

    def batch_schedule(self) -> str:
        # A label (config.json); `batches` builds the steps of every pairing mode.
        return ("fixed" if self.settings.pairing == "alg4_fixed_pairs"
                else self.settings.pairing)

    def reader_steps(self, num_examples: int, num_steps: int) -> list:
        """The first `num_steps` steps of `release_reader` pairing: [benign, adversarial
        source] index arrays of m each.

        The MNIST code release (StoBatch.py with its input_data.py, which never shuffles)
        reads, per step, three adversarial-source slices of m/3 (I-FGSM, MIM, Madry, in the
        order of the 3-way split) and then the benign batch of m, each the next slice of the
        training set in its stored order; a read that would pass the end starts again at
        record 0 (the rest of the pass is skipped). The reads depend only on the step count,
        so an epoch's steps are the same on resume.

        Raises:
            ValueError: naming --batch_size when m is not divisible by 3 or a read does not
                fit the training set.
        """
        m = self.m
        if m % 3:
            raise ValueError(f"--batch_size: --stobatch_pairing=release_reader reads the "
                             f"adversarial-source batch as three slices of m/3; m = {m} is "
                             "not divisible by 3")
        if m > num_examples:
            raise ValueError(f"--batch_size: m = {m} is larger than the training set "
                             f"({num_examples})")
        position = 0

        def read(size):
            nonlocal position
            if position + size > num_examples:  # input_data.next_batch: start a new pass
                position = 0
            out = np.arange(position, position + size, dtype=np.int64)
            position += size
            return out

        steps = []
        for _ in range(num_steps):
            adv = np.concatenate([read(m // 3) for _ in range(3)])
            steps.append(np.concatenate([read(m), adv]))
        return steps

    def epoch_batches(self, num_examples: int, fixed_seed: int,
                      rng: np.random.Generator) -> list:
        """One epoch of `per_epoch_random` steps: [benign batch, adversarial-source batch].

        The reference code's pairing (docs/stobatch.md): the data are cut ONCE into
        n_b = floor(N/m) fixed batches of m (`fixed_seed`, the same for every epoch). Each
        step draws its benign batch and then its adversarial-source batch without
        replacement from one shared pool of the n_b batches, which is refilled (a fresh
        permutation from `rng`) when it is empty. One epoch is n_b steps, i.e. exactly two
        pool cycles, so every batch serves twice per epoch in random roles. When the pool is
        refilled between the two draws of a step, the adversarial source is drawn from the
        refilled pool minus that step's benign batch (tfdp's one change; the benign batch stays
        in the pool), so no step uses one batch in both roles.

        Args:
            num_examples: N.
            fixed_seed: seed of the one-time partition.
            rng: this epoch's generator (pool order).

        Returns:
            n_b int64 index arrays of 2m: positions [0, m) benign, [m, 2m) adversarial source.
        """
        partition = np.asarray(data.fixed_batches(num_examples, self.m, fixed_seed))
        n_b = len(partition)
        if n_b < 2:
            raise ValueError(f"--batch_size: per_epoch_random needs at least 2 fixed batches "
                             f"of m = {self.m}, the data set gives {n_b}")
        pool: list = []
        steps = []
        for _ in range(n_b):
            if not pool:
                pool = list(rng.permutation(n_b))
            benign = pool.pop(0)
            if not pool:  # refill between the two draws of this step
                pool = list(rng.permutation(n_b))
                adv = next(b for b in pool if b != benign)
                pool.remove(adv)
            else:
                adv = pool.pop(0)
            steps.append(np.concatenate([partition[benign], partition[adv]]))
        return steps

    def batches(self, epoch: int, rng: np.random.Generator):
        """Per step, the N_tr (benign B_i1, adversarial-source B_i2) pairs of one fixed block.

        With `per_epoch_random` pairing (N_tr = 1), the pairs of `epoch_batches` instead.

        Yields tuples (B_11, B_12, ..., B_N1, B_N2) of m indices each; the loop concatenates
        them in order, so trainer t's pair sits at positions [2 m t, 2 m (t + 1)).
        """
        m = self.m
        if self.settings.pairing == "per_epoch_random":
            for step in self.epoch_batches(self.data_spec.num_train, self.layout_seed, rng):
                yield step[:m], step[m:]
            return
        if self.settings.pairing == "release_reader":
            n = self.data_spec.num_train
            per_epoch = n // (2 * m)  # the step count of the other modes (D / 2m per epoch)
            for step in self.reader_steps(n, (epoch + 1) * per_epoch)[epoch * per_epoch:]:
                yield step[:m], step[m:]
            return
        for block in super().batches(epoch, rng):
            yield tuple(block[2 * m * t + r * m:2 * m * t + (r + 1) * m]
                        for t in range(self.settings.trainers) for r in (0, 1))

    # ------------------------------------------------------------------ host set-up

    def setup(self, data_spec, ledger, rng: np.random.Generator, strategy=None) -> None:
        """Draws theta1_0, solves the budget, draws chi1..chi3, perturbs x_train IN PLACE."""
        del strategy
        x_train = data_spec.x_train
        n = len(x_train)
        unit = 2 * self.m * self.settings.trainers
        if unit > n:
            raise ValueError(f"--batch_size: m = {self.m} needs 2 m N_tr = {unit} training "
                             f"examples per step, the data set has {n}")
        if x_train.dtype != np.float32:
            raise ValueError(f"x_train: expected float32 inputs, got {x_train.dtype}")
        lo, hi = float(np.min(x_train)), float(np.max(x_train))
        if lo < -1.0 - 1e-6 or hi > 1.0 + 1e-6:
            raise ValueError(f"--value_range: StoBatch's sensitivities need inputs in [-1, 1], "
                             f"got [{lo}, {hi}]")
        input_shape = tuple(x_train.shape[1:])
        arch = (_default_architecture(input_shape) if self.settings.architecture == "auto"
                else self.settings.architecture)
        spec = models.encoder_spec(arch, input_shape)
        self._spec = dict(spec, architecture=arch)
        k, c, f = spec["kernel_size"], input_shape[-1], spec["filters"]
        theta1_0 = models.glorot_uniform((k, k, c, f), rng)  # Glorot uniform, on the host
        norms = models.first_layer_norms(theta1_0)
        s1 = norms["l1_rows"] if self.settings.norm_mode == "paper_l1" else norms["spectral"]
        self.budget = solve_budget(epsilon=float(self.config.epsilon), eps2=self.settings.eps2,
                                   fan_in=spec["fan_in"], beta=spec["beta"], m=self.m,
                                   first_layer_norm=s1, norm_mode=self.settings.norm_mode,
                                   hidden_units=self.settings.hidden_units)
        b = self.budget
        # Alg. 1 line 1: chi1, chi2 ~ Lap(Delta_R/eps1), chi3 ~ Lap(Delta_L2/eps2), each drawn ONCE
        chi1 = draw_laplace(rng, b.delta_r / b.eps1, input_shape)
        chi2 = draw_laplace(rng, b.delta_r / b.eps1, spec["h1_shape"])
        # chi3's shape needs K, known when the model is built: its draw uses a seed taken
        # from the same seeded stream now, so it is still one host draw fixed by the run key.
        # Four 63-bit words: the seed keeps the stream's entropy (>= 128 bits, issue 22).
        self._chi3_seed = [int(v) for v in rng.integers(0, 2**63 - 1, size=4)]
        self._theta1_0 = theta1_0
        self._col_norm = norms["l1_cols"]
        self._noise = {"chi1": chi1, "chi2": chi2}
        # Lemma 3: x_bar = x + chi1/m, once, in place: only x_bar reaches the training loop
        x_train += (chi1 / np.float32(self.m))[None]
        add_ledger_entries(ledger, b)
        if self.settings.adv_source == "raw":
            ledger.add("stobatch_raw_adversarial_source", mechanism="none",
                       epsilon=math.inf, claimed_epsilon=0.0, protects="training records",
                       note="--stobatch_adv_source=raw (the authors' code release): the "
                            "adversarial examples are crafted from the raw inputs x, so raw "
                            "records reach training outside the input noise; the paper's "
                            "argument (Alg. 1 crafts from x_bar) does not cover this path.")

    def draw_chi3(self, num_classes: int) -> np.ndarray:
        """chi3 ~ Lap(Delta_L2/eps2)^{|h_pi| x K} (Alg. 1; code's shape) from setup's seed."""
        b = self.budget
        rng = np.random.default_rng(self._chi3_seed)
        return draw_laplace(rng, b.delta_l2 / b.eps2, (self.settings.hidden_units, int(num_classes)))

    # ------------------------------------------------------------------ model and state

    def build_model(self, input_shape, num_classes):
        """Builds StoBatchNet and the auto-encoder's Adam inside the strategy scope."""
        if self.budget is None:
            raise RuntimeError("setup must run before build_model")
        replicas = int(tf.distribute.get_strategy().num_replicas_in_sync)
        groups = replicas * self.settings.micro_batches
        if self.m < groups:
            raise loop.SetupError(
                f"--batch_size: m = {self.m} cannot give each of the {replicas} replicas x "
                f"{self.settings.micro_batches} micro-batches at least one example")
        if self.settings.bn_stats == "per_microbatch" and self.m % groups:
            raise loop.SetupError(
                f"--stobatch_bn_stats=per_microbatch: m = {self.m} must be divisible by "
                f"replicas x micro-batches = {groups} (equal micro-batches, docs/stobatch.md)")
        b = self.budget
        bound = b.first_layer_norm if (self.settings.enforce_norm_bound and self.settings.norm_mode == "paper_l1") \
            else None
        model = models.StoBatchNet(
            input_shape, num_classes, architecture=self._spec["architecture"],
            batch_size=self.m, input_scale=b.delta_r / b.eps1,
            latent_scale=2.0 * b.delta_r / b.eps1, psi=self.settings.psi,
            hidden_units=self.settings.hidden_units, sync_bn=self.settings.bn_stats == "global",
            norm_bound=bound, bn_momentum=self.settings.bn_momentum,
            bn_eval=self.settings.bn_eval, compute_dtype=self.settings.dtype, input_clip=self.settings.input_clip,
            name="stobatch")
        model.build((None,) + tuple(input_shape))
        model.encoder_conv.kernel.assign(self._theta1_0)
        model.set_noise(self._noise["chi1"], self._noise["chi2"], self.draw_chi3(num_classes))
        self.ae_optimizer = loop.make_optimizer(self.settings.ae_optimizer, self.ae_lr,
                                                self.settings.ae_adam_epsilon)
        self.ae_optimizer.build(model.theta1)
        self.model = model
        self.num_classes = int(num_classes)
        return model

    def make_optimizer(self, name=None, learning_rate=None):
        """theta2's optimizer, with --stobatch_adam_epsilon when it is Adam."""
        return loop.make_optimizer(name or self.config.optimizer,
                                   self.config.learning_rate if learning_rate is None
                                   else learning_rate, self.settings.adam_epsilon)

    def checkpoint_objects(self) -> dict:
        """The auto-encoder's optimizer (theta1 and the noise live in the model)."""
        return {"ae_optimizer": self.ae_optimizer}

    def certification_config(self) -> dict:
        b = self.budget
        d_cert = float(np.prod(self._noise["chi1"].shape[:2]))  # H*W (as in the code release)
        return {
            "mechanism": "stobatch", "sensitivity": b.delta_r, "batch_size": self.m,
            "epsilon1": b.eps1, "d_cert": d_cert,
            # Delta_r^h = beta * max column l1 norm of theta1 (Eq. 13); updated after training
            "delta_rh": float(b.beta * self._col_norm),
            "psi": self.settings.psi, "delta_rx_mode": self.settings.delta_rx_mode,
            "radius_psi_correction": self.settings.radius_psi_correction,
            "radius_divisor": self.settings.radius_divisor, "num_draws": self.settings.num_draws,
            "bound": "clopper_pearson", "alpha": 0.05,
            "passes": [["input_noise"], ["latent_noise"]],
            "budget": b.to_dict(),
        }

    def after_epoch(self, epoch: int, ledger) -> bool:
        """Refreshes the first layer's column norms (Delta_r^h) from the current theta1."""
        del epoch, ledger
        self._col_norm = models.first_layer_norms(self.model.encoder_conv.kernel.numpy())[
            "l1_cols"]
        return False

    def epoch_config_updates(self) -> dict:
        """The certification entry with Delta_r^h of the current theta1 (the run writes it)."""
        certification = self.certification_config()
        certification["first_layer_norms_final"] = models.first_layer_norms(
            self.model.encoder_conv.kernel.numpy())
        return {"certification": certification}

    # ------------------------------------------------------------------ one step

    def _attack_logits(self, model):
        def fn(x):
            # Alg. 1: f with chi2, BN in inference mode, input already x_bar
            return model.forward(x, training=False, input_noise=False, latent_noise=True)
        return fn

    def craft_adversarial(self, model, xs: tf.Tensor, mu: tf.Tensor, positions: tf.Tensor,
                          start_noise: tf.Tensor) -> tf.Tensor:
        """x_bar_adv from the adversarial-source rows at global `positions` (Eq. 7-8).

        Takes no labels: the attacks move away from the model's own predictions, so the
        true labels are never read while crafting (Eq. 7-8, no label leaking). The attack
        of each row (I-FGSM, MIM, Madry) follows from its position (the fixed 3-way split).

        Args:
            model: the StoBatchNet.
            xs: perturbed inputs x_bar of the rows.
            mu: the step's attack size mu_t (scalar).
            positions: the rows' positions in the adversarial-source batch of m.
            start_noise: uniform [-1, 1] values shaped like xs for Madry's random start.

        Returns:
            Adversarial examples (projected onto the mu-ball around xs, not range-clipped).
        """
        ids = attack_graph.ensemble_ids(positions, self.m)
        dtype = tf.as_dtype(model.compute_dtype)
        nb_iter = self.settings.attack_iters
        eps_iter = None  # mu / T for every row (Eq. 8)
        if self.settings.madry_eps_iter is not None:
            # --stobatch_madry_eps_iter: the Madry rows step by a fixed size (code release)
            eps_iter = tf.where(tf.equal(ids, attack_graph.MADRY),
                                tf.cast(self.settings.madry_eps_iter, dtype),
                                tf.cast(mu, dtype) / float(nb_iter))
        return attack_graph.craft(self._attack_logits(model), xs, mu, attack_ids=ids,
                                  nb_iter=nb_iter, eps_iter=eps_iter, start_noise=start_noise,
                                  dtype=dtype)

    def adversarial_source(self, model, xs: tf.Tensor) -> tf.Tensor:
        """The rows the attacks start from: x_bar (paper) or the raw x = x_bar - chi1/m.

        `--stobatch_adv_source=raw` follows the authors' code release, which crafts the
        adversarial examples from the noise-free images (issue 29 item 5).
        """
        if self.settings.adv_source == "noisy":
            return xs
        return xs - tf.cast(model.input_noise.fixed_noise, xs.dtype)

    def adversarial_input(self, model, xa: tf.Tensor) -> tf.Tensor:
        """The adversarial half's training input: its crafted rows with the chosen noise.

        Crafted from x_bar the rows already carry chi1/m; crafted from raw x they carry none.
        `--stobatch_adv_noise=train` makes them carry chi1/m (the paper's x_bar_adv),
        `zero` removes it (the authors' code feeds the adversarial branch zero noise).
        """
        carries = self.settings.adv_source == "noisy"
        wants = self.settings.adv_noise == "train"
        if carries == wants:
            return xa
        noise = tf.cast(model.input_noise.fixed_noise, xa.dtype)
        return xa + noise if wants else xa - noise

    def chi3_term_gradient(self, model) -> tuple:
        """This replica's share of the chi3 term and its gradient w.r.t. W_pi.

        StoBatch Theorem 3: -(1/m) sum_k chi3[:, k] . W_pi[:, k] enters the global
        objective once per update, so it is added on replica 0 only; summed over replicas
        its gradient is -chi3/m whatever the replica count.

        Returns:
            (term, gradient) for the calling replica.
        """
        w_pi = model.output_layer.kernel
        on_first = tf.cast(replica.is_first_replica(), w_pi.dtype)
        mode = self.settings.noise_term
        # linear_broadcast: the MNIST code adds its linear term to each of the K classes.
        times = float(w_pi.shape[-1]) if mode == "linear_broadcast" else 1.0
        with tf.GradientTape() as tape:
            term = losses.functional_mechanism_term(
                model.chi3, w_pi, divisor=self.m,
                mode="linear" if mode == "linear_broadcast" else mode) * on_first * times
        return term, tape.gradient(term, w_pi)

    def train_step(self, step_ctx, x, y):
        model, optimizer = self.model, self.optimizer
        ctx = tf.distribute.get_replica_context()
        num_rep = int(ctx.num_replicas_in_sync)
        if num_rep > 1:  # the global block, in the loop's order (contiguous uneven shards)
            x, y = _gather_block(ctx, x, y)
        rid = tf.cast(step_ctx.replica_id, tf.int64)
        m, micro, n_tr, xi = self.m, self.settings.micro_batches, self.settings.trainers, self.settings.xi
        groups = num_rep * micro
        dt = tf.as_dtype(model.compute_dtype)  # float32 unless --stobatch_dtype=float64
        x = tf.cast(x, dt)
        theta1, theta2 = model.theta1, model.theta2
        lat = tf.cast(model.latent_noise.fixed_noise, dt)
        g1 = [tf.zeros_like(v) for v in theta1]
        g2 = [tf.zeros_like(v) for v in theta2]
        sums = {k: tf.constant(0.0, dt) for k in ("loss", "ae_loss", "l1", "l2", "accuracy",
                                                  "adv_linf")}
        mu_log = tf.constant(0.0)
        # Craft every adversarial micro-batch first, all against the parameters and BN
        # statistics at the start of the step (as R M replicas would).
        parts = []
        for t in range(n_tr):
            base = 2 * m * t
            # mu_t from the step seed, identical on every replica
            u = tf.random.stateless_uniform([], step_ctx.step_seed(1 + t), dtype=tf.float32)
            mu = self.settings.mu_max * (1.0 - u)  # U(0, mu_max]
            mu_log += mu
            start_all = tf.cast(tf.random.stateless_uniform(
                tf.concat([[m], tf.shape(x)[1:]], 0), step_ctx.step_seed(1000 + t), -1.0, 1.0), dt)
            whole = None
            if num_rep > 1 and self.settings.bn_eval == "batch" and self.settings.bn_stats == "global":
                # The attacks' inference-mode BN then uses the moments of the whole
                # adversarial-source batch, as on one device: every replica (it holds the
                # block) crafts all m rows and keeps its own. Moments all-reduced inside the
                # attack loop are not possible (no collectives in a while loop).
                whole = self.craft_adversarial(
                    model, self.adversarial_source(model, x[base + m:base + 2 * m]),
                    tf.cast(mu, dt), tf.range(m), start_all)
            for j in range(micro):
                g = rid * micro + j
                lo = (g * m) // groups
                hi = ((g + 1) * m) // groups
                xb, yb = x[base + lo:base + hi], y[base + lo:base + hi]
                xs, ys = x[base + m + lo:base + m + hi], y[base + m + lo:base + m + hi]
                pos = tf.range(lo, hi)
                xs_src = self.adversarial_source(model, xs)
                if whole is None:
                    xa = self.craft_adversarial(model, xs_src, tf.cast(mu, dt), pos,
                                                tf.gather(start_all, pos))
                else:
                    xa = whole[lo:hi]
                parts.append((xb, yb, xs_src, ys, xa, self.adversarial_input(model, xa)))
        for xb, yb, xs, ys, xa_crafted, xa in parts:  # one micro-batch's gradients each
            yb1 = tf.one_hot(tf.cast(yb, tf.int32), self.num_classes, dtype=dt)
            ys1 = tf.one_hot(tf.cast(ys, tf.int32), self.num_classes, dtype=dt)
            with tf.GradientTape(persistent=True) as tape:
                hb = model.encode(xb, True) + lat
                ha = model.encode(xa, True) + lat
                # Eq. 6 on the benign and the adversarial batch (Alg. 1 line 12)
                r_bar = (losses.taylor_reconstruction_loss(model.reconstruct(hb), xb)
                         + losses.taylor_reconstruction_loss(model.reconstruct(ha), xa))
                r_bar = r_bar / float(m * n_tr)
                # theta2 never back-propagates into theta1
                zb = model.classify(tf.stop_gradient(hb), True)
                za = model.classify(tf.stop_gradient(ha), True)
                # Eq. 9 with the global normaliser m (1 + xi) N_tr
                l_bar = stobatch_losses.stobatch_adversarial_objective(zb, yb1, za, ys1, xi=xi,
                                                                       m=m * n_tr)
            for acc, grads in ((g1, tape.gradient(r_bar, theta1)),
                               (g2, tape.gradient(l_bar, theta2))):
                for i, gr in enumerate(grads):
                    if gr is not None:
                        acc[i] = acc[i] + gr
            del tape
            sums["loss"] += l_bar
            sums["ae_loss"] += r_bar
            sums["l1"] += (tf.reduce_sum(tf.nn.relu(zb) - tf.abs(zb) / 2 + zb ** 2 / 8)
                           / float(m * n_tr))
            sums["l2"] += tf.reduce_sum(zb * yb1) / float(m * n_tr)
            sums["accuracy"] += metrics.step_accuracy(zb, yb, m * n_tr, dt)
            sums["adv_linf"] += tf.reduce_sum(tf.reduce_max(
                tf.abs(tf.reshape(xa_crafted - xs, [tf.shape(xs)[0], -1])), 1)) / float(m * n_tr)
        noise_term, g_noise = self.chi3_term_gradient(model)
        w_pi = model.output_layer.kernel
        idx = [i for i, v in enumerate(theta2) if v is w_pi][0]
        g2[idx] = g2[idx] + g_noise
        self.ae_optimizer.apply_gradients(zip(g1, theta1))
        optimizer.apply_gradients(zip(g2, theta2))
        out = dict(sums)
        out["loss"] = sums["loss"] + noise_term
        out["noise_term"] = noise_term
        out = {k: tf.cast(v, tf.float32) for k, v in out.items()}  # logged values
        on_first = tf.cast(replica.is_first_replica(), tf.float32)
        out["mu_t"] = mu_log / float(n_tr) * on_first
        return out


def _gather_block(ctx, x: tf.Tensor, y: tf.Tensor) -> tuple:
    """Every replica's shard concatenated in replica order, on every replica.

    Built from SUM all-reduces (each replica writes its rows at its offset into zeros), which
    is exact and works under MultiWorkerMirroredStrategy, where `all_gather` of these uneven
    shards fails in this TensorFlow version.
    """
    num_rep = int(ctx.num_replicas_in_sync)
    rid = tf.cast(ctx.replica_id_in_sync_group, tf.int32)
    n = tf.shape(x)[0]
    sizes = ctx.all_reduce(tf.distribute.ReduceOp.SUM,
                           tf.one_hot(rid, num_rep, dtype=tf.float32) * tf.cast(n, tf.float32))
    sizes = tf.cast(tf.round(sizes), tf.int32)
    offset = tf.reduce_sum(sizes[:rid])
    total = tf.reduce_sum(sizes)
    index = (offset + tf.range(n))[:, None]
    full_x = tf.scatter_nd(index, x, tf.concat([[total], tf.shape(x)[1:]], 0))
    full_y = tf.scatter_nd(index, tf.cast(y, tf.float32), [total])
    full_x = ctx.all_reduce(tf.distribute.ReduceOp.SUM, full_x)
    full_y = ctx.all_reduce(tf.distribute.ReduceOp.SUM, full_y)
    return full_x, tf.cast(tf.round(full_y), y.dtype)

