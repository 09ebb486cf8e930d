"""HGM Figure 1 regenerated from the formulas matches a table of worked values."""

import csv

import numpy as np
import pytest

from tfdp.papers.hgm import figure as hgm_figure

# HGM Figure 1 values (Delta = 1, delta = 1e-5): eps, HGM, classical GM (None if invalid), AGM.
TABLE = [(0.05, 95.1299, 96.8961, 57.7707), (0.5, 9.6066, 9.6896, 7.0318),
         (1.0, 4.8542, 4.8448, 3.7306), (2.0, 2.4766, None, 1.9938),
         (4.0, 1.2851, None, 1.0812), (10.0, 0.5638, None, 0.4999)]


def test_figure1_values_match_the_spec_table():
    t = hgm_figure.figure1_table([row[0] for row in TABLE])
    for i, (_, hgm, gm, agm) in enumerate(TABLE):
        assert t["hgm"][i] == pytest.approx(hgm, abs=1e-4)
        assert t["agm"][i] == pytest.approx(agm, abs=1e-3)
        if gm is None:
            assert np.isnan(t["gm"][i])  # GM is drawn on (0, 1] only
        else:
            assert t["gm"][i] == pytest.approx(gm, abs=1e-4)
    assert np.all(t["agm"] < t["hgm"])  # AGM below HGM everywhere (HGM Figure 1)


def test_figure1_files(tmp_path):
    png, csv_path = hgm_figure.write_figure1(str(tmp_path))
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader(open(csv_path)))
    assert len(rows) == 200 and float(rows[-1]["epsilon"]) == pytest.approx(10.0)
    assert float(rows[-1]["sigma_hgm"]) == pytest.approx(0.5638, abs=1e-4)
    with pytest.raises(ValueError, match="epsilons"):
        hgm_figure.figure1_table([0.0])
