"""Wiring of the HGM / StoBatch rows to the real trainers, flagfiles and evaluation output.

No training runs here (too slow for the default suite): the dry run, the availability check
and the extractors over a small hand-written evaluation.json.
"""

import os
import re

import pytest

from tfdp.reproduce import extract, registry, report, row_records, runner, values

def _trainer_rows():
    return [r for r in registry.select(["hgm", "stobatch"])
            if not r.extractor.startswith("closed")]


def _train_jobs(row, scale):
    out = []
    for job in row.jobs.get(scale, {}).values():
        out.append(registry.train_job(scale, job.depends) if job.depends else job)
    return out


def test_every_trainer_row_runs_at_the_scales_with_flagfiles():
    for row in _trainer_rows():
        for scale in row.jobs:
            for train in _train_jobs(row, scale):
                why = runner.unavailable(train)
                if scale == "short":
                    assert why == f"flagfile {train.flagfile} is absent", (row.id, why)
                else:
                    assert why is None, (row.id, scale, train.id, why)
    # Every headline Fig. 3 / Fig. 5 / StoBatch Fig. 2 and Fig. 6 row is runnable everywhere.
    for rid in ("hgm.fig3.mnist_hgm_pixeldp_minus_pixeldp", "hgm.mnist.secure_sgd_minus_dpsgd",
                "stobatch.mnist.stobatch.eps2", "stobatch.mnist.certified.mu0.05"):
        for scale in registry.TRAINER_SCALES:
            assert all(runner.unavailable(j) is None
                       for j in _train_jobs(registry.ROWS_BY_ID[rid], scale)), (rid, scale)


def test_override_arguments_select_method_and_budgets():
    row = registry.ROWS_BY_ID["hgm.fig3.mnist_hgm_pixeldp_minus_pixeldp"]
    a, b = (registry.train_job("full", row.jobs["full"][r].depends) for r in ("a", "b"))
    assert a.flagfile == b.flagfile == "flags/hgm/mnist_full.flags"
    assert a.args == ("--method=hgm_pixeldp", "--epsilon=", "--hgm_eps_r=4")  # non-private
    assert b.args == ("--method=pixeldp", "--epsilon=", "--hgm_r_source=uniform",
                      "--hgm_eps_r=1")
    fig5 = registry.ROWS_BY_ID["hgm.mnist.secure_sgd_minus_secure_sgd_agm"].jobs
    assert sorted(fig5["smoke"]) == ["a0.2", "a2", "b0.2", "b2"]
    assert len(fig5["full"]) == len(fig5["reduced"]) == 8
    # CIFAR-10 (Fig. 4): the grid's two ends at smoke and reduced scale, all five at full.
    fig4 = registry.ROWS_BY_ID["hgm.cifar10.secure_sgd_minus_dpsgd"].jobs
    assert sorted(fig4["reduced"]) == sorted(fig4["smoke"]) == ["a10", "a2", "b10", "b2"]
    assert len(fig4["full"]) == 10
    dpsgd = registry.train_job("reduced", fig4["reduced"]["b2"].depends)
    assert dpsgd.flagfile == "flags/baselines/dpsgd_cifar10_reduced.flags"
    assert runner.unavailable(dpsgd) is None
    # AdLM Fig. 5a: eps in {2.5, 5, 8} at reduced scale, the nine-point grid at full.
    for method in ("adlm", "dpsgd"):
        jobs = registry.ROWS_BY_ID[f"adlm.cifar10.{method}.mean_eps"].jobs
        assert sorted(jobs["reduced"]) == ["eps2.5", "eps5", "eps8"]
        assert len(jobs["full"]) == 9
        assert all(runner.unavailable(j) is None for j in jobs["reduced"].values())
    agm = registry.train_job("smoke", fig5["smoke"]["b2"].depends)
    assert agm.args == ("--method=secure_sgd_agm", "--epsilon=2", "--hgm_r_source=uniform")
    sto = registry.ROWS_BY_ID["stobatch.mnist.stobatch.eps0.2"].jobs["reduced"]["run"]
    train = registry.train_job("reduced", sto.depends)
    assert train.flagfile == "flags/stobatch/mnist_reduced.flags"
    assert train.args == ("--method=stobatch", "--dataset=mnist", "--epsilon=0.2")
    # StoBatch: conventional accuracy is the noise-smoothed (Monte-Carlo) classifier's
    assert "--num_examples=1000" in sto.args and "--certify" in sto.args
    for rid in ("stobatch.mnist.secure_sgd.eps2", "stobatch.mnist.mu_drop",
                "stobatch.mnist.stobatch.eps2.strong_attack"):
        assert "--certify" in registry.ROWS_BY_ID[rid].jobs["reduced"]["run"].args, rid


