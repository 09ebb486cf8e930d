"""A row's record (our value and verdict) computed from its finished job JSONs.

Rows are recomputed from the job JSONs on every call (cheap); a row whose jobs are not the
ones its JSON recorded is marked stale, its earlier number kept only as `previous_value`.
"""

from __future__ import annotations

from typing import Any, Iterable

from tfdp.reproduce import extract, registry, values, verdicts
from tfdp.reproduce.freshness import kernel_mismatch, outdated
from tfdp.reproduce.jobfiles import _load_row, _row_file, _write_json, load_job, load_rows
from tfdp.reproduce.registry import Row
from tfdp.reproduce.tasks import Task, expected_jobs, unavailable


_DATA_SIZES = {"mnist": 60000, "cifar10": 50000}


def _float(v: Any) -> float | None:
    try:
        out = float(v)
    except (TypeError, ValueError):
        return None
    return out


def _mean_or_none(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _paper_length(row: Row, role: str, steps: float | None, epochs: float | None,
                  cfg: dict) -> tuple[float | None, float | None]:
    """(epochs, estimated steps) of the row's full-scale (paper) job of the same role.

    Steps are estimated from ours: steps per epoch scaled by the ratio of training-set sizes
    and batch sizes (the step unit is the same method's at both scales).
    """
    full = row.jobs.get("full", {}).get(role)
    if full is None:
        return None, None
    train = registry.train_job("full", full.depends) if full.depends else full
    if train.kind != "train":
        return None, None
    fcfg = registry.settings(train.flagfile, train.args)
    f_epochs = _float(fcfg.get("epochs"))
    if f_epochs is None or not steps or not epochs:
        return f_epochs, None
    dataset = cfg.get("dataset") or fcfg.get("dataset") or ""
    n_ours = _float(cfg.get("num_train")) or _DATA_SIZES.get(dataset)
    n_full = _float(fcfg.get("num_train")) or _DATA_SIZES.get(dataset)
    b_ours, b_full = _float(cfg.get("batch_size")), _float(fcfg.get("batch_size"))
    if not (n_ours and n_full and b_ours and b_full):
        return f_epochs, None
    return f_epochs, steps / epochs * f_epochs * (n_full / n_ours) * (b_ours / b_full)


def uses_claimed_certificates(evaluation: dict) -> bool:
    """Whether an evaluation's certificates are the paper's claimed (unsound) ones.

    Evaluations run with --allow_unsound_certificates name every such field with
    `claimed_certified_accuracy` in it (`claimed_certified_accuracy_on_attacked_inputs`
    per attack and size, `clean_claimed_certified_accuracy`); any of them counts.
    """
    if any("claimed_certified_accuracy" in key for key in evaluation):
        return True
    return any("claimed_certified_accuracy" in key
               for entry in (evaluation.get("attacks") or {}).values()
               for cell in entry.values() if isinstance(cell, dict) for key in cell)


def _certified_counts(row: Row, evaluation: dict) -> tuple[list[int], bool]:
    """Certified examples at the row's sizes (mean over attacks), and whether they are the
    claimed (unsound) certificates."""
    n = int(evaluation.get("num_examples") or 0)
    p = row.param
    sizes = (p["sizes"].split(",") if "sizes" in p else [p["size"]] if "size" in p else None)
    claimed = uses_claimed_certificates(evaluation)
    counts = []
    if row.extractor == "eot_soundness" or sizes is None:
        cert = extract._clean_certified(evaluation)  # pylint: disable=protected-access
        counts = [int(round(float(v) * n)) for v in cert.values() if v is not None]
        return counts, claimed
    for size in sizes:
        key = extract._size_key(size)  # pylint: disable=protected-access
        vals = [extract._field(entry[key], "certified_accuracy")  # pylint: disable=protected-access
                for entry in evaluation.get("attacks", {}).values() if key in entry]
        vals = [float(v) for v in vals if v is not None]
        if vals:
            counts.append(int(round(sum(vals) / len(vals) * n)))
    return counts, claimed


def row_models(row: Row, scale: str, records: dict[str, list[dict]],
               results_dir: str) -> list[values.Model]:
    """What each role's model was (accuracy, length, privacy, settings), from the job files.

    Args:
      records: role -> the finished job JSONs of the role (one per seed).
    """
    out = []
    for role, recs in sorted(records.items()):
        job = row.jobs[scale][role]
        train = registry.train_job(scale, job.depends) if job.depends else job
        if train.kind != "train":
            continue
        cfg = registry.settings(train.flagfile, train.args)
        trains = []
        for rec in recs:
            if job.depends:
                t = load_job(results_dir, scale, Task(train, rec["seed"]).key)
                trains.append(t["output"] if t else {})
            else:
                trains.append(rec["output"])
        evals = [rec["output"].get("evaluation") for rec in recs if job.depends]
        evals = [e for e in evals if e]
        if evals:
            per_seed = [(rec["seed"], _float(rec["output"]["evaluation"].get("clean_accuracy")))
                        for rec in recs if rec["output"].get("evaluation")]
            dataset = evals[0].get("dataset") or cfg.get("dataset", "")
        else:
            per_seed = [(rec["seed"], _float(t.get("metrics", {}).get("test_accuracy")))
                        for rec, t in zip(recs, trains)]
            dataset = cfg.get("dataset", "")
        per_seed = [(sd, 100.0 * a) for sd, a in per_seed if a is not None]
        acc = _mean_or_none([a / 100.0 for _, a in per_seed])
        steps = _mean_or_none([_float(t.get("metrics", {}).get("steps")) for t in trains])
        epochs = _mean_or_none([_float(t.get("metrics", {}).get("epochs_completed"))
                                for t in trains])
        p_epochs, p_steps = _paper_length(row, role, steps, epochs, cfg)
        full = row.jobs.get("full", {}).get(role)
        full_train = (registry.train_job("full", full.depends) if full is not None
                      and full.depends else full)
        paper_command = (scale != "full" and full_train is not None
                         and (full_train.flagfile, full_train.args) == (train.flagfile,
                                                                        train.args))
        ledger = (trains[0].get("ledger") or {}) if trains else {}
        counts, claimed = [], False
        if row.extractor in values.CERTIFIED_EXTRACTORS:
            for e in evals:
                c, cl = _certified_counts(row, e)
                counts += c
                claimed = claimed or cl
        out.append(values.Model(
            role=role, method=train.method or "", dataset=dataset,
            accuracy=None if acc is None else 100.0 * acc, epochs=epochs, steps=steps,
            paper_epochs=p_epochs, paper_steps=p_steps, paper_command=paper_command,
            claimed_epsilon=_float(ledger.get("claimed_epsilon")),
            sound_epsilon=_float(ledger.get("epsilon")), certified=counts,
            claimed_certificates=claimed or any(uses_claimed_certificates(e) for e in evals),
            config=cfg, seed_accuracies=per_seed))
    return out


def compute_row(row: Row, scale: str, seeds: int, results_dir: str,
                write: bool = True) -> dict | None:
    """Our value and verdict for a row from its finished jobs; writes the row JSON.

    Returns:
      The row record, a record with verdict "not available in this build" when a job cannot
      run here, or None when the row has no jobs at this scale or some job has not finished
      (the report then says "not run at this scale").
    """
    jobs = row.jobs.get(scale)
    if not jobs:
        return None
    base = {"id": row.id, "paper": row.paper, "source": row.source, "setting": row.setting,
            "metric": row.metric, "published": row.published,
            "published_text": row.published_text, "criterion": row.criterion.describe(row.unit),
            "scale": scale}
    outs: dict[str, list[dict]] = {}
    by_role: dict[str, list[dict]] = {}
    records = []
    stale = []
    jobs_by_id = {job.id: job for job in jobs.values()}
    for role, job in sorted(jobs.items()):
        why = unavailable(job) or (unavailable(registry.train_job(scale, job.depends))
                                   if job.depends else None)
        if why is not None:
            rec = dict(base, verdict=values.NOT_AVAILABLE, reason=why, value=None)
            return rec
        for seed in (range(1, seeds + 1) if job.seeded else (None,)):
            task = Task(job, seed)
            done = load_job(results_dir, scale, task.key)
            if done is None:
                return None
            why_stale = outdated(results_dir, scale, task, done)
            if why_stale is not None:
                stale.append((task.key, why_stale))
            outs.setdefault(role, []).append(done["output"])
            by_role.setdefault(role, []).append(done)
            records.append(done)
    if stale:
        old = _load_row(results_dir, scale, row.id) or {}
        rec = _stale_record(row, old, [r["key"] for r in records], [k for k, _ in stale],
                            "; ".join(w for _, w in stale))
        rec.update({k: v for k, v in base.items() if k not in rec})
        if write:
            _write_json(_row_file(results_dir, scale, row.id), rec)
        return rec
    value = extract.extract(row, outs)
    if value is None:
        return None
    flags = [why for r in records
             if (why := kernel_mismatch(Task(jobs_by_id[r["job"]], r["seed"]), r)) is not None]
    seeded = any(job.seeded for job in jobs.values())
    verdict, reason = verdicts.verdict(
        row, value, row_models(row, scale, by_role, results_dir),
        seeds=seeds if seeded and scale in registry.DECIDING_SCALES else None)
    if flags:
        reason += ("; flagged, not rerun: " + "; ".join(flags) +
                   " (another noise stream than the command draws today)")
    rec = dict(base, value=value.value, value_text=value.text, per_seed=value.per_seed,
               value_sd=value.sd, detail=value.detail, verdict=verdict, reason=reason,
               seeds=sorted({r["seed"] for r in records if r["seed"] is not None}),
               jobs=[r["key"] for r in records], commands=[r["command"] for r in records],
               adopted_from=sorted({r["output"]["adopted_from"] for r in records
                                    if "adopted_from" in r["output"]}),
               versions=records[0].get("versions", {}))
    if flags:
        rec["flags"] = flags
    if write:
        _write_json(_row_file(results_dir, scale, row.id), rec)
    return rec


def recompute_rows(results_dir: str, rows: Iterable[Row] | None = None) -> int:
    """Recomputes every row JSON from the finished job JSONs (runs nothing).

    A row keeps the number of seeds its JSON recorded (1 when it has none). Rows whose jobs
    have not all finished are left without a JSON.

    Returns:
      The number of row JSONs written.
    """
    written = 0
    existing = load_rows(results_dir)
    for row in (registry.ROWS if rows is None else rows):
        for scale in row.jobs:
            old = existing.get((scale, row.id))
            seeds = max(1, len(old.get("seeds") or [])) if old else 1
            rec = compute_row(row, scale, seeds, results_dir)
            if rec is not None and rec.get("verdict") != values.NOT_AVAILABLE:
                written += 1
            elif rec is None and old is not None:
                mark_stale(row, scale, seeds, old, results_dir)
    return written


def _stale_record(row: Row, old: dict, want: list[str], rerun: list[str], why: str) -> dict:
    """A stale row record: no value; the earlier number only as `previous_value`."""
    rec = {k: v for k, v in old.items() if k not in ("value", "value_text", "per_seed",
                                                      "value_sd", "detail", "reason",
                                                      "jobs", "commands", "verdict")}
    rec.update(
        id=row.id, verdict=values.STALE, value=None, value_text="—",
        previous_value=old.get("previous_value", old.get("value")),
        previous_value_text=old.get("previous_value_text", old.get("value_text")),
        previous_jobs=old.get("jobs") or old.get("previous_jobs") or [], expected_jobs=want,
        reason=f"{why}; the earlier number is not a result of the current jobs; rerun: "
               f"{', '.join(rerun)}",
        criterion=row.criterion.describe(row.unit), setting=row.setting, source=row.source)
    return rec


def mark_stale(row: Row, scale: str, seeds: int, old: dict, results_dir: str) -> bool:
    """Marks a row JSON stale when its recorded jobs are not the row's current jobs.

    The old number moves to `previous_value` (with the jobs it came from); `value` is None, so
    the report never shows it as a result of the new definition.

    Returns:
      True if the JSON was rewritten.
    """
    want = expected_jobs(row, scale, seeds)
    had = old.get("jobs") or old.get("previous_jobs") or []
    if sorted(had) == sorted(want):
        return False
    if old.get("verdict") == values.STALE and old.get("expected_jobs") == want:
        return False
    missing = sorted(set(want) - set(had))
    rec = _stale_record(row, old, want, missing,
                        "the row's definition changed (issue 29: attack-size unit, baseline "
                        "settings or Monte-Carlo scoring); its earlier number came from other "
                        "jobs")
    _write_json(_row_file(results_dir, scale, row.id), rec)
    return True
