"""tfdp-audit subcommands run end to end on small settings."""

import csv
import os

import pytest
from absl import flags
from absl.testing import flagsaver

from tfdp.apps import audit as audit_app

pytestmark = pytest.mark.filterwarnings("ignore::tfdp.gpm.pancake.GPMResearchWarning")


def _run(argv):
    flags.FLAGS.unparse_flags()
    rest = flags.FLAGS(["tfdp-audit"] + argv)
    audit_app.main(rest)


def _rows(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_gpm_bounds_and_hist(tmp_path):
    out = str(tmp_path)
    with flagsaver.flagsaver():
        _run(["gpm-bounds", f"--audit_output_dir={out}"])
        _run(["gpm-hist", f"--audit_output_dir={out}", "--gpm_ds=256", "--gpm_epsilons=1",
              "--gpm_betas=1e-5,1e-1", "--audit_trials=200"])
    assert os.path.exists(os.path.join(out, "gpm_bounds.png"))
    rows = _rows(os.path.join(out, "gpm_hist.csv"))
    assert [float(r["beta"]) for r in rows] == [1e-5, 1e-1]
    assert float(rows[0]["success_rate"]) > 0.98
    assert os.path.exists(os.path.join(out, "gpm_hist.png"))


def test_dp_subcommand(tmp_path):
    with flagsaver.flagsaver():
        _run(["dp", f"--audit_output_dir={tmp_path}", "--audit_trials=2000",
              "--audit_threshold_trials=2000"])
    rows = {r["name"]: r for r in _rows(os.path.join(tmp_path, "dp_audit.csv"))
            if r["method"] == "balanced"}
    assert rows["gpm_with_key"]["exceeds_claim"] == "True"
    assert rows["laplace"]["exceeds_claim"] == "False"


def test_unknown_subcommand():
    with flagsaver.flagsaver():
        flags.FLAGS.unparse_flags()
        flags.FLAGS(["tfdp-audit"])
        with pytest.raises(Exception, match="subcommand"):
            audit_app.main(["tfdp-audit", "nope"])
