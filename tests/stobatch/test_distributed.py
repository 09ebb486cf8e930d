"""StoBatch replica-count equivalence in float64 (docs/stobatch.md, "Distribution").

In float32, the attacks take sign(grad_x): with thousands of examples, summation-order
differences between one and R replicas flip the sign of a few near-zero input gradients, and
the changed adversarial pixels move theta by ~5e-4 (relative) after 5 steps at m = 2499
(measured; with the attacks switched off the float32 difference is ~5e-6). With
`--stobatch_dtype=float64` the same comparison is exact to ~1e-15, which checks the
algorithmic equivalence (no padding, global normalisers, chi3 once) without float32 noise.
"""

import numpy as np
import pytest

from tfdp import losses
from tfdp.train import loop
from tfdp.papers.stobatch import method as stobatch
from tfdp.train.base import TrainConfig

SHAPE, K = (8, 8, 1), 3


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n,) + SHAPE).astype(np.float32)
    return x, rng.integers(0, K, n)


def _method(model_dir, m, **options):
    opts = {"stobatch_architecture": "tiny", "stobatch_hidden_units": 8,
            "stobatch_attack_iters": 2, "stobatch_ae_optimizer": "sgd",
            "stobatch_dtype": "float64"}
    opts.update(options)
    cfg = TrainConfig(method="stobatch", dataset="synthetic", model_dir=str(model_dir),
                      epochs=1, batch_size=m, learning_rate=0.01, seed=3, epsilon=100.0,
                      options=opts)
    return stobatch.StoBatch(cfg)


def _weights(method, x, y, strategy=None):
    data = loop.Data(x.copy(), y.copy(), x[:10].copy(), y[:10].copy(), SHAPE, K)
    result = loop.train(method, data, strategy=strategy, optimizer="sgd", verbose=0)
    assert result.steps == 5
    return [v.numpy() for v in result.model.theta1 + result.model.theta2]


def _worst_rel_err(ref, other):
    return max(float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-12))
               for a, b in zip(ref, other))


def _chi3_on_every_replica(self, model):
    """The classic bug: the full chi3 term on every replica (R times the noise)."""
    w_pi = model.output_layer.kernel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    with tf.GradientTape() as tape:
        term = losses.functional_mechanism_term(model.chi3, w_pi, divisor=self.m,
                                                mode=self.noise_term)
    return term, tape.gradient(term, w_pi)


M = 99  # 50 / 49 rows per role over two replicas (uneven, unpadded)


def test_float64_two_replicas_uneven_m99_equal_one_device(tmp_path):
    # Replica-count check at default-suite size: 5 steps with crafting (I-FGSM, MIM, Madry thirds
    # of 33) and the chi3 term, synchronized BN, unpadded uneven shards. m = 2499 over 2 and
    # 4 devices: tests/stobatch/test_slow.py.
    x, y = _data(2 * M * 5)
    one = _weights(_method(tmp_path / "one", M), x, y)
    assert one[0].dtype == np.float64
    two = _weights(_method(tmp_path / "two", M), x, y, loop.cpu_mirrored_strategy())
    err = _worst_rel_err(one, two)
    print(f"float64 m={M} 1 vs 2 replicas: max relative error {err:.3g}")
    assert err < 1e-9, err  # float64 rounding after 5 steps; far below 1e-5


@pytest.mark.slow
def test_float64_check_catches_chi3_on_every_replica(tmp_path, monkeypatch):
    # The comparison above can fail: with the chi3 term added in full on every replica
    # (R times the noise) two replicas no longer match one device.
    x, y = _data(2 * M * 5)
    one = _weights(_method(tmp_path / "one", M), x, y)
    monkeypatch.setattr(stobatch.StoBatch, "chi3_term_gradient", _chi3_on_every_replica)
    bad = _weights(_method(tmp_path / "bad", M), x, y, loop.cpu_mirrored_strategy())
    assert _worst_rel_err(one, bad) > 1e-3


def test_float64_model_config_round_trip_and_bad_dtype(tmp_path):
    method = _method(tmp_path / "run", 9)
    x, y = _data(2 * 9 * 2)
    data = loop.Data(x.copy(), y.copy(), x[:10].copy(), y[:10].copy(), SHAPE, K)
    result = loop.train(method, data, optimizer="sgd", verbose=0)
    model = result.model
    assert all(v.dtype == "float64" for v in model.theta1 + model.theta2)
    assert model.input_noise.fixed_noise.dtype == "float32"  # the host draw, cast exactly
    clone = type(model).from_config(model.get_config())
    assert clone.compute_dtype == "float64"
    with pytest.raises(ValueError, match="--stobatch_dtype"):
        _method(tmp_path / "x", 9, stobatch_dtype="float16").validate()
