"""Which flagfile and arguments train AdLM in a reproduction row (registry kind
"flagfile_rule", read by `tfdp.reproduce.registry.train_command`)."""

from __future__ import annotations


def train_command(method: str, dataset: str, eps: float | None, scale: str,
                  eps_r: float | None = None, variant: str = "") -> tuple[str, tuple[str, ...]]:
    """`flags/adlm/<dataset>_<scale>.flags`; the AdLM flagfiles leave --dataset to the
    command line (one flagfile per data set).

    Returns:
      (repository-relative flagfile, override arguments).

    Raises:
      ValueError: a variant (AdLM's flagfiles have none).
    """
    del eps_r
    if variant:
        raise ValueError(f"variant: {method!r} has no flagfile variants, got {variant!r}")
    e = () if eps is None else (f"--epsilon={eps:g}",)
    return f"flags/adlm/{dataset}_{scale}.flags", (f"--method={method}", f"--dataset={dataset}") + e
