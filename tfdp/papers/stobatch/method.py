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

import numpy as np
import tensorflow as tf

from attacks import graph as attack_graph
from tfdp import losses
from tfdp.papers.stobatch import losses as stobatch_losses
from tfdp.papers.stobatch import models
from tfdp.papers.stobatch.privacy import Budget, add_ledger_entries, draw_laplace, solve_budget
from tfdp.papers.stobatch.settings import StoBatchConfig
from tfdp.train import metrics, replica
from tfdp.train.base import Method
from tfdp import data
from tfdp.train import loop

# The settings are declared in tfdp.papers.stobatch.settings; the budget split and its ledger
# entries are in tfdp.papers.stobatch.privacy.
OPTIONS = StoBatchConfig.OPTIONS  # the stobatch_* flags (tfdp-train defines them from this)

# Default generic flags: the StoBatch paper's MNIST values.
_DEFAULTS = {"epochs": 1, "batch_size": 2499, "learning_rate": 1e-4, "optimizer": "adam",
             "epsilon": 1.0, "delta": 0.0}


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
        self._attack_range: tuple = (-1.0, 1.0)

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
        # --stobatch_attack_clip: the crafted rows stay in the data's value range
        self._attack_range = tuple(float(v) for v in data_spec.value_range)
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
        if self.settings.attack_net == "release_unnormalised" and \
                self._spec["architecture"] != "mnist":
            raise loop.SetupError(
                f"--stobatch_attack_net: release_unnormalised exists for the mnist architecture "
                f"only (the MNIST code release's attack network), got "
                f"{self._spec['architecture']!r}")
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
            bn_affine=self.settings.bn_affine == "trained",
            classifier_h=self.settings.classifier_h, name="stobatch")
        model.build((None,) + tuple(input_shape))
        model.encoder_conv.kernel.assign(self._theta1_0)
        model.set_noise(self._noise["chi1"], self._noise["chi2"], self.draw_chi3(num_classes))
        self.ae_optimizer = loop.make_optimizer(self.settings.ae_optimizer, self.ae_lr,
                                                self.settings.ae_adam_epsilon)
        self.ae_optimizer.build(model.theta1)
        self.model = model
        self.num_classes = int(num_classes)
        return model

    def adam_epsilon(self):
        """--stobatch_adam_epsilon (theta2's Adam; theta1's is --stobatch_ae_adam_epsilon)."""
        return self.settings.adam_epsilon

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
        if self.settings.attack_net == "release_unnormalised":
            def release_fn(x):
                # The MNIST code release: its attack copy of the network gets the raw rows
                # plus the fixed input noise (validate: --stobatch_adv_source=raw).
                noise = tf.cast(model.input_noise.fixed_noise, model.compute_dtype)
                return model.forward_unnormalised(tf.cast(x, model.compute_dtype) + noise)
            return release_fn

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
            Adversarial examples, projected onto the mu-ball around xs; range-clipped to the
            data's value range only with --stobatch_attack_clip (the code release's CleverHans
            calls).
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
        low, high = (self._attack_range if self.settings.attack_clip else (None, None))
        return attack_graph.craft(self._attack_logits(model), xs, mu, attack_ids=ids,
                                  nb_iter=nb_iter, eps_iter=eps_iter, start_noise=start_noise,
                                  clip_min=low, clip_max=high, dtype=dtype)

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
        n_tr = self.settings.trainers
        dt = tf.as_dtype(model.compute_dtype)  # float32 unless --stobatch_dtype=float64
        x = tf.cast(x, dt)
        theta1, theta2 = model.theta1, model.theta2
        parts, mu_log = self._craft_parts(step_ctx, model, x, y, num_rep, dt)
        g1, g2, sums = self._micro_batch_gradients(model, parts, dt)
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

    def _craft_parts(self, step_ctx, model, x, y, num_rep: int, dt) -> tuple[list, tf.Tensor]:
        """Crafts every adversarial micro-batch of this replica, all against the parameters
        and BN statistics at the start of the step (as R M replicas would).

        Returns:
          ([(benign x, benign y, adversarial source, its y, crafted, adversarial input)] per
          trainer and micro-batch, the sum of the trainers' mu_t).
        """
        rid = tf.cast(step_ctx.replica_id, tf.int64)
        m, micro, n_tr = self.m, self.settings.micro_batches, self.settings.trainers
        groups = num_rep * micro
        mu_log = tf.constant(0.0)
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
        return parts, mu_log

    def _micro_batch_gradients(self, model, parts: list, dt) -> tuple[list, list, dict]:
        """The gradients of theta1 (Eq. 6) and theta2 (Eq. 9) summed over the micro-batches,
        and the sums of the logged statistics.

        Returns:
          (theta1's gradients, theta2's gradients, {statistic: sum}).
        """
        m, n_tr, xi = self.m, self.settings.trainers, self.settings.xi
        theta1, theta2 = model.theta1, model.theta2
        lat = tf.cast(model.latent_noise.fixed_noise, dt)
        g1 = [tf.zeros_like(v) for v in theta1]
        g2 = [tf.zeros_like(v) for v in theta2]
        sums = {k: tf.constant(0.0, dt) for k in ("loss", "ae_loss", "l1", "l2", "accuracy",
                                                  "adv_linf")}
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
                if model.classifier_h != "shared":  # the release's own classifier path
                    hb = model.classifier_hidden(xb, True, lat)
                    ha = model.classifier_hidden(xa, True, lat)
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
        return g1, g2, sums

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

