"""Which flagfile and arguments train an HGM method in a reproduction row (registry kind
"flagfile_rule", read by `tfdp.reproduce.registry.train_command`)."""

from __future__ import annotations

HGM_METHODS = ("secure_sgd", "secure_sgd_agm", "pixeldp", "hgm_pixeldp")


def train_command(method: str, dataset: str, eps: float | None, scale: str,
                  eps_r: float | None = None, variant: str = "") -> tuple[str, tuple[str, ...]]:
    """The HGM methods share one flagfile per data set and scale
    (`flags/hgm/<dataset>_<scale>[_<variant>].flags`) and are selected with `--method`;
    PixelDP and HGM_PixelDP are non-private (`--epsilon=` unsets the flagfile's budget) and
    PixelDP's classical Gaussian needs eps_r <= 1; PixelDP and Secure-SGD-AGM use a uniform r.

    Returns:
      (repository-relative flagfile, override arguments).
    """
    e = () if eps is None else (f"--epsilon={eps:g}",)
    if method in ("pixeldp", "hgm_pixeldp"):
        e = ("--epsilon=",)
        eps_r = 1.0 if method == "pixeldp" else eps_r
    # PixelDP (and AGM) use uniform r; the flagfile's r source is for Secure-SGD.
    e += ("--hgm_r_source=uniform",) if method in ("pixeldp", "secure_sgd_agm") else ()
    r = () if eps_r is None else (f"--hgm_eps_r={eps_r:g}",)
    suffix = f"_{variant}" if variant else ""
    return f"flags/hgm/{dataset}_{scale}{suffix}.flags", (f"--method={method}",) + e + r
