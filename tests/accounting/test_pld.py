"""PLD, the default DP-SGD accountant: against dp_accounting, against RDP, calibration."""

import math

import dp_accounting
import pytest

from tfdp import accounting
from tfdp.accounting import PrivacyLedger, dpsgd_epsilon, dpsgd_noise_multiplier
from tfdp.train import privatize

# The main job (flags/smoothing/sample_20k.flags): 20,000 records, lots of 256 (q = 0.0128),
# 5 epochs of floor(20000 / 256) = 78 steps, delta = 1e-5; sigma 0.8337 is its RDP sigma.
MAIN = dict(num_examples=20000, batch_size=256, steps=390, delta=1e-5)


def test_pld_is_the_default_of_the_functions_and_the_flag():
    assert accounting.DEFAULT_ACCOUNTANT == "pld"
    assert privatize.DPSGDSettings().accountant == "pld"
    assert dpsgd_epsilon(noise_multiplier=0.8337, **MAIN) == dpsgd_epsilon(
        noise_multiplier=0.8337, accountant="pld", **MAIN)


def test_main_job_pld_matches_dp_accounting_and_is_below_rdp():
    pld = dpsgd_epsilon(noise_multiplier=0.8337, accountant="pld", **MAIN)
    rdp = dpsgd_epsilon(noise_multiplier=0.8337, accountant="rdp", **MAIN)
    # dp_accounting directly: 390 compositions of the Poisson-subsampled Gaussian,
    # add/remove-one neighbours, PLD with pessimistic discretisation 1e-4.
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(256 / 20000, dp_accounting.GaussianDpEvent(0.8337)),
        390)
    direct = dp_accounting.pld.PLDAccountant(
        dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        value_discretization_interval=1e-4).compose(event).get_epsilon(1e-5)
    assert pld == pytest.approx(direct, rel=1e-12)
    assert pld == pytest.approx(2.456, abs=1e-3)  # issue 40's independent recomputation
    assert rdp == pytest.approx(3.000, abs=1e-3)
    assert pld < rdp


@pytest.mark.parametrize("kw", [
    dict(num_examples=60000, batch_size=256, noise_multiplier=1.1, steps=2000),
    dict(num_examples=5000, batch_size=128, noise_multiplier=1.0, steps=78),
    dict(num_examples=5000, batch_size=500, noise_multiplier=2.0, steps=30,
         sampling="shuffle_no_amplification"),
])
def test_pld_never_above_rdp(kw):
    pld = dpsgd_epsilon(delta=1e-5, accountant="pld", **kw)
    rdp = dpsgd_epsilon(delta=1e-5, accountant="rdp", **kw)
    assert 0.0 < pld <= rdp


def test_calibration_round_trip():
    # rtol 1e-2 keeps it to a few PLD evaluations (each about half a second).
    sigma = dpsgd_noise_multiplier(target_epsilon=3.0, accountant="pld", rtol=1e-2, **MAIN)
    assert dpsgd_epsilon(noise_multiplier=sigma, accountant="pld", **MAIN) <= 3.0
    assert dpsgd_epsilon(noise_multiplier=sigma * (1 - 1e-2), accountant="pld", **MAIN) > 3.0


@pytest.mark.slow
def test_calibration_round_trip_at_the_main_job():
    sigma = dpsgd_noise_multiplier(target_epsilon=3.0, accountant="pld", **MAIN)
    rdp_sigma = dpsgd_noise_multiplier(target_epsilon=3.0, accountant="rdp", **MAIN)
    assert rdp_sigma == pytest.approx(0.8337, abs=1e-4)
    # On the valid side, tight (1e-3 less noise overshoots: PLD's epsilon is a step function
    # of sigma at the 1e-4 discretisation, so a finer tolerance would test the grid), and
    # the tighter accountant buys less noise for the same epsilon.
    assert dpsgd_epsilon(noise_multiplier=sigma, accountant="pld", **MAIN) <= 3.0
    assert dpsgd_epsilon(noise_multiplier=sigma * (1 - 1e-3), accountant="pld", **MAIN) > 3.0
    assert sigma == pytest.approx(0.777, abs=1e-3) and sigma < rdp_sigma


def test_ledger_says_which_accountant():
    seg = dict(start_step=0, steps=78, passes=1, num_examples=20000, batch_size=256,
               noise_multiplier=0.8337)
    pld = PrivacyLedger().record_steps("dpsgd", segments=[seg], delta=1e-5, sampling="poisson")
    assert pld["mechanism"] == "dpsgd_pld" and "PLDAccountant" in pld["note"]
    assert accounting.entry_accountant(pld) == "pld"
    rdp = PrivacyLedger()
    rdp.record_steps("dpsgd", segments=[seg], delta=1e-5, sampling="poisson", accountant="rdp")
    assert pld["epsilon"] < rdp.get("dpsgd")["epsilon"]
    # A ledger written before PLD was the default (mechanism dpsgd_rdp) reads back as RDP with
    # its stored epsilon.
    old = PrivacyLedger.from_dict(rdp.to_dict()).get("dpsgd")
    assert accounting.entry_accountant(old) == "rdp"
    assert math.isclose(old["epsilon"], rdp.get("dpsgd")["epsilon"])
    assert accounting.entry_accountant({"mechanism": "laplace"}) is None
