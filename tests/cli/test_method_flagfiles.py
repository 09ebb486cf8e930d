"""flags/methods/: one sample flagfile per registered method; each parses, resolves and trains."""

import copy
import os

import pytest

from tfdp.apps import train as train_app
from tfdp.train import registry

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_DIR = os.path.join(_ROOT, "flags", "methods")
# Tiny-size overrides for the training check (the files' own sizes are minutes each).
_TINY = ["--epochs=1", "--num_train=1000", "--num_test=100"]
_TINY_EXTRA = {"stobatch": ["--batch_size=499"], "adlm": ["--adlm_aux_epochs=1"],
               "ilm": ["--adlm_aux_epochs=1"]}


def _spec(method, tmp_path, extra=()):
    fv = copy.deepcopy(train_app.FLAGS)
    fv(["tfdp-train", f"--flagfile={os.path.join(_DIR, method + '.flags')}",
        f"--model_dir={tmp_path / method}", *extra])
    return train_app.resolve(*train_app.values_from_flags(fv))


def test_every_method_has_a_sample_flagfile():
    names = {f[:-len(".flags")] for f in os.listdir(_DIR) if f.endswith(".flags")}
    assert names == set(registry.METHODS)


@pytest.mark.parametrize("method", list(registry.METHODS))
def test_flagfile_resolves(method, tmp_path):
    spec = _spec(method, tmp_path)
    assert spec.config.method == method
    assert spec.config.dataset == "sample"
    text = open(os.path.join(_DIR, method + ".flags"), encoding="utf-8").read()
    assert f"--flagfile=flags/methods/{method}.flags" in text  # the usage line names itself


@pytest.mark.slow
@pytest.mark.parametrize("method", list(registry.METHODS))
def test_flagfile_trains_at_tiny_size(method, tmp_path):
    spec = _spec(method, tmp_path, _TINY + _TINY_EXTRA.get(method, []))
    result = train_app.execute(spec)
    assert result.epochs_completed == 1
    assert 0.0 <= result.metrics["test_accuracy"] <= 1.0
    assert os.path.exists(tmp_path / method / "model.keras")


def _training_flagfiles():
    out = []
    for root, _, files in os.walk(os.path.join(_ROOT, "flags")):
        out += [os.path.join(root, f) for f in files
                if f.endswith(".flags") and not f.endswith("_eval.flags")]
    return sorted(out)


def test_user_flagfiles_leave_the_seed_secret_and_seeded_ones_say_why():
    """Issue 22: the flagfiles users start from (flags/methods/, the sample and main-job
    flagfiles) draw their noise from a secret key; every training flagfile that fixes a seed
    says, right above it, that the seed is public and what that does to its epsilon."""
    templates = [os.path.join(_DIR, f) for f in os.listdir(_DIR)] + [
        os.path.join(_ROOT, "flags", p) for p in
        ("adlm/sample.flags", "hgm/sample.flags", "smoothing/sample_20k.flags")]
    for path in templates:
        with open(path, encoding="utf-8") as f:
            assert not any(ln.startswith("--seed") for ln in f.read().splitlines()), path
    seeded = 0
    for path in _training_flagfiles():
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        for i, ln in enumerate(lines):
            if ln.startswith("--seed"):
                seeded += 1
                above = " ".join(lines[max(0, i - 4):i])
                assert "public" in above and "user_supplied" in above, path
    assert seeded >= 10  # the reproduction flagfiles keep their seeds (and say why)


def test_a_template_run_records_no_seed(tmp_path):
    spec = _spec("dpsgd", tmp_path)
    assert spec.config.seed is None
