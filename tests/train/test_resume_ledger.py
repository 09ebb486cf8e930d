"""Resume against the ledger (issue 22 items 5, 6): the ledger must cover what the checkpoint
ran; --resume --epochs=N (larger) trains and charges the extra epochs; nothing is written
when nothing runs."""

import json
import os

import pytest

from tfdp import accounting, rundir
from tfdp.train import dpsgd, loop
from tfdp.train.base import TrainConfig

_SHAPE = (6, 6, 1)


@pytest.fixture(scope="module")
def tiny_data(synthetic_data):
    return synthetic_data(_SHAPE, 3, num_train=96, num_test=40, seed=0)


def _dpsgd(tmp_path, name, epochs, **kw):
    opts = {"dpsgd_l2_clip": 0.5, "dpsgd_model": "mlp", "dpsgd_sampling": "poisson"}
    opts.update(kw.pop("options", {}))
    base = dict(method="dpsgd", dataset="synthetic", model_dir=str(tmp_path / name),
                epochs=epochs, batch_size=16, learning_rate=0.05, seed=5, delta=1e-5,
                options=opts)
    base.update(kw)
    return dpsgd.DPSGD(TrainConfig(**base))


def _snapshot(model_dir):
    out = {}
    for root, _, files in os.walk(model_dir):
        for f in files:
            if f == ".lock":
                continue
            path = os.path.join(root, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, model_dir)] = fh.read()
    return out


def _rewrite_segments(model_dir, **changes):
    """Rewrites ledger.json with the dpsgd entry's first segment changed (a valid ledger)."""
    path = os.path.join(model_dir, rundir.LEDGER_FILE)
    old = accounting.PrivacyLedger.load(path)
    entry = old.get("dpsgd")
    segs = [dict(entry["segments"][0], **changes)] + entry["segments"][1:]
    new = accounting.PrivacyLedger()
    new.noise_seed = old.noise_seed
    new.record_steps("dpsgd", segments=segs, delta=1e-5, sampling="poisson")
    new.save(path)


def test_resume_refuses_a_ledger_that_does_not_cover_the_checkpoint(tmp_path, tiny_data):
    opts = {"dpsgd_noise_multiplier": 1.0}
    first = loop.train(_dpsgd(tmp_path, "r", 3, epsilon=None, options=opts), tiny_data,
                       stop_after_epochs=2, verbose=0)
    assert first.steps > 5
    _rewrite_segments(first.model_dir, steps=5)  # an edited (or stale) ledger.json
    before = _snapshot(first.model_dir)
    with pytest.raises(ValueError) as err:
        loop.train(_dpsgd(tmp_path, "r", 3, epsilon=None, options=opts), tiny_data,
                   resume=True, verbose=0)
    msg = str(err.value)
    assert "\n" not in msg
    assert f"charges 5 steps of 'dpsgd' but the checkpoint" in msg
    assert f"has run {first.steps} steps" in msg
    assert _snapshot(first.model_dir) == before  # refused before anything was written


def test_resume_refuses_a_ledger_other_than_the_checkpoint_s(tmp_path, tiny_data):
    opts = {"dpsgd_noise_multiplier": 1.0}
    first = loop.train(_dpsgd(tmp_path, "d", 3, epsilon=None, options=opts), tiny_data,
                       stop_after_epochs=1, verbose=0)
    # Same steps, a larger noise multiplier: covers the steps, but is not the run's ledger.
    _rewrite_segments(first.model_dir, noise_multiplier=5.0)
    with pytest.raises(ValueError, match=r"does not match the ledger saved in the checkpoint"
                                         r".*sha256 [0-9a-f]{16}"):
        loop.train(_dpsgd(tmp_path, "d", 3, epsilon=None, options=opts), tiny_data,
                   resume=True, verbose=0)


