"""Registry of the papers' published numbers and of the runs that reproduce them.

A `Row` is one published number (or one published ordering): its paper, figure/table, setting,
metric, the published value, a pass criterion (tfdp's choice where the paper gives no tolerance),
and, per scale, the jobs that measure it. A `Job` is one tfdp-train / tfdp-evaluate /
tfdp-audit / tfdp-bench command (or an in-process closed-form computation); rows share jobs.

Each paper declares its rows in its own package, `tfdp/papers/<paper>/rows.py`, named by the
`rows` target of its `tfdp.registry.Paper`. This module holds what the papers share (the row
and job types and the job builders) and assembles the rows of every paper `tfdp.registry`
lists, in its order. It imports no paper: it loads them through `tfdp.registry` on first use
of ROWS, ROWS_BY_ID, PAPERS, PAPER_TITLES or PAPER_BASELINES, so a rows module may import
this one. Besides its rows function, a paper's rows module may define

  baseline_for(method, cfg) -> Baseline | None: the baseline (network and settings) a model
    of its rows is, from the model's method and settings (`settings`); absent: no baselines.
  SIZE_UNITS = {dataset: "0,1" | "-1,1"}: the pixel range its rows' attack sizes are
    fractions of, per data set; absent: none.
  BASELINE_METHODS = (method, ...): the baseline methods among its rows' models (the tests
    check that each is declared by `baseline_for`); absent: none.
  model_note(method, cfg, near_chance) -> str | None: a fact about a model of one of the
    paper's own methods (in any paper's row) that a generated reason states; absent: none.

The scales are described in `rowtypes`, the commands of the trainer rows in `builders`.
"""

from __future__ import annotations

import dataclasses
import importlib
import types

from tfdp import registry as _papers
# The row types (`rowtypes`) and the job builders (`builders`) live in their own modules; a
# paper's rows module names them through this one, the papers' interface to the rows.
from tfdp.reproduce.builders import (EOT_ARGS, TRAINER_SCALES, MonteCarloEval, combine,
                                     eot_soundness_row, eval_args, noisy_methods, per_scale,
                                     python, roles, row_models, settings, settings_from_text,
                                     train_command, train_job, trainer_jobs, with_min_seeds)
from tfdp.reproduce.rowtypes import (APPS, COMMANDS, DECIDING_SCALES, SCALE_NOTES, SCALES,
                                     Baseline, Criterion, Job, Row)

__all__ = ["EOT_ARGS", "TRAINER_SCALES", "MonteCarloEval", "combine", "eot_soundness_row",
           "eval_args", "noisy_methods", "per_scale", "python", "roles", "row_models",
           "settings", "settings_from_text", "train_command", "train_job", "trainer_jobs",
           "with_min_seeds", "APPS", "COMMANDS", "DECIDING_SCALES", "SCALE_NOTES", "SCALES",
           "Baseline", "Criterion", "Job", "Row", "rows_module", "all_rows", "reload",
           "select"]


# Rows: assembled from the papers (tfdp.registry)


def rows_module(paper: _papers.Paper) -> types.ModuleType | None:
    """The module of a paper's rows target (it also holds the optional `baseline_for`,
    `SIZE_UNITS` and `BASELINE_METHODS`), or None for a paper without rows."""
    if paper.rows is None:
        return None
    return importlib.import_module(paper.rows.partition(":")[0])


def _decorate(row: Row, module: types.ModuleType) -> Row:
    """Attaches the row's baselines and attack-size unit, read from its jobs and from its
    paper's rows module (`baseline_for`, `SIZE_UNITS`)."""
    baseline_for = getattr(module, "baseline_for", None)
    size_units = getattr(module, "SIZE_UNITS", {})
    baselines, units = [], set()
    for _, train in row_models(row):
        cfg = settings(train.flagfile, train.args)
        dataset = cfg.get("dataset", "")
        found = None if baseline_for is None else baseline_for(train.method or "", cfg)
        if found is not None and found not in baselines:
            baselines.append(found)
        if dataset in size_units:
            units.add(size_units[dataset])
    has_attacks = any(j.kind == "evaluate" for jobs in row.jobs.values() for j in jobs.values())
    unit = units.pop() if has_attacks and len(units) == 1 else None
    return dataclasses.replace(row, baselines=tuple(baselines), size_unit=unit)


