"""The shared training loop: strategies, checkpoints and resume, TensorBoard, run directory."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import time
from typing import Any, Callable, Mapping

import keras
import numpy as np
import tensorflow as tf

from tfdp import rundir
from tfdp.train import replica
from tfdp.train.base import Method

STRATEGIES = ("default", "mirrored", "multi_worker")
OPTIMIZERS = ("sgd", "adam")
SETUP_STATE_FILE = "setup_state.npz"
_EVAL_BATCH = 1000

# Stream identifiers: every random stream of a run is derived from one run key.
_STREAM_SETUP, _STREAM_SHUFFLE, _STREAM_FIXED, _STREAM_INIT, _STREAM_STEPS = 1, 2, 3, 4, 5
_STREAM_PUBLIC = 6


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


def make_strategy(name: str) -> tf.distribute.Strategy:
    """Builds the tf.distribute strategy named by --strategy.

    "default" runs on one device; "mirrored" on every local GPU, or on every logical CPU when
    there is no GPU; "multi_worker" is MultiWorkerMirroredStrategy configured by TF_CONFIG.

    Raises:
      ValueError: if `name` is unknown.
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        if gpus:
            return tf.distribute.MirroredStrategy([d.name for d in gpus])
        return cpu_mirrored_strategy()
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError(f"strategy: unknown strategy {name!r}; choose one of {STRATEGIES}")


def cpu_mirrored_strategy() -> tf.distribute.MirroredStrategy:
    """MirroredStrategy over every logical CPU, reducing through one device.

    CPU collectives key their instances per strategy object, so two strategies in one process
    (a test session, a notebook) can collide ("Shape mismatch in the collective instance");
    reducing through one device uses no collective instances and is what CPUs need anyway.
    """
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


def make_optimizer(name: str, learning_rate: float) -> keras.optimizers.Optimizer:
    """Keras optimizer named by --optimizer ("sgd" or "adam").

    Raises:
      ValueError: if `name` is unknown or `learning_rate` is not a positive finite number.
    """
    if not (np.isfinite(learning_rate) and learning_rate > 0):
        raise ValueError(f"learning_rate: expected a positive number, got {learning_rate!r}")
    if name == "sgd":
        return keras.optimizers.SGD(learning_rate)
    if name == "adam":
        return keras.optimizers.Adam(learning_rate)
    raise ValueError(f"optimizer: unknown optimizer {name!r}; choose one of {OPTIMIZERS}")


def os_entropy_key() -> int:
    """A fresh 63-bit run key from OS entropy (used when no --seed is given)."""
    return int(np.random.SeedSequence().entropy % (2**63 - 1))


def derive_seed(run_key: int, stream: int, index: int = 0) -> int:
    """A 31-bit seed for `stream` (and e.g. epoch `index`) derived from the run key."""
    return int(np.random.SeedSequence([int(run_key), stream, index]).generate_state(1)[0] >> 1)


def run_dir_has_files(path: str) -> bool:
    """True when `path` is an existing directory that holds files (its lock file aside)."""
    return bool(rundir.result_files(path))


def checkpoint_dir(path: str) -> str:
    """The checkpoint folder of run directory `path`."""
    return os.path.join(os.path.abspath(path), rundir.CHECKPOINT_DIR)


def has_checkpoint(path: str) -> bool:
    """True when run directory `path` holds a checkpoint to resume from."""
    return tf.train.latest_checkpoint(checkpoint_dir(path)) is not None


def tf_config_is_chief() -> bool:
    """Whether this process is the chief of the TF_CONFIG cluster (True without TF_CONFIG).

    The chief is the "chief" task, or worker 0 when the cluster has no "chief" task.
    """
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return True
    conf = json.loads(raw)
    task = conf.get("task") or {}
    task_type, index = task.get("type"), int(task.get("index", 0))
    if task_type in (None, "chief"):
        return True
    return task_type == "worker" and index == 0 and "chief" not in conf.get("cluster", {})


def _is_chief(strategy: tf.distribute.Strategy) -> bool:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return True
    cluster = resolver.cluster_spec().as_dict()
    if resolver.task_type == "chief":
        return True
    return resolver.task_type == "worker" and resolver.task_id == 0 and "chief" not in cluster


