"""The registry of published numbers: complete, well formed, runnable where trainers exist."""

import os
import subprocess
import sys

import pytest

from tfdp import registry as papers_registry
from tfdp.reproduce import extract, registry, runner


def test_every_paper_has_rows_and_ids_are_unique():
    ids = [r.id for r in registry.ROWS]
    assert len(ids) == len(set(ids))
    for paper in registry.PAPERS:
        assert any(r.paper == paper for r in registry.ROWS), paper


def test_rows_come_from_the_papers_in_the_registrys_order():
    """Each paper's rows are its rows target's (tfdp/papers/<paper>/rows.py), in order."""
    papers = papers_registry.papers()
    assert registry.PAPERS == tuple(papers)
    assert registry.PAPER_TITLES == {name: p.title for name, p in papers.items()}
    expected = []
    for paper in papers.values():
        if paper.rows is not None:
            expected += [r.id for r in papers_registry.load(paper.rows)()]
    assert [r.id for r in registry.ROWS] == expected


def test_baselines_and_size_units_come_from_the_papers_rows_modules():
    for name, paper in papers_registry.papers().items():
        module = registry.rows_module(paper)
        units = getattr(module, "SIZE_UNITS", {})
        methods = tuple(getattr(module, "BASELINE_METHODS", ()))
        assert registry.PAPER_BASELINES[name] == methods
        for row in (r for r in registry.ROWS if r.paper == name):
            assert row.size_unit is None or row.size_unit in units.values(), row.id
            assert all(b.method in methods for b in row.baselines), row.id
    assert not hasattr(registry.rows_module(papers_registry.papers()["gpm"]), "baseline_for")


def test_reload_recomputes_the_rows_in_place():
    rows, by_id, before = registry.ROWS, registry.ROWS_BY_ID, list(registry.ROWS)
    registry.reload()
    assert registry.ROWS is rows and registry.ROWS_BY_ID is by_id
    assert rows == before and list(by_id) == [r.id for r in before]


def test_a_papers_rows_module_can_be_imported_first():
    """The papers import this registry and it loads them only through tfdp.registry."""
    code = ("import tfdp.papers.stobatch.rows\n"
            "from tfdp.reproduce import registry\n"
            "print(len(registry.ROWS))")
    env = dict(os.environ, PYTHONPATH=runner.REPO_ROOT)
    env.pop("TFDP_PAPERS", None)
    out = subprocess.run([sys.executable, "-c", code], cwd=runner.REPO_ROOT, env=env,
                         capture_output=True, text=True, check=True)
    assert int(out.stdout) == len(registry.ROWS)


@pytest.mark.parametrize("row", registry.ROWS, ids=lambda r: r.id)
def test_row_is_well_formed(row):
    assert row.paper in registry.PAPERS
    assert extract.extractor(row.extractor)
    assert row.criterion.kind in ("band", "relerr", "range", "positive", "check", "record")
    if row.criterion.kind in ("band", "relerr"):
        assert row.published is not None and row.criterion.tol is not None
    assert row.source and row.setting and row.metric and row.published_text
    assert set(row.jobs) <= set(registry.SCALES)
    for scale, jobs in row.jobs.items():
        for job in jobs.values():
            assert job.kind in ("train", "evaluate", "audit", "bench", "python")
            if job.depends:
                assert registry.train_job(scale, job.depends).kind == "train"


def test_published_numbers_of_the_specs_are_registered():
    """Spot checks against numbers the papers state."""
    pub = {r.id: r.published for r in registry.ROWS}
    assert pub["adlm.mnist.adlm.eps0.25"] == 90.2          # AdLM text (Fig. 4a)
    assert pub["adlm.mnist.dpsgd.mean_eps"] == 83.93
    assert pub["hgm.fig3.mnist_hgm_pixeldp_minus_pixeldp"] == 4.17   # HGM text (Fig. 3)
    assert pub["hgm.cifar10.secure_sgd_minus_adlm"] == 17.75
    assert pub["stobatch.mnist.stobatch.eps0.2"] == 82.7    # StoBatch text (Fig. 2)
    assert pub["stobatch.mnist.certified.mu0.6"] == 72.41
    assert pub["gpm.table4.gm.d4096.e0.5"] == 819.9         # GPM Table 4
    assert pub["gpm.fig4.gm_eps.s1.d1e-10"] == 6.8613       # GPM Figure 4 (Thm 2.3)
    gpm_fig5 = [r for r in registry.ROWS if r.id.startswith("gpm.fig5.")]
    assert len(gpm_fig5) == 20   # 4 eps* x 5 beta


def test_adlm_and_gpm_rows_are_runnable_at_smoke_and_short():
    """Trainers and flagfiles of AdLM, the baselines and GPM exist in this build."""
    for row in registry.ROWS:
        if row.paper not in ("adlm", "gpm"):
            continue
        for scale in ("smoke", "short"):
            for job in row.jobs.get(scale, {}).values():
                assert runner.unavailable(job) is None, (row.id, scale, job.id)
                if job.flagfile:
                    assert os.path.exists(os.path.join(runner.REPO_ROOT, job.flagfile))


def test_hgm_and_stobatch_rows_name_their_trainer_and_flagfile():
    for row in registry.ROWS:
        if row.paper not in ("hgm", "stobatch") or row.extractor.startswith("closed"):
            continue
        for scale, jobs in row.jobs.items():
            for job in jobs.values():
                train = registry.train_job(scale, job.depends) if job.depends else job
                assert train.method in ("secure_sgd", "secure_sgd_agm", "pixeldp",
                                        "hgm_pixeldp", "stobatch", "dpsgd", "adlm")
                assert train.flagfile.split("/")[1] in ("hgm", "stobatch", "baselines", "adlm")
                assert f"--method={train.method}" in train.args


def test_select_rejects_unknown_papers_and_ids():
    with pytest.raises(ValueError, match="--papers"):
        registry.select(["nope"])
    with pytest.raises(ValueError, match="--only"):
        registry.select(None, ["no.such.row"])
    assert [r.id for r in registry.select(["gpm"], ["gpm.fig4.lower.b0.001"])] == [
        "gpm.fig4.lower.b0.001"]


def test_full_scale_jobs_carry_a_compute_estimate():
    for row in registry.ROWS:
        for job in row.jobs.get("full", {}).values():
            assert job.compute, (row.id, job.id)
