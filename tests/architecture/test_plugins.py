"""A paper added from outside tfdp, through the registries alone (docs/architecture.md).

A temporary package declares a toy paper with one training method and one reproduction row;
nothing in tfdp is edited. `tfdp-train` trains the method, and `tfdp-reproduce` runs the row
and records its value, both finding the paper through TFDP_PAPERS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.architecture import imports

ROOT = imports.ROOT

_INIT = '''
from tfdp import registry

PAPER = registry.Paper(
    name="toy", title="A toy paper",
    methods=(registry.MethodSpec("toy_sgd", "toypaper.method:ToySGD",
                                 "a toy method: plain SGD on a one-layer network"),),
    rows="toypaper.rows:rows")
'''
_METHOD = '''
import keras

from tfdp import options
from tfdp.train import nonprivate


@options.declare("toy_")
class ToyConfig:
    """The toy method's settings: one typed field, its flag --toy_hidden."""

    hidden: int = options.field(16, "Hidden units of the toy network.",
                                check=options.at_least(1))


OPTIONS = ToyConfig.OPTIONS


class ToySGD(nonprivate.NonPrivate):
    """Non-private training of a one-hidden-layer network."""

    name = "toy_sgd"
    settings_class = ToyConfig
    takes_smoothing = True  # NonPrivate's training step adds the input noise

    def build_model(self, input_shape, num_classes):
        inp = keras.Input(input_shape)
        h = keras.layers.Dense(self.settings.hidden,
                               activation="relu")(keras.layers.Flatten()(inp))
        return keras.Model(inp, keras.layers.Dense(num_classes)(h))
'''
_ROWS = '''
from tfdp.reproduce.registry import Criterion, Job, Row


def rows():
    job = Job("train.toy.sample", "train", ("--method=toy_sgd", "--dataset=sample",
              "--num_train=256", "--num_test=100", "--epochs=1", "--toy_hidden=8"),
              method="toy_sgd", est_seconds=30)
    return [Row(id="toy.sample.toy_sgd", paper="toy", source="a toy row",
                setting="toy_sgd on the embedded sample, 1 epoch",
                metric="final test accuracy (%)", published=None, published_text="-",
                criterion=Criterion("record", text="recorded"),
                extractor="accuracy_recorded", jobs={"smoke": {"run": job}}, unit="%")]
