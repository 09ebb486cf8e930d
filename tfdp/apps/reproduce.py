"""tfdp-reproduce: reruns the papers' published-number checks and regenerates REPRODUCTION.md.

  tfdp-reproduce --scale=smoke                      # every paper, CI scale
  tfdp-reproduce --scale=short --papers=adlm,gpm    # about 20 CPU minutes
  tfdp-reproduce --scale=reduced --papers=adlm --seeds=3 --only=adlm.mnist.adlm.eps0.25
  tfdp-reproduce --dry_run --scale=full             # the GPU commands and their compute
  tfdp-reproduce --report --repository              # regenerate the committed report only

Results go to runs/reproduce/results/ (the report to runs/reproduce/results/REPRODUCTION.md);
--repository reads and writes the committed record instead (results/reproduce/ and
REPRODUCTION.md). Finished jobs are skipped (their JSON is in RESULTS_DIR/<scale>/jobs/), so a
killed grid resumes where it stopped. Rows whose trainer or flagfile is not in this build are
reported as "not available in this build".
"""

from __future__ import annotations

import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from tfdp.apps import cli  # noqa: E402
from tfdp.reproduce import registry, report, row_records, runner, tasks, values  # noqa: E402

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
flags.DEFINE_bool("repository", False,
                  "Read and write this repository's committed record: results/reproduce/ and "
                  "REPRODUCTION.md at the repository root (how the committed report is made). "
                  "Without it nothing is written into the repository's results/: the JSONs go "
                  "to runs/reproduce/results/ and the report to RESULTS_DIR/REPRODUCTION.md.")
flags.DEFINE_string("results_dir", None, "Result JSONs (default: runs/reproduce/results, or "
                    "results/reproduce with --repository).")
flags.DEFINE_string("work_dir", tasks.DEFAULT_WORK, "Run directories (not committed).")
flags.DEFINE_string("report_path", None, "Report file (default: RESULTS_DIR/REPRODUCTION.md, or "
                    "REPRODUCTION.md at the repository root with --repository).")
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
    FLAGS.results_dir, FLAGS.report_path = runner.output_paths(
        FLAGS.repository, FLAGS.results_dir, FLAGS.report_path)
    if not FLAGS.repository:
        os.makedirs(FLAGS.results_dir, exist_ok=True)
        for name in ("preamble.md", "earlier_runs.md"):  # the report's hand-written parts
            src = os.path.join(tasks.DEFAULT_RESULTS, name)
            dst = os.path.join(FLAGS.results_dir, name)
            if os.path.exists(src) and not os.path.exists(dst):
                shutil.copyfile(src, dst)
    if FLAGS.report:
        row_records.recompute_rows(FLAGS.results_dir)
        report.generate(FLAGS.results_dir, FLAGS.report_path)
        print(f"tfdp-reproduce: {FLAGS.report_path} written from {FLAGS.results_dir}")
        return
    if FLAGS.dry_run:
        runner.dry_run(rows, FLAGS.scale, FLAGS.seeds, results_dir=FLAGS.results_dir)
        return
    todo = tasks.tasks_for(rows, FLAGS.scale, FLAGS.seeds)
    data_dir = FLAGS.data_dir or os.environ.get("TFDP_DATA_DIR")
    runner.run_tasks(todo, FLAGS.scale, FLAGS.results_dir, FLAGS.work_dir, data_dir)
    counts: dict[str, int] = {}
    for row in rows:
        rec = row_records.compute_row(row, FLAGS.scale, FLAGS.seeds, FLAGS.results_dir)
        if row.jobs.get(FLAGS.scale) is None:
            verdict = "no job at this scale"
        elif rec is None:
            verdict = "not run (a job failed or the scale's grid lacks this cell)"
        else:
            verdict = rec["verdict"]
            if verdict == values.NOT_AVAILABLE:
                print(f"{row.id}: {values.NOT_AVAILABLE} ({rec['reason']})")
        counts[verdict] = counts.get(verdict, 0) + 1
    print("tfdp-reproduce: " + ", ".join(f"{v}: {n}" for v, n in sorted(counts.items())))
    if FLAGS.write_report:
        report.generate(FLAGS.results_dir, FLAGS.report_path)
        print(f"tfdp-reproduce: report {FLAGS.report_path}")


def run() -> None:
    """Console entry point (tfdp-reproduce)."""
    cli.handle_help(sys.argv, lambda kind: cli.app_help(__doc__, OWN_FLAGS, kind))
    cli.quiet_start(sys.argv)  # the registry reads trainer options, which import TensorFlow
    app.run(main)


if __name__ == "__main__":
    run()
