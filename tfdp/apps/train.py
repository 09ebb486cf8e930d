"""tfdp-train: trains one method on one data set and writes its run directory."""

from __future__ import annotations

import datetime
import importlib
import importlib.util
import math
import os
import sys
from typing import Any, Mapping

if not any(a.startswith("--verbose=") and a[10:].strip() not in ("0", "1") for a in sys.argv):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # --verbose=2 shows TensorFlow's log

from absl import app, flags, logging  # noqa: E402  (after the TF log level is set)

from tfdp.apps import cli, option_flags, train_help  # noqa: E402
# The resolved invocation and what it records and loads; the names stay importable from here.
from tfdp.apps.train_spec import (SEED_NOTE, RunSpec, data_dir_source,  # noqa: E402,F401
                                  data_options, flags_text, load_data, resolved_data_dir,
                                  run_flags)
from tfdp.train import registry, resume  # noqa: E402
from tfdp import rundir
from tfdp import data
from tfdp.train import base

DEFAULTS = {"epochs": 1, "batch_size": 128, "learning_rate": 1e-3, "optimizer": "sgd",
            "epsilon": None, "delta": 0.0, "value_range": (-1.0, 1.0)}
# Flags that define a run besides the method's own; written to flags.txt.
RUN_FLAGS = ("method", "dataset", "data_dir", "model_dir", "epochs", "batch_size",
             "learning_rate", "optimizer", "seed", "epsilon", "delta", "value_range",
             "strategy", "num_train", "num_test", "checkpoint_every", "cpu_replicas",
             "num_classes", "noise_kernel")
# Flags that only steer how a run executes; a resume may change them freely. The training data
# may move (--data_dir); its content is compared with the run's by hash.
RUN_CONTROL_FLAGS = ("model_dir", "strategy", "cpu_replicas", "checkpoint_every",
                     "noise_kernel", "stop_after_epochs", "verbose", "download", "data_dir",
                     "num_test", "resume", "overwrite")

# The method flags are defined on first use of `FLAGS` (module __getattr__ below) or by
# `define_method_flags()`, because the method modules import TensorFlow: `--help` and
# `--list_methods` answer without it.
_FLAGS = flags.FLAGS
_BEFORE = set(_FLAGS)
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
class _OptionalFloatParser(flags.FloatParser):
    """A float flag whose empty value (`--epsilon=`) unsets it (e.g. over a flagfile)."""

    def parse(self, argument):  # pylint: disable=missing-function-docstring
        return None if argument == "" else super().parse(argument)


flags.DEFINE(_OptionalFloatParser(), "epsilon", None,
             "Total privacy budget (default: the method's; an empty value unsets it).")
flags.DEFINE_float("delta", None, "Delta of the run (default: the method's).")
flags.DEFINE_list("value_range", None, "Pixel range low,high (default: the method's, or -1,1).")
flags.DEFINE_string("strategy", "default",
                    "tf.distribute strategy: default, mirrored or multi_worker (TF_CONFIG).")
flags.DEFINE_integer("num_train", None, "Use only the first N training examples.")
flags.DEFINE_integer("num_test", None, "Use only the first N test examples.")
flags.DEFINE_integer("num_classes", None,
                     "tiny_imagenet only: keep the first K classes of wnids.txt (labels "
                     "0..K-1; StoBatch's setting is 30); default all 200.")
flags.DEFINE_integer("checkpoint_every", 1, "Epochs between checkpoints.")
flags.DEFINE_integer("stop_after_epochs", None,
                     "Exit after checkpointing this many epochs (a deterministic interruption; "
                     "continue with --resume).")
if "verbose" in flags.FLAGS:
    # Another app imported first in this process (e.g. tests, a notebook) defined its boolean
    # --verbose (`cli.define_verbose`, which defers to an existing flag): tfdp-train's is a
    # level, so it takes the name, as when tfdp-train is imported first.
    delattr(flags.FLAGS, "verbose")
flags.DEFINE_integer("verbose", 1,
                     "0: quiet; 1: progress (a bar on a terminal, one line per epoch "
                     "otherwise) and summary; 2: also TensorFlow's start-up log and library "
                     "warnings.")
