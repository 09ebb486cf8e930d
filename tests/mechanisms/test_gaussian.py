"""Gaussian calibration: HGM Theorems 1-3 (Figure 1 values), Balle & Wang 2018; GPM Thm 2.3."""

import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from tfdp import mechanisms as m

# HGM Figure 1 values: eps -> (HGM sigma, classical GM sigma, AGM sigma, exact delta of HGM sigma)
# at delta = 1e-5, sensitivity 1.
TABLE = [
    (0.05, 95.1299, 96.8961, 57.7707, 2.07e-9),
    (0.1, 47.6174, 48.4481, 30.7496, 4.12e-9),
    (0.2, 23.8610, 24.2240, 16.3041, 8.20e-9),
    (0.25, 19.1096, 19.3792, 13.2855, 1.02e-8),
    (0.5, 9.6066, 9.6896, 7.0318, 2.01e-8),
    (0.75, 6.4385, 6.4597, 4.8506, 2.97e-8),
    (0.9, 5.3824, 5.3831, 4.1066, 3.54e-8),
    (1, 4.8542, 4.8448, 3.7306, 3.91e-8),
    (2, 2.4766, 2.4224, 1.9938, 7.39e-8),
    (4, 1.2851, 1.2112, 1.0812, 1.34e-7),
    (8, 0.6851, 0.6056, 0.6002, 2.25e-7),
    (10, 0.5638, 0.4845, 0.4999, 2.61e-7),
]
EPS_GRID = np.geomspace(0.01, 50, 41)
DELTA_GRID = np.geomspace(1e-10, 0.4, 23)


def _gm_formula(eps, delta):
    """The classical GM formula evaluated without its eps <= 1 guard (for the tests)."""
    return math.sqrt(2 * math.log(1.25 / delta)) / eps


@pytest.mark.parametrize("eps, hgm, gm, agm, dexact", TABLE)
def test_fixture_table(eps, hgm, gm, agm, dexact):
    assert m.hgm_sigma(epsilon=eps, delta=1e-5, sensitivity=1.0) == pytest.approx(hgm, abs=1e-4)
    assert m.analytic_gaussian_sigma(epsilon=eps, delta=1e-5, sensitivity=1.0) == pytest.approx(
        agm, abs=1e-4)
    assert _gm_formula(eps, 1e-5) == pytest.approx(gm, abs=1e-4)
    if eps <= 1:
        assert m.classical_gaussian_sigma(epsilon=eps, delta=1e-5, sensitivity=1.0) == \
            pytest.approx(gm, abs=1e-4)
    else:
        with pytest.raises(ValueError, match="epsilon"):
            m.classical_gaussian_sigma(epsilon=eps, delta=1e-5, sensitivity=1.0)
    d = m.gaussian_delta(sigma=hgm, epsilon=eps, sensitivity=1.0)
    assert d == pytest.approx(dexact, rel=6e-3)  # the table prints 3 significant digits


def test_s_and_other_deltas():
    assert m.hgm_s(1e-5) == pytest.approx(11.287134, abs=1e-6)
    assert m.hgm_s(1e-3) == pytest.approx(6.681964, abs=1e-6)
    assert m.hgm_s(0.05) == pytest.approx(2.769941, abs=1e-6)
    for eps, want in zip([0.5, 1, 2, 4, 8], [4.9110, 2.5498, 1.3606, 0.7542, 0.4372]):
        assert m.hgm_sigma(epsilon=eps, delta=0.05, sensitivity=1) == pytest.approx(want, abs=1e-4)
    for eps, want in zip([0.5, 1, 2, 4, 8], [7.4456, 3.7877, 1.9557, 1.0347, 0.5672]):
        assert m.hgm_sigma(epsilon=eps, delta=1e-3, sensitivity=1) == pytest.approx(want, abs=1e-4)
    for eps, want in zip([0.5, 1, 2, 4, 8], [4.8033, 4.8542, 4.9531, 5.1403, 5.4810]):
        assert eps * m.hgm_multiplier(epsilon=eps, delta=1e-5) == pytest.approx(want, abs=1e-4)


