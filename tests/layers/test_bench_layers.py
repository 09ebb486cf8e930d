"""Smoke test of the `tfdp-bench layers` benchmark (tiny sizes; the real run is in the README)."""

import numpy as np
import pytest

from tfdp.bench import layers as bench_layers


def test_run_returns_ratio_and_setup():
    result = bench_layers.run(model="mnist", batch_size=2, steps=1, repeats=2, warmup=0,
                              noise_mode="per_batch", seed=3)
    for key in ("ratio", "target", "reference_ms_per_step", "candidate_ms_per_step", "passed",
                "model", "batch_size", "noise_mode"):
        assert key in result
    assert result["target"] == 1.10
    assert len(result["reference_ms_per_repeat"]) == 2
    assert np.isclose(result["ratio_of_medians"],
                      result["candidate_ms_per_step"] / result["reference_ms_per_step"])
    assert np.isclose(result["ratio"], np.median(result["ratio_per_repeat"]))
    assert result["passed"] == (result["ratio"] <= 1.10)
    assert "HeterogeneousGaussianNoise(per_batch" in result["candidate"]


def test_candidate_shares_reference_weights():
    ref = bench_layers.build_cnn("mnist", with_noise=False, seed=1)
    cand = bench_layers.build_cnn("mnist", with_noise=True, seed=1)
    cand.set_weights(bench_layers._merged_weights(ref, cand))
    x = np.random.default_rng(0).uniform(size=(2, 28, 28, 1)).astype("float32")
    np.testing.assert_allclose(cand.predict(x, verbose=0), ref.predict(x, verbose=0), rtol=1e-5,
                               atol=1e-6)


def test_bad_sizes():
    with pytest.raises(ValueError, match="steps"):
        bench_layers.run(model="mnist", steps=0)
    with pytest.raises(ValueError, match="model"):
        bench_layers.build_cnn("vgg", with_noise=False)
