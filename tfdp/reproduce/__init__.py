"""tfdp-reproduce: the papers' published numbers, the runs that reproduce them, and the report.

Modules:
  registry: every published number (paper, figure/table, setting, metric, pass criterion)
    and, per scale, the tfdp-train / tfdp-evaluate / tfdp-audit jobs that measure it.
  (each paper's closed-form jobs live in its package: tfdp/papers/<paper>/closed_forms.py)
  extract: metric extractors (job outputs -> our value) and verdicts.
  runner: runs the jobs (resumable), writes one JSON per job and per row.
  report: generates REPRODUCTION.md and its figures from results/reproduce/.
"""