def test_monotone_and_linear():
    sig_eps = [m.hgm_sigma(epsilon=e, delta=1e-5, sensitivity=1)
               for e in np.geomspace(1e-3, 100, 60)]
    assert np.all(np.diff(sig_eps) < 0)
    sig_d = [m.hgm_sigma(epsilon=1, delta=d, sensitivity=1) for d in np.geomspace(1e-12, 0.4, 60)]
    assert np.all(np.diff(sig_d) < 0)
    c = [e * m.hgm_multiplier(epsilon=e, delta=1e-5) for e in np.geomspace(1e-3, 100, 60)]
    assert np.all(np.diff(c) > 0)
    base = m.hgm_sigma(epsilon=0.7, delta=1e-6, sensitivity=1.0)
    for k in [0.0, 0.3, 2.0, 17.5]:
        # Sensitivity 0 calibrates no noise: only as an explicit ablation.
        assert m.hgm_sigma(epsilon=0.7, delta=1e-6, sensitivity=k, allow_zero=True) == k * base
        assert m.analytic_gaussian_sigma(epsilon=0.7, delta=1e-6, sensitivity=k,
                                         allow_zero=True) == pytest.approx(
            k * m.analytic_gaussian_sigma(epsilon=0.7, delta=1e-6, sensitivity=1.0), rel=1e-12)


def test_condition_dominance():
    for d in DELTA_GRID:
        assert d < m.HGM_CONDITION2_DELTA
        for e in EPS_GRID:
            c1, c2 = m.hgm_conditions(epsilon=e, delta=d)
            assert c2 >= c1
            assert m.hgm_multiplier(epsilon=e, delta=d) == c2
    assert m.HGM_CONDITION2_DELTA == pytest.approx(0.48394, abs=1e-5)
    # delta = 0.6 (s = 0.285 < 1/2): Condition 1 is returned wherever it is larger.
    larger = 0
    for e in EPS_GRID:
        c1, c2 = m.hgm_conditions(epsilon=e, delta=0.6)
        assert m.hgm_multiplier(epsilon=e, delta=0.6) == max(c1, c2)
        larger += c1 > c2
    assert larger > 0
    # delta > sqrt(2/pi) = 0.7979: s < 0, only Condition 1.
    c1, c2 = m.hgm_conditions(epsilon=1.0, delta=0.9)
    assert c2 is None and m.hgm_multiplier(epsilon=1.0, delta=0.9) == c1


def test_hgm_exactly_dp_over_grid():
    for e in EPS_GRID:
        for d in DELTA_GRID:
            sigma = m.hgm_sigma(epsilon=e, delta=d, sensitivity=1.0)
            assert m.gaussian_delta(sigma=sigma, epsilon=e, sensitivity=1.0) <= d
    spots = [((1, 1e-5), 3.908e-8), ((8, 1e-5), 2.253e-7), ((1, 0.05), 1.0918e-3)]
    for (e, d), want in spots:
        sigma = m.hgm_sigma(epsilon=e, delta=d, sensitivity=1.0)
        got = m.gaussian_delta(sigma=sigma, epsilon=e, sensitivity=1.0)
        assert got == pytest.approx(want, rel=1e-3)


def test_agm_is_tight_and_below_hgm():
    for e in EPS_GRID:
        for d in DELTA_GRID[::3]:
            agm = m.analytic_gaussian_sigma(epsilon=e, delta=d, sensitivity=1.0)
            assert agm < m.hgm_sigma(epsilon=e, delta=d, sensitivity=1.0)
            assert m.gaussian_delta(sigma=agm, epsilon=e, sensitivity=1.0) <= d
            # Exact: 0.1% less noise would violate the target.
            assert m.gaussian_delta(sigma=agm * 0.999, epsilon=e, sensitivity=1.0) > d
    for e, want in [(1, 3.7306), (8, 0.6002), (10, 0.4999)]:
        assert m.analytic_gaussian_sigma(epsilon=e, delta=1e-5, sensitivity=1) == pytest.approx(
            want, abs=1e-3)


