"""The runner: resumable grids, row JSONs, "not available in this build", dry runs."""

import json
import os
import subprocess
import sys

import pytest

from tfdp.reproduce import jobfiles, registry, row_records, runner, values

_CLOSED = ["hgm.delta_threshold", "gpm.fig4.lower.b0.001", "gpm.table4.expect.d256.e0.5"]


class _Killed(Exception):
    pass


def test_interrupted_grid_redoes_only_unfinished_jobs(tmp_path):
    rows = registry.select(None, _CLOSED)
    tasks = runner.tasks_for(rows, "smoke", 1)
    assert [t.key for t in tasks] == ["python.hgm.figure1", "python.gpm.figure4",
                                      "python.gpm.table4"]
    res, work = str(tmp_path / "res"), str(tmp_path / "work")
    lines = []

    def kill_after_first(msg):  # the grid is killed once the first job has finished
        lines.append(msg)
        if msg.strip().startswith("done"):
            raise _Killed

    with pytest.raises(_Killed):
        runner.run_tasks(tasks, "smoke", res, work, None, log=kill_after_first)
    assert runner.load_job(res, "smoke", "python.hgm.figure1") is not None
    assert runner.load_job(res, "smoke", "python.gpm.figure4") is None
    status = runner.run_tasks(tasks, "smoke", res, work, None, log=lambda m: None)
    assert status == {"python.hgm.figure1": "skipped (already complete)",
                      "python.gpm.figure4": "done", "python.gpm.table4": "done"}
    status = runner.run_tasks(tasks, "smoke", res, work, None, log=lambda m: None)
    assert set(status.values()) == {"skipped (already complete)"}


def test_rows_get_a_json_with_command_versions_value_and_verdict(tmp_path):
    rows = registry.select(None, _CLOSED)
    res = str(tmp_path / "res")
    runner.run_tasks(runner.tasks_for(rows, "short", 1), "short", res, str(tmp_path / "w"),
                     None, log=lambda m: None)
    for row in rows:
        rec = row_records.compute_row(row, "short", 1, res)
        with open(os.path.join(res, "short", f"{row.id}.json"), encoding="utf-8") as f:
            assert json.load(f) == json.loads(json.dumps(rec))
        assert rec["verdict"] == "reproduced", rec
        assert rec["published"] == row.published and rec["value"] is not None
        assert rec["commands"] and "python" in rec["versions"]
    typo = registry.ROWS_BY_ID["gpm.table4.expect.d256.e1"]  # the paper prints 103.2
    rec = row_records.compute_row(typo, "short", 1, res)
    assert rec["verdict"] == "not reproduced" and "typo" in rec["reason"]
    # A row whose jobs have not run yet has no result (the report says "not run").
    other = registry.ROWS_BY_ID["gpm.fig4.gm_eps.s1.d1e-10"]
    assert row_records.compute_row(other, "full", 1, str(tmp_path / "empty")) is None


def test_missing_trainer_is_not_available_in_this_build(tmp_path, monkeypatch):
    from tfdp.train import registry as methods  # pylint: disable=import-outside-toplevel
    row = registry.ROWS_BY_ID["stobatch.mnist.stobatch.eps0.2"]
    tasks = runner.tasks_for([row], "smoke", 2)
    assert [t.job.kind for t in tasks] == ["train", "evaluate", "train", "evaluate"]
    assert runner.unavailable(tasks[0].job) is None  # this build has the trainer
    # A build without the StoBatch trainer: its rows are reported, never crash.
    monkeypatch.delitem(methods.METHODS, "stobatch")
    assert "not registered" in runner.unavailable(tasks[0].job)
    status = runner.run_tasks(tasks, "smoke", str(tmp_path), str(tmp_path), None,
                              log=lambda m: None)
    assert all(v.startswith(values.NOT_AVAILABLE) for v in status.values())
    rec = row_records.compute_row(row, "smoke", 2, str(tmp_path))
    assert rec["verdict"] == values.NOT_AVAILABLE and rec["value"] is None


