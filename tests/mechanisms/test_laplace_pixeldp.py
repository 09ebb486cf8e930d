"""Laplace calibration and PixelDP multipliers."""

import math

import pytest

from tfdp import mechanisms as m


def test_laplace_scale_fixtures():
    # AdLM Lemma 1-2: relevance noise Delta_R / eps1 and the FM scales.
    assert m.laplace_scale(epsilon=0.075, sensitivity=2 * 784 / 60000) == pytest.approx(
        0.348444, abs=1e-6)
    assert m.laplace_scale(epsilon=0.25, sensitivity=2 * 400 / 50000) == pytest.approx(
        0.064, rel=1e-12)
    assert m.laplace_scale(epsilon=0.15, sensitivity=1812.5) == pytest.approx(12083.33, abs=1e-2)
    assert m.laplace_scale(epsilon=0.75, sensitivity=2550) == pytest.approx(3400, rel=1e-12)
    # Per-example input noise Delta_h0 / (eps2 |L|) with the ref-code preset (beta_j = 1).
    per_example = m.laplace_scale(epsilon=0.075, sensitivity=9800) / 1800
    assert per_example == pytest.approx(72.5926, abs=1e-4)
    assert m.laplace_scale(epsilon=2.0, sensitivity=0.0, allow_zero=True) == 0.0


@pytest.mark.parametrize("kwargs, word", [
    (dict(epsilon=0.0, sensitivity=1.0), "epsilon"),
    (dict(epsilon=-1.0, sensitivity=1.0), "epsilon"),
    (dict(epsilon=float("nan"), sensitivity=1.0), "epsilon"),
    (dict(epsilon=1.0, sensitivity=-1.0), "sensitivity"),
    (dict(epsilon=1.0, sensitivity=float("inf")), "sensitivity"),
    (dict(epsilon=True, sensitivity=1.0), "epsilon"),
])
def test_laplace_scale_bad_input(kwargs, word):
    with pytest.raises(ValueError, match=word):
        m.laplace_scale(**kwargs)


def test_pixeldp_multipliers():
    # PixelDP code release: L / eps (Laplace), L sqrt(2 ln(1.25/delta)) / eps (Gaussian).
    lap = m.pixeldp_laplace_multiplier(epsilon=0.5, attack_bound=0.1)
    assert lap == pytest.approx(0.2, rel=1e-15)
    want = 0.1 * math.sqrt(2 * math.log(25.0))  # eps 1, delta 0.05, L 0.1
    gau = m.pixeldp_gaussian_multiplier(epsilon=1.0, delta=0.05, attack_bound=0.1)
    assert gau == pytest.approx(want, rel=1e-15)
    assert want == pytest.approx(0.253727, abs=1e-6)
    # PixelDP baseline: sigma_r = m_GM(delta_r) Delta_f L / eps_r.
    gau = m.pixeldp_gaussian_multiplier(epsilon=1.0, delta=1e-5, attack_bound=0.2)
    gm = m.classical_gaussian_sigma(epsilon=1.0, delta=1e-5, sensitivity=1.0)
    assert gau == pytest.approx(0.2 * gm, rel=1e-15)


def test_pixeldp_bad_input():
    with pytest.raises(ValueError, match="epsilon"):
        m.pixeldp_gaussian_multiplier(epsilon=2.0, delta=0.05)
    with pytest.raises(ValueError, match="delta"):
        m.pixeldp_gaussian_multiplier(epsilon=1.0, delta=0.0)
    with pytest.raises(ValueError, match="attack_bound"):
        m.pixeldp_laplace_multiplier(epsilon=1.0, attack_bound=0.0)
    with pytest.raises(ValueError, match="epsilon"):
        m.pixeldp_laplace_multiplier(epsilon=float("nan"))
