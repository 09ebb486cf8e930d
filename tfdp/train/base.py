"""The interface between a training method and the shared training run (`tfdp.train.loop`).

A method is a `Method` subclass with explicit hooks (docs/trainer.md):

- `validate()`: configuration checks, before any work;
- `setup(data_spec, ledger, rng, strategy)`: one-time host-side work (private statistics,
  noise drawn once), adding ledger entries;
- `build()`: builds every model, optimizer and state variable inside `strategy.scope()` and
  returns them by name; the run checkpoints exactly these objects;
- `batches(epoch, rng)`: the record indices of every step of an epoch (an index array, or a
  tuple of index arrays such as StoBatch's (benign, adversarial) pairs);
- `train_step(ctx, x, y)`: one replica's step inside `strategy.run`, with a `StepContext`.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import Any, ClassVar, Generic, Iterable, Mapping, Optional, Sequence

import numpy as np
from tfdp import data
from tfdp import checks
# A run's configuration (split out of this module, issue 42); the names stay importable here.
from tfdp.train.config import (CommonOptions, OptionValue, OptionValues,  # noqa: F401
                               Settings, SettingsT, TrainConfig)

OPTIMIZERS = ("sgd", "adam")
BATCH_SCHEDULES = ("shuffle", "fixed", "poisson")


@dataclasses.dataclass(frozen=True)
class DataSpec:
    """What a method may know about its training data.

    Attributes:
      input_shape: shape of one example (e.g. (28, 28, 1)).
      num_classes: number of classes.
      value_range: the (low, high) range of the inputs.
      num_train: number of private training records (after any public split).
      dataset: the data set's name ("" when unknown).
      x_train: the private training inputs, for `setup`'s private host-side computations
        (e.g. AdLM's relevance, StoBatch's in-place input perturbation); not compared.
      y_train: their integer labels.
    """

    input_shape: tuple[int, ...]
    num_classes: int
    value_range: tuple[float, float] = (-1.0, 1.0)
    num_train: int = 0
    dataset: str = ""
    x_train: np.ndarray | None = dataclasses.field(default=None, repr=False, compare=False)
    y_train: np.ndarray | None = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, x_train: np.ndarray, y_train: np.ndarray, num_classes: int, *,
           value_range: Sequence[float] = (-1.0, 1.0), dataset: str = "") -> "DataSpec":
        """The spec of in-memory training arrays.

        Raises:
          ValueError: if the arrays differ in length or `num_classes` < 1.
        """
        if len(x_train) != len(y_train):
            raise ValueError(f"y_train: {len(y_train)} labels for {len(x_train)} inputs")
        if int(num_classes) < 1:
            raise ValueError(f"num_classes: expected >= 1, got {num_classes!r}")
        return cls(tuple(int(d) for d in x_train.shape[1:]), int(num_classes),
                   (float(value_range[0]), float(value_range[1])), len(x_train), dataset,
                   x_train, y_train)


@dataclasses.dataclass(frozen=True)
class StepContext:
    """What one replica's `train_step` knows about its step (built by the run, per step).

    Attributes:
      seed: int64 [2], the step's stateless seed, the same on every replica; drawn once per
        step from the run's checkpointed generator.
      global_batch_size: the global batch size (the divisor of per-example sums).
      indices: int64 [b], the positions in the private training set of this replica's
        records (per-record randomness is keyed by these, never by content); None when not
        known (direct calls).
      replica_id: this replica's index in its sync group (int32 scalar tensor or int).
      num_replicas: replicas in sync.
    """

    seed: Any
    global_batch_size: int
    indices: Any = None
    replica_id: Any = 0
    num_replicas: int = 1

    @classmethod
    def current(cls, seed: Any, global_batch_size: int, indices: Any = None) -> "StepContext":
        """The context of the calling replica (or of the default strategy outside one)."""
        # lazy: loads tensorflow; importing tfdp.train.base does not
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        ctx = tf.distribute.get_replica_context()
        rid = 0 if ctx is None else ctx.replica_id_in_sync_group
        num = 1 if ctx is None else int(ctx.num_replicas_in_sync)
        return cls(tf.convert_to_tensor(seed, tf.int64), int(global_batch_size),
                   indices, tf.convert_to_tensor(rid, tf.int32), num)

    def step_seed(self, salt: int = 0) -> Any:
        """The step seed with `salt` folded in (0: the seed itself); same on every replica.

        Use it for noise drawn once per global batch, added on the first replica only.
        """
        return step_seed(self.seed, salt)

    def replica_seed(self, salt: int = 0) -> Any:
        """A seed independent per replica: `step_seed(salt)` with the replica id folded in."""
        return replica_seed(self.step_seed(salt), self.replica_id)

    def is_first_replica(self) -> Any:
        """Boolean tensor, True on replica 0 (which adds once-per-global-batch noise)."""
        # lazy: loads tensorflow; importing tfdp.train.base does not
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        return tf.equal(tf.cast(self.replica_id, tf.int32), 0)

    def row_mask(self) -> Any:
        """float32 [b]: 1.0 for this replica's real records, 0.0 for padding rows (index -1).

        None when `indices` is None (direct calls: every row is real).
        """
        # lazy: loads tensorflow; importing tfdp.train.base does not
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        if self.indices is None:
            return None
        return tf.cast(tf.greater_equal(self.indices, 0), tf.float32)

    def first_replica_mask(self) -> Any:
        """1.0 on replica 0 and 0.0 elsewhere (float32), to add a term once per update."""
        # lazy: loads tensorflow; importing tfdp.train.base does not
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        return tf.cast(self.is_first_replica(), tf.float32)


def step_seed(seed: Any, salt: int = 0) -> Any:
    """`seed` (int64 [2]) with the integer `salt` folded in; `seed` itself for salt 0."""
    # lazy: loads tensorflow; importing tfdp.train.base does not
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    seed = tf.convert_to_tensor(seed)
    return tf.random.experimental.stateless_fold_in(seed, int(salt)) if salt else seed


def replica_seed(seed: Any, replica_id: Any) -> Any:
    """`seed` with a replica id folded in (`tfdp.mechanisms.sampling.fold_in_replica`)."""
    # lazy: loads tensorflow; importing tfdp.train.base does not
    from tfdp.mechanisms import sampling  # pylint: disable=import-outside-toplevel
    return sampling.fold_in_replica(seed, replica_id)


def derive_seed(run_key: int, stream: int, index: int = 0, bits: int = 192) -> int:
    """A `bits`-bit seed for `stream` (and e.g. epoch `index`) derived from a run key.

    The default 192 bits fill a Philox generator's whole state (128-bit counter and 64-bit
    key) and seed numpy generators with as much entropy as the run key holds (>= 128 bits
    unless the user gave a --seed), so no privacy stream can be guessed more easily than the
    key itself. Use a small `bits` only for randomness that protects nothing (e.g. weight
    initialisation through `keras.utils.set_random_seed`, which takes 32 bits).
    """
    if not 1 <= int(bits) <= 256:
        raise ValueError(f"bits must lie in [1, 256], got {bits!r}")
    words = np.random.SeedSequence([int(run_key), int(stream), int(index)]).generate_state(
        8, np.uint32)
    value = 0
    for w in words:
        value = (value << 32) | int(w)
    return value >> (256 - int(bits))


def make_optimizer(name: str, learning_rate: float, adam_epsilon: float | None = None):
    """Keras optimizer named by --optimizer ("sgd" or "adam").

    Args:
      name: "sgd" or "adam".
      learning_rate: > 0.
      adam_epsilon: Adam's epsilon (None: Keras' default, 1e-7); ignored by SGD.

    Raises:
      ValueError: if `name` is unknown or `learning_rate` is not a positive finite number.
    """
    # lazy: loads keras; importing tfdp.train.base does not
    import keras  # pylint: disable=import-outside-toplevel
    if not (np.isfinite(learning_rate) and learning_rate > 0):
        raise ValueError(f"learning_rate: expected a positive number, got {learning_rate!r}")
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate)
    if name == "adam":
        if adam_epsilon is None:
            return keras.optimizers.Adam(learning_rate)
        return keras.optimizers.Adam(learning_rate, epsilon=float(adam_epsilon))
    raise ValueError(f"optimizer: unknown optimizer {name!r}; choose one of {OPTIMIZERS}")


def shuffled_batches(num_examples: int, batch_size: int, rng: np.random.Generator
                     ) -> list[np.ndarray]:
    """A fresh permutation cut into floor(n/m) batches of m (the remainder dropped)."""
    steps = num_examples // batch_size
    return list(rng.permutation(num_examples)[: steps * batch_size].reshape(steps, -1))


def fixed_batches(num_examples: int, batch_size: int, layout_seed: int,
                  rng: np.random.Generator) -> list[np.ndarray]:
    """Fixed disjoint batches drawn once per run (`layout_seed`), visited in `rng`'s order."""
    batches = np.asarray(data.fixed_batches(num_examples, batch_size, layout_seed))
    return list(batches[rng.permutation(len(batches))])


