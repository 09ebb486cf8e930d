"""Secure-SGD (HGM, IJCAI 2019) and its baselines: Secure-SGD-AGM, PixelDP, HGM_PixelDP.

All four put Gaussian robustness noise gamma on the first convolution's pre-activation
(HGM Eq. 8) and record a certification entry (HGM Lemma 1, Eq. 4, 10) in config.json:

| method           | training                         | robustness noise                      |
|------------------|----------------------------------|---------------------------------------|
| `secure_sgd`     | per-example DP-SGD (HGM Alg. 1)  | HGM, sigma_r = mult_HGM Delta_f L, r  |
| `secure_sgd_agm` | per-example DP-SGD               | AGM (Balle & Wang), uniform r         |
| `pixeldp`        | non-private                      | classical GM, eps_r <= 1, uniform r   |
| `hgm_pixeldp`    | non-private                      | HGM with r, any eps_r                 |

The privacy of the training data is the DP-SGD ledger entry only; the robustness noise is
a certification parameter (PixelDP with respect to input pixels) and never counted as
privacy (docs/hgm.md, "Methods").
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from tfdp import accounting, mechanisms, options
from tfdp.papers.hgm import models as hgm_models
from tfdp.papers.hgm import redistribution
from tfdp.papers.hgm import release
from tfdp.papers.hgm import unsound as hgm_unsound
from tfdp.train import privatize
from tfdp.train.base import Method
from tfdp.train.dpsgd import DPSGD
from tfdp.train.metrics import step_metrics
from tfdp.train.nonprivate import per_example_cross_entropy

TRAIN_NOISE = ("fresh", "fixed_once")
CLIPPING = ("per_example", "batch_mean")
R_SOURCES = ("nonprivate_pretrain", "public_split", "uniform", "file")
# The code release's departures (tfdp.papers.hgm.release; docs/reproduce.md), each off by default.
NOISE_MIXTURES = ("hgm", "egm_hgm_half")
TEST_ACCURACY = ("noise_free", "fixed_training_noise")
PRETRAIN_STEPS = ("noise_free_adam", "batch_mean")
R_SCORES = ("abs_gradient", "abs_mean_sign")
# Ledger entry of r from a noise-free pre-training on the private data (no finite epsilon).
R_PRETRAIN_ENTRY = "hgm_r_nonprivate_pretrain"
_GAMMA_SALT = 7919  # folds the step seed into the robustness-noise stream

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


OPTIONS = SecureSGDConfig.OPTIONS  # the hgm_* flags (tfdp-train defines them from this)

_HGM_DEFAULTS = {"value_range": (0.0, 1.0)}


class _RobustnessNoise:
    """Robustness noise at conv1 (HGM Eq. 8), shared by the four methods.

    Subclasses set `mechanism` ("hgm", "agm" or "gm") and `allow_r` (whether a non-uniform
    redistribution may be used).
    """

    mechanism = "hgm"
    allow_r = True
    nonprivate = False
    default_eps_r = 4.0

    @staticmethod
    def _noisy_mean_loss_gradients(model, x, y, gamma, global_batch_size: int):
        """Loss (this replica's share of the global mean), logits and gradients of the
        trainable variables, with the robustness noise `gamma` added at conv1."""
        with tf.GradientTape() as tape:
            logits = hgm_models.forward_with_noise(model, x, gamma, training=True)
            loss = tf.nn.compute_average_loss(per_example_cross_entropy(y, logits),
                                              global_batch_size=global_batch_size)
        return loss, logits, tape.gradient(loss, model.trainable_variables)

    def _init_robust(self) -> None:
        self._public: Optional[tuple] = None
        self.r: Optional[np.ndarray] = None
        self.r_stats: dict = {}
        self.h1_shape: Optional[tuple] = None
        self._steps_per_epoch = 1
        self._noise_std: Optional[np.ndarray] = None
        self._release_delta: Optional[float] = None  # --hgm_noise_mixture=egm_hgm_half

    @property
    def eps_r(self) -> float:
        """--hgm_eps_r, or this method's default (4; pixeldp: 1)."""
        eps_r = self.settings.eps_r
        return self.default_eps_r if eps_r is None else eps_r

    @property
    def r_source(self) -> str:
        """--hgm_r_source, or this method's default.

        Secure-SGD claims a finite epsilon, so its default r source is the sound one; the
        non-private HGM_PixelDP has no privacy to lose and pre-trains on its training data.
        """
        source = self.settings.r_source
        if source is not None:
            return source
        return ("uniform" if not self.allow_r else
                "nonprivate_pretrain" if self.nonprivate else "public_split")

    # ------------------------------------------------------------------ validation

    def _validate_robust(self) -> None:
        settings = self.settings  # each setting is checked when made; these rules need the method
        if self.mechanism == "gm" and self.eps_r > 1.0:
            raise ValueError(f"--hgm_eps_r: the classical Gaussian mechanism of pixeldp needs "
                             f"eps_r <= 1 (HGM Theorem 1), got {self.eps_r!r}")
        if not self.allow_r and self.r_source != "uniform":
            raise ValueError(f"--hgm_r_source: {self.name} uses uniform r (HGM paper), got "
                             f"{self.r_source!r}")
        if self.r_source == "file":
            self._load_r_file()  # checks the values before any work
        if settings.noise_ramp_epochs and not self.nonprivate:
            raise ValueError("--hgm_noise_ramp_epochs: a number >= 0, only for pixeldp and "
                             f"hgm_pixeldp, got {settings.noise_ramp_epochs!r}")
        if settings.noise_mixture != "hgm" and (
                self.mechanism != "hgm"
                or self.r_source not in ("nonprivate_pretrain", "public_split")):
            raise ValueError(f"--hgm_noise_mixture: {settings.noise_mixture} needs the HGM "
                             "mechanism and r from a pre-training (--hgm_r_source="
                             f"nonprivate_pretrain or public_split), got {self.name} with "
                             f"r_source {self.r_source!r}")
        if settings.pretrain_step == "batch_mean" and self.nonprivate:
            raise ValueError(f"--hgm_pretrain_step: batch_mean runs Secure-SGD's batch-mean "
                             f"step; {self.name} has none")
        unsound = hgm_unsound.release_unsound_options(
            {"hgm_conv1": settings.conv1, "hgm_noise_mixture": settings.noise_mixture})
        if unsound and not self.config.common.allow_unsound_certificates:
            raise ValueError(f"--allow_unsound_certificates: {', '.join(unsound)} leaves "
                             "conv1's sensitivity unbounded, so its certificates are not "
                             "sound; pass --allow_unsound_certificates to reproduce the code "
                             "release (they are reported as claimed)")
        low, high = self.config.value_range
        if settings.construction_bound >= high - low:
            raise ValueError(f"--hgm_construction_bound: {settings.construction_bound} is not "
                             f"smaller than the pixel range {low}..{high}")

    def _load_r_file(self) -> np.ndarray:
        try:
            kr = np.asarray(np.load(self.settings.r_file), np.float64)
        except (OSError, ValueError) as e:
            raise ValueError(f"--hgm_r_file: cannot read {self.settings.r_file!r}: {e}") from None
        k = kr.size
        if k == 0 or not np.all(np.isfinite(kr)) or np.any(kr <= 0):
            raise ValueError("--hgm_r_file: entries must be finite and > 0")
        if abs(float(kr.sum()) - k) > 1e-6 * k:
            raise ValueError(f"--hgm_r_file: K*r must sum to K = {k} (mean 1), got sum "
                             f"{float(kr.sum())!r}")
        return kr / k

    # ------------------------------------------------------------------ calibration

    def robustness_multiplier(self) -> float:
        """sigma_r / (Delta_f L) of the chosen mechanism."""
        if self.mechanism == "hgm":  # HGM Theorem 2/3, Alg. 1 line 3, Eq. 10
            return mechanisms.hgm_multiplier(epsilon=self.eps_r, delta=self.settings.delta_r)
        if self.mechanism == "agm":  # Balle & Wang 2018 (the HGM paper's AGM baseline)
            return mechanisms.analytic_gaussian_sigma(epsilon=self.eps_r,
                                                      delta=self.settings.delta_r,
                                                      sensitivity=1.0)
        # classical GM, PixelDP (HGM Theorem 1): sqrt(2 ln(1.25/delta_r)) / eps_r
        return mechanisms.classical_gaussian_multiplier(self.settings.delta_r) / self.eps_r

    def robustness_sigma(self) -> float:
        """sigma_r = multiplier * Delta_target * L (Delta_f = Delta_target by construction)."""
        return self.robustness_multiplier() * self.settings.sensitivity_target * self.settings.construction_bound

    # ------------------------------------------------------------------ setup

    def public_split_size(self, num_train: int) -> int:
        if self.r_source != "public_split":
            return 0
        if self.settings.r_public_size:
            return self.settings.r_public_size
        return max(1, min(1000, int(num_train) // 10))

    def set_public_data(self, x_public: np.ndarray, y_public: np.ndarray) -> None:
        self._public = (x_public, y_public)

    def _record_r_source(self, ledger) -> None:
        """The ledger entry of r's source: r from private data without noise is unbounded."""
        if self.r_source != "nonprivate_pretrain":
            return  # uniform, a file, or a public split: independent of the private records
        if self.settings.pretrain_step == "batch_mean":
            # HGM code release: the pre-training runs the (not DP) batch-mean step, and r and
            # the noise scale come from noise-free gradients and the pre-trained kernel.
            ledger.add(
                R_PRETRAIN_ENTRY, mechanism="none (batch-mean pre-training, not DP)",
                epsilon=math.inf, claimed_epsilon=0.0, protects="training records",
                covers="setup", relation="add_remove",
                note=("--hgm_r_source=nonprivate_pretrain --hgm_pretrain_step=batch_mean (HGM "
                      "code release): the model behind r is pre-trained on the private data "
                      "with the batch-mean step, whose influence per record is not bounded, "
                      "and r (and with --hgm_noise_mixture=egm_hgm_half the noise scale) is "
                      "computed from its noise-free gradients and kernel; they set the noise "
                      "inside the released model, so no finite epsilon covers the run (the "
                      "release does not account for it: claimed 0)."))
            return
        ledger.add(
            R_PRETRAIN_ENTRY, mechanism="none (noise-free pre-training)", epsilon=math.inf,
            claimed_epsilon=0.0, protects="training records", covers="setup",
            relation="add_remove",
            note=("--hgm_r_source=nonprivate_pretrain: the redistribution r (HGM Eq. 7) comes "
                  "from a model pre-trained WITHOUT noise on the private training data, and r "
                  "sets the noise scales inside the released model, so no finite epsilon "
                  "covers the run (the paper does not account for it: claimed 0). Use "
                  "--hgm_r_source=public_split (or uniform, or file) for a sound epsilon."))

    def _setup_robust(self, data_spec, rng: np.random.Generator) -> None:
        x_train, y_train = data_spec.x_train, data_spec.y_train
        if self.r_source == "public_split":
            if self._public is None:
                raise ValueError("--hgm_r_source=public_split: the run gave no public split")
            x_train, y_train = self._public  # held out of the private set by the run
        input_shape = tuple(int(d) for d in x_train.shape[1:])
        self.h1_shape = hgm_models.h1_shape(self.settings.model, input_shape)
        self._steps_per_epoch = max(1, len(x_train) // self.config.batch_size)
        if self.r_source == "uniform":
            self.r = mechanisms.uniform_redistribution(self.h1_shape)
            self.r_stats = {}
            return
        if self.r_source == "file":
            r = self._load_r_file()
            if r.size != int(np.prod(self.h1_shape)):
                raise ValueError(f"--hgm_r_file: holds {r.size} entries, conv1 has "
                                 f"{int(np.prod(self.h1_shape))} units {self.h1_shape}")
            self.r = mechanisms.check_redistribution(r.reshape(self.h1_shape), "r")
            self.r_stats = {"file": self.settings.r_file}
            return
        num_classes = max(int(np.max(y_train)) + 1, 2)
        keras.utils.set_random_seed(int(rng.integers(0, 2**31 - 1)))

        def build():
            return hgm_models.build_model(self.settings.model, input_shape, num_classes, sigma=0.0,
                                          sensitivity_mode=self.settings.sensitivity_mode,
                                          target=self.settings.sensitivity_target, seed=0, noise_free=True,
                                          conv1=self.settings.conv1)

        result = redistribution.pretrain_redistribution(
            build, hgm_models.H1_LAYER, hgm_models.NOISE_LAYER, x_train, y_train,
            epochs=self.settings.pretrain_epochs, batch_size=self.config.batch_size, beta=self.settings.beta,
            mix=self.settings.r_mix, floor=self.settings.r_floor, num_score_examples=self.settings.pretrain_examples,
            rng=rng, **self._release_pretrain_args(x_train, y_train))
        self.r = result.r.reshape(self.h1_shape)
        if self.settings.noise_mixture == "egm_hgm_half":
            # Private state (checkpointed, never in config.json): it sets the noise scale.
            self._release_delta = release.pretrained_delta(result.kernel, self.r)
        stats = dict(result.stats)
        if self.settings.pretrain_step == "batch_mean":
            stats.pop("pretrain_epochs", None)
            stats.update(pretrain_step="batch_mean", pretrain_steps=self._pretrain_steps(
                len(x_train)))
        if self.settings.r_score != "abs_gradient":
            stats.update(score=self.settings.r_score)
        accuracy = stats.pop("pretrain_train_accuracy", None)
        if self.r_source == "public_split":
            # Computed on the public split only: not a statistic of the private data.
            stats.update(pretrain_public_accuracy=accuracy, public_records=int(len(x_train)))
        # nonprivate_pretrain: the pre-training accuracy is a non-private statistic of the
        # training data; it is not recorded anywhere (DESIGN principle 8).
        self.r_stats = stats

    def _pretrain_steps(self, num_records: int) -> int:
        """Steps of the batch-mean pre-training: --hgm_pretrain_steps, else whole epochs."""
        return self.settings.pretrain_steps or (
            self.settings.pretrain_epochs * max(1, num_records // self.config.batch_size))

    def _release_pretrain_args(self, x_train: np.ndarray, y_train: np.ndarray) -> dict:
        """`pretrain_redistribution`'s hooks for the code release's options (none by default)."""
        settings, args = self.settings, {}
        if settings.pretrain_step == "batch_mean":
            def pretrain(model, rng):
                release.pretrain_batch_mean(
                    model, x_train, y_train, steps=self._pretrain_steps(len(x_train)),
                    batch_size=self.config.batch_size, l2_clip=settings.l2_clip,
                    noise_multiplier=self.noise_multiplier, optimizer=self.make_optimizer(),
                    rng=rng)
            args["pretrain_fn"] = pretrain
        if settings.r_score == "abs_mean_sign":
            args["score_fn"] = release.abs_mean_sign_scores
            args["allow_zero"] = settings.noise_mixture == "egm_hgm_half"
        return args

    def _robust_state(self) -> dict:
        state = {"r": np.asarray(self.r, np.float64), "h1_shape": np.asarray(self.h1_shape),
                 "steps_per_epoch": np.int64(self._steps_per_epoch)}
        if self._release_delta is not None:
            state["release_delta"] = np.float64(self._release_delta)
        return state

    def _restore_robust(self, state) -> None:
        self.r = np.asarray(state["r"], np.float64)
        self.h1_shape = tuple(int(d) for d in state["h1_shape"])
        self._steps_per_epoch = int(state["steps_per_epoch"])
        if "release_delta" in state:
            self._release_delta = float(state["release_delta"])

    # ------------------------------------------------------------------ model

    def _noise_seed(self) -> Optional[int]:
        # From the run's secret key (never from --seed directly); saved models leave it out.
        seed = self.layer_seed
        if seed is None:
            return None
        words = np.random.SeedSequence([int(seed), 11]).generate_state(2, np.uint64)
        return (int(words[0]) << 64) | int(words[1])  # a 128-bit layer key

    def noise_layer_scale(self) -> tuple[float, Optional[np.ndarray]]:
        """(sigma, r) of the robustness noise layer: HGM's, or the code release's mixture
        (`release.mixture_stddevs`) written as an HGM layer's sigma and r."""
        r = None if self.r_source == "uniform" else self.r
        if self.settings.noise_mixture == "hgm":
            return self.robustness_sigma(), r
        if self._release_delta is None or self.r is None:
            raise RuntimeError("noise_layer_scale: --hgm_noise_mixture=egm_hgm_half needs setup "
                               "(the pre-trained r and Delta) first")
        std = release.mixture_stddevs(self.robustness_multiplier(), self._release_delta,
                                      np.asarray(self.r).reshape(self.h1_shape),
                                      self.settings.construction_bound)
        return release.layer_scale(std)

    def _build_robust(self, input_shape, num_classes):
        r = None if self.r_source == "uniform" else self.r
        sigma, noise_r = self.noise_layer_scale()
        model = hgm_models.build_model(
            self.settings.model, input_shape, num_classes, sigma=sigma,
            r=r if self.settings.conv1 == "normalised" else None, noise_r=noise_r,
            noise_mode="once" if self.settings.train_noise == "fixed_once" else "per_example",
            sensitivity_mode=self.settings.sensitivity_mode, target=self.settings.sensitivity_target,
            seed=self._noise_seed(), conv1=self.settings.conv1)
        model(tf.zeros((1,) + tuple(input_shape)), training=False)
        self._noise_std = model.get_layer(hgm_models.NOISE_LAYER).noise_scale.astype(np.float32)
        return model

    def accuracy_model(self, model):
        """What the run's test accuracy scores: the model (noise-free at inference), or with
        --hgm_test_accuracy=fixed_training_noise the network with the fixed training draw
        added at conv1 and dropout off (the code release's benign accuracy)."""
        if self.settings.test_accuracy == "noise_free":
            return model
        fixed = model.get_layer(hgm_models.NOISE_LAYER).fixed_noise

        def with_training_noise(x, training=False):
            del training  # always inference mode (dropout off), as the release evaluates
            return hgm_models.forward_with_noise(model, x, tf.convert_to_tensor(fixed),
                                                 training=False)
        return with_training_noise

    def max_steps(self):
        """The method's own step plan, capped at --hgm_max_steps when it is set."""
        steps = super().max_steps()
        cap = self.settings.max_steps
        if not cap:
            return steps
        return cap if steps is None else min(int(steps), cap)

    def draw_gamma(self, ctx, model, batch: tf.Tensor) -> tf.Tensor:
        """This step's robustness noise gamma for `batch` examples (inside a training step).

        "fresh": an independent N(0, sigma_r^2 diag(K r)) draw per example and step (tfdp's
        default, docs/hgm.md), from the run's checkpointed step seed with the replica id folded in.
        "fixed_once": the draw stored in the noise layer (Algorithm 1 line 3), broadcast.
        """
        if self.settings.train_noise == "fixed_once":
            fixed = model.get_layer(hgm_models.NOISE_LAYER).fixed_noise
            return tf.broadcast_to(tf.convert_to_tensor(fixed),
                                   tf.concat([[batch], tf.constant(self.h1_shape)], 0))
        seed = ctx.replica_seed(_GAMMA_SALT)
        shape = tf.concat([[batch], tf.constant(self.h1_shape, tf.int32)], 0)
        return mechanisms.tf_gaussian(shape, self._noise_std, seed=seed,
                                      draw_dtype=tf.float32)

    # ------------------------------------------------------------------ certification

    def certification_config(self) -> dict:
        mech = {"hgm": "hgm", "agm": "agm", "gm": "pixeldp_gaussian"}[self.mechanism]
        release_options = {name: getattr(self.settings, name) for name, paper in (
            ("conv1", "normalised"), ("noise_mixture", "hgm"),
            ("test_accuracy", "noise_free")) if getattr(self.settings, name) != paper}
        sound = (self.settings.sensitivity_mode in redistribution.SOUND_SENSITIVITY_MODES
                 and "conv1" not in release_options and "noise_mixture" not in release_options)
        k = None if self.h1_shape is None else int(np.prod(self.h1_shape))
        cert = {
            "mechanism": mech, "construction_bound": self.settings.construction_bound, "epsilon": self.eps_r,
            "delta": self.settings.delta_r, "sigma": self.robustness_sigma(),
            "sigma_multiplier": self.robustness_multiplier(),
            "sensitivity": self.settings.sensitivity_target, "sensitivity_mode": self.settings.sensitivity_mode,
            "sensitivity_sound": sound, "noised_layer": hgm_models.H1_LAYER,
            "layer": hgm_models.NOISE_LAYER, "num_units": k,
            "h1_shape": None if self.h1_shape is None else list(self.h1_shape),
            "redistribution": self.r_source, "r_stats": dict(self.r_stats),
            "r_file": "checkpoints/setup_state.npz (key r)",
            "train_noise": self.settings.train_noise, "test_noise": "fresh per Monte-Carlo draw",
            "norm": redistribution.sensitivity_norm(self.settings.sensitivity_mode),
            "num_draws": self.settings.num_draws, "alpha": self.settings.alpha,
            "bound": self.settings.bound,
            "note": ("sigma_r = multiplier * sensitivity * construction_bound; conv1 is "
                     "normalised to Delta_f = sensitivity (docs/hgm.md). " + (
                         "" if sound else "The sensitivity mode is NOT a sound l_inf bound: "
                         "these certificates are as published, not formally certified.")),
        }
        if self.settings.eps_cap is not None:
            cert["eps_cap"] = self.settings.eps_cap
        if release_options:
            # The code release's options (docs/reproduce.md); absent at the paper's defaults.
            cert["release_options"] = release_options
            if "conv1" in release_options or "noise_mixture" in release_options:
                cert["note"] = (
                    "The code release's options " + ", ".join(
                        f"--hgm_{k}={v}" for k, v in release_options.items())
                    + ": conv1 is trained freely, so no Delta_f bound holds and the noise "
                    "is not calibrated to one (sigma here is the HGM value for Delta_f = "
                    "sensitivity). These certificates are as published, not formally "
                    "certified.")
        return cert


class SecureSGD(_RobustnessNoise, DPSGD):
    """Secure-SGD (HGM Algorithm 1): HGM robustness noise + per-example DP-SGD."""

    name = "secure_sgd"
    mechanism = "hgm"
    allow_r = True
    default_flags = {"epochs": 5, "batch_size": 128, "learning_rate": 0.1, "optimizer": "sgd",
                     "epsilon": 2.0, "delta": 1e-5, **_HGM_DEFAULTS}

    settings_class = SecureSGDConfig

    def __init__(self, config):
        super().__init__(config)  # DPSGD reads the DP-SGD fields of SecureSGDConfig (hgm_*)
        self._init_robust()

    def validate(self) -> None:
        super().validate()
        self._validate_robust()

    def setup(self, data_spec, ledger, rng, strategy=None) -> None:
        self._setup_privacy(data_spec, ledger, rng, strategy)
        self._setup_robust(data_spec, rng)
        self._record_r_source(ledger)

    def _setup_privacy(self, data_spec, ledger, rng, strategy=None) -> None:
        # The DP-SGD spend (sound, Poisson, RDP/PLD) is the whole privacy cost; the loop
        # records it from the executed steps (`step_spend`).
        super().setup(data_spec, ledger, rng, strategy)

    def step_spend(self) -> accounting.StepSpend:
        spend = super().step_spend()
        if self.settings.clipping == "batch_mean":
            # The code release's batch-mean clipping: the Poisson number is only claimed.
            spend = dataclasses.replace(
                spend, unbounded=True,
                note=("--hgm_clipping=batch_mean (HGM code release): the batch-mean gradient "
                      "is clipped per layer and biases are not clipped, so one example's "
                      "influence is not bounded by C: no finite epsilon. Claimed: the DP-SGD "
                      "accountant's value. " + spend.note))
        return spend

    def setup_state(self) -> dict:
        return {**super().setup_state(), **self._robust_state()}

    def restore_setup_state(self, state) -> None:
        super().restore_setup_state(state)
        self._restore_robust(state)

    def build_model(self, input_shape, num_classes):
        return self._build_robust(input_shape, num_classes)

    # Secure-SGD's step runs the vectorized path (it passes no clipping and no row mask):
    # no padded lots and no any-size trace, whatever --dpsgd_clipping says.
    masks_padding_rows = False

    def clipping_path(self) -> str:
        return "vectorized"

    def train_step(self, ctx, x, y):
        model = self.model
        variables = model.trainable_variables
        batch = tf.shape(x)[0]
        gamma = self.draw_gamma(ctx, model, batch)
        if self.settings.clipping == "batch_mean":
            return self._batch_mean_step(ctx, x, y, gamma)
        in_shape = [int(d) for d in x.shape[1:]]
        dx = int(np.prod(in_shape))
        # One packed row per example, so the shared privatiser's per-example map carries
        # each example's own gamma_i alongside x_i.
        packed = tf.concat([tf.reshape(x, [batch, dx]),
                            tf.reshape(tf.cast(gamma, x.dtype), [batch, -1])], axis=1)
        h1 = [int(d) for d in self.h1_shape]

        def example_loss(pi, yi):
            xi = tf.reshape(pi[:, :dx], [1] + in_shape)
            gi = tf.reshape(pi[:, dx:], [1] + h1)
            logits = hgm_models.forward_with_noise(model, xi, gi, training=True)
            return per_example_cross_entropy(yi, logits)[0], logits

        grads, metrics = privatize.dpsgd_gradients(
            ctx, model, variables, packed, y, example_loss, l2_clip=self.settings.l2_clip,
            noise_multiplier=self.noise_multiplier)
        self.optimizer.apply_gradients(zip(grads, variables))
        return metrics

    def _batch_mean_step(self, ctx, x, y, gamma):
        # HGM code release (docs/hgm.md): clip the batch-mean gradient of each kernel to C,
        # biases unclipped, then N(0, (sigma C)^2) / m. Ledger: no finite epsilon.
        model, global_batch_size = self.model, ctx.global_batch_size
        variables = model.trainable_variables
        loss, logits, grads = self._noisy_mean_loss_gradients(model, x, y, gamma,
                                                              global_batch_size)
        grads = release.clip_kernels(grads, variables, self.settings.l2_clip)
        grads = privatize.add_gaussian_noise_once(
            ctx, grads, self.noise_multiplier * self.settings.l2_clip / float(global_batch_size))
        self.optimizer.apply_gradients(zip(grads, variables))
        return step_metrics(loss, logits, y, global_batch_size)


class SecureSGDAGM(SecureSGD):
    """Secure-SGD with the analytic Gaussian mechanism and uniform r (the HGM paper's baseline)."""

    name = "secure_sgd_agm"
    mechanism = "agm"
    allow_r = False


class HGMPixelDP(_RobustnessNoise, Method):
    """HGM_PixelDP (the HGM paper's variant): non-private SGD with HGM noise, r and any eps_r."""

    name = "hgm_pixeldp"
    mechanism = "hgm"
    allow_r = True
    nonprivate = True
    default_flags = {"epochs": 5, "batch_size": 128, "learning_rate": 1e-3,
                     "optimizer": "adam", **_HGM_DEFAULTS}

    settings_class = SecureSGDConfig

    def __init__(self, config):
        super().__init__(config)
        self._init_robust()

    def validate(self) -> None:
        if self.config.epsilon is not None:
            raise ValueError(f"--epsilon: {self.name} trains without privacy; do not set "
                             "--epsilon")
        self._validate_robust()

    def setup(self, data_spec, ledger, rng, strategy=None) -> None:
        del strategy  # non-private: no DP-SGD entry (robustness noise is not privacy)
        self._setup_robust(data_spec, rng)
        self._record_r_source(ledger)

    def setup_state(self) -> dict:
        return self._robust_state()

    def restore_setup_state(self, state) -> None:
        self._restore_robust(state)

    def build_model(self, input_shape, num_classes):
        return self._build_robust(input_shape, num_classes)

    def train_step(self, ctx, x, y):
        model, optimizer, global_batch_size = self.model, self.optimizer, ctx.global_batch_size
        gamma = self.draw_gamma(ctx, model, tf.shape(x)[0])
        if self.settings.noise_ramp_epochs:
            # PixelDP's optional ramp: the noise grows linearly to full scale.
            ramp_steps = float(self.settings.noise_ramp_epochs * self._steps_per_epoch)
            done = tf.cast(optimizer.iterations, tf.float32) + 1.0
            gamma = gamma * tf.cast(tf.minimum(1.0, done / ramp_steps), gamma.dtype)
        loss, logits, grads = self._noisy_mean_loss_gradients(model, x, y, gamma,
                                                              global_batch_size)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return step_metrics(loss, logits, y, global_batch_size)


class PixelDP(HGMPixelDP):
    """PixelDP (Lecuyer et al.; HGM baseline): non-private SGD, classical GM noise, eps_r <= 1."""

    name = "pixeldp"
    mechanism = "gm"
    allow_r = False
    default_eps_r = 1.0
