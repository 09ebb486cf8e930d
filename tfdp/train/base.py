"""The interface between a training method and the shared training loop."""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar, Mapping

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
      options: every other flag value, by flag name (method-specific settings); a method's
        config dataclass (e.g. `tfdp.train.dpsgd.DPSGDConfig`) is accepted and stored as its
        `as_options()` mapping.
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

    def __post_init__(self) -> None:
        if hasattr(self.options, "as_options"):
            self.options = self.options.as_options()


class Method(abc.ABC):
    """A training method (AdLM, DP-SGD, ...) run by the shared loop in `tfdp.train.loop`.

    The loop calls, in order: `validate` (before any work), `setup` (host side, once per
    run, not on resume), `build_model` (inside `strategy.scope()`), then `train_step`
    inside `strategy.run` for every batch, `after_epoch` after every epoch.

    Distribution contract (one code path for every strategy): `train_step` runs once per
    replica on that replica's slice of the global batch. Compute the loss as the replica's
    share of the global mean (`tf.nn.compute_average_loss(per_example_loss,
    global_batch_size=global_batch_size)`) and hand the gradients to
    `optimizer.apply_gradients`; the Keras 3 optimizer sums gradients across replicas
    (cross-replica SUM), so the update equals the single-device update on the global batch.
    Noise that must be added once per global batch is added on the first replica only
    (`tfdp.train.replica.is_first_replica()`), drawn from `self.step_seed()`, which is the
    same on every replica. Returned metrics are per-replica shares, summed across replicas.

    On resume, `setup` is not re-run when `setup_state()` returned a non-empty dict (it is
    saved next to the checkpoints and handed back through `restore_setup_state`); otherwise it
    is re-run with the same `rng` seed, and the loop checks that the ledger did not change.
    """

    name: str = ""
    # Flags that may take a new value on --resume (what they change is accounted or has no
    # privacy effect); any other change of the run's configuration is refused on resume.
    resume_mutable_flags: ClassVar[tuple[str, ...]] = ("epochs",)
    # True: the loop passes `indices=` (each example's position in the training set, int64
    # [B]) to `train_step`, for per-record randomness keyed by position, never by content.
    uses_record_indices: ClassVar[bool] = False
    # Per-method defaults of the generic flags (epochs, batch_size, learning_rate, optimizer,
    # epsilon, delta) used when the flag is not given on the command line.
    default_flags: ClassVar[dict] = {}

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

    # Optional hooks (defaults keep the behaviour described above).

    def max_steps(self) -> int | None:
        """Hard cap on training steps (e.g. DP-SGD's budget); None for no cap."""
        return None

    def setup_state(self) -> dict:
        """Host-side results of `setup` to save with the checkpoints (name -> numpy array)."""
        return {}

    def restore_setup_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restores what `setup_state` returned, instead of re-running `setup` on resume."""
        del state

    def step_spend(self) -> dict | None:
        """The privacy spent by every training step, for methods that spend per step.

        Return None (default) when the method's privacy is spent in `setup` (its ledger
        entries are final there). A per-step method (DP-SGD, Secure-SGD) returns a dict with
        keys "name" (ledger entry name), "noise_multiplier" (sigma), "sampling" ("poisson" or
        "shuffle"), "accountant" ("rdp" or "pld"), "delta" and optionally "protects" and
        "note"; the loop then keeps the ledger entry equal to the composition of the steps that
        actually executed, segment by segment across resumes (`PrivacyLedger.record_steps`;
        docs/ledger.md), charging each epoch before running it.
        """
        return None

    def public_split_size(self, num_train: int) -> int:
        """How many training records to hold out as public data (default 0: none).

        The loop removes that many records (a seeded random choice, independent of the data)
        from the private training set before `setup` and hands them to `set_public_data`; the
        private set the method trains on, and its accounting, no longer contain them.
        """
        del num_train
        return 0

    def set_public_data(self, x_public: np.ndarray, y_public: np.ndarray) -> None:
        """Receives the public split (see `public_split_size`) before `setup`."""
        del x_public, y_public

    def checkpoint_objects(self) -> dict:
        """Extra trackables to checkpoint besides the loop's model and optimizer.

        Any object tf.train.Checkpoint can track is accepted: tf.Variable, tf.Module,
        tf.random.Generator, and Keras 3 models, layers and optimizers (trackable on the
        TensorFlow backend). The loop raises at start-up, naming the key, for anything else.
        Called after `build_model`; objects returned here are restored on resume.

        The default collects the method's own tf.Variable, tf.Module, tf.random.Generator,
        Keras layer/model and Keras optimizer attributes, so noise a method keeps outside its
        model (or a second model and its optimizer) is restored on resume too.
        """
        import keras  # pylint: disable=import-outside-toplevel
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        # State-holding kinds only (not e.g. a tf.data.Dataset attribute, also trackable).
        kinds = (tf.Variable, tf.Module, tf.random.Generator, keras.layers.Layer,
                 keras.optimizers.Optimizer)
        return {k: v for k, v in sorted(vars(self).items())
                if isinstance(v, kinds) and not k.startswith("__")}

    def step_seed(self, salt: int = 0):
        """The current step's stateless seed (int64 [2]), identical on every replica.

        Only valid inside `train_step` (see `tfdp.train.replica.step_seed`).
        """
        from tfdp.train import replica  # pylint: disable=import-outside-toplevel
        return replica.step_seed(salt)
