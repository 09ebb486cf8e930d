"""Secure-SGD / HGM settings: the hgm_* options (`SecureSGDConfig`, their single declaration)
and the choices they take.
"""

from __future__ import annotations

from typing import Optional

from tfdp import options
from tfdp.papers.hgm import models as hgm_models
from tfdp.papers.hgm import redistribution
from tfdp.train import privatize


TRAIN_NOISE = ("fresh", "fixed_once")
CLIPPING = ("per_example", "batch_mean")
R_SOURCES = ("nonprivate_pretrain", "public_split", "uniform", "file")
# The code release's departures (tfdp.papers.hgm.release; docs/reproduce.md), each off by default.
NOISE_MIXTURES = ("hgm", "egm_hgm_half")
TEST_ACCURACY = ("noise_free", "fixed_training_noise")
PRETRAIN_STEPS = ("noise_free_adam", "batch_mean")
R_SCORES = ("abs_gradient", "abs_mean_sign")


@options.declare("hgm_")
class SecureSGDConfig(privatize.DPSGDSettings):
    """Secure-SGD / HGM / PixelDP settings (the hgm_* flags without the prefix): the single
    declaration of their types, defaults, help and checks; `validate` holds the rules that
    join several of them. `SecureSGDConfig(...).as_options()` is a `TrainConfig.options`
    mapping. The DP-SGD fields (l2_clip, noise_multiplier, accountant, sampling) apply to
    secure_sgd and secure_sgd_agm."""

    eps_r: Optional[float] = options.field(
        None, "Robustness budget eps_r > 0 (PixelDP w.r.t. input pixels; not a training-data "
        "budget). Default 4; pixeldp: 1 (needs eps_r <= 1).", check=options.positive)
    delta_r: float = options.field(1e-5, "Robustness delta_r in (0, 1).",
                                   check=options.open_unit)
    construction_bound: float = options.field(
        0.2, "Construction attack bound L (l_inf radius the noise is calibrated for, in the "
        "data's pixel units).", check=options.positive)
    r_source: Optional[str] = options.field(
        None, "Redistribution r: nonprivate_pretrain (HGM Eq. 7 from a noise-free "
        "pre-trained model on the private training data, as the paper does; r shapes the "
        "released model's noise, so the sound epsilon is infinite), public_split (the "
        "same pre-training on --hgm_r_public_size training records held out as public "
        "data, never trained on privately; sound), uniform, or file (--hgm_r_file). "
        "Default: public_split for secure_sgd (sound), nonprivate_pretrain for the "
        "non-private hgm_pixeldp; secure_sgd_agm and pixeldp always use uniform r.",
        choices=R_SOURCES)
    r_public_size: int = options.field(
        0, "Training records held out (a seeded random choice) as public data for "
        "--hgm_r_source=public_split; the private set and its accounting exclude them. "
        "0 (default): 10% of the training records, at most 1,000.", check=options.at_least(0))
    r_file: Optional[str] = options.field(
        None, ".npy file with K*r (the code release's convention: entries > 0 summing to K = "
        "the number of conv1 units).")
    beta: float = options.field(1.0, "Inflation rate beta of HGM Eq. 7 (0 gives uniform r).",
                                check=options.nonnegative)
    r_mix: float = options.field(0.0, "Weight lam of the uniform vector mixed into r.",
                                 check=options.unit_interval)
    r_floor: float = options.field(0.01, "Floor of r relative to 1/K.", check=options.below_one)
    pretrain_epochs: int = options.field(1, "Noise-free pre-training epochs for r.",
                                         check=options.at_least(1))
    pretrain_examples: int = options.field(5000, "Examples whose gradients give r.",
                                           check=options.at_least(1))
    sensitivity_mode: str = options.field(
        "layer_max", "Delta_f bound conv1 is kept within: layer_max (sound, paper form with the "
        "square root restored), layer_sum (sound, tighter), per_map (the paper's "
        "per-feature-map bound; not sound), code_spectral (the code release; not "
        "sound; both need --allow_unsound_certificates), or the l2 modes l2_fourier "
        "(conv1's l2 operator norm bounded from its FFT, Sedghi et al. 2019) and "
        "l2_patch (ceil(k/s) times the reshaped kernel's largest singular value), "
        "sound for l2 attacks (certify with tfdp-evaluate --attack_norm=2).",
        choices=redistribution.SENSITIVITY_MODES)
    sensitivity_target: float = options.field(
        1.0, "Delta_target: conv1 is reparametrised so that Delta_f <= this value.",
        check=options.positive)
    train_noise: str = options.field(
        "fresh", "Robustness noise in training: fresh per example and step, or fixed_once "
        "(Algorithm 1 / the code release: one draw, checkpointed).", choices=TRAIN_NOISE)
    model: str = options.field(
        "mnist", "Architecture: mnist or cifar10 (the paper's networks), small (CPU-sized), "
        "or release_mnist (the code release's MNIST network: FC 25 with dropout 0.5 instead "
        "of FC 256, truncated-normal kernels, biases 0.1).", choices=hgm_models.ARCHITECTURES)
    conv1: str = options.field(
        "normalised", "conv1: normalised (its effective kernel keeps Delta_f = "
        "--hgm_sensitivity_target, docs/hgm.md) or free (the code release: a plain "
        "convolution trained freely, so no sensitivity bound holds; needs "
        "--allow_unsound_certificates).", choices=hgm_models.CONV1_MODES)
    noise_mixture: str = options.field(
        "hgm", "Robustness noise: hgm (HGM Theorem 3, std sigma_r sqrt(K r_k)) or "
        "egm_hgm_half (the code release: L (E + H) / 2 with E ~ N(0, mult^2) per unit and "
        "H_k ~ N(0, (mult Delta M_k)^2), M = 8,192 r, Delta from the pre-trained conv1's "
        "largest singular value; needs --hgm_conv1=free and a pre-trained r).",
        choices=NOISE_MIXTURES)
    test_accuracy: str = options.field(
        "noise_free", "Test accuracy the run reports (per epoch and in metrics.json): "
        "noise_free (the network without robustness noise) or fixed_training_noise (the "
        "code release: the fixed training draw added at conv1, dropout off; needs "
        "--hgm_train_noise=fixed_once). The saved model is the same either way.",
        choices=TEST_ACCURACY)
    pretrain_step: str = options.field(
        "noise_free_adam", "Pre-training for r: noise_free_adam (--hgm_pretrain_epochs of "
        "Adam 1e-3 without any noise) or batch_mean (the code release: the run's batch-mean "
        "step, per-kernel clipping to --hgm_l2_clip, Gaussian gradient noise, --optimizer at "
        "--learning_rate, dropout on, no robustness noise; secure_sgd with "
        "--hgm_clipping=batch_mean).", choices=PRETRAIN_STEPS)
    pretrain_steps: int = options.field(
        0, "Steps of --hgm_pretrain_step=batch_mean (the code release: 4000); 0: "
        "--hgm_pretrain_epochs epochs.", check=options.at_least(0))
    r_score: str = options.field(
        "abs_gradient", "Score behind r: abs_gradient (HGM Eq. 7, mean |d loss / d h_k|^beta "
        "at conv1's pre-activation) or abs_mean_sign (the code release: |mean sign(d loss / "
        "d h_k)| at conv1's post-ReLU output, over --hgm_pretrain_examples examples). With "
        "--hgm_r_floor=0 and --hgm_r_mix=0 its zero entries are kept (only with "
        "--hgm_noise_mixture=egm_hgm_half).", choices=R_SCORES)
    max_steps: int = options.field(
        0, "Stop after this many training steps (0: no cap; the code release's step cap). "
        "The ledger charges the steps that ran.", check=options.at_least(0))
    clipping: str = options.field(
        "per_example", "Secure-SGD privacy: per_example DP-SGD, or batch_mean (the code "
        "release: per-layer clipping of the batch-mean gradient; NOT DP, the ledger's sound "
        "epsilon is then infinite).", choices=CLIPPING)
    noise_ramp_epochs: int = options.field(
        0, "pixeldp / hgm_pixeldp: ramp the training noise linearly from 0 to its full scale "
        "over this many epochs (PixelDP's optional ramp).", check=options.at_least(0))
    num_draws: int = options.field(2000, "Monte-Carlo draws N recorded for certification.",
                                   check=options.at_least(1))
    bound: str = options.field(
        "hoeffding", "Confidence bound recorded for certification (paper: hoeffding).",
        choices=("hoeffding", "clopper_pearson", "bernstein"))
    alpha: float = options.field(0.05, "Failure probability alpha = 1 - eta of certification.",
                                 check=options.open_unit)
    eps_cap: Optional[float] = options.field(
        None, "Largest eps' in the certificate search (default: none for HGM/AGM, 1 for the "
        "classical GM).", check=options.positive)

    def validate(self) -> None:
        """The rules that join settings: --hgm_r_file goes with --hgm_r_source=file; the
        code release's options that need one another."""
        if self.r_source == "file" and not self.r_file:
            raise ValueError("--hgm_r_file: required with --hgm_r_source=file")
        if self.r_file and self.r_source != "file":
            raise ValueError("--hgm_r_file: only used with --hgm_r_source=file")
        if self.test_accuracy == "fixed_training_noise" and self.train_noise != "fixed_once":
            raise ValueError("--hgm_test_accuracy: fixed_training_noise needs "
                             "--hgm_train_noise=fixed_once (there is no fixed draw otherwise)")
        if self.noise_mixture == "egm_hgm_half" and self.conv1 != "free":
            raise ValueError("--hgm_noise_mixture: egm_hgm_half takes its Delta from the raw "
                             "pre-trained conv1 kernel; it needs --hgm_conv1=free")
        if self.pretrain_step == "batch_mean" and self.clipping != "batch_mean":
            raise ValueError("--hgm_pretrain_step: batch_mean runs the batch-mean step; it needs "
                             "--hgm_clipping=batch_mean")
        if self.pretrain_steps and self.pretrain_step != "batch_mean":
            raise ValueError("--hgm_pretrain_steps: only with --hgm_pretrain_step=batch_mean "
                             "(the Adam pre-training runs --hgm_pretrain_epochs)")
        keeps_zeros = (self.r_score == "abs_mean_sign" and self.r_floor == 0.0
                       and self.r_mix == 0.0)
        if keeps_zeros and self.noise_mixture != "egm_hgm_half":
            raise ValueError("--hgm_r_floor: 0 with --hgm_r_score=abs_mean_sign and "
                             "--hgm_r_mix=0 leaves zero entries in r, which only "
                             "--hgm_noise_mixture=egm_hgm_half can use")
