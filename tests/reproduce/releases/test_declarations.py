"""The release jobs and comparisons are the papers' own (issue 39): each paper declares them
in its PAPER (registry kinds "release_job" and "release_comparisons"), and the shared release
code (tfdp/reproduce/releases/) finds them through tfdp.registry and holds none itself."""

from __future__ import annotations

import ast
import dataclasses
import glob
import os
import subprocess
import sys

import pytest

from tfdp import registry
from tfdp.reproduce.releases import attribution, jobs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
_JOB_PAPERS = {"adlm.mnist": "adlm", "secure_sgd.mnist": "hgm", "stobatch.mnist": "stobatch"}
# The report's order (REPRODUCTION.md): each paper's first budget, then the longer budgets.
_REPORT_ORDER = ["adlm_mnist_e6", "secure_sgd_mnist_s3840", "stobatch_mnist_e2",
                 "adlm_mnist_e40", "stobatch_mnist_e6"]


def test_each_papers_release_job_loads_through_the_registry():
    assert jobs.names() == sorted(_JOB_PAPERS)
    for name, paper in _JOB_PAPERS.items():
        declared = registry.extensions(jobs.KIND)[name]
        assert registry.extension_paper(jobs.KIND, name) == paper
        assert declared.target == f"tfdp.papers.{paper}.releases:MNIST_JOB"
        job = jobs.get(name)
        assert isinstance(job, jobs.ReleaseJob) and job.name == name
    assert list(jobs.all_jobs()) == sorted(_JOB_PAPERS)


def test_each_papers_comparisons_load_through_the_registry_in_report_order():
    comps = attribution.comparisons()
    assert [c.key for c in comps] == _REPORT_ORDER
    declared = registry.extensions(attribution.KIND)
    assert list(declared) == ["adlm", "hgm", "stobatch"]
    for name, ext in declared.items():
        assert ext.target == f"tfdp.papers.{name}.releases:COMPARISONS"
        assert {c.paper for c in ext.load()} == {name}
    for comp in comps:
        assert comp.job in jobs.names()
        assert _JOB_PAPERS[comp.job] == comp.paper


def _calls(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    return [node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Name, ast.Attribute))]


def test_shared_release_code_constructs_no_job_or_comparison():
    files = sorted(glob.glob(os.path.join(ROOT, "tfdp", "reproduce", "releases", "*.py")))
    assert len(files) >= 6  # jobs, attribution, harness, ... were read
    made = {os.path.basename(p): sorted(set(_calls(p)) & {"ReleaseJob", "Override",
                                                           "Comparison", "Toggle"})
            for p in files}
    assert not {k: v for k, v in made.items() if v}, made
    # The probe sees a construction where there is one.
    assert "ReleaseJob" in _calls(os.path.join(ROOT, "tfdp", "papers", "adlm", "releases.py"))


def test_the_job_names_come_from_the_declarations_without_importing_a_job():
    code = ("import sys\nfrom tfdp.reproduce.releases import jobs\nprint(jobs.names())\n"
            "print(sorted(m for m in sys.modules if m.endswith('.releases')"
            " and m.startswith('tfdp.papers')))")
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout.splitlines()
    assert out == [str(sorted(_JOB_PAPERS)), "[]"]


_PLUGIN = '''
from tfdp import registry

PAPER = registry.Paper(name="relplug", title="relplug", extensions=(
    registry.Extension("release_job", "relplug.mnist", "relplug_pkg.rel:JOB"),
    registry.Extension("release_comparisons", "relplug", "relplug_pkg.rel:COMPARISONS"),))
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A paper outside tfdp declaring a job and comparisons; yields their module (JOB None,
    no comparison) for the test to fill."""
    pkg = tmp_path / "relplug_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(_PLUGIN)
    (pkg / "rel.py").write_text("JOB = None\nCOMPARISONS = ()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(registry.PLUGINS_ENV, "relplug_pkg")
    registry.reload()
    import relplug_pkg.rel as rel  # pylint: disable=import-outside-toplevel,import-error
    yield rel
    monkeypatch.delenv(registry.PLUGINS_ENV)
    registry.reload()
    for name in ("relplug_pkg.rel", "relplug_pkg"):
        sys.modules.pop(name, None)


def test_a_plugin_papers_release_declarations_are_found_and_ordered(plugin, monkeypatch):
    base = attribution.comparisons()[0]
    monkeypatch.setattr(plugin, "JOB", dataclasses.replace(jobs.get("adlm.mnist"),
                                                           name="relplug.mnist"))
    monkeypatch.setattr(plugin, "COMPARISONS", (
        dataclasses.replace(base, key="relplug_long", paper="relplug", scale_of="relplug_e1"),
        dataclasses.replace(base, key="relplug_e1", paper="relplug", toggles=())))
    assert jobs.get("relplug.mnist").name == "relplug.mnist"
    assert "relplug.mnist" in jobs.names()
    # The plugin's first budget after the built-in first budgets, its longer one last.
    assert [c.key for c in attribution.comparisons()] == (
        _REPORT_ORDER[:3] + ["relplug_e1"] + _REPORT_ORDER[3:] + ["relplug_long"])


def test_a_bad_release_declaration_is_refused_naming_it(plugin, monkeypatch):
    monkeypatch.setattr(plugin, "JOB", jobs.get("adlm.mnist"))
    with pytest.raises(TypeError, match="release_job 'relplug.mnist' of paper 'relplug': "
                                        "relplug_pkg.rel:JOB is not a ReleaseJob named"):
        jobs.get("relplug.mnist")
    with pytest.raises(ValueError, match="job must be one of .*'relplug.mnist'.*got 'x.y'"):
        jobs.get("x.y")
    base = attribution.comparisons()[0]
    monkeypatch.setattr(plugin, "COMPARISONS", (base,))  # paper "adlm"
    with pytest.raises(TypeError, match="release_comparisons 'relplug' of paper 'relplug'"):
        attribution.comparisons()
    # a list, not a tuple
    monkeypatch.setattr(plugin, "COMPARISONS", [dataclasses.replace(base, paper="relplug")])
    with pytest.raises(TypeError, match="not a tuple of Comparison"):
        attribution.comparisons()
    # its key is AdLM's
    monkeypatch.setattr(plugin, "COMPARISONS", (dataclasses.replace(base, paper="relplug"),))
    with pytest.raises(ValueError, match="keys declared twice"):
        attribution.comparisons()
    monkeypatch.setattr(plugin, "COMPARISONS", (dataclasses.replace(
        base, key="relplug_long", paper="relplug", scale_of="nothing"),))
    with pytest.raises(ValueError, match="'relplug_long' is the longer budget of 'nothing'"):
        attribution.comparisons()