def _ledger_module():
    from tfdp import accounting  # pylint: disable=import-outside-toplevel
    return accounting


def _epoch_batches(method: Method, num_examples: int, batch_size: int, run_key: int,
                   epoch: int) -> list[np.ndarray]:
    """Example indices of each batch of one epoch, from the run's seeded streams.

    "shuffle": a fresh permutation cut into floor(n/m) batches of m (remainder dropped);
    "fixed": tfdp.data.fixed_batches drawn once per run, visited in a fresh order each epoch;
    "poisson": floor(n/m) lots, each example joining each lot independently with probability
    q = m/n (Abadi et al. 2016, lot sampling), so lot sizes vary;
    "method": the method's `epoch_batches(num_examples, fixed_seed, rng)` (e.g. StoBatch's
    shared pool of fixed batches), given the run's fixed-partition seed and this epoch's RNG.
    """
    schedule = method.batch_schedule()
    rng = np.random.default_rng(derive_seed(run_key, _STREAM_SHUFFLE, epoch))
    steps = num_examples // batch_size
    if schedule == "shuffle":
        return list(rng.permutation(num_examples)[: steps * batch_size].reshape(steps, -1))
    if schedule == "fixed":
        from tfdp import data  # pylint: disable=import-outside-toplevel
        batches = np.asarray(data.fixed_batches(num_examples, batch_size,
                                                derive_seed(run_key, _STREAM_FIXED)))
        return list(batches[rng.permutation(len(batches))])
    if schedule == "method":
        return list(method.epoch_batches(num_examples, derive_seed(run_key, _STREAM_FIXED), rng))
    if schedule == "poisson":
        q = batch_size / num_examples
        return [np.flatnonzero(rng.random(num_examples) < q) for _ in range(steps)]
    raise ValueError(f"batch_schedule: {type(method).__name__} returned {schedule!r}; "
                     "expected 'shuffle', 'fixed', 'poisson' or 'method'")


def _epoch_dataset(strategy, x: np.ndarray, y: np.ndarray, batches: list[np.ndarray],
                   with_indices: bool = False):
    """Distributed dataset of (x, y) batches, or (x, y, indices) when `with_indices`."""
    if len({len(b) for b in batches}) <= 1:
        indices = np.concatenate(batches) if batches else np.zeros([0], np.int64)
        parts = (x[indices], y[indices]) + ((indices.astype(np.int64),) if with_indices else ())
        ds = tf.data.Dataset.from_tensor_slices(parts)
        ds = ds.batch(len(batches[0]) if batches else 1, drop_remainder=True)
    else:
        def gen():
            for b in batches:
                yield (x[b], y[b]) + ((b.astype(np.int64),) if with_indices else ())
        signature = (tf.TensorSpec((None,) + x.shape[1:], tf.as_dtype(x.dtype)),
                     tf.TensorSpec((None,), tf.as_dtype(y.dtype)))
        if with_indices:
            signature += (tf.TensorSpec((None,), tf.int64),)
        ds = tf.data.Dataset.from_generator(gen, output_signature=signature)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return strategy.experimental_distribute_dataset(ds.prefetch(2).with_options(options))


def _make_step_fn(strategy, method: Method, model, optimizer, generator: tf.random.Generator,
                  global_batch_size: int) -> Callable:
    def replica_fn(seed, x, y, *indices):
        kwargs = {"indices": indices[0]} if indices else {}
        with replica.step_context(seed):
            metrics = method.train_step(model, optimizer, x, y, global_batch_size, **kwargs)
        return {k: tf.cast(v, tf.float32) for k, v in dict(metrics).items()}

    @tf.function(reduce_retracing=True)
    def step(x, y, *indices):
        # One seed per step, drawn in cross-replica context so that every replica sees it.
        seed = generator.make_seeds(1)[:, 0]
        per_replica = strategy.run(replica_fn, args=(seed, x, y) + tuple(indices))
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


def _run_setup(method: Method, data: Data, ledger, rng: np.random.Generator) -> None:
    try:
        method.setup(data.x_train, data.y_train, ledger, rng)
    except ValueError as e:
        raise SetupError(str(e)) from e


