"""Secret noise (issue 22 item 1): >= 128 bits of OS entropy unless --seed, kept only in the
checkpoint; a user seed is recorded as "user_supplied"; the same seed gives the same run."""

import json
import os

import numpy as np
import pytest

from tfdp import rundir
from tfdp.train import dpsgd, loop
from tfdp.train.base import TrainConfig, derive_seed

_SHAPE = (6, 6, 1)
_CLASSES = 3
# A user seed long enough that its decimal text cannot occur by chance in the scanned files.
_SEED = 918273645


@pytest.fixture(scope="module")
def tiny_data(synthetic_data):
    return synthetic_data(_SHAPE, _CLASSES, num_train=96, num_test=40, seed=0)


def _dpsgd(tmp_path, name, seed=None, epochs=2):
    opts = {"dpsgd_l2_clip": 0.5, "dpsgd_noise_multiplier": 1.0, "dpsgd_model": "mlp",
            "dpsgd_sampling": "poisson"}
    return dpsgd.DPSGD(TrainConfig(method="dpsgd", dataset="synthetic",
                                   model_dir=str(tmp_path / name), epochs=epochs,
                                   batch_size=16, learning_rate=0.05, seed=seed, delta=1e-5,
                                   options=opts))


def test_derive_seed_widths_and_independence():
    key = (1 << 200) + 12345
    full = derive_seed(key, 5)
    assert 0 <= full < 2**192 and full.bit_length() > 160  # P(fails) < 2^-32
    assert derive_seed(key, 5, bits=31) < 2**31 and derive_seed(key, 5, bits=63) < 2**63
    assert derive_seed(key, 5, bits=63) == full >> (192 - 63)  # a prefix of the same stream
    assert len({derive_seed(key, s, i) for s in range(1, 8) for i in range(4)}) == 28
    assert derive_seed(key, 5) != derive_seed(key + 1, 5)
    with pytest.raises(ValueError, match="bits"):
        derive_seed(key, 5, bits=0)


def test_os_entropy_key_has_at_least_128_bits():
    assert loop.SECRET_BITS >= 128
    keys = [loop.os_entropy_key() for _ in range(4)]
    assert len(set(keys)) == 4
    # P(a uniform SECRET_BITS-bit key has fewer than 128 significant bits) = 2^(128 - 256).
    assert all(128 < k.bit_length() <= loop.SECRET_BITS for k in keys)


def test_unseeded_run_keeps_its_secret_in_the_checkpoint_only(tmp_path, tiny_data, leak_scan):
    res = loop.train(_dpsgd(tmp_path, "run"), tiny_data, verbose=0)
    key, user_supplied = leak_scan.run_secret(res.model_dir)
    assert not user_supplied and key.bit_length() > 128
    pats = leak_scan.patterns(leak_scan.derived_values(key))
    # Positive control: the scanner finds the key where it is kept (the checkpoint).
    ckpt_files = leak_scan.all_files(rundir.checkpoint_dir(res.model_dir))
    assert leak_scan.find(ckpt_files, pats)
    public = leak_scan.public_files(res.model_dir)
    assert any(p.endswith("model.keras") for p in public)
    assert any("tensorboard" in p or "events" in p for p in public), public
    assert leak_scan.find(public, pats) == []
    config = json.load(open(os.path.join(res.model_dir, rundir.CONFIG_FILE)))
    assert "seed" not in config and config["noise_seed"] == "os_entropy"
    ledger = json.load(open(os.path.join(res.model_dir, rundir.LEDGER_FILE)))
    assert ledger["noise_seed"] == "os_entropy" and "128 bits" in ledger["noise_seed_note"]
    # Another unseeded run draws another key, hence other noise.
    other = loop.train(_dpsgd(tmp_path, "other"), tiny_data, verbose=0)
    assert leak_scan.run_secret(other.model_dir)[0] != key
    assert any(not np.array_equal(a, b) for a, b in zip(res.model.get_weights(),
                                                         other.model.get_weights()))


def test_seeded_run_is_reproducible_and_recorded_as_user_supplied(tmp_path, tiny_data,
                                                                  leak_scan):
    one = loop.train(_dpsgd(tmp_path, "one", seed=_SEED), tiny_data, verbose=0)
    two = loop.train(_dpsgd(tmp_path, "two", seed=_SEED), tiny_data, verbose=0)
    for a, b in zip(one.model.get_weights(), two.model.get_weights()):
        np.testing.assert_array_equal(a, b)  # bit for bit
    assert one.ledger == two.ledger
    ledger = json.load(open(os.path.join(one.model_dir, rundir.LEDGER_FILE)))
    assert ledger["noise_seed"] == "user_supplied"
    assert "only while that seed stays secret" in ledger["noise_seed_note"]
    assert leak_scan.run_secret(one.model_dir) == (_SEED, True)
    pats = leak_scan.patterns(leak_scan.derived_values(_SEED))
    pats[str(_SEED).encode()] = "the seed"
    assert leak_scan.find(leak_scan.public_files(one.model_dir), pats) == []


def test_resume_checks_the_seed_against_the_checkpoint(tmp_path, tiny_data):
    seeded = loop.train(_dpsgd(tmp_path, "s", seed=_SEED), tiny_data, stop_after_epochs=1,
                        verbose=0)
    with pytest.raises(ValueError, match="^--seed: differs"):
        loop.train(_dpsgd(tmp_path, "s", seed=_SEED + 1), tiny_data, resume=True, verbose=0)
    # Without --seed a resume continues with the key kept in the checkpoint.
    done = loop.train(_dpsgd(tmp_path, "s"), tiny_data, resume=True, verbose=0)
    assert done.epochs_completed == 2 and seeded.interrupted
    full = loop.train(_dpsgd(tmp_path, "full", seed=_SEED), tiny_data, verbose=0)
    for a, b in zip(done.model.get_weights(), full.model.get_weights()):
        np.testing.assert_array_equal(a, b)
    loop.train(_dpsgd(tmp_path, "u"), tiny_data, stop_after_epochs=1, verbose=0)
    with pytest.raises(ValueError, match="^--seed: this run was started without --seed"):
        loop.train(_dpsgd(tmp_path, "u", seed=_SEED), tiny_data, resume=True, verbose=0)
