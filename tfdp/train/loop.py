"""The shared training loop: strategies, checkpoints and resume, TensorBoard, run directory."""

from __future__ import annotations

import dataclasses
import json
import os
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
    """True when `path` is an existing directory that is not empty."""
    return os.path.isdir(path) and bool(os.listdir(path))


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
    q = m/n (Abadi et al. 2016, lot sampling), so lot sizes vary.
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
    if schedule == "poisson":
        q = batch_size / num_examples
        return [np.flatnonzero(rng.random(num_examples) < q) for _ in range(steps)]
    raise ValueError(f"batch_schedule: {type(method).__name__} returned {schedule!r}; "
                     "expected 'shuffle', 'fixed' or 'poisson'")


def _epoch_dataset(strategy, x: np.ndarray, y: np.ndarray, batches: list[np.ndarray]):
    if len({len(b) for b in batches}) <= 1:
        indices = np.concatenate(batches) if batches else np.zeros([0], np.int64)
        ds = tf.data.Dataset.from_tensor_slices((x[indices], y[indices]))
        ds = ds.batch(len(batches[0]) if batches else 1, drop_remainder=True)
    else:
        def gen():
            for b in batches:
                yield x[b], y[b]
        ds = tf.data.Dataset.from_generator(gen, output_signature=(
            tf.TensorSpec((None,) + x.shape[1:], tf.as_dtype(x.dtype)),
            tf.TensorSpec((None,), tf.as_dtype(y.dtype))))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return strategy.experimental_distribute_dataset(ds.prefetch(2).with_options(options))


def _make_step_fn(strategy, method: Method, model, optimizer, generator: tf.random.Generator,
                  global_batch_size: int) -> Callable:
    def replica_fn(x, y, seed):
        with replica.step_context(seed):
            metrics = method.train_step(model, optimizer, x, y, global_batch_size)
        return {k: tf.cast(v, tf.float32) for k, v in dict(metrics).items()}

    @tf.function(reduce_retracing=True)
    def step(x, y):
        # One seed per step, drawn in cross-replica context so that every replica sees it.
        seed = generator.make_seeds(1)[:, 0]
        per_replica = strategy.run(replica_fn, args=(x, y, seed))
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


