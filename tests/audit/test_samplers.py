"""Audit-tool self-test: the black-box conformance suite (docs/gpm.md, "Audits")."""

import math

import numpy as np
import pytest

from tfdp import mechanisms
from tfdp.audit import DISCLAIMER, samplers
from tfdp.papers.gpm import pancake

pytestmark = pytest.mark.filterwarnings("ignore::tfdp.papers.gpm.pancake.GPMResearchWarning")


def _gm(sigma, d):
    return lambda num, seed: mechanisms.sample_gaussian(sigma, (num, d),
                                                        rng=np.random.default_rng(seed))


def test_passes_genuine_gaussian_and_gpm_d256():
    gm = samplers.conformance_suite(_gm(2.0, 256), family="gaussian", scale=2.0, n=10000)
    assert gm.passed, gm.to_text()
    key = pancake.generate_key(256, rng=np.random.default_rng(5))
    gpm = samplers.conformance_suite(
        lambda num, seed: pancake.pancake_noise(key, 2.0, 1e-4, 32.0, num,
                                                rng=np.random.default_rng(seed)),
        family="gaussian", scale=2.0, n=10000)
    assert gpm.passed, gpm.to_text()
    for rep in (gm, gpm):
        assert DISCLAIMER in rep.to_text() and "PASS does not certify" in rep.disclaimer


def test_fails_misscaled_gaussian():
    rep = samplers.conformance_suite(_gm(1.8, 256), family="gaussian", scale=2.0, n=10000)
    assert not rep.passed
    assert rep.groups()["variance"]["rejected"] > 0


def test_fails_repeated_seed():
    def fixed(num, seed):
        del seed  # ignores the seed: a fixed embedded seed (GPM Example 3.3)
        return 2.0 * np.random.default_rng(1234).standard_normal((num, 16))
    rep = samplers.conformance_suite(fixed, family="gaussian", scale=2.0, n=5000)
    assert not rep.passed
    assert rep.groups()["seed_reuse"]["rejected"] == 2


def test_small_d_scan_detects_gpm_d2():
    key = pancake.generate_key(2, rng=np.random.default_rng(6))
    sampler = lambda num, seed: pancake.pancake_noise(  # noqa: E731
        key, 1.0, 0.3, 5.0, num, rng=np.random.default_rng(seed))
    rep = samplers.conformance_suite(sampler, family="gaussian", scale=1.0, n=10000)
    assert not rep.passed
    ks = [r for r in rep.results if r.name.startswith("scan_ks:")]
    assert len(ks) == 360
    best = min(ks, key=lambda r: r.p_value)
    # Spec reference: minimum p about 1e-28 at the grid direction nearest to w.
    assert best.p_value < 1e-15
    angle = math.atan2(key[1], key[0]) % math.pi
    idx = int(best.name.split(":")[1])
    diff = abs(idx * math.pi / 360 - angle)
    assert min(diff, math.pi - diff) <= 2 * math.pi / 360
    gm = samplers.conformance_suite(_gm(1.0, 2), family="gaussian", scale=1.0, n=10000)
    assert gm.passed, gm.to_text()


def test_laplace_pass_and_fail():
    lap = lambda b: (lambda num, seed: mechanisms.sample_laplace(  # noqa: E731
        b, (num, 16), rng=np.random.default_rng(seed)))
    assert samplers.conformance_suite(lap(1.5), family="laplace", scale=1.5, n=10000).passed
    assert not samplers.conformance_suite(lap(1.35), family="laplace", scale=1.5,
                                          n=10000).passed


def test_holm_bonferroni():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    # Holm at 0.05: sorted 0.005 <= 0.0125, 0.01 <= 0.0167, 0.03 > 0.025 -> stop.
    np.testing.assert_array_equal(samplers.holm_bonferroni(p, 0.05), [True, False, False, True])


def test_validation():
    with pytest.raises(ValueError, match="family"):
        samplers.conformance_suite(_gm(1.0, 4), family="cauchy", scale=1.0)
    with pytest.raises(ValueError, match="scale"):
        samplers.conformance_suite(_gm(1.0, 4), family="gaussian", scale=0.0)
    with pytest.raises(ValueError, match="sampler"):
        samplers.conformance_suite(lambda n, s: np.zeros(n), family="gaussian", scale=1.0,
                                   n=100)


def test_known_answer_test_catches_gpm_that_statistics_miss():
    def reference(num, seed):  # open reference: sigma * standard normals of PCG64(seed)
        return 2.0 * np.random.default_rng(seed).standard_normal((num, 256))
    key = pancake.generate_key(256, rng=np.random.default_rng(9))

    def substituted(num, seed):
        return pancake.pancake_noise(key, 2.0, 1e-4, 32.0, num, rng=np.random.default_rng(seed))
    assert samplers.known_answer_test(reference, reference)["passed"]
    kat = samplers.known_answer_test(substituted, reference)
    assert not kat["passed"] and kat["mismatched_seeds"] == [0, 1, 2]
