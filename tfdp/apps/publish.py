"""tfdp-publish: copy only what may be published from a run directory.

  tfdp-publish --model_dir=runs/ssgd --out=public/ssgd

Writes a new directory holding model.keras, config.json, ledger.json, metrics.json,
evaluation.json, certificates.tsv and flags.txt of a finished run, every JSON file filtered
by the model card's allow-list, and published.json listing what was copied and withheld.
Never copied: the checkpoint folder (the run's secret key, the hash of the training data,
the non-private training statistics), the TensorBoard logs, training loss and accuracy,
seeds, data hashes and local paths. --out must not exist (or be an empty folder); the copy
appears there complete or not at all.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from tfdp import publish
from tfdp.apps import cli


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfdp-publish", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True, help="a finished run directory")
    parser.add_argument("--out", required=True,
                        help="the new directory to write (refused if it exists and is not empty)")
    parser.add_argument("--verbose", action="store_true",
                        help="show TensorFlow's start-up log")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Console entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        publish.check_run(args.model_dir)
        publish.check_out_dir(args.out)
        cli.import_tensorflow(verbose=args.verbose)  # the allow-list lives in tfdp.export
        manifest = publish.publish_run(args.model_dir, args.out)
    except ValueError as e:  # names the argument ("model_dir: ...", "out: ...") or the file
        text = str(e)
        flag = "--" if text.split(":")[0] in ("model_dir", "out") else ""
        print(f"tfdp-publish: error: {flag}{text}", file=sys.stderr)
        return 2
    except OSError as e:  # full disk, read-only folder: nothing half-written is left
        print(f"tfdp-publish: error: --out: cannot write {e.filename or args.out} "
              f"({e.strerror or type(e).__name__}); nothing was published", file=sys.stderr)
        return 1
    out = os.path.abspath(args.out)
    print(f"published {os.path.abspath(args.model_dir)} to {out}")
    print(f"  copied: {', '.join(manifest['files'])}")
    print(f"  withheld: {', '.join(manifest['withheld']) or '-'}")
    return 0


def run() -> None:
    """Console-script entry point (tfdp-publish)."""
    sys.exit(main())


if __name__ == "__main__":
    run()
