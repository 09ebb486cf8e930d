"""`DPModel`: DP-SGD for a user's Keras model through Keras' own `fit`.

The wrapper owns the lots: every epoch it draws floor(n / m) Poisson lots (each record joins
each lot independently with probability q = m / n, keyed by the record's position from the
run's secret key: what the accountant analyses), pads each to a few static sizes (padding rows
add nothing), and trains each lot with per-example clipping (`tfdp.keras.clip`), one draw of
N(0, sigma^2 C^2 I) on the clipped sum (Abadi et al. 2016, Alg. 1) and the compiled optimizer.
sigma is calibrated by `tfdp.accounting.dpsgd_noise_multiplier` from (eps, delta, epochs, m, n).
The ledger is computed from a step counter that the training step itself increments, so it
never shows less than what ran. `evaluate` and `predict` are Keras' own, on the user's model.
"""

from __future__ import annotations

import math
import os
from typing import Any, Optional

import keras
import numpy as np
import tensorflow as tf

from tfdp import accounting, checks, rundir
from tfdp.certify import smoothing
from tfdp.keras import clip, layers
from tfdp.mechanisms import sampling as noise_sampling
from tfdp.train import base, report

# Randomness streams derived from the run key (`tfdp.train.base.derive_seed`).
_STREAM_LOTS, _STREAM_NOISE = 101, 102
SECRET_BITS = 256

COVERS = ("the trainable weights of the wrapped Keras model after DPModel.fit (and every value "
          "computed from them alone), for add/remove-one neighbouring training sets of the "
          "arrays given to fit; not preprocessing done before fit, hyper-parameter choice, or "
          "anything else computed from the training data")

_FIT_REFUSED = {
    "batch_size": "the lot size is make_private's batch_size (lots are Poisson-sampled by tfdp)",
    "steps_per_epoch": "an epoch is floor(n / batch_size) Poisson lots",
    "shuffle": "lots are Poisson-sampled by tfdp",
    "sample_weight": "per-example weights would change the clipping bound",
    "class_weight": "per-example weights would change the clipping bound",
    "validation_split": "pass validation_data (a held-out split) instead",
}


