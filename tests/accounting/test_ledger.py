"""PrivacyLedger: composition, claimed vs. sound totals, idempotent adds, JSON round trip."""

import json
import math

import pytest

from tfdp.accounting import PrivacyLedger


def _adlm_ledger():
    # AdLM, MNIST code-release configuration (docs/adlm.md): claimed eps1 + eps2 + eps3 = 0.3;
    # the per-record diagnostic is |L| d eps2 / Delta_h0 for the inputs, 2 |L| eps3 / Delta_F
    # for the labels.
    eps_rec_x = 1800 * 784 * 0.075 / 9800
    eps_rec_y = 2 * 1800 * 0.15 / 1812.5
    led = PrivacyLedger()
    led.add("relevance", mechanism="laplace", epsilon=0.075, protects="training records")
    led.add("first_layer", mechanism="laplace", epsilon=eps_rec_x, claimed_epsilon=0.075,
            protects="training records", note="per_example_fixed, per-record diagnostic")
    led.add("loss_coefficients", mechanism="functional", epsilon=eps_rec_y, claimed_epsilon=0.15,
            protects="training records")
    return led, eps_rec_x, eps_rec_y


def test_sequential_and_claimed_totals_adlm():
    led, ex, ey = _adlm_ledger()
    assert ex == pytest.approx(10.8, abs=1e-9)
    eps, delta = led.total()
    assert eps == pytest.approx(0.075 + ex + ey, rel=1e-12) and delta == 0.0
    assert eps == pytest.approx(11.2, abs=0.03)
    assert led.claimed_total() == (pytest.approx(0.3, rel=1e-12), 0.0)
    d = led.to_dict()
    assert d["differs"] is True and d["claimed_epsilon"] == pytest.approx(0.3)
    assert [e["name"] for e in d["entries"]] == ["relevance", "first_layer", "loss_coefficients"]
    assert "paper claims" in led.summary() and "differs" in led.summary()


def test_claimed_equals_sound_when_nothing_claimed():
    led = PrivacyLedger()
    led.add("a", mechanism="gaussian", epsilon=1.0, delta=1e-5)
    led.add("b", mechanism="laplace", epsilon=0.5)
    assert led.total() == (1.5, 1e-5)
    assert led.claimed_total() == led.total()
    assert led.to_dict()["differs"] is False


def test_parallel_groups_compose_by_max():
    # StoBatch Theorem 4 (App. J): disjoint batches compose in parallel; the groups then add.
    led = PrivacyLedger()
    for i, (e, d) in enumerate([(0.5, 1e-6), (0.7, 1e-7), (0.6, 2e-6)]):
        led.add(f"batch{i}", mechanism="laplace", epsilon=e, delta=d, composition="parallel",
                group="batches")
    led.add("other0", mechanism="laplace", epsilon=0.1, composition="parallel", group="g2")
    led.add("other1", mechanism="laplace", epsilon=0.3, composition="parallel", group="g2")
    led.add("seq", mechanism="laplace", epsilon=1.0)
    eps, delta = led.total()
    assert eps == pytest.approx(0.7 + 0.3 + 1.0, rel=1e-15)
    assert delta == pytest.approx(2e-6, rel=1e-15)


def test_stobatch_theorem4_total():
    # StoBatch Theorem 4 with the MNIST gamma_x = 4950/2499 and an illustrative gamma = 2.
    eps1, eps2, gamma_x, gamma = 0.5, 0.1, 4950 / 2499, 2.0
    led = PrivacyLedger()
    led.add("autoencoder", mechanism="functional", epsilon=eps1)
    led.add("inputs", mechanism="laplace", epsilon=eps1 / gamma_x)
    led.add("first_layer", mechanism="laplace", epsilon=eps1 / gamma)
    led.add("output_coefficients", mechanism="functional", epsilon=eps2)
    assert led.total()[0] == pytest.approx(eps1 + eps1 / gamma_x + eps1 / gamma + eps2, rel=1e-15)


def test_separate_entries_are_recorded_not_composed():
    led = PrivacyLedger()
    led.add("dpsgd", mechanism="dpsgd_rdp", epsilon=2.0, delta=1e-5)
    led.add("robustness", mechanism="hgm", epsilon=8.0, delta=1e-5, composition="separate",
            protects="input pixels (l_inf radius L)")
    assert led.total() == (2.0, 1e-5)
    assert "robustness" in led and len(led) == 2


