"""tfdp-audit subcommands run end to end on small settings."""

import csv
import os

import pytest
from absl import flags
from absl.testing import flagsaver

from tfdp.apps import audit as audit_app

pytestmark = pytest.mark.filterwarnings("ignore::tfdp.papers.gpm.pancake.GPMResearchWarning")


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
              "--audit_threshold_trials=2000", "--audit_gdp_trials=100000"])
    all_rows = _rows(os.path.join(tmp_path, "dp_audit.csv"))
    rows = {r["name"]: r for r in all_rows if r["method"] == "balanced"}
    assert rows["gpm_with_key"]["exceeds_claim"] == "True"
    assert rows["laplace"]["exceeds_claim"] == "False"
    # Gaussian-DP audit at n = 100000 per input: sd(mu_hat) ~ 0.0045 vs the control's
    # margin mu(sigma x 0.9) - mu(claim) = 0.030 (6.6 sd), and 0.9 x claim is ~ 6 sd below
    # the analytic Gaussian's expected bound.
    gdp_rows = {r["name"]: r for r in all_rows if r["method"] == "gdp"}
    assert gdp_rows["control_gaussian_analytic_sigma_x0.9"]["exceeds_claim"] == "True"
    assert float(gdp_rows["gaussian_analytic"]["eps_lower"]) >= 0.9
    assert gdp_rows["gaussian_analytic"]["exceeds_claim"] == "False"


def test_dp_subcommand_bad_gdp_trials(tmp_path):
    with flagsaver.flagsaver():
        with pytest.raises(Exception, match="audit_gdp_trials"):
            _run(["dp", f"--audit_output_dir={tmp_path}", "--audit_gdp_trials=5"])
    assert not os.path.exists(os.path.join(tmp_path, "dp_audit.csv"))


def test_unknown_subcommand():
    with flagsaver.flagsaver():
        flags.FLAGS.unparse_flags()
        flags.FLAGS(["tfdp-audit"])
        with pytest.raises(Exception, match="subcommand"):
            audit_app.main(["tfdp-audit", "nope"])


_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_no_flagfile_writes_into_the_repository():
    # Issue 40: `tfdp-audit gpm-hist --flagfile=flags/gpm/hist_smoke.flags` wrote into the
    # checkout's results/. Flagfiles name work folders; results/ only when asked.
    offending = []
    for root, _, files in os.walk(os.path.join(_ROOT, "flags")):
        for name in files:
            with open(os.path.join(root, name), encoding="utf-8") as f:
                for line in f:
                    value = line.strip().partition("=")[2]
                    if line.startswith("--") and value.lstrip("./").startswith("results"):
                        offending.append(f"{name}: {line.strip()}")
    assert offending == []
    assert not flags.FLAGS["audit_output_dir"].default.startswith("results")


def test_hist_smoke_flagfile_writes_to_a_work_folder(tmp_path, monkeypatch):
    committed = os.path.join(_ROOT, "results", "gpm")

    def stamps():
        return {os.path.join(r, n): os.path.getmtime(os.path.join(r, n))
                for r, _, fs in os.walk(committed) for n in fs}

    before = stamps()
    monkeypatch.chdir(tmp_path)
    with flagsaver.flagsaver():
        _run(["gpm-hist", f"--flagfile={os.path.join(_ROOT, 'flags/gpm/hist_smoke.flags')}",
              "--gpm_epsilons=1", "--gpm_betas=1e-1", "--audit_trials=50"])
    assert os.path.exists(tmp_path / "runs" / "audit" / "hist_smoke" / "gpm_hist.csv")
    assert stamps() == before and not os.path.exists(os.path.join(committed, "hist_smoke"))
