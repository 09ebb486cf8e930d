"""What a run shows: TensorBoard scalars, the progress bar and the printed summary.

The ledger texts (`ledger_lines`, `privacy_summary`) import no TensorFlow, so light apps
(e.g. `tfdp.apps.pipeline`) print ledgers the same way.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any, Callable, Mapping, Optional


def round_up(value: Any, digits: int = 4) -> str:
    """A privacy parameter for people: `digits` significant digits, rounded UP.

    Console output only (files keep full precision). Rounding up never shows a budget smaller
    than the one spent (1.999998890499241 -> '2', 0.12341 -> '0.1235').
    """
    if value is None:
        return "none"
    if isinstance(value, str):
        return value
    x = float(value)
    if not math.isfinite(x) or x == 0.0:
        return "inf" if x == math.inf else f"{x:g}"
    scale = 10.0 ** (math.floor(math.log10(abs(x))) - digits + 1)
    up = math.ceil(round(x / scale, 6)) * scale
    text = f"{up:.{digits}g}"
    return f"{text}.0" if text.lstrip("-").isdigit() else text  # 2.0, as Python prints it


def seconds_text(seconds: float) -> str:
    """A duration for people: 42s, 3m05s, 1h02m."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def _scalar_metadata() -> bytes:
    # The TensorBoard scalars plugin's metadata, written through TF core so that event files
    # are produced without the tensorboard package (only viewing them needs it).
    # lazy: loads tensorflow; importing tfdp.train.report does not
    from tensorflow.core.framework import summary_pb2  # pylint: disable=import-outside-toplevel
    meta = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
        data_class=summary_pb2.DATA_CLASS_SCALAR)
    return meta.SerializeToString()


def summary_scalar(writer, tag: str, value: float, step: int) -> None:
    """Writes one TensorBoard scalar event with `writer` (a tf.summary file writer)."""
    # lazy: loads tensorflow; importing tfdp.train.report does not
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    with writer.as_default():
        tf.summary.write(tag, tf.constant(float(value), tf.float32), step=int(step),
                         metadata=_scalar_metadata())


_NO_GUARANTEE = "no differential-privacy guarantee"  # tfdp.accounting.NO_GUARANTEE


def _is_inf(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("inf", "infinity", "+inf")
    try:
        return float(value) == float("inf")
    except (TypeError, ValueError):
        return False


def _eps_text(value: Any) -> str:
    return f"inf ({_NO_GUARANTEE})" if _is_inf(value) else round_up(value)


def has_guarantee(ledger: Mapping[str, Any]) -> bool:
    """False when the ledger's sound epsilon is infinite (no DP guarantee) or absent."""
    return ledger.get("epsilon") is not None and not _is_inf(ledger.get("epsilon"))


def summary_text(writer, tag: str, text: str, step: int) -> None:
    """Writes one TensorBoard text event (the text plugin) with `writer`."""
    # lazy: loads tensorflow; importing tfdp.train.report does not
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tensorflow.core.framework import summary_pb2  # pylint: disable=import-outside-toplevel
    meta = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"),
        data_class=summary_pb2.DATA_CLASS_TENSOR)
    with writer.as_default():
        tf.summary.write(tag, tf.constant(text), step=int(step),
                         metadata=meta.SerializeToString())


def ledger_lines(ledger: Mapping[str, Any]) -> list[str]:
    """The privacy ledger (`PrivacyLedger.to_dict()`) as printable lines.

    Each entry with its sound epsilon and delta (and its claimed epsilon where it differs),
    then the sound total, and the claimed total when it differs from the sound one.
    """
    lines = ["privacy ledger:"]
    for entry in ledger.get("entries", []):
        parts = [f"  - {entry.get('name')}: {entry.get('mechanism', '')}",
                 f"eps={_eps_text(entry.get('epsilon'))}", f"delta={round_up(entry.get('delta'))}"]
        if entry.get("claimed_epsilon") is not None:
            parts.append(f"claimed eps={round_up(entry.get('claimed_epsilon'))}")
        lines.append(" ".join(parts))
    relation = {"add_remove": "add/remove-one", "replace_one": "replace-one"}.get(
        ledger.get("relation"), ledger.get("relation"))
    lines.append(f"  total (sound accounting): epsilon={_eps_text(ledger.get('epsilon'))} "
                 f"delta={round_up(ledger.get('delta'))}"
                 + (f" ({relation} neighbours)" if relation else ""))
    if not ledger.get("entries"):
        lines.append(f"  (no entries: nothing protects the training data; {_NO_GUARANTEE})")
    elif ledger.get("differs"):
        lines.append(f"  total (as claimed): epsilon={round_up(ledger.get('claimed_epsilon'))} "
                     f"delta={round_up(ledger.get('claimed_delta'))}  <- differs from the sound "
                     "value; see the entries' notes in ledger.json")
    else:
        lines.append("  (claimed total equals the sound total)")
    return lines


