"""DP-SGD accounting through dp_accounting: fixtures from the RDP accountant, TF-Privacy."""

import pytest

from tfdp.accounting import PrivacyLedger, dpsgd_epsilon, dpsgd_noise_multiplier, dpsgd_note

MNIST = dict(num_examples=60000, batch_size=256, noise_multiplier=1.1, epochs=60, delta=1e-5)


def test_rdp_and_pld_reference_values():
    # Measured: RdpAccountant 2.597 (= TF-Privacy's compute_dp_sgd_privacy), PLD 2.382.
    assert dpsgd_epsilon(**MNIST, accountant="rdp") == pytest.approx(2.597, abs=5e-4)
    assert dpsgd_epsilon(**MNIST, accountant="pld") == pytest.approx(2.382, abs=5e-4)
    # RDP sanity point (Abadi et al. report about 1.26): q = 0.01, sigma = 4, T = 1e4 -> 1.035.
    eps = dpsgd_epsilon(num_examples=10000, batch_size=100, noise_multiplier=4.0, steps=10000,
                        delta=1e-5, accountant="rdp")
    assert eps == pytest.approx(1.035, abs=0.01)
    assert eps == pytest.approx(1.0354900660362436, rel=1e-9)  # regression pin (dp-accounting 0.6)


def test_epsilon_increases_with_steps():
    kw = dict(num_examples=60000, batch_size=128, noise_multiplier=1.0, delta=1e-5)
    vals = [dpsgd_epsilon(steps=t, **kw, accountant="rdp") for t in (1, 10, 100, 1000, 10000)]
    assert all(b > a for a, b in zip(vals, vals[1:]))


def test_shuffle_assumptions():
    poisson = dpsgd_epsilon(**MNIST, accountant="rdp")
    assert dpsgd_epsilon(**MNIST, sampling="shuffle", accountant="rdp") == poisson
    sound = dpsgd_epsilon(**MNIST, sampling="shuffle_no_amplification", accountant="rdp")
    assert sound > poisson
    # ceil(60 * 60000 / 256) = 14063 steps of floor(60000 / 256) = 234 per pass (the loop
    # drops the remainder) are 61 passes; 61 Gaussians with multiplier 1.1/2 equal one with
    # 0.55/sqrt(61).
    one = dpsgd_epsilon(num_examples=100, batch_size=100, noise_multiplier=1.1 / 61 ** 0.5,
                        steps=1, delta=1e-5, sampling="shuffle_no_amplification", accountant="rdp")
    assert sound == pytest.approx(one, rel=1e-3)
    assert "not a proven bound" in dpsgd_note(sampling="shuffle")
    assert "Poisson" in dpsgd_note(sampling="poisson", accountant="pld")


def test_ledger_dpsgd_entries():
    led = PrivacyLedger()
    e = led.add_dpsgd("dpsgd", sampling="shuffle", **MNIST, accountant="rdp")
    assert e["claimed_epsilon"] == pytest.approx(2.597, abs=5e-4)
    assert e["epsilon"] > e["claimed_epsilon"] and led.to_dict()["differs"]
    assert "not a proven bound" in e["note"] and "steps=14063" in e["note"]
    p = PrivacyLedger().add_dpsgd("dpsgd", **MNIST, accountant="rdp")
    assert p["claimed_epsilon"] is None and p["epsilon"] == pytest.approx(2.597, abs=5e-4)


# The HGM experiments' fixed epochs, sigma solved (RDP, Poisson, delta 1e-5); tfdp's values.
MNIST_SIGMA = [(0.2, 4.624), (1.0, 1.241), (2.0, 0.868)]
CIFAR_SIGMA = [(2, 1.082), (10, 0.585)]
MNIST_SIGMA_SLOW = [(0.4, 2.501), (0.6, 1.794), (0.8, 1.446), (1.2, 1.111), (1.4, 1.026),
                    (1.6, 0.957), (1.8, 0.908)]
CIFAR_SIGMA_SLOW = [(4, 0.778), (6, 0.677), (8, 0.622)]


def _check_sigma(eps, want, n, steps):
    sigma = dpsgd_noise_multiplier(target_epsilon=eps, num_examples=n, batch_size=128,
                                   steps=steps, delta=1e-5, accountant="rdp")
    assert sigma == pytest.approx(want, abs=1e-2)
    got = dpsgd_epsilon(num_examples=n, batch_size=128, noise_multiplier=sigma, steps=steps,
                        delta=1e-5, accountant="rdp")
    assert got <= eps  # on the valid side
    assert dpsgd_epsilon(num_examples=n, batch_size=128, noise_multiplier=sigma * (1 - 1e-4),
                         steps=steps, delta=1e-5, accountant="rdp") > eps  # and tight


@pytest.mark.parametrize("eps, want", MNIST_SIGMA)
def test_noise_from_target_mnist(eps, want):
    _check_sigma(eps, want, 60000, 14062)


@pytest.mark.parametrize("eps, want", CIFAR_SIGMA)
def test_noise_from_target_cifar(eps, want):
    _check_sigma(eps, want, 50000, 23437)


@pytest.mark.slow
@pytest.mark.parametrize("eps, want, n, steps",
                         [(e, w, 60000, 14062) for e, w in MNIST_SIGMA_SLOW]
                         + [(e, w, 50000, 23437) for e, w in CIFAR_SIGMA_SLOW])
