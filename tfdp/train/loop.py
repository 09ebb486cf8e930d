"""The shared training run: a `Run` drives a `Method` through its hooks.

`train(...)` is the public entry point; it builds a `Run` and calls it. A run validates,
takes the run directory's lock, then prepares its state (`tfdp.train.run_state`: the run
key of `tfdp.train.run_secret`, resume checks against the run's files and checkpoint, the
method's `setup` with ledger entries saved before any step, config.json, the checkpoint of
whatever the method's `build` returned), runs epochs of `batches` / `train_step`
(`tfdp.train.steps`), charging per-step privacy spends before each epoch, and finally writes
model.keras and metrics.json. Strategies and TF_CONFIG live in `tfdp.train.strategy`, the run
directory's rules in `tfdp.rundir`, and TensorBoard and printing in `tfdp.train.report`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from typing import Any, Callable, Mapping

import tensorflow as tf

from tfdp import checks, rundir, tf_options
from tfdp.train import integrity, report
from tfdp.train.base import (OPTIMIZERS, Method, derive_seed, lot_bucket,  # noqa: F401
                             make_optimizer)
from tfdp.train.strategy import (STRATEGIES, cpu_mirrored_strategy, is_chief,  # noqa: F401
                                 make_strategy, tf_config_is_chief)
from tfdp.rundir import check_run_dir, has_checkpoint  # noqa: F401
from tfdp import accounting
# Re-exported: the run's pieces were split out of this module (issue 42); their public names
# stay importable from here.
from tfdp.train.resume import data_fingerprint, resume_conflicts  # noqa: F401
from tfdp.train.run_secret import (SECRET_BITS, epoch_batches, os_entropy_key,  # noqa: F401
                                   public_split_indices)
from tfdp.train.run_secret import decode_secret as _decode_secret  # noqa: F401  (tests/leak_scan.py)
from tfdp.train.run_state import Data, RunState, SetupError
from tfdp.train.steps import epoch_dataset as _epoch_dataset
from tfdp.train.steps import evaluate_accuracy, flat_batches as _flat_batches
# Looked up here at each call: tests and tools/stobatch replace it to record the traced step.
from tfdp.train.steps import make_step_fn as _make_step_fn

tf_options.configure_tensorflow()  # bit-reproducible tf.function graphs (tfdp/tf_options.py)

__all__ = ["Data", "Run", "RunResult", "SetupError", "StorageError", "train", "evaluate_accuracy",
           "resume_conflicts", "data_fingerprint", "OPTIMIZERS", "STRATEGIES", "make_optimizer",
           "make_strategy", "cpu_mirrored_strategy", "tf_config_is_chief", "check_run_dir",
           "has_checkpoint", "derive_seed", "NONPRIVATE_STATS_KEY", "public_split_indices"]


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

_NONPRIVATE_NOTE = ("computed on the private training data WITHOUT privacy protection (not "
                    "privatized); for monitoring only, never release it with the model")
NONPRIVATE_STATS_KEY = "nonprivate_training_stats"


class Run(RunState):
    """One training run of a method: state, checkpoints, epochs and result files.

    Build it with the same arguments as `train` (after their validation) and call `run()`
    while holding the run directory's lock; `train` does both. `RunState` prepares the run
    up to its first epoch; this class trains the epochs and writes the results.
    """

    def run(self) -> RunResult:
        """Prepares the run state, trains the remaining epochs and writes the results."""
        self.prepare()
        return self._train_epochs()

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
            epoch_means = self._run_steps(step_fn, dataset, n_steps, reporter)
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
                self._checkpoint(epoch, segments, segment, epoch_means)
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

    def _run_steps(self, step_fn: Callable, dataset: Any, n_steps: int,
                   reporter: report.Reporter) -> dict[str, float]:
        """Runs the epoch's first `n_steps` batches; returns the mean of each metric."""
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
        return {k: v / max(done, 1) for k, v in sums.items()}

    def _checkpoint(self, epoch: int, segments: list, segment: dict, epoch_means: Mapping
                    ) -> None:
        """Saves the checkpoint of `epoch` with the ledger and configuration records."""
        self.ledger_state_var.assign(json.dumps(self.ledger.to_dict(), sort_keys=True))
        if self._config_record is not None:
            self.config_state_var.assign(integrity.config_record(self._config_record))
        self.manager.save(checkpoint_number=epoch + 1)
        self._save_progress(segments, segment, epoch_means)

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
    _check_train_args(method, data, checkpoint_every, stop_after_epochs)
    chief = is_chief(strategy)
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


def _check_train_args(method: Method, data: Data, checkpoint_every: int,
                      stop_after_epochs: int | None) -> None:
    """`train`'s checks before any work.

    Raises:
      ValueError: naming the argument, or whatever the method's `validate` rejects.
    """
    cfg = method.config
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
    method.validate()
    make_optimizer(cfg.optimizer, cfg.learning_rate)  # validates before any work


def _last_stats(history: Mapping[str, Any]) -> dict:
    """The last epoch's (non-private) training statistics of a segments.json.

    Written under NONPRIVATE_STATS_KEY with the "never release" note since issue 40; a run
    before it kept them as "last_stats".
    """
    marked = history.get(NONPRIVATE_STATS_KEY)
    if isinstance(marked, Mapping):
        return dict(marked.get("last_epoch") or {})
    return dict(history.get("last_stats") or {})

