"""The shared training run: a `Run` drives a `Method` through its hooks.

`train(...)` is the public entry point; it builds a `Run` and calls it. A run validates,
takes the run directory's lock, derives every random stream from one run key, runs the
method's `setup` (ledger entries saved before any step), checkpoints whatever the method's
`build` returned, then runs epochs of `batches` / `train_step`, charging per-step privacy
spends before each epoch, and finally writes model.keras and metrics.json. Strategies and
TF_CONFIG live in `tfdp.train.strategy`, the run directory's rules in `tfdp.rundir`, and
TensorBoard and printing in `tfdp.train.report`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import secrets
import sys
import time
from typing import Any, Callable, Mapping

import keras
import numpy as np
import tensorflow as tf

from tfdp import checks, rundir, tf_options
from tfdp.train import integrity, report
from tfdp.train.base import (OPTIMIZERS, DataSpec, Method, StepContext, derive_seed,
                             lot_bucket, make_optimizer)
from tfdp.train.strategy import (STRATEGIES, cpu_mirrored_strategy, is_chief, make_strategy,
                                 tf_config_is_chief, worker_name)
from tfdp.rundir import check_run_dir, has_checkpoint
from tfdp import accounting

tf_options.configure_tensorflow()  # bit-reproducible tf.function graphs (tfdp/tf_options.py)

__all__ = ["Data", "Run", "RunResult", "SetupError", "StorageError", "train", "evaluate_accuracy",
           "resume_conflicts", "data_fingerprint", "OPTIMIZERS", "STRATEGIES", "make_optimizer",
           "make_strategy", "cpu_mirrored_strategy", "tf_config_is_chief", "check_run_dir",
           "has_checkpoint", "derive_seed", "NONPRIVATE_STATS_KEY", "public_split_indices"]

_EVAL_BATCH = 1000

# Stream identifiers: every random stream of a run is derived from one run key.
_STREAM_SETUP, _STREAM_SHUFFLE, _STREAM_FIXED, _STREAM_INIT, _STREAM_STEPS = 1, 2, 3, 4, 5
_STREAM_PUBLIC, _STREAM_LAYERS = 6, 7
# Checkpoint names the run itself uses; a method's `build` may not return them.
_RUN_STATE = ("generator", "epoch", "step", "run_key", "run_secret", "ledger_digest",
              "ledger_state", integrity.CONFIG_STATE)
# Bits of OS entropy in a run key drawn when no --seed is given (issue: >= 128).
SECRET_BITS = 256


class StorageError(ValueError):
    """The run directory could not be written (full disk, read-only, I/O error)."""


# Errors of writing the run's files: Python's (atomic JSON, model.keras) and TensorFlow's
# (checkpoints, TensorBoard events).
_STORAGE_ERRORS = (OSError, tf.errors.ResourceExhaustedError, tf.errors.PermissionDeniedError,
                   tf.errors.DataLossError, tf.errors.UnavailableError)


def storage_message(model_dir: str, e: BaseException) -> str:
    """One line naming the path and the cause of a failed write of the run directory."""
    if isinstance(e, OSError):
        path = e.filename or model_dir
        reason = e.strerror or type(e).__name__
    else:
        path = model_dir
        reason = integrity.clean_error_text(e)
        # TensorFlow starts with the (temporary) file it failed on: name its folder instead.
        found = re.match(r"(/\S+?)[;:]\s+(.+)$", reason)
        if found:
            path, reason = os.path.dirname(found.group(1)), found.group(2)
            if os.path.basename(path).endswith("_temp"):
                path = os.path.dirname(path)
    return (f"{path}: cannot write the run's files ({reason}); the last checkpoint and the "
            f"result files written before are intact (free space or fix permissions, then "
            f"resume with --resume --model_dir={model_dir})")


class SetupError(ValueError):
    """A method's setup rejected the run (e.g. a budget that no step fits) before training."""


@dataclasses.dataclass
class Data:
    """In-memory training and test data of a run.

    Attributes:
      x_train, y_train, x_test, y_test: arrays (x float32 NHWC, y integer labels).
      input_shape: shape of one example.
      num_classes: number of classes.
      data_dir: where the data came from (recorded in config.json), or None.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    input_shape: tuple[int, ...]
    num_classes: int
    data_dir: str | None = None


@dataclasses.dataclass
class RunResult:
    """What a call of `train` produced.

    Attributes:
      model_dir: the run directory.
      metrics: the content of metrics.json (empty when interrupted).
      ledger: the privacy ledger as a dict (PrivacyLedger.to_dict()).
      interrupted: True when the run stopped early through `stop_after_epochs`.
      model: the trained Keras model.
      epochs_completed: epochs finished so far (including those before a resume).
      steps: training steps taken so far.
    """

    model_dir: str
    metrics: dict
    ledger: dict
    interrupted: bool
    model: Any
    epochs_completed: int
    steps: int


def os_entropy_key() -> int:
    """A fresh run key of `SECRET_BITS` bits from OS entropy (used when no --seed is given)."""
    return secrets.randbits(SECRET_BITS)


def _encode_secret(run_key: int, user_supplied: bool) -> bytes:
    return (f"user:{int(run_key)}" if user_supplied else f"os:{int(run_key):x}").encode()


def _decode_secret(value: bytes, path: str) -> tuple[int, bool]:
    """(run key, user supplied) from the checkpoint's run_secret."""
    text = value.decode("ascii", "replace")
    kind, _, body = text.partition(":")
    try:
        if kind == "user":
            return int(body), True
        if kind == "os":
            return int(body, 16), False
    except ValueError:
        pass
    raise ValueError(f"{path}: the checkpoint's run secret is corrupt")


def epoch_batches(method: Method, run_key: int, epoch: int) -> list:
    """The batches `method` yields for `epoch` of the run with key `run_key`.

    The method must be attached (`Method.attach`); its `batches` gets the epoch's seeded
    stream, so the same run key always gives the same batches.
    """
    rng = np.random.default_rng(derive_seed(run_key, _STREAM_SHUFFLE, epoch))
    return list(method.batches(epoch, rng))


def public_split_indices(num_all: int, num_public: int, run_key: int
                         ) -> tuple[np.ndarray, np.ndarray]:
    """(public, private) sorted record indices of a run's public split, chosen from its key."""
    perm = np.random.default_rng(derive_seed(run_key, _STREAM_PUBLIC)).permutation(num_all)
    return np.sort(perm[:num_public]), np.sort(perm[num_public:])


def _flat_batches(batches: list) -> list[np.ndarray]:
    """Index arrays of the steps; a tuple of arrays (e.g. a pair) is concatenated in order."""
    out = []
    for b in batches:
        if isinstance(b, (tuple, list)):
            b = np.concatenate([np.asarray(p) for p in b])
        out.append(np.asarray(b, dtype=np.int64))
    return out


def _padded(x: np.ndarray, y: np.ndarray, b: np.ndarray, size: int) -> tuple:
    """(x, y, indices) of the records `b`, padded with zero rows of index -1 to `size` rows."""
    xb = np.zeros((size,) + x.shape[1:], x.dtype)
    yb = np.zeros((size,) + y.shape[1:], y.dtype)
    ib = np.full([size], -1, np.int64)
    xb[:len(b)], yb[:len(b)], ib[:len(b)] = x[b], y[b], b
    return xb, yb, ib