def test_replay_is_explicit_and_a_second_spend_never_collapses():
    """Regression: an identical second add under one name used to be silently dropped."""
    led = PrivacyLedger()
    led.add("q", mechanism="laplace", epsilon=0.5, note="n")
    # A second genuine spend with identical content is refused, never merged (before the
    # fix this returned silently and the total stayed 0.5 for two spends).
    with pytest.raises(ValueError, match="second spend"):
        led.add("q", mechanism="laplace", epsilon=0.5, note="n")
    led.add("q2", mechanism="laplace", epsilon=0.5, note="n")
    assert led.total() == (1.0, 0.0)
    # A replay names the spend it covers: same covers + same content is a no-op.
    first = led.add("x", mechanism="laplace", epsilon=0.5, note="n", covers="setup")
    again = led.add("x", mechanism="laplace", epsilon=0.5, note="n", covers="setup")
    assert first == again and led.total() == (1.5, 0.0)
    with pytest.raises(ValueError, match="name"):
        led.add("x", mechanism="laplace", epsilon=0.6, note="n", covers="setup")
    with pytest.raises(ValueError, match="name"):  # another spend under the same name
        led.add("x", mechanism="laplace", epsilon=0.5, note="n", covers="steps 0-10")
    assert led.total() == (1.5, 0.0)


def test_from_dict_refuses_a_repeated_entry():
    """Regression: a file listing one entry twice used to load as one spend."""
    led = PrivacyLedger()
    led.add("a", mechanism="laplace", epsilon=1.0)
    d = led.to_dict()
    d["entries"] = d["entries"] * 2
    d["epsilon"] = 2.0
    with pytest.raises(ValueError, match="more than once"):
        PrivacyLedger.from_dict(d)


def test_relations_are_converted_before_adding():
    led = PrivacyLedger()
    led.add("a", mechanism="gaussian", epsilon=1.0, delta=1e-6, relation="add_remove")
    assert led.total() == (1.0, 1e-6) and led.relation() == "add_remove"
    led.add("b", mechanism="laplace", epsilon=0.5)  # replace-one
    eps, dlt = led.total()
    # add/remove (1, 1e-6) -> replace-one (2, (1 + e) 1e-6) by group privacy of size 2.
    assert eps == pytest.approx(2.5) and dlt == pytest.approx((1 + math.e) * 1e-6)
    assert led.relation() == "replace_one" and led.to_dict()["relation"] == "replace_one"
    assert PrivacyLedger.from_dict(json.loads(json.dumps(led.to_dict()))).total() == (eps, dlt)
    with pytest.raises(ValueError, match="relation"):
        led.add("c", mechanism="x", epsilon=1.0, relation="neighbours")


def test_record_steps_composes_segments_and_never_shrinks():
    seg = dict(start_step=0, steps=39, passes=1, num_examples=5000, batch_size=128,
               noise_multiplier=1.0180412198462867)
    led = PrivacyLedger()
    one = led.record_steps("dpsgd", segments=[seg], delta=1e-5, sampling="poisson",
                           accountant="rdp")
    assert one["epsilon"] == pytest.approx(1.7206, abs=1e-3) and one["relation"] == "add_remove"
    more = dict(seg, start_step=39, steps=20, passes=4, batch_size=1000)
    both = led.record_steps("dpsgd", segments=[seg, more], delta=1e-5, sampling="poisson",
                            accountant="rdp")
    # The example: 39 steps at q = 0.0256 then 20 at q = 0.2 is about eps = 7.36.
    assert both["epsilon"] == pytest.approx(7.356, abs=2e-3)
    assert both["covers"] == "steps 0-39, 39-59" and len(led) == 1
    with pytest.raises(ValueError, match="only grow"):
        led.record_steps("dpsgd", segments=[seg], delta=1e-5, sampling="poisson", accountant="rdp")
    assert led.total()[0] == both["epsilon"]
    back = PrivacyLedger.from_dict(json.loads(json.dumps(led.to_dict())))
    assert back.get("dpsgd")["segments"] == both["segments"]


