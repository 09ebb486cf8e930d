"""The numbers in the README's results table come from the result files they cite.

Each row of "## Results at a glance" cites a command; the row's result file is the file that
command wrote (its JSON records the same command) or names (`--output=...`). Every number in
the row's result column is either checked against that file, at the precision printed, or
listed below as not a measurement (a target, a paper's value, a setting). A row or a number
this test does not know fails it, so a new number needs a result file behind it.
"""

from __future__ import annotations

import csv
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e-?\d+)?")


def _json(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return json.load(f)


def _csv(path):
    with open(os.path.join(ROOT, path), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _train_accuracy(path):
    data = _json(path)
    metrics = data["output"]["metrics"] if "output" in data else data["metrics"]
    return 100.0 * float(metrics["test_accuracy"])


def _peer(model, system):
    """A peer's median step-time ratio to tfdp's non-private step in the DP-SGD benchmark."""
    systems = _json("results/bench/dpsgd.json")["models"][model]["systems"]
    return systems[system]["ratio_to_nonprivate"]["median"]


def _hist(d, eps, beta, field):
    for r in _csv("results/gpm/hist_d256_d4096/gpm_hist.csv"):
        if int(r["d"]) == d and float(r["epsilon"]) == eps and float(r["beta"]) == beta:
            return float(r[field])
    raise KeyError((d, eps, beta))


def _dp_audit_gpm_with_key():
    for r in _csv("results/gpm/dp_audit.csv"):
        if r["name"] == "gpm_with_key":
            return float(r["eps_lower"])
    raise KeyError("gpm_with_key")


def _gdp_audit(name):
    for r in _csv("results/gpm/dp_audit.csv"):
        if r["name"] == name and r["method"] == "gdp":
            return float(r["eps_lower"])
    raise KeyError(name)


def _training_audit(run, key="epsilon_lower_bound"):
    return _json(f"results/audit/training/{run}/audit.json")[key]


def _release(key, what):
    """A number of the releases-beside-tfdp comparison `key` (tfdp.reproduce.releases)."""
    # lazy: the attribution module reads the committed result files
    import statistics  # pylint: disable=import-outside-toplevel
    from tfdp.reproduce.releases import attribution  # pylint: disable=import-outside-toplevel
    comp = next(c for c in attribution.comparisons() if c.key == key)
    summ = attribution._summary(comp, attribution.RESULTS_DIR)  # pylint: disable=protected-access
    toggle = what.rsplit("_", 1)[0]
    if toggle in {t.key for t in comp.toggles}:  # a toggle: "<key>_mean", "<key>_p", ...
        glob_ = next(t.tfdp_glob for t in comp.toggles if t.key == toggle)
        side = [r["numbers"]["test_accuracy"]
                for r in attribution._load(attribution.RESULTS_DIR, glob_)]  # pylint: disable=protected-access
        if what.endswith("_p"):
            return attribution.welch(summ["r_acc"], side)["p"]
    else:
        side = summ["r_acc"] if what.startswith("release") else summ["t_acc"]
    if what.endswith("mean"):
        return statistics.mean(side)
    if what.endswith("sd"):
        return statistics.stdev(side)
    if what.endswith("_n"):
        return len(side)
    if what == "p":
        return summ["test"]["p"]
    if what == "scale_gap":
        return comp.published - statistics.mean(summ["r_acc"])
    raise KeyError(what)


# The releases row: every number it prints, as the README formats it, from the result files
# (means and sd to 2 decimals, p to 2 significant digits, the gap to 1 decimal).
_RELEASE_NUMBERS = (
    ("adlm_mnist_e6", ("release_mean", "release_sd", "release_n", "tfdp_mean", "tfdp_sd",
                       "tfdp_n", "p", "scale_gap")),
    ("secure_sgd_mnist_s3840", ("release_mean", "release_sd", "tfdp_mean", "tfdp_sd", "p")),
    ("stobatch_mnist_e2", ("release_mean", "release_sd", "tfdp_mean", "tfdp_sd", "p",
                           "closest_mean", "closest_sd", "closest_p", "base_mean", "base_sd",
                           "base_p")),
    ("adlm_mnist_e40", ("release_mean", "release_sd", "release_n", "tfdp_mean", "tfdp_sd",
                        "tfdp_n", "p", "scale_gap")),
    ("stobatch_mnist_e6", ("release_mean", "release_sd", "release_n", "tfdp_mean", "tfdp_sd",
                           "tfdp_n", "p", "scale_gap")),
    ("stobatch_mnist_e6", ("closest_mean", "closest_sd", "closest_p", "prerelu_mean",
                           "prerelu_sd", "prerelu_p")),
)


def _release_checks():
    checks = []
    for key, whats in _RELEASE_NUMBERS:
        for what in whats:
            value = _release(key, what)
            if what.endswith("_n"):
                printed = str(value)
            elif what == "p" or what.endswith("_p"):
                printed = f"{value:.2g}"
            elif what == "scale_gap":
                printed = f"{value:.1f}"
            else:
                printed = f"{value:.2f}"
            checks.append((printed, lambda v=value: v))
    return checks


# README row ("what" column, start) -> (cited result file, [(printed number, value getter)],
# numbers in the cell that are not measurements).
ROWS = {
    "AdLM, real MNIST, CI smoke setting": (
        "results/adlm/mnist_smoke_adlm.json",
        [("87.67", lambda: _train_accuracy("results/adlm/mnist_smoke_adlm.json")),
         ("8", lambda: _json("results/adlm/mnist_smoke_adlm.json")["ledger"]["claimed_epsilon"])],
        set()),
    "AdLM, real MNIST, reduced, eps 0.25": (
        "results/adlm/mnist_reduced12_adlm_eps0.25.json",
        [("83.92", lambda: _train_accuracy("results/adlm/mnist_reduced12_adlm_eps0.25.json"))],
        {"90.2", "2", "400", "12"}),
    "DP-SGD, real MNIST, eps 0.5, delta 1e-5": (
        "results/adlm/mnist_reduced_dpsgd_eps0.5.json",
        [("93.79", lambda: _train_accuracy("results/adlm/mnist_reduced_dpsgd_eps0.5.json"))],
        {"88.59"}),
    "AdLM on the embedded sample (the AdLM job of `make run`)": (
        "results/reproduce/short/jobs/train.main_job.json",
        [("MAIN", lambda: _train_accuracy("results/reproduce/short/jobs/train.main_job.json")),
         ("106", lambda: _json("results/reproduce/short/jobs/train.main_job.json")["output"][
             "metrics"]["seconds"])],
        {"2"}),
    "GPM DP-hist, d = 4096, eps* = 0.5": (
        "results/gpm/hist_d256_d4096/gpm_hist.csv",
        [("1.000", lambda: _hist(4096, 0.5, 1e-5, "success_rate")),
         ("0.707", lambda: _hist(4096, 0.5, 0.1, "success_rate")),
         ("0.711", lambda: _hist(4096, 0.5, 0.1, "oracle_exact"))],
        {"1e-5", "1e-1"}),
    "empirical DP audit of every shipped mechanism": (
        "results/gpm/dp_audit.csv",
        [("5.81", _dp_audit_gpm_with_key),
         ("0.974", lambda: _gdp_audit("gaussian_analytic")),
         ("1.089", lambda: _gdp_audit("control_gaussian_analytic_sigma_x0.9"))],
        {"0.125", "1", "10"}),
    "one-run training audits": (
        "results/audit/training/dpsgd_whitebox/audit.json",
        [("2.119", lambda: _training_audit("nonprivate")),
         ("0.219", lambda: _training_audit("dpsgd_whitebox")),
         ("2", lambda: _training_audit("dpsgd_whitebox", "claimed_epsilon")),
         ("2", lambda: _training_audit("dpsgd_whitebox", "sound_epsilon")),
         ("2", lambda: _training_audit("stobatch", "claimed_epsilon")),
         ("0", lambda: _training_audit("dpsgd")),
         ("0", lambda: _training_audit("secure_sgd")),
         ("0", lambda: _training_audit("adlm")),
         ("0", lambda: _training_audit("adlm_30_epochs")),
         ("0", lambda: _training_audit("stobatch")),
         ("8", lambda: _training_audit("adlm", "claimed_epsilon"))],
        {"30"}),
    "`tfdp-bench layers`": (
        "results/bench/layers.json",
        [("1.05", lambda: _json("results/bench/layers.json")["ratio"])],
        {"1.10"}),
    "`tfdp-bench layers --layers_model=mnist`": (
        "results/bench/layers_mnist_fused.json",
        [("1.41", lambda: _json("results/bench/layers_mnist.json")["ratio"]),
         ("1.05", lambda: _json("results/bench/layers_mnist_fused.json")["ratio"])],
        {"1.10"}),
    "`tfdp-bench gpm`": (
        "results/bench/gpm.json",
        [("1.12", lambda: _json("results/bench/gpm.json")["ratio"])],
        {"65536", "1.5", "3", "5"}),
    "`tfdp-bench certify`": (
        "results/bench/certify.json",
        [("1.02", lambda: _json("results/bench/certify.json")["ratio"]),
         ("1.05", lambda: _json("results/bench/certify_smoothing.json")["ratio"])], {"0.8"}),
    "`tfdp-bench dpsgd`": (
        "results/bench/dpsgd.json",
        [("1.48", lambda: _json("results/bench/dpsgd.json")["ratio_by_model"]["mnist"]),
         ("1.69",
          lambda: _json("results/bench/dpsgd.json")["ratio_by_model"]["cifar10"]),
         ("5.6", lambda: _json("results/bench/dpsgd.json")["loadavg_before"][0]),
         ("7.6", lambda: _json("results/bench/dpsgd.json")["loadavg_after"][0]),
         ("5.6", lambda: _peer("mnist", "opacus")), ("6.0", lambda: _peer("cifar10", "opacus")),
         ("9.3", lambda: _peer("mnist", "tfprivacy-dpmodel")),
         ("12.8", lambda: _peer("cifar10", "tfprivacy-dpmodel"))],
        {"2.0", "2.5", "10"}),
    "`tfdp-bench tf_options`": (
        "results/bench/tf_options.json",
        [("0.95", lambda: _json("results/bench/tf_options.json")["ratio_by_method"]["nonprivate"]),
         ("0.96", lambda: _json("results/bench/tf_options.json")["ratio_by_method"]["dpsgd"]),
         ("0.99", lambda: _json("results/bench/tf_options.json")["ratio_by_method"]["adlm"]),
         ("0.99", lambda: _json("results/bench/tf_options.json")["ratio_by_method"]["stobatch"])],
        {"1.10"}),
    "`tfdp-bench onednn`": (
        "results/bench/onednn.json",
        [("0.79", lambda: _json("results/bench/onednn.json")["ratio_by_case"]["stobatch"]),
         ("0.62", lambda: _json("results/bench/onednn.json")["ratio_by_case"]["dpsgd"]),
         ("0.44", lambda: _json("results/bench/onednn.json")["ratio_by_case"]["adlm"])],
        {"1.05", "512"}),
    "`tfdp-bench keras_fit`": (
        "results/bench/keras_fit_mnist.json",
        [("1.26", lambda: _json("results/bench/keras_fit_mnist.json")["ratio_by_model"]["mnist"]),
         ("1.40", lambda: _json("results/bench/keras_fit.json")["ratio_by_model"]["cifar10"]),
         ("3.93", lambda: _json("results/bench/keras_fit_mnist.json")
          ["tfprivacy_speedup_by_model"]["mnist"]),
         ("5.36", lambda: _json("results/bench/keras_fit.json")
          ["tfprivacy_speedup_by_model"]["cifar10"]),
         ("3.02", lambda: _json("results/bench/keras_fit_mnist.json")
          ["opacus_speedup_by_model"]["mnist"]),
         ("1.43", lambda: _json("results/bench/keras_fit.json")
          ["opacus_speedup_by_model"]["cifar10"])],
        {"1.5", "2", "10", "5", "3", "3840"}),
    "`tfdp-bench allocator`": (
        "results/bench/allocator.json",
        [("0.61", lambda: _json("results/bench/allocator.json")["ratio_by_case"]["stobatch"]),
         ("0.53", lambda: _json("results/bench/allocator.json")["ratio_by_case"]["dpsgd"]),
         ("1.30", lambda: _json("results/bench/allocator.json")["ratio_by_case"]["adlm"]),
         ("1.00", lambda: _json("results/bench/allocator_adlm.json")["ratio_by_case"]["adlm"])],
        {"3", "4", "1.05"}),
    "`tfdp-bench evaluate`": (
        "results/bench/evaluate.json",
        [("0.988", lambda: _json("results/bench/evaluate.json")["ratio"])], {"0.8"}),
    "the authors' own releases beside tfdp at the same budget": (
        "results/releases/adlm_mnist_release_e6_seed1.json",
        [("RELEASES", None)],
        # budgets (epochs, steps, seeds a side) and the StoBatch paper's published 82.7%
        {"6", "3", "840", "40", "120", "2", "82.7"}),
}

# README numbers that differ from, or are absent from, the file their row cites, as of this
# test's writing: (row, number printed in the README) -> what the file says. Only these exact
# printed numbers are tolerated, as a visible expected failure (xfail); once the README prints
# the file's value (or drops the uncited number) the row passes and the entry can go. Any
# other mismatch fails.
KNOWN_DRIFT = {
}


def _results_table():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Results at a glance", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| what") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        rows.append(cells)
    return rows


def _spec(what):
    matches = [k for k in ROWS if what.startswith(k)]
    return matches[0] if len(matches) == 1 else None


def _cases():
    cases = []
    for what, command, result in _results_table():
        key = _spec(what)
        cases.append(pytest.param(what, command, result, key, id=(key or what)[:40]))
    return cases


def _decimals(printed: str) -> int:
    return len(printed.split(".")[1]) if "." in printed else 0


@pytest.mark.parametrize("what,command,result,key", _cases())
def test_readme_result_numbers_match_their_result_files(what, command, result, key):
    assert key is not None, (f"README results row {what!r} has no cited result file in "
                             "tests/test_readme_numbers.py: add one (a result file, not a "
                             "hand-typed number)")
    path, checks, not_measured = ROWS[key]
    if checks == [("RELEASES", None)]:
        checks = _release_checks()
    assert os.path.exists(os.path.join(ROOT, path)), f"{what!r} cites missing {path}"
    printed_numbers = NUMBER.findall(result)
    checked = set()
    problems = []
    for printed, getter in checks:
        if printed == "MAIN":  # the main job's accuracy: whatever number precedes "%"
            found = re.match(r"\s*(\d+(?:\.\d+)?)%", result)
            assert found, f"{what!r}: no accuracy in {result!r}"
            printed = found.group(1)
        checked.add(printed)
        value = getter()
        if printed not in printed_numbers:
            problems.append((printed, f"the README row no longer prints {printed}"))
            continue
        if value is None:
            problems.append((printed, f"{path} has no value for {printed}"))
            continue
        want = f"{float(value):.{_decimals(printed)}f}"
        if want != printed:
            problems.append((printed, f"README prints {printed}, {path} gives {want}"))
    for n in printed_numbers:
        if n not in checked and n not in not_measured:
            problems.append((n, f"{n} is neither checked against {path} nor listed as a "
                                "non-measurement"))
    real = [(n, msg) for n, msg in problems if (key, n) not in KNOWN_DRIFT]
    assert not real, f"{what!r}: " + "; ".join(msg for _, msg in real)
    drift = [(n, msg) for n, msg in problems if (key, n) in KNOWN_DRIFT]
    if drift:
        pytest.xfail(f"{what!r}: known README drift: " + "; ".join(msg for _, msg in drift))


def test_adlm_job_command_is_what_the_result_file_ran():
    """The AdLM job (`make run ARGS="--train_flagfile=flags/adlm/sample.flags ... --seed=1"`)
    trains with flags/adlm/sample.flags, which leaves the seed to OS entropy, plus --seed=1: the
    command the result file ran."""
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
        text = f.read()
    assert "--train_flagfile=flags/adlm/sample.flags" in text and "--seed=1" in text
    with open(os.path.join(ROOT, "flags/adlm/sample.flags"), encoding="utf-8") as f:
        assert not any(ln.startswith("--seed") for ln in f.read().splitlines())
    job = _json("results/reproduce/short/jobs/train.main_job.json")
    assert job["command"] == "tfdp-train --flagfile=flags/adlm/sample.flags --seed=1"


def test_number_parser_sees_every_number():
    """The parser sees every number of a cell (so a new number cannot slip through)."""
    assert NUMBER.findall("1.000 at beta = 1e-5; 0.707 (oracle 0.711), 2,400 epochs") == [
        "1.000", "1e-5", "0.707", "0.711", "2", "400"]