def _save_setup_state(path: str, state: Mapping[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp.npz"
    np.savez(tmp, **{k: np.asarray(v) for k, v in state.items()})
    os.replace(tmp, path)


def _print_ledger(ledger: Mapping[str, Any], print_fn: Callable[[str], None]) -> None:
    print_fn("privacy ledger:")
    for entry in ledger.get("entries", []):
        parts = [f"  - {entry.get('name')}: {entry.get('mechanism', '')}",
                 f"eps={entry.get('epsilon')}", f"delta={entry.get('delta')}"]
        if entry.get("claimed_epsilon") is not None:
            parts.append(f"claimed eps={entry.get('claimed_epsilon')}")
        print_fn(" ".join(parts))
    print_fn(f"  total (sound accounting): epsilon={ledger.get('epsilon')} "
             f"delta={ledger.get('delta')}")
    if not ledger.get("entries"):
        print_fn("  (no entries: this run spends no privacy budget)")
    elif ledger.get("differs"):
        print_fn(f"  total (as claimed): epsilon={ledger.get('claimed_epsilon')} "
                 f"delta={ledger.get('claimed_delta')}  <- differs from the sound value; see "
                 "the entries' notes in ledger.json")
    else:
        print_fn("  (claimed total equals the sound total)")


def train(method: Method, data: Data, *, strategy: tf.distribute.Strategy | None = None,
          optimizer: str = "sgd", resume: bool = False, checkpoint_every: int = 1,
          stop_after_epochs: int | None = None, flags_text: str | None = None,
          config_extra: Mapping[str, Any] | None = None, verbose: int = 1,
          print_fn: Callable[[str], None] = print) -> RunResult:
    """Trains `method` on `data` and writes its run directory (`method.config.model_dir`).

    Fresh run: validate, setup (ledger entries; saved to ledger.json before any step), build
    the model and optimizer inside `strategy.scope()`, then epochs of `strategy.run(
    method.train_step)`, a checkpoint every `checkpoint_every` epochs, and at the end test
    accuracy, model.keras and metrics.json. Resume: restores model, optimizer, step/epoch
    counters, the run's random generator and every checkpointed noise variable, and the
    ledger from ledger.json (never re-spent), then continues with the next epoch.

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

    Returns:
      A RunResult.

    Raises:
      ValueError: on unusable arguments, an existing run directory without `resume`, or
        `resume` without a checkpoint; raised before any training.
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
    num_train = len(data.x_train)
    if num_train < cfg.batch_size:
        raise ValueError(f"batch_size: {cfg.batch_size} is larger than the {num_train} "
                         "training examples")
    chief = _is_chief(strategy)
    if resume and not has_checkpoint(cfg.model_dir):
        raise ValueError(f"resume: no checkpoint to resume from in {cfg.model_dir}")
    if not resume and chief and run_dir_has_files(cfg.model_dir):
        raise ValueError(f"model_dir: {cfg.model_dir} already exists and is not empty; "
                         "pass --resume to continue it or choose another --model_dir")
    method.validate()
    make_optimizer(optimizer, cfg.learning_rate)  # validates before any work
    accounting = _ledger_module()

    rd = rundir.RunDir(cfg.model_dir)  # created once setup has succeeded
    ckpt_dir = rd.file(rundir.CHECKPOINT_DIR)
    if not chief:  # other workers save to their own folder inside the run directory
        resolver = strategy.cluster_resolver
        ckpt_dir = os.path.join(rd.path, "workers", f"{resolver.task_type}-{resolver.task_id}")
    start_time = time.time()

    # The run key: every random stream of the run derives from it (principle 5).
    run_key_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="run_key")
    if resume:
        latest = tf.train.latest_checkpoint(checkpoint_dir(cfg.model_dir))
        tf.train.Checkpoint(run_key=run_key_var).restore(latest).expect_partial()
        run_key = int(run_key_var.numpy())
        ledger = accounting.PrivacyLedger.load(rd.file(rundir.LEDGER_FILE))
    else:
        run_key = int(cfg.seed) if cfg.seed is not None else os_entropy_key()
        run_key_var.assign(run_key)
        ledger = accounting.PrivacyLedger()

    # Host-side setup (e.g. private relevance): once per run; on resume from saved state.
    setup_rng = np.random.default_rng(derive_seed(run_key, _STREAM_SETUP))
    setup_path = os.path.join(checkpoint_dir(cfg.model_dir), SETUP_STATE_FILE)
    if resume and os.path.exists(setup_path):
        with np.load(setup_path) as npz:
            method.restore_setup_state({k: npz[k] for k in npz.files})
    elif resume:
        before = ledger.to_dict()
        _run_setup(method, data, ledger, setup_rng)
        if ledger.to_dict() != before:
            raise RuntimeError("setup changed the privacy ledger on resume; the method's setup "
                               "is not deterministic given its rng, so resuming would spend "
                               "budget again")
    else:
        _run_setup(method, data, ledger, setup_rng)
        os.makedirs(rd.path, exist_ok=True)
        state = method.setup_state()
        if state and chief:
            _save_setup_state(setup_path, state)

    if chief and not resume:
        if flags_text is not None:
            rd.write_text(rundir.FLAGS_FILE, flags_text)
        config = {
            "method": cfg.method, "dataset": cfg.dataset, "data_dir": data.data_dir,
            "value_range": list(cfg.value_range), "input_shape": list(data.input_shape),
            "num_classes": int(data.num_classes), "seed": cfg.seed,
            "seed_source": "flag" if cfg.seed is not None else "os_entropy",
            "certification": method.certification_config(),
            "epochs": cfg.epochs, "batch_size": cfg.batch_size,
            "learning_rate": cfg.learning_rate, "optimizer": optimizer,
            "epsilon": cfg.epsilon, "delta": cfg.delta,
            "strategy": type(strategy).__name__,
            "num_replicas": int(strategy.num_replicas_in_sync),
            "num_train": int(num_train), "num_test": int(len(data.x_test)),
            "batch_schedule": method.batch_schedule(),
            "options": dict(cfg.options),
        }
        config.update(config_extra or {})
        rd.write_json(rundir.CONFIG_FILE, config)
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
    extra = {f"method_{k}": v for k, v in method.checkpoint_objects().items()}
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt, generator=generator,
                               epoch=epoch_var, step=step_var, run_key=run_key_var, **extra)
    manager = tf.train.CheckpointManager(ckpt, ckpt_dir, max_to_keep=2)
    if resume:
        status = ckpt.restore(tf.train.latest_checkpoint(checkpoint_dir(cfg.model_dir)))
        status.assert_existing_objects_matched()

    writer = tf.summary.create_file_writer(rd.file(rundir.TENSORBOARD_DIR)) if chief else None
    step_fn = _make_step_fn(strategy, method, model, opt, generator, cfg.batch_size)
    max_steps = method.max_steps()
    start_epoch = int(epoch_var.numpy())
    epoch_means: dict[str, float] = {}
    stopped = max_steps is not None and int(step_var.numpy()) >= max_steps
    interrupted = False
    epoch = start_epoch
    for epoch in range(start_epoch, cfg.epochs):
        if stopped:
            break
        batches = _epoch_batches(method, num_train, cfg.batch_size, run_key, epoch)
        dataset = _epoch_dataset(strategy, data.x_train, data.y_train, batches)
        n_steps = len(batches)
        if max_steps is not None:
            n_steps = min(n_steps, max_steps - int(step_var.numpy()))
        bar = None
        if verbose and chief:
            bar = keras.utils.Progbar(n_steps, unit_name="step",
                                      stateful_metrics=["loss", "accuracy"])
        if bar is not None:
            print_fn(f"epoch {epoch + 1}/{cfg.epochs}")
        sums: dict[str, float] = {}
        done = 0
        for x, y in dataset:
            if done >= n_steps:
                break
            metrics = {k: float(v) for k, v in step_fn(x, y).items()}
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
            for k, v in epoch_means.items():
                summary_scalar(writer, f"train/{k}", v, epoch + 1)
            summary_scalar(writer, "train/steps", float(step_var.numpy()), epoch + 1)
            writer.flush()
        last = epoch + 1 == cfg.epochs or stopped
        halt = stop_after_epochs is not None and epoch + 1 >= stop_after_epochs and not last
        if chief:
            ledger.save(rd.file(rundir.LEDGER_FILE))
        if last or halt or (epoch + 1) % checkpoint_every == 0:
            manager.save(checkpoint_number=epoch + 1)
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
    metrics = {
        "test_accuracy": test_accuracy,
        "train_loss": epoch_means.get("loss"),
        "train_accuracy": epoch_means.get("accuracy"),
        "epochs_completed": epochs_completed,
        "steps": int(step_var.numpy()),
        "stopped_early": bool(stopped and epochs_completed < cfg.epochs),
        "seconds": time.time() - start_time,
    }
    ledger_dict = ledger.to_dict()
    if chief:
        summary_scalar(writer, "test/accuracy", test_accuracy, epochs_completed)
        if ledger_dict.get("epsilon") is not None:
            summary_scalar(writer, "privacy/epsilon", ledger_dict["epsilon"], epochs_completed)
        writer.flush()
        model.save(rd.file(rundir.MODEL_FILE))
        rd.write_json(rundir.METRICS_FILE, metrics)
        ledger.save(rd.file(rundir.LEDGER_FILE))
    if verbose and chief:
        print_fn(f"test accuracy: {test_accuracy:.4f} ({len(data.x_test)} examples)")
        _print_ledger(ledger_dict, print_fn)
        print_fn(f"run directory: {rd.path}")
    return RunResult(rd.path, metrics, ledger_dict, False, model, epochs_completed,
                     int(step_var.numpy()))