def test_json_round_trip(tmp_path):
    led, _, _ = _adlm_ledger()
    led.add("unbounded", mechanism="laplace", epsilon=math.inf, claimed_epsilon=0.0,
            composition="parallel", group="shared")
    led.add("robust", mechanism="hgm", epsilon=1.0, delta=1e-5, composition="separate")
    path = led.save(str(tmp_path / "sub" / "ledger.json"))
    back = PrivacyLedger.load(path)
    assert back.to_dict() == led.to_dict()
    assert back.total()[0] == math.inf
    assert back.claimed_total() == led.claimed_total()
    # Re-adding the same entries is refused unless they name the spend they cover.
    for e in led.entries:
        with pytest.raises(ValueError, match="second spend"):
            back.add(e["name"], **{k: v for k, v in e.items() if k != "name"})
    assert back.to_dict() == led.to_dict()
    assert not [p for p in (tmp_path / "sub").iterdir() if p.name.startswith(".tmp")]
    assert PrivacyLedger.from_dict(json.loads(json.dumps(led.to_dict()))).to_dict() == led.to_dict()


def test_from_dict_rejects_inconsistent_totals():
    led = PrivacyLedger()
    led.add("a", mechanism="laplace", epsilon=1.0)
    d = led.to_dict()
    d["epsilon"] = 0.5
    with pytest.raises(ValueError, match="epsilon"):
        PrivacyLedger.from_dict(d)
    with pytest.raises(ValueError, match="data"):
        PrivacyLedger.from_dict({"entries": [{"name": "a", "bogus": 1}]})
    with pytest.raises(ValueError, match="data"):
        PrivacyLedger.from_dict([])


@pytest.mark.parametrize("kwargs, word", [
    (dict(epsilon=-1.0), "epsilon"),
    (dict(epsilon=float("nan")), "epsilon"),
    (dict(epsilon=1.0, delta=1.0), "delta"),
    (dict(epsilon=1.0, delta=-1e-5), "delta"),
    (dict(epsilon=1.0, composition="advanced"), "composition"),
    (dict(epsilon=1.0, composition="parallel"), "group"),
    (dict(epsilon=1.0, claimed_epsilon=-0.1), "claimed_epsilon"),
    (dict(epsilon=1.0, claimed_delta=2.0), "claimed_delta"),
    (dict(epsilon=1.0, mechanism=""), "mechanism"),
])
def test_bad_entries(kwargs, word):
    kw = dict(mechanism="laplace")
    kw.update(kwargs)
    with pytest.raises(ValueError, match=word):
        PrivacyLedger().add("e", **kw)
    with pytest.raises(ValueError, match="name"):
        PrivacyLedger().add("", mechanism="laplace", epsilon=1.0)
    with pytest.raises(ValueError, match="name"):
        PrivacyLedger().get("missing")


def test_no_guarantee_is_infinite_never_zero():
    """Issue 22 item 4: nothing accounted (or only other relations) is epsilon = inf."""
    for led in (PrivacyLedger(), _separate_only()):
        assert led.total()[0] == math.inf and not led.guarantee()
        d = led.to_dict()
        assert d["epsilon"] == "inf" and d["claimed_epsilon"] == "inf"
        assert d["guarantee"] is False
        assert "no differential-privacy guarantee" in d["note"]
        text = json.dumps(d, allow_nan=False)  # strict JSON: no Infinity literal
        back = PrivacyLedger.from_dict(json.loads(text))
        assert back.total()[0] == math.inf and back.to_dict() == d
        assert "no differential-privacy guarantee" in led.summary()
    finite = PrivacyLedger()
    finite.add("a", mechanism="laplace", epsilon=0.5, covers="setup")
    assert finite.guarantee() and finite.to_dict()["guarantee"] is True
    assert "note" not in finite.to_dict()


def _separate_only():
    led = PrivacyLedger()
    led.add("pixels", mechanism="gaussian", epsilon=1.0, delta=1e-5, composition="separate",
            protects="input pixels")
    return led


def test_epsilon_json_values():
    from tfdp import accounting
    assert accounting.epsilon_value("inf") == math.inf and accounting.epsilon_value(1.5) == 1.5
    assert accounting.format_epsilon("inf") == "inf (no differential-privacy guarantee)"
    for bad in ("nan", "1.0", None, True, float("nan"), -1.0):
        with pytest.raises(ValueError):
            accounting.epsilon_value(bad)


def test_noise_seed_is_recorded_and_round_trips():
    led = PrivacyLedger()
    led.add("a", mechanism="laplace", epsilon=0.5, covers="setup")
    assert "noise_seed" not in led.to_dict()
    led.noise_seed = "user_supplied"
    d = led.to_dict()
    assert d["noise_seed"] == "user_supplied"
    assert "only while that seed stays secret" in d["noise_seed_note"]
    assert PrivacyLedger.from_dict(json.loads(json.dumps(d))).noise_seed == "user_supplied"
    with pytest.raises(ValueError, match="noise_seed"):
        led.noise_seed = "1234"
