"""The `python -m tfdp.mechanisms` table."""

import pytest

from tfdp.mechanisms.__main__ import table


def test_table_rows():
    text = table([1.0, 10.0], 1e-5, 1.0)
    lines = text.splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("| 1 | 4.8542 | 4.8448 | 3.7306 | 3.91e-08 |")
    assert lines[3].startswith("| 10 | 0.5638 | 0.4845 (formula invalid) | 0.4999 | 2.61e-07 |")
    assert lines[3].endswith("2.27e-05 NOT DP |")
    with pytest.raises(ValueError, match="delta"):
        table([1.0], 0.0, 1.0)