# The accountants a per-step entry's mechanism names ("dpsgd_pld", "dpsgd_rdp"; see
# tfdp.accounting.entry_accountant, not imported here: it loads TensorFlow).
_ACCOUNTANT_TEXT = {"dpsgd_pld": "PLD", "dpsgd_rdp": "RDP"}


def accountants_text(ledger: Mapping[str, Any]) -> str:
    """The accountants behind a ledger's per-step entries, e.g. "PLD" ("" when none).

    Ledgers written before PLD became the default name "dpsgd_rdp" and read as "RDP".
    """
    names = []
    for entry in ledger.get("entries", []):
        text = _ACCOUNTANT_TEXT.get(str(entry.get("mechanism", "")))
        if text and text not in names:
            names.append(text)
    return ", ".join(names)


def privacy_summary(ledger: Mapping[str, Any]) -> str:
    """One line: the claimed and the sound epsilon of a ledger (and its DP-SGD accountant)."""
    accountants = accountants_text(ledger)
    return (f"privacy: claimed epsilon={_eps_text(ledger.get('claimed_epsilon'))}, sound "
            f"epsilon={_eps_text(ledger.get('epsilon'))} at delta={round_up(ledger.get('delta'))}"
            + (f" ({accountants} accountant)" if accountants else ""))


