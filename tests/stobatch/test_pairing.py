"""StoBatch pairing modes (docs/stobatch.md): per_epoch_random's shared pool."""

import numpy as np
import pytest

from tfdp.train import loop
from tfdp.papers.stobatch import method as stobatch
from tfdp.train.base import TrainConfig

SHAPE, K = (8, 8, 1), 3


def _method(model_dir, m=9, **options):
    opts = {"stobatch_architecture": "tiny", "stobatch_hidden_units": 8,
            "stobatch_attack_iters": 1, "stobatch_ae_optimizer": "sgd",
            "stobatch_pairing": "per_epoch_random"}
    opts.update(options)
    cfg = TrainConfig(method="stobatch", dataset="synthetic", model_dir=str(model_dir),
                      epochs=2, batch_size=m, learning_rate=0.01, seed=3, epsilon=100.0,
                      options=opts)
    return stobatch.StoBatch(cfg)


@pytest.mark.parametrize("n_b", [2, 3, 7, 8])
def test_per_epoch_random_pool_cycles(tmp_path, n_b):
    m = 4
    n = n_b * m + 3  # a remainder of 3 examples is dropped
    method = _method(tmp_path, m=m)
    assert method.batch_schedule() == "per_epoch_random"  # a label; batches() builds them
    partition = None
    for epoch in range(3):
        steps = method.epoch_batches(n, 11, np.random.default_rng(epoch))
        assert len(steps) == n_b  # one epoch = n_b steps = two pool cycles
        blocks = np.stack(steps)
        assert blocks.shape == (n_b, 2 * m)
        # which fixed batch every draw took (benign then adversarial source, step by step)
        draws = blocks.reshape(2 * n_b, m)
        parts = {tuple(sorted(d)) for d in draws}
        assert len(parts) == n_b  # exactly the n_b fixed batches, never a mix
        ids = {p: i for i, p in enumerate(sorted(parts))}
        seq = [ids[tuple(sorted(d))] for d in draws]
        if partition is None:
            partition = parts
            assert set().union(*map(set, parts)) <= set(range(n))
            assert sum(len(p) for p in parts) == len(set().union(*map(set, parts)))  # disjoint
        assert parts == partition  # the partition is fixed across epochs
        for cycle in (seq[:n_b], seq[n_b:]):  # every pool cycle uses every batch once
            assert sorted(cycle) == list(range(n_b))
        for t in range(n_b):  # no step uses one batch in both roles
            assert seq[2 * t] != seq[2 * t + 1]
    # epochs draw different pairings (pool order from the epoch's RNG)
    a = method.epoch_batches(n, 11, np.random.default_rng(0))
    b = method.epoch_batches(n, 11, np.random.default_rng(1))
    if n_b > 2:
        assert any(not np.array_equal(u, v) for u, v in zip(a, b))


def test_alg4_fixed_pairs_is_still_the_loop_fixed_schedule(tmp_path):
    method = _method(tmp_path, stobatch_pairing="alg4_fixed_pairs")
    assert method.batch_schedule() == "fixed"


def test_per_epoch_random_trains_n_b_steps_per_epoch(tmp_path):
    rng = np.random.default_rng(0)
    n = 5 * 9 + 2
    x = rng.uniform(-1, 1, (n,) + SHAPE).astype(np.float32)
    y = rng.integers(0, K, n)
    data = loop.Data(x.copy(), y.copy(), x[:10].copy(), y[:10].copy(), SHAPE, K)
    result = loop.train(_method(tmp_path / "run"), data, optimizer="sgd", verbose=0)
    assert result.steps == 2 * 5  # 2 epochs of n_b = 5 steps (alg4 pairs would give 2 x 2)
    weights = result.model.theta1 + result.model.theta2
    assert all(np.all(np.isfinite(v.numpy())) for v in weights)


@pytest.mark.parametrize("options, flag", [
    ({"stobatch_pairing": "shared_pool"}, "--stobatch_pairing"),
    ({"stobatch_trainers": 2}, "--stobatch_trainers"),
])
def test_bad_pairing_settings_name_the_flag(tmp_path, options, flag):
    with pytest.raises(ValueError, match=flag):
        _method(tmp_path, **options).validate()


def _release_reader(n, m, steps):
    """The MNIST code release's reads written out: input_data.next_batch with no shuffle,
    three adversarial thirds (emsemble_L = m / 3) then the benign batch, per step."""
    index, out = 0, []

    def next_batch(size):
        nonlocal index
        start = index
        index += size
        if index > n:  # Finished epoch: start again at 0
            start, index = 0, size
        return list(range(start, index))

    for _ in range(steps):
        adv = next_batch(m // 3) + next_batch(m // 3) + next_batch(m // 3)
        out.append((next_batch(m), adv))
    return out


def test_release_reader_reads_as_the_code_release(tmp_path):
    m, n = 9, 50  # 18 records a step: a pass holds 2 steps and 14 records are skipped
    method = _method(tmp_path, m=m, stobatch_pairing="release_reader")
    assert method.batch_schedule() == "release_reader"
    want = _release_reader(n, m, 7)
    got = method.reader_steps(n, 7)
    assert [(list(s[:m]), list(s[m:])) for s in got] == want
    # the reads depend on the step count only: epoch e's steps are steps [e k, (e + 1) k)
    method.data_spec = type("Spec", (), {"num_train": n})()
    per_epoch = n // (2 * m)
    for epoch in range(3):
        steps = list(method.batches(epoch, np.random.default_rng(epoch)))
        assert [(list(b), list(a)) for b, a in steps] == want[epoch * per_epoch:
                                                              (epoch + 1) * per_epoch]


@pytest.mark.parametrize("options, m, flag", [
    ({"stobatch_pairing": "release_reader", "stobatch_trainers": 2}, 9, "--stobatch_trainers"),
    ({"stobatch_pairing": "release_reader"}, 8, "--batch_size"),
])
def test_release_reader_settings_name_the_flag(tmp_path, options, m, flag):
    with pytest.raises(ValueError, match=flag):
        _method(tmp_path, m=m, **options).validate()
