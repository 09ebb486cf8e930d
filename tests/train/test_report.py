"""tfdp.train.report: the one ledger printer and the run's TensorBoard / printed output."""

import os

from tfdp.train import report


def _ledger(**kw):
    base = {"entries": [{"name": "dpsgd", "mechanism": "gaussian", "epsilon": 2.0,
                         "delta": 1e-5, "claimed_epsilon": 1.5}],
            "epsilon": 2.0, "delta": 1e-5, "claimed_epsilon": 1.5, "claimed_delta": 1e-5,
            "differs": True, "relation": "add_remove"}
    base.update(kw)
    return base


def test_ledger_lines_show_sound_and_claimed_totals():
    lines = report.ledger_lines(_ledger())
    assert lines[0] == "privacy ledger:"
    assert lines[1] == "  - dpsgd: gaussian eps=2.0 delta=1e-05 claimed eps=1.5"
    assert lines[2] == ("  total (sound accounting): epsilon=2.0 delta=1e-05 "
                        "(add/remove-one neighbours)")
    assert lines[3].startswith("  total (as claimed): epsilon=1.5")
    same = report.ledger_lines(_ledger(differs=False))
    assert same[-1] == "  (claimed total equals the sound total)"
    empty = report.ledger_lines({"entries": [], "epsilon": "inf", "delta": 0.0})
    assert "epsilon=inf (no differential-privacy guarantee)" in empty[-2]
    assert empty[-1] == ("  (no entries: nothing protects the training data; no "
                         "differential-privacy guarantee)")


def test_privacy_summary():
    assert report.privacy_summary(_ledger()) == (
        "privacy: claimed epsilon=1.5, sound epsilon=2.0 at delta=1e-05")


def test_privacy_summary_names_the_accountant():
    def ledger(mechanism):
        return _ledger(entries=[{"name": "dpsgd", "mechanism": mechanism, "epsilon": 2.0,
                                 "delta": 1e-5, "claimed_epsilon": 1.5}])
    assert report.privacy_summary(ledger("dpsgd_pld")).endswith("(PLD accountant)")
    # A ledger written with RDP (every ledger before PLD became the default) says RDP.
    assert report.privacy_summary(ledger("dpsgd_rdp")).endswith("(RDP accountant)")


def test_reporter_prints_and_writes_events(tmp_path):
    out = []
    rep = report.Reporter(str(tmp_path / "logs"), 1, out.append, interactive=True)
    rep.start_epoch(0, 2, 3)
    rep.step(1, {"loss": 0.5})
    rep.end_epoch(0, {"loss": 0.5}, 3)
    rep.finish(0.75, 10, 1, _ledger(), 1.0, "/run")
    assert "epoch 1/2" in out  # the progress bar's header (on a terminal)
    assert "test accuracy: 0.7500 (10 examples)" in out
    assert any("exceeds --epsilon=1" in line for line in out)
    assert out[-1] == "run directory: /run"
    assert os.listdir(tmp_path / "logs")  # an event file
    quiet = []
    report.Reporter(None, 1, quiet.append).finish(0.5, 1, 1, _ledger(), None, "/run")
    assert quiet == []  # not the chief: nothing printed, no events


def test_reporter_off_a_terminal_prints_one_line_per_epoch(tmp_path):
    out = []
    rep = report.Reporter(str(tmp_path / "logs"), 1, out.append, interactive=False)
    rep.start_epoch(0, 2, 3)
    rep.step(1, {"loss": 0.5})
    rep.end_epoch(0, {"loss": 0.5}, 3)
    rep.epoch_line(0, 2, 3, {"loss": 0.5}, 0.8125, 1.999998890499241, 2.0)
    assert "epoch 1/2" not in out  # no progress-bar header
    line = out[-1]
    assert line.startswith("epoch 1/2  step 3  loss 0.5000  test acc 0.8125  eps 2.0 of 2.0")
    assert "/epoch" in line and "ETA" in line