def test_gaussian_delta_matches_direct_formula_and_integral():
    # Direct Balle-Wang formula with plain CDFs (moderate values, no cancellation issue).
    for sigma, e in [(1.0, 0.5), (2.0, 0.1), (0.7, 1.3)]:
        direct = stats.norm.cdf(0.5 / sigma - e * sigma) - math.exp(e) * stats.norm.cdf(
            -0.5 / sigma - e * sigma)
        assert m.gaussian_delta(sigma=sigma, epsilon=e, sensitivity=1.0) == pytest.approx(
            direct, rel=1e-12)
    # Hockey-stick divergence E_P[(1 - e^{eps - L})_+], L ~ N(1/(2 s^2), 1/s^2), by quadrature.
    s, e = 1.3, 0.4
    loss = stats.norm(loc=1 / (2 * s * s), scale=1 / s)
    val, _ = integrate.quad(lambda l: (1 - math.exp(e - l)) * loss.pdf(l), e, np.inf)
    assert m.gaussian_delta(sigma=s, epsilon=e, sensitivity=1.0) == pytest.approx(val, rel=1e-8)
    assert m.gaussian_delta(sigma=1.0, epsilon=1.0, sensitivity=0.0) == 0.0


def test_classical_gm_fails_beyond_one():
    # Why eps > 1 needs HGM: the classical formula is not DP at eps = 10 (delta 1e-5).
    assert m.gaussian_delta(sigma=_gm_formula(10, 1e-5), epsilon=10, sensitivity=1) == \
        pytest.approx(2.265e-5, rel=1e-3)
    assert m.gaussian_delta(sigma=_gm_formula(8, 1e-5), epsilon=8, sensitivity=1) == \
        pytest.approx(7.97e-6, rel=1e-3)
    for e in np.linspace(0.01, 1.0, 25):
        sigma = m.classical_gaussian_sigma(epsilon=e, delta=1e-5, sensitivity=1)
        assert m.gaussian_delta(sigma=sigma, epsilon=e, sensitivity=1) <= 1e-5
    with pytest.raises(ValueError, match="epsilon"):
        m.classical_gaussian_sigma(epsilon=1.0001, delta=1e-5, sensitivity=1)


def test_crossover_and_small_eps_ratio():
    gap = lambda e: m.hgm_sigma(epsilon=e, delta=1e-5, sensitivity=1) - _gm_formula(e, 1e-5)
    root = optimize.brentq(gap, 0.5, 1.0, xtol=1e-10)
    assert root == pytest.approx(0.90662, abs=1e-4)
    assert gap(0.9) < 0 < gap(0.9067) and gap(1.0) > 0
    for e in np.linspace(0.01, 0.9, 30):
        assert gap(e) < 0
    ratio = m.hgm_sigma(epsilon=1e-7, delta=1e-5, sensitivity=1) / _gm_formula(1e-7, 1e-5)
    assert ratio == pytest.approx(0.98069, abs=1e-5)


def test_classical_multiplier_value():
    assert m.classical_gaussian_multiplier(1e-5) == pytest.approx(math.sqrt(2 * math.log(1.25e5)))


# GPM Thm 2.3: tail-bound calibration, delta = 1e-10.
GPM = [(0.125, 50.969205977598364), (0.25, 25.52372208700381), (0.5, 12.800801910640576),
       (1, 6.438992798538109)]
GPM_C4 = [3.1855753735998977, 1.5952326304377382, 0.800050119415036, 0.4024370499086318]


