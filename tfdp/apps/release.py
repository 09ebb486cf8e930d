"""tfdp-release: runs one of the papers' own TF1 code releases beside tfdp and records it.

  pip install -e '.[releases]'     # tf_slim, for tf.contrib.layers (StoBatch)
  git clone https://github.com/haiphanNJIT/PrivateDeepLearning /work/releases/PrivateDeepLearning
  tfdp-release --job=adlm.mnist --release_dir=/work/releases/PrivateDeepLearning --seed=1 \\
      --set=epochs=6 --output=results/releases/adlm_mnist_release_e6_seed1.json

The checkout must be at the commit the job names (tfdp/papers/<paper>/releases.py); the script
runs unedited on a temporary copy in which only the job's overrides (run length, evaluation
interval) are changed, their diff stored in the result file, on the MNIST files tfdp reads,
through tfdp's tf.compat.v1 shim. docs/reproduce.md, "The authors' releases".
"""

from __future__ import annotations

import os
import shlex
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from tfdp.apps import cli  # noqa: E402
from tfdp.reproduce.releases import harness, jobs  # noqa: E402

FLAGS = flags.FLAGS
_BEFORE = set(FLAGS)
flags.DEFINE_string("job", None, f"One of {jobs.names()}.")
flags.DEFINE_string("release_dir", None, "Git checkout of the job's repository.")
flags.DEFINE_integer("seed", 1, "Seed for NumPy, Python and TF in the release's process.")
flags.DEFINE_string("output", None, "Result JSON to write.")
flags.DEFINE_list("set", [], "Job settings as key=value (e.g. epochs=6).")
flags.DEFINE_string("work_dir", None, "Where the temporary copy and its log go (default: a "
                    "new temporary directory).")
flags.DEFINE_list("extra_path", [], "Further PYTHONPATH entries for the release's process "
                  "(e.g. where tf_slim is installed).")
flags.DEFINE_string("data_dir", None, "tfdp data directory (default: TFDP_DATA_DIR).")
cli.define_verbose()
OWN_FLAGS = cli.new_flags(_BEFORE)


def _settings(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise app.UsageError(f"--set expects key=value, got {item!r}")
        out[key] = value
    return out


def main(argv: list[str]) -> None:
    """Validates the flags and runs the job."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    for name in ("job", "release_dir", "output"):
        if not getattr(FLAGS, name):
            raise app.UsageError(f"--{name} is required")
    try:
        job = jobs.get(FLAGS.job)
        result = harness.run_job(
            job, FLAGS.release_dir, FLAGS.seed, FLAGS.output, _settings(FLAGS.set),
            FLAGS.work_dir, FLAGS.extra_path, FLAGS.data_dir,
            command=shlex.join(["tfdp-release"] + [a for a in sys.argv[1:]
                                                   if not a.startswith("--work_dir")]))
    except ValueError as e:
        raise app.UsageError(str(e)) from e
    print(f"{job.name} seed {FLAGS.seed}: test accuracy {result['numbers']['test_accuracy']:.2f}%"
          f" after {result['seconds']:.0f} s -> {FLAGS.output}")


def run() -> None:
    """Console-script entry point."""
    cli.handle_help(sys.argv, lambda kind: cli.app_help(__doc__, OWN_FLAGS, kind))
    cli.quiet_start(sys.argv)
    app.run(main)


if __name__ == "__main__":
    run()
