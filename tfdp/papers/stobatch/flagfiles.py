"""Which flagfile and arguments train StoBatch in a reproduction row (registry kind
"flagfile_rule", read by `tfdp.reproduce.registry.train_command`)."""

from __future__ import annotations


def train_command(method: str, dataset: str, eps: float | None, scale: str,
                  eps_r: float | None = None, variant: str = "") -> tuple[str, tuple[str, ...]]:
    """`flags/stobatch/<dataset>_<scale>[_<variant>].flags` (e.g. "authors_path": the
    authors' code release's data path, issue 29 item 5).

    Returns:
      (repository-relative flagfile, override arguments).
    """
    del eps_r
    e = () if eps is None else (f"--epsilon={eps:g}",)
    suffix = f"_{variant}" if variant else ""
    return (f"flags/stobatch/{dataset}_{scale}{suffix}.flags",
            (f"--method={method}", f"--dataset={dataset}") + e)