flags.DEFINE_bool("list_methods", False, "List the training methods and exit.")
flags.DEFINE_bool("overwrite", False,
                  "Start afresh in a --model_dir that holds files but no checkpoint and no "
                  "finished model (a run stopped before its first checkpoint). Never deletes a "
                  "run that can be resumed.")
flags.DEFINE_enum("noise_kernel", "auto", ["auto", "portable", "fused"],
                  "How the noise layers draw fresh noise: 'fused' (one compiled CPU op per "
                  "layer, built with g++ on first use; same Philox words, draws equal to the "
                  "portable ones up to a few float32 ulps), 'portable' (TensorFlow ops, any "
                  "device), or 'auto' (default: fused wherever it builds, else portable). The "
                  "kernel used is recorded in config.json (flags.noise_kernel, and "
                  "noise_kernel_fallback when auto fell back) and flags.txt; a resume may "
                  "change it.")
flags.DEFINE_float("smoothing_sigma", None,
                   "Randomized smoothing (Cohen et al. 2019), --method=dpsgd or nonprivate: "
                   "add N(0, sigma^2 I) to each example's input in training (before per-example "
                   "clipping; the privacy analysis is unchanged) and certify l2 robustness with "
                   "the gaussian_smoothing certificate. Unset: no input noise.")
flags.DEFINE_bool("allow_unsound_certificates", False,
                  "Allow certification settings whose sensitivity is not a proven bound (HGM's "
                  "per_map and code_spectral sensitivity modes, StoBatch's code-release radius "
                  "scaling), to reproduce the papers; their certificates are reported as "
                  "'claimed' everywhere.")
flags.DEFINE_integer("cpu_replicas", None,
                     "Split the CPU into N logical devices before any strategy is built, so "
                     "--strategy=mirrored runs N replicas on a CPU-only machine.")




def common_flag_names() -> tuple[str, ...]:
    """tfdp-train's own flags (the "common flags" of its help), in definition order: every
    flag defined since this module started, except the methods' option flags."""
    method_modules = {registry.method_module(n) for n in registry.METHODS}
    names = dict.fromkeys(_FLAGS[n].name for n in _FLAGS if n not in _BEFORE)
    foreign = ("absl", "tensorflow", "keras", "tf_keras")  # flags their imports define
    return tuple(n for n in names
                 if (_FLAGS.find_module_defining_flag(n) or "") not in method_modules
                 and not (_FLAGS.find_module_defining_flag(n) or "").startswith(foreign))


def define_method_flags(flag_values: flags.FlagValues = _FLAGS) -> flags.FlagValues:
    """Defines every registered method's flags (from its module's OPTIONS) before parsing.

    A module that is absent from the package is reported when that method is chosen (the
    registry raises ImportError then); a module that exists but fails to import fails here.

    Returns:
      flag_values.
    """
    for module in sorted({registry.method_module(n) for n in registry.METHODS}):
        if importlib.util.find_spec(module) is None:
            continue
        option_flags.define_module_flags(module, flag_values)
    return flag_values


def __getattr__(name: str):
    """`tfdp.apps.train.FLAGS`: absl's FLAGS with every method flag defined."""
    if name == "FLAGS":
        return define_method_flags()
    if name == "COMMON_FLAGS":  # computed when asked: flags defined later are included
        return common_flag_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def stored_run_flags(model_dir: str) -> dict:
    """The flag values a run was started with, from its config.json ("flags" and "options").

    Raises:
      ValueError: naming the file when it is missing or corrupt.
    """
    config = rundir.read_json(os.path.join(model_dir, rundir.CONFIG_FILE))
    if not isinstance(config, dict):
        raise ValueError(f"{os.path.join(model_dir, rundir.CONFIG_FILE)}: not a run configuration")
    stored = dict(config.get("flags") or {})
    if not stored:  # runs written before config.json held the flags
        stored = {k: config.get(k) for k in ("method", "dataset", "epochs", "batch_size",
                                             "learning_rate", "optimizer", "seed", "epsilon",
                                             "delta", "value_range")}
    stored["options"] = dict(config.get("options") or {})
    return stored


