"""Seeded numbers in the docs come from committed result files (issue 40): the attack table
of docs/attacks-certify-evaluate.md quotes results/docs/seeded_evaluate_example/evaluation.json,
which the page's commands (commands.txt) wrote."""

import json
import os
import re

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_DOC = os.path.join(_ROOT, "docs", "attacks-certify-evaluate.md")
_RESULT = os.path.join(_ROOT, "results", "docs", "seeded_evaluate_example")


def _section(text):
    start = text.index("**Attacks on a non-private model trained on `sample`**")
    return text[start:text.index("**Certification throughput**", start)]


def quoted_numbers(section):
    """(clean accuracy, {attack: (acc at 0.1, acc at 0.2)}, commands) quoted by the page."""
    clean = float(re.search(r"Clean accuracy is ([0-9.]+)\.", section).group(1))
    rows = {m.group(1): (float(m.group(2)), float(m.group(3))) for m in re.finditer(
        r"(?m)^\| (\w+) \| ([0-9.]+) \| ([0-9.]+) \|$", section)}
    block = re.search(r"```\n(.*?)```", section, re.S).group(1)
    commands = [" ".join(c.split()) for c in block.replace("\\\n", " ").splitlines()
                if c.strip()]
    return clean, rows, commands


def test_doc_quotes_the_committed_result_file():
    clean, rows, commands = quoted_numbers(_section(open(_DOC, encoding="utf-8").read()))
    ev = json.load(open(os.path.join(_RESULT, "evaluation.json"), encoding="utf-8"))
    assert ev["num_examples"] == 200 and ev["nb_iter"] == 10
    assert f"{ev['clean_accuracy']:.3f}" == f"{clean:.3f}"
    assert set(rows) == set(ev["attacks"]) == {"fgsm", "ifgsm", "mim", "madry"}
    for name, (at1, at2) in rows.items():
        assert f"{ev['attacks'][name]['0.1']['accuracy']:.3f}" == f"{at1:.3f}", name
        assert f"{ev['attacks'][name]['0.2']['accuracy']:.3f}" == f"{at2:.3f}", name
    # The file was made by the page's commands, as written.
    made_by = [ln for ln in open(os.path.join(_RESULT, "commands.txt"), encoding="utf-8")
               .read().splitlines() if ln and not ln.startswith("#")]
    assert made_by == commands
    config = json.load(open(os.path.join(_RESULT, "config.json"), encoding="utf-8"))
    assert config["method"] == "nonprivate" and config["dataset"] == "sample"


def test_a_misquoted_number_is_caught():
    section = _section(open(_DOC, encoding="utf-8").read())
    ev = json.load(open(os.path.join(_RESULT, "evaluation.json"), encoding="utf-8"))
    wrong = section.replace(f"Clean accuracy is {ev['clean_accuracy']:.3f}.",
                            "Clean accuracy is 0.925.")
    assert wrong != section
    assert quoted_numbers(wrong)[0] != round(ev["clean_accuracy"], 3)
