"""StoBatch settings: the stobatch_* options (`StoBatchConfig`, their single declaration) and
the choices they take.
"""

from __future__ import annotations

from typing import Optional

from tfdp import options
from tfdp.papers.stobatch import models


PAIRINGS = ("alg4_fixed_pairs", "per_epoch_random", "release_reader")
BN_STATS = ("global", "per_microbatch")
NORM_MODES = ("paper_l1", "spectral_ref")
NOISE_TERMS = ("linear", "abs_mean", "linear_broadcast")
DTYPES = models.COMPUTE_DTYPES
ADV_SOURCES = ("noisy", "raw")
ADV_NOISES = ("train", "zero")
BN_AFFINES = ("trained", "frozen")
ATTACK_NETS = ("model", "release_unnormalised")


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

    bn_affine: str = options.field(
        "trained", "StoBatch: the batch norms' offset and gain: trained (default) or frozen "
        "(beta = 0, gamma = 1 for good: the MNIST code release, whose two optimisers' variable "
        "lists hold none of its batch norms' variables).", choices=BN_AFFINES)
    attack_net: str = options.field(
        "model", "StoBatch: the network the training attacks differentiate: model (Alg. 1: "
        "f with chi2, BN in inference mode) or release_unnormalised (the MNIST code release's "
        "second copy of the network, whose inference-mode batch norms have never-updated "
        "statistics and so normalise nothing; no latent noise, no clips; the fixed input "
        "noise added; needs --stobatch_adv_source=raw and the mnist architecture).",
        choices=ATTACK_NETS)
    attack_clip: bool = options.field(
        False, "StoBatch: clip the training attacks' rows to the data's value range at every "
        "step (the MNIST code release's CleverHans calls: clip_min=-1, clip_max=1); off: "
        "projected onto the mu-ball only (Eq. 8).")
    classifier_h: str = options.field(
        "shared", "StoBatch: the classifier's first hidden layer: shared (the paper's h_bar, "
        "as the auto-encoder's: clip(BN(ReLU(conv))) plus the latent noise) or "
        "release_pre_relu (the MNIST code release's classifier path: BN(ReLU(conv + latent "
        "noise)) without the clip; needs --stobatch_bn_eval=batch; its certificates are only "
        "claimed).", choices=models.CLASSIFIER_H)

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
        if self.attack_net == "release_unnormalised" and self.adv_source != "raw":
            raise ValueError("--stobatch_attack_net: release_unnormalised is the MNIST code "
                             "release's attack network, which crafts from the raw images; it "
                             "needs --stobatch_adv_source=raw")
        if self.attack_net == "release_unnormalised" and self.architecture not in ("auto",
                                                                                   "mnist"):
            raise ValueError(f"--stobatch_attack_net: release_unnormalised exists for the "
                             f"mnist architecture only, got --stobatch_architecture="
                             f"{self.architecture}")
        if self.classifier_h == "release_pre_relu" and self.bn_eval != "batch":
            raise ValueError("--stobatch_classifier_h: release_pre_relu normalises with batch "
                             "statistics only (the code release's); it needs "
                             "--stobatch_bn_eval=batch")
        if self.bn_stats == "global" and self.micro_batches > 1:
            raise ValueError("--stobatch_micro_batches: gradient accumulation normalises each "
                             "micro-batch alone; use --stobatch_bn_stats=per_microbatch "
                             "(docs/stobatch.md, \"Distribution\")")
