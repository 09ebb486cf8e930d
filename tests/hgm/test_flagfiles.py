"""Every flags/hgm training flagfile parses and resolves to a valid run (no training)."""

import copy
import glob
import os

import pytest

from tfdp.apps import train as train_app

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILES = sorted(p for p in glob.glob(os.path.join(REPO, "flags", "hgm", "*.flags"))
               if not p.endswith("_eval.flags"))


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_flagfile_resolves(path, tmp_path):
    values = copy.deepcopy(train_app.FLAGS)
    values(["tfdp-train", f"--flagfile={path}", f"--model_dir={tmp_path / 'run'}"])
    spec = train_app.resolve(*train_app.values_from_flags(values))
    assert spec.config.method == "secure_sgd"
    if os.path.basename(path) == "mnist_smoke_l2.flags":  # the sound l2 certificate
        assert spec.config.options["hgm_construction_bound"] == 0.1
        assert spec.config.options["hgm_sensitivity_mode"] == "l2_fourier"
    else:
        assert spec.config.options["hgm_construction_bound"] == 0.2


def test_all_flagfiles_present():
    names = {os.path.basename(p) for p in FILES}
    for data in ("mnist", "cifar10"):
        for scale in ("smoke", "reduced", "full"):
            assert f"{data}_{scale}.flags" in names
    assert "sample.flags" in names


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_flagfile_with_finite_epsilon_uses_a_sound_r_source(path):
    """Issue 22: r from noise-free pre-training on private data makes epsilon infinite, so a
    flagfile that claims a finite epsilon must take r from a source independent of the private
    records (a public split, uniform, or a file)."""
    values = copy.deepcopy(train_app.FLAGS)
    values(["tfdp-train", f"--flagfile={path}", "--model_dir=/nonexistent/run"])
    spec = train_app.resolve(*train_app.values_from_flags(values))
    if spec.config.epsilon is not None:
        source = spec.config.options.get("hgm_r_source")
        assert source in ("public_split", "uniform", "file"), (path, source)
