"""Extractors and verdicts."""

import dataclasses

import pytest

from tfdp.reproduce import extract, registry, verdicts


def _row(**kw):
    base = registry.ROWS_BY_ID["adlm.mnist.adlm.eps0.25"]
    return dataclasses.replace(base, **kw)


def _train(acc):
    return {"metrics": {"test_accuracy": acc}}


def test_band_verdicts():
    row = _row()  # 90.2 +- 2.5
    v = extract.extract(row, {"run": [_train(0.89)]})
    assert v.value == pytest.approx(89.0)
    assert verdicts.verdict(row, v)[0] == "within band"
    v = extract.extract(row, {"run": [_train(0.80)]})
    verdict, reason = verdicts.verdict(row, v)
    assert verdict == "not reproduced" and "-10.2" in reason and row.note in reason


def test_seeds_are_averaged_and_reported():
    v = extract.extract(_row(), {"run": [_train(0.80), _train(0.90)]})
    assert v.value == pytest.approx(85.0)
    assert v.per_seed == pytest.approx([80.0, 90.0])
    assert "2 seeds" in v.text


def test_a_grid_mean_over_seeds_reports_each_seeds_grid_mean():
    row = registry.ROWS_BY_ID["adlm.mnist.adlm.mean_eps"]
    one = extract.extract(row, {"eps0.2": [_train(0.80)], "eps0.5": [_train(0.90)]})
    assert one.value == pytest.approx(85.0) and one.per_seed == pytest.approx([85.0])
    assert one.text == "85.00%"
    three = extract.extract(row, {"eps0.2": [_train(0.80), _train(0.82), _train(0.78)],
                                  "eps0.5": [_train(0.90), _train(0.92), _train(0.94)]})
    assert three.value == pytest.approx(86.0)
    assert three.per_seed == pytest.approx([85.0, 87.0, 86.0])   # seed k: mean over the grid
    assert three.text == "86.00% ± 1.00 (3 seeds)"
    uneven = extract.extract(row, {"eps0.2": [_train(0.80), _train(0.82)],
                                   "eps0.5": [_train(0.90)]})
    assert uneven.per_seed == pytest.approx([85.5]) and "seeds" not in uneven.text


def test_relerr_range_positive_verdicts():
    rel = _row(criterion=registry.Criterion("relerr", tol=1e-3), published=100.0)
    assert verdicts.verdict(rel, extract.Value(100.05, ""))[0] == "reproduced"
    assert verdicts.verdict(rel, extract.Value(100.2, ""))[0] == "not reproduced"
    pos = _row(criterion=registry.Criterion("positive", low=0.0, high=4.0), published=2.0)
    assert verdicts.verdict(pos, extract.Value(1.0, ""))[0] == "ordering holds"
    assert verdicts.verdict(pos, extract.Value(-0.5, ""))[1].startswith("ordering fails")
    assert "magnitude" in verdicts.verdict(pos, extract.Value(6.0, ""))[1]
    rng = _row(criterion=registry.Criterion("range", high=1.0), published=None)
    assert verdicts.verdict(rng, extract.Value(0.99, ""))[0] == "reproduced"
    assert verdicts.verdict(rng, extract.Value(1.01, ""))[0] == "not reproduced"


def test_check_needs_the_extractors_decision():
    row = registry.ROWS_BY_ID["gpm.fig5.e0.5.b0.1"]
    with pytest.raises(ValueError):
        verdicts.verdict(row, extract.Value(0.7, "", ok=None))


def _hist_row(d, success, oracle, trials=1000, eps=0.5, beta=0.1):
    return {"d": d, "epsilon": eps, "beta": beta, "success_rate": success,
            "oracle_exact": oracle, "trials": trials, "l2_error_gm": 1.0,
            "l2_error_gpm": 1.0, "l2_error_expected": 1.0}


def test_gpm_hist_cell_tolerance_is_three_binomial_se_or_002():
    row = registry.ROWS_BY_ID["gpm.fig5.e0.5.b0.1"]
    # oracle 0.711, n = 1000: 3 SE = 3 sqrt(0.711 * 0.289 / 1000) = 0.043.
    ok = {"hist": [{"csv": {"gpm_hist.csv": [_hist_row(256, 0.70, 0.711),
                                             _hist_row(4096, 0.75, 0.711)]}}]}
    v = extract.extract(row, ok)
    assert v.ok and verdicts.verdict(row, v)[0] == "reproduced"
    assert v.text.startswith("0.700-0.750")
    bad = {"hist": [{"csv": {"gpm_hist.csv": [_hist_row(256, 0.76, 0.711)]}}]}
    v = extract.extract(row, bad)
    assert not v.ok and "d = 256" in v.detail
    assert verdicts.verdict(row, v)[0] == "not reproduced"
    other = {"hist": [{"csv": {"gpm_hist.csv": [_hist_row(256, 0.7, 0.7, eps=1.0)]}}]}
    assert extract.extract(row, other) is None  # cell not in this scale's grid


def test_attack_extractors_read_evaluation_json():
    from tfdp import evaluate
    k = evaluate.size_key(0.2)
    summary = {"attacks": {"fgsm": {k: {"accuracy": 0.5, "certified_accuracy": 0.4}},
                           "madry": {k: {"accuracy": 0.3, "certified_accuracy": 0.2}}}}
    row = registry.ROWS_BY_ID["stobatch.mnist.stobatch.eps0.2"]
    v = extract.extract(row, {"run": [{"evaluation": summary}]})
    assert v.value == pytest.approx(40.0)
    gap_row = registry.ROWS_BY_ID["stobatch.mnist.stobatch_minus_secure_sgd.eps0.2"]
    low = {"attacks": {"fgsm": {k: {"accuracy": 0.1, "certified_accuracy": None}}}}
    v = extract.extract(gap_row, {"a": [{"evaluation": summary}], "b": [{"evaluation": low}]})
    assert v.value == pytest.approx(30.0)


def test_eot_soundness_flags_an_attack_below_the_certified_accuracy():
    from tfdp import evaluate
    k = evaluate.size_key(0.1)
    row = registry.ROWS_BY_ID["stobatch.mnist.eot_soundness"]

    def summary(acc_under_attack):
        return {"evaluation": {"num_examples": 400, "alpha": 0.05,
                               "clean_certified_accuracy": {k: 0.60},
                               "attacks": {"madry": {k: {"accuracy": acc_under_attack,
                                                         "certified_accuracy": 0.6}}}}}

    # slack = 0.05 + 3 sqrt(0.6 * 0.4 / 400) = 0.05 + 0.0735 = 0.1235.
    ok = extract.extract(row, {"run": [summary(0.48)]})
    assert ok.ok and ok.value == pytest.approx(0.48 - (0.60 - 0.1235), abs=1e-3)
    assert verdicts.verdict(row, ok)[0] == "reproduced"
    bad = extract.extract(row, {"run": [summary(0.40)]})
    assert not bad.ok and "madry" in bad.detail
    assert verdicts.verdict(row, bad)[0] == "not reproduced"
