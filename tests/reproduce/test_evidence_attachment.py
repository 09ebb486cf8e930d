"""Issue 39: a reason states only what its row's jobs carry (claimed certificates, the notes
of the models it rests on, the network a baseline ran), and a job whose command now selects
other settings or another noise kernel than it ran with is rerun or flagged."""

import dataclasses
import json
import os

from tfdp.reproduce import (extract, freshness, jobfiles, registry, row_records, runner, values,
                            verdicts)

_RESULTS = os.path.join(runner.REPO_ROOT, "results", "reproduce")


def _model(**kw):
    base = dict(role="run", method="secure_sgd", dataset="mnist", accuracy=11.0)
    base.update(kw)
    return values.Model(**base)


def test_claimed_certificates_are_found_under_the_names_evaluations_write():
    cell = {"accuracy": 0.5, "claimed_certified_accuracy_on_attacked_inputs": 0.4}
    claimed = {"attacks": {"fgsm": {"0.1": cell}}, "num_examples": 100}
    assert row_records.uses_claimed_certificates(claimed)
    sound = {"attacks": {"fgsm": {"0.1": {"accuracy": 0.5,
                                          "certified_accuracy_on_attacked_inputs": 0.4}}}}
    assert not row_records.uses_claimed_certificates(sound)
    assert row_records.uses_claimed_certificates({"clean_claimed_certified_accuracy": {}})


def test_every_reason_on_claimed_certificates_says_so():
    row = registry.ROWS_BY_ID["stobatch.mnist.certified.mu0.05"]
    reason = verdicts.verdict(row, extract.Value(40.0, "", [40.0]), [_model(
        method="stobatch", accuracy=80.0, certified=[50], claimed_certificates=True)])[1]
    assert "certificates are the paper's claimed (unsound) ones" in reason
    # In the committed rows: a row whose evaluations wrote claimed certificates says so.
    found = 0
    for (scale, rid), rec in jobfiles.load_rows(_RESULTS).items():
        row = registry.ROWS_BY_ID.get(rid)
        if row is None or rec.get("value") is None or not row.jobs.get(scale):
            continue
        uses = False
        for job in row.jobs[scale].values():
            for seed in (rec.get("seeds") or [1]) if job.seeded else [None]:
                done = runner.load_job(_RESULTS, scale, runner.Task(job, seed).key) or {}
                evaluation = (done.get("output") or {}).get("evaluation")
                uses = uses or bool(
                    evaluation and row_records.uses_claimed_certificates(evaluation))
        if uses:
            found += 1
            assert "claimed (unsound)" in rec["reason"], (scale, rid)
    assert found > 0


def test_hgm_longer_training_note_only_on_secure_sgd_models():
    cfg = registry.settings("flags/hgm/mnist_reduced.flags", ("--epsilon=2",))
    row = registry.ROWS_BY_ID["hgm.mnist.secure_sgd_minus_secure_sgd_agm"]
    for method, expect in (("secure_sgd", True), ("secure_sgd_agm", False),
                           ("pixeldp", False), ("hgm_pixeldp", False)):
        reason = verdicts.verdict(row, extract.Value(1.0, "", [1.0]), [_model(
            method=method, config=cfg)])[1]
        assert "sound l_inf sensitivity" in reason or method == "pixeldp", (method, reason)
        assert ("5-10 times the epochs" in reason) == expect, (method, reason)
    # The committed rows: the note appears only where a Secure-SGD model is behind the row.
    for (scale, rid), rec in jobfiles.load_rows(_RESULTS).items():
        if "5-10 times the epochs" in (rec.get("reason") or ""):
            assert "secure_sgd (" in rec["reason"] or "secure_sgd:" in rec["reason"], rid


def test_a_baseline_is_described_as_the_network_its_job_ran():
    row = registry.ROWS_BY_ID["adlm.mnist.dpsgd.eps0.25"]
    job = row.jobs["smoke"]["run"]
    cfg = registry.settings(job.flagfile, job.args)
    assert cfg["dpsgd_model"] == "mlp"
    reason = verdicts.verdict(row, extract.Value(50.0, "", [50.0]), [_model(
        method="dpsgd", accuracy=50.0, config=cfg)])[1]
    assert "tfdp's MLP (substitute) [mlp]" in reason, reason
    assert "small CNN" not in reason, reason
    with open(os.path.join(_RESULTS, "smoke", row.id + ".json"), encoding="utf-8") as f:
        committed = json.load(f)
    assert "small CNN" not in committed.get("reason", ""), committed.get("reason")


def _eval_task():
    row = registry.ROWS_BY_ID["stobatch.mnist.eot_soundness"]
    return next(t for t in runner.tasks_for([row], "smoke", 1) if t.job.kind == "evaluate")


def test_an_evaluation_with_another_noise_kernel_than_its_command_selects_is_flagged():
    task = _eval_task()
    done = {"output": {"evaluation": {"noise_kernel": "portable"}}}
    why = runner.kernel_mismatch(task, done)
    assert why is not None and "portable kernel" in why and "selects fused" in why
    # "auto" that fell back on the machine that ran it selected portable there.
    fell_back = {"output": {"evaluation": {"noise_kernel": "portable",
                                           "noise_kernel_fallback": "no compiler"}}}
    assert runner.kernel_mismatch(task, fell_back) is None
    assert runner.kernel_mismatch(task, {"output": {"evaluation": {"noise_kernel": "fused"}}}) \
        is None
    explicit = runner.Task(dataclasses.replace(task.job, args=task.job.args + (
        "--noise_kernel=portable",)), 1)
    assert runner.kernel_mismatch(explicit, done) is None