def test_unavailable_flagfile_and_method():
    job = registry.Job("x", "train", (), "flags/none/absent.flags", "adlm")
    assert "flagfile flags/none/absent.flags is absent" in runner.unavailable(job)
    job = registry.Job("x", "train", (), None, "no_such_method")
    assert "not registered" in runner.unavailable(job)


def test_adoption_needs_the_same_command_and_flagfile_settings():
    row = registry.ROWS_BY_ID["adlm.mnist.adlm.eps0.25"]
    job = row.jobs["reduced"]["run"]
    adopted = runner._adopt(runner.Task(job, 1))  # pylint: disable=protected-access
    assert adopted is not None and adopted["adopted_from"] == job.adopt
    with open(os.path.join(runner.REPO_ROOT, job.adopt), encoding="utf-8") as f:
        recorded = json.load(f)["metrics"]["test_accuracy"]
    assert adopted["metrics"]["test_accuracy"] == pytest.approx(recorded)
    other = registry.Job(job.id, job.kind, job.args + ("--epochs=4",), job.flagfile,
                         job.method, adopt=job.adopt)
    assert runner._adopt(runner.Task(other, 1)) is None  # pylint: disable=protected-access


def _app(*args, cwd, without_methods=()):
    env = dict(os.environ, PYTHONPATH=runner.REPO_ROOT)
    # `without_methods`: run the app as a build whose trainer registry lacks these methods.
    code = ("import sys; from tfdp.train import registry as r\n"
            f"for m in {list(without_methods)!r}: del r.METHODS[m]\n"
            "from tfdp.apps import reproduce; sys.argv[0] = 'tfdp-reproduce'; reproduce.run()")
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def test_app_dry_run_full_prints_gpu_commands_with_compute(tmp_path):
    # --results_dir: without it the app seeds runs/reproduce/results/ in the checkout.
    proc = _app("--dry_run", "--scale=full", "--papers=adlm,gpm",
                f"--results_dir={tmp_path / 'results'}", cwd=runner.REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "tfdp-train --flagfile=flags/adlm/mnist_full.flags --method=adlm" in out
    assert "GPU-hour" in out and "tfdp-audit gpm-dpsgd --flagfile=flags/gpm/cifar10_vgg19_bn" in out


def test_app_rejects_bad_flags_before_work(tmp_path):
    proc = _app("--scale=huge", f"--results_dir={tmp_path}", cwd=runner.REPO_ROOT)
    assert proc.returncode != 0 and "--scale" in proc.stderr
    proc = _app("--seeds=0", f"--results_dir={tmp_path}", cwd=runner.REPO_ROOT)
    assert proc.returncode != 0 and "--seeds" in proc.stderr
    assert not os.listdir(tmp_path)


def test_app_reports_unavailable_rows_without_crashing(tmp_path):
    proc = _app("--scale=smoke", "--papers=stobatch", "--only=stobatch.mnist.mu_drop",
                f"--results_dir={tmp_path / 'r'}", f"--work_dir={tmp_path / 'w'}",
                f"--report_path={tmp_path / 'R.md'}", cwd=runner.REPO_ROOT,
                without_methods=("stobatch",))
    assert proc.returncode == 0, proc.stderr
    assert "not available in this build" in proc.stdout
    with open(tmp_path / "R.md", encoding="utf-8") as f:
        text = f.read()
    assert "| `stobatch.mnist.mu_drop` |" in text
    line = [ln for ln in text.splitlines() if ln.startswith("| `stobatch.mnist.mu_drop`")][0]
    assert "not run at this scale" in line


def test_dry_run_marks_finished_jobs_and_estimates_what_is_left(tmp_path):
    rows = registry.select(["gpm"])
    tasks = runner.tasks_for(rows, "smoke", 1)
    assert len(tasks) >= 2
    done = tasks[0]
    runner._write_json(runner._job_file(str(tmp_path), "smoke", done.key),  # pylint: disable=protected-access
                       {"status": "ok", "key": done.key})
    lines = []
    runner.dry_run(rows, "smoke", 1, log=lines.append, results_dir=str(tmp_path))
    text = "\n".join(lines)
    assert text.count("finished (results_dir)") == 1
    assert done.command() + "\n    # " in text
    left = sum(t.job.est_seconds for t in tasks[1:])
    assert f"# not yet finished in {tmp_path}: about {runner._fmt_seconds(left)}" in text  # pylint: disable=protected-access
    lines = []
    runner.dry_run(rows, "smoke", 1, log=lines.append)  # without results_dir: nothing marked
    assert "finished (results_dir)" not in "\n".join(lines)


def test_a_missing_training_directory_is_rerun_before_its_evaluation(tmp_path, monkeypatch):
    """A complete training job whose run directory is gone runs again before the evaluation
    that needs it (seeded, so the same run), instead of the evaluation failing."""
    row = registry.ROWS_BY_ID["stobatch.mnist.eot_soundness"]
    tasks = runner.tasks_for([row], "smoke", 1)
    train = next(t for t in tasks if t.job.kind == "train")
    ev = next(t for t in tasks if t.job.kind == "evaluate")
    res, work = str(tmp_path / "res"), str(tmp_path / "work")
    os.makedirs(os.path.join(res, "smoke", "jobs"))
    with open(os.path.join(res, "smoke", "jobs", f"{train.key}.json"), "w") as f:
        json.dump({"status": "ok"}, f)
    ran = []

    def fake_run_task(task, scale, results_dir, work_dir, data_dir, log):
        ran.append(task.key)
        return {"status": "ok"}

    monkeypatch.setattr(runner, "run_task", fake_run_task)
    messages = []
    status = runner.run_tasks([train, ev], "smoke", res, work, None, log=messages.append)
    assert ran == [train.key, ev.key]
    assert status[train.key] == "done" and status[ev.key] == "done"
    assert any("run directory" in m and "missing" in m for m in messages)
    # With the directory present, only the evaluation runs.
    os.makedirs(os.path.join(work, "smoke", train.key))
    open(os.path.join(work, "smoke", train.key, "model.keras"), "w").close()
    ran.clear()
    runner.run_tasks([train, ev], "smoke", res, work, None, log=lambda m: None)
    assert ran == [ev.key]


def test_outputs_go_under_runs_unless_the_repository_is_named(tmp_path):
    """Issue 26 item 6: nothing is written into results/ unless --repository names it."""
    res, rep = runner.output_paths(False, None, None)
    assert res == os.path.join("runs", "reproduce", "results")
    assert rep == os.path.join(res, "REPRODUCTION.md")
    res, rep = runner.output_paths(True, None, None)
    assert res == runner.DEFAULT_RESULTS
    assert rep == os.path.join(runner.REPO_ROOT, "REPRODUCTION.md")
    assert runner.output_paths(False, "x", "y.md") == ("x", "y.md")
    # --report from another directory writes only under its runs/.
    proc = _app("--report", cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "runs" / "reproduce" / "results"
    assert (out / "REPRODUCTION.md").exists() and (out / "preamble.md").exists()
    assert sorted(os.listdir(tmp_path)) == ["runs"]


def _write_job(res, scale, key, **fields):
    os.makedirs(os.path.join(res, scale, "jobs"), exist_ok=True)
    rec = dict({"status": "ok", "key": key, "output": {}}, **fields)
    with open(os.path.join(res, scale, "jobs", f"{key}.json"), "w", encoding="utf-8") as f:
        json.dump(rec, f)


def test_an_evaluation_of_a_model_retrained_since_runs_again_and_its_row_is_stale(
        tmp_path, monkeypatch):
    """An evaluation scores the model its training job made when it ran; a later rerun of that
    training makes it outdated: it runs again, and meanwhile its rows are stale."""
    row = registry.ROWS_BY_ID["stobatch.mnist.eot_soundness"]
    tasks = runner.tasks_for([row], "smoke", 1)
    train = next(t for t in tasks if t.job.kind == "train")
    ev = next(t for t in tasks if t.job.kind == "evaluate")
    assert runner.model_task(ev, "smoke") == train and runner.model_task(train, "smoke") is None
    res, work = str(tmp_path / "res"), str(tmp_path / "work")
    _write_job(res, "smoke", train.key, finished_utc="2026-11-26T10:00:00Z")
    _write_job(res, "smoke", ev.key, started_utc="2026-11-25T09:00:00Z")  # before: outdated
    os.makedirs(os.path.join(work, "smoke", train.key))
    open(os.path.join(work, "smoke", train.key, "model.keras"), "w").close()
    done = runner.load_job(res, "smoke", ev.key)
    why = runner.outdated(res, "smoke", ev, done)
    assert why is not None and train.key in why and "2026-11-26T10:00:00Z" in why
    # Its row is stale, with the earlier number kept apart, never as a result.
    with open(os.path.join(res, "smoke", f"{row.id}.json"), "w", encoding="utf-8") as f:
        json.dump({"id": row.id, "verdict": "reproduced", "value": 0.0, "value_text": "0",
                   "jobs": [ev.key]}, f)
    rec = row_records.compute_row(row, "smoke", 1, res)
    assert rec["verdict"] == values.STALE and rec["value"] is None
    assert rec["previous_value"] == 0.0 and ev.key in rec["reason"] and train.key in rec["reason"]
    lines = []  # the dry run counts it as work left, and says why
    runner.dry_run([row], "smoke", 1, log=lines.append, results_dir=res)
    text = "\n".join(lines)
    assert ("finished, but outdated (its model retrained, its settings or noise kernel "
            "changed): runs again") in text
    assert f"about {runner._fmt_seconds(ev.job.est_seconds)}" in text.splitlines()[-1]  # pylint: disable=protected-access
    ran = []
    monkeypatch.setattr(runner, "run_task", lambda task, *a: ran.append(task.key) or {
        "status": "ok"})
    messages = []
    status = runner.run_tasks([train, ev], "smoke", res, work, None, log=messages.append)
    assert ran == [ev.key] and status[train.key].startswith("skipped")
    assert any("ran again" in m and "runs again" in m for m in messages)
    # An evaluation that saw the training's current record is current (and is skipped).
    _write_job(res, "smoke", ev.key, started_utc="2026-11-25T09:00:00Z",
               model_finished_utc="2026-11-26T10:00:00Z")
    assert runner.outdated(res, "smoke", ev, runner.load_job(res, "smoke", ev.key)) is None
    ran.clear()
    runner.run_tasks([train, ev], "smoke", res, work, None, log=lambda m: None)
    assert ran == []
    # ... until the training runs again (its record names another finish time).
    _write_job(res, "smoke", train.key, finished_utc="2026-11-27T10:00:00Z")
    assert runner.outdated(res, "smoke", ev, runner.load_job(res, "smoke", ev.key))


def test_a_training_that_runs_again_takes_its_finished_evaluations_with_it(tmp_path, monkeypatch):
    row = registry.ROWS_BY_ID["stobatch.mnist.eot_soundness"]
    tasks = runner.tasks_for([row], "smoke", 1)
    train = next(t for t in tasks if t.job.kind == "train")
    ev = next(t for t in tasks if t.job.kind == "evaluate")
    res, work = str(tmp_path / "res"), str(tmp_path / "work")
    # The training's job file was deleted (to rerun it); its evaluation is still recorded.
    _write_job(res, "smoke", ev.key, started_utc="2026-11-25T09:00:00Z",
               model_finished_utc="2026-11-24T10:00:00Z")
    ran = []
    monkeypatch.setattr(runner, "run_task", lambda task, *a: ran.append(task.key) or {
        "status": "ok"})
    runner.run_tasks([train, ev], "smoke", res, work, None, log=lambda m: None)
    assert ran == [train.key, ev.key]


_RESULTS = os.path.join(runner.REPO_ROOT, "results", "reproduce")


def _committed_tasks():
    """(scale, row id, task) for every job a committed row's value rests on directly."""
    for (scale, rid), rec in jobfiles.load_rows(_RESULTS).items():
        row = registry.ROWS_BY_ID.get(rid)
        if row is None or rec.get("value") is None or not row.jobs.get(scale):
            continue
        for job in row.jobs[scale].values():
            for seed in (rec.get("seeds") or [1]) if job.seeded else [None]:
                yield scale, rid, runner.Task(job, seed)


def test_every_committed_result_scores_its_models_current_training():
    """No row of the committed report has a value that rests on an evaluation of a model
    whose training job ran again after it (such a row is stale until it reruns)."""
    checked = 0
    for scale, rid, task in _committed_tasks():
        done = runner.load_job(_RESULTS, scale, task.key)
        assert runner.outdated(_RESULTS, scale, task, done) is None, (scale, rid)
        checked += task.job.kind == "evaluate"
    # Not vacuous: most committed rows rest on evaluations. (Rows stale until their DP-SGD
    # jobs rerun with the default clipping, issue 39, are not counted: they show no value.)
    assert checked > 90


# The last change to what a committed seeded command computes (929e9e9, committed at this
# time: grappler's memory-optimizer pass off; before it 4cfe1dd, noise streams keyed by the
# run). A job that started earlier ran code that no longer exists. A change to what committed
# commands compute moves this date forward; the test then names the jobs to run again.
_LAST_COMPUTE_CHANGE_UTC = "2026-11-26T14:45:46Z"


def test_every_committed_result_ran_on_code_no_older_than_what_it_exercises():
    """Issue 29 item 7: every job a committed row's value rests on (its evaluations and the
    trainings they score) started after the last change to what such jobs compute."""
    old, checked = [], set()
    for scale, rid, task in _committed_tasks():
        for t in (task, runner.model_task(task, scale)):
            if t is None or (scale, t.key) in checked:
                continue
            checked.add((scale, t.key))
            done = runner.load_job(_RESULTS, scale, t.key)
            assert done is not None, (scale, rid, t.key)
            if (done.get("started_utc") or "") < _LAST_COMPUTE_CHANGE_UTC:
                old.append((scale, t.key, done.get("started_utc")))
    assert not old, old
    assert len(checked) > 150


def test_a_retraining_to_the_same_weights_keeps_its_evaluations_current(tmp_path):
    """The training job records a digest of the weights; an evaluation that saw the same
    digest stays current when the training reran (a seeded rerun at the same code)."""
    import keras  # pylint: disable=import-outside-toplevel
    import numpy as np  # pylint: disable=import-outside-toplevel
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.layers[0].set_weights([np.ones((3, 2), "float32"), np.zeros(2, "float32")])
    a, b = str(tmp_path / "a.keras"), str(tmp_path / "b.keras")
    model.save(a)
    model.save(b)
    assert runner.weights_digest(a) == runner.weights_digest(b) is not None
    model.layers[0].set_weights([np.ones((3, 2), "float32"), np.full(2, 1e-7, "float32")])
    model.save(b)
    assert runner.weights_digest(a) != runner.weights_digest(b)
    row = registry.ROWS_BY_ID["stobatch.mnist.eot_soundness"]
    tasks = runner.tasks_for([row], "smoke", 1)
    train = next(t for t in tasks if t.job.kind == "train")
    ev = next(t for t in tasks if t.job.kind == "evaluate")
    res = str(tmp_path / "res")
    _write_job(res, "smoke", train.key, finished_utc="2026-11-27T10:00:00Z",
               output={"weights_sha256": runner.weights_digest(a)})
    same = dict(started_utc="2026-11-25T09:00:00Z", model_finished_utc="2026-11-24T10:00:00Z",
                model_weights_sha256=runner.weights_digest(a))
    _write_job(res, "smoke", ev.key, **same)
    assert runner.outdated(res, "smoke", ev, runner.load_job(res, "smoke", ev.key)) is None
    _write_job(res, "smoke", ev.key, **dict(same, model_weights_sha256=runner.weights_digest(b)))
    assert runner.outdated(res, "smoke", ev, runner.load_job(res, "smoke", ev.key))
