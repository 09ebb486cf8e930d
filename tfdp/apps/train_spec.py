"""A resolved tfdp-train invocation (`RunSpec`) and what it records and loads.

`tfdp.apps.train.resolve` checks the flags and returns a `RunSpec`; from it come the flag
values config.json records, flags.txt (re-runnable with --flagfile) and the data the run
trains and tests on.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from tfdp import data
from tfdp.data import sources
from tfdp.train import base

__all__ = ["RunSpec", "run_flags", "SEED_NOTE", "flags_text", "data_options", "load_data",
           "resolved_data_dir", "data_dir_source"]


@dataclasses.dataclass
class RunSpec:
    """A validated tfdp-train invocation."""

    config: base.TrainConfig
    method_cls: type
    optimizer: str
    strategy: str
    resume: bool
    num_train: int | None
    overwrite: bool
    cpu_replicas: int | None
    num_test: int | None
    checkpoint_every: int
    stop_after_epochs: int | None
    data_dir: str | None
    download: bool
    verbose: int
    num_classes: int | None = None
    noise_kernel: str = "portable"
    noise_kernel_fallback: str | None = None


def run_flags(spec: RunSpec) -> dict:
    """The resolved generic flag values of a run (stored in config.json under "flags").

    --seed is not among them: the seed regenerates the run's privacy noise, so it is kept
    only in the checkpoint (a resume checks a given --seed against it).
    """
    cfg = spec.config
    return {
        "method": cfg.method, "dataset": cfg.dataset, "data_dir": spec.data_dir,
        "epochs": cfg.epochs, "batch_size": cfg.batch_size,
        "learning_rate": cfg.learning_rate, "optimizer": spec.optimizer,
        "epsilon": cfg.epsilon, "delta": cfg.delta,
        "value_range": [float(b) for b in cfg.value_range],
        "strategy": spec.strategy, "num_train": spec.num_train, "num_test": spec.num_test,
        "checkpoint_every": spec.checkpoint_every, "cpu_replicas": spec.cpu_replicas,
        "num_classes": spec.num_classes, "noise_kernel": spec.noise_kernel,
    }


# flags.txt's second header line: --seed is left out by design (issue 40).
SEED_NOTE = ("# --seed is left out by design: a seed regenerates the run's privacy noise, so it "
             "is kept only in the checkpoint; a re-run draws fresh noise from OS entropy "
             "unless you add --seed=S yourself (same hyper-parameters, not the same numbers)")


def flags_text(spec: RunSpec) -> str:
    """flags.txt: `--name=value` lines that re-create the run with --flagfile.

    The run directory is not among them: a copied run directory must never point back at
    the original, so --model_dir is always given on the command line. Nor is --seed (its
    header says so, `SEED_NOTE`): the seed regenerates the run's privacy noise.
    """
    values = run_flags(spec)
    values["value_range"] = ",".join(repr(float(b)) for b in spec.config.value_range)
    lines = ["# re-run with --flagfile=flags.txt --model_dir=<new directory>; continue this "
             "run with --resume --model_dir=<this directory>",
             SEED_NOTE]
    lines += [f"--{k}={_flag_str(val)}" for k, val in values.items() if val is not None]
    lines += [f"--{k}={_flag_str(val)}" for k, val in sorted(spec.config.options.items())
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


def data_options(spec: RunSpec) -> dict:
    """Loader options that define the data set (stored in config.json for the evaluator)."""
    return {"num_classes": spec.num_classes} if spec.num_classes is not None else {}


def load_data(spec: RunSpec):
    """Loads the training and test splits named by the spec (after validation)."""
    # lazy: loads keras; importing tfdp.apps.train does not
    from tfdp.train import loop  # pylint: disable=import-outside-toplevel

    cfg = spec.config
    extra = {"download": spec.download} if cfg.dataset in ("mnist", "fashion_mnist",
                                                           "cifar10") else {}
    extra.update(data_options(spec))
    x_train, y_train = data.load(cfg.dataset, "train", data_dir=spec.data_dir,
                                 value_range=cfg.value_range, num_examples=spec.num_train,
                                 **extra)
    x_test, y_test = data.load(cfg.dataset, "test", data_dir=spec.data_dir,
                               value_range=cfg.value_range, num_examples=spec.num_test, **extra)
    ds_info = data.info(cfg.dataset, data_dir=spec.data_dir, **data_options(spec))
    return loop.Data(x_train, y_train, x_test, y_test, tuple(x_train.shape[1:]),
                     int(ds_info.num_classes), resolved_data_dir(cfg.dataset, spec.data_dir))


def resolved_data_dir(dataset: str, data_dir: str | None) -> str | None:
    """The data root a run read (recorded in config.json so tfdp-evaluate finds the data).

    --data_dir if given, else TFDP_DATA_DIR, else the Keras cache, as an absolute path; None
    for the data sets that need no files (sample, synthetic).
    """
    if dataset in ("sample", "synthetic"):
        return None
    return sources.roots(data_dir)[0]


def data_dir_source(dataset: str, data_dir: str | None) -> str | None:
    """Where the data root came from: 'flag', the environment variable's name, or 'default'."""
    if dataset in ("sample", "synthetic"):
        return None
    if data_dir is not None:
        return "flag"
    return "TFDP_DATA_DIR" if os.environ.get("TFDP_DATA_DIR") else "default"
