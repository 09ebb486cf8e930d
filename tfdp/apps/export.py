"""tfdp-export: a finished run directory as a TensorFlow SavedModel with a model card.

Usage: tfdp-export --model_dir=RUN --export_dir=OUT [--overwrite] [--bound=...]
       tfdp-export --latest_under=runs   (the newest finished run in runs/)
Prints the export directory and, per signature, its inputs and outputs.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging  # noqa: E402

from tfdp.apps import cli  # noqa: E402
from tfdp.train.report import round_up

FLAGS = flags.FLAGS
_BEFORE = set(FLAGS)
flags.DEFINE_string("model_dir", None, "Run directory written by tfdp-train.")
flags.DEFINE_string("export_dir", None, "SavedModel directory to write (default: "
                    "MODEL_DIR/saved_model).")
flags.DEFINE_bool("overwrite", False, "Replace an existing non-empty --export_dir.")
flags.DEFINE_enum("bound", None, ["clopper_pearson", "hoeffding", "bernstein"],
                  "Confidence bound of the certify signature (default: the run's "
                  "certification entry, else clopper_pearson).")
flags.DEFINE_integer("draws_per_step", 256, "Monte-Carlo draws per forward pass of certify.")
flags.DEFINE_bool("include_keras", True, "Also copy model.keras into the export.")
flags.DEFINE_enum("out_of_range", "reject", ["reject", "clip"],
                  "What the signatures do with pixels outside the run's value range: reject "
                  "the call or clip them into the range (recorded in the model card). NaN and "
                  "Inf are always rejected.")
flags.DEFINE_string("latest_under", None, "Instead of --model_dir: export the most recently "
                    "finished run directory (one holding model.keras) inside this folder.")

cli.define_verbose()
OWN_FLAGS = cli.new_flags(_BEFORE)


def describe(export_dir: str) -> str:
    """Text listing of the signatures of the SavedModel in export_dir (names, dtypes, shapes).

    Args:
        export_dir: a SavedModel directory.

    Returns:
        one line per signature and per input / output.
    """
    # lazy: loads tensorflow; importing tfdp.apps.export does not
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    loaded = tf.saved_model.load(export_dir)
    lines = []
    for name in sorted(loaded.signatures):
        fn = loaded.signatures[name]
        args = fn.structured_input_signature[1]
        ins = ", ".join(f"{k}: {v.dtype.name}{list(v.shape)}" for k, v in sorted(args.items()))
        outs = ", ".join(f"{k}: {v.dtype.name}{list(v.shape)}"
                         for k, v in sorted(fn.structured_outputs.items()))
        lines.append(f"  {name}({ins}) -> {{{outs}}}")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    logging.set_verbosity(logging.WARNING)
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if bool(FLAGS.model_dir) == bool(FLAGS.latest_under):
        raise app.UsageError("give exactly one of --model_dir and --latest_under")
    # lazy: loads tensorflow; importing tfdp.apps.export does not
    from tfdp import export  # pylint: disable=import-outside-toplevel
    try:
        model_dir = FLAGS.model_dir or export.latest_run(FLAGS.latest_under)
        export_dir = FLAGS.export_dir or os.path.join(model_dir, "saved_model")
        result = export.export_run(model_dir, export_dir, overwrite=FLAGS.overwrite,
                                   bound=FLAGS.bound, draws_per_step=FLAGS.draws_per_step,
                                   include_keras=FLAGS.include_keras,
                                   out_of_range=FLAGS.out_of_range)
    except ValueError as e:  # one line, like the other tools (not absl's usage block)
        text = f"--{e}" if str(e).split(":")[0] in FLAGS else str(e)
        sys.exit(f"tfdp-export: error: {text}")
    except OSError as e:  # full disk, read-only directory: one line, nothing half-written
        sys.exit(f"tfdp-export: error: {e.filename or export_dir}: cannot write the export "
                 f"({e.strerror or type(e).__name__}); nothing was exported")
    except Exception as e:  # pylint: disable=broad-except
        # lazy: loads tensorflow; importing tfdp.apps.export does not
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        if not isinstance(e, (tf.errors.ResourceExhaustedError, tf.errors.PermissionDeniedError,
                              tf.errors.DataLossError, tf.errors.UnavailableError)):
            raise
        reason = (str(getattr(e, "message", "") or e).strip().splitlines() or [""])[0]
        sys.exit(f"tfdp-export: error: {export_dir}: cannot write the export ({reason}); "
                 "nothing was exported")
    print(f"exported run: {os.path.abspath(model_dir)}")
    print(f"export directory: {result.export_dir}")
    print("signatures:")
    print(describe(result.export_dir))
    ledger = result.card.get("ledger") or {}
    print(f"model card: {os.path.join(result.export_dir, export.CARD_FILE)} "
          f"(sound epsilon={round_up(ledger.get('epsilon'))}, "
          f"delta={round_up(ledger.get('delta'))}; claimed "
          f"epsilon={round_up(ledger.get('claimed_epsilon'))}, "
          f"delta={round_up(ledger.get('claimed_delta'))}; rounded up, in full in the card)")
    if ledger and not ledger.get("guarantee", True):
        print("  no differential-privacy guarantee: the sound epsilon is inf (see the card's "
              "ledger note)")


def run() -> None:
    """Console-script entry point."""
    cli.handle_help(sys.argv, lambda kind: cli.app_help(__doc__, OWN_FLAGS, kind))
    cli.quiet_start(sys.argv)
    app.run(main, argv=sys.argv)


if __name__ == "__main__":
    run()
