"""The interface between a training method and the shared training loop."""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Mapping

import numpy as np


@dataclasses.dataclass
class TrainConfig:
    """What the shared loop knows about a run (built from the tfdp-train flags).

    Attributes:
      method: method name, e.g. "adlm".
      dataset: dataset name for `tfdp.data.load`.
      model_dir: run directory.
      epochs: training epochs.
      batch_size: global batch size (split across replicas).
      learning_rate: optimizer learning rate.
      seed: integer seed, or None for OS entropy.
      epsilon: total privacy budget of the run (None for non-private methods).
      delta: delta of the run (0 for pure eps-DP methods).
      value_range: the data's (low, high) pixel range.
      options: every other flag value, by flag name (method-specific settings).
    """

    method: str
    dataset: str
    model_dir: str
    epochs: int = 1
    batch_size: int = 128
    learning_rate: float = 1e-3
    seed: int | None = None
    epsilon: float | None = None
    delta: float = 0.0
    value_range: tuple[float, float] = (-1.0, 1.0)
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)


class Method(abc.ABC):
    """A training method (AdLM, DP-SGD, ...) run by the shared loop in `tfdp.train.loop`.

    The loop calls, in order: `validate` (before any work), `setup` (host side, once per
    run, not on resume), `build_model` (inside `strategy.scope()`), then `train_step`
    inside `strategy.run` for every batch, `after_epoch` after every epoch.
    """

    name: str = ""

    def __init__(self, config: TrainConfig):
        self.config = config

    def validate(self) -> None:
        """Raises ValueError naming the flag when the configuration is unusable."""

    def setup(self, x_train: np.ndarray, y_train: np.ndarray, ledger, rng: np.random.Generator
              ) -> None:
        """One-time host-side work before training (e.g. private relevance); adds ledger entries."""

    @abc.abstractmethod
    def build_model(self, input_shape: tuple[int, ...], num_classes: int):
        """Returns a keras.Model mapping inputs to logits; called inside strategy.scope()."""

    @abc.abstractmethod
    def train_step(self, model, optimizer, x, y, global_batch_size: int) -> dict:
        """One replica's step inside strategy.run; applies the update, returns scalar metrics."""

    def batch_schedule(self) -> str:
        """"shuffle" (fresh shuffled batches each epoch) or "fixed" (fixed disjoint batches)."""
        return "shuffle"

    def after_epoch(self, epoch: int, ledger) -> bool:
        """Called after each epoch; returns True to stop training (e.g. budget spent)."""
        return False

    def certification_config(self) -> dict | None:
        """What `tfdp.certify` needs to certify this model (None if it cannot be certified)."""
        return None