def _as_arrays(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """The training set as two arrays (a finite, unbatched tf.data source is read once)."""
    if isinstance(x, tf.data.Dataset):
        if y is not None:
            raise ValueError("y: must be None when x is a tf.data.Dataset of (x, y) pairs")
        xs, ys = [], []
        for element in x.as_numpy_iterator():
            if not (isinstance(element, tuple) and len(element) == 2):
                raise ValueError("x: a tf.data source must yield (features, label) pairs")
            xs.append(element[0])
            ys.append(element[1])
        if not xs:
            raise ValueError("x: the tf.data source is empty")
        try:
            return np.stack(xs), np.stack(ys)
        except ValueError as err:
            raise ValueError(f"x: the tf.data source must yield single examples of one shape "
                             f"(unbatched; call .unbatch()): {err}") from None
    if x is None or y is None:
        raise ValueError("x, y: DPModel.fit needs training arrays x and y (or a tf.data "
                         "source of (x, y) pairs as x)")
    x, y = np.asarray(x), np.asarray(y)
    if x.ndim < 1 or y.ndim < 1 or len(x) != len(y):
        raise ValueError(f"x, y: need the same number of examples, got shapes {x.shape} and "
                         f"{y.shape}")
    return x, y


def _padded_positions(lot: np.ndarray, size: int) -> np.ndarray:
    """The record positions of `lot`, padded with -1 (a padding row) to `size`."""
    ib = np.full([size], -1, np.int64)
    ib[:len(lot)] = lot
    return ib


def _gather_rows(table: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
    """Rows of `table` at `positions`; rows of position -1 (padding) are zeros."""
    rows = tf.gather(table, tf.maximum(positions, 0))
    keep = tf.reshape(positions >= 0, [-1] + [1] * (len(table.shape) - 1))
    return tf.where(keep, rows, tf.zeros_like(rows))


class DPModel(keras.Model):
    """A Keras model trained by DP-SGD in `fit`; see `make_private`.

    Attributes:
      inner: the user's model (trained in place; save or export it as usual).
      noise_multiplier: sigma (None until the first `fit` calibrates it from epsilon).
    """

    def __init__(self, model: Any, *, batch_size: int, epsilon: Optional[float] = None,
                 delta: float = 1e-5, epochs: Optional[int] = None, l2_clip: float = 1.0,
                 noise_multiplier: Optional[float] = None,
                 accountant: str = accounting.DEFAULT_ACCOUNTANT,
                 seed: Optional[int] = None, run_dir: Optional[str] = None,
                 input_noise: Optional[float] = None, name: Optional[str] = None):
        if not isinstance(model, keras.Model):
            raise TypeError(f"model: expected a keras.Model, got {type(model).__name__}")
        self._validate(batch_size, epsilon, delta, epochs, l2_clip, noise_multiplier,
                       accountant, seed, run_dir)
        if input_noise is not None:
            checks.check_positive(input_noise, "input_noise")
        layers.check_model(model)
        super().__init__(name=name or f"dp_{model.name}")
        self.input_noise = None if input_noise is None else float(input_noise)
        self.inner = model
        self.batch_size = int(batch_size)
        self.target_epsilon = None if epsilon is None else float(epsilon)
        self.delta = float(delta)
        self.epochs = None if epochs is None else int(epochs)
        self.l2_clip = float(l2_clip)
        self.accountant = accountant
        self.noise_multiplier = None if noise_multiplier is None else float(noise_multiplier)
        self.run_dir = None if run_dir is None else os.path.abspath(run_dir)
        user_key = seed is not None
        # The run's secret key: lots and noise derive from it; it is never written anywhere.
        key = int(seed) if user_key else int.from_bytes(os.urandom(SECRET_BITS // 8), "big")
        object.__setattr__(self, "_noise_seed_kind", "user_supplied" if user_key
                           else "os_entropy")
        object.__setattr__(self, "_run_key", key)
        # Untracked (object.__setattr__): they hold seed-derived state and must not be saved
        # with the model's weights.
        object.__setattr__(self, "_generator", tf.random.Generator.from_seed(
            base.derive_seed(key, _STREAM_NOISE)))
        object.__setattr__(self, "_steps", tf.Variable(0, dtype=tf.int64, trainable=False))
        object.__setattr__(self, "_lot_epoch", 0)
        object.__setattr__(self, "_epoch_lots", None)
        object.__setattr__(self, "_train_arrays", None)
        object.__setattr__(self, "_num_examples", None)
        object.__setattr__(self, "_planned_steps", None)
        object.__setattr__(self, "_entries", None)

    @staticmethod
    def _validate(batch_size, epsilon, delta, epochs, l2_clip, noise_multiplier, accountant,
                  seed, run_dir) -> None:
        checks.check_positive_int(batch_size, "batch_size")
        if epsilon is None and noise_multiplier is None:
            raise ValueError("epsilon: give a target epsilon (or a noise_multiplier)")
        if epsilon is not None:
            checks.check_positive(epsilon, "epsilon")
            if noise_multiplier is not None:
                raise ValueError("noise_multiplier: give epsilon or noise_multiplier, not both")
            if epochs is None:
                raise ValueError("epochs: needed to calibrate the noise to epsilon")
        if noise_multiplier is not None:
            checks.check_positive(noise_multiplier, "noise_multiplier")
        if epochs is not None:
            checks.check_positive_int(epochs, "epochs")
        if not (isinstance(delta, (int, float)) and 0.0 < float(delta) < 1.0):
            raise ValueError(f"delta: must lie in (0, 1), got {delta!r}")
        checks.check_positive(l2_clip, "l2_clip")
        if accountant not in accounting.ACCOUNTANTS:
            raise ValueError(f"accountant: expected one of {accounting.ACCOUNTANTS}, got "
                             f"{accountant!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                                 or seed < 0):
            raise ValueError(f"seed: expected a non-negative integer or None, got {seed!r}")
        if run_dir is not None and not isinstance(run_dir, (str, os.PathLike)):
            raise ValueError(f"run_dir: expected a path, got {run_dir!r}")

    # ------------------------------------------------------------------ Keras interface

    def call(self, inputs, training=None):
        return self.inner(inputs, training=training)

    def compile(self, *args, jit_compile: Any = False, **kwargs):  # pylint: disable=arguments-differ
        """Keras' `compile`; XLA is off by default (the clipping pass uses ops it lacks)."""
        super().compile(*args, jit_compile=jit_compile, **kwargs)

    def _per_example_loss(self):
        loss = self.loss
        if loss is None:
            raise ValueError("loss: compile the DPModel with a loss")
        if isinstance(loss, keras.losses.Loss):
            return loss.call  # unreduced: one value per example
        if isinstance(loss, str):
            return keras.losses.get(loss)
        if callable(loss):
            return loss
        raise ValueError(f"loss: DPModel needs one loss for one output, got {loss!r}")

    def fit(self, x: Any = None, y: Any = None, *, epochs: Optional[int] = None,
            callbacks: Optional[list] = None, **kwargs):  # pylint: disable=arguments-differ
        """Trains the wrapped model by DP-SGD; Keras' `fit` with tfdp's Poisson lots.

        Args:
          x: training inputs (array), or a finite unbatched tf.data source of (x, y) pairs.
          y: training targets (None with a tf.data source).
          epochs: passes (default: make_private's epochs); each is floor(n / m) lots.
          callbacks: Keras callbacks; `PrivacyCallback` runs first, so the progress bar,
            History and TensorBoard see "epsilon" in each epoch's logs.
          **kwargs: other `keras.Model.fit` arguments (verbose, validation_data, ...).

        Returns:
          Keras' History.

        Raises:
          ValueError: before any training, on invalid data or arguments, or when the run
            would exceed the target epsilon.
        """
        for key, why in _FIT_REFUSED.items():
            if kwargs.get(key) is not None:
                raise ValueError(f"{key}: not accepted by DPModel.fit: {why}")
        for key in ("steps_per_epoch", "shuffle", "batch_size"):
            kwargs.pop(key, None)
        if self.optimizer is None:
            raise ValueError("optimizer: compile the DPModel before fit")
        if self.distribute_strategy.num_replicas_in_sync != 1:
            raise ValueError("DPModel.fit runs on one replica (the default strategy)")
        loss_fn = self._per_example_loss()
        x, y = _as_arrays(x, y)
        n = len(x)
        if self.batch_size > n:
            raise ValueError(f"batch_size: {self.batch_size} exceeds the {n} training examples")
        epochs = self.epochs if epochs is None else epochs
        if epochs is None:
            raise ValueError("epochs: give epochs to fit or to make_private")
        epochs = checks.check_positive_int(epochs, "epochs")
        per_epoch = n // self.batch_size
        if self._num_examples is not None and n != self._num_examples:
            raise ValueError(f"x: {n} examples, but this DPModel was calibrated for "
                             f"{self._num_examples}")
        sigma = self.noise_multiplier
        planned = self._planned_steps
        if self._num_examples is None:
            if self.target_epsilon is not None:
                planned = self.epochs * per_epoch
                sigma = accounting.dpsgd_noise_multiplier(
                    target_epsilon=self.target_epsilon, num_examples=n,
                    batch_size=self.batch_size, steps=planned, delta=self.delta,
                    accountant=self.accountant)
        done = int(self._steps.numpy())
        if planned is not None and done + epochs * per_epoch > planned:
            raise ValueError(
                f"epochs: {epochs} more epochs would run {done + epochs * per_epoch} steps; "
                f"epsilon={self.target_epsilon:g} was calibrated for {planned}")
        self._prepare(x[:1], loss_fn)
        if self.run_dir is not None:
            rundir.RunDir(self.run_dir, create=True)
        object.__setattr__(self, "_num_examples", n)
        object.__setattr__(self, "_planned_steps", planned)
        self.noise_multiplier = sigma
        object.__setattr__(self, "_loss_fn", loss_fn)
        callbacks = [PrivacyCallback(self)] + list(callbacks or [])
        return super().fit(self._lots(x, y), epochs=epochs, callbacks=callbacks, shuffle=False,
                           **kwargs)

    def _prepare(self, x1: np.ndarray, loss_fn) -> None:
        """Builds the wrapped model and plans its clipping (raises before any training).

        Raises:
          ValueError: on a model without trainable variables, or one whose layers add losses
            computed from the data (activity regularizers, `add_loss` in `call`): those would
            enter the update unclipped.
        """
        del loss_fn
        if not self.inner.built or not self.inner.trainable_variables:
            self.inner(x1, training=False)
        if not self.inner.trainable_variables:
            raise ValueError("model: has no trainable variables")
        for layer in [self.inner] + list(self.inner._flatten_layers(include_self=False)):  # pylint: disable=protected-access
            if getattr(layer, "activity_regularizer", None) is not None:
                raise ValueError(
                    f"model: layer '{layer.name}' has an activity_regularizer, a loss computed "
                    "from the data that DP-SGD would not clip; remove it (weight regularizers "
                    "are supported)")
        self.inner(x1, training=True)
        data_losses = [layer.name for layer in [self.inner] + list(
            self.inner._flatten_layers(include_self=False))  # pylint: disable=protected-access
                       if layer._get_own_losses()]  # pylint: disable=protected-access
        if data_losses:
            raise ValueError(
                f"model: layer '{data_losses[-1]}' adds a loss in call (add_loss), computed "
                "from the data, that DP-SGD would not clip; put it into the compiled loss or "
                "remove it (weight regularizers are supported)")
        object.__setattr__(self, "_entries",
                           clip.plan(self.inner, self.inner.trainable_variables))

    def _lots(self, x: np.ndarray, y: np.ndarray) -> tf.data.Dataset:
        """What Keras' `fit` iterates: floor(n / m) placeholder elements per epoch.

        Keras only counts the epoch's steps on it (and, under a distribution strategy's
        scope, builds from its first element); the lots themselves are drawn by
        `_next_lot`, and their rows gathered inside the step graph from the training arrays,
        so no lot passes through tf.data or Python.
        """
        object.__setattr__(self, "_train_arrays", (tf.convert_to_tensor(x),
                                                   tf.convert_to_tensor(y)))
        object.__setattr__(self, "_epoch_lots", None)
        return tf.data.Dataset.from_tensors((x[:1], y[:1])).repeat(len(x) // self.batch_size)

    def _start_epoch(self) -> None:
        """Draws the next epoch's lots (each record joins each of the floor(n / m) lots
        independently with probability m / n, from the run key and the epoch's index)."""
        n, m = int(self._train_arrays[0].shape[0]), self.batch_size
        epoch = self._lot_epoch
        object.__setattr__(self, "_lot_epoch", epoch + 1)
        rng = np.random.default_rng(base.derive_seed(self._run_key, _STREAM_LOTS, epoch))
        object.__setattr__(self, "_epoch_lots", iter(base.poisson_lots(n, m, rng)))

    def _end_training(self) -> None:
        """Drops the references to the training arrays and the epoch's lots."""
        object.__setattr__(self, "_train_arrays", None)
        object.__setattr__(self, "_epoch_lots", None)

    def _next_lot(self) -> np.ndarray:
        """The next lot's record positions, padded with -1 to its bucket size."""
        lot = next(self._epoch_lots)
        return _padded_positions(lot, base.lot_bucket(len(lot), self.batch_size))

    def make_train_function(self, force: bool = False):
        """One traced step graph per padded lot size (a few buckets), fed the lot's positions.

        Keras' own train function traces one graph over a dataset whose batch size is
        unknown; the clipping pass runs several times faster in graphs with a static batch
        size (as tfdp-train's padded lots), so each lot's positions are handed to a
        tf.function that keeps one concrete graph per lot size and gathers the lot's rows.
        """
        if self.train_function is not None and not force:
            return self.train_function

        def lot_step(xs, ys, positions):
            return self.train_step((_gather_rows(xs, positions), _gather_rows(ys, positions),
                                    positions))

        step = tf.function(lot_step, reduce_retracing=False, jit_compile=bool(self.jit_compile))

        def function(iterator):
            del iterator  # Keras' placeholder elements count the steps; the lots are ours
            if self._epoch_lots is None:
                self._start_epoch()
            xs, ys = self._train_arrays
            return step(xs, ys, self._next_lot())

        self.train_function = function
        return function

    def train_step(self, data):
        x, y, positions = data
        mask = tf.cast(tf.greater_equal(positions, 0), tf.float32)
        seed = self._generator.make_seeds(1)[:, 0]
        if self.input_noise:
            # Gaussian data augmentation for randomized smoothing (Cohen et al. 2019): each
            # example's input plus fresh N(0, s^2 I) from the step seed (by position in the
            # lot, never by content); per-example processing, the DP analysis is unchanged.
            x = smoothing.add_gaussian_noise(x, self.input_noise,
                                             base.step_seed(seed, smoothing.STEP_SALT))
        variables = self.inner.trainable_variables
        sums, losses, y_pred = clip.clipped_gradient_sum(
            self.inner, self._entries, variables, x, y, self._loss_fn, self.l2_clip,
            mask=mask, training=True)
        # Counted before the update is applied (the ledger never shows less than what ran),
        # and from the lot itself: an increment with no data dependency may run (inlined)
        # when the epoch's iterator is already exhausted, counting a step that never ran.
        self._steps.assign_add(tf.cast(tf.reduce_min(positions) >= -1, tf.int64))
        stddev = self.noise_multiplier * self.l2_clip
        grads = []
        for i, total in enumerate(sums):
            # One draw of N(0, sigma^2 C^2 I) per lot on the clipped sum (Abadi et al. 2016).
            noise = noise_sampling.tf_gaussian(tf.shape(total), stddev,
                                               seed=base.step_seed(seed, i + 1), dtype=total.dtype)
            grads.append((total + noise) / float(self.batch_size))
        regularization = self._add_weight_regularization(grads, variables)
        self.optimizer.apply(grads, variables)
        count = tf.reduce_sum(mask)
        if self._loss_tracker is not None:
            self._loss_tracker.update_state(
                tf.reduce_sum(losses * mask) / tf.maximum(count, 1.0) + regularization,
                sample_weight=count)
        return self.compute_metrics(x, y, y_pred, sample_weight=mask)

    @staticmethod
    def _add_weight_regularization(grads: list, variables: list) -> tf.Tensor:
        """Adds the gradient of the weight regularizers (kernel_regularizer, ...) to `grads`.

        A weight penalty is a function of the weights alone, so its gradient added after the
        noise is post-processing of the private update: the privacy analysis is unchanged
        (it is neither clipped nor noised, as in Keras' own loss it is not averaged over the
        batch either). Returns the penalty (0 without regularizers).
        """
        regularized = [(i, v) for i, v in enumerate(variables)
                       if getattr(v, "regularizer", None) is not None]
        if not regularized:
            return tf.constant(0.0)
        with tf.GradientTape() as tape:
            penalty = tf.add_n([tf.cast(v.regularizer(v), tf.float32) for _, v in regularized])
        for (i, _), g in zip(regularized, tape.gradient(penalty, [v for _, v in regularized])):
            grads[i] = grads[i] + tf.cast(g, grads[i].dtype)
        return penalty

    # ------------------------------------------------------------------ the ledger

    @property
    def steps(self) -> int:
        """DP-SGD steps run so far."""
        return int(self._steps.numpy())

    def ledger(self) -> dict:
        """The run's privacy ledger (`tfdp.accounting.PrivacyLedger.to_dict`) for the steps run.

        Adds "covers" (what the guarantee is about) and the run's DP-SGD settings. Before any
        step the ledger is empty (no guarantee is claimed for an untrained model: eps = inf).
        """
        led = accounting.PrivacyLedger()
        led.noise_seed = self._noise_seed_kind
        steps = self.steps
        n = self._num_examples
        if steps and n:
            per_epoch = n // self.batch_size
            spend = accounting.StepSpend(
                name="dpsgd", noise_multiplier=self.noise_multiplier, sampling="poisson",
                delta=self.delta, accountant=self.accountant, note="tfdp.keras.DPModel.fit.")
            spend.record(led, [spend.segment(0, steps, int(math.ceil(steps / per_epoch)), n,
                                             self.batch_size)])
        out = led.to_dict()
        out.update({"covers": COVERS, "steps": steps, "num_examples": n,
                    "batch_size": self.batch_size, "l2_clip": self.l2_clip,
                    "noise_multiplier": self.noise_multiplier,
                    "target_epsilon": self.target_epsilon, "accountant": self.accountant})
        return out

    def epsilon(self) -> float:
        """The sound epsilon spent so far (inf before any step)."""
        return accounting.epsilon_value(self.ledger()["epsilon"])

    def write_ledger(self) -> Optional[str]:
        """Writes ledger.json into `run_dir` atomically (None without a run directory)."""
        if self.run_dir is None:
            return None
        return rundir.RunDir(self.run_dir, create=True).write_json("ledger.json", self.ledger())


class PrivacyCallback(keras.callbacks.Callback):
    """Draws each epoch's Poisson lots as it begins; puts the epsilon spent so far into each
    epoch's logs and, with a run directory, rewrites ledger.json and writes the epoch's logs as
    TensorBoard scalars.

    DPModel.fit runs it first, so the progress bar, History and any later callback (e.g.
    keras.callbacks.TensorBoard) see "epsilon". The logged value is the sound epsilon rounded
    UP to 4 significant digits (`tfdp.train.report.round_up`): a display never shows less than
    was spent; ledger.json keeps full precision.
    """

    def __init__(self, dp_model: DPModel):
        super().__init__()
        self.dp_model = dp_model
        self._writer = None

    def on_epoch_begin(self, epoch, logs=None):
        del epoch, logs
        self.dp_model._start_epoch()  # pylint: disable=protected-access

    def on_epoch_end(self, epoch, logs=None):
        eps = self.dp_model.epsilon()
        shown = eps if not math.isfinite(eps) else float(report.round_up(eps))
        if logs is not None:
            logs["epsilon"] = shown
        self.dp_model.write_ledger()
        if self.dp_model.run_dir is not None:
            if self._writer is None:
                self._writer = tf.summary.create_file_writer(
                    os.path.join(self.dp_model.run_dir, "tensorboard"))
            for tag, value in dict(logs or {}, epsilon=shown).items():
                if isinstance(value, (int, float, np.floating, np.integer)):
                    # Training loss / accuracy are computed on the private data without
                    # noise: labelled so (docs/ledger.md, "Non-private statistics").
                    name = ("privacy/epsilon" if tag == "epsilon" else
                            f"validation/{tag[4:]}" if tag.startswith("val_") else
                            f"nonprivate_train/{tag}")
                    report.summary_scalar(self._writer, name, float(value), epoch)
            self._writer.flush()

    def on_train_end(self, logs=None):
        del logs
        self.dp_model.write_ledger()
        self.dp_model._end_training()  # pylint: disable=protected-access


def make_private(model: Any, *, batch_size: int, epsilon: Optional[float] = None,
                 delta: float = 1e-5, epochs: Optional[int] = None, l2_clip: float = 1.0,
                 noise_multiplier: Optional[float] = None,
                 accountant: str = accounting.DEFAULT_ACCOUNTANT,
                 seed: Optional[int] = None, run_dir: Optional[str] = None,
                 input_noise: Optional[float] = None) -> DPModel:
    """Wraps a Keras model (Sequential, functional or subclassed) for DP-SGD training in `fit`.

    Compile the result as any Keras model (`compile(optimizer, loss, metrics)`), then `fit`
    it on the training arrays; `evaluate` and `predict` behave as on the wrapped model, which
    is trained in place.

    Args:
      model: the Keras classifier (no BatchNormalization: use GroupNormalization or
        LayerNormalization).
      batch_size: expected lot size m (each record joins each lot with probability m / n).
      epsilon: target epsilon; sigma is the smallest noise multiplier whose epsilon over
        `epochs` epochs of floor(n / m) lots is <= epsilon (calibrated at the first `fit`).
      delta: target delta in (0, 1).
      epochs: the planned number of epochs (needed with `epsilon`).
      l2_clip: per-example clipping bound C.
      noise_multiplier: sigma, instead of `epsilon` (the ledger then accounts what runs).
      accountant: "pld" (the default, `tfdp.accounting.DEFAULT_ACCOUNTANT`) or "rdp"
        (`tfdp.accounting.ACCOUNTANTS`).
      seed: the run's key (reproducible lots and noise); None draws 256 bits of OS entropy.
      run_dir: optional directory for ledger.json and TensorBoard events.
      input_noise: sigma of Gaussian noise added to every training input (train for
        randomized smoothing, `tfdp.keras.certify`); None: none.

    Returns:
      The DPModel.

    Raises:
      ValueError / TypeError: naming the invalid argument, or the refused layer.
    """
    return DPModel(model, batch_size=batch_size, epsilon=epsilon, delta=delta, epochs=epochs,
                   l2_clip=l2_clip, noise_multiplier=noise_multiplier, accountant=accountant,
                   seed=seed, run_dir=run_dir, input_noise=input_noise)
