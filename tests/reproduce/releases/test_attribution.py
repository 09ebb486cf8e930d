"""tfdp.reproduce.releases.attribution: the section is generated from the result files it
cites (editing a file changes the text), with Welch's test and the attribution rule."""

import dataclasses
import json
import math

import pytest

from tfdp.reproduce.releases import attribution


def _write(folder, name, acc, seed, tfdp=False):
    rec = {"job": "adlm.mnist", "seed": seed, "seconds": 10.0, "command": f"cmd {name}",
           "numbers": {"test_accuracy": acc, "steps": 198}, "curve": [[33, acc - 5], [198, acc]]}
    if tfdp:
        rec.update(side="tfdp", versions={"git_commit": "abc1234"})
    else:
        rec["release"] = {"repo": "haiphanNJIT/PrivateDeepLearning", "commit": "7" * 40,
                          "script": "AdLM/MNIST/x.py"}
    (folder / name).write_text(json.dumps(rec))


def _fill(folder, release, tfdp):
    for i, acc in enumerate(release, 1):
        _write(folder, f"adlm_mnist_release_e6_seed{i}.json", acc, i)
    for i, acc in enumerate(tfdp, 1):
        _write(folder, f"adlm_mnist_tfdp_closest_adam_e6_seed{i}.json", acc, i, tfdp=True)


@pytest.fixture
def identical(monkeypatch):
    """The AdLM comparison as if its settings were all identical (the rule's full path)."""
    comps = list(attribution.comparisons())
    comps[0] = dataclasses.replace(comps[0], identical=True)
    monkeypatch.setattr(attribution, "comparisons", lambda: tuple(comps))
    return comps[0]


def test_welch_matches_the_closed_form():
    # a = (1, 2, 3), b = (2, 4, 6): means 2 and 4, variances 1 and 4; se = sqrt(1/3 + 4/3);
    # df = (5/3)^2 / ((1/3)^2 / 2 + (4/3)^2 / 2) = 50/17.
    test = attribution.welch([1, 2, 3], [2, 4, 6])
    assert test["diff"] == pytest.approx(2.0)
    assert test["t"] == pytest.approx(2.0 / math.sqrt(5.0 / 3.0))
    assert test["df"] == pytest.approx(50.0 / 17.0)
    assert 0.05 < test["p"] < 0.5
    assert attribution.welch([1.0], [2.0, 3.0]) is None


def test_the_section_follows_the_files(tmp_path, identical):
    _fill(tmp_path, [60.0, 61.0, 59.0], [60.5, 59.5, 61.5])
    text = "\n".join(attribution.section(str(tmp_path), str(tmp_path)))
    assert "60.00% ± 1.00" in text and "*scale*" in text
    assert "adlm_mnist_release_e6_seed3.json" in text and "cmd adlm_mnist_tfdp_closest_adam_e6_seed1.json" in text
    # Edit a row: tfdp far above the release -> the test rejects and nothing is attributed.
    _fill(tmp_path, [60.0, 61.0, 59.0], [80.0, 81.0, 79.5])
    text = "\n".join(attribution.section(str(tmp_path), str(tmp_path)))
    assert "*scale*" not in text and "differ at identical settings" in text
    assert "+20.17 points" in text


def test_the_table_names_every_commit_its_seeds_ran(tmp_path, identical):
    """Seeds run on different tfdp commits are each shown with their commit, never under the
    first seed's commit alone."""
    del identical
    _fill(tmp_path, [60.0, 61.0, 59.0], [60.5, 59.5, 61.5])
    text = "\n".join(attribution.section(str(tmp_path), str(tmp_path)))
    assert "| tfdp abc1234 |" in text and "seeds 1, 2" not in text
    rec = json.loads((tmp_path / "adlm_mnist_tfdp_closest_adam_e6_seed3.json").read_text())
    rec["versions"]["git_commit"] = "def5678"
    (tmp_path / "adlm_mnist_tfdp_closest_adam_e6_seed3.json").write_text(json.dumps(rec))
    text = "\n".join(attribution.section(str(tmp_path), str(tmp_path)))
    assert "| tfdp abc1234 (seeds 1, 2), def5678 (seed 3) |" in text


