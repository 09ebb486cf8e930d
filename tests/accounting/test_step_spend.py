"""accounting.StepSpend: the typed per-step spend a method returns, its ledger entry and its
dp_accounting event."""

from __future__ import annotations

import dataclasses
import math

import dp_accounting
import pytest

from tfdp import accounting


def _spend(**kw):
    args = dict(name="dpsgd", noise_multiplier=1.1, sampling="poisson", delta=1e-5,
                accountant="rdp")
    args.update(kw)
    return accounting.StepSpend(**args)


def _eps(event, delta=1e-5):
    return dp_accounting.rdp.RdpAccountant().compose(event).get_epsilon(delta)


def test_the_event_of_the_executed_segments_gives_the_ledger_epsilon():
    spend = _spend()
    segs = [spend.segment(0, 300, 5, 6000, 100), spend.segment(300, 120, 2, 6000, 50)]
    ledger = accounting.PrivacyLedger()
    entry = spend.record(ledger, segs)
    assert entry["name"] == "dpsgd" and entry["segments"] == segs
    assert math.isclose(_eps(spend.dp_event(segs)), entry["epsilon"], rel_tol=1e-12)
    # by hand: two self-composed Poisson-subsampled Gaussians
    by_hand = dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
            100 / 6000, dp_accounting.GaussianDpEvent(1.1)), 300),
        dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
            50 / 6000, dp_accounting.GaussianDpEvent(1.1)), 120)])
    assert math.isclose(_eps(by_hand), entry["epsilon"], rel_tol=1e-12)


def test_shuffled_batches_sound_event_is_per_pass_without_amplification():
    spend = _spend(sampling="shuffle")
    segs = [spend.segment(0, 180, 3, 6000, 100)]
    entry = spend.record(accounting.PrivacyLedger(), segs)
    sound = _eps(spend.dp_event(segs))
    assert math.isclose(sound, entry["epsilon"], rel_tol=1e-12)
    assert math.isclose(sound, _eps(dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(1.1 / 2.0), 3)), rel_tol=1e-12)
    claimed = _eps(spend.dp_event(segs, sound=False))
    assert claimed < sound
    assert math.isclose(claimed, entry["claimed_epsilon"], rel_tol=1e-12)


def test_an_unbounded_spend_has_no_sound_event_and_an_infinite_ledger_epsilon():
    spend = dataclasses.replace(_spend(), unbounded=True, note="batch-mean clipping")
    segs = [spend.segment(0, 10, 1, 1000, 100)]
    with pytest.raises(ValueError, match="unbounded"):
        spend.dp_event(segs)
    entry = spend.record(accounting.PrivacyLedger(), segs)
    assert accounting.epsilon_value(entry["epsilon"]) == math.inf
    assert "batch-mean clipping" in entry["note"]


@pytest.mark.parametrize("kw, match", [
    (dict(name=""), "name"), (dict(noise_multiplier=0.0), "noise_multiplier"),
    (dict(sampling="uniform"), "sampling"), (dict(delta=1.5), "delta"),
    (dict(accountant="moments"), "accountant")])
def test_bad_fields_are_refused_naming_the_field(kw, match):
    with pytest.raises(ValueError, match=match):
        _spend(**kw)


def test_the_spend_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _spend().name = "other"


def test_the_ledger_records_the_event_and_refuses_an_edited_one(tmp_path):
    """Issue 28: a per-step entry records its dp_accounting event; the file's event rebuilds
    to the entry's epsilon, and an event that is not the segments' is refused on load."""
    import json  # pylint: disable=import-outside-toplevel
    import dp_accounting  # pylint: disable=import-outside-toplevel
    for sampling in ("poisson", "shuffle"):
        spend = accounting.StepSpend(name="dpsgd", noise_multiplier=1.1, sampling=sampling,
                                     accountant="rdp", delta=1e-5)
        ledger = accounting.PrivacyLedger()
        segs = [spend.segment(0, 50, 2, 1000, 40), spend.segment(50, 30, 1, 1000, 20)]
        entry = spend.record(ledger, segs)
        event = accounting.event_from_json(entry["dp_event"])
        assert event == spend.dp_event(segs)
        acc = dp_accounting.rdp.RdpAccountant()
        acc.compose(event)
        assert acc.get_epsilon(1e-5) == pytest.approx(entry["epsilon"], rel=1e-9)
        path = ledger.save(str(tmp_path / f"{sampling}.json"))
        assert accounting.PrivacyLedger.load(path).entries[0]["dp_event"] == entry["dp_event"]
        data = json.load(open(path))
        data["entries"][0]["dp_event"]["events"][0]["count"] = 5  # fewer steps than ran
        json.dump(data, open(path, "w"))
        with pytest.raises(ValueError, match="dp_event: .* is not the event of the entry's "
                                             "segments"):
            accounting.PrivacyLedger.load(path)
    unbounded = accounting.StepSpend(name="x", noise_multiplier=1.0, sampling="poisson",
                                     accountant="rdp", delta=1e-5, unbounded=True)
    ledger = accounting.PrivacyLedger()
    assert unbounded.record(ledger, [unbounded.segment(0, 10, 1, 100, 10)])["dp_event"] is None
    with pytest.raises(ValueError, match="dp_event"):
        accounting.event_from_json({"type": "LaplaceDpEvent", "noise_multiplier": 1.0})