def test_full_dry_run_prints_existing_flagfiles():
    lines = []
    runner.dry_run(registry.select(["hgm", "stobatch"]), "full", 1, log=lines.append)
    commands = [ln for ln in "\n".join(lines).splitlines() if ln.startswith("tfdp-train")]
    assert len(commands) > 20
    for cmd in commands:
        flagfile = re.search(r"--flagfile=(\S+)", cmd).group(1)
        assert os.path.exists(os.path.join(runner.REPO_ROOT, flagfile)), cmd
        assert re.search(r"--method=\w+", cmd), cmd
    assert not any("_hgm_pixeldp_epsr" in c or "_secure_sgd_full" in c for c in commands)


def test_short_scale_is_not_available_and_never_crashes(tmp_path):
    rows = _trainer_rows()
    tasks = runner.tasks_for(rows, "short", 1)
    assert tasks
    status = runner.run_tasks(tasks, "short", str(tmp_path), str(tmp_path), None,
                              log=lambda m: None)
    assert all(v.startswith(values.NOT_AVAILABLE) for v in status.values())
    for row in rows:
        rec = row_records.compute_row(row, "short", 1, str(tmp_path))
        assert rec is None or (rec["verdict"] == values.NOT_AVAILABLE and rec["value"] is None)
    lines = []
    runner.dry_run(rows, "short", 1, log=lines.append)
    assert "not available in this build: flagfile flags/hgm/mnist_short.flags is absent" in (
        "\n".join(lines))
    text = report.generate(str(tmp_path), report_path="", figures=False)
    line = next(ln for ln in text.splitlines()
                if ln.startswith("| `hgm.fig3.mnist_hgm_pixeldp_minus_pixeldp`"))
    assert line.rstrip(" |").split(" | ")[-3] == values.NOT_RUN  # the short column


def _cell(acc, cert):
    return {"accuracy": acc, "certified_accuracy": cert, "eps_data": 0.1}


def _evaluation(acc, cert, sizes=("0.05", "0.1")):
    """An evaluation.json as tfdp-evaluate --certify writes it (keys as in a real run)."""
    return {"evaluation": {
        "alpha": 0.05, "num_examples": 100, "clean_accuracy": 0.9,
        "clean_certified_accuracy": {s: cert for s in sizes},
        "attacks": {a: {s: _cell(acc, cert) for s in sizes}
                    for a in ("fgsm", "ifgsm", "mim", "madry")}}}


def test_extractors_read_the_evaluation_summary():
    row = registry.ROWS_BY_ID["stobatch.mnist.certified.mu0.05"]
    v = extract.extract(row, {"run": [_evaluation(0.6, 0.25, ("0.05", "0.6"))]})
    assert v.value == pytest.approx(25.0)
    fig3 = registry.ROWS_BY_ID["hgm.fig3.mnist_hgm_pixeldp_minus_pixeldp"]
    sizes = ("0.05", "0.1", "0.2", "0.3")
    v = extract.extract(fig3, {"a": [_evaluation(0.5, 0.3, sizes)],
                               "b": [_evaluation(0.5, 0.1, sizes)]})
    assert v.value == pytest.approx(20.0)
    # A certified row over an evaluation without --certify fails loudly, not silently.
    bad = _evaluation(0.5, None, ("0.05", "0.6"))
    with pytest.raises(ValueError, match="certified_accuracy"):
        extract.extract(row, {"run": [bad]})