def all_rows() -> list[Row]:
    """Every registered row, in report order: each paper's (`tfdp.registry.papers()` order),
    as its rows target returns them.

    Raises:
      ValueError: a paper returns a row of another paper.
      AssertionError: two rows share an id.
    """
    rows = []
    for paper in _papers.papers().values():
        module = rows_module(paper)
        if module is None:
            continue
        for row in _papers.load(paper.rows)():
            if row.paper != paper.name:
                raise ValueError(f"paper {paper.name!r}: its rows target {paper.rows!r} "
                                 f"returned row {row.id!r} of paper {row.paper!r}")
            rows.append(_decorate(row, module))
    ids = [r.id for r in rows]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise AssertionError(f"duplicate row ids: {sorted(dupes)}")
    return rows


# Computed on first use (module __getattr__) and recomputed in place by reload():
#   ROWS: list[Row], every row in report order; ROWS_BY_ID: dict[str, Row];
#   PAPERS: tuple[str, ...], the papers' names in report order; PAPER_TITLES: name -> title;
#   PAPER_BASELINES: name -> the baseline methods of its rows (its BASELINE_METHODS).
_LAZY = ("ROWS", "ROWS_BY_ID", "PAPERS", "PAPER_TITLES", "PAPER_BASELINES")


def _refresh() -> None:
    papers = _papers.papers()
    rows = all_rows()
    new = {
        "ROWS": rows,
        "ROWS_BY_ID": {r.id: r for r in rows},
        "PAPERS": tuple(papers),
        "PAPER_TITLES": {name: p.title for name, p in papers.items()},
        "PAPER_BASELINES": {name: tuple(getattr(rows_module(p), "BASELINE_METHODS", ()))
                            for name, p in papers.items()},
    }
    state = globals()
    for name, value in new.items():
        old = state.get(name)
        if isinstance(old, list):
            old[:] = value
        elif isinstance(old, dict):
            old.clear()
            old.update(value)
        else:
            state[name] = value


def __getattr__(name: str):
    if name in _LAZY:
        try:
            _refresh()
        except AttributeError as e:  # not to be mistaken for a missing module attribute
            raise RuntimeError(f"tfdp.reproduce.registry: assembling the rows failed: {e}") from e
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _loaded(name: str):
    """A lazily computed module attribute (for this module's own functions)."""
    return globals()[name] if name in globals() else __getattr__(name)


def reload() -> None:
    """Re-reads the papers (`tfdp.registry.reload()`: the built-in ones and TFDP_PAPERS') and
    recomputes the rows. ROWS and ROWS_BY_ID (and PAPER_TITLES, PAPER_BASELINES) are updated
    in place, so a module holding a reference sees the new rows; PAPERS is a new tuple."""
    _papers.reload()
    _refresh()


def select(papers: list[str] | None = None, only: list[str] | None = None) -> list[Row]:
    """Rows of the given papers (default all), restricted to ids in `only` when given.

    Raises:
      ValueError: naming --papers or --only for an unknown paper or row id.
    """
    known, rows_by_id = _loaded("PAPERS"), _loaded("ROWS_BY_ID")
    papers = list(papers or known)
    bad = [p for p in papers if p not in known]
    if bad:
        raise ValueError(f"--papers: unknown paper(s) {bad}; choose from {list(known)}")
    rows = [r for r in _loaded("ROWS") if r.paper in papers]
    if only:
        unknown = [i for i in only if i not in rows_by_id]
        if unknown:
            raise ValueError(f"--only: unknown row id(s) {unknown}")
        rows = [r for r in rows if r.id in set(only)]
    return rows