def merge_resume(values: Mapping[str, Any], options: Mapping[str, Any],
                 present: set[str], method_cls) -> tuple[dict, dict]:
    """Values of a --resume: the run's own flags from config.json, checked against the given.

    Args:
      values, options: generic and method flag values.
      present: names of the flags given explicitly (command line or flagfile).
      method_cls: the run's method class.

    Returns:
      (values, options) with every flag not given taken from the run.

    Raises:
      ValueError: naming each given flag that changes the run (besides the method's
        `resume_mutable_flags` and the run-control flags) with both values.
    """
    stored = stored_run_flags(values["model_dir"])
    mutable = set(getattr(method_cls, "resume_mutable_flags", ("epochs",))) | set(
        RUN_CONTROL_FLAGS)
    stored_opts = stored.pop("options")
    conflicts = (resume.flag_conflicts(stored, values, present, mutable)
                 + resume.flag_conflicts(stored_opts, options, present, mutable))
    if conflicts:
        raise resume.conflict_error(values["model_dir"], conflicts)
    merged = dict(values, **{name: old for name, old in stored.items()
                             if name not in present and name != "model_dir"
                             and name in RUN_FLAGS})
    merged_opts = dict(options, **{name: old for name, old in stored_opts.items()
                                   if name not in present})
    return merged, merged_opts


def resolve(values: Mapping[str, Any], options: Mapping[str, Any] | None = None,
            present: set[str] | None = None) -> RunSpec:
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
    # lazy: loads tensorflow; importing tfdp.apps.train does not
    from tfdp import kernels  # pylint: disable=import-outside-toplevel

    v = dict(values)
    options = dict(options or {})
    if present is None:  # library use: every value given is explicit
        present = {k for k, val in v.items() if val is not None} | set(options)
    if v.get("resume"):
        v, options = _resume_values(v, options, set(present))
    method, dataset, method_cls = _method_and_dataset(v)
    _check_common_options(method, method_cls, options)
    defaults = dict(DEFAULTS)
    defaults.update(getattr(method_cls, "default_flags", {}) or {})
    epochs, batch_size, learning_rate, optimizer, epsilon, delta, value_range = (
        _hyper_parameters(v, defaults))
    strategy = _strategy(v)
    seed, checkpoint_every, cpu_replicas, num_classes = _run_controls(v, strategy, dataset)
    resume = bool(v.get("resume"))
    overwrite = bool(v.get("overwrite"))
    # builds the fused kernel now: a missing compiler fails here, before any work
    noise_kernel, kernel_fallback = kernels.resolve_noise_kernel(v.get("noise_kernel") or "auto")
    num_train = v.get("num_train")
    if num_train is not None and num_train < batch_size:
        raise ValueError(f"--num_train: {num_train} examples are fewer than one batch "
                         f"(--batch_size={batch_size})")
    model_dir = _run_directory(v.get("model_dir"), method, dataset, strategy, resume=resume,
                               overwrite=overwrite, epochs=epochs)

    config = base.TrainConfig(
        method=method, dataset=dataset, model_dir=model_dir, epochs=epochs,
        batch_size=batch_size, learning_rate=float(learning_rate), seed=seed,
        epsilon=None if epsilon is None else float(epsilon), delta=float(delta),
        value_range=value_range, options=dict(options or {}), optimizer=optimizer)
    method_cls(config).validate()
    return RunSpec(config=config, method_cls=method_cls, optimizer=optimizer, strategy=strategy,
                   resume=resume, num_train=num_train, num_test=v.get("num_test"),
                   overwrite=overwrite, cpu_replicas=cpu_replicas,
                   checkpoint_every=checkpoint_every,
                   stop_after_epochs=v.get("stop_after_epochs"), data_dir=v.get("data_dir"),
                   download=bool(v.get("download")), verbose=int(v.get("verbose", 1)),
                   num_classes=num_classes, noise_kernel=noise_kernel,
                   noise_kernel_fallback=kernel_fallback)


