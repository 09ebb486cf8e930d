"""One-run audit bound (Steinke, Nasr, Jagielski 2023, Theorem 3): brute force and soundness."""

import math

import numpy as np
import pytest

from tfdp.audit import one_run


def _tail_exact(r, v, eps):
    """P[Binomial(r, e^eps/(1+e^eps)) >= v] by summing the pmf with exact binomials."""
    q = 1.0 / (1.0 + math.exp(-eps))
    return sum(math.comb(r, k) * q**k * (1 - q)**(r - k) for k in range(v, r + 1))


def _theorem3_brute(m, r, v, eps, delta):
    """The theorem's right-hand side with the max over every i = 1..m, term by term."""
    def f(w):
        return 1.0 if w <= 0 else _tail_exact(r, w, eps)
    slope = max((f(v - i) - f(v)) / i for i in range(1, m + 1))
    return min(1.0, f(v) + 2 * m * delta * slope)


@pytest.mark.parametrize("m,r,v,eps,delta", [(50, 20, 15, 0.5, 0.0), (50, 20, 15, 0.5, 1e-3),
                                             (100, 40, 40, 2.0, 1e-5), (30, 30, 0, 1.0, 1e-2),
                                             (200, 60, 45, 1.3, 1e-4)])
def test_p_value_matches_brute_force(m, r, v, eps, delta):
    assert one_run.p_value(m, r, v, eps, delta) == pytest.approx(
        _theorem3_brute(m, r, v, eps, delta), rel=1e-9, abs=1e-15)


def test_pure_dp_bound_is_the_binomial_inversion():
    # r = v = 20 all correct at delta = 0: q^20 = 0.05 at the bound, so
    # eps = log(q / (1 - q)) with q = 0.05^(1/20).
    q = 0.05 ** (1 / 20)
    want = math.log(q / (1 - q))
    assert one_run.epsilon_lower_bound(100, 20, 20, 0.0, 0.95) == pytest.approx(want, rel=1e-6)
    # Half right: no evidence.
    assert one_run.epsilon_lower_bound(100, 20, 10, 0.0, 0.95) == 0.0


def test_delta_term_weakens_the_bound():
    a = one_run.epsilon_lower_bound(1000, 200, 190, 0.0)
    b = one_run.epsilon_lower_bound(1000, 200, 190, 1e-5)
    c = one_run.epsilon_lower_bound(1000, 200, 190, 1e-3)
    assert a > b > c > 0


@pytest.mark.parametrize("eps0,delta0", [(1.0, 0.0), (1.0, 1e-3), (0.3, 1e-4)])
def test_bound_is_sound_for_randomized_response(eps0, delta0):
    # An (eps0, delta0)-DP run per canary: with probability delta0 the output reveals S_i,
    # otherwise eps0-randomized response. r = 300 guesses of m = 500 canaries are each right
    # independently with probability p = delta0 + (1 - delta0) e^eps0/(1 + e^eps0), so
    # W ~ Binomial(300, p) exactly and P[eps_lb(W) > eps0] is an exact sum over W. It must be
    # <= 1 - confidence = 0.05 (Theorem 3); a bound that ignored sampling would give ~0.5.
    m, r = 500, 300
    p = delta0 + (1 - delta0) / (1 + math.exp(-eps0))
    from scipy import stats
    ws = np.arange(r + 1)
    pmf = stats.binom.pmf(ws, r, p)
    bad = sum(pmf[w] for w in ws if one_run.epsilon_lower_bound(m, r, int(w), delta0) > eps0)
    assert bad <= 0.05
    assert bad > 0.005  # and not vacuous: close to the 5% it allows at delta0 = 0


def test_guesses_and_count():
    scores = np.array([0.1, 5.0, -3.0, 2.0, 0.0, -1.0])
    t = one_run.guesses(scores, 2, 1)
    np.testing.assert_array_equal(t, [0, 1, -1, 1, 0, 0])
    included = np.array([True, True, False, False, True, False])
    assert one_run.count(t, included) == (3, 2)
    with pytest.raises(ValueError, match="k_plus"):
        one_run.guesses(scores, 5, 5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="v <= r <= m"):
        one_run.p_value(10, 5, 6, 1.0, 0.0)
    with pytest.raises(ValueError, match="confidence"):
        one_run.epsilon_lower_bound(10, 5, 5, 0.0, 1.0)
