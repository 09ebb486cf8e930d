"""tfdp.clopper_pearson: the one Clopper-Pearson implementation (issue 42)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from tfdp import clopper_pearson


@pytest.mark.parametrize("k, n", [(0, 1), (1, 1), (0, 10), (3, 10), (10, 10), (999, 1000),
                                  (5000, 100000)])
@pytest.mark.parametrize("alpha", [0.05, 1e-3, 0.3])
def test_bounds_are_the_beta_quantiles_of_clopper_and_pearson(k, n, alpha):
    lo, hi = clopper_pearson.lower(k, n, alpha), clopper_pearson.upper(k, n, alpha)
    assert isinstance(lo, float) and isinstance(hi, float)
    assert lo == (0.0 if k == 0 else float(stats.beta.ppf(alpha, k, n - k + 1)))
    assert hi == (1.0 if k == n else float(stats.beta.ppf(1 - alpha, k + 1, n - k)))
    # The defining tail equations (Clopper and Pearson 1934): P(X >= k | lo) = alpha and
    # P(X <= k | hi) = alpha, through the regularised incomplete beta function.
    if k > 0:
        assert special.betainc(k, n - k + 1, lo) == pytest.approx(alpha, rel=1e-8)
    if k < n:
        assert 1 - special.betainc(k + 1, n - k, hi) == pytest.approx(alpha, rel=1e-8)
    assert 0.0 <= lo <= k / n <= hi <= 1.0


def test_two_sided_interval_puts_half_alpha_in_each_tail():
    lo, hi = clopper_pearson.interval(7, 40, 0.05)
    assert lo == clopper_pearson.lower(7, 40, 0.025)
    assert hi == clopper_pearson.upper(7, 40, 0.025)
    # The 95% interval as evaluation and the runs table computed it before (issue 42).
    assert [lo, hi] == [float(stats.beta.ppf(0.025, 7, 34)), float(stats.beta.ppf(0.975, 8, 33))]


def test_arrays_broadcast_and_match_elementwise():
    k = np.array([[0, 3, 10], [1, 9, 5]])
    n = np.array([[10], [10]])
    lo, hi = clopper_pearson.lower(k, n, 0.01), clopper_pearson.upper(k, n, 0.01)
    assert lo.shape == hi.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            assert lo[i, j] == clopper_pearson.lower(int(k[i, j]), 10, 0.01)
            assert hi[i, j] == clopper_pearson.upper(int(k[i, j]), 10, 0.01)


def test_coverage_of_the_one_sided_lower_bound_is_at_least_one_minus_alpha():
    rng = np.random.default_rng(0)
    p, n, alpha = 0.3, 50, 0.1
    k = rng.binomial(n, p, size=4000)
    lo = clopper_pearson.lower(k, n, alpha)
    assert np.mean(lo <= p) >= 1 - alpha  # exact (conservative) coverage


def test_the_root_finding_form_gpm_used_is_the_same_interval():
    for k, n in ((0, 20), (4, 20), (20, 20), (123, 1000)):
        lo, hi = clopper_pearson.interval_by_root(k, n, 0.95)
        want = clopper_pearson.interval(k, n, 1 - 0.95)
        assert lo == pytest.approx(want[0], abs=1e-9) and hi == pytest.approx(want[1], abs=1e-9)


@pytest.mark.parametrize("args, match", [
    ((3, 0, 0.05), "trials must be >= 1"),
    ((4, 3, 0.05), "successes must be in \\[0, trials\\]"),
    ((-1, 3, 0.05), "successes must be in \\[0, trials\\]"),
    ((1, 3, 0.0), "alpha must be in \\(0, 1\\)"),
    ((1, 3, 1.0), "alpha must be in \\(0, 1\\)"),
    ((math.nan, 3, 0.05), "must be finite"),
])
def test_bad_arguments_are_refused_naming_them(args, match):
    with pytest.raises(ValueError, match=match):
        clopper_pearson.lower(*args)
    with pytest.raises(ValueError, match=match):
        clopper_pearson.upper(*args)


def test_the_graph_form_equals_the_numpy_form():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tfdp.certify import graph  # pylint: disable=import-outside-toplevel
    counts = np.array([[0, 3, 97], [50, 50, 0], [1, 0, 99], [0, 0, 100]])
    for alpha in (0.05, 1e-3):
        got_lo, got_hi = (t.numpy() for t in graph.tf_clopper_pearson_bounds(
            tf.constant(counts, tf.int64), tf.constant(alpha, tf.float64)))
        a = alpha / counts.shape[1]  # Bonferroni over the classes, as the numpy certificate
        np.testing.assert_allclose(got_lo, clopper_pearson.lower(counts, 100, a),
                                   rtol=1e-9, atol=1e-15)
        np.testing.assert_allclose(got_hi, clopper_pearson.upper(counts, 100, a),
                                   rtol=1e-9, atol=1e-15)