def _epoch_dataset(strategy, x: np.ndarray, y: np.ndarray, batches: list[np.ndarray],
                   pad_to: Callable[[int], int] | None = None):
    """Distributed dataset of (x, y, record indices) batches.

    With `pad_to`, batches of varying size are padded to `pad_to(len(batch))` rows (zeros,
    record index -1; see `Method.pads_lots`).
    """
    if pad_to is not None and len({len(b) for b in batches}) > 1:
        def padded_gen():
            for b in batches:
                yield _padded(x, y, b, pad_to(len(b)))
        signature = (tf.TensorSpec((None,) + x.shape[1:], tf.as_dtype(x.dtype)),
                     tf.TensorSpec((None,) + y.shape[1:], tf.as_dtype(y.dtype)),
                     tf.TensorSpec((None,), tf.int64))
        ds = tf.data.Dataset.from_generator(padded_gen, output_signature=signature)
    elif not batches:
        empty = np.zeros([0], np.int64)
        ds = tf.data.Dataset.from_tensor_slices((x[empty], y[empty], empty)).batch(1)
    elif len({len(b) for b in batches}) == 1:
        # Batches of one size: gathered per step by a generator with the static batch shape
        # (the same elements as slicing a gathered epoch array, without copying the epoch's
        # data into a dataset constant first, which cost about 1 s per 12,800 MNIST images).
        def fixed_gen():
            for b in batches:
                yield x[b], y[b], b
        m = len(batches[0])
        signature = (tf.TensorSpec((m,) + x.shape[1:], tf.as_dtype(x.dtype)),
                     tf.TensorSpec((m,) + y.shape[1:], tf.as_dtype(y.dtype)),
                     tf.TensorSpec((m,), tf.int64))
        ds = tf.data.Dataset.from_generator(fixed_gen, output_signature=signature)
    else:
        def gen():
            for b in batches:
                yield x[b], y[b], b
        signature = (tf.TensorSpec((None,) + x.shape[1:], tf.as_dtype(x.dtype)),
                     tf.TensorSpec((None,), tf.as_dtype(y.dtype)),
                     tf.TensorSpec((None,), tf.int64))
        ds = tf.data.Dataset.from_generator(gen, output_signature=signature)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return strategy.experimental_distribute_dataset(ds.prefetch(2).with_options(options))


def _make_step_fn(strategy, method: Method, generator: tf.random.Generator,
                  global_batch_size: int, reduce_retracing: bool = True) -> Callable:
    def replica_fn(seed, x, y, indices):
        ctx = StepContext.current(seed, global_batch_size, indices)
        metrics = method.train_step(ctx, x, y)
        return {k: tf.cast(v, tf.float32) for k, v in dict(metrics).items()}

    @tf.function(reduce_retracing=reduce_retracing)
    def step(x, y, indices):
        # One seed per step, drawn in cross-replica context so that every replica sees it.
        seed = generator.make_seeds(1)[:, 0]
        per_replica = strategy.run(replica_fn, args=(seed, x, y, indices))
        return {k: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
                for k, v in per_replica.items()}

    return step


def evaluate_accuracy(model, x: np.ndarray, y: np.ndarray, batch_size: int = _EVAL_BATCH
                      ) -> float:
    """Fraction of examples whose argmax logit equals the label (inference mode)."""
    if len(x) == 0:
        raise ValueError("x: no test examples")

    @tf.function
    def predict(xb):
        return tf.argmax(model(xb, training=False), axis=-1, output_type=tf.int64)

    correct = 0
    for start in range(0, len(x), batch_size):
        pred = predict(tf.convert_to_tensor(x[start:start + batch_size])).numpy()
        correct += int(np.sum(pred == np.asarray(y[start:start + batch_size]).astype(np.int64)))
    return correct / len(x)


# Configuration keys compared on resume, with the flag that sets each (the training data is
# compared by content through data_sha256, kept in the checkpoint folder's private state).
_RESUME_KEYS = {"method": "--method", "dataset": "--dataset", "batch_size": "--batch_size",
                "learning_rate": "--learning_rate", "optimizer": "--optimizer",
                "epsilon": "--epsilon", "delta": "--delta", "value_range": "--value_range",
                "num_train": "--num_train", "input_shape": "--dataset",
                "num_classes": "--dataset", "data_sha256": "--data_dir",
                "epochs": "--epochs"}
_NONPRIVATE_NOTE = ("computed on the private training data WITHOUT privacy protection (not "
                    "privatized); for monitoring only, never release it with the model")
NONPRIVATE_STATS_KEY = "nonprivate_training_stats"
# Marks the private state file (checkpoints/private_state.json): never published.
_PRIVATE_NOTE = ("private state of the run (a hash of the training arrays is a membership test "
                 "for anyone who knows the other records); never release it")
_UNSET = object()


def data_fingerprint(x: np.ndarray, y: np.ndarray) -> str:
    """sha256 of the training arrays (detects a resume on different data)."""
    h = hashlib.sha256()
    for a in (np.ascontiguousarray(x), np.ascontiguousarray(y)):
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


def resume_conflicts(stored: Mapping[str, Any], current: Mapping[str, Any],
                     mutable: tuple[str, ...] = ("epochs",)) -> list[str]:
    """Differences between a run's config.json and the configuration of a resume.

    Args:
      stored: the run's config.json.
      current: the resume's configuration, same keys (options under "options").
      mutable: keys allowed to differ (the method's `resume_mutable_flags`).

    Returns:
      One message per conflicting setting, naming its flag and both values.
    """
    out = []
    for key, flag in _RESUME_KEYS.items():
        if key in mutable or key not in stored or key not in current:
            continue
        a, b = stored[key], current[key]
        if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
            a, b = list(a or []), list(b or [])
        if a != b:
            if key == "data_sha256":
                out.append("training data: the data differ from the run's (content hash "
                           f"{str(a)[:12]}... vs {str(b)[:12]}...)")
            else:
                out.append(f"{flag}: the run was started with {a!r}, the resume asks for {b!r}")
    # --seed is checked against the checkpoint, where the run's secret key lives.
    opts_a, opts_b = stored.get("options") or {}, current.get("options") or {}
    for key in sorted(set(opts_a) | set(opts_b)):
        if key in mutable:
            continue
        a, b = opts_a.get(key, _UNSET), opts_b.get(key, _UNSET)
        if (a is _UNSET and b is None) or (b is _UNSET and a is None):
            continue
        if a is _UNSET or b is _UNSET:
            out.append(f"--{key}: the run was started with "
                       f"{'its default' if a is _UNSET else repr(a)}, the resume asks for "
                       f"{'its default' if b is _UNSET else repr(b)}")
            continue
        if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
            a, b = list(a) if a is not None else None, list(b) if b is not None else None
        if a != b:
            out.append(f"--{key}: the run was started with {a!r}, the resume asks for {b!r}")
    return out