def test_gpm_tail_calibration():
    for (e, want), want_c4 in zip(GPM, GPM_C4):
        assert m.gaussian_tail_sigma(epsilon=e, delta=1e-10, sensitivity=1.0) == pytest.approx(
            want, rel=1e-12)
        assert m.gaussian_tail_sigma(epsilon=e, delta=1e-10, sensitivity=0.0625) == pytest.approx(
            want_c4, rel=1e-12)
        assert m.gaussian_tail_sigma(epsilon=e, delta=1e-10, sensitivity=0.125) == pytest.approx(
            2 * want_c4, rel=1e-12)
        assert m.gaussian_tail_epsilon(sigma=want, delta=1e-10, sensitivity=1.0) == pytest.approx(
            e, rel=1e-10)
        # P[L > eps] = delta bounds the hockey-stick delta, so the calibration is valid.
        assert m.gaussian_delta(sigma=want, epsilon=e, sensitivity=1.0) <= 1e-10


BAD = [
    (dict(epsilon=0.0), "epsilon"), (dict(epsilon=-1.0), "epsilon"),
    (dict(epsilon=float("nan")), "epsilon"), (dict(epsilon=float("inf")), "epsilon"),
    (dict(delta=0.0), "delta"), (dict(delta=1.0), "delta"), (dict(delta=-0.1), "delta"),
    (dict(delta=float("nan")), "delta"), (dict(sensitivity=-1.0), "sensitivity"),
    (dict(sensitivity=float("nan")), "sensitivity"), (dict(epsilon=[1.0, 2.0]), "epsilon"),
    (dict(epsilon="one"), "epsilon"),
]


@pytest.mark.parametrize("fn", [m.hgm_sigma, m.analytic_gaussian_sigma,
                                m.classical_gaussian_sigma, m.gaussian_tail_sigma])
@pytest.mark.parametrize("override, word", BAD)
def test_bad_input(fn, override, word):
    kwargs = dict(epsilon=0.5, delta=1e-5, sensitivity=1.0)
    kwargs.update(override)
    with pytest.raises(ValueError, match=word):
        fn(**kwargs)


def test_bad_input_delta_functions():
    with pytest.raises(ValueError, match="sigma"):
        m.gaussian_delta(sigma=0.0, epsilon=1.0, sensitivity=1.0)
    with pytest.raises(ValueError, match="epsilon"):
        m.gaussian_delta(sigma=1.0, epsilon=float("nan"), sensitivity=1.0)
    with pytest.raises(ValueError, match="sensitivity"):
        m.gaussian_delta(sigma=1.0, epsilon=1.0, sensitivity=-2.0)
    with pytest.raises(ValueError, match="delta"):
        m.hgm_s(1.5)


def _mp_delta(sigma, eps):
    """Balle & Wang 2018 Thm 8 at sensitivity 1, in 60-digit arithmetic."""
    import mpmath  # a dependency of dp-accounting
    with mpmath.workdps(60):
        s, e = mpmath.mpf(sigma), mpmath.mpf(eps)
        return (mpmath.ncdf(1 / (2 * s) - e * s)
                - mpmath.e ** e * mpmath.ncdf(-1 / (2 * s) - e * s))


@pytest.mark.parametrize("eps", [0.005, 0.02, 0.1, 0.5, 1.0, 2.0, 10.0, 50.0])
@pytest.mark.parametrize("dlt", [1e-12, 1e-10, 1e-8, 1e-5, 1e-3, 0.1])
def test_analytic_sigma_rounds_toward_more_noise(eps, dlt):
    """Issue 22 item 9: the true delta (mpmath) never exceeds the target, and sigma is within
    a relative 1e-8 of the exact one (so the margin costs no noticeable noise)."""
    import mpmath
    sigma = m.analytic_gaussian_sigma(epsilon=eps, delta=dlt, sensitivity=1.0)
    assert _mp_delta(sigma, eps) <= mpmath.mpf(dlt)
    # Without the margin the float64 bisection can land just on the wrong side (e.g. eps =
    # 0.02, delta = 1e-10 by 6e-12 relative); 1e-8 less noise must already exceed delta.
    assert _mp_delta(sigma * (1 - 1e-8), eps) > mpmath.mpf(dlt)
