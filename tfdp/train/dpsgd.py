"""DP-SGD (Abadi et al. 2016), the papers' pSGD baseline: per-example clipping + Gaussian noise."""

from __future__ import annotations


import numpy as np
import tensorflow as tf

from tfdp import accounting, options
from tfdp.certify import smoothing
from tfdp.train import privatize
from tfdp.train.base import Method
from tfdp.train.nonprivate import (BASELINE_MODELS, build_baseline_model,
                                   per_example_cross_entropy)

SAMPLINGS = privatize.SAMPLINGS

@options.declare("dpsgd_")
class DPSGDConfig(privatize.DPSGDSettings):
    """DP-SGD settings (the dpsgd_* flags without the prefix): the single declaration of their
    types, defaults, help and checks. `DPSGDConfig(...).as_options()` is a
    `TrainConfig.options` mapping."""

    model: str = options.field(
        "cnn", "DP-SGD: architecture: cnn (a small CNN), mlp, or adlm_cnn (AdLM's MNIST "
        "network without batch norm: the AdLM paper's pSGD network).", choices=BASELINE_MODELS)
    clipping: str = options.field(
        "auto", "DP-SGD: how per-example gradient norms are computed; all give the same "
        "clipped sum. vectorized: per-example gradients of the whole model "
        "(tf.vectorized_map); ghost: norms from each layer's inputs and output "
        "gradients, one batched re-weighted gradient; auto: ghost, with each "
        "Dense/Conv2D layer taking the cheaper of the ghost norm and per-example "
        "kernel gradients from image patches. Unsupported layers (and models with "
        "batch-mixing layers) use the vectorized path. auto (the default) is several "
        "times faster than vectorized and agrees with it to float rounding; with "
        "Poisson lots, ghost and auto pad each lot to a few static sizes (padding rows "
        "add nothing). Results made before auto became the default pin "
        "--dpsgd_clipping=vectorized in their flagfiles. A resumed run is "
        "bit-identical to an uninterrupted one with every path.",
        choices=privatize.CLIPPING_METHODS)


OPTIONS = DPSGDConfig.OPTIONS  # the dpsgd_* flags (tfdp-train defines them from this)


def _max_steps_within(target: float, planned: int, eps_of) -> int:
    """Largest T <= planned with eps_of(T) <= target (eps_of increases with T); 0 if none."""
    if eps_of(planned) <= target:
        return planned
    lo, hi = 0, planned  # eps_of(lo) <= target (0 steps spend nothing), eps_of(hi) > target
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if eps_of(mid) <= target:
            lo = mid
        else:
            hi = mid
    return lo


def clipped_sum(per_example_grads, l2_clip: float) -> list:
    """Kept for callers of the earlier API; see `tfdp.train.privatize.clip_and_sum`."""
    return privatize.clip_and_sum(per_example_grads, l2_clip)