def _config_dict(method: Method, data: Data, strategy, num_train: int, num_public: int
                 ) -> dict:
    cfg = method.config
    return {
        "method": cfg.method, "dataset": cfg.dataset, "data_dir": data.data_dir,
        "value_range": list(cfg.value_range), "input_shape": list(data.input_shape),
        "num_classes": int(data.num_classes),
        # Where the noise came from; the seed itself stays in the checkpoint (issue 22).
        "noise_seed": "user_supplied" if cfg.seed is not None else "os_entropy",
        "certification": None,  # filled in after setup (it may depend on setup's results)
        "epochs": cfg.epochs, "batch_size": cfg.batch_size,
        "learning_rate": cfg.learning_rate, "optimizer": cfg.optimizer,
        "epsilon": cfg.epsilon, "delta": cfg.delta,
        "strategy": type(strategy).__name__,
        "num_replicas": int(strategy.num_replicas_in_sync),
        "num_train": int(num_train), "num_public": int(num_public),
        "num_test": int(len(data.x_test)),
        "batch_schedule": method.batch_schedule(),
        "options": dict(cfg.options),
    }


def _run_setup(method: Method, spec: DataSpec, ledger, rng: np.random.Generator, strategy
               ) -> None:
    try:
        method.setup(spec, ledger, rng, strategy)
    except ValueError as e:
        raise SetupError(str(e)) from e


