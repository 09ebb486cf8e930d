"""AdLM and ILM trainers: private relevance, adaptive input noise, functional-mechanism Taylor loss."""

from __future__ import annotations

import math
import os
from typing import Any, Mapping

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from tfdp import losses, mechanisms, rundir
from tfdp.papers.adlm import losses as adlm_losses
from tfdp.papers.adlm import relevance
from tfdp.papers.adlm import models as adlm_models
from tfdp.papers.adlm.budgets import (delta_h0, per_record_epsilon_inputs,
                                      per_record_epsilon_labels)
from tfdp.papers.adlm.settings import _DEFAULT_FLOOR, _DEFAULT_SPLIT, _LINEAR_FM, AdLMConfig
from tfdp.train import metrics
from tfdp.train.base import Method, StepContext

# The settings are declared in tfdp.papers.adlm.settings.
OPTIONS = AdLMConfig.OPTIONS  # the adlm_* flags (tfdp-train defines them from this)


class AdLM(Method):
    """Adaptive Laplace Mechanism (Phan et al., ICDM 2017), corrected version.

    setup: trains a non-private auxiliary model, computes LRP relevances of every training
    record, releases their average with Laplace noise (eps1), derives per-feature budgets
    (Eq. 16) and draws the noise that is drawn once. train_step: perturbs the inputs of the
    first affine layer (eps2, mode --adlm_input_noise) and minimises the second-order Taylor
    loss with functional-mechanism noise (eps3, mode --adlm_fm_mode). The network and its
    saved model are noise free: noise is added in train_step only.
    """

    name = "adlm"
    adaptive = True
    settings_class = AdLMConfig
    # Generic-flag defaults (not from the paper): small enough for the embedded sample. The
    # noise-mode defaults are paper-literal; flags/adlm/*.flags hold the tested settings.
    default_flags = {"epochs": 3, "batch_size": 250, "learning_rate": 1e-2, "optimizer": "adam",
                     "epsilon": 1.0, "value_range": (0.0, 1.0)}

    def __init__(self, config):
        super().__init__(config)
        self._state: dict[str, np.ndarray] = {}
        self._info: dict[str, Any] = {}
        self._public: tuple[np.ndarray, np.ndarray] | None = None

    # ------------------------------------------------------------------ options

    def _architecture(self, input_shape=None) -> str:
        shape = input_shape or ((32, 32, 3) if self.config.dataset == "cifar10" else (28, 28, 1))
        return adlm_models.architecture_for(self.config.dataset, shape)

    def _split(self) -> tuple[float, float, float]:
        split = self.settings.eps_split  # checked when the settings were made
        return _DEFAULT_SPLIT[self._architecture()] if split is None else split

    def budgets(self) -> tuple[float, float, float]:
        """(eps1, eps2, eps3) = split * --epsilon (AdLM: eps = eps1 + eps2 + eps3)."""
        eps = float(self.config.epsilon)
        return tuple(eps * p for p in self._split())

    def validate(self) -> None:
        cfg = self.config
        eps = cfg.epsilon
        if eps is None or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
            raise ValueError(f"--epsilon: {self.name} needs a finite total budget > 0, got {eps!r}")
        if cfg.delta not in (0, 0.0, None):
            raise ValueError(f"--delta: {self.name} is pure epsilon-DP; delta must be 0, "
                             f"got {cfg.delta!r}")
        low, high = cfg.value_range
        if low < -1.0 or high > 1.0:
            # AdLM Lemma 3: Delta_h0 allows a per-feature change of 2 max|x| with |x| <= 1.
            raise ValueError(f"--value_range: AdLM's Delta_h0 assumes |x| <= 1; got {low},{high}")
        if int(cfg.batch_size) < 1:
            raise ValueError(f"--batch_size: expected an int >= 1, got {cfg.batch_size!r}")
        if self.settings.relevance_file is not None:
            self._check_relevance_file()

    def _check_relevance_file(self) -> None:
        """--adlm_relevance_file: AdLM only, one relevance per pixel of a one-channel image
        (or --adlm_relevance_granularity=pixel), and a readable map (its fit to the images is
        checked in setup, before any training)."""
        if not self.adaptive:
            raise ValueError(f"--adlm_relevance_file: {self.name} has no relevance step "
                             "(uniform budgets)")
        arch = self._architecture()
        if arch == "cifar10" and self._granularity(arch) != "pixel":
            raise ValueError("--adlm_relevance_file: the map has one value per pixel; with "
                             "colour images set --adlm_relevance_granularity=pixel")
        relevance.read_relevance_file(self.settings.relevance_file)

    # ------------------------------------------------------- public split (docs/ledger.md)

    def _uses_public_split(self) -> bool:
        return self.adaptive and self.settings.aux_data == "public_split"

    def public_split_size(self, num_train: int) -> int:
        """Records held out for the auxiliary model (docs/ledger.md), removed from D by the loop."""
        if not self._uses_public_split():
            return 0
        size = self.settings.aux_public_size
        return int(size) if size is not None else max(1, int(num_train) // 10)

    def set_public_data(self, x_public: np.ndarray, y_public: np.ndarray) -> None:
        self._public = (np.asarray(x_public, np.float32),
                        np.asarray(y_public).astype(np.int64).reshape(-1))

    # ------------------------------------------------------------------ setup (host side)

    def _granularity(self, arch: str) -> str:
        return (self.settings.relevance_granularity or "feature")

    def _relevance(self, x: np.ndarray, y: np.ndarray, num_classes: int, arch: str, eps1: float,
                   rng: np.random.Generator) -> tuple[np.ndarray, dict]:
        """Aux model, LRP, per-record normalisation and the eps1-DP average (AdLM Eq. 4-12)."""
        kind = self.settings.aux_model
        aux_seed = int(rng.integers(0, 2**31 - 1))
        keras.utils.set_random_seed(aux_seed)
        aux = adlm_models.auxiliary_model(x.shape[1:], num_classes, kind=kind, architecture=arch)
        aux.compile(optimizer=keras.optimizers.Adam(1e-3),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                    metrics=["accuracy"])
        epochs = self.settings.aux_epochs
        if self._uses_public_split():
            if self._public is None:
                raise ValueError("--adlm_aux_data: public_split needs the held-out split "
                                 "(set_public_data) before setup")
            x_aux, y_aux = self._public  # disjoint from D: the relevance function is fixed
        else:
            x_aux, y_aux = x, y  # trained on D without privacy (the paper)
        hist = aux.fit(x_aux, y_aux, batch_size=128, epochs=epochs, verbose=0, shuffle=True)
        aux_acc = float(hist.history["accuracy"][-1])
        logging.info("AdLM auxiliary model (%s, %d epochs): train accuracy %.4f", kind, epochs,
                     aux_acc)
        r = relevance.lrp(aux, x, y, mu=self.settings.lrp_mu,
                          start=self.settings.lrp_start)
        r = relevance.normalize_per_record(relevance.to_granularity(r, self._granularity(arch)))
        transform = self.settings.relevance_transform
        if transform == "ref_code":
            transform = "ref_code_cifar" if arch == "cifar10" else "ref_code_mnist"
        rbar, info = relevance.private_average(r, epsilon=eps1, rng=rng, transform=transform)
        info.update({"aux_model": kind, "aux_epochs": epochs, "aux_train_accuracy": aux_acc,
                     "transform": transform, "aux_data": self.settings.aux_data,
                     "aux_examples": int(len(x_aux))})
        return rbar, info

    def _beta(self, x, y, num_classes, arch, eps1, rng) -> np.ndarray:
        d = x[0].size if self._granularity(arch) == "feature" else x.shape[1] * x.shape[2]
        if not self.adaptive:
            return relevance.uniform_budgets(int(d))
        floor = (self.settings.beta_floor or _DEFAULT_FLOOR[arch])
        path = self.settings.relevance_file
        if path is not None:
            table = relevance.read_relevance_file(path)
            self._info["relevance"] = {"file": os.path.basename(path),
                                       "sha256": rundir.file_sha256(path), "shape": list(table.shape)}
            return relevance.file_budgets(table, floor=float(floor), image_hw=x.shape[1:3])
        rbar, info = self._relevance(x, y, num_classes, arch, eps1, rng)
        self._info["relevance"] = info
        self._state["rbar"] = rbar
        return relevance.adaptive_budgets(rbar, floor=float(floor))  # AdLM Eq. 16

    def setup(self, data_spec, ledger, rng, strategy=None) -> None:
        del strategy
        cfg = self.config
        x = np.asarray(data_spec.x_train, dtype=np.float32)
        y = np.asarray(data_spec.y_train).astype(np.int64).reshape(-1)
        if x.ndim != 4:
            raise ValueError(f"x_train: expected NHWC images, got shape {x.shape}")
        low, high = cfg.value_range
        if x.size and (float(x.min()) < low - 1e-6 or float(x.max()) > high + 1e-6):
            # DESIGN principle 4: inputs outside the range the sensitivity proof assumes.
            raise ValueError(f"x_train: values outside --value_range [{low}, {high}]")
        n = x.shape[0]
        shape = tuple(int(v) for v in x.shape[1:])
        arch = self._architecture(shape)
        num_classes = int(data_spec.num_classes)
        if y.size and not 0 <= int(y.min()) <= int(y.max()) < num_classes:
            raise ValueError(f"y_train: labels outside [0, {num_classes}) for "
                             f"{num_classes} classes")
        eps1, eps2, eps3 = self.budgets()
        batch = int(cfg.batch_size)
        beta = self._beta(x, y, num_classes, arch, eps1, rng)
        gran = self._granularity(arch)
        noise_shape = shape if gran == "feature" else shape[:2] + (1,)
        d = int(np.prod(noise_shape))
        dh0 = delta_h0(self.settings.delta_h0, architecture=arch,
                       input_shape=shape, crop=self.settings.crop)
        hidden = 30 if arch == "cifar10" else 25
        output_bias = self.settings.output_bias
        # --adlm_delta_f=ref_code: the release's constant, its output bias not counted.
        delta_f = adlm_losses.adlm_delta_f(
            num_classes=num_classes, hidden_units=hidden,
            output_bias=output_bias and self.settings.delta_f == "lemma5")
        beta = beta.reshape(noise_shape)
        eps_j = beta * eps2  # AdLM Eq. 16: eps_j = beta_j * eps2
        # Per-example share of the input noise: Lap(Delta_h0 / eps_j) / |L| (Algorithm 1 l.12-13).
        input_scale = dh0 / eps_j / batch
        fm_scale = mechanisms.laplace_scale(epsilon=eps3, sensitivity=delta_f) / batch  # Alg. 1
        st = self._state
        st.update({"beta": beta, "input_scale": input_scale,
                   "scalars": np.array([eps1, eps2, eps3, dh0, delta_f, fm_scale, n, batch,
                                        num_classes, hidden], dtype=np.float64)})
        mode = self.settings.input_noise
        # Noise drawn once (principle 3): from the setup rng, saved with the setup state.
        st["shared_noise"] = (mechanisms.sample_laplace(input_scale, rng=rng)
                              if mode == "shared_fixed" else np.zeros(noise_shape))
        fm_mode = self.settings.fm_mode
        st["fm_noise"] = (losses.draw_fm_noise((hidden, num_classes), sensitivity=delta_f,
                                               epsilon=eps3, rng=rng)
                          if fm_mode in _LINEAR_FM else np.zeros((hidden, num_classes)))
        filters = 128 if arch == "cifar10" else 32
        # AdLM Algorithm 1 l.14: bbar = b + Lap(Delta_h0 / eps2) / |L|.
        st["bias_noise"] = (mechanisms.sample_laplace(dh0 / eps2 / batch, size=(filters,), rng=rng)
                            if self.settings.perturb_bias else np.zeros(filters))
        # Secret key of the per-record noise (per_example modes); a record's noise is keyed by
        # this key and the record's position in the training set, never by its content.
        st["record_key"] = rng.integers(1, 2**62, size=(2,), dtype=np.int64)
        self._add_ledger(ledger, n=n, d=d, eps=(eps1, eps2, eps3), dh0=dh0, delta_f=delta_f,
                         eps_j_sum=float(eps_j.sum()), feature_range=float(high - low),
                         mode=mode, fm_mode=fm_mode, gran=gran, channels=shape[-1])

    def _add_ledger(self, ledger, *, n, d, eps, dh0, delta_f, eps_j_sum, feature_range, mode,
                    fm_mode, gran, channels) -> None:
        eps1, eps2, eps3 = eps
        batch = int(self.config.batch_size)
        if self.adaptive and self.settings.relevance_file is not None:
            info = self._info.get("relevance", {})
            ledger.add(f"{self.name}_eps1_relevance", mechanism="external_file",
                       epsilon=math.inf, claimed_epsilon=eps1,
                       protects="training records (average LRP relevance)", covers="setup",
                       note=(f"The relevance map was read from {info.get('file')} (sha256 "
                             f"{info.get('sha256')}), made outside this run: the run cannot "
                             "bound what it reveals about the training records, so no finite "
                             f"epsilon is recorded (its maker claims eps1 = {eps1:g}; "
                             "--adlm_relevance_file)."))
        elif self.adaptive and self._uses_public_split():
            # docs/ledger.md's sound option: the auxiliary model saw only the held-out public split,
            # so the relevance function is fixed w.r.t. D and Delta_R = 2d/|D| holds.
            public = 0 if self._public is None else len(self._public[0])
            ledger.add(f"{self.name}_eps1_relevance", mechanism="laplace", epsilon=eps1,
                       protects="training records (average LRP relevance)",
                       covers="setup",
                       note=(f"AdLM Lemma 1-2: Rbar = mean relevance + Lap(2d/(|D| eps1)), d={d}, "
                             f"|D|={n}. The auxiliary model was trained on a public split of "
                             f"{public} records removed from D (docs/ledger.md), so the relevance "
                             "function does not depend on D and the claim is sound."))
        elif self.adaptive:
            # Delta_R = 2d/|D| treats the auxiliary model as fixed (AdLM Lemma 1); it was trained on
            # D, so one record can move every normalised relevance: L1 change <= d, and the
            # Laplace scale 2d/(|D| eps1) then gives eps1 * |D| / 2.
            sound = eps1 * n / 2.0
            ledger.add(f"{self.name}_eps1_relevance", mechanism="laplace", epsilon=sound,
                       protects="training records (average LRP relevance)",
                       claimed_epsilon=eps1, covers="setup",
                       note=(f"AdLM Lemma 1-2: Rbar = mean relevance + Lap(2d/(|D| eps1)), d={d}, "
                             f"|D|={n}. The claim holds for an auxiliary model independent of "
                             "D; here it was trained on D without privacy (docs/ledger.md), so the "
                             "sound bound uses sensitivity d: eps1*|D|/2 (use "
                             "--adlm_aux_data=public_split for a sound eps1)."))
        if mode == "per_example_fixed" and gran == "feature":
            sound_x = per_record_epsilon_inputs(batch_size=batch, eps_j_sum=eps_j_sum,
                                                feature_range=feature_range, delta_h0_value=dh0)
            why_x = ("each record's noisy copy xbar_i = x_i + Lap(Delta_h0/eps_j)/|L| is released "
                     "once; per-record bound |L| sum_j eps_j max|x_ij - x'_ij| / Delta_h0 "
                     "(docs/adlm.md). The noise of a record is keyed by its position in the "
                     "training set (and a secret run key), never by its content, so identical "
                     "records get independent noise.")
        else:
            sound_x = math.inf
            why_x = {"per_example_fixed": "a pixel's noise is shared by its channels, so channel "
                                          "differences are released without noise",
                     "batch_shared_per_step": "one draw is shared by the batch and redrawn every "
                                              "step; differences between records are noise free",
                     "shared_fixed": "one draw is shared by every record; differences between "
                                     "records are noise free"}[mode]
            why_x = f"no finite per-record bound: {why_x} (docs/adlm.md)."
        ledger.add(f"{self.name}_eps2_inputs", mechanism=f"laplace_input_{mode}", epsilon=sound_x,
                   protects="training records (inputs of the first affine layer)",
                   claimed_epsilon=eps2, covers="setup",
                   note=(f"AdLM Lemma 3-4 claim eps2 by one Laplace draw on the batch sum; "
                         f"Delta_h0={dh0:g}, |L|={batch}. Sound: {why_x}"))
        if fm_mode in _LINEAR_FM:
            sound_y = math.inf
            why_y = ("no finite bound: the exact label term is used at every step and only a "
                     "data-independent linear term is added (code release).")
        else:
            sound_y = per_record_epsilon_labels(batch_size=batch, eps3=eps3, delta_f=delta_f)
            why_y = ("phibar1 = 1/2 - y + Lap(Delta_F/eps3)/|L| per record and class, drawn once "
                     "and keyed by the record's position; a label change moves two classes by "
                     "1: 2|L|eps3/Delta_F (docs/adlm.md).")
        ledger.add(f"{self.name}_eps3_functional_mechanism", mechanism=f"laplace_fm_{fm_mode}",
                   epsilon=sound_y, protects="training records (labels in the Taylor loss)",
                   claimed_epsilon=eps3, covers="setup",
                   note=(f"AdLM Lemma 5-6 claim eps3 by one draw on the batch sum of the "
                         f"coefficients; Delta_F={delta_f:g}. Sound: {why_y}"
                         + ("" if self.adaptive else " ILM: the eps1 share of --epsilon is not "
                            "spent (the paper's ablation).")))

    def setup_state(self) -> dict:
        return dict(self._state)

    def restore_setup_state(self, state: Mapping[str, np.ndarray]) -> None:
        self._state = {k: np.asarray(v) for k, v in state.items()}

    # ------------------------------------------------------------------ model

    def adam_epsilon(self):
        """--adlm_adam_epsilon."""
        return self.settings.adam_epsilon

    def build_model(self, input_shape, num_classes):
        st = self._state
        if "beta" not in st:
            raise RuntimeError("setup (or restore_setup_state) must run before build_model")
        arch = self._architecture(tuple(input_shape))
        kwargs = dict(bound_mode=self.settings.bound_mode,
                      output_bias=self.settings.output_bias,
                      bias_noise=self.settings.perturb_bias,
                      bn_momentum=self.settings.bn_momentum,
                      bn_eval=self.settings.bn_eval)
        if arch == "cifar10":
            # The crops are augmentation, not privacy noise: a 31-bit seed (Keras'
            # SeedGenerator takes no more) derived from the run's 128-bit layer key.
            crop_seed = None if self.layer_seed is None else int(np.random.SeedSequence(
                [int(self.layer_seed), 7]).generate_state(1, np.uint32)[0] >> 1)
            kwargs.update(crop=self.settings.crop, seed=crop_seed)
        model = adlm_models.build(arch, input_shape, num_classes, **kwargs)
        if kwargs["bias_noise"]:
            model.get_layer(adlm_models.BIAS_NOISE_LAYER).offset.assign(
                st["bias_noise"].astype(np.float32))
        # Noise drawn once lives in non-trainable variables (checkpointed by the loop).
        self.input_scale = tf.Variable(st["input_scale"].astype(np.float32), trainable=False,
                                       name="adlm_input_scale")
        self.shared_noise = tf.Variable(st["shared_noise"].astype(np.float32), trainable=False,
                                        name="adlm_shared_noise")
        self.fm_noise = tf.Variable(st["fm_noise"].astype(np.float32), trainable=False,
                                    name="adlm_fm_noise")
        if "record_key" not in st:
            raise ValueError("setup state: no per-record noise key (a run from before noise "
                             "was keyed by position cannot be resumed; start a new run)")
        self.record_key = tf.Variable(st["record_key"].astype(np.int64), trainable=False,
                                      name="adlm_record_key")
        return model

    # ------------------------------------------------------------------ training

    def batch_schedule(self) -> str:
        return self.settings.batches

    def record_seeds(self, indices: tf.Tensor) -> tf.Tensor:
        """Per-record stateless seeds [B, 2] from the records' positions in the training set.

        Seed i is (key_0, key_1 + position_i) with the run's secret key: a record gets the
        same seed (and the same noise) in every epoch and after a resume, and two records at
        different positions get independent noise even when their contents are identical.

        Args:
            indices: int64 [B], each record's index in the (private) training set.
        """
        idx = tf.cast(tf.convert_to_tensor(indices), tf.int64)
        if idx.shape.rank != 1:
            raise ValueError(f"indices: expected positions of shape [B], got {idx.shape}")
        key = tf.convert_to_tensor(self.record_key)
        return tf.stack([tf.fill(tf.shape(idx), key[0]), key[1] + idx], axis=1)

    def _per_record(self, seeds: tf.Tensor, salt: int, shape, scale) -> tf.Tensor:
        def draw(s):
            return mechanisms.tf_laplace(shape, scale,
                                         seed=tf.random.experimental.stateless_fold_in(s, salt))
        return tf.map_fn(draw, seeds, fn_output_signature=tf.float32)

    def noisy_inputs(self, x: tf.Tensor, seeds: tf.Tensor | None = None,
                     ctx: StepContext | None = None) -> tf.Tensor:
        """xbar: the inputs of the first affine layer with this run's noise (AdLM Alg. 1 l.12-14).

        Args:
          x: the inputs.
          seeds: per-record seeds (`record_seeds`), for --adlm_input_noise=per_example_fixed.
          ctx: the step's context, for --adlm_input_noise=batch_shared_per_step.
        """
        mode = self.settings.input_noise
        scale = tf.convert_to_tensor(self.input_scale)
        if mode == "per_example_fixed":
            noise = self._per_record(seeds, 1, scale.shape, scale)
        elif mode == "batch_shared_per_step":
            # One draw per step shared by the whole global batch (code release, MNIST).
            if ctx is None:
                raise ValueError("ctx: batch_shared_per_step noise needs the step's context")
            noise = mechanisms.tf_laplace(scale.shape, scale, seed=ctx.step_seed(1))[None]
        else:
            noise = tf.convert_to_tensor(self.shared_noise)[None]
        xbar = x + noise
        clip = self.settings.input_clip
        if clip is not None:
            xbar = tf.clip_by_value(xbar, -float(clip), float(clip))  # code release: [-10, 10]
        return xbar

    def coefficients(self, x: tf.Tensor, y: tf.Tensor, num_classes: int,
                     seeds: tf.Tensor | None = None):
        """(phi0, phi1, phi2) of the Taylor loss for a batch, with the per-record FM noise."""
        onehot = tf.one_hot(tf.cast(y, tf.int64), num_classes, dtype=tf.float32)
        fm_mode = self.settings.fm_mode
        if fm_mode in _LINEAR_FM:
            return None, 0.5 - onehot, None  # AdLM Eq. 25 exact; noise enters as a linear term
        fm_scale = float(self._state["scalars"][5])
        phi1 = 0.5 - onehot + self._per_record(seeds, 2, [num_classes], fm_scale)
        if fm_mode == "per_example_label_only":
            return None, phi1, None
        phi0 = math.log(2.0) + self._per_record(seeds, 3, [num_classes], fm_scale)
        # phibar2 clamped at >= 0 (post-processing; tfdp's choice).
        phi2 = tf.maximum(0.125 + self._per_record(seeds, 4, [num_classes], fm_scale), 0.0)
        return phi0, phi1, phi2

    def train_step(self, ctx, x, y):
        indices = ctx.indices
        needs_seeds = (self.settings.input_noise == "per_example_fixed"
                       or self.settings.fm_mode not in _LINEAR_FM)
        if needs_seeds and indices is None:
            raise ValueError("indices: per-record noise needs each record's position in the "
                             "training set (the loop passes it)")
        model = self.model
        x = tf.convert_to_tensor(x, tf.float32)
        num_classes = int(model.output_shape[-1])
        seeds = self.record_seeds(indices) if needs_seeds else None
        xbar = self.noisy_inputs(x, seeds, ctx)
        phi0, phi1, phi2 = self.coefficients(x, y, num_classes, seeds)
        return self.step_on_noisy(model, self.optimizer, xbar, phi0, phi1, phi2, y,
                                  ctx.global_batch_size)

    def step_on_noisy(self, model, optimizer, xbar, phi0, phi1, phi2, y, global_batch_size):
        """The update from the noisy inputs and coefficients only (AdLM Alg. 1, training loop).

        The labels `y` are used for the reported training accuracy only.
        """
        with tf.GradientTape() as tape:
            loss, z = self.objective(model, xbar, phi0, phi1, phi2, global_batch_size)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return {"loss": loss, "accuracy": metrics.step_accuracy(z, y, global_batch_size)}

    def objective(self, model, xbar, phi0, phi1, phi2, global_batch_size):
        """This replica's share of the step's loss (the Taylor loss with the functional
        mechanism's term), and the logits.

        Returns:
          (loss, logits).
        """
        batch = float(self._state["scalars"][7])
        z = model(xbar, training=True)
        per_example = adlm_losses.adlm_taylor_loss(z, phi0=phi0, phi1=phi1, phi2=phi2,
                                                   reduction="none")
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
        fm_mode = self.settings.fm_mode
        if fm_mode in _LINEAR_FM:
            kernel = model.get_layer(adlm_models.OUTPUT_LAYER).kernel
            # batch_sum_fixed (AdLM Lemma 6): the batch sum of the coefficients carries one
            # Lap(Delta_F/eps3) draw; on the mean loss that is -(1/|L|) sum(Lap * W).
            # ref_code (AdLM code release, MNIST): -sum(N * W) with N = Lap/|L| once on
            # the batch-SUM loss, i.e. -(1/|L|^2) sum(Lap * W) on the mean loss.
            # ref_code_broadcast: the release subtracts that scalar from each entry of its
            # [|L|, M] Taylor loss and minimises the sum, so it counts |L| M times:
            # -(M/|L|) sum(Lap * W) on the mean loss.
            divisor = {"batch_sum_fixed": batch, "ref_code": batch * batch,
                       "ref_code_broadcast": batch / float(kernel.shape[-1])}[fm_mode]
            loss = loss + losses.functional_mechanism_term(
                self.fm_noise, kernel, divisor=divisor, per_replica=True)
        return loss, z

    def info(self) -> dict:
        """What setup computed (relevance statistics), for reports."""
        return dict(self._info)


class ILM(AdLM):
    """Identical Laplace Mechanism: AdLM with uniform budgets beta_j = 1 and no relevance step.

    eps2 and eps3 are the same shares of --epsilon as AdLM's; the eps1 share is not spent
    (the paper's ablation), so the ledger's claimed total is eps2 + eps3.
    """

    name = "ilm"
    adaptive = False
