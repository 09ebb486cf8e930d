"""tfdp-train: trains one method on one data set and writes its run directory."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import importlib.util
import math
import os
import sys
from typing import Any, Mapping

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags, logging  # noqa: E402  (after the TF log level is set)

from tfdp.train import registry  # noqa: E402

DEFAULTS = {"epochs": 1, "batch_size": 128, "learning_rate": 1e-3, "optimizer": "sgd",
            "epsilon": None, "delta": 0.0, "value_range": (-1.0, 1.0)}
# Flags that define a run besides the method's own; written to flags.txt.
RUN_FLAGS = ("method", "dataset", "data_dir", "model_dir", "epochs", "batch_size",
             "learning_rate", "optimizer", "seed", "epsilon", "delta", "value_range",
             "strategy", "num_train", "num_test", "checkpoint_every")

FLAGS = flags.FLAGS
flags.DEFINE_string("method", "adlm", f"Training method: one of {sorted(registry.METHODS)}.")
flags.DEFINE_string("dataset", "sample",
                    "Data set: mnist, fashion_mnist, cifar10, tiny_imagenet, synthetic, or sample "
                    "(the MNIST subset embedded in the package).")
flags.DEFINE_string("data_dir", None, "Root folder holding <dataset>/ (default: TFDP_DATA_DIR, "
                    "then the Keras cache).")
flags.DEFINE_bool("download", False, "Let the data loader download a missing data set.")
flags.DEFINE_string("model_dir", None,
                    "Run directory (default runs/<method>-<dataset>-<UTC timestamp>).")
flags.DEFINE_bool("resume", False, "Continue the run in --model_dir from its last checkpoint.")
flags.DEFINE_integer("epochs", None, "Training epochs (default: the method's).")
flags.DEFINE_integer("batch_size", None, "Global batch size (default: the method's).")
flags.DEFINE_float("learning_rate", None, "Learning rate (default: the method's).")
flags.DEFINE_string("optimizer", None, "sgd or adam (default: the method's).")
flags.DEFINE_integer("seed", None, "Seed of every random stream of the run; unset = OS entropy.")
flags.DEFINE_float("epsilon", None, "Total privacy budget (default: the method's).")
flags.DEFINE_float("delta", None, "Delta of the run (default: the method's).")
flags.DEFINE_list("value_range", None, "Pixel range low,high (default: the method's, or -1,1).")
flags.DEFINE_string("strategy", "default",
                    "tf.distribute strategy: default, mirrored or multi_worker (TF_CONFIG).")
flags.DEFINE_integer("num_train", None, "Use only the first N training examples.")
flags.DEFINE_integer("num_test", None, "Use only the first N test examples.")
flags.DEFINE_integer("checkpoint_every", 1, "Epochs between checkpoints.")
flags.DEFINE_integer("stop_after_epochs", None,
                     "Exit after checkpointing this many epochs (a deterministic interruption; "
                     "continue with --resume).")
flags.DEFINE_integer("verbose", 1, "0: quiet; 1: progress bar and summary.")



def _import_method_modules() -> None:
    """Imports every registered method's module so that its flags exist before parsing.

    A module that is absent from the package is reported when that method is chosen (the
    registry raises ImportError then); a module that exists but fails to import fails here.
    """
    for module in sorted({registry.method_module(n) for n in registry.METHODS}):
        if importlib.util.find_spec(module) is None:
            continue
        importlib.import_module(module)


_import_method_modules()


@dataclasses.dataclass
class RunSpec:
    """A validated tfdp-train invocation."""

    config: Any  # tfdp.train.base.TrainConfig
    method_cls: type
    optimizer: str
    strategy: str
    resume: bool
    num_train: int | None
    num_test: int | None
    checkpoint_every: int
    stop_after_epochs: int | None
    data_dir: str | None
    download: bool
    verbose: int


def _flag_module_values(module: str, flag_values) -> dict:
    return {f.name: f.value for f in flag_values.get_flags_for_module(module)}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _parse_value_range(value: Any) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"--value_range: expected low,high, got {value!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"--value_range: expected finite low < high, got {value!r}")
    return low, high


def default_model_dir(method: str, dataset: str) -> str:
    """runs/<method>-<dataset>-<UTC timestamp> under the working directory."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return os.path.join("runs", f"{method}-{dataset}-{stamp}")