def _scalar_metadata() -> bytes:
    # The TensorBoard scalars plugin's metadata, written through TF core so that event files
    # are produced without the tensorboard package (only viewing them needs it).
    from tensorflow.core.framework import summary_pb2  # pylint: disable=import-outside-toplevel
    meta = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
        data_class=summary_pb2.DATA_CLASS_SCALAR)
    return meta.SerializeToString()


def summary_scalar(writer, tag: str, value: float, step: int) -> None:
    """Writes one TensorBoard scalar event with `writer` (a tf.summary file writer)."""
    with writer.as_default():
        tf.summary.write(tag, tf.constant(float(value), tf.float32), step=int(step),
                         metadata=_scalar_metadata())


def _print_ledger(ledger: Mapping[str, Any], print_fn: Callable[[str], None]) -> None:
    print_fn("privacy ledger:")
    for entry in ledger.get("entries", []):
        parts = [f"  - {entry.get('name')}: {entry.get('mechanism', '')}",
                 f"eps={entry.get('epsilon')}", f"delta={entry.get('delta')}"]
        if entry.get("claimed_epsilon") is not None:
            parts.append(f"claimed eps={entry.get('claimed_epsilon')}")
        print_fn(" ".join(parts))
    relation = {"add_remove": "add/remove-one", "replace_one": "replace-one"}.get(
        ledger.get("relation"), ledger.get("relation"))
    print_fn(f"  total (sound accounting): epsilon={ledger.get('epsilon')} "
             f"delta={ledger.get('delta')}" + (f" ({relation} neighbours)" if relation else ""))
    if not ledger.get("entries"):
        print_fn("  (no entries: this run spends no privacy budget)")
    elif ledger.get("differs"):
        print_fn(f"  total (as claimed): epsilon={ledger.get('claimed_epsilon')} "
                 f"delta={ledger.get('claimed_delta')}  <- differs from the sound value; see "
                 "the entries' notes in ledger.json")
    else:
        print_fn("  (claimed total equals the sound total)")


# Configuration keys compared on resume, with the flag that sets each (the training data is
# compared by content through data_sha256).
_RESUME_KEYS = {"method": "--method", "dataset": "--dataset", "batch_size": "--batch_size",
                "learning_rate": "--learning_rate", "optimizer": "--optimizer",
                "epsilon": "--epsilon", "delta": "--delta", "value_range": "--value_range",
                "num_train": "--num_train", "input_shape": "--dataset",
                "num_classes": "--dataset", "data_sha256": "--data_dir",
                "epochs": "--epochs"}
_NONPRIVATE_NOTE = ("computed on the private training data WITHOUT privacy protection (not "
                    "privatized); for monitoring only, never release it with the model")
NONPRIVATE_STATS_KEY = "nonprivate_training_stats"
_UNSET = object()
SEGMENTS_FILE = "segments.json"


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
    seed_a, seed_b = stored.get("seed"), current.get("seed")
    if seed_b is not None and seed_a != seed_b:
        out.append(f"--seed: the run was started with {seed_a!r}, the resume asks for {seed_b!r}")
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


def _config_dict(method: Method, data: Data, strategy, optimizer: str, num_train: int,
                 num_public: int, fingerprint: str) -> dict:
    cfg = method.config
    return {
        "method": cfg.method, "dataset": cfg.dataset, "data_dir": data.data_dir,
        "value_range": list(cfg.value_range), "input_shape": list(data.input_shape),
        "num_classes": int(data.num_classes), "seed": cfg.seed,
        "seed_source": "flag" if cfg.seed is not None else "os_entropy",
        "certification": None,  # filled in after setup (it may depend on setup's results)
        "epochs": cfg.epochs, "batch_size": cfg.batch_size,
        "learning_rate": cfg.learning_rate, "optimizer": optimizer,
        "epsilon": cfg.epsilon, "delta": cfg.delta,
        "strategy": type(strategy).__name__,
        "num_replicas": int(strategy.num_replicas_in_sync),
        "num_train": int(num_train), "num_public": int(num_public),
        "num_test": int(len(data.x_test)), "data_sha256": fingerprint,
        "batch_schedule": method.batch_schedule(),
        "options": dict(cfg.options),
    }