def test_resume_with_more_epochs_than_the_budget_is_refused_naming_the_numbers(tmp_path,
                                                                             tiny_data):
    """A finished 2-epoch DP-SGD run with sigma solved for epsilon = 2, resumed to 3: the
    third epoch would end above --epsilon, so it is refused before any work (issue 43)."""
    done = loop.train(_dpsgd(tmp_path, "e", 2, epsilon=2.0), tiny_data, verbose=0)
    eps2 = done.ledger["epsilon"]
    assert done.epochs_completed == 2 and eps2 <= 2.0 + 1e-9
    before = _snapshot(done.model_dir)
    with pytest.raises(ValueError) as err:
        loop.train(_dpsgd(tmp_path, "e", 3, epsilon=2.0), tiny_data, resume=True, verbose=0)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("--epsilon: the budget is spent")
    assert f"at step {done.steps}" in msg and "--epsilon=2 " in msg
    nxt = float(msg.split("would bring it to ")[1].split(";")[0])
    assert nxt > 2.0  # the next step's epsilon, named
    assert _snapshot(done.model_dir) == before  # nothing written


def test_resume_with_more_epochs_without_a_target_trains_and_charges_them(tmp_path,
                                                                          tiny_data):
    """Fixed sigma and no --epsilon: the extra epoch runs and is charged."""
    opts = {"dpsgd_noise_multiplier": 1.0}
    done = loop.train(_dpsgd(tmp_path, "f", 2, epsilon=None, options=opts), tiny_data,
                      verbose=0)
    more = loop.train(_dpsgd(tmp_path, "f", 3, epsilon=None, options=opts), tiny_data,
                      resume=True, verbose=0)
    assert more.epochs_completed == 3 and more.steps > done.steps
    entry = [e for e in more.ledger["entries"] if e["name"] == "dpsgd"][0]
    assert sum(s["steps"] for s in entry["segments"]) == more.steps
    assert len(entry["segments"]) == 1  # continues the first segment
    assert more.ledger["epsilon"] > done.ledger["epsilon"]  # the third epoch is charged
    config = json.load(open(os.path.join(more.model_dir, rundir.CONFIG_FILE)))
    assert config["epochs"] == 3
    # The same resume again has nothing to run: refused, nothing written.
    before = _snapshot(more.model_dir)
    with pytest.raises(ValueError, match="epochs"):
        loop.train(_dpsgd(tmp_path, "f", 3, epsilon=None, options=opts), tiny_data,
                   resume=True, verbose=0)
    assert _snapshot(more.model_dir) == before


def test_resume_past_the_plan_stops_at_the_budget(tmp_path, tiny_data):
    """Fixed sigma with --epsilon, resumed with many more epochs (the plan's cap is lifted):
    the run stops at the last step within the budget, never above it, and says so."""
    opts = {"dpsgd_noise_multiplier": 2.0}
    first = loop.train(_dpsgd(tmp_path, "b", 2, epsilon=3.0, options=opts), tiny_data,
                       verbose=0)
    assert first.ledger["epsilon"] < 3.0
    lines = []
    res = loop.train(_dpsgd(tmp_path, "b", 60, epsilon=3.0, options=opts), tiny_data,
                     resume=True, verbose=1, print_fn=lines.append)
    assert res.metrics["stopped_early"] and res.steps > first.steps
    assert res.ledger["epsilon"] <= 3.0 * (1 + 1e-9)
    one_more = accounting.dpsgd_epsilon(num_examples=96, batch_size=16, noise_multiplier=2.0,
                                        steps=res.steps + 1, delta=1e-5)
    assert one_more > 3.0  # it stopped at the budget, not before it
    assert any(line.startswith("stopping at the budget") for line in lines)


def test_resume_after_a_crash_mid_epoch_accepts_the_over_charged_ledger(tmp_path, tiny_data):
    """ledger.json charged for an epoch that began after the last checkpoint is fine."""
    opts = {"dpsgd_noise_multiplier": 1.0}
    first = loop.train(_dpsgd(tmp_path, "c", 3, epsilon=None, options=opts), tiny_data,
                       stop_after_epochs=1, verbose=0)
    path = os.path.join(first.model_dir, rundir.LEDGER_FILE)
    led = accounting.PrivacyLedger.load(path)
    seg = led.get("dpsgd")["segments"][0]
    led.record_steps("dpsgd", segments=[dict(seg, steps=seg["steps"] + 6, passes=2)],
                     delta=1e-5, sampling="poisson")
    led.save(path)  # as if the run charged epoch 2 and was killed during it
    res = loop.train(_dpsgd(tmp_path, "c", 3, epsilon=None, options=opts), tiny_data,
                     resume=True, verbose=0)
    assert res.epochs_completed == 3