'''


@pytest.fixture
def toy_paper(tmp_path, monkeypatch):
    pkg = tmp_path / "toypaper"
    pkg.mkdir()
    for name, text in (("__init__.py", _INIT), ("method.py", _METHOD), ("rows.py", _ROWS)):
        (pkg / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TFDP_PAPERS", "toypaper")
    monkeypatch.setenv("TFDP_CACHE_DIR", str(tmp_path / "cache"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(tmp_path)]),
               TF_CPP_MIN_LOG_LEVEL="3")
    yield env
    monkeypatch.delenv("TFDP_PAPERS")
    from tfdp.reproduce import registry as rows_registry  # pylint: disable=import-outside-toplevel
    from tfdp.train import registry as methods  # pylint: disable=import-outside-toplevel
    methods.reload()
    rows_registry.reload()
    assert "toy_sgd" not in methods.METHODS


def test_a_toy_paper_registers_through_tfdp_papers_alone(toy_paper):
    from tfdp import registry  # pylint: disable=import-outside-toplevel
    from tfdp.reproduce import registry as rows_registry  # pylint: disable=import-outside-toplevel
    from tfdp.train import registry as methods  # pylint: disable=import-outside-toplevel
    methods.reload()
    rows_registry.reload()
    assert list(registry.papers())[-1] == "toy"
    assert methods.get_method_class("toy_sgd").__name__ == "ToySGD"
    assert methods.summaries()["toy_sgd"].startswith("a toy method")
    assert "toy.sample.toy_sgd" in rows_registry.ROWS_BY_ID
    assert [r.id for r in rows_registry.select(["toy"])] == ["toy.sample.toy_sgd"]


def test_a_toy_paper_trains_and_reproduces_from_the_command_line(toy_paper, tmp_path):
    env = toy_paper
    listed = subprocess.run([sys.executable, "-m", "tfdp.apps.train", "--list_methods"],
                            cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert "toy_sgd" in listed.stdout and "a toy method" in listed.stdout
    helped = subprocess.run([sys.executable, "-m", "tfdp.apps.train", "--method=toy_sgd",
                             "--help"], cwd=ROOT, env=env, capture_output=True, text=True,
                            check=True)
    assert "--toy_hidden" in helped.stdout
    bad = subprocess.run([sys.executable, "-m", "tfdp.apps.train", "--method=toy_sgd",
                          "--dataset=sample", "--toy_hidden=0",
                          f"--model_dir={tmp_path / 'bad'}"],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert bad.returncode != 0
    assert "--toy_hidden: expected an integer >= 1, got 0" in bad.stderr + bad.stdout
    results, work = tmp_path / "results", tmp_path / "work"
    run = subprocess.run([sys.executable, "-m", "tfdp.apps.reproduce", "--scale=smoke",
                          "--papers=toy", f"--results_dir={results}", f"--work_dir={work}"],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    row = json.loads((results / "smoke" / "toy.sample.toy_sgd.json").read_text())
    assert 0.0 <= row["value"] <= 100.0
    job = json.loads((results / "smoke" / "jobs" / "train.toy.sample.json").read_text())
    assert "--method=toy_sgd" in job["command"]
    report = (results / "REPRODUCTION.md").read_text()
    assert "A toy paper" in report and "toy.sample.toy_sgd" in report


@pytest.mark.parametrize("body, kind, match", [
    (None, ImportError, "TFDP_PAPERS: cannot import paper package 'nopaper_pkg'"),
    ("X = 1\n", TypeError, "has no PAPER"),
    ("from tfdp import registry\nPAPER = registry.Paper(name='adlm', title='again')\n",
     ValueError, "paper 'adlm' declared twice"),
])
def test_a_bad_plugin_is_refused_naming_it(tmp_path, monkeypatch, body, kind, match):
    from tfdp import registry  # pylint: disable=import-outside-toplevel
    before = dict(registry.papers())
    if body is not None:
        (tmp_path / "nopaper_pkg").mkdir()
        (tmp_path / "nopaper_pkg" / "__init__.py").write_text(body)
        monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "nopaper_pkg", raising=False)  # each case its own module
    monkeypatch.setenv("TFDP_PAPERS", "nopaper_pkg")
    with pytest.raises(kind, match=match):
        registry.reload()
    assert registry.papers() == before  # a refused reload changes nothing
    monkeypatch.delenv("TFDP_PAPERS")
    registry.reload()


def test_a_method_target_that_is_not_module_colon_class_is_refused():
    from tfdp import registry  # pylint: disable=import-outside-toplevel
    with pytest.raises(ValueError, match="target 'tfdp.train.dpsgd.DPSGD' is not"):
        registry.MethodSpec("x", "tfdp.train.dpsgd.DPSGD", "summary")
    with pytest.raises(ValueError, match="method name 'Bad-Name'"):
        registry.MethodSpec("Bad-Name", "a:B", "summary")


def test_a_plugin_method_declares_whether_it_takes_input_smoothing(toy_paper):
    """--smoothing_sigma is for the methods whose own class sets `takes_smoothing` (the toy
    method declares it; secure_sgd, a DPSGD subclass, does not): no shared list names them.
    (tfdp-train passes these to the check: tests/evaluate/test_smoothing_eval.py.)"""
    from tfdp.certify import smoothing  # pylint: disable=import-outside-toplevel
    from tfdp.train import registry as methods  # pylint: disable=import-outside-toplevel
    methods.reload()
    takers = sorted(m for m in methods.METHODS
                    if methods.get_method_class(m).takes_input_smoothing())
    assert takers == ["dpsgd", "nonprivate", "toy_sgd"]
    assert not methods.get_method_class("secure_sgd").takes_input_smoothing()
    assert smoothing.check_smoothing_sigma("toy_sgd", 0.5, True) == 0.5
    with pytest.raises(ValueError, match=r"--smoothing_sigma: input smoothing is for "
                                         r"--method=dpsgd or nonprivate or toy_sgd, not 'adlm'"):
        smoothing.check_smoothing_sigma("adlm", 0.5, False, lambda: takers)
