"""tfdp-reproduce: reruns the papers' published-number checks and regenerates REPRODUCTION.md.

  tfdp-reproduce --scale=smoke                      # every paper, CI scale
  tfdp-reproduce --scale=short --papers=adlm,gpm    # about 20 CPU minutes
  tfdp-reproduce --scale=reduced --papers=adlm --seeds=3 --only=adlm.mnist.adlm.eps0.25
  tfdp-reproduce --dry_run --scale=full             # the GPU commands and their compute
  tfdp-reproduce --report                           # regenerate the report only

Finished jobs are skipped (their JSON is in results/reproduce/<scale>/jobs/), so a killed
grid resumes where it stopped. Rows whose trainer or flagfile is not in this build are
reported as "not available in this build".
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from tfdp.apps import cli  # noqa: E402
from tfdp.reproduce import extract, registry, report, runner  # noqa: E402

FLAGS = flags.FLAGS
_BEFORE = set(FLAGS)
flags.DEFINE_list("papers", list(registry.PAPERS), f"Papers: any of {list(registry.PAPERS)}.")
flags.DEFINE_string("scale", "smoke", f"One of {list(registry.SCALES)} (short: the reduced "
                    "settings cut to about 20 minutes on 2 CPU cores).")
flags.DEFINE_integer("seeds", 1, "Seeds per training run (1..N); several where the paper's "
                     "noise is drawn once.")
flags.DEFINE_list("only", None, "Run only these row ids.")
flags.DEFINE_bool("dry_run", False, "Print the commands and compute estimates; run nothing.")
flags.DEFINE_bool("report", False, "Only recompute the row JSONs from the finished jobs and "
                  "regenerate REPRODUCTION.md and its figures (runs nothing).")
flags.DEFINE_bool("write_report", True, "After running, regenerate the report.")
flags.DEFINE_string("results_dir", runner.DEFAULT_RESULTS, "Result JSONs (results/reproduce).")
flags.DEFINE_string("work_dir", runner.DEFAULT_WORK, "Run directories (not committed).")
flags.DEFINE_string("report_path", None, "Report file (default: REPRODUCTION.md at the repo "
                    "root).")
flags.DEFINE_string("data_dir", None, "Real data root (default: TFDP_DATA_DIR).")
cli.define_verbose()
OWN_FLAGS = cli.new_flags(_BEFORE)


def validate(papers, scale, seeds, only) -> list[registry.Row]:
    """Checks the flags; returns the selected rows.

    Raises:
      ValueError: naming the flag, for an unknown paper, scale or row id, or seeds < 1.
    """
    if scale not in registry.SCALES:
        raise ValueError(f"--scale: unknown scale {scale!r}; choose one of "
                         f"{list(registry.SCALES)}")
    if not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"--seeds: expected an integer >= 1, got {seeds!r}")
    return registry.select(papers, only)


def main(argv) -> None:
    """absl main."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
        rows = validate(FLAGS.papers, FLAGS.scale, FLAGS.seeds, FLAGS.only)
    except ValueError as e:
        sys.exit(f"tfdp-reproduce: error: {e}")
    if FLAGS.report:
        runner.recompute_rows(FLAGS.results_dir)
        report.generate(FLAGS.results_dir, FLAGS.report_path)
        print(f"tfdp-reproduce: report written from {FLAGS.results_dir}")
        return
    if FLAGS.dry_run:
        runner.dry_run(rows, FLAGS.scale, FLAGS.seeds, results_dir=FLAGS.results_dir)
        return
    tasks = runner.tasks_for(rows, FLAGS.scale, FLAGS.seeds)
    data_dir = FLAGS.data_dir or os.environ.get("TFDP_DATA_DIR")
    runner.run_tasks(tasks, FLAGS.scale, FLAGS.results_dir, FLAGS.work_dir, data_dir)
    counts: dict[str, int] = {}
    for row in rows:
        rec = runner.compute_row(row, FLAGS.scale, FLAGS.seeds, FLAGS.results_dir)
        if row.jobs.get(FLAGS.scale) is None:
            verdict = "no job at this scale"
        elif rec is None:
            verdict = "not run (a job failed or the scale's grid lacks this cell)"
        else:
            verdict = rec["verdict"]
            if verdict == extract.NOT_AVAILABLE:
                print(f"{row.id}: {extract.NOT_AVAILABLE} ({rec['reason']})")
        counts[verdict] = counts.get(verdict, 0) + 1
    print("tfdp-reproduce: " + ", ".join(f"{v}: {n}" for v, n in sorted(counts.items())))
    if FLAGS.write_report:
        report.generate(FLAGS.results_dir, FLAGS.report_path)


def run() -> None:
    """Console entry point (tfdp-reproduce)."""
    cli.handle_help(sys.argv, lambda kind: cli.app_help(__doc__, OWN_FLAGS, kind))
    app.run(main)


if __name__ == "__main__":
    run()
