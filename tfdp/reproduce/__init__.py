"""tfdp-reproduce: the papers' published numbers, the runs that reproduce them, and the report.

Modules:
  registry: every published number (paper, figure/table, setting, metric, pass criterion)
    and, per scale, the tfdp-train / tfdp-evaluate / tfdp-audit jobs that measure it.
  closed_forms: in-process jobs for the closed-form numbers (HGM Figure 1, GPM Figure 4).
  extract: metric extractors (job outputs -> our value) and verdicts.
  runner: runs the jobs (resumable), writes one JSON per job and per row.
  report: generates REPRODUCTION.md and its figures from results/reproduce/.
"""