def test_the_rule_needs_identical_settings_and_two_seeds_a_side(identical):
    comp = identical
    test = attribution.welch([60.0, 61.0], [60.0, 61.0])
    assert attribution.attribution_class(comp, [60.0, 61.0], [60.0, 61.0], test).startswith(
        "*scale*")
    other = dataclasses.replace(comp, identical=False)
    provisional = attribution.attribution_class(other, [60.0, 61.0], [60.0, 61.0], test)
    assert provisional.startswith("provisional, the settings are not all identical")
    assert "*scale*" in provisional
    assert "at least 2 seeds" in attribution.attribution_class(comp, [60.0], [60.0], None)
    near = dataclasses.replace(comp, published=60.6)
    assert attribution.attribution_class(near, [60.0, 61.0], [62.0, 63.0],
                                         attribution.welch([60.0, 61.0], [62.0, 63.0])) \
        .startswith("not attributed")


def test_no_files_no_section(tmp_path):
    assert attribution.section(str(tmp_path), str(tmp_path)) == []


def test_scale_needs_the_release_gap_beyond_the_whole_interval(identical):
    """A test that does not reject is no equivalence: *scale* only when the release's own gap
    to the paper exceeds every difference the 95% interval of tfdp - release allows."""
    comp = dataclasses.replace(identical, published=70.0)
    release, tfdp = [60.0, 61.0, 50.0], [52.0, 49.0, 51.0]  # wide interval, p > 0.05
    test = attribution.welch(release, tfdp)
    assert test["p"] > attribution.ALPHA
    bound = max(abs(test["ci_low"]), abs(test["ci_high"]))
    gap = 70.0 - sum(release) / 3
    assert bound > gap  # the interval reaches past the release's own gap
    assert attribution.attribution_class(comp, release, tfdp, test).startswith("not attributed")
    far = dataclasses.replace(comp, published=95.0)
    text = attribution.attribution_class(far, release, tfdp, test)
    assert text.startswith("*scale* (mostly)") and "95% interval" in text


def test_a_release_metric_other_than_its_own_accuracy_is_compared(tmp_path, monkeypatch):
    """StoBatch: the release's noise-free number is compared; a release file made before the
    job printed it is listed apart and stays out of the test."""
    comp = dataclasses.replace(attribution.comparisons()[0], release_metric="noise_free_accuracy",
                               release_metric_text="noise-free on both sides")
    _fill(tmp_path, [60.0, 61.0, 59.0], [40.5, 39.5, 41.5])
    for i, acc in ((2, 40.0), (3, 41.0)):
        path = tmp_path / f"adlm_mnist_release_e6_seed{i}.json"
        rec = json.loads(path.read_text())
        rec["numbers"]["noise_free_accuracy"] = acc
        rec["extra_curves"] = {"noise_free_accuracy": [[198, acc]]}
        path.write_text(json.dumps(rec))
    monkeypatch.setattr(attribution, "comparisons", lambda: (comp,))
    text = "\n".join(attribution.section(str(tmp_path), str(tmp_path), figures=True))
    assert "Compared: noise-free on both sides." in text
    assert "adlm_mnist_release_e6_seed1.json` (its own number 60.00%)" in text
    assert "| 2, 3 | 40.50% ± 0.71 |" in text
    assert (tmp_path / "figures" / f"{comp.key}.png").exists()


def test_each_papers_conclusion_names_its_attribution_and_follows_the_files(tmp_path,
                                                                            identical):
    _fill(tmp_path, [60.0, 61.0, 59.0], [60.5, 59.5, 61.5])
    lines = attribution.paper_lines("adlm", str(tmp_path))
    assert len(lines) == 1 and "Attribution: *scale*" in lines[0]
    assert "release, same budget" in lines[0] and "60.00% ± 1.00 (seeds 1, 2, 3" in lines[0]
    assert "`adlm.mnist.adlm.eps0.25`" in lines[0]
    assert "adlm_mnist_tfdp_closest_adam_e6_seed3.json" in lines[0]
    # Edit a file: tfdp far below the release -> the conclusion no longer says scale.
    _fill(tmp_path, [60.0, 61.0, 59.0], [40.0, 41.0, 39.5])
    lines = attribution.paper_lines("adlm", str(tmp_path))
    assert "*scale*" not in lines[0] and "differ at identical settings" in lines[0]
    assert attribution.paper_lines("gpm", str(tmp_path)) == []