def _method_and_dataset(v: Mapping[str, Any]) -> tuple[str, str, Any]:
    """(method name, data set name, method class) of the flags, defaults filled in.

    Raises:
      ValueError: naming --method or --dataset, for an unknown one.
      ImportError: the chosen method's module is missing.
    """
    method = v.get("method") or "adlm"
    if method not in registry.METHODS:
        raise ValueError(f"--method: unknown method {method!r}; choose one of "
                         f"{sorted(registry.METHODS)}")
    dataset = v.get("dataset") or "sample"
    if dataset not in data.DATASETS:
        raise ValueError(f"--dataset: unknown data set {dataset!r}; choose one of "
                         f"{list(data.DATASETS)}")
    return method, dataset, registry.get_method_class(method)


def _check_common_options(method: str, method_cls: Any, options: Mapping[str, Any]) -> None:
    """The common options (smoothing sigma, unsound certificates), read and checked once;
    then whether this method takes input smoothing.

    Raises:
      ValueError: naming the option, for a bad or unsupported smoothing sigma or an unsound
        certificate option without --allow_unsound_certificates.
    """
    # lazy: loads scipy; importing tfdp.apps.train does not
    from tfdp.certify import smoothing  # pylint: disable=import-outside-toplevel
    common = base.CommonOptions.from_options(options)
    smoothing.check_smoothing_sigma(
        method, common.smoothing_sigma, method_cls.takes_input_smoothing(),
        lambda: sorted(m for m in registry.METHODS
                       if registry.get_method_class(m).takes_input_smoothing()))
    # lazy: loads scipy; importing tfdp.apps.train does not
    from tfdp.certify import registry as cert_registry  # pylint: disable=import-outside-toplevel
    cert_registry.check_unsound_allowed(options, common.allow_unsound_certificates)


def _strategy(v: Mapping[str, Any]) -> str:
    """The --strategy name (default "default").

    Raises:
      ValueError: naming --strategy, for an unknown one.
    """
    # lazy: loads tensorflow; importing tfdp.apps.train does not
    from tfdp.train import strategy as strategies  # pylint: disable=import-outside-toplevel
    strategy = v.get("strategy") or "default"
    if strategy not in strategies.STRATEGIES:
        raise ValueError(f"--strategy: unknown strategy {strategy!r}; choose one of "
                         f"{list(strategies.STRATEGIES)}")
    return strategy


def _run_directory(model_dir: str | None, method: str, dataset: str, strategy: str, *,
                   resume: bool, overwrite: bool, epochs: int) -> str:
    """The run directory (default under runs/), checked by the chief (or on --resume).

    Raises:
      ValueError: --resume without --model_dir, an existing non-empty run directory without
        --resume, or --resume without a checkpoint (`rundir.check_run_dir`).
    """
    # lazy: loads tensorflow; importing tfdp.apps.train does not
    from tfdp.train import strategy as strategies  # pylint: disable=import-outside-toplevel
    if resume and not model_dir:
        raise ValueError("--resume: needs --model_dir of the run to continue")
    model_dir = model_dir or default_model_dir(method, dataset)
    chief = strategy != "multi_worker" or strategies.tf_config_is_chief()
    if chief or resume:
        rundir.check_run_dir(model_dir, resume=resume, overwrite=overwrite, epochs=epochs,
                             flag_prefix="--")
    return model_dir


def _resume_values(v: dict, options: dict, present: set[str]) -> tuple[dict, dict]:
    """The values of a --resume: the run's own flags, checked against those given.

    Raises:
      ValueError: naming the flag, without --model_dir or a checkpoint, for an unknown
        method, or a flag that changes the run (`merge_resume`).
    """
    if not v.get("model_dir"):
        raise ValueError("--resume: needs --model_dir of the run to continue")
    rundir.check_run_dir(v["model_dir"], resume=True, flag_prefix="--")
    if "method" not in present:
        v["method"] = stored_run_flags(v["model_dir"]).get("method")
    if v.get("method") not in registry.METHODS:
        raise ValueError(f"--method: unknown method {v.get('method')!r}")
    return merge_resume(v, options, set(present), registry.get_method_class(v["method"]))