class Run:
    """One training run of a method: state, checkpoints, epochs and result files.

    Build it with the same arguments as `train` (after their validation) and call `run()`
    while holding the run directory's lock; `train` does both.
    """

    def __init__(self, method: Method, data: Data, strategy, chief: bool, *, resume: bool,
                 checkpoint_every: int, stop_after_epochs: int | None, flags_text: str | None,
                 config_extra: Mapping[str, Any] | None, verbose: int,
                 print_fn: Callable[[str], None]):
        self.method, self.data, self.strategy, self.chief = method, data, strategy, chief
        self.cfg = method.config
        self.resume = resume
        self.checkpoint_every, self.stop_after_epochs = checkpoint_every, stop_after_epochs
        self.flags_text, self.config_extra = flags_text, dict(config_extra or {})
        self.verbose, self.print_fn = verbose, print_fn
        self.rd = rundir.RunDir(self.cfg.model_dir)
        self.ckpt_dir = self.rd.file(rundir.CHECKPOINT_DIR)
        if not chief:  # other workers save to their own folder inside the run directory
            self.ckpt_dir = os.path.join(self.rd.path, "workers", worker_name(strategy))
        self.start_time = time.time()
        self.history: dict = {"segments": []}
        self.private_state: dict = {}  # checkpoints/private_state.json (data_sha256)
        self.stored_config: dict = {}
        self.spend = None  # the method's accounting.StepSpend, if it spends per step
        self.prior_segments: list = []
        self.latest_checkpoint: str | None = None
        self._pending_config: dict | None = None
        # config.json as this run last wrote it (stored with each checkpoint).
        self._config_record: dict | None = None
        self.fallback: dict | None = None  # the older checkpoint a resume fell back to

    # ------------------------------------------------------------------ phases

    def run(self) -> RunResult:
        """Prepares the run state, trains the remaining epochs and writes the results."""
        self.prepare()
        return self._train_epochs()

    def prepare(self) -> None:
        """Everything before the first epoch: run key, setup, config, ledger, state restored.

        After it, `make_step_fn`, `epoch_inputs` and `run_step` are the pieces `run()` trains
        with (also used by `tfdp-bench dpsgd` to time exactly this path).
        """
        fingerprint = data_fingerprint(self.data.x_train, self.data.y_train)
        self._load_or_start(accounting)
        spec = self._split_public()
        config = _config_dict(self.method, self.data, self.strategy, spec.num_train,
                              self.num_public)
        config.update(self.config_extra)
        self._check_resume(dict(config, data_sha256=fingerprint))
        self._setup(accounting, spec)
        self.spend = self.method.step_spend()
        if self.resume:
            self._check_ledger_against_checkpoint(accounting, config)
        if self.spend is not None:
            if self.spend.name in self.ledger:
                self.prior_segments = list(
                    self.ledger.get(self.spend.name).get("segments") or [])
            self.spend.record(self.ledger, self.prior_segments)
        # The certification entry may depend on setup's results (e.g. HGM's redistribution r).
        config["certification"] = self.method.certification_config()
        self._write_config(config)
        self._build()
        self._write_private_state(fingerprint)  # after build: a refused build leaves nothing

    def _load_or_start(self, accounting) -> None:
        # The run key: every random stream of the run derives from it (principle 5). It is a
        # secret: it lives only in the checkpoint (`run_secret`), never in config.json,
        # flags.txt, logs, TensorBoard or anything exported.
        self.run_secret_var = tf.Variable(b"", dtype=tf.string, trainable=False,
                                          name="run_secret")
        self.run_key_var = None  # the scalar key of checkpoints written before run_secret
        if self.resume:
            latest = self._choose_checkpoint()
            self.latest_checkpoint = latest
            self.run_key, user_supplied = self._restore_secret(latest)
            if self.cfg.seed is not None and (not user_supplied
                                              or int(self.cfg.seed) != self.run_key):
                raise ValueError(
                    "--seed: differs from the seed this run was started with"
                    if user_supplied else "--seed: this run was started without --seed (its "
                    "noise comes from OS entropy kept in its checkpoint); resume it without "
                    "--seed")
            self.ledger = accounting.PrivacyLedger.load(self.rd.file(rundir.LEDGER_FILE))
            if self.ledger.noise_seed is None:
                self.ledger.noise_seed = "user_supplied" if user_supplied else "os_entropy"
            if self.rd.exists(rundir.CONFIG_FILE) or self.chief:
                self.stored_config = self.rd.read_json(rundir.CONFIG_FILE)
            if self.chief:
                self._check_config_against_checkpoint()
            seg_path = os.path.join(rundir.checkpoint_dir(self.cfg.model_dir),
                                    rundir.SEGMENTS_FILE)
            if os.path.exists(seg_path):
                self.history = rundir.read_json(seg_path)
            private_path = os.path.join(rundir.checkpoint_dir(self.cfg.model_dir),
                                        rundir.PRIVATE_STATE_FILE)
            if os.path.exists(private_path):
                self.private_state = rundir.read_json(private_path)
        else:
            user_supplied = self.cfg.seed is not None
            self.run_key = int(self.cfg.seed) if user_supplied else os_entropy_key()
            self.run_secret_var.assign(_encode_secret(self.run_key, user_supplied))
            self.ledger = accounting.PrivacyLedger()
            self.ledger.noise_seed = "user_supplied" if user_supplied else "os_entropy"

    def _choose_checkpoint(self) -> str:
        """The newest checkpoint that reads back completely; says which newer ones it skips.

        Raises:
          ValueError: naming the newest checkpoint when none reads back.
        """
        ckpt_dir = rundir.checkpoint_dir(self.cfg.model_dir)
        latest = tf.train.latest_checkpoint(ckpt_dir)
        if not latest:
            raise ValueError("resume: the run directory holds no checkpoint")
        chosen, damaged = integrity.readable_checkpoints(ckpt_dir)
        if chosen is None:
            path, reason = damaged[0] if damaged else (latest, "unreadable")
            raise ValueError(f"{path}: cannot read the checkpoint ({reason}); no older intact "
                             "checkpoint is left to resume from")
        if damaged:
            step = tf.train.load_checkpoint(chosen).get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE")
            self.fallback = {"checkpoint": chosen, "step": int(step),
                             "damaged": [p for p, _ in damaged]}
            self._say(f"resume: {damaged[0][0]} is damaged ({damaged[0][1]}); resuming from "
                      f"the older intact checkpoint {chosen} (step {int(step)})")
        return chosen

    def _check_config_against_checkpoint(self) -> None:
        """Refuses a config.json that differs from the record in the checkpoint."""
        latest = self.latest_checkpoint
        if integrity.CONFIG_STATE not in _checkpoint_names(latest):
            return  # a checkpoint written before the configuration was stored with it
        var = tf.Variable(b"", dtype=tf.string, trainable=False)
        try:
            tf.train.Checkpoint(**{integrity.CONFIG_STATE: var}).restore(
                latest).expect_partial()
        except (tf.errors.OpError, ValueError, IndexError) as e:
            raise ValueError(f"{latest}: cannot read the checkpoint ({_first_line(e)})") from None
        recorded = integrity.read_config_record(var.numpy(), latest)
        on_disk = dict(self.stored_config)
        if "data_sha256" not in recorded:  # moved to the private state (issue 40), checked there
            on_disk.pop("data_sha256", None)
        diff = integrity.config_edit(on_disk, recorded,
                                     tuple(self.method.resume_mutable_flags))
        if diff is not None:
            raise ValueError(integrity.config_edit_message(self.rd.file(rundir.CONFIG_FILE),
                                                           latest, diff))
        self._config_record = dict(self.stored_config)

    def _restore_secret(self, latest: str) -> tuple[int, bool]:
        """The run key from the checkpoint (`run_secret`, or an older run's `run_key`)."""
        names = _checkpoint_names(latest)
        try:
            if "run_secret" in names:
                tf.train.Checkpoint(run_secret=self.run_secret_var).restore(
                    latest).expect_partial()
                return _decode_secret(self.run_secret_var.numpy(), latest)
            # A checkpoint written before the secret key: a 63-bit key (kept as it was).
            self.run_key_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="run_key")
            tf.train.Checkpoint(run_key=self.run_key_var).restore(latest).expect_partial()
        except (tf.errors.OpError, ValueError, IndexError) as e:
            raise ValueError(f"{latest}: cannot read the checkpoint ({_first_line(e)})") from None
        key = int(self.run_key_var.numpy())
        user_supplied = self.cfg.seed is not None and int(self.cfg.seed) == key
        self.run_secret_var.assign(_encode_secret(key, user_supplied))
        return key, user_supplied

    def _split_public(self) -> DataSpec:
        """Removes the method's public split (chosen from the run key); attaches the method."""
        data, method = self.data, self.method
        num_all = len(data.x_train)
        self.num_public = int(method.public_split_size(num_all))
        if self.num_public:
            if not 0 < self.num_public < num_all:
                raise ValueError(f"public split: {self.num_public} records of {num_all} leaves "
                                 "no private training data")
            pub, priv = public_split_indices(num_all, self.num_public, self.run_key)
            method.set_public_data(data.x_train[pub], data.y_train[pub])
            self.data = data = dataclasses.replace(data, x_train=data.x_train[priv],
                                                   y_train=data.y_train[priv])
        num_train = len(data.x_train)
        if num_train < self.cfg.batch_size:
            raise ValueError(f"batch_size: {self.cfg.batch_size} is larger than the "
                             f"{num_train} private training examples")
        spec = DataSpec(tuple(int(d) for d in data.input_shape), int(data.num_classes),
                        tuple(float(v) for v in self.cfg.value_range), num_train,
                        self.cfg.dataset, data.x_train, data.y_train)
        method.attach(spec, self.strategy, derive_seed(self.run_key, _STREAM_FIXED),
                      layer_seed=derive_seed(self.run_key, _STREAM_LAYERS, bits=128))
        return spec

    def _check_resume(self, config: Mapping[str, Any]) -> None:
        if not (self.resume and self.stored_config):
            return
        stored = dict(self.stored_config)  # a run before issue 40 kept data_sha256 here
        if "data_sha256" in self.private_state:
            stored["data_sha256"] = self.private_state["data_sha256"]
        conflicts = resume_conflicts(stored, config,
                                     tuple(self.method.resume_mutable_flags))
        if conflicts:
            raise ValueError("resume: the resume's settings conflict with the run in "
                             f"{self.rd.path} (resume reads its configuration from config.json; "
                             "change it only in a new run):\n  " + "\n  ".join(conflicts))

    def _setup(self, accounting, spec: DataSpec) -> None:
        """Host-side setup: once per run; on resume from its saved state, or re-run and
        checked to reproduce the run's setup ledger entries."""
        method = self.method
        setup_rng = np.random.default_rng(derive_seed(self.run_key, _STREAM_SETUP))
        setup_path = os.path.join(rundir.checkpoint_dir(self.cfg.model_dir),
                                  rundir.SETUP_STATE_FILE)
        if self.resume and os.path.exists(setup_path):
            method.restore_setup_state(rundir.load_arrays(setup_path))
        elif self.resume:
            scratch = accounting.PrivacyLedger()
            _run_setup(method, spec, scratch, setup_rng, self.strategy)
            kept = {e["name"]: e for e in self.ledger.entries if e.get("segments") is None}
            if {e["name"]: e for e in scratch.entries} != kept:
                raise RuntimeError("setup changed the privacy ledger on resume; the method's "
                                   "setup is not deterministic given its rng, so resuming "
                                   "would spend budget again")
        else:
            started = time.time()
            self._say(f"{self.cfg.method}: setup before the first step (e.g. pre-training, "
                      "private statistics; some methods take minutes here)")
            _run_setup(method, spec, self.ledger, setup_rng, self.strategy)
            self._say(f"{self.cfg.method}: setup done in "
                      f"{report.seconds_text(time.time() - started)}")
            os.makedirs(self.rd.path, exist_ok=True)
            state = method.setup_state()
            if state and self.chief:
                rundir.save_arrays(setup_path, state)

    def _say(self, text: str) -> None:
        """A progress message on the chief, flushed at once (logs show it while it runs)."""
        if self.verbose and self.chief:
            self.print_fn(text)
            sys.stdout.flush()

    def _write_config(self, config: dict) -> None:
        if not self.chief:
            self._config_record = dict(config)
            return
        rd, cfg = self.rd, self.cfg
        if not self.resume:
            if self.flags_text is not None:
                rd.write_text(rundir.FLAGS_FILE, self.flags_text)
            rd.write_json(rundir.CONFIG_FILE, config)
            self._config_record = rd.read_json(rundir.CONFIG_FILE)
        elif self.stored_config:
            updated = dict(self.stored_config)
            updated.pop("data_sha256", None)  # moved to the private state (issue 40)
            for key in self.method.resume_mutable_flags:
                if key in config and key != "options":
                    updated[key] = config[key]
            new_flags = self.config_extra.get("flags")
            if new_flags:  # the flags of the latest segment; a later resume starts from them
                updated["flags"] = new_flags
            for key in ("cpu_replicas", "num_replicas", "strategy"):
                if key in config:
                    updated[key] = config[key]
            updated.setdefault("resumes", []).append(
                {"epochs": cfg.epochs, "batch_size": cfg.batch_size,
                 "num_replicas": int(self.strategy.num_replicas_in_sync), "time": time.time()})
            # Written when the first step of the resume is about to run: a resume that runs
            # nothing writes nothing.
            self._pending_config = updated
            return
        self.ledger.save(rd.file(rundir.LEDGER_FILE))

    def _write_private_state(self, fingerprint: str) -> None:
        """Writes checkpoints/private_state.json: the training data's hash (resume checks).

        The hash of the private training arrays is a membership test, so it is kept in the
        private checkpoint folder, never in config.json (issue 40).
        """
        if not self.chief or self.private_state.get("data_sha256") == fingerprint:
            return
        self.private_state = {"never_release": _PRIVATE_NOTE, "data_sha256": fingerprint}
        rundir.write_json_atomic(os.path.join(rundir.checkpoint_dir(self.cfg.model_dir),
                                              rundir.PRIVATE_STATE_FILE), self.private_state)

    def _refresh_config(self, updates: dict | None) -> None:
        """Writes a method's per-epoch config.json entries (chief only; the run's file)."""
        if not updates or not self.chief or not self.rd.exists(rundir.CONFIG_FILE):
            return
        config = self.rd.read_json(rundir.CONFIG_FILE)
        config.update(updates)
        self.rd.write_json(rundir.CONFIG_FILE, config)
        self._config_record = self.rd.read_json(rundir.CONFIG_FILE)

    def _flush_pending(self) -> None:
        """Writes the resume's config.json update and ledger (before its first step)."""
        if self._pending_config is not None and self.chief:
            self.rd.write_json(rundir.CONFIG_FILE, self._pending_config)
            self._config_record = self.rd.read_json(rundir.CONFIG_FILE)
            self.ledger.save(self.rd.file(rundir.LEDGER_FILE))
        self._pending_config = None

    def _check_ledger_against_checkpoint(self, accounting, config: Mapping[str, Any]) -> None:
        """Refuses a resume whose ledger.json is not the run's; drops replayed charges.

        The per-step entry's charged steps must reach the checkpoint's step counter, and
        ledger.json must be the ledger saved with the checkpoint or that ledger with its
        per-step entry charged further (steps charged for an epoch that began after the
        checkpoint); any other difference is refused, naming the field and both values.
        The steps charged after the checkpoint are recomputed by this resume with the same
        lots and noise (both keyed by the run's secret key and the step's position) when the
        resume runs them with the same settings as the stopped process: they release nothing
        new, and the ledger restarts from the checkpoint's (docs/ledger.md). Otherwise they
        stay charged and the resume charges its steps again.
        """
        latest = self.latest_checkpoint
        path = self.rd.file(rundir.LEDGER_FILE)
        names = _checkpoint_names(latest)
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
        state = tf.Variable(b"", dtype=tf.string, trainable=False)
        objects = {"step": step}
        if "ledger_state" in names:
            objects["ledger_state"] = state
        try:
            tf.train.Checkpoint(**objects).restore(latest).expect_partial()
        except (tf.errors.OpError, ValueError, IndexError) as e:
            raise ValueError(f"{latest}: cannot read the checkpoint ({_first_line(e)})") from None
        ran = int(step.numpy())
        file_dict = self.ledger.to_dict()
        charged = _charged_steps(file_dict, self.spend)
        if self.spend is not None and charged < ran:
            raise ValueError(
                f"resume: {path} charges {charged} steps of {self.spend.name!r} but the "
                f"checkpoint {latest} has run {ran} steps; the ledger does not match what ran "
                "(restore the run's own ledger.json)")
        if "ledger_state" not in names:
            return  # a checkpoint written before the ledger was stored with it
        text = state.numpy().decode("utf-8", "replace")
        try:
            saved_ledger = accounting.PrivacyLedger.from_dict(json.loads(text))
        except (ValueError, json.JSONDecodeError) as e:
            raise ValueError(f"{latest}: the ledger stored in the checkpoint is corrupt "
                             f"({_first_line(e)})") from None
        saved = saved_ledger.to_dict()
        diff = self._ledger_difference(accounting, saved, path)
        if diff is not None:
            field, in_file, in_ckpt = diff
            raise ValueError(
                f"resume: {path} (sha256 {_ledger_digest(file_dict)[:16]}, {charged} charged "
                f"steps) does not match the ledger saved in the checkpoint {latest} (sha256 "
                f"{_ledger_digest(saved)[:16]}, {_charged_steps(saved, self.spend)} charged "
                f"steps): {field} is {integrity.short(in_file)} in the file but "
                f"{integrity.short(in_ckpt)} in the checkpoint; restore the run's own "
                "ledger.json")
        if self.spend is None or charged == ran:
            return
        multi_worker = isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy)
        if multi_worker:
            differences = ["multi-worker steps are not verified to replay bit for bit"]
        elif not self.method.replays_identically():
            differences = [f"{self.cfg.method}'s steps with these settings do not replay bit "
                           "for bit"]
        else:
            differences = integrity.replay_differences(self.stored_config, config)
        if differences:
            self._say(f"resume: the {charged - ran} steps after the checkpoint {latest} are "
                      "charged again: this resume does not recompute them bit for bit ("
                      + "; ".join(differences) + ")")
            return
        saved_ledger.noise_seed = self.ledger.noise_seed
        self.ledger = saved_ledger
        self._say(f"resume: from step {ran} ({latest}); the {charged - ran} steps run after it "
                  "are replayed with the same lots and noise and charged once")

    def _ledger_difference(self, accounting, saved: Mapping[str, Any], path: str
                           ) -> tuple[str, Any, Any] | None:
        """The first field where ledger.json differs from what the checkpoint allows."""
        raw = rundir.read_json(path)
        expected = accounting.PrivacyLedger.from_dict(dict(saved))
        name = self.spend.name if self.spend is not None else None
        if name is not None and name in expected and name in self.ledger:
            file_segs = self.ledger.get(name).get("segments") or []
            old_segs = expected.get(name)["segments"]
            if accounting._extends(old_segs, file_segs):  # pylint: disable=protected-access
                self.spend.record(expected, file_segs)
        want = expected.to_dict()
        # The entries first: the totals only follow from them.
        return (integrity.first_difference(raw.get("entries"), want.get("entries"), "entries")
                or integrity.first_difference(raw, want))

    def _build(self) -> None:
        """The method's state (inside the strategy scope), the run's counters, the checkpoint."""
        # Weight initialisation protects nothing; Keras takes a 32-bit seed.
        keras.utils.set_random_seed(derive_seed(self.run_key, _STREAM_INIT, bits=31))
        with self.strategy.scope():
            objects = self.method.build()
        objects = checks.check_trackables(objects, f"build: {type(self.method).__name__}")
        clash = sorted(set(objects) & set(_RUN_STATE))
        if clash:
            raise ValueError(f"build: {type(self.method).__name__} returned {clash}, names the "
                             f"run keeps for its own state {list(_RUN_STATE)}")
        if "model" not in objects:
            raise ValueError(f"build: {type(self.method).__name__} returned no 'model' (the "
                             "model that is evaluated and saved)")
        self.model = objects["model"]
        self.generator = tf.random.Generator.from_seed(derive_seed(self.run_key, _STREAM_STEPS))
        self.epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        # The ledger as saved with each checkpoint (private state; checked on resume).
        self.ledger_state_var = tf.Variable(b"", dtype=tf.string, trainable=False,
                                            name="ledger_state")
        run_state = ({"run_key": self.run_key_var} if self.run_key_var is not None
                     else {"run_secret": self.run_secret_var})
        # The run's configuration as config.json holds it (private state; checked on resume).
        self.config_state_var = tf.Variable(b"", dtype=tf.string, trainable=False,
                                            name=integrity.CONFIG_STATE)
        # A checkpoint written before the ledger (or configuration) was stored with it keeps
        # its old layout.
        names = _checkpoint_names(self.latest_checkpoint) if self.resume else None
        if names is None or "ledger_state" in names:
            run_state["ledger_state"] = self.ledger_state_var
        if names is None or integrity.CONFIG_STATE in names:
            run_state[integrity.CONFIG_STATE] = self.config_state_var
        ckpt = tf.train.Checkpoint(generator=self.generator, epoch=self.epoch_var,
                                   step=self.step_var, **run_state, **objects)
        self.manager = tf.train.CheckpointManager(ckpt, self.ckpt_dir, max_to_keep=2)
        if self.resume:
            latest = self.latest_checkpoint
            try:
                status = ckpt.restore(latest)
                status.assert_existing_objects_matched()
            except (tf.errors.OpError, AssertionError, ValueError, IndexError) as e:
                raise ValueError(f"{latest}: the checkpoint does not match this run's model "
                                 f"and state ({e})") from None

    def _segments_with(self, seg: dict, n_steps: int, num_train: int) -> list:
        """The per-step entry's segments once `n_steps` more steps of `seg` have run.

        A segment that continues the previous one (same start, lot size, data size and
        sigma; e.g. a resume from the step where the last one stopped) extends it, so a
        resumed run records the same segments as an uninterrupted one.
        """
        new = self.spend.segment(seg["start_step"], seg["steps"] + n_steps, seg["passes"] + 1,
                                 num_train, self.cfg.batch_size)
        if self.prior_segments:
            last = self.prior_segments[-1]
            same = all(last[k] == new[k] for k in ("num_examples", "batch_size",
                                                    "noise_multiplier"))
            if same and last["start_step"] + last["steps"] == new["start_step"]:
                merged = dict(last, steps=last["steps"] + new["steps"],
                              passes=last["passes"] + new["passes"])
                return self.prior_segments[:-1] + [merged]
        return self.prior_segments + [new]

    def _budget_steps(self, seg: dict, n_steps: int, num_train: int) -> int:
        """How many of the epoch's `n_steps` steps fit in --epsilon (all of them without one).

        The budget is the ledger's claimed total (the sound total for Poisson lots; for
        shuffled batches the Poisson analysis that sigma was solved with, docs/ledger.md).

        Raises:
          ValueError: when not one more step fits and this process has run none yet,
            naming the spent and the next step's epsilon (nothing has been written).
        """
        target = self.cfg.epsilon
        if target is None or self.spend is None or n_steps <= 0:
            return n_steps
        limit = float(target) * (1 + 1e-9)

        def spent_after(k: int) -> float:
            trial = accounting.PrivacyLedger.from_dict(self.ledger.to_dict())
            self.spend.record(trial, self._segments_with(seg, k, num_train))
            return float(trial.claimed_total()[0])

        if spent_after(n_steps) <= limit:
            return n_steps
        lo, hi = 0, n_steps  # spent_after(lo) fits (or lo = 0), spent_after(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if spent_after(mid) <= limit:
                lo = mid
            else:
                hi = mid
        if lo == 0 and seg["steps"] == 0:
            now = (float(self.ledger.claimed_total()[0]) if self.spend.name in self.ledger
                   else 0.0)
            raise ValueError(
                f"--epsilon: the budget is spent: the run in {self.rd.path} has spent epsilon "
                f"= {now:.6g} of --epsilon={target:g} at step {int(self.step_var.numpy())} and "
                f"one more step would bring it to {spent_after(1):.6g}; nothing was run "
                "(start a new run to train with a larger budget)")
        self._say(f"stopping at the budget: {lo} of the epoch's {n_steps} steps fit in "
                  f"--epsilon={target:g} (one more would spend {spent_after(lo + 1):.6g})")
        return lo

    def _charge_epoch(self, seg: dict, n_steps: int, num_train: int) -> None:
        # Charge the epoch before running it: the ledger never lags behind the steps.
        if self.spend is None or n_steps <= 0:
            return
        segments = self._segments_with(seg, n_steps, num_train)
        seg["steps"] += n_steps
        seg["passes"] += 1
        self.spend.record(self.ledger, segments)
        if self.chief:
            self.ledger.save(self.rd.file(rundir.LEDGER_FILE))

    def _save_progress(self, segments: list, segment: dict, epoch_means: Mapping) -> None:
        if not self.chief:
            return
        segment.update(end_epoch=int(self.epoch_var.numpy()), end_step=int(self.step_var.numpy()),
                       seconds=time.time() - self.start_time)
        stats = epoch_means or _last_stats(self.history)
        rundir.write_json_atomic(os.path.join(self.ckpt_dir, rundir.SEGMENTS_FILE), {
            "segments": segments + [segment],
            NONPRIVATE_STATS_KEY: {"privatized": False, "note": _NONPRIVATE_NOTE,
                                   "last_epoch": dict(stats)}})

    def _pad_to(self) -> Callable[[int], int] | None:
        if not self.method.pads_lots():
            return None
        batch_size = self.cfg.batch_size
        return lambda size: lot_bucket(size, batch_size)

    def make_step_fn(self) -> Callable:
        """The run's traced step: (x, y, indices) -> summed metrics (one seed per call)."""
        # Padded lots: one static-shape graph per bucket size (no relaxing to any size).
        return _make_step_fn(self.strategy, self.method, self.generator, self.cfg.batch_size,
                             reduce_retracing=not self.method.pads_lots())

    def epoch_inputs(self, step_fn: Callable, epoch: int) -> tuple[Any, int]:
        """(distributed dataset, number of batches) of `epoch`, as `run()` trains on them."""
        batches = _flat_batches(epoch_batches(self.method, self.run_key, epoch))
        dataset = _epoch_dataset(self.strategy, self.data.x_train, self.data.y_train, batches,
                                 self._pad_to())
        if (self.method.trace_any_batch_size() and not self.method.pads_lots()
                and len({len(b) for b in batches}) > 1):
            # Lots of varying size (Poisson): trace the step for any batch size before the
            # first call, so that every step, first run or resume, runs this one graph (a
            # graph traced for a static size can differ from it in the last bit).
            step_fn.get_concrete_function(*dataset.element_spec)
        return dataset, len(batches)

    def run_step(self, step_fn: Callable, batch: Any) -> dict[str, float]:
        """One training step on `batch` (from `epoch_inputs`); its metrics as floats."""
        metrics = {k: float(v) for k, v in step_fn(*batch).items()}
        self.step_var.assign_add(1)
        return metrics

    def _train_epochs(self) -> RunResult:
        cfg, method, data = self.cfg, self.method, self.data
        num_train = len(data.x_train)
        max_steps = self._step_cap()
        self._refuse_empty_resume(max_steps)
        if max_steps is None or int(self.step_var.numpy()) < max_steps:
            # Refused before anything is written when not one more step fits the budget.
            self._budget_steps({"start_step": int(self.step_var.numpy()), "steps": 0,
                                "passes": 0}, 1, num_train)
        reporter = report.Reporter(self.rd.file(rundir.TENSORBOARD_DIR) if self.chief else None,
                                   self.verbose, self.print_fn)
        step_fn = self.make_step_fn()
        start_epoch = int(self.epoch_var.numpy())
        seg = {"start_step": int(self.step_var.numpy()), "steps": 0, "passes": 0}
        epoch_means: dict[str, float] = {}
        stopped = max_steps is not None and int(self.step_var.numpy()) >= max_steps
        interrupted = False
        segments = list(self.history.get("segments", []))
        segment = {"start_epoch": start_epoch, "end_epoch": start_epoch,
                   "start_step": seg["start_step"], "end_step": seg["start_step"],
                   "batch_size": cfg.batch_size,
                   "num_replicas": int(self.strategy.num_replicas_in_sync), "seconds": 0.0}
        for epoch in range(start_epoch, cfg.epochs):
            if stopped:
                break
            dataset, n_steps = self.epoch_inputs(step_fn, epoch)
            if max_steps is not None:
                n_steps = min(n_steps, max_steps - int(self.step_var.numpy()))
            if n_steps <= 0:
                stopped = True
                break
            fit = self._budget_steps(seg, n_steps, num_train)
            if fit < n_steps:
                stopped = True
                n_steps = fit
                if n_steps <= 0:
                    break
            self._flush_pending()
            self._charge_epoch(seg, n_steps, num_train)
            reporter.start_epoch(epoch, cfg.epochs, n_steps)
            sums: dict[str, float] = {}
            done = 0
            for batch in dataset:
                if done >= n_steps:
                    break
                metrics = self.run_step(step_fn, batch)
                done += 1
                for k, v in metrics.items():
                    sums[k] = sums.get(k, 0.0) + v
                reporter.step(done, sums)
            epoch_means = {k: v / max(done, 1) for k, v in sums.items()}
            if max_steps is not None and int(self.step_var.numpy()) >= max_steps:
                stopped = True
            if method.after_epoch(epoch, self.ledger):
                stopped = True
            self._refresh_config(method.epoch_config_updates())
            self.epoch_var.assign(epoch + 1)
            reporter.end_epoch(epoch, epoch_means, int(self.step_var.numpy()))
            last = epoch + 1 == cfg.epochs or stopped
            self._epoch_line(reporter, epoch, epoch_means, last)
            halt = (self.stop_after_epochs is not None and epoch + 1 >= self.stop_after_epochs
                    and not last)
            if self.chief:
                self.ledger.save(self.rd.file(rundir.LEDGER_FILE))
            if last or halt or (epoch + 1) % self.checkpoint_every == 0:
                self.ledger_state_var.assign(json.dumps(self.ledger.to_dict(), sort_keys=True))
                if self._config_record is not None:
                    self.config_state_var.assign(integrity.config_record(self._config_record))
                self.manager.save(checkpoint_number=epoch + 1)
                self._save_progress(segments, segment, epoch_means)
            if halt:
                interrupted = True
                break

        epochs_completed = int(self.epoch_var.numpy())
        steps = int(self.step_var.numpy())
        if interrupted:
            reporter.interrupted(epochs_completed, self.rd.path)
            return RunResult(self.rd.path, {}, self.ledger.to_dict(), True, self.model,
                             epochs_completed, steps)
        return self._finish(reporter, segments, segment, epoch_means, stopped)

    def _step_cap(self) -> int | None:
        """The method's step cap, lifted when a resume asks for more epochs than planned.

        --resume --epochs=N (larger) asks for more epochs than the plan the cap was set for
        (e.g. DP-SGD's sigma solved for --epsilon over the old number of epochs): they run
        and every step is charged, up to --epsilon when it is set (`_budget_steps` stops the
        run at the budget, or refuses a resume with none left).
        """
        cap = self.method.max_steps()
        stored_epochs = self.stored_config.get("epochs") if self.resume else None
        if cap is not None and isinstance(stored_epochs, int) and self.cfg.epochs > stored_epochs:
            return None
        return cap

    def _refuse_empty_resume(self, cap: int | None) -> None:
        """A resume with nothing left to run is refused before anything is written."""
        if not self.resume:
            return
        epoch, step = int(self.epoch_var.numpy()), int(self.step_var.numpy())
        if epoch >= self.cfg.epochs or (cap is not None and step >= cap):
            raise ValueError(
                f"--epochs: nothing to run: the run in {self.rd.path} has completed {epoch} "
                f"epochs ({step} steps" + ("" if cap is None else f" of its {cap}-step plan")
                + f") and --epochs is {self.cfg.epochs}; pass a larger --epochs to train "
                "further")

    def _epoch_line(self, reporter: report.Reporter, epoch: int, epoch_means: Mapping,
                    last: bool) -> None:
        """The epoch's progress line: test accuracy (not on the last epoch, whose accuracy
        the run's result gives), epsilon spent so far. Only when something is shown."""
        if not (reporter.verbose and self.chief):
            return
        accuracy = None
        # Not on multi-worker runs: there every worker evaluates together (at the end only).
        multi_worker = isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy)
        if not last and not multi_worker:
            # The model's state (e.g. the noise layers' draw counters, which inference noise
            # advances) is put back, so the run continues exactly as without this check.
            state = [(v, v.numpy()) for v in self.model.non_trainable_variables]
            accuracy = evaluate_accuracy(self.method.accuracy_model(self.model),
                                         self.data.x_test, self.data.y_test)
            for var, value in state:
                var.assign(value)
        epsilon = self.ledger.to_dict().get("epsilon") if self.ledger.entries else None
        reporter.epoch_line(epoch, self.cfg.epochs, int(self.step_var.numpy()), epoch_means,
                            accuracy, epsilon, self.cfg.epsilon)

    def _finish(self, reporter: report.Reporter, segments: list, segment: dict,
                epoch_means: Mapping, stopped: bool) -> RunResult:
        cfg, data = self.cfg, self.data
        reporter.say(f"evaluating on {len(data.x_test)} test examples")
        test_accuracy = evaluate_accuracy(self.method.accuracy_model(self.model), data.x_test,
                                          data.y_test)
        self._save_progress(segments, segment, epoch_means)
        epochs_completed = int(self.epoch_var.numpy())
        steps = int(self.step_var.numpy())
        all_segments = segments + [dict(segment, end_epoch=epochs_completed, end_step=steps,
                                        seconds=time.time() - self.start_time)]
        stats = epoch_means or _last_stats(self.history)
        metrics = {
            "test_accuracy": test_accuracy,
            "epochs_completed": epochs_completed,
            "steps": steps,
            "stopped_early": bool(stopped and epochs_completed < cfg.epochs),
            "seconds": sum(s["seconds"] for s in all_segments),
            "segments": all_segments,
            NONPRIVATE_STATS_KEY: {
                "privatized": False,
                "note": _NONPRIVATE_NOTE,
                "train_loss": stats.get("loss"),
                "train_accuracy": stats.get("accuracy"),
                "last_epoch": {k: v for k, v in stats.items() if k not in ("loss", "accuracy")},
            },
        }
        ledger_dict = self.ledger.to_dict()
        if self.chief:
            reporter.finish(test_accuracy, len(data.x_test), epochs_completed, ledger_dict,
                            cfg.epsilon, self.rd.path)
            self.ledger.save(self.rd.file(rundir.LEDGER_FILE))
            rundir.save_model(self.model, self.rd.file(rundir.MODEL_FILE))
            self.rd.write_json(rundir.METRICS_FILE, metrics)
        return RunResult(self.rd.path, metrics, ledger_dict, False, self.model,
                         epochs_completed, steps)