def test_empty_epsilon_unsets_the_flagfile_budget():
    from tfdp.apps import train  # pylint: disable=import-outside-toplevel
    parser = train._OptionalFloatParser()  # pylint: disable=protected-access
    assert parser.parse("") is None and parser.parse("0.5") == 0.5


def _flag_value(train, name):
    """The value of --name for a train job: its flagfile's, overridden by its arguments."""
    value = runner._flagfile_values(train.flagfile).get(name)  # pylint: disable=protected-access
    for arg in train.args:
        if arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
    return value


def test_every_training_runs_on_its_rows_data_set():
    # A flagfile that leaves --dataset out would silently train on the embedded sample.
    seen = 0
    for row in _trainer_rows():
        for scale in registry.TRAINER_SCALES:
            for train in _train_jobs(row, scale):
                dataset = train.id.split(".")[2].split("_")[0]
                dataset = "tiny_imagenet" if dataset == "tiny" else dataset
                assert _flag_value(train, "dataset") == dataset, (row.id, scale, train.id)
                seen += 1
    assert seen > 100


def test_reduced_monte_carlo_evaluations_of_cifar10_models_are_sized_for_a_cpu():
    sto = registry.ROWS_BY_ID["stobatch.cifar10.eps2"].jobs["reduced"]["run"].args
    assert "--num_examples=100" in sto and "--draws_per_step=32" in sto and "--certify" in sto
    assert "--num_draws=50" in sto
    fig2 = registry.ROWS_BY_ID["hgm.fig2.cifar10_hgm_pixeldp_minus_pixeldp"].jobs["reduced"]
    for job in fig2.values():
        assert "--num_examples=200" in job.args
        assert not any(a.startswith("--draws_per_step") for a in job.args)
    # Without Monte-Carlo prediction (DP-SGD has no noise layer), and on MNIST, the 1,000
    # images of the reduced scale; Secure-SGD is scored by its Monte-Carlo prediction (HGM
    # metrics): 200 CIFAR-10 images.
    fig4 = registry.ROWS_BY_ID["hgm.cifar10.secure_sgd_minus_dpsgd"].jobs["reduced"]
    assert "--num_examples=1000" in fig4["b2"].args and "--certify" not in fig4["b2"].args
    assert "--num_examples=200" in fig4["a2"].args and "--certify" in fig4["a2"].args
    mnist = registry.ROWS_BY_ID["stobatch.mnist.stobatch.eps2"].jobs["reduced"]["run"].args
    assert "--num_examples=1000" in mnist and not any("draws_per_step" in a for a in mnist)


def test_gap_rows_pair_seeds_when_every_role_has_them():
    row = registry.ROWS_BY_ID["stobatch.mnist.stobatch_eps_rise"]
    size = row.param["size"]
    a = [_evaluation(x, None, (size,)) for x in (0.80, 0.75, 0.82)]
    b = [_evaluation(x, None, (size,)) for x in (0.25, 0.20, 0.26)]
    v = extract.extract(row, {"a": a, "b": b})
    assert v.per_seed == pytest.approx([55.0, 55.0, 56.0])
    assert v.value == pytest.approx(55.0 + 1.0 / 3.0)
    assert not v.cells and "over 3 seeds, paired" in v.text
    # One seed: the single difference, as a cell (no seed spread to report).
    one = extract.extract(row, {"a": a[:1], "b": b[:1]})
    assert one.per_seed == pytest.approx([55.0]) and one.cells
    # Roles with different seed counts cannot be paired: the means' difference.
    uneven = extract.extract(row, {"a": a, "b": b[:1]})
    assert uneven.value == pytest.approx(100 * (0.79 - 0.25)) and uneven.cells
