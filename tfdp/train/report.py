"""What a run shows: TensorBoard scalars, the progress bar and the printed summary.

The ledger texts (`ledger_lines`, `privacy_summary`) import no TensorFlow, so light apps
(e.g. `tfdp.apps.pipeline`) print ledgers the same way.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping


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
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    with writer.as_default():
        tf.summary.write(tag, tf.constant(float(value), tf.float32), step=int(step),
                         metadata=_scalar_metadata())


def ledger_lines(ledger: Mapping[str, Any]) -> list[str]:
    """The privacy ledger (`PrivacyLedger.to_dict()`) as printable lines.

    Each entry with its sound epsilon and delta (and its claimed epsilon where it differs),
    then the sound total, and the claimed total when it differs from the sound one.
    """
    lines = ["privacy ledger:"]
    for entry in ledger.get("entries", []):
        parts = [f"  - {entry.get('name')}: {entry.get('mechanism', '')}",
                 f"eps={entry.get('epsilon')}", f"delta={entry.get('delta')}"]
        if entry.get("claimed_epsilon") is not None:
            parts.append(f"claimed eps={entry.get('claimed_epsilon')}")
        lines.append(" ".join(parts))
    relation = {"add_remove": "add/remove-one", "replace_one": "replace-one"}.get(
        ledger.get("relation"), ledger.get("relation"))
    lines.append(f"  total (sound accounting): epsilon={ledger.get('epsilon')} "
                 f"delta={ledger.get('delta')}" + (f" ({relation} neighbours)" if relation else ""))
    if not ledger.get("entries"):
        lines.append("  (no entries: this run spends no privacy budget)")
    elif ledger.get("differs"):
        lines.append(f"  total (as claimed): epsilon={ledger.get('claimed_epsilon')} "
                     f"delta={ledger.get('claimed_delta')}  <- differs from the sound value; "
                     "see the entries' notes in ledger.json")
    else:
        lines.append("  (claimed total equals the sound total)")
    return lines


def privacy_summary(ledger: Mapping[str, Any]) -> str:
    """One line: the claimed and the sound epsilon of a ledger."""
    return (f"privacy: claimed epsilon={ledger.get('claimed_epsilon')}, sound epsilon="
            f"{ledger.get('epsilon')} at delta={ledger.get('delta')}")


class Reporter:
    """TensorBoard events and printed output of one run (silent on non-chief workers).

    Args:
      logdir: the TensorBoard folder, or None for no events.
      verbose: 0 silent, 1 progress bar and summary.
      print_fn: where printed lines go.
    """

    def __init__(self, logdir: str | None, verbose: int, print_fn: Callable[[str], None]):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        self.writer = tf.summary.create_file_writer(logdir) if logdir else None
        self.verbose = bool(verbose) and logdir is not None
        self.print_fn = print_fn
        self._bar = None

    def start_epoch(self, epoch: int, epochs: int, steps: int) -> None:
        """Prints the epoch header and opens its progress bar."""
        self._bar = None
        if self.verbose:
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
                summary_scalar(self.writer, "privacy/epsilon", ledger["epsilon"],
                               epochs_completed)
            self.writer.flush()
        if not self.verbose:
            return
        self.print_fn(f"test accuracy: {test_accuracy:.4f} ({num_test} examples)")
        for line in ledger_lines(ledger):
            self.print_fn(line)
        if target_epsilon is not None and ledger["epsilon"] > target_epsilon * (1 + 1e-9):
            self.print_fn(f"  note: the sound epsilon of what ran exceeds "
                          f"--epsilon={target_epsilon:g}")
        self.print_fn(f"run directory: {path}")