def train(method: Method, data: Data, *, strategy: tf.distribute.Strategy | None = None,
          optimizer: str | None = None, resume: bool = False, checkpoint_every: int = 1,
          stop_after_epochs: int | None = None, flags_text: str | None = None,
          config_extra: Mapping[str, Any] | None = None, verbose: int = 1,
          print_fn: Callable[[str], None] = print, overwrite: bool = False) -> RunResult:
    """Trains `method` on `data` and writes its run directory (`method.config.model_dir`).

    Fresh run: validate, take the run directory's lock, setup (ledger entries; saved to
    ledger.json before any step), `build` inside `strategy.scope()`, then epochs of
    `strategy.run(method.train_step)` over `method.batches`, a checkpoint every
    `checkpoint_every` epochs, and at the end test accuracy, model.keras and metrics.json.
    Resume: checks the resume's configuration against config.json (only the method's
    `resume_mutable_flags` may change), restores every object `build` returned, step/epoch
    counters, the run's random generator, and the ledger from ledger.json (setup is never
    re-spent), then continues with the next epoch. A per-step spend (`step_spend()`) is
    charged to the ledger from the steps that execute, segment by segment, before each epoch
    runs. Every result file is written atomically.

    Args:
      method: the configured training method.
      data: training and test data.
      strategy: a tf.distribute strategy (default: the default strategy).
      optimizer: "sgd" or "adam"; None keeps `method.config.optimizer`.
      resume: continue the run in `method.config.model_dir` from its latest checkpoint.
      checkpoint_every: epochs between checkpoints (the last epoch is always saved).
      stop_after_epochs: end (after checkpointing) once this many epochs are complete, without
        evaluating; used to interrupt a run deterministically.
      flags_text: content of flags.txt (written on a fresh run when given).
      config_extra: more keys for config.json.
      verbose: 0 silent, 1 progress bar and summary.
      print_fn: where summary lines go.
      overwrite: start afresh in a run directory that holds files but no checkpoint and no
        finished model (a run killed before its first checkpoint).

    Returns:
      A RunResult.

    Raises:
      ValueError: on unusable arguments, an existing run directory without `resume`, `resume`
        without a checkpoint or with conflicting settings, a directory locked by another
        process, or corrupt run state (naming the file); raised before any training.
    """
    if optimizer is not None and optimizer != method.config.optimizer:
        method.config = dataclasses.replace(method.config, optimizer=optimizer)
    cfg = method.config
    strategy = strategy or tf.distribute.get_strategy()
    checks.check_int(checkpoint_every, "checkpoint_every", minimum=1)
    if stop_after_epochs is not None:
        checks.check_int(stop_after_epochs, "stop_after_epochs", minimum=1)
    checks.check_int(cfg.epochs, "epochs", minimum=1)
    checks.check_int(cfg.batch_size, "batch_size", minimum=1)
    checks.check_train_test_arrays(data.x_train, data.y_train, data.x_test, data.y_test,
                                   data.input_shape)
    if len(data.x_train) < cfg.batch_size:
        raise ValueError(f"batch_size: {cfg.batch_size} is larger than the {len(data.x_train)} "
                         "training examples")
    chief = is_chief(strategy)
    method.validate()
    make_optimizer(cfg.optimizer, cfg.learning_rate)  # validates before any work
    lock = None
    if chief:
        check_run_dir(cfg.model_dir, resume=resume, overwrite=overwrite)
        lock = rundir.RunLock(cfg.model_dir).acquire()
    try:
        if chief:
            # Checked again under the lock: another process may have started in between.
            check_run_dir(cfg.model_dir, resume=resume, overwrite=overwrite, epochs=cfg.epochs)
            if overwrite and not resume:
                rundir.clear_run_dir(cfg.model_dir)
        try:
            return Run(method, data, strategy, chief, resume=resume,
                       checkpoint_every=checkpoint_every, stop_after_epochs=stop_after_epochs,
                       flags_text=flags_text, config_extra=config_extra, verbose=verbose,
                       print_fn=print_fn).run()
        except _STORAGE_ERRORS as e:
            if chief:  # what the failed write left (e.g. an orphan ckpt-N_temp folder)
                integrity.remove_temp_files(rundir.checkpoint_dir(cfg.model_dir))
            raise StorageError(storage_message(cfg.model_dir, e)) from None
    except BaseException:
        if lock is not None and lock.created_dir and not rundir.result_files(lock.path):
            lock.discard()  # refused before any work: leave no directory behind
        raise
    finally:
        if lock is not None:
            lock.release()


