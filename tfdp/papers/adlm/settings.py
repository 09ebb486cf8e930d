"""AdLM / ILM settings: the adlm_* options (`AdLMConfig`, their single declaration) and the
choices they take.
"""

from __future__ import annotations

import math
from typing import Optional

from tfdp import options
from tfdp.papers.adlm import models as adlm_models
from tfdp.papers.adlm import relevance
from tfdp.papers.adlm.budgets import DELTA_H0_PRESETS, delta_h0


INPUT_NOISE_MODES = ("per_example_fixed", "batch_shared_per_step", "shared_fixed")
FM_MODES = ("per_example_label_only", "per_example_all_orders", "ref_code", "ref_code_broadcast",
            "batch_sum_fixed")


RELEVANCE_TRANSFORMS = ("paper", "ref_code")
BATCH_SCHEDULES = ("fixed", "shuffle")
# Not from the paper (AdLM code release ratios): eps1:eps2:eps3.
_DEFAULT_SPLIT = {"mnist": (0.25, 0.25, 0.5), "cifar10": (0.1, 0.6, 0.3)}
# AdLM code release relevance floors r_min (MNIST 1e-5, CIFAR 1e-2).
_DEFAULT_FLOOR = {"mnist": 1e-5, "cifar10": 1e-2}
# FM modes realised as a data-independent linear loss term.
_LINEAR_FM = ("ref_code", "ref_code_broadcast", "batch_sum_fixed")
AUX_DATA = ("private", "public_split")


def _delta_h0_rule(value: str):
    """None if `value` is a Delta_h0 preset or a number > 0, else what was expected."""
    try:
        delta_h0(value, architecture="mnist", input_shape=(28, 28, 1))
    except ValueError:
        return f"one of {DELTA_H0_PRESETS} or a number > 0"
    return None


