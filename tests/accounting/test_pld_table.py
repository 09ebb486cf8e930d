"""results/accounting/pld_vs_rdp.json (tools/accounting/pld_vs_rdp.py) recomputes, and the
PLD-vs-RDP table of docs/mechanisms-and-ledger.md prints its numbers."""

import json
import os

import pytest

from tfdp import accounting

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULT = os.path.join(ROOT, "results", "accounting", "pld_vs_rdp.json")


def _rows():
    with open(RESULT, encoding="utf-8") as f:
        return json.load(f)["rows"]


def _kw(row):
    return dict(num_examples=row["num_examples"], batch_size=row["batch_size"],
                steps=row["steps"], delta=row["delta"])


@pytest.mark.parametrize("index", range(4))
def test_epsilons_recompute_and_pld_is_tighter(index):
    row = _rows()[index]
    kw = _kw(row)
    for acc in ("rdp", "pld"):
        got = accounting.dpsgd_epsilon(noise_multiplier=row["sigma"], accountant=acc, **kw)
        assert got == pytest.approx(row[f"{acc}_epsilon"], rel=1e-9)
    assert row["pld_epsilon"] < row["rdp_epsilon"]
    assert row["pld_sigma_at_target"] < row["rdp_sigma_at_target"]
    # The sigmas are on the valid side of the target with their own accountant.
    for acc in ("rdp", "pld"):
        eps = accounting.dpsgd_epsilon(noise_multiplier=row[f"{acc}_sigma_at_target"],
                                       accountant=acc, **kw)
        assert eps <= row["target_epsilon"]


def test_docs_table_prints_the_file():
    with open(os.path.join(ROOT, "docs", "mechanisms-and-ledger.md"), encoding="utf-8") as f:
        text = f.read()
    for row in _rows():
        for key, fmt in (("rdp_epsilon", "{:.3f}"), ("pld_epsilon", "{:.3f}"),
                         ("rdp_sigma_at_target", "{:.4f}"), ("pld_sigma_at_target", "{:.4f}")):
            assert fmt.format(row[key]) in text, (key, row["setting"])