class DPSGD(Method[DPSGDConfig]):
    """DP-SGD with vectorised per-example gradients (the AdLM and HGM papers' baseline).

    Per lot: per-example gradients (tf.vectorized_map), each clipped to L2 norm C (Abadi et
    al. 2016 Alg. 1: g / max(1, ||g||_2 / C)), summed, Gaussian noise N(0, sigma^2 C^2 I) added
    ONCE to the sum (once per lot, not per example), divided by the expected
    lot size, then an optimizer step.

    Under MirroredStrategy each replica sums its own clipped gradients; the optimizer sums
    these across replicas. The noise is added only on replica 0, drawn from the step seed
    that every replica shares, so the global update carries exactly one N(0, sigma^2 C^2 I)
    draw, the same one a single device would draw for that step.
    """

    name = "dpsgd"
    takes_smoothing = True  # --smoothing_sigma: per-example input noise (Cohen et al. 2019)
    # A resume may change these: the ledger accounts every segment with its own q (docs/ledger.md).
    resume_mutable_flags = ("epochs", "batch_size")
    default_flags = {"epochs": 5, "batch_size": 128, "learning_rate": 3e-3, "optimizer": "adam",
                     "epsilon": 2.0, "delta": 1e-5}

    settings_class = DPSGDConfig

    def __init__(self, config):
        super().__init__(config)
        # sigma: the flag's value, or solved from --epsilon in `setup` (run state, checkpointed).
        self.noise_multiplier = self.settings.noise_multiplier
        self._steps: int | None = None

    def validate(self) -> None:
        cfg, settings = self.config, self.settings
        if settings.noise_multiplier is None and cfg.epsilon is None:
            raise ValueError(f"--epsilon: DP-SGD needs --epsilon or --{settings.PREFIX}"
                             "noise_multiplier")
        if not 0.0 < cfg.delta < 1.0:
            raise ValueError(f"--delta: DP-SGD needs 0 < delta < 1, got {cfg.delta!r}")

    def batch_schedule(self) -> str:
        return self.settings.sampling

    def _account_sampling(self) -> str:
        # The Poisson analysis of dp_accounting; for shuffled batches it is the claimed value.
        return "poisson" if self.settings.sampling == "poisson" else "shuffle"

    def setup(self, data_spec, ledger, rng, strategy=None) -> None:
        del rng, strategy
        cfg = self.config
        n, batch = int(data_spec.num_train), cfg.batch_size
        planned = cfg.epochs * (n // batch)

        def eps_of(steps: int) -> float:
            if steps == 0:
                return 0.0
            return accounting.dpsgd_epsilon(
                num_examples=n, batch_size=batch, noise_multiplier=self.noise_multiplier,
                steps=steps, delta=cfg.delta, accountant=self.settings.accountant,
                sampling=self._account_sampling())

        note = ""
        if self.noise_multiplier is None:
            # Fixed-epoch schedule, sigma solved from the budget (the HGM experiments).
            self.noise_multiplier = accounting.dpsgd_noise_multiplier(
                target_epsilon=cfg.epsilon, num_examples=n, batch_size=batch, steps=planned,
                delta=cfg.delta, accountant=self.settings.accountant,
                sampling=self._account_sampling())
            self._steps = planned
            note = f"noise multiplier solved for target epsilon {cfg.epsilon:g}."
        elif cfg.epsilon is not None:
            # Fixed sigma, train until the budget is spent (Abadi et al.'s recipe).
            self._steps = _max_steps_within(cfg.epsilon, planned, eps_of)
            if self._steps == 0:
                raise ValueError(
                    f"--{self.settings.PREFIX}noise_multiplier: {self.noise_multiplier:g} is too "
                    "small: one step "
                    f"already exceeds --epsilon={cfg.epsilon:g}")
            if self._steps < planned:
                note = (f"stopped after {self._steps} of {planned} planned steps: the next step "
                        f"would exceed target epsilon {cfg.epsilon:g}.")
        else:
            self._steps = planned
        del ledger  # the loop charges the steps that execute (step_spend)
        self._note = note

    def step_spend(self) -> accounting.StepSpend:
        """Per-step Gaussian spend; the loop records the executed segments in the ledger."""
        return accounting.StepSpend(
            name="dpsgd", noise_multiplier=self.noise_multiplier,
            sampling=self._account_sampling(), accountant=self.settings.accountant,
            delta=self.config.delta, note=getattr(self, "_note", ""))

    def max_steps(self) -> int | None:
        return self._steps

    def certification_config(self) -> dict | None:
        sigma = self.config.common.smoothing_sigma
        return smoothing.certification(sigma) if sigma else None

    def build_model(self, input_shape, num_classes):
        return build_baseline_model(self.settings.model, input_shape, num_classes)

    def train_step(self, ctx, x, y):
        model = self.model
        variables = model.trainable_variables
        # --smoothing_sigma: per-example input noise before the per-example gradients and
        # their clipping (data processing; the privacy analysis is unchanged).
        x = smoothing.training_noise(ctx, x, self.config.common.smoothing_sigma)

        def example_loss(xi, yi):
            logits = model(xi, training=True)
            return per_example_cross_entropy(yi, logits)[0], logits

        grads, metrics = privatize.dpsgd_gradients(
            ctx, model, variables, x, y, example_loss, l2_clip=self.settings.l2_clip,
            noise_multiplier=self.noise_multiplier, clipping=self.clipping_path(),
            mask=ctx.row_mask() if self.pads_lots() else None)
        self.optimizer.apply_gradients(zip(grads, variables))
        return metrics

    # Whether this class's train_step passes `ctx.row_mask()` to dpsgd_gradients; a subclass
    # with its own train_step must set it only if it does (else padding rows would count).
    masks_padding_rows = True

    def clipping_path(self) -> str:
        """The clipping path train_step uses (privatize.CLIPPING_METHODS)."""
        return self.settings.clipping

    def pads_lots(self) -> bool:
        # Poisson lots on the ghost paths run padded to a few static sizes (several times
        # faster than one any-size graph); the vectorized path keeps the graphs its committed
        # results were made with. Padding is safe with every model: the ghost paths fall back
        # to per-example (vectorized) gradients for models whose layers mix examples.
        return (self.masks_padding_rows and self.settings.sampling == "poisson"
                and self.clipping_path() != "vectorized")

    def trace_any_batch_size(self) -> bool:
        # With Poisson lots, Grappler rewrites the ghost paths' graph differently for a static
        # batch size, so a resume must run the same any-size graph (docs/dpsgd-clipping.md).
        # The vectorized path does not differ, and keeps the graphs its results were made with.
        return self.clipping_path() != "vectorized"

    def replays_identically(self) -> bool:
        # DP-SGD's own step on the vectorized path runs the same graph traced for a static or
        # any batch size (above); tests/train/test_replay.py resumes it bit for bit. A
        # subclass with its own step (Secure-SGD) keeps the general rule.
        own_step = type(self).train_step is DPSGD.train_step
        return (own_step and self.clipping_path() == "vectorized") or super().replays_identically()

    def setup_state(self) -> dict:
        # The note goes with it: a resumed run's ledger entry reads as the uninterrupted one's.
        return {"noise_multiplier": np.float64(self.noise_multiplier),
                "steps": np.int64(self._steps), "note": np.str_(getattr(self, "_note", ""))}

    def restore_setup_state(self, state) -> None:
        self.noise_multiplier = float(state["noise_multiplier"])
        self._steps = int(state["steps"])
        self._note = str(state["note"]) if "note" in state else ""