def _hyper_parameters(v: Mapping[str, Any], defaults: Mapping[str, Any]) -> tuple:
    """(epochs, batch_size, learning_rate, optimizer, epsilon, delta, value_range), each
    the flag's value or the method's default, checked.

    Raises:
      ValueError: naming the flag.
    """
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
    if optimizer not in base.OPTIMIZERS:
        raise ValueError(f"--optimizer: unknown optimizer {optimizer!r}; choose one of "
                         f"{list(base.OPTIMIZERS)}")
    if epsilon is not None and (not _is_number(epsilon) or epsilon <= 0):
        raise ValueError(f"--epsilon: expected a finite number > 0, got {epsilon!r}")
    if not _is_number(delta) or not 0.0 <= delta < 1.0:
        raise ValueError(f"--delta: expected a number in [0, 1), got {delta!r}")
    value_range = _parse_value_range(pick("value_range"))
    return epochs, batch_size, learning_rate, optimizer, epsilon, delta, value_range


def _run_controls(v: Mapping[str, Any], strategy: str, dataset: str
                  ) -> tuple[int | None, int, int | None, int | None]:
    """(seed, checkpoint_every, cpu_replicas, num_classes), checked; num_train, num_test
    and stop_after_epochs checked too.

    Raises:
      ValueError: naming the flag.
    """
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
    cpu_replicas = v.get("cpu_replicas")
    if cpu_replicas is not None and (not isinstance(cpu_replicas, int) or cpu_replicas < 1):
        raise ValueError(f"--cpu_replicas: expected an integer >= 1, got {cpu_replicas!r}")
    num_classes = v.get("num_classes")
    if num_classes is not None:
        if not isinstance(num_classes, int) or not 1 <= num_classes <= 200:
            raise ValueError(f"--num_classes: expected an integer in [1, 200], got "
                             f"{num_classes!r}")
        if dataset != "tiny_imagenet":
            raise ValueError(f"--num_classes: only --dataset=tiny_imagenet takes a class "
                             f"subset, got --dataset={dataset}")
    return seed, checkpoint_every, cpu_replicas, num_classes


def execute(spec: RunSpec, run_data=None):
    """Runs a validated spec: loads data, builds the strategy, trains; returns a RunResult.

    `run_data` (a `tfdp.train.loop.Data`) replaces the loaded data; `tfdp-audit training`
    passes the training set with its canaries.
    """
    # lazy: loads keras; importing tfdp.apps.train does not
    from tfdp.train import loop  # pylint: disable=import-outside-toplevel
    # lazy: loads tensorflow; importing tfdp.apps.train does not
    from tfdp.train import strategy as strategies  # pylint: disable=import-outside-toplevel

    # lazy: loads tensorflow; importing tfdp.apps.train does not
    from tfdp import kernels  # pylint: disable=import-outside-toplevel

    with kernels.noise_kernel_flag(spec.noise_kernel):
        method = spec.method_cls(spec.config)
        strategy = strategies.make_strategy(spec.strategy)
        run_data = load_data(spec) if run_data is None else run_data
        return loop.train(method, run_data, strategy=strategy, optimizer=spec.optimizer,
                          resume=spec.resume, checkpoint_every=spec.checkpoint_every,
                          stop_after_epochs=spec.stop_after_epochs,
                          flags_text=flags_text(spec),
                          config_extra=dict({"flags": run_flags(spec),
                                             "data_dir_source": data_dir_source(
                                                 spec.config.dataset, spec.data_dir),
                                             "cpu_replicas": spec.cpu_replicas,
                                             "data_options": data_options(spec)},
                                            **({"noise_kernel_fallback":
                                                spec.noise_kernel_fallback}
                                               if spec.noise_kernel_fallback else {})),
                          verbose=spec.verbose, overwrite=spec.overwrite)


def values_from_flags(flag_values) -> tuple[dict, dict, set]:
    """Generic and method flag values, and the names given explicitly, from parsed FlagValues.

    On --resume without --method, the method (whose flags to read) comes from the run's
    config.json.
    """
    values = {name: flag_values[name].value for name in RUN_FLAGS + (
        "resume", "stop_after_epochs", "download", "verbose", "overwrite")}
    method = flag_values["method"].value
    if (values["resume"] and values["model_dir"] and not flag_values["method"].present
            and os.path.isdir(values["model_dir"])):
        try:
            method = stored_run_flags(values["model_dir"]).get("method") or method
        except ValueError:
            pass  # reported by resolve, naming the file
        values["method"] = method
    options = {}
    if method in registry.METHODS:
        module = registry.method_module(method)
        if importlib.util.find_spec(module) is not None:
            options = option_flags.option_values(
                option_flags.define_module_flags(module, flag_values), flag_values)
    if flag_values["allow_unsound_certificates"].present:
        options["allow_unsound_certificates"] = flag_values["allow_unsound_certificates"].value
    if flag_values["smoothing_sigma"].present:
        # Stored with the method's options (config.json "options"); a resume reads it there.
        options["smoothing_sigma"] = flag_values["smoothing_sigma"].value
    present = {name for name in list(values) + list(options) if flag_values[name].present}
    return values, options, present