def resolve(values: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> RunSpec:
    """Validates flag values and resolves method defaults; raises before any work.

    Args:
      values: generic flag values by name (missing or None = default).
      options: the method's own flag values (e.g. dpsgd_l2_clip), by flag name.

    Returns:
      A RunSpec.

    Raises:
      ValueError: naming the flag, for an unknown method, data set, strategy or optimizer;
        epsilon <= 0 or not finite; delta outside [0, 1); batch size, epochs, num_train,
        num_test or checkpoint_every < 1; an existing non-empty run directory without
        --resume; --resume without a checkpoint; or whatever Method.validate rejects.
      ImportError: the chosen method's module is missing.
    """
    from tfdp import data  # pylint: disable=import-outside-toplevel
    from tfdp.train import base, loop  # pylint: disable=import-outside-toplevel

    v = dict(values)
    method = v.get("method") or "adlm"
    if method not in registry.METHODS:
        raise ValueError(f"--method: unknown method {method!r}; choose one of "
                         f"{sorted(registry.METHODS)}")
    dataset = v.get("dataset") or "sample"
    if dataset not in data.DATASETS:
        raise ValueError(f"--dataset: unknown data set {dataset!r}; choose one of "
                         f"{list(data.DATASETS)}")
    method_cls = registry.get_method_class(method)
    defaults = dict(DEFAULTS)
    defaults.update(getattr(method_cls, "default_flags", {}) or {})

    def pick(name):
        return v[name] if v.get(name) is not None else defaults.get(name)

    epochs, batch_size = pick("epochs"), pick("batch_size")
    learning_rate, optimizer = pick("learning_rate"), pick("optimizer")
    epsilon, delta = pick("epsilon"), pick("delta")
    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"--{name}: expected an integer >= 1, got {value!r}")
    if not _is_number(learning_rate) or learning_rate <= 0:
        raise ValueError(f"--learning_rate: expected a positive number, got {learning_rate!r}")
    if optimizer not in loop.OPTIMIZERS:
        raise ValueError(f"--optimizer: unknown optimizer {optimizer!r}; choose one of "
                         f"{list(loop.OPTIMIZERS)}")
    if epsilon is not None and (not _is_number(epsilon) or epsilon <= 0):
        raise ValueError(f"--epsilon: expected a finite number > 0, got {epsilon!r}")
    if not _is_number(delta) or not 0.0 <= delta < 1.0:
        raise ValueError(f"--delta: expected a number in [0, 1), got {delta!r}")
    value_range = _parse_value_range(pick("value_range"))
    strategy = v.get("strategy") or "default"
    if strategy not in loop.STRATEGIES:
        raise ValueError(f"--strategy: unknown strategy {strategy!r}; choose one of "
                         f"{list(loop.STRATEGIES)}")
    seed = v.get("seed")
    if seed is not None and (not isinstance(seed, int) or seed < 0):
        raise ValueError(f"--seed: expected a non-negative integer, got {seed!r}")
    if strategy == "multi_worker" and seed is None:
        raise ValueError("--seed: multi_worker training needs an explicit --seed so that every "
                         "worker draws the same batches and noise")
    for name in ("num_train", "num_test", "stop_after_epochs"):
        value = v.get(name)
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"--{name}: expected an integer >= 1, got {value!r}")
    checkpoint_every = v.get("checkpoint_every")
    checkpoint_every = 1 if checkpoint_every is None else checkpoint_every
    if not isinstance(checkpoint_every, int) or checkpoint_every < 1:
        raise ValueError(f"--checkpoint_every: expected an integer >= 1, got "
                         f"{checkpoint_every!r}")
    resume = bool(v.get("resume"))
    model_dir = v.get("model_dir")
    if resume and not model_dir:
        raise ValueError("--resume: needs --model_dir of the run to continue")
    model_dir = model_dir or default_model_dir(method, dataset)
    if resume and not os.path.isdir(model_dir):
        raise ValueError(f"--resume: run directory {model_dir} does not exist")
    if resume and not loop.has_checkpoint(model_dir):
        raise ValueError(f"--resume: run directory {model_dir} holds no checkpoint")
    chief = strategy != "multi_worker" or loop.tf_config_is_chief()
    if not resume and chief and loop.run_dir_has_files(model_dir):
        raise ValueError(f"--model_dir: {model_dir} already exists and is not empty; pass "
                         "--resume to continue that run or choose another directory")

    config = base.TrainConfig(
        method=method, dataset=dataset, model_dir=model_dir, epochs=epochs,
        batch_size=batch_size, learning_rate=float(learning_rate), seed=seed,
        epsilon=None if epsilon is None else float(epsilon), delta=float(delta),
        value_range=value_range, options=dict(options or {}))
    method_cls(config).validate()
    return RunSpec(config=config, method_cls=method_cls, optimizer=optimizer, strategy=strategy,
                   resume=resume, num_train=v.get("num_train"), num_test=v.get("num_test"),
                   checkpoint_every=checkpoint_every,
                   stop_after_epochs=v.get("stop_after_epochs"), data_dir=v.get("data_dir"),
                   download=bool(v.get("download")), verbose=int(v.get("verbose", 1)))