def lot_bucket(size: int, batch_size: int) -> int:
    """The padded size of a Poisson lot of `size` records (expected size `batch_size`).

    The next multiple of g = 8 * ceil(sqrt(batch_size) / 8): a Poisson lot's size has standard
    deviation about sqrt(batch_size), so lots fall into about six buckets (six static-shape
    step graphs) and carry on average g/2 padding rows (3% at batch 256, g = 16).
    """
    g = 8 * max(1, math.ceil(math.sqrt(batch_size) / 8))
    return max(g, -(-int(size) // g) * g)


def poisson_lots(num_examples: int, batch_size: int, rng: np.random.Generator
                 ) -> list[np.ndarray]:
    """floor(n/m) lots, each record joining each lot with probability q = m/n (Abadi et al.
    2016, lot sampling), so lot sizes vary."""
    q = batch_size / num_examples
    return [np.flatnonzero(rng.random(num_examples) < q)
            for _ in range(num_examples // batch_size)]


class Method(abc.ABC, Generic[SettingsT]):
    """A training method (AdLM, DP-SGD, ...) run by `tfdp.train.loop.Run`.

    Generic in its settings class: `class DPSGD(Method[DPSGDConfig])` declares
    `settings_class = DPSGDConfig`, and `self.settings` is a `DPSGDConfig`.

    The run calls, in order: `validate` (before any work), `attach` (always), `setup` (host
    side, once per run; on resume only when `setup_state()` saved nothing), `build` (inside
    `strategy.scope()`), then for every epoch `batches`, `train_step` inside `strategy.run`
    for every batch, and `after_epoch`.

    Distribution contract (one code path for every strategy): `train_step` runs once per
    replica on that replica's slice of the global batch. Compute the loss as the replica's
    share of the global mean (`tf.nn.compute_average_loss(per_example_loss,
    global_batch_size=ctx.global_batch_size)`) and hand the gradients to
    `optimizer.apply_gradients`; the Keras 3 optimizer sums gradients across replicas
    (cross-replica SUM), so the update equals the single-device update on the global batch.
    Noise that must be added once per global batch is added on the first replica only
    (`ctx.is_first_replica()`), drawn from `ctx.step_seed(salt)`, which is the same on every
    replica. Returned metrics are per-replica shares, summed across replicas.

    On resume, `setup` is not re-run when `setup_state()` returned a non-empty dict (it is
    saved next to the checkpoints and handed back through `restore_setup_state`); otherwise it
    is re-run with the same `rng` seed, and the run checks that the ledger did not change.
    """

    name: str = ""
    # Flags that may take a new value on --resume (what they change is accounted or has no
    # privacy effect); any other change of the run's configuration is refused on resume.
    resume_mutable_flags: ClassVar[tuple[str, ...]] = ("epochs",)
    # Per-method defaults of the generic flags (epochs, batch_size, learning_rate, optimizer,
    # epsilon, delta) used when the flag is not given on the command line.
    default_flags: ClassVar[dict] = {}
    # The method's typed settings class (a `tfdp.options.declare`d frozen dataclass, e.g.
    # `tfdp.train.dpsgd.DPSGDConfig`): the single declaration of its flags, defaults, help and
    # checks. `self.settings` is the instance made from `config.options`.
    settings_class: ClassVar[Optional[type]] = None
    # Whether the method takes --smoothing_sigma (Gaussian noise on each training input,
    # certified by randomized smoothing): tfdp-train refuses the flag for a method without it.
    # Not inherited (read through `takes_input_smoothing`): a subclass that replaces the
    # training step must add the input noise itself and say so, or its certificates would
    # certify noise it never trained with.
    takes_smoothing: ClassVar[bool] = False

    @classmethod
    def takes_input_smoothing(cls) -> bool:
        """Whether this class itself declares `takes_smoothing = True`."""
        return bool(cls.__dict__.get("takes_smoothing", False))

    def __init__(self, config: TrainConfig):
        self.config = config
        self._settings = None
        self._settings_of = None
        if self.settings_class is not None:
            self.settings  # pylint: disable=pointless-statement  # checks them, naming the flag
        self.data_spec: DataSpec | None = None
        self.strategy = None
        self.layout_seed: int | None = None
        self.layer_seed: int | None = None
        self.model = None  # set by the default `build`
        self.optimizer = None

    @property
    def settings(self) -> SettingsT:
        """The typed settings of this run (`settings_class` made from `config.options`).

        Raises:
          ValueError: naming the flag, when a setting or a combination of them is unusable.
        """
        if self.settings_class is None:
            raise AttributeError(f"{type(self).__name__} declares no settings_class")
        if self._settings_of is not self.config:  # made again if the run replaced the config
            self._settings = self.settings_class.from_options(self.config.options)
            self._settings_of = self.config
        return self._settings

    def attach(self, data_spec: DataSpec, strategy: Any = None, layout_seed: int = 0,
               layer_seed: int | None = None) -> None:
        """Gives the method its data spec, strategy and seeds (called by the run).

        Args:
          data_spec: the private training data's spec.
          strategy: the tf.distribute strategy (None: the default strategy).
          layout_seed: the run's seed for batch layouts drawn once per run (`fixed_batches`).
          layer_seed: a 128-bit seed derived from the run's secret key for the noise layers
            `build` creates (their stateless streams are keyed by both int64 words); None: the
            layers draw OS entropy. It must never be derived from `config.seed` directly,
            and `tfdp.rundir.save_model` leaves it out of saved models.
        """
        self.data_spec = data_spec
        self.strategy = strategy
        self.layout_seed = int(layout_seed)
        self.layer_seed = None if layer_seed is None else int(layer_seed)

    def validate(self) -> None:
        """Raises ValueError naming the flag when the configuration is unusable."""

    def setup(self, data_spec: DataSpec, ledger, rng: np.random.Generator, strategy: Any = None
              ) -> None:
        """One-time host-side work before training (e.g. private relevance); adds ledger entries.

        Args:
          data_spec: the private training data (`data_spec.x_train`, `data_spec.y_train`).
          ledger: the run's `tfdp.accounting.PrivacyLedger`.
          rng: the run's seeded setup stream.
          strategy: the run's tf.distribute strategy (None: the default strategy).
        """

    def build(self) -> dict:
        """Builds the method's state inside `strategy.scope()`; returns it by checkpoint name.

        Every returned object is checkpointed and restored on resume; the run raises at
        start-up, naming the key, for anything `tf.train.Checkpoint` cannot track. The key
        "model" is required: the model evaluated and saved as model.keras. The default
        builds `build_model(...)` and one optimizer (`make_optimizer()`), kept as
        `self.model` and `self.optimizer`, plus every object of `checkpoint_objects()`
        (under "method_<key>").

        Raises:
          RuntimeError: if `attach` was not called.
          ValueError: for an untrackable object of `checkpoint_objects()`.
        """
        # lazy: loads tensorflow; importing tfdp.train.base does not
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        spec = self._require_spec()
        model = self.build_model(tuple(spec.input_shape), int(spec.num_classes))
        model(tf.zeros((1,) + tuple(spec.input_shape), tf.float32), training=False)
        optimizer = self.make_optimizer()
        optimizer.build(model.trainable_variables)
        extra = checks.check_trackables(self.checkpoint_objects(),
                                        f"checkpoint_objects: {type(self).__name__}")
        self.model, self.optimizer = model, optimizer
        return {"model": model, "optimizer": optimizer,
                **{f"method_{k}": v for k, v in extra.items()}}

    def accuracy_model(self, model):
        """What the run's test accuracy (per epoch and in metrics.json) scores: a callable
        `f(x, training=False) -> logits`. Default: the trained model itself."""
        return model

    def build_model(self, input_shape: tuple[int, ...], num_classes: int):
        """Returns a keras.Model mapping inputs to logits (used by the default `build`)."""
        raise NotImplementedError(f"{type(self).__name__}: define build_model or build")

    def make_optimizer(self, name: str | None = None, learning_rate: float | None = None):
        """A Keras optimizer (default: the run's --optimizer and --learning_rate), with
        `adam_epsilon()` when it is Adam."""
        return make_optimizer(name or self.config.optimizer,
                              self.config.learning_rate if learning_rate is None
                              else learning_rate, self.adam_epsilon())

    def adam_epsilon(self) -> float | None:
        """Adam's epsilon for `make_optimizer` (None: Keras' default); a method's option."""
        return None

    @abc.abstractmethod
    def train_step(self, ctx: StepContext, x, y) -> dict:
        """One replica's step inside strategy.run; applies the update, returns scalar metrics.

        Args:
          ctx: the step's context (seed, global batch size, record indices, replica).
          x: this replica's inputs.
          y: their labels.
        """

    def batch_schedule(self) -> str:
        """A label of the batches `batches` yields, recorded in config.json.

        The default `batches` follows it: "shuffle" (fresh shuffled batches each epoch),
        "fixed" (fixed disjoint batches) or "poisson" (Poisson lots).
        """
        return "shuffle"

    def batches(self, epoch: int, rng: np.random.Generator) -> Iterable:
        """The record indices of every step of epoch `epoch`.

        Args:
          epoch: the epoch (0-based).
          rng: the epoch's seeded stream (the same on resume).

        Returns:
          An iterable of int index arrays (one per step), or of tuples of index arrays (e.g.
          (benign, adversarial) pairs), which the run concatenates in order into one batch.

        Raises:
          ValueError: for an unknown `batch_schedule()`.
        """
        del epoch
        n, m = self._require_spec().num_train, int(self.config.batch_size)
        schedule = self.batch_schedule()
        if schedule == "shuffle":
            return shuffled_batches(n, m, rng)
        if schedule == "fixed":
            return fixed_batches(n, m, self.layout_seed, rng)
        if schedule == "poisson":
            return poisson_lots(n, m, rng)
        raise ValueError(f"batch_schedule: {type(self).__name__} returned {schedule!r}; "
                         f"expected one of {BATCH_SCHEDULES}")

    def after_epoch(self, epoch: int, ledger) -> bool:
        """Called after each epoch; returns True to stop training (e.g. budget spent)."""
        del epoch, ledger
        return False

    def certification_config(self) -> dict | None:
        """What `tfdp.certify` needs to certify this model (None if it cannot be certified)."""
        return None

    def epoch_config_updates(self) -> dict | None:
        """Entries of config.json to refresh after each epoch (after `after_epoch`), or None.

        The run owns the run directory: a method never writes config.json itself; the run
        writes these entries (chief only, atomically).
        """
        return None

    def max_steps(self) -> int | None:
        """Hard cap on training steps (e.g. DP-SGD's budget); None for no cap."""
        return None

    def trace_any_batch_size(self) -> bool:
        """Whether epochs with batches of varying size (Poisson lots) run one step graph.

        True: the run traces the step for any batch size before the first step of such an
        epoch, so a first run and a resume execute the same graph (needed when a graph traced
        for a static batch size can differ in the last bit, e.g. DP-SGD's ghost paths).
        False (default): the step is traced as batches arrive.
        """
        return False

    def replays_identically(self) -> bool:
        """Whether a resume recomputes the steps after its checkpoint bit for bit.

        The steps' lots and noise are keyed by the run key and the step's position, so a
        resume draws the same ones again; the floating-point result is also the same when each
        step runs the graph it ran in the stopped process: fixed-size batches, padded lots, or
        one graph traced for any batch size (a graph traced for a static size can differ in
        the last bit). True lets the run charge the replayed steps once (docs/ledger.md);
        False keeps them charged again. Override to True only with a test that resumes the
        method bit for bit (tests/train/test_replay.py).
        """
        return (self.batch_schedule() != "poisson" or self.pads_lots()
                or self.trace_any_batch_size())

    def pads_lots(self) -> bool:
        """Whether batches of varying size (Poisson lots) are padded to a few static sizes.

        True: the run pads each lot with rows of zeros to `lot_bucket(len(lot), batch_size)`
        rows and gives the padded rows the record index -1 (`StepContext.row_mask()` is 0.0
        for them); `train_step` must make them contribute nothing (e.g. a clip factor of 0).
        Each bucket size runs its own static-shape graph (several times faster on CPU than a
        graph traced for any batch size), traced the same way on a first run and a resume.
        The lot itself, and so the accounting, is unchanged. False (default): no padding.
        """
        return False

    def setup_state(self) -> dict:
        """Host-side results of `setup` to save with the checkpoints (name -> numpy array)."""
        return {}

    def restore_setup_state(self, state: Mapping[str, np.ndarray]) -> None:
        """Restores what `setup_state` returned, instead of re-running `setup` on resume."""
        del state

    def step_spend(self):
        """The privacy spent by every training step, for methods that spend per step.

        Return None (default) when the method's privacy is spent in `setup` (its ledger
        entries are final there). A per-step method (DP-SGD, Secure-SGD) returns a
        `tfdp.accounting.StepSpend` (entry name, noise multiplier, sampling, accountant,
        delta, what it protects, a note, whether it is unbounded); the run then keeps the
        ledger entry equal to the composition of the steps that actually executed, segment by
        segment across resumes (`StepSpend.record`; docs/ledger.md), charging each epoch
        before running it. `StepSpend.dp_event(segments)` is the dp_accounting event of what
        ran.
        """
        return None

    def public_split_size(self, num_train: int) -> int:
        """How many training records to hold out as public data (default 0: none).

        The run removes that many records (a seeded random choice, independent of the data)
        from the private training set before `setup` and hands them to `set_public_data`; the
        private set the method trains on, and its accounting, no longer contain them.
        """
        del num_train
        return 0

    def set_public_data(self, x_public: np.ndarray, y_public: np.ndarray) -> None:
        """Receives the public split (see `public_split_size`) before `setup`."""
        del x_public, y_public

    def checkpoint_objects(self) -> dict:
        """Extra trackables the default `build` checkpoints besides its model and optimizer.

        Any object tf.train.Checkpoint can track is accepted: tf.Variable, tf.Module,
        tf.random.Generator, and Keras 3 models, layers and optimizers (trackable on the
        TensorFlow backend). The run raises at start-up, naming the key, for anything else.
        Called after `build_model`; objects returned here are restored on resume.

        The default collects the method's own tf.Variable, tf.Module, tf.random.Generator,
        Keras layer/model and Keras optimizer attributes (except `model` and `optimizer`),
        so noise a method keeps outside its model is restored on resume too.
        """
        # lazy: loads keras; importing tfdp.train.base does not
        import keras  # pylint: disable=import-outside-toplevel
        # lazy: loads tensorflow; importing tfdp.train.base does not
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        # State-holding kinds only (not e.g. a tf.data.Dataset attribute, also trackable).
        kinds = (tf.Variable, tf.Module, tf.random.Generator, keras.layers.Layer,
                 keras.optimizers.Optimizer)
        return {k: v for k, v in sorted(vars(self).items())
                if isinstance(v, kinds) and not k.startswith("__")
                and k not in ("model", "optimizer")}

    def _require_spec(self) -> DataSpec:
        if self.data_spec is None:
            raise RuntimeError(f"{type(self).__name__}: attach(data_spec, ...) must run first")
        return self.data_spec
