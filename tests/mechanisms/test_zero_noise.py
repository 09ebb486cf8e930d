"""Calibrations never return zero or non-finite noise silently (allow_zero opts in)."""

import pytest

from tfdp import mechanisms as m

_GAUSSIAN = [m.classical_gaussian_sigma, m.analytic_gaussian_sigma, m.hgm_sigma,
             m.gaussian_tail_sigma]


@pytest.mark.parametrize("fn", _GAUSSIAN)
def test_gaussian_zero_sensitivity_raises_unless_allowed(fn):
    with pytest.raises(ValueError, match="sensitivity is 0"):
        fn(epsilon=0.5, delta=1e-5, sensitivity=0.0)
    assert fn(epsilon=0.5, delta=1e-5, sensitivity=0.0, allow_zero=True) == 0.0
    assert fn(epsilon=0.5, delta=1e-5, sensitivity=1.0) > 0


@pytest.mark.parametrize("fn", _GAUSSIAN)
def test_gaussian_scale_underflow_and_overflow_in_float32(fn):
    # 1e-60 is a valid float64 sigma but 0 in float32: no noise would be added.
    with pytest.raises(ValueError, match="float32"):
        fn(epsilon=0.5, delta=1e-5, sensitivity=1e-60)
    with pytest.raises(ValueError, match="float32"):
        fn(epsilon=0.5, delta=1e-5, sensitivity=1e300)


def test_laplace_calibrations():
    with pytest.raises(ValueError, match="sensitivity is 0"):
        m.laplace_scale(epsilon=1.0, sensitivity=0.0)
    with pytest.raises(ValueError, match="float32"):
        m.laplace_scale(epsilon=1.0, sensitivity=1e-50)
    with pytest.raises(ValueError, match="float32|not finite"):
        m.laplace_scale(epsilon=1e-300, sensitivity=1e10)
    for bad in ("1", True, None):
        with pytest.raises(ValueError):
            m.laplace_scale(epsilon=1.0, sensitivity=bad)
    with pytest.raises(ValueError, match="allow_zero"):
        m.laplace_scale(epsilon=1.0, sensitivity=0.0, allow_zero="yes")
