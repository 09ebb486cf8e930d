"""Defences against the GPM backdoor: Haar rotation and trusted top-up (GPM Sec. 6)."""

import math

import numpy as np
import pytest
from scipy import special

from tfdp.papers.gpm import defences
from tfdp.papers.gpm import pancake

pytestmark = pytest.mark.filterwarnings("ignore::tfdp.papers.gpm.pancake.GPMResearchWarning")

D, SIGMA, BETA, GAMMA, N = 64, 2.0, 1e-3, 16.0, 20000
SE4 = 4 * math.sqrt(0.25 / N)  # 4 binomial standard errors at p = 1/2


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(0)
    w = pancake.generate_key(D, rng=rng)
    s = pancake.spacing(SIGMA, BETA, GAMMA)
    q0 = np.zeros(D)
    q1 = q0 + 0.25 * s * w  # t = 0.25: the key attack alone succeeds with ~1
    b = rng.integers(2, size=N)
    return rng, w, q0, q1, b


def test_haar_rotation_properties():
    q = defences.haar_rotation(D, rng=np.random.default_rng(1))
    np.testing.assert_allclose(q.T @ q, np.eye(D), atol=1e-12)
    assert np.linalg.det(q) == pytest.approx(1.0, abs=1e-9)
    # Haar: Q e_1 is uniform on the sphere, so its first coordinate has mean 0, var 1/d.
    firsts = np.array([defences.haar_rotation(8, rng=np.random.default_rng(i))[0, 0]
                       for i in range(2000)])
    assert abs(firsts.mean()) < 4 * math.sqrt(1 / 8 / 2000)
    assert firsts.var() == pytest.approx(1 / 8, rel=0.15)  # > 4 SE of sqrt(2/2000)*(...)
    with pytest.raises(ValueError, match="d="):
        defences.haar_rotation(5000, rng=np.random.default_rng(0))


def test_rotation_defeats_key_attack(setup):
    rng, w, q0, q1, b = setup
    undefended = np.where(b[:, None] == 1, q1, q0) + pancake.pancake_noise(
        w, SIGMA, BETA, GAMMA, N, rng=rng)
    assert np.mean(pancake.distinguish(undefended, q0, q1, w, SIGMA, BETA, GAMMA) == b) > 0.99
    rot = defences.haar_rotation(D, rng=np.random.default_rng(2))

    def backdoored_standard(num, r):  # a sampler claiming N(0, I) that is GPM with key w
        return pancake.pancake_noise(w, 1.0, BETA, GAMMA, num, rng=r)

    y = np.empty((N, D))
    for bit, q in ((0, q0), (1, q1)):
        idx = np.flatnonzero(b == bit)
        y[idx] = defences.rotated_release(q, SIGMA, rot, backdoored_standard, rng=rng,
                                          num=idx.size)
    rate = np.mean(pancake.distinguish(y, q0, q1, w, SIGMA, BETA, GAMMA) == b)
    assert abs(rate - 0.5) < SE4
    # An honest sampler keeps its law under rotation: per-coordinate variance sigma^2.
    honest = defences.rotated_release(q0, SIGMA, rot, lambda n, r: r.standard_normal((n, D)),
                                      rng=rng, num=N)
    np.testing.assert_allclose(honest.var(axis=0), SIGMA ** 2, rtol=0.06)  # 6 SE of 1%


def test_trusted_top_up(setup):
    rng, w, q0, q1, b = setup
    y1 = np.where(b[:, None] == 1, q1, q0) + pancake.pancake_noise(w, SIGMA, BETA, GAMMA, N,
                                                                   rng=rng)
    y = defences.trusted_top_up(y1, SIGMA, rng=np.random.default_rng(3))
    rate = np.mean(pancake.distinguish(y, q0, q1, w, SIGMA, BETA, GAMMA) == b)
    assert abs(rate - 0.5) < SE4
    # Nobody beats GM at sigma: the optimal (likelihood-ratio) test on the released y.
    best = special.ndtr(np.linalg.norm(q1 - q0) / (2 * SIGMA))
    lr = np.mean((((y - (q0 + q1) / 2) @ (q1 - q0)) > 0) == b)
    assert lr <= best + SE4
    # RMS error grows by sqrt(2) (within 2%).
    rms1 = math.sqrt(np.mean(np.sum((y1 - np.where(b[:, None] == 1, q1, q0)) ** 2, axis=1)))
    rms2 = math.sqrt(np.mean(np.sum((y - np.where(b[:, None] == 1, q1, q0)) ** 2, axis=1)))
    assert rms2 / rms1 == pytest.approx(math.sqrt(2), rel=0.02)
    costs = defences.top_up_costs(SIGMA, D, 1e-5)
    assert costs["rms_error_ratio"] == pytest.approx(math.sqrt(2))
    half = defences.top_up_costs(SIGMA, D, 1e-5, split="half")
    assert half["rms_error_ratio"] == 1.0 and half["eps_vs_key_holder"] > half["eps_claimed"]
    with pytest.raises(ValueError, match="y1"):
        defences.trusted_top_up(y1.astype(np.float32), SIGMA, rng=rng)


def test_distributed_effective_sigma():
    assert defences.distributed_effective_sigma(10, 2, 3, 5, 1.5) == pytest.approx(
        math.sqrt(5) * 1.5)
    assert defences.distributed_effective_sigma(10, 2, 5, 5, 1.5) is None
    with pytest.raises(ValueError, match="n_backdoored"):
        defences.distributed_effective_sigma(3, 2, 2, 5, 1.0)


def test_hadamard_rotation_is_orthogonal_and_hides_the_key(setup):
    rng, w, q0, q1, b = setup
    rot = defences.hadamard_rotation(D, rng=np.random.default_rng(4))
    mat = rot(np.eye(D))  # rows are Q e_i, i.e. Q^T
    np.testing.assert_allclose(mat @ mat.T, np.eye(D), atol=1e-12)

    def backdoored_standard(num, r):
        return pancake.pancake_noise(w, 1.0, BETA, GAMMA, num, rng=r)

    y = np.empty((N, D))
    for bit, q in ((0, q0), (1, q1)):
        idx = np.flatnonzero(b == bit)
        y[idx] = defences.rotated_release(q, SIGMA, rot, backdoored_standard, rng=rng,
                                          num=idx.size)
    assert abs(np.mean(pancake.distinguish(y, q0, q1, w, SIGMA, BETA, GAMMA) == b) - 0.5) < SE4
    with pytest.raises(ValueError, match="power of two"):
        defences.hadamard_rotation(48, rng=rng)
