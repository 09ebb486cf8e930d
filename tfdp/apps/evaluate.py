"""tfdp-evaluate: accuracy under attack and certified accuracy of a trained run directory."""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging

from tfdp import eval_options, options, rundir
from tfdp.apps import cli, option_flags
from tfdp.train import report

FLAGS = flags.FLAGS
_BEFORE = set(FLAGS)
# (EvalOptions field, its flag) of every field declared as a flag.
EVAL_FLAGS = options.flag_options(eval_options.EvalOptions)
flags.DEFINE_string("model_dir", None, "Run directory written by tfdp-train.")
# Every EvalOptions flag (attacks, sizes, certification, ...), from its one declaration.
option_flags.define_flags([option for _, option in EVAL_FLAGS], __name__, FLAGS)
flags.DEFINE_string("saved_model", None, "Evaluate this SavedModel written by tfdp-export "
                    "instead of a run directory; results go to --model_dir if given, else "
                    "to SAVED_MODEL-evaluation.")
flags.DEFINE_enum("attack_preset", None, ["paper", "strong"],
                  "paper: step mu/T_a as the authors' code; strong: PGD step 2.5 mu/T_a, "
                  "5x --nb_iter, 5 random restarts (unset: as the other flags say).")


cli.define_verbose()
OWN_FLAGS = cli.new_flags(_BEFORE)


def _lib():
    """tfdp.evaluate (TensorFlow), imported after the help was handled."""
    cli.quiet_start(sys.argv)
    # lazy: loads scipy; importing tfdp.apps.evaluate does not
    from tfdp import evaluate as evaluate_lib  # pylint: disable=import-outside-toplevel
    return evaluate_lib


def _options() -> eval_options.EvalOptions:
    """The evaluation options from the flags (lists as tuples)."""
    values = {}
    for field, option in EVAL_FLAGS:
        value = FLAGS[option.name].value
        values[field] = tuple(value) if isinstance(value, list) else value
    return eval_options.EvalOptions(**values)


def check_model_dir(model_dir: str) -> str | None:
    """What makes `model_dir` unusable for evaluation (None when it is usable)."""
    if not os.path.exists(model_dir):
        return f"--model_dir: {model_dir} does not exist"
    if not os.path.isdir(model_dir):
        return f"--model_dir: {model_dir} is not a directory"
    if not os.path.exists(os.path.join(model_dir, rundir.MODEL_FILE)):
        return (f"--model_dir: {model_dir} holds no trained model ({rundir.MODEL_FILE}); "
                "finish the run first (tfdp-train --resume --model_dir=...)")
    problem = rundir.model_file_problem(os.path.join(model_dir, rundir.MODEL_FILE))
    if problem:
        return rundir.corrupt_model_message(os.path.join(model_dir, rundir.MODEL_FILE), problem)
    if not os.access(model_dir, os.W_OK):
        return f"--model_dir: {model_dir} is not writable (evaluation.json goes there)"
    return None


def main(argv: list[str]) -> None:
    evaluate_lib = _lib()
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if FLAGS.saved_model:
        _evaluate_saved_model()
        return
    if not FLAGS.model_dir:
        raise app.UsageError("--model_dir is required")
    try:
        options = _options()
        if FLAGS.attack_preset:
            options = evaluate_lib.apply_attack_preset(options, FLAGS.attack_preset)
        options = evaluate_lib.validate_options(options)  # builds a fused kernel now
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    problem = check_model_dir(FLAGS.model_dir)
    if problem:
        sys.exit(f"tfdp-evaluate: error: {problem}")
    try:
        # Exclusive use of the run directory: no training or other evaluation writes there.
        with rundir.RunLock(FLAGS.model_dir):
            summary = evaluate_lib.evaluate_run(FLAGS.model_dir, options, say=_say)
    except ValueError as e:
        sys.exit(f"tfdp-evaluate: error: {e}")
    for line in evaluate_lib.summary_lines(summary):
        logging.info("%s", line)
    write_tensorboard(FLAGS.model_dir, summary)
    print(f"wrote {summary['model_dir']}/evaluation.json")


def _say(text: str) -> None:
    """The plan and progress lines: on stdout at once (absl's INFO log is off by default)."""
    print(text, flush=True)


def write_tensorboard(model_dir: str, summary: dict) -> None:
    """Writes the evaluation's accuracies to the run's TensorBoard log (logs/, tag eval/...).

    The step is the run's number of training epochs, so the points sit at the end of the
    training curves.
    """
    # lazy: loads tensorflow; importing tfdp.apps.evaluate does not
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    metrics = rundir.RunDir(model_dir)
    step = 0
    if metrics.exists(rundir.METRICS_FILE):
        step = int(metrics.read_json(rundir.METRICS_FILE).get("epochs_completed") or 0)
    writer = tf.summary.create_file_writer(os.path.join(model_dir, rundir.TENSORBOARD_DIR))
    # lazy: loads scipy; importing tfdp.apps.evaluate does not
    from tfdp import evaluate as evaluate_lib  # pylint: disable=import-outside-toplevel
    key = evaluate_lib.certified_key(summary)  # claimed_certified_accuracy if unsound
    values = {"eval/clean_accuracy": summary.get("clean_accuracy")}
    for size, res in (summary.get("clean_" + key) or {}).items():
        values[f"eval/clean_{key}@{size}"] = (res or {}).get("value")
    for name, entry in (summary.get("attacks") or {}).items():
        for size, res in entry.items():
            values[f"eval/{name}@{size}/accuracy"] = res.get("accuracy")
            values[f"eval/{name}@{size}/{key}_on_attacked_inputs"] = res.get(
                key + "_on_attacked_inputs")
    for tag, value in values.items():
        if isinstance(value, (int, float)):
            report.summary_scalar(writer, tag, value, step)
    writer.flush()


def _evaluate_saved_model() -> None:
    """--saved_model: evaluates an exported model; results beside it or in --model_dir."""
    evaluate_lib = _lib()
    try:
        options = _options()
        if FLAGS.attack_preset:
            options = evaluate_lib.apply_attack_preset(options, FLAGS.attack_preset)
        summary = evaluate_lib.evaluate_saved_model(
            FLAGS.saved_model, evaluate_lib.validate_options(options), FLAGS.model_dir)
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    for line in evaluate_lib.summary_lines(summary):
        logging.info("%s", line)
    print(f"wrote {summary['output_dir']}/evaluation.json")


def run() -> None:
    """Console-script entry point."""
    cli.handle_help(sys.argv, lambda kind: cli.app_help(__doc__, OWN_FLAGS, kind))
    app.run(main, argv=sys.argv)


if __name__ == "__main__":
    run()
