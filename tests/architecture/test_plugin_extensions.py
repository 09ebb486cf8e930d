"""A second paper added from outside tfdp: what else a paper adds, through its declaration.

Issue 42: a temporary package declares a toy paper that adds a certificate, a reproduction
extractor, a report figure and a tfdp-audit experiment subcommand with its own flags, as
`registry.Extension`s (docs/architecture.md, "Adding a paper"). No tfdp file is edited: the
test checks that the tree is untouched and that no tfdp file names the toy paper. Each
addition is then used the way the shipped papers' are: the certificate through
`tfdp.certify.from_config`, the subcommand through `tfdp-audit`, the extractor and the figure
through `tfdp-reproduce`.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests.architecture import imports

ROOT = imports.ROOT

_INIT = '''
from tfdp import registry

PAPER = registry.Paper(
    name="toyext", title="A toy paper with extensions",
    rows="toyext.rows:rows",
    extensions=(
        registry.Extension("certificate", "toy_box", "toyext.cert:ToyBox"),
        registry.Extension("extractor", "toy_half", "toyext.extract:toy_half"),
        registry.Extension("figure", "toy_figure", "toyext.figure:draw"),
        registry.Extension("subcommand", "toy-count", "toyext.experiment:COUNT"),
    ))
'''
_CERT = '''
import numpy as np
import tensorflow as tf

from tfdp.certify import registry as certificates


@certificates.register
class ToyBox(certificates.Certificate):
    """radius = scale * (lower - upper) where the top class wins, else 0."""

    name = "toy_box"

    def _validate(self, cfg):
        if "scale" not in cfg:
            raise ValueError("certification['scale'] is required for toy_box")
        return cfg

    @property
    def sound(self):
        return True

    def radius(self, lower, upper, attack_size=None):
        lo, up = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
        return np.where(lo > up, float(self.config["scale"]) * (lo - up), 0.0)

    def radius_tf(self, lower, upper, attack_size=0.0):
        lo, up = tf.cast(lower, tf.float64), tf.cast(upper, tf.float64)
        return tf.where(lo > up, float(self.config["scale"]) * (lo - up), tf.zeros_like(lo))
'''
_EXTRACT = '''
from tfdp.reproduce.extract import Value


def toy_half(outs, row):
    v = float(outs["cf"][0]["result"]["value"]) / 2.0
    return Value(v, f"{v:g}", [v])
'''
_COMPUTE = '''
def value(x):
    return {"value": float(x)}
'''
_ROWS = '''
from tfdp.reproduce.registry import Criterion, Row, python


def rows():
    return [Row(id="toyext.half", paper="toyext", source="a toy closed form",
                setting="half of 42", metric="value", published=21.0, published_text="21",
                criterion=Criterion("record", text="recorded"), extractor="toy_half",
                jobs=python("python.toyext.value", "toyext.compute:value", x=42.0))]
'''
_FIGURE = '''
import os


def draw(rows_by_key, out_dir, rel, draw):
    values = [rec["value"] for (_, rid), rec in sorted(rows_by_key.items())
              if rid.startswith("toyext.") and rec.get("value") is not None]
    if not values:
        return None
    if draw:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots()
        ax.bar(range(len(values)), values)
        fig.savefig(os.path.join(out_dir, "toyext.png"))
        plt.close(fig)
    return f"{rel}/toyext.png"
'''
_EXPERIMENT = '''
import os

from tfdp import options
from tfdp.audit import experiment


@options.declare("toyexp_")
class CountSettings:
    n: int = options.field(3, "toy-count: how many rows to write.", check=options.at_least(1))


def run(out, settings, common):
    experiment.write_csv(os.path.join(out, "toy_count.csv"),
                         [{"i": i, "seed": common.seed} for i in range(settings.n)])


COUNT = experiment.Subcommand("a toy experiment: writes N numbered rows", run, CountSettings)
'''
_FILES = {"__init__.py": _INIT, "cert.py": _CERT, "extract.py": _EXTRACT,
          "compute.py": _COMPUTE, "rows.py": _ROWS, "figure.py": _FIGURE,
          "experiment.py": _EXPERIMENT}


def _tree_state() -> dict[str, tuple[int, int]]:
    """(mtime, size) of every file of the shared packages (tfdp, layers, attacks)."""
    out = {}
    for pkg in imports.PACKAGES:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, pkg)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in filenames:
                path = os.path.join(dirpath, name)
                st = os.stat(path)
                out[path] = (st.st_mtime_ns, st.st_size)
    return out


@pytest.fixture
def toyext(tmp_path, monkeypatch):
    before = _tree_state()
    pkg = tmp_path / "toyext"
    pkg.mkdir()
    for name, text in _FILES.items():
        (pkg / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TFDP_PAPERS", "toyext")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(tmp_path)]),
               TF_CPP_MIN_LOG_LEVEL="3", TFDP_PAPERS="toyext")
    from tfdp import registry  # pylint: disable=import-outside-toplevel
    registry.reload()
    yield env
    monkeypatch.delenv("TFDP_PAPERS")
    registry.reload()
    certificates = sys.modules.get("tfdp.certify.registry")  # imported by the certificate test
    if certificates is not None:
        certificates.REGISTRY.pop("toy_box", None)
        assert "toy_box" not in certificates.names()
    assert _tree_state() == before, "the toy paper changed a file of tfdp, layers or attacks"


def _run(env, *args, check=True):
    proc = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_no_tfdp_file_names_the_toy_paper():
    for mod, path in imports.modules().items():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for word in ("toyext", "toy_box", "toy_half", "toy-count", "toyexp_"):
            assert word not in text, f"{mod} names {word}"


def test_a_toy_certificate_is_found_through_the_declaration(toyext):
    del toyext
    from tfdp import certify  # pylint: disable=import-outside-toplevel
    assert "toy_box" in certify.names()
    cert = certify.from_config({"mechanism": "toy_box", "scale": 2.0})
    assert type(cert).__name__ == "ToyBox" and cert.sound and cert.label() == "certified"
    lower, upper = np.array([0.9, 0.4, 0.6]), np.array([0.1, 0.5, 0.2])
    np.testing.assert_allclose(cert.radius(lower, upper), [1.6, 0.0, 0.8])
    np.testing.assert_allclose(certify.certified_radius(lower, upper, cert.to_config()),
                               [1.6, 0.0, 0.8])
    assert certify.from_config(cert.to_config()).to_config() == cert.to_config()
    with pytest.raises(ValueError, match="certification\\['scale'\\] is required for toy_box"):
        certify.from_config({"mechanism": "toy_box"})
    with pytest.raises(ValueError, match="must be one of .*toy_box.*got 'toy_nothing'"):
        certify.from_config({"mechanism": "toy_nothing"})


def test_a_toy_subcommand_runs_in_tfdp_audit_with_its_own_flags(toyext, tmp_path):
    env = toyext
    helped = _run(env, "tfdp.apps.audit", "--help")
    assert "toy-count" in helped.stdout and "a toy experiment" in helped.stdout
    assert "--toyexp_n=3" in helped.stdout
    bad_out = tmp_path / "bad"
    # --verbose: no quiet TensorFlow import at start (the toy experiment needs none).
    bad = _run(env, "tfdp.apps.audit", "toy-count", "--toyexp_n=0", "--verbose",
               f"--audit_output_dir={bad_out}", check=False)
    assert bad.returncode != 0
    assert "--toyexp_n: expected an integer >= 1, got 0" in bad.stderr + bad.stdout
    assert not bad_out.exists()  # refused before any work
    out = tmp_path / "out"
    _run(env, "tfdp.apps.audit", "toy-count", "--toyexp_n=4", "--audit_seed=7", "--verbose",
         f"--audit_output_dir={out}")
    with open(out / "toy_count.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [(r["i"], r["seed"]) for r in rows] == [("0", "7"), ("1", "7"), ("2", "7"),
                                                   ("3", "7")]


def test_a_toy_extractor_and_report_figure_serve_tfdp_reproduce(toyext, tmp_path):
    env = toyext
    results, work = tmp_path / "results", tmp_path / "work"
    _run(env, "tfdp.apps.reproduce", "--scale=smoke", "--papers=toyext",
         f"--results_dir={results}", f"--work_dir={work}")
    row = json.loads((results / "smoke" / "toyext.half.json").read_text())
    assert row["value"] == 21.0  # the toy extractor: half of the closed form's 42
    report = (results / "REPRODUCTION.md").read_text()
    assert "A toy paper with extensions" in report and "toyext.half" in report
    assert "figures/toyext.png)" in report
    assert (results / "figures" / "toyext.png").stat().st_size > 0


def test_an_extension_of_an_unknown_kind_or_bad_target_is_refused():
    from tfdp import registry  # pylint: disable=import-outside-toplevel
    with pytest.raises(ValueError, match="kind 'widget' is not one of"):
        registry.Extension("widget", "w", "a:b")
    with pytest.raises(ValueError, match="target 'a.b' is not 'module:attribute'"):
        registry.Extension("extractor", "x", "a.b")
    with pytest.raises(ValueError, match="extension name 'Bad Name'"):
        registry.Extension("extractor", "Bad Name", "a:b")
    with pytest.raises(ValueError, match="kind 'widget' is not one of"):
        registry.extensions("widget")


def test_two_papers_declaring_one_extension_are_refused_naming_both(tmp_path, monkeypatch):
    from tfdp import registry  # pylint: disable=import-outside-toplevel
    before = dict(registry.extensions("extractor"))
    (tmp_path / "clash_pkg").mkdir()
    (tmp_path / "clash_pkg" / "__init__.py").write_text(
        "from tfdp import registry\n"
        "PAPER = registry.Paper(name='clash', title='clash', extensions=(\n"
        "    registry.Extension('extractor', 'gpm_hist_cell', 'clash_pkg:f'),))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TFDP_PAPERS", "clash_pkg")
    with pytest.raises(ValueError, match="extractor 'gpm_hist_cell' of paper 'clash' is "
                                         "already declared by paper 'gpm'"):
        registry.reload()
    assert registry.extensions("extractor") == before  # a refused reload changes nothing
    monkeypatch.delenv("TFDP_PAPERS")
    registry.reload()