@options.declare("adlm_")
class AdLMConfig:
    """AdLM / ILM settings (the adlm_* flags without the prefix): the single declaration of
    their types, defaults, help and checks; `validate` holds the rules that join several of
    them. `AdLMConfig(...).as_options()` is a `TrainConfig.options` mapping."""

    eps_split: Optional[tuple[float, ...]] = options.field(
        None, "eps1,eps2,eps3 as fractions of --epsilon summing to 1 (default: the code "
        "release ratios, 0.25,0.25,0.5 for MNIST and 0.1,0.6,0.3 for CIFAR-10; not from the "
        "paper).")
    input_noise: str = options.field(
        "per_example_fixed", "Input (first affine layer) noise: per_example_fixed = one draw "
        "per record for the whole run (Algorithm 1, paper-literal); batch_shared_per_step = "
        "one draw per step shared by the batch (code release, MNIST); shared_fixed = one "
        "draw for the run shared by every record (code release, CIFAR-10).",
        choices=INPUT_NOISE_MODES)
    delta_h0: str = options.field(
        "conv_fanin", "Sensitivity Delta_h0 of the first affine layer: paper_fc (2|h0|d), "
        "conv_fanin (sum of the neurons' fan-ins), ref_code (9800 MNIST, 5400 CIFAR-10) or a "
        "number.", check=_delta_h0_rule)
    bound_mode: str = options.field(
        "paper_lrn_minmax", "Bounding layers: paper_lrn_minmax (bounded LRN after "
        "convolutions, per-batch min-max on the FC layer) or bn_clip (code release: batch "
        "norm and clipping).", choices=adlm_models.BOUND_MODES)
    fm_mode: str = options.field(
        "per_example_label_only", "Functional-mechanism noise: per_example_label_only (phi1 "
        "per record and class, drawn once), per_example_all_orders (all orders, phi2 clamped "
        ">= 0), ref_code (code release: one [|h|, M] matrix N = Lap(Delta_F/eps3)/|L| drawn "
        "once, -sum(N*W) added once to the batch-SUM loss), ref_code_broadcast (the release's "
        "arithmetic exactly: its scalar -sum(N*W) is broadcast to every record and class of "
        "the [|L|, M] Taylor loss before the sum, i.e. added |L| M times), batch_sum_fixed (Lemma 6 literal: one "
        "Lap(Delta_F/eps3) draw on the batch-sum coefficients, i.e. |L| times the code's "
        "noise).", choices=FM_MODES)
    beta_floor: Optional[float] = options.field(
        None, "Relevance floor r_min before the budget normalisation (default 1e-5 MNIST, "
        "1e-2 CIFAR-10; code release).", check=options.positive)
    perturb_bias: bool = options.field(
        True, "Perturb the first layer's bias with Lap(Delta_h0/eps2)/|L| drawn once "
        "(Algorithm 1 line 14; no privacy role).")
    output_bias: bool = options.field(
        False, "Output layer bias (the paper has none; the code release has one). With a "
        "bias, Delta_F counts it as one more hidden unit.")
    adam_epsilon: Optional[float] = options.field(
        None, "Adam's epsilon (unset: Keras' 1e-7). tfdp minimises the batch MEAN; the code "
        "release minimises the batch SUM with TF1's 1e-8, which is the mean with epsilon "
        "1e-8 / |L| (5.56e-12 at |L| = 1,800): Adam's steps are then the same.",
        check=options.positive)
    delta_f: str = options.field(
        "lemma5", "Delta_F of the functional mechanism: lemma5 (M (|h| + |h|^2 / 4), the "
        "output bias counted as one more unit) or ref_code (the code release's "
        "10 (|h| + |h|^2 / 4), its output bias not counted: 1812.5 instead of 1950 on MNIST; "
        "only with the linear --adlm_fm_mode values, whose ledger bound is infinite anyway).",
        choices=("lemma5", "ref_code"))
    input_clip: Optional[float] = options.field(
        None, "Clip noisy inputs to [-c, c] (code release MNIST: 10); unset = no clip.",
        check=options.positive)
    lrp_mu: float = options.field(0.01, "LRP epsilon-rule stabiliser mu (not from the paper).",
                                  check=options.nonnegative)
    lrp_start: str = options.field(
        "true_class", "Output whose score starts the relevance propagation.",
        choices=relevance.LRP_STARTS)
    relevance_granularity: Optional[str] = options.field(
        None, "One relevance (and budget) per feature, or per pixel shared by its channels "
        "(code release, CIFAR-10). Default: feature.", choices=relevance.GRANULARITIES)
    relevance_transform: str = options.field(
        "paper", "Post-processing of the average relevance before the noise: paper (none) or "
        "ref_code (the code release's dataset-specific heuristics).",
        choices=RELEVANCE_TRANSFORMS)
    aux_model: str = options.field(
        "same", "Auxiliary (non-private) model for the relevance step: the private "
        "network's structure or a one-hidden-layer MLP.", choices=adlm_models.AUX_KINDS)
    aux_epochs: int = options.field(2, "Training epochs of the auxiliary model.",
                                    check=options.at_least(1))
    aux_data: str = options.field(
        "private", "Data of the auxiliary relevance model: private = the training set "
        "D itself, without privacy (the paper; no finite sound eps1); public_split = "
        "a held-out split removed from D (--adlm_aux_public_size records), so the "
        "relevance function is independent of D and eps1 is a sound bound.", choices=AUX_DATA)
    relevance_file: Optional[str] = options.field(
        None, "Read the relevance map from this file instead of computing it (the code "
        "release's text form, e.g. its Relevance_R_0_075.txt: the image padded by the same "
        "number of pixels on each side); the budgets are then made as the release makes them "
        "(floor, normalise over the padded map, crop). The file was made outside the run, so "
        "the ledger cannot bound what it releases: its eps1 entry is infinite (claimed: "
        "eps1).")
    aux_public_size: Optional[int] = options.field(
        None, "Records held out from the training set for --adlm_aux_data=public_split "
        "(default: 10% of the training set).", check=options.at_least(1))
    batches: str = options.field(
        "fixed", "Batches: fixed disjoint batches (visited in a new order each epoch) or "
        "freshly shuffled batches each epoch.", choices=BATCH_SCHEDULES)
    bn_momentum: float = options.field(
        0.9, "Batch-norm moving-average momentum (bn_clip).",
        check=options.below_one)
    bn_eval: str = options.field(
        "moving", "bn_clip batch norm at inference: moving statistics, or batch statistics as "
        "the code release (evaluate in large batches; the loop uses 1000).",
        choices=adlm_models.BN_EVAL_MODES)
    crop: int = options.field(20, "CIFAR-10 crop size after the noise (code release: 20).",
                              check=options.at_least(1))

    def validate(self) -> None:
        """The rules that join settings: the split's three fractions sum to 1; a public size
        goes with --adlm_aux_data=public_split."""
        if self.eps_split is not None:
            parts = self.eps_split
            if len(parts) != 3 or not all(math.isfinite(p) and p > 0 for p in parts):
                raise ValueError(f"--adlm_eps_split: expected three positive fractions, got "
                                 f"{list(parts)!r}")
            if abs(sum(parts) - 1.0) > 1e-9:
                raise ValueError(f"--adlm_eps_split: the fractions must sum to 1, got "
                                 f"{list(parts)!r} (sum {sum(parts)!r})")
        if self.relevance_file is not None and self.aux_data != "private":
            raise ValueError("--adlm_relevance_file: the map is read, no auxiliary model is "
                             f"trained; do not set --adlm_aux_data={self.aux_data}")
        if self.delta_f == "ref_code" and self.fm_mode not in _LINEAR_FM:
            raise ValueError(f"--adlm_delta_f: ref_code understates Delta_F when the output "
                             f"layer has a bias; it is for the linear --adlm_fm_mode values "
                             f"{list(_LINEAR_FM)} (no finite ledger bound), not "
                             f"{self.fm_mode!r}")
        if self.aux_public_size is not None and self.aux_data != "public_split":
            raise ValueError("--adlm_aux_public_size: only used with "
                             "--adlm_aux_data=public_split")