def _check_data(data: Data) -> None:
    shape = tuple(int(v) for v in data.input_shape)
    for name, arr in (("x_train", data.x_train), ("x_test", data.x_test)):
        if tuple(arr.shape[1:]) != shape:
            raise ValueError(f"data: {name} images have shape {tuple(arr.shape[1:])}, but the "
                             f"run's input shape is {shape}; train and test images must have "
                             "the same shape")
    if len(data.x_train) != len(data.y_train) or len(data.x_test) != len(data.y_test):
        raise ValueError("data: images and labels differ in number")


def _clear_run_dir(path: str) -> None:
    for name in rundir.result_files(path):
        full = os.path.join(path, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        else:
            os.remove(full)


def check_run_dir(model_dir: str, *, resume: bool, overwrite: bool = False,
                  epochs: int | None = None, flag_prefix: str = "") -> None:
    """Checks that `model_dir` can be used for a fresh run, a resume or an overwrite.

    Raises:
      ValueError: naming the flag, with the way out (e.g. --overwrite for a run that stopped
        before its first checkpoint).
    """
    p = flag_prefix
    if os.path.exists(model_dir) and not os.path.isdir(model_dir):
        raise ValueError(f"{p}model_dir: {model_dir} exists and is not a directory")
    probe = os.path.abspath(model_dir)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"{p}model_dir: {probe} is not writable")
    files = rundir.result_files(model_dir)
    ckpt = has_checkpoint(model_dir) if files else False
    finished = os.path.exists(os.path.join(model_dir, rundir.MODEL_FILE))
    if resume:
        if not os.path.isdir(model_dir):
            raise ValueError(f"{p}resume: run directory {model_dir} does not exist")
        if not ckpt:
            raise ValueError(f"{p}resume: run directory {model_dir} holds no checkpoint (the run "
                             "stopped before its first checkpoint); start it again with "
                             f"{p}overwrite")
        if overwrite:
            raise ValueError(f"{p}overwrite: cannot be combined with {p}resume")
        metrics_path = os.path.join(model_dir, rundir.METRICS_FILE)
        if finished and os.path.exists(metrics_path):
            done = rundir.read_json(metrics_path).get("epochs_completed")
            if epochs is not None and done is not None and int(done) >= int(epochs):
                raise ValueError(f"{p}resume: the run in {model_dir} is finished ({done} epochs; "
                                 f"model.keras and metrics.json written); pass a larger {p}epochs "
                                 "to train further")
        return
    if not files:
        return
    if overwrite:
        if ckpt or finished:
            raise ValueError(f"{p}overwrite: {model_dir} holds a checkpoint or a finished "
                             f"model; continue it with {p}resume or choose another "
                             f"{p}model_dir (it is never deleted)")
        return
    if ckpt or finished:
        raise ValueError(f"{p}model_dir: {model_dir} already exists and is not empty; pass "
                         f"{p}resume to continue that run or choose another directory")
    raise ValueError(f"{p}model_dir: {model_dir} already exists and is not empty, and holds no "
                     "checkpoint (a run stopped before its first checkpoint cannot be resumed); "
                     f"pass {p}overwrite to start it again there, or choose another directory")


def _check_trackables(method: Method, extra: Mapping[str, Any]) -> dict:
    trackable = tf.__internal__.tracking.Trackable
    out = {}
    for key, value in extra.items():
        if not isinstance(value, trackable):
            raise ValueError(f"checkpoint_objects: {type(method).__name__} returned {key!r} of "
                             f"type {type(value).__name__}, which tf.train.Checkpoint cannot "
                             "track (use tf.Variable, tf.Module, tf.random.Generator or a Keras "
                             "model, layer or optimizer); it would not be restored on resume")
        out[f"method_{key}"] = value
    return out


def _save_setup_state(path: str, state: Mapping[str, Any]) -> None:
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in state.items()})
    rundir.atomic_write_bytes(path, buf.getvalue())