def _last_stats(history: Mapping[str, Any]) -> dict:
    """The last epoch's (non-private) training statistics of a segments.json.

    Written under NONPRIVATE_STATS_KEY with the "never release" note since issue 40; a run
    before it kept them as "last_stats".
    """
    marked = history.get(NONPRIVATE_STATS_KEY)
    if isinstance(marked, Mapping):
        return dict(marked.get("last_epoch") or {})
    return dict(history.get("last_stats") or {})


def _checkpoint_names(latest: str | None) -> set[str]:
    """Top-level object names in a checkpoint (e.g. "step", "run_secret").

    Raises:
      ValueError: naming the checkpoint when it is missing, truncated or corrupt.
    """
    if not latest:
        raise ValueError("resume: the run directory holds no checkpoint")
    try:
        return {name.split("/")[0] for name, _ in tf.train.list_variables(latest)}
    except (tf.errors.OpError, ValueError, IndexError) as e:
        raise ValueError(f"{latest}: cannot read the checkpoint ({_first_line(e)})") from None


def _ledger_digest(ledger_dict: Mapping[str, Any]) -> str:
    """sha256 of a ledger's canonical JSON."""
    return hashlib.sha256(json.dumps(ledger_dict, sort_keys=True).encode()).hexdigest()


def _charged_steps(ledger_dict: Mapping[str, Any], spend: Any) -> int:
    """Steps the per-step entry of `spend` has charged (0 without one)."""
    if spend is None:
        return 0
    for e in ledger_dict.get("entries", []):
        if e.get("name") == spend.name:
            return sum(int(seg["steps"]) for seg in e.get("segments") or [])
    return 0


def _first_line(e: BaseException) -> str:
    text = str(getattr(e, "message", None) or e).strip()
    return text.splitlines()[0] if text else type(e).__name__