def test_committed_evaluations_ran_their_commands_kernel_or_their_rows_are_flagged():
    rows = jobfiles.load_rows(_RESULTS)
    for (scale, rid), rec in rows.items():
        row = registry.ROWS_BY_ID.get(rid)
        if row is None or rec.get("value") is None or not row.jobs.get(scale):
            continue
        for job in row.jobs[scale].values():
            for seed in (rec.get("seeds") or [1]) if job.seeded else [None]:
                task = runner.Task(job, seed)
                done = runner.load_job(_RESULTS, scale, task.key)
                why = runner.kernel_mismatch(task, done) if done else None
                if why is not None:
                    assert why in "; ".join(rec.get("flags") or []), (scale, rid, why)
                    assert "flagged, not rerun" in rec["reason"], (scale, rid)


def test_a_job_whose_flagfile_changed_since_it_ran_is_outdated(tmp_path):
    row = registry.ROWS_BY_ID["adlm.mnist.dpsgd.eps0.25"]
    task = runner.tasks_for([row], "smoke", 1)[0]
    assert task.job.flagfile == "flags/baselines/dpsgd_smoke.flags"
    now = runner.job_settings(task.job)
    assert "dpsgd_clipping" not in now  # the default (auto), no pin (issue 39)
    same = {"status": "ok", "settings": now, "output": {}}
    assert freshness.settings_changed(task, same) is None
    pinned = dict(same, settings=dict(now, dpsgd_clipping="vectorized"))
    why = freshness.settings_changed(task, pinned)
    assert why is not None and "dpsgd_clipping: vectorized -> (unset)" in why
    res = str(tmp_path)
    os.makedirs(os.path.join(res, "smoke", "jobs"))
    with open(os.path.join(res, "smoke", "jobs", task.key + ".json"), "w",
              encoding="utf-8") as f:
        json.dump(pinned, f)
    assert runner.outdated(res, "smoke", task, runner.load_job(res, "smoke", task.key)) == why
    # The options the runner sets on every command do not count.
    assert freshness.settings_changed(task, dict(same, settings=dict(now, seed="7"))) is None


def test_no_dpsgd_flagfile_pins_a_clipping_path_without_saying_why():
    flag_dir = os.path.join(runner.REPO_ROOT, "flags", "baselines")
    for name in sorted(os.listdir(flag_dir)):
        if not name.startswith("dpsgd"):
            continue
        with open(os.path.join(flag_dir, name), encoding="utf-8") as f:
            lines = f.read().splitlines()
        for i, line in enumerate(lines):
            if line.startswith("--dpsgd_clipping=") and line != "--dpsgd_clipping=auto":
                assert i > 0 and lines[i - 1].startswith("# Why not auto:"), name


def test_running_the_grid_reruns_an_evaluation_with_another_kernel(tmp_path, monkeypatch):
    task = _eval_task()
    train = runner.model_task(task, "smoke")
    res, work = str(tmp_path / "res"), str(tmp_path / "work")
    os.makedirs(os.path.join(res, "smoke", "jobs"))
    os.makedirs(os.path.join(work, "smoke", train.key))
    open(os.path.join(work, "smoke", train.key, "model.keras"), "w").close()
    for t, out in ((train, {"weights_sha256": "w"}),
                   (task, {"evaluation": {"noise_kernel": "portable"}})):
        rec = {"status": "ok", "key": t.key, "settings": runner.job_settings(t.job),
               "output": out, "finished_utc": "2026-11-27T10:00:00Z",
               "started_utc": "2026-11-27T10:00:00Z", "model_weights_sha256": "w",
               "model_finished_utc": "2026-11-27T10:00:00Z"}
        with open(os.path.join(res, "smoke", "jobs", t.key + ".json"), "w",
                  encoding="utf-8") as f:
            json.dump(rec, f)
    ran = []
    monkeypatch.setattr(runner, "run_task", lambda t, *a, **k: ran.append(t.key) or {
        "status": "ok"})
    runner.run_tasks([train, task], "smoke", res, work, None, log=lambda m: None)
    assert ran == [task.key]


def test_the_report_cell_marks_fewer_seeds_than_needed_and_a_flagged_kernel():
    # lazy: the report module loads matplotlib only to draw, importing it is cheap
    from tfdp.reproduce import report  # pylint: disable=import-outside-toplevel
    row = registry.ROWS_BY_ID["stobatch.mnist.secure_sgd.eps2"]
    rec = {"verdict": "inconclusive", "value": 11.0, "value_text": "11.00%", "seeds": [1],
           "jobs": ["eval.x@seed1"], "scale": "reduced"}
    cell = report._cell(rec, row)  # pylint: disable=protected-access
    assert "(1 seed of 3 needed)" in cell and "**inconclusive**" in cell
    cell_of = report._cell  # pylint: disable=protected-access
    assert "(1 seed)" in cell_of(dict(rec, scale="smoke"), row)
    flagged = cell_of(dict(rec, flags=["x drew its noise with the portable kernel"]), row)
    assert "flagged: noise kernel" in flagged
    with open(os.path.join(runner.REPO_ROOT, "REPRODUCTION.md"), encoding="utf-8") as f:
        text = f.read()
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| `{row.id}` |"))
    with open(os.path.join(_RESULTS, "reduced", row.id + ".json"), encoding="utf-8") as f:
        rec = json.load(f)
    if len(rec.get("seeds") or []) < 3 and rec["verdict"] != values.STALE:
        assert "of 3 needed)" in line, line