class Reporter:
    """TensorBoard events and printed output of one run (silent on non-chief workers).

    On a terminal each epoch shows a progress bar; otherwise (a log file, a pipe) there is no
    bar, only the one-line epoch summary (steps, loss, test accuracy, epsilon spent so far,
    time and ETA), so logs stay readable.

    Args:
      logdir: the TensorBoard folder, or None for no events.
      verbose: 0 silent, 1 progress and summary.
      print_fn: where printed lines go.
      interactive: progress bars (default: whether stdout is a terminal).
    """

    def __init__(self, logdir: str | None, verbose: int, print_fn: Callable[[str], None],
                 interactive: Optional[bool] = None):
        # lazy: loads tensorflow; importing tfdp.train.report does not
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        self.writer = tf.summary.create_file_writer(logdir) if logdir else None
        self.verbose = bool(verbose) and logdir is not None
        self.print_fn = print_fn
        if interactive is None:
            interactive = bool(getattr(sys.stdout, "isatty", lambda: False)())
        self.interactive = interactive
        self._bar = None
        self._start = time.time()
        self._epoch_start = self._start
        self._first_epoch: Optional[int] = None
        self._first_seconds = 0.0

    def say(self, text: str) -> None:
        """A progress message (e.g. before a phase that takes more than a few seconds)."""
        if self.verbose:
            self.print_fn(text)
            if hasattr(sys.stdout, "flush"):
                sys.stdout.flush()

    def start_epoch(self, epoch: int, epochs: int, steps: int) -> None:
        """Opens the epoch's progress bar (terminal) and notes its start time."""
        self._bar = None
        self._epoch_start = time.time()
        if self._first_epoch is None:
            self._first_epoch = epoch
            self._start = self._epoch_start
            self.say(f"training: epochs {epoch + 1}-{epochs}, {steps} steps per epoch "
                     "(the first step also builds the graph)")
        if self.verbose and self.interactive:
            # lazy: loads keras; importing tfdp.train.report does not
            import keras  # pylint: disable=import-outside-toplevel
            self._bar = keras.utils.Progbar(steps, unit_name="step",
                                            stateful_metrics=["loss", "accuracy"])
            self.print_fn(f"epoch {epoch + 1}/{epochs}")

    def step(self, done: int, sums: Mapping[str, float]) -> None:
        """Updates the progress bar with the running means after `done` steps."""
        if self._bar is not None:
            self._bar.update(done, values=[(k, v / done) for k, v in sums.items()])

    def end_epoch(self, epoch: int, means: Mapping[str, float], steps: int) -> None:
        """Writes the epoch's (non-privatized) training statistics and the step count."""
        if self.writer is None:
            return
        # Not privatized: statistics of the private training data (see metrics.json).
        for k, v in means.items():
            summary_scalar(self.writer, f"nonprivate_train/{k}", v, epoch + 1)
        summary_scalar(self.writer, "train/steps", float(steps), epoch + 1)
        self.writer.flush()

    def epoch_line(self, epoch: int, epochs: int, steps: int, means: Mapping[str, float],
                   test_accuracy: Optional[float], epsilon: Any,
                   target_epsilon: Optional[float]) -> None:
        """Prints one line per epoch and writes its test accuracy and epsilon to TensorBoard.

        Args:
          epoch: the epoch just finished (0-based).
          epochs: the planned number of epochs.
          steps: steps run so far (all epochs).
          means: the epoch's mean training statistics (not privatized; loss shown only).
          test_accuracy: test accuracy after the epoch, or None.
          epsilon: sound epsilon spent so far (None: no privacy accounting).
          target_epsilon: the run's --epsilon, or None.
        """
        if self.writer is not None:
            if test_accuracy is not None:
                summary_scalar(self.writer, "test/accuracy_per_epoch", test_accuracy, epoch + 1)
            if isinstance(epsilon, (int, float)) and math.isfinite(float(epsilon)):
                summary_scalar(self.writer, "privacy/epsilon_spent", float(epsilon), epoch + 1)
            self.writer.flush()
        if not self.verbose:
            return
        now = time.time()
        done = epoch + 1 - (self._first_epoch or 0)
        left = epochs - epoch - 1
        elapsed = now - self._start
        parts = [f"epoch {epoch + 1}/{epochs}", f"step {steps}"]
        if "loss" in means:
            parts.append(f"loss {means['loss']:.4f}")
        if test_accuracy is not None:
            parts.append(f"test acc {test_accuracy:.4f}")
        if epsilon is not None:
            eps = f"eps {_eps_text(epsilon)}"
            if target_epsilon is not None:
                eps += f" of {round_up(target_epsilon)}"
            parts.append(eps)
        parts.append(f"{seconds_text(now - self._epoch_start)}/epoch")
        parts.append(f"elapsed {seconds_text(elapsed)}")
        if done == 1:
            self._first_seconds = elapsed  # includes building the graph: not in the ETA
        if left > 0 and done > 0:
            per_epoch = (elapsed / done if done == 1
                         else (elapsed - self._first_seconds) / (done - 1))
            parts.append(f"ETA {seconds_text(per_epoch * left)}")
        self.print_fn("  ".join(parts))

    def interrupted(self, epochs_completed: int, path: str) -> None:
        """Says where a deliberately interrupted run can be resumed."""
        if self.verbose:
            self.print_fn(f"stopped after epoch {epochs_completed} (checkpoint saved); resume "
                          f"with --resume --model_dir={path}")

    def finish(self, test_accuracy: float, num_test: int, epochs_completed: int,
               ledger: Mapping[str, Any], target_epsilon: float | None, path: str) -> None:
        """Writes the final scalars and prints the accuracy, the ledger and the run folder."""
        if self.writer is not None:
            summary_scalar(self.writer, "test/accuracy", test_accuracy, epochs_completed)
            if ledger.get("epsilon") is not None:
                eps = float("inf") if _is_inf(ledger["epsilon"]) else float(ledger["epsilon"])
                summary_scalar(self.writer, "privacy/epsilon", eps, epochs_completed)
                summary_text(self.writer, "privacy/guarantee",
                             f"sound epsilon = {_eps_text(ledger['epsilon'])}",
                             epochs_completed)
            self.writer.flush()
        if not self.verbose:
            return
        self.print_fn(f"test accuracy: {test_accuracy:.4f} ({num_test} examples)")
        for line in ledger_lines(ledger):
            self.print_fn(line)
        self.print_fn("  (epsilon and delta rounded up to 4 significant digits; ledger.json "
                      "holds them in full)")
        if not has_guarantee(ledger):
            self.print_fn(f"  note: {_NO_GUARANTEE} for this run (sound epsilon = inf)")
        elif target_epsilon is not None and float(ledger["epsilon"]) > target_epsilon * (1 + 1e-9):
            self.print_fn(f"  note: the sound epsilon of what ran exceeds "
                          f"--epsilon={target_epsilon:g}")
        self.print_fn(f"run directory: {path}")