def test_toggles_are_tabled_against_the_release_and_the_closest_settings(tmp_path):
    """The AdLM comparison's one-factor variants: each row gives its mean, its difference to
    the release and to tfdp at the closest settings, and its files; the shipped AdLM
    comparison is provisional (its settings are not all identical)."""
    _fill(tmp_path, [60.0, 61.0, 59.0], [60.5, 59.5, 61.5])
    for i, acc in enumerate([50.0, 49.0, 51.0], 1):
        _write(tmp_path, f"adlm_mnist_tfdp_e6_seed{i}.json", acc, i, tfdp=True)
    text = "\n".join(attribution.section(str(tmp_path), str(tmp_path)))
    row = next(ln for ln in text.splitlines() if ln.startswith("| without the three"))
    assert "| 1, 2, 3 | 50.00% ± 1.00 | -10.00 (p = " in row
    assert "adlm_mnist_tfdp_e6_seed2.json" in row
    assert "only the relevance file" not in text  # no files, no row
    assert "provisional, the settings are not all identical" in text
    assert "cmd adlm_mnist_tfdp_e6_seed3.json" in text  # its command is listed
    lines = attribution.paper_lines("adlm", str(tmp_path))
    assert "One factor at a time, tfdp without the three" in lines[0]
    assert "50.00% ± 1.00, − release -10.00 (p = " in lines[0]


def test_a_longer_budget_says_how_far_the_release_itself_still_is(tmp_path):
    """Issue 39 item 3: the longer-budget comparison of a paper states the release's own gap
    to the published value at both budgets, from the files, and draws its curves."""
    _fill(tmp_path, [60.0, 61.0, 59.0], [60.5, 59.5, 61.5])
    _write(tmp_path, "adlm_mnist_release_e40_seed1.json", 70.0, 1)
    for i, acc in enumerate([68.0, 69.0], 1):
        _write(tmp_path, f"adlm_mnist_tfdp_closest_adam_e40_seed{i}.json", acc, i, tfdp=True)
    lines = attribution.paper_lines("adlm", str(tmp_path))
    scale = next(ln for ln in lines if ln.startswith("**Scale, measured on the release itself"))
    # 90.2 - 60 = 30.2 after 201 steps; 90.2 - 70 = 20.2 after 1334 steps.
    assert "30.2 points below the published value after 201 steps" in scale
    assert "20.2 points below the published value after 1334 steps" in scale
    assert "70.00% (1 seed)" in scale and "68.50% ± 0.71 (seeds 1, 2)" in scale
    assert "adlm_mnist_release_e40_seed1.json" in scale
    assert ("tfdp − release (means): +0.50 points after 201 steps (3 and 3 seeds); -1.50 points "
            "after 1334 steps (1 and 2 seeds)") in scale
    assert "No test at this budget yet" in scale
    text = "\n".join(attribution.section(str(tmp_path), str(tmp_path), figures=True))
    assert "### AdLM, MNIST, longer: 40 epochs" in text
    assert "not attributed: the test needs at least 2 seeds on each side" in text
    assert (tmp_path / "figures" / "adlm_mnist_e40.png").exists()
    # Edit the release file: the sentence follows.
    _write(tmp_path, "adlm_mnist_release_e40_seed1.json", 80.0, 1)
    scale = next(ln for ln in attribution.paper_lines("adlm", str(tmp_path))
                 if ln.startswith("**Scale"))
    assert "10.2 points below the published value after 1334 steps" in scale


def test_a_one_seed_toggle_says_it_has_no_test_and_a_longer_budget_lists_its_toggles(
        tmp_path, monkeypatch):
    """A toggle with one seed gives its difference to the release without a test; the
    longer-budget (scale) sentence carries its comparison's toggles too."""
    _fill(tmp_path, [60.0, 61.0, 59.0], [60.5, 59.5, 61.5])
    _write(tmp_path, "adlm_mnist_tfdp_e6_seed1.json", 50.0, 1, tfdp=True)
    lines = attribution.paper_lines("adlm", str(tmp_path))
    assert "without the three" in lines[0]
    assert "50.00% (1 seed), − release -10.00 (no test: one seed)" in lines[0]
    comps = list(attribution.comparisons())
    longer = next(i for i, c in enumerate(comps) if c.key == "adlm_mnist_e40")
    comps[longer] = dataclasses.replace(comps[longer], toggles=(attribution.Toggle(
        "other", "adlm_mnist_tfdp_other_e40_seed*.json", "with another option"),))
    monkeypatch.setattr(attribution, "comparisons", lambda: tuple(comps))
    for i, acc in enumerate([70.0, 72.0], 1):
        _write(tmp_path, f"adlm_mnist_release_e40_seed{i}.json", acc, i)
        _write(tmp_path, f"adlm_mnist_tfdp_closest_adam_e40_seed{i}.json", acc, i, tfdp=True)
        _write(tmp_path, f"adlm_mnist_tfdp_other_e40_seed{i}.json", acc - 20, i, tfdp=True)
    scale = next(ln for ln in attribution.paper_lines("adlm", str(tmp_path))
                 if ln.startswith("**Scale"))
    assert "One factor at a time, tfdp with another option: 51.00% ± 1.41, − release -20.00" \
        in scale
