"""tfdp-evaluate: accuracy under attack and certified accuracy of a trained run directory."""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging

from tfdp import rundir
from tfdp.apps import cli
from tfdp.train import report

FLAGS = flags.FLAGS
_BEFORE = set(FLAGS)
flags.DEFINE_string("model_dir", None, "Run directory written by tfdp-train.")
flags.DEFINE_list("attacks", ["fgsm", "ifgsm", "mim", "madry"],
                  "Attacks, comma-separated, from fgsm, ifgsm, mim, madry (empty: clean only).")
flags.DEFINE_list("attack_sizes", ["0.1", "0.2"],
                  "l_inf attack sizes, comma-separated, on --attack_size_range.")
flags.DEFINE_list("attack_size_range", None,
                  "low,high of the range the sizes refer to, e.g. 0,1 for sizes on [0,1] of a "
                  "model trained on [-1,1] (a size doubles). Default: the data's own range.")
flags.DEFINE_integer("nb_iter", 10, "Iterations of ifgsm, mim and madry (T_a).")
flags.DEFINE_integer("eot_draws", 1, "> 1: attack the noisy model, averaging gradients over "
                     "this many noise draws (expectation over transformation).")
flags.DEFINE_bool("use_true_labels", False,
                  "Craft against the true labels instead of the model's predictions.")
flags.DEFINE_bool("certify", False, "Monte-Carlo prediction and certified accuracy.")
flags.DEFINE_integer("num_draws", None, "Monte-Carlo draws per input (default: the run's "
                     "certification config, else 1000).")
flags.DEFINE_float("alpha", None, "Failure probability of the bounds, in (0, 1) (default "
                   "0.05, i.e. 95% confidence).")
flags.DEFINE_enum("bound", None, ["clopper_pearson", "hoeffding", "bernstein"],
                  "Confidence bound (default: Clopper-Pearson on argmax counts).")
flags.DEFINE_integer("num_examples", None, "Evaluate only the first N test examples (default: "
                     "all; with --certify, the run's --num_test, at most 1000).")
flags.DEFINE_integer("batch_size", 100, "Examples per batch.")
flags.DEFINE_integer("draws_per_step", 256, "Monte-Carlo draws per forward pass.")
flags.DEFINE_integer("seed", None, "Seed of the Madry random starts (unset: OS entropy).")
flags.DEFINE_string("data_dir", None, "Data root (default: the run's data_dir).")
flags.DEFINE_string("saved_model", None, "Evaluate this SavedModel written by tfdp-export "
                    "instead of a run directory; results go to --model_dir if given, else "
                    "to SAVED_MODEL-evaluation.")
flags.DEFINE_enum("noise_kernel", "auto", ["auto", "portable", "fused"],
                  "How the noise layers draw fresh noise (Monte-Carlo prediction, EOT "
                  "attacks): 'portable' TensorFlow ops, the 'fused' compiled CPU op (built "
                  "with g++ on first use), or 'auto': fused wherever it builds, else portable "
                  "(evaluation.json records the kernel used and any fallback). The two draw "
                  "the same noise to a few float32 ulps. Run directories only.")
flags.DEFINE_enum("attack_norm", "inf", ["inf", "2"],
                  "Norm of the attacks and attack sizes: inf (l_inf) or 2 (l2). With --certify "
                  "it must be the certificate's norm (gaussian_smoothing: 2), except that an "
                  "l2 certificate with inf reports l_inf radii = l2 radius / sqrt(d).")
flags.DEFINE_bool("soundness_check", False,
                  "With --certify: attack every clean-certified example at its certified "
                  "radius (PGD with EOT gradients, the certificate's norm, from x, a random "
                  "start and towards the runner-up class), test with fresh draws whether the "
                  "smoothed prediction changed and report how many flipped, with a binomial "
                  "p-value against alpha, and the same at 2 r (the check's power).")
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


def _options():
    """The evaluation options from the flags (a tfdp.evaluate.EvalOptions)."""
    return _lib().EvalOptions(
        attacks=tuple(FLAGS.attacks), attack_sizes=tuple(FLAGS.attack_sizes),
        size_range=tuple(FLAGS.attack_size_range) if FLAGS.attack_size_range else None,
        nb_iter=FLAGS.nb_iter, eot_draws=FLAGS.eot_draws,
        use_true_labels=FLAGS.use_true_labels, certify=FLAGS.certify,
        num_draws=FLAGS.num_draws, alpha=FLAGS.alpha, bound=FLAGS.bound,
        num_examples=FLAGS.num_examples, batch_size=FLAGS.batch_size,
        draws_per_step=FLAGS.draws_per_step, seed=FLAGS.seed, data_dir=FLAGS.data_dir,
        noise_kernel=FLAGS.noise_kernel, attack_norm=FLAGS.attack_norm,
        soundness_check=FLAGS.soundness_check)


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
