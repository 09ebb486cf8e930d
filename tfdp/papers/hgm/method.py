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

import numpy as np
import tensorflow as tf

from tfdp import accounting
from tfdp.papers.hgm import models as hgm_models
from tfdp.papers.hgm import release
from tfdp.papers.hgm.robustness import _RobustnessNoise
from tfdp.papers.hgm.settings import SecureSGDConfig
from tfdp.train import privatize
from tfdp.train.base import Method
from tfdp.train.dpsgd import DPSGD
from tfdp.train.metrics import step_metrics
from tfdp.train.nonprivate import per_example_cross_entropy

# The settings are declared in tfdp.papers.hgm.settings, the robustness noise the four
# methods share is tfdp.papers.hgm.robustness.
OPTIONS = SecureSGDConfig.OPTIONS  # the hgm_* flags (tfdp-train defines them from this)

_HGM_DEFAULTS = {"value_range": (0.0, 1.0)}


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
