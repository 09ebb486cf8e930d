"""The README's PLD-vs-RDP numbers of the main job come from results/main_job/{pld,rdp}."""

import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(accountant, name):
    with open(os.path.join(ROOT, "results", "main_job", accountant, name),
              encoding="utf-8") as f:
        return json.load(f)


def _readme():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return " ".join(f.read().split())


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_ledgers_say_their_accountant_and_eps_3(accountant):
    entry = _load(accountant, "ledger.json")["entries"][0]
    assert entry["mechanism"] == f"dpsgd_{accountant}"
    assert 2.9999 < entry["epsilon"] <= 3.0 and entry["delta"] == 1e-5


def test_readme_prints_the_files():
    text = _readme()
    sigma = {a: _load(a, "ledger.json")["entries"][0]["segments"][0]["noise_multiplier"]
             for a in ("pld", "rdp")}
    assert f"noise multiplier {sigma['pld']:.3f}" in text
    assert f"`--dpsgd_accountant=rdp` needs {sigma['rdp']:.3f}" in text
    ev = {a: _load(a, "evaluation.json") for a in ("pld", "rdp")}
    assert ev["pld"]["clean_accuracy"] == ev["rdp"]["clean_accuracy"]
    assert f"clean accuracy {ev['pld']['clean_accuracy']:.3f} with both" in text
    for a in ("pld", "rdp"):
        cert = ev[a]["clean_certified_accuracy"]
        printed = " / ".join(f"{cert[r]['value']:.3f}" for r in ("0.25", "0.5", "1.0"))
        assert f"{printed} ({a.upper()})" in text
        assert ev[a]["num_examples"] == 200 and ev[a]["alpha"] == 0.001
