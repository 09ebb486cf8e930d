"""The robustness noise at conv1 (HGM Eq. 8) that Secure-SGD, Secure-SGD-AGM, PixelDP and
HGM_PixelDP share: its redistribution r, its scale, its draws and its certification entry.
"""

from __future__ import annotations

import math
from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from tfdp import mechanisms
from tfdp.papers.hgm import models as hgm_models
from tfdp.papers.hgm import redistribution
from tfdp.papers.hgm import release
from tfdp.papers.hgm import unsound as hgm_unsound
from tfdp.train.nonprivate import per_example_cross_entropy


# Ledger entry of r from a noise-free pre-training on the private data (no finite epsilon).
R_PRETRAIN_ENTRY = "hgm_r_nonprivate_pretrain"
_GAMMA_SALT = 7919  # folds the step seed into the robustness-noise stream


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