def _split_cpu(replicas: int | None) -> None:
    """--cpu_replicas: N logical CPU devices, configured before TensorFlow initialises them."""
    if replicas is None:
        return
    if not isinstance(replicas, int) or replicas < 1:
        raise ValueError(f"--cpu_replicas: expected an integer >= 1, got {replicas!r}")
    # lazy: loads tensorflow; importing tfdp.apps.train does not
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * replicas)
    except RuntimeError:
        raise ValueError("--cpu_replicas: TensorFlow's devices were already initialised in this "
                         "process; the split must happen before any strategy or tensor is "
                         "created") from None


def main(argv) -> None:
    """absl main: validate every flag, then train."""
    FLAGS = _FLAGS  # pylint: disable=invalid-name
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if FLAGS.list_methods:
        cli.print_and_exit(train_help.list_methods_lines())
    # Library chatter (pfor fallbacks, accountant order warnings) would bury the progress.
    if FLAGS.verbose < 2:
        logging.set_verbosity(logging.ERROR)
    tf = cli.import_tensorflow(verbose=FLAGS.verbose >= 2)
    if FLAGS.verbose < 2:
        tf.get_logger().setLevel("ERROR")
    # lazy: loads keras; importing tfdp.apps.train does not
    from tfdp.train import loop  # pylint: disable=import-outside-toplevel
    try:
        replicas = FLAGS.cpu_replicas
        if (replicas is None and FLAGS.resume and FLAGS.model_dir
                and os.path.isdir(FLAGS.model_dir)):
            try:  # a resume keeps the run's device split unless told otherwise
                replicas = stored_run_flags(FLAGS.model_dir).get("cpu_replicas")
            except ValueError:
                replicas = None  # reported by resolve, naming the file
        _split_cpu(replicas)
        spec = resolve(*values_from_flags(FLAGS))
    except (ValueError, ImportError) as e:
        sys.exit(f"tfdp-train: error: {e}")
    try:
        execute(spec)
    except KeyboardInterrupt:
        model_dir = spec.config.model_dir
        if rundir.has_checkpoint(model_dir):
            hint = f"resume with --resume --model_dir={model_dir}"
        else:
            hint = (f"no checkpoint was written yet; start again with --overwrite "
                    f"--model_dir={model_dir}")
        print(f"tfdp-train: interrupted; {hint}", file=sys.stderr)
        sys.exit(130)
    except (data.DataNotFoundError, data.DataCorruptError, loop.SetupError, ValueError) as e:
        # Bad input, a locked or conflicting run directory, corrupt run state: a message,
        # not a traceback (checked before the first training step).
        sys.exit(f"tfdp-train: error: {e}")


def _help_lines(kind: str) -> list[str]:
    method = cli.argv_value(sys.argv, "method")
    if method is not None and method not in registry.METHODS:
        sys.exit(f"tfdp-train: error: --method: unknown method {method!r}; choose one of "
                 f"{list(registry.METHODS)}")
    return train_help.help_lines([_FLAGS[n] for n in common_flag_names()], method, kind,
                                 (__doc__ or "").splitlines()[0])


def run() -> None:
    """Console entry point (tfdp-train): help and --list_methods first, then train."""
    cli.handle_help(sys.argv, _help_lines)
    if "--list_methods" in sys.argv[1:] or "--list_methods=true" in sys.argv[1:]:
        cli.print_and_exit(train_help.list_methods_lines())
    cli.quiet_start(sys.argv, level=2)
    define_method_flags()
    app.run(main)


if __name__ == "__main__":
    run()