def test_noise_from_target_full_table(eps, want, n, steps):
    _check_sigma(eps, want, n, steps)


def test_noise_from_target_with_epochs_and_pld():
    sigma = dpsgd_noise_multiplier(target_epsilon=2.597, num_examples=60000, batch_size=256,
                                   epochs=60, delta=1e-5, accountant="rdp")
    assert sigma == pytest.approx(1.1, abs=2e-3)


@pytest.mark.slow
def test_noise_from_target_pld():
    pld = dpsgd_noise_multiplier(target_epsilon=2.382, num_examples=60000, batch_size=256,
                                 epochs=60, delta=1e-5, accountant="pld", rtol=1e-3)
    assert pld == pytest.approx(1.1, abs=5e-3)


@pytest.mark.parametrize("override, word", [
    (dict(num_examples=0), "num_examples"),
    (dict(num_examples=6.5), "num_examples"),
    (dict(batch_size=0), "batch_size"),
    (dict(batch_size=70000), "batch_size"),
    (dict(noise_multiplier=0.0), "noise_multiplier"),
    (dict(noise_multiplier=float("nan")), "noise_multiplier"),
    (dict(delta=0.0), "delta"),
    (dict(delta=1.0), "delta"),
    (dict(epochs=None), "epochs"),
    (dict(steps=10), "epochs"),
    (dict(epochs=-1), "epochs"),
    (dict(accountant="moments"), "accountant"),
    (dict(sampling="random"), "sampling"),
])
def test_bad_input(override, word):
    kw = dict(MNIST)
    kw.update(override)
    with pytest.raises(ValueError, match=word):
        dpsgd_epsilon(**kw)


def test_bad_input_noise_multiplier():
    kw = dict(num_examples=60000, batch_size=256, epochs=1, delta=1e-5)
    with pytest.raises(ValueError, match="target_epsilon"):
        dpsgd_noise_multiplier(target_epsilon=0.0, **kw, accountant="rdp")
    with pytest.raises(ValueError, match="target_epsilon"):
        dpsgd_noise_multiplier(target_epsilon=float("nan"), **kw, accountant="rdp")
    with pytest.raises(ValueError, match="steps"):
        dpsgd_noise_multiplier(target_epsilon=1.0, num_examples=100, batch_size=10, steps=0,
                               delta=1e-5, accountant="rdp")


def test_shuffle_counts_the_passes_that_ran():
    """Regression: 3 epochs of floor(5000/2000) = 2 steps are 3 passes, not ceil-based 2."""
    kw = dict(num_examples=5000, batch_size=2000, noise_multiplier=2.0, delta=1e-5)
    three = dpsgd_epsilon(steps=6, sampling="shuffle_no_amplification", **kw, accountant="rdp")
    # Before the fix: ceil(5000/2000) = 3 steps per pass, so 6 steps counted as 2 passes.
    two_passes = dpsgd_epsilon(num_examples=100, batch_size=100, noise_multiplier=2.0,
                               steps=2, delta=1e-5, sampling="shuffle_no_amplification",
                               accountant="rdp")
    three_passes = dpsgd_epsilon(num_examples=100, batch_size=100, noise_multiplier=2.0,
                                 steps=3, delta=1e-5, sampling="shuffle_no_amplification",
                                 accountant="rdp")
    assert three == pytest.approx(three_passes, rel=1e-12)
    assert three == pytest.approx(9.010, abs=1e-3) and two_passes == pytest.approx(7.077, abs=1e-3)
    # The per-segment ledger counts the passes the loop ran too.
    led = PrivacyLedger()
    e = led.record_steps("dpsgd", segments=[dict(start_step=0, steps=6, passes=3,
                                                  num_examples=5000, batch_size=2000,
                                                  noise_multiplier=2.0)],
                         delta=1e-5, sampling="shuffle", accountant="rdp")
    assert e["epsilon"] == pytest.approx(three, rel=1e-12)
    assert e["relation"] == "replace_one"


@pytest.mark.parametrize("kw, before", [
    (dict(target_epsilon=2.0, num_examples=5000, batch_size=128, epochs=2), 1.019420034223157),
    (dict(target_epsilon=2.0, num_examples=60000, batch_size=128, steps=14062),
     0.8679353901056657),
    (dict(target_epsilon=1.0, num_examples=5000, batch_size=500, epochs=3,
          sampling="shuffle_no_amplification"), 14.013626220128252),
])
def test_noise_from_target_unchanged_by_the_shared_calibration(kw, before):
    # `before`: the values of the hand-written Brent search on log sigma that
    # dp_accounting.calibrate_dp_mechanism replaced (same bracket, same tolerances). Where
    # Brent's root is on the valid side the two agree bit for bit (the smoke run's sigma);
    # elsewhere they differ by the last valid-side step, about rtol^2 = 1e-12 relative.
    sigma = dpsgd_noise_multiplier(delta=1e-5, **kw, accountant="rdp")
    assert sigma == pytest.approx(before, rel=1e-12)
    eps_kw = {k: v for k, v in kw.items() if k != "target_epsilon"}
    assert dpsgd_epsilon(noise_multiplier=sigma, delta=1e-5, **eps_kw,
                         accountant="rdp") <= kw["target_epsilon"]
