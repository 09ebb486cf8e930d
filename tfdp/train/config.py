"""A run's configuration: `TrainConfig`, its common options and a method's typed settings.

`TrainConfig` is what the shared run knows about a run (tfdp-train builds it from its
flags). Its `options` hold the method's option values and the common options by flag name,
as config.json stores them; the run reads them typed: `TrainConfig.common` (the options
every method takes) and `Method.settings` (the method's own `tfdp.options.declare`d
settings class). No TensorFlow import (tfdp-train's `--help` loads it).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Mapping, Protocol, Sequence, TypeVar, Union

import numpy as np

__all__ = ["OptionValue", "OptionValues", "Settings", "SettingsT", "CommonOptions",
           "TrainConfig"]

# One option's value as a flag and config.json ("options") hold it.
OptionValue = Union[bool, int, float, str, Sequence[str], Sequence[float], None]
# A method's options and the common options by flag name (`TrainConfig.options`).
OptionValues = Mapping[str, OptionValue]


class Settings(Protocol):
    """A method's typed settings: a `tfdp.options.declare`d frozen dataclass (e.g.
    `tfdp.train.dpsgd.DPSGDConfig`)."""

    def as_options(self) -> dict[str, OptionValue]:
        """The settings by flag name (the `TrainConfig.options` form)."""


SettingsT = TypeVar("SettingsT")


@dataclasses.dataclass(frozen=True)
class CommonOptions:
    """The options every method takes, besides its own settings (tfdp-train's common flags,
    stored with the method's options in config.json "options").

    Attributes:
      smoothing_sigma: std of the randomized-smoothing input noise (Cohen et al. 2019)
        added to each training example and certified with the gaussian_smoothing
        certificate; None: no input noise. Only some methods take it (tfdp-train checks).
      allow_unsound_certificates: allow certification settings whose sensitivity is not a
        proven bound (their outputs are named "claimed").
    """

    smoothing_sigma: float | None = None
    allow_unsound_certificates: bool = False

    NAMES: ClassVar[tuple[str, ...]] = ("smoothing_sigma", "allow_unsound_certificates")

    @classmethod
    def from_options(cls, options: OptionValues) -> "CommonOptions":
        """The common options in `options` (absent ones take their defaults), checked once.

        Raises:
          ValueError: naming the flag, for a smoothing sigma that is not a finite number > 0
            or an allow_unsound_certificates that is not true or false.
        """
        sigma = options.get("smoothing_sigma")
        if sigma is not None:
            try:
                value = float(sigma)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                value = math.nan
            if isinstance(sigma, bool) or not (0 < value < math.inf):
                raise ValueError(f"--smoothing_sigma: expected a positive number, got {sigma!r}")
            sigma = value
        allow = options.get("allow_unsound_certificates")
        if allow is None:
            allow = False
        if not isinstance(allow, (bool, np.bool_)):
            raise ValueError(f"--allow_unsound_certificates: expected true or false, got "
                             f"{allow!r}")
        return cls(sigma, bool(allow))


@dataclasses.dataclass
class TrainConfig:
    """What the shared run knows about a run (built from the tfdp-train flags).

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
      options: the method's option values and the common options (`CommonOptions.NAMES`),
        by flag name, as config.json stores them; a method's settings dataclass (e.g.
        `tfdp.train.dpsgd.DPSGDConfig`) is accepted and stored as its `as_options()`
        mapping. A method reads its own as `Method.settings` (typed).
      optimizer: the main optimizer, "sgd" or "adam" (`loop.train(optimizer=...)` sets it).
      common: the typed common options (made from `options` when the config is made;
        raises ValueError naming the flag).
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
    options: OptionValues = dataclasses.field(default_factory=dict)
    optimizer: str = "sgd"
    common: CommonOptions = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if hasattr(self.options, "as_options"):
            self.options = self.options.as_options()
        self.common = CommonOptions.from_options(self.options)
