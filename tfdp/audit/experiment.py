"""What an experiment subcommand of `tfdp-audit` is, for papers that add one.

A paper declares `registry.Extension("subcommand", "<name>", "module:ATTRIBUTE")`, the
attribute a `Subcommand`: `tfdp-audit <name>` then defines the flags of its settings class
(a `tfdp.options.declare` class, whose fields are the flags), checks them before any work
and calls `run(output_dir, settings, common)`. The module holding it must import no
TensorFlow or scipy at module level: `tfdp-audit --help` loads it to list the subcommand.
"""

from __future__ import annotations

import csv
import dataclasses
from typing import Any, Callable, Optional

from absl import logging


@dataclasses.dataclass(frozen=True)
class Common:
    """The settings every tfdp-audit subcommand shares (its --audit_* flags).

    Attributes:
      seed: --audit_seed, the seed of every random draw.
      trials: --audit_trials, games per cell (None: the subcommand's default).
      data_dir: --audit_data_dir, else $TFDP_DATA_DIR (None when neither is set).
    """

    seed: int
    trials: Optional[int]
    data_dir: Optional[str]


@dataclasses.dataclass(frozen=True)
class Subcommand:
    """An experiment subcommand a paper adds to tfdp-audit.

    Attributes:
      summary: one line for tfdp-audit's help.
      run: run(output_dir, settings, common); writes its results into output_dir (created).
      settings_class: the `tfdp.options.declare` class of its own flags, or None. Several
        subcommands may share one class (its flags are defined once).
    """

    summary: str
    run: Callable[[str, Any, Common], None]
    settings_class: Optional[type] = None


def write_csv(path: str, rows: list[dict]) -> None:
    """Writes dict rows as CSV, columns the union of their keys in first-seen order (nothing
    for no rows)."""
    if not rows:
        return
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in keys})
    logging.info("wrote %s", path)


def pyplot():
    """matplotlib.pyplot on the Agg backend (figures written to files)."""
    # lazy: matplotlib only when a figure is drawn
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    # lazy: matplotlib only when a figure is drawn
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    return plt