def flags_text(spec: RunSpec) -> str:
    """flags.txt: `--name=value` lines that re-create the run with --flagfile."""
    cfg = spec.config
    values = {
        "method": cfg.method, "dataset": cfg.dataset, "data_dir": spec.data_dir,
        "model_dir": cfg.model_dir, "epochs": cfg.epochs, "batch_size": cfg.batch_size,
        "learning_rate": cfg.learning_rate, "optimizer": spec.optimizer, "seed": cfg.seed,
        "epsilon": cfg.epsilon, "delta": cfg.delta,
        "value_range": ",".join(repr(float(b)) for b in cfg.value_range),
        "strategy": spec.strategy, "num_train": spec.num_train, "num_test": spec.num_test,
        "checkpoint_every": spec.checkpoint_every,
    }
    lines = [f"--{k}={_flag_str(val)}" for k, val in values.items() if val is not None]
    lines += [f"--{k}={_flag_str(val)}" for k, val in sorted(cfg.options.items())
              if val is not None]
    return "\n".join(lines) + "\n"


def _flag_str(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return ",".join(_flag_str(v) for v in value)
    return str(value)


def load_data(spec: RunSpec):
    """Loads the training and test splits named by the spec (after validation)."""
    from tfdp import data  # pylint: disable=import-outside-toplevel
    from tfdp.train import loop  # pylint: disable=import-outside-toplevel

    cfg = spec.config
    extra = {"download": spec.download} if cfg.dataset in ("mnist", "fashion_mnist",
                                                           "cifar10") else {}
    x_train, y_train = data.load(cfg.dataset, "train", data_dir=spec.data_dir,
                                 value_range=cfg.value_range, num_examples=spec.num_train,
                                 **extra)
    x_test, y_test = data.load(cfg.dataset, "test", data_dir=spec.data_dir,
                               value_range=cfg.value_range, num_examples=spec.num_test, **extra)
    ds_info = data.info(cfg.dataset, data_dir=spec.data_dir)
    return loop.Data(x_train, y_train, x_test, y_test, tuple(x_train.shape[1:]),
                     int(ds_info.num_classes), spec.data_dir)


def execute(spec: RunSpec):
    """Runs a validated spec: loads data, builds the strategy, trains; returns a RunResult."""
    from tfdp.train import loop  # pylint: disable=import-outside-toplevel

    method = spec.method_cls(spec.config)
    strategy = loop.make_strategy(spec.strategy)
    run_data = load_data(spec)
    return loop.train(method, run_data, strategy=strategy, optimizer=spec.optimizer,
                      resume=spec.resume, checkpoint_every=spec.checkpoint_every,
                      stop_after_epochs=spec.stop_after_epochs, flags_text=flags_text(spec),
                      verbose=spec.verbose)


def values_from_flags(flag_values) -> tuple[dict, dict]:
    """Generic flag values and the chosen method's own flag values, from parsed FlagValues."""
    values = {name: flag_values[name].value for name in RUN_FLAGS + (
        "resume", "stop_after_epochs", "download", "verbose")}
    method = flag_values["method"].value
    options = {}
    if method in registry.METHODS:
        module = registry.method_module(method)
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module)
            options = _flag_module_values(module, flag_values)
    return values, options


def main(argv) -> None:
    """absl main: validate every flag, then train."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    # Library chatter (pfor fallbacks, accountant order warnings) would bury the progress bar.
    logging.set_verbosity(logging.ERROR)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    tf.get_logger().setLevel("ERROR")
    from tfdp import data  # pylint: disable=import-outside-toplevel
    from tfdp.train import loop  # pylint: disable=import-outside-toplevel
    try:
        spec = resolve(*values_from_flags(FLAGS))
    except (ValueError, ImportError) as e:
        sys.exit(f"tfdp-train: error: {e}")
    try:
        execute(spec)
    except (data.DataNotFoundError, data.DataCorruptError, loop.SetupError) as e:
        # Raised before the first training step; nothing but an empty run directory exists.
        sys.exit(f"tfdp-train: error: {e}")


def run() -> None:
    """Console entry point (tfdp-train)."""
    app.run(main)


if __name__ == "__main__":
    run()