def _save_model(model, path: str) -> None:
    directory = os.path.dirname(path)
    tmp = os.path.join(directory, f".tmp-{os.getpid()}-" + os.path.basename(path))
    try:
        model.save(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, rundir.FILE_MODE)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def train(method: Method, data: Data, *, strategy: tf.distribute.Strategy | None = None,
          optimizer: str = "sgd", resume: bool = False, checkpoint_every: int = 1,
          stop_after_epochs: int | None = None, flags_text: str | None = None,
          config_extra: Mapping[str, Any] | None = None, verbose: int = 1,
          print_fn: Callable[[str], None] = print, overwrite: bool = False) -> RunResult:
    """Trains `method` on `data` and writes its run directory (`method.config.model_dir`).

    Fresh run: validate, take the run directory's lock, setup (ledger entries; saved to
    ledger.json before any step), build the model and optimizer inside `strategy.scope()`,
    then epochs of `strategy.run(method.train_step)`, a checkpoint every `checkpoint_every`
    epochs, and at the end test accuracy, model.keras and metrics.json. Resume: checks the
    resume's configuration against config.json (only the method's `resume_mutable_flags` may
    change), restores model, optimizer, every object of `checkpoint_objects()`, step/epoch
    counters, the run's random generator, and the ledger from ledger.json (setup is never
    re-spent), then continues with the next epoch. A per-step spend (`step_spend()`) is
    charged to the ledger from the steps that execute, segment by segment, before each epoch
    runs. Every result file is written atomically.

    Args:
      method: the configured training method.
      data: training and test data.
      strategy: a tf.distribute strategy (default: the default strategy).
      optimizer: "sgd" or "adam".
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
    cfg = method.config
    strategy = strategy or tf.distribute.get_strategy()
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every: expected >= 1, got {checkpoint_every!r}")
    if stop_after_epochs is not None and stop_after_epochs < 1:
        raise ValueError(f"stop_after_epochs: expected >= 1, got {stop_after_epochs!r}")
    if cfg.epochs < 1:
        raise ValueError(f"epochs: expected >= 1, got {cfg.epochs!r}")
    if cfg.batch_size < 1:
        raise ValueError(f"batch_size: expected >= 1, got {cfg.batch_size!r}")
    _check_data(data)
    if len(data.x_train) < cfg.batch_size:
        raise ValueError(f"batch_size: {cfg.batch_size} is larger than the {len(data.x_train)} "
                         "training examples")
    chief = _is_chief(strategy)
    method.validate()
    make_optimizer(optimizer, cfg.learning_rate)  # validates before any work
    lock = None
    if chief:
        check_run_dir(cfg.model_dir, resume=resume, overwrite=overwrite)
        lock = rundir.RunLock(cfg.model_dir).acquire()
    try:
        if chief:
            # Checked again under the lock: another process may have started in between.
            check_run_dir(cfg.model_dir, resume=resume, overwrite=overwrite, epochs=cfg.epochs)
            if overwrite and not resume:
                _clear_run_dir(cfg.model_dir)
        return _train(method, data, strategy, chief, optimizer=optimizer, resume=resume,
                      checkpoint_every=checkpoint_every, stop_after_epochs=stop_after_epochs,
                      flags_text=flags_text, config_extra=config_extra, verbose=verbose,
                      print_fn=print_fn)
    except BaseException:
        if lock is not None and lock.created_dir and not rundir.result_files(lock.path):
            lock.discard()  # refused before any work: leave no directory behind
        raise
    finally:
        if lock is not None:
            lock.release()


def _train(method: Method, data: Data, strategy, chief: bool, *, optimizer: str, resume: bool,
           checkpoint_every: int, stop_after_epochs: int | None, flags_text: str | None,
           config_extra: Mapping[str, Any] | None, verbose: int,
           print_fn: Callable[[str], None]) -> RunResult:
    cfg = method.config
    accounting = _ledger_module()
    rd = rundir.RunDir(cfg.model_dir)
    ckpt_dir = rd.file(rundir.CHECKPOINT_DIR)
    if not chief:  # other workers save to their own folder inside the run directory
        resolver = strategy.cluster_resolver
        ckpt_dir = os.path.join(rd.path, "workers", f"{resolver.task_type}-{resolver.task_id}")
    start_time = time.time()
    fingerprint = data_fingerprint(data.x_train, data.y_train)

    # The run key: every random stream of the run derives from it (principle 5).
    run_key_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="run_key")
    stored_config: dict = {}
    history: dict = {"segments": [], "last_stats": {}}
    if resume:
        latest = tf.train.latest_checkpoint(checkpoint_dir(cfg.model_dir))
        try:
            tf.train.Checkpoint(run_key=run_key_var).restore(latest).expect_partial()
        except (tf.errors.OpError, ValueError) as e:
            raise ValueError(f"{latest}: cannot read the checkpoint ({e})") from None
        run_key = int(run_key_var.numpy())
        ledger = accounting.PrivacyLedger.load(rd.file(rundir.LEDGER_FILE))
        if rd.exists(rundir.CONFIG_FILE) or chief:
            stored_config = rd.read_json(rundir.CONFIG_FILE)
        seg_path = os.path.join(checkpoint_dir(cfg.model_dir), SEGMENTS_FILE)
        if os.path.exists(seg_path):
            history = rundir.read_json(seg_path)
    else:
        run_key = int(cfg.seed) if cfg.seed is not None else os_entropy_key()
        run_key_var.assign(run_key)
        ledger = accounting.PrivacyLedger()

    # A public split (data disjoint from the private training set), chosen from the run key.
    num_all = len(data.x_train)
    num_public = int(method.public_split_size(num_all))
    if num_public:
        if not 0 < num_public < num_all:
            raise ValueError(f"public split: {num_public} records of {num_all} leaves no "
                             "private training data")
        perm = np.random.default_rng(derive_seed(run_key, _STREAM_PUBLIC)).permutation(num_all)
        pub, priv = np.sort(perm[:num_public]), np.sort(perm[num_public:])
        method.set_public_data(data.x_train[pub], data.y_train[pub])
        data = dataclasses.replace(data, x_train=data.x_train[priv], y_train=data.y_train[priv])
    num_train = len(data.x_train)
    if num_train < cfg.batch_size:
        raise ValueError(f"batch_size: {cfg.batch_size} is larger than the {num_train} private "
                         "training examples")

    config = _config_dict(method, data, strategy, optimizer, num_train, num_public, fingerprint)
    config.update(config_extra or {})
    if resume and stored_config:
        conflicts = resume_conflicts(stored_config, config,
                                     tuple(getattr(method, "resume_mutable_flags", ("epochs",))))
        if conflicts:
            raise ValueError("resume: the resume's settings conflict with the run in "
                             f"{rd.path} (resume reads its configuration from config.json; "
                             "change it only in a new run):\n  " + "\n  ".join(conflicts))

    # Host-side setup (e.g. private relevance): once per run; on resume from saved state.
    setup_rng = np.random.default_rng(derive_seed(run_key, _STREAM_SETUP))
    setup_path = os.path.join(checkpoint_dir(cfg.model_dir), SETUP_STATE_FILE)
    if resume and os.path.exists(setup_path):
        try:
            with np.load(setup_path) as npz:
                state = {k: npz[k] for k in npz.files}
        except (OSError, ValueError) as e:
            raise ValueError(f"{setup_path}: corrupt setup state ({e})") from None
        method.restore_setup_state(state)
    elif resume:
        # Setup re-run into a scratch ledger; it must reproduce the run's setup entries.
        scratch = accounting.PrivacyLedger()
        _run_setup(method, data, scratch, setup_rng)
        kept = {e["name"]: e for e in ledger.entries if e.get("segments") is None}
        if {e["name"]: e for e in scratch.entries} != kept:
            raise RuntimeError("setup changed the privacy ledger on resume; the method's setup "
                               "is not deterministic given its rng, so resuming would spend "
                               "budget again")
    else:
        _run_setup(method, data, ledger, setup_rng)
        os.makedirs(rd.path, exist_ok=True)
        state = method.setup_state()
        if state and chief:
            _save_setup_state(setup_path, state)

    # A per-step spend is charged from the steps that execute (docs/ledger.md).
    spend = method.step_spend()
    prior_segments: list = []
    if spend is not None:
        if spend["name"] in ledger:
            prior_segments = list(ledger.get(spend["name"]).get("segments") or [])
        _record_spend(ledger, spend, prior_segments)

    # The certification entry may depend on setup's results (e.g. HGM's redistribution r).
    config["certification"] = method.certification_config()
    if chief and not resume:
        if flags_text is not None:
            rd.write_text(rundir.FLAGS_FILE, flags_text)
        rd.write_json(rundir.CONFIG_FILE, config)
    if chief:
        if resume and stored_config:
            updated = dict(stored_config)
            for key in getattr(method, "resume_mutable_flags", ("epochs",)):
                if key in config and key != "options":
                    updated[key] = config[key]
            new_flags = (config_extra or {}).get("flags")
            if new_flags:  # the flags of the latest segment; a later resume starts from them
                updated["flags"] = new_flags
            for key in ("cpu_replicas", "num_replicas", "strategy"):
                if key in config:
                    updated[key] = config[key]
            updated.setdefault("resumes", []).append(
                {"epochs": cfg.epochs, "batch_size": cfg.batch_size,
                 "num_replicas": int(strategy.num_replicas_in_sync), "time": time.time()})
            rd.write_json(rundir.CONFIG_FILE, updated)
        ledger.save(rd.file(rundir.LEDGER_FILE))

    # Model, optimizer and state, built inside the strategy scope.
    keras.utils.set_random_seed(derive_seed(run_key, _STREAM_INIT))
    with strategy.scope():
        model = method.build_model(tuple(data.input_shape), int(data.num_classes))
        model(tf.zeros((1,) + tuple(data.input_shape), tf.float32), training=False)
        opt = make_optimizer(optimizer, cfg.learning_rate)
        opt.build(model.trainable_variables)
    generator = tf.random.Generator.from_seed(derive_seed(run_key, _STREAM_STEPS))
    epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
    extra = _check_trackables(method, method.checkpoint_objects())
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt, generator=generator,
                               epoch=epoch_var, step=step_var, run_key=run_key_var, **extra)
    manager = tf.train.CheckpointManager(ckpt, ckpt_dir, max_to_keep=2)
    if resume:
        latest = tf.train.latest_checkpoint(checkpoint_dir(cfg.model_dir))
        try:
            status = ckpt.restore(latest)
            status.assert_existing_objects_matched()
        except (tf.errors.OpError, AssertionError, ValueError) as e:
            raise ValueError(f"{latest}: the checkpoint does not match this run's model and "
                             f"state ({e})") from None

    writer = tf.summary.create_file_writer(rd.file(rundir.TENSORBOARD_DIR)) if chief else None
    step_fn = _make_step_fn(strategy, method, model, opt, generator, cfg.batch_size)
    max_steps = method.max_steps()
    start_epoch = int(epoch_var.numpy())
    seg_start_step = int(step_var.numpy())
    seg_steps, seg_passes = 0, 0
    epoch_means: dict[str, float] = {}
    stopped = max_steps is not None and int(step_var.numpy()) >= max_steps
    interrupted = False
    epoch = start_epoch
    segments = list(history.get("segments", []))
    segment = {"start_epoch": start_epoch, "end_epoch": start_epoch,
               "start_step": seg_start_step, "end_step": seg_start_step,
               "batch_size": cfg.batch_size, "num_replicas": int(strategy.num_replicas_in_sync),
               "seconds": 0.0}

    def save_progress() -> None:
        if not chief:
            return
        segment.update(end_epoch=int(epoch_var.numpy()), end_step=int(step_var.numpy()),
                       seconds=time.time() - start_time)
        stats = epoch_means or history.get("last_stats", {})
        rundir.write_json_atomic(os.path.join(ckpt_dir, SEGMENTS_FILE),
                                 {"segments": segments + [segment], "last_stats": stats})

    for epoch in range(start_epoch, cfg.epochs):
        if stopped:
            break
        batches = _epoch_batches(method, num_train, cfg.batch_size, run_key, epoch)
        dataset = _epoch_dataset(strategy, data.x_train, data.y_train, batches,
                                 with_indices=method.uses_record_indices)
        n_steps = len(batches)
        if max_steps is not None:
            n_steps = min(n_steps, max_steps - int(step_var.numpy()))
        if spend is not None and n_steps > 0:
            # Charge the epoch before running it: the ledger never lags behind the steps.
            seg_steps += n_steps
            seg_passes += 1
            _record_spend(ledger, spend, prior_segments + [_spend_segment(
                spend, seg_start_step, seg_steps, seg_passes, num_train, cfg.batch_size)])
            if chief:
                ledger.save(rd.file(rundir.LEDGER_FILE))
        bar = None
        if verbose and chief:
            bar = keras.utils.Progbar(n_steps, unit_name="step",
                                      stateful_metrics=["loss", "accuracy"])
        if bar is not None:
            print_fn(f"epoch {epoch + 1}/{cfg.epochs}")
        sums: dict[str, float] = {}
        done = 0
        for batch in dataset:
            if done >= n_steps:
                break
            metrics = {k: float(v) for k, v in step_fn(*batch).items()}
            step_var.assign_add(1)
            done += 1
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + v
            if bar is not None:
                bar.update(done, values=[(k, v / done) for k, v in sums.items()])
        epoch_means = {k: v / max(done, 1) for k, v in sums.items()}
        if max_steps is not None and int(step_var.numpy()) >= max_steps:
            stopped = True
        if method.after_epoch(epoch, ledger):
            stopped = True
        epoch_var.assign(epoch + 1)
        if writer is not None:
            # Not privatized: statistics of the private training data (see metrics.json).
            for k, v in epoch_means.items():
                summary_scalar(writer, f"nonprivate_train/{k}", v, epoch + 1)
            summary_scalar(writer, "train/steps", float(step_var.numpy()), epoch + 1)
            writer.flush()
        last = epoch + 1 == cfg.epochs or stopped
        halt = stop_after_epochs is not None and epoch + 1 >= stop_after_epochs and not last
        if chief:
            ledger.save(rd.file(rundir.LEDGER_FILE))
        if last or halt or (epoch + 1) % checkpoint_every == 0:
            manager.save(checkpoint_number=epoch + 1)
            save_progress()
        if halt:
            interrupted = True
            break

    epochs_completed = int(epoch_var.numpy())
    if interrupted:
        if verbose and chief:
            print_fn(f"stopped after epoch {epochs_completed} (checkpoint saved); resume with "
                     f"--resume --model_dir={rd.path}")
        return RunResult(rd.path, {}, ledger.to_dict(), True, model, epochs_completed,
                         int(step_var.numpy()))

    test_accuracy = evaluate_accuracy(model, data.x_test, data.y_test)
    save_progress()
    all_segments = segments + [dict(segment, end_epoch=epochs_completed,
                                    end_step=int(step_var.numpy()),
                                    seconds=time.time() - start_time)]
    stats = epoch_means or history.get("last_stats", {})
    metrics = {
        "test_accuracy": test_accuracy,
        "epochs_completed": epochs_completed,
        "steps": int(step_var.numpy()),
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
    ledger_dict = ledger.to_dict()
    if chief:
        summary_scalar(writer, "test/accuracy", test_accuracy, epochs_completed)
        if ledger_dict.get("epsilon") is not None:
            summary_scalar(writer, "privacy/epsilon", ledger_dict["epsilon"], epochs_completed)
        writer.flush()
        ledger.save(rd.file(rundir.LEDGER_FILE))
        _save_model(model, rd.file(rundir.MODEL_FILE))
        rd.write_json(rundir.METRICS_FILE, metrics)
    if verbose and chief:
        print_fn(f"test accuracy: {test_accuracy:.4f} ({len(data.x_test)} examples)")
        _print_ledger(ledger_dict, print_fn)
        if cfg.epsilon is not None and ledger_dict["epsilon"] > cfg.epsilon * (1 + 1e-9):
            print_fn(f"  note: the sound epsilon of what ran exceeds --epsilon={cfg.epsilon:g}")
        print_fn(f"run directory: {rd.path}")
    return RunResult(rd.path, metrics, ledger_dict, False, model, epochs_completed,
                     int(step_var.numpy()))


def _spend_segment(spend: Mapping[str, Any], start_step: int, steps: int, passes: int,
                   num_examples: int, batch_size: int) -> dict:
    return {"start_step": int(start_step), "steps": int(steps), "passes": int(passes),
            "num_examples": int(num_examples), "batch_size": int(batch_size),
            "noise_multiplier": float(spend["noise_multiplier"])}


def _record_spend(ledger, spend: Mapping[str, Any], segments: list) -> None:
    ledger.record_steps(spend["name"], segments=segments, delta=spend["delta"],
                        sampling=spend["sampling"], accountant=spend.get("accountant", "rdp"),
                        protects=spend.get("protects", "training records"),
                        note=spend.get("note", ""), unbounded=bool(spend.get("unbounded")))
