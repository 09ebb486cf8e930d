"""GPM's reproduction extractors (registry kind "extractor"): Figure 5 / Table 4 cells of the
histogram experiment and Figure 6 / Table 2 cells of the DP-SGD experiment, read from the
CSV files the `tfdp-audit gpm_hist` / `gpm_dpsgd` jobs write."""

from __future__ import annotations

import math

from tfdp.reproduce.extract import Value, close, mean
from tfdp.reproduce.registry import Row


def _hist_rows(outs) -> list[dict]:
    return outs["hist"][0]["csv"]["gpm_hist.csv"]


def gpm_hist_cell(outs, row: Row) -> Value | None:
    """GPM Figure 5 cell: success per d, each within max(3 SE, 0.02) of the exact oracle.

    The tolerance is tfdp's choice (no published value): 3 binomial standard errors of the oracle
    success p at the cell's number of trials n, sqrt(p (1 - p) / n), floored at 0.02.
    """
    cells = [r for r in _hist_rows(outs)
             if close(r["epsilon"], row.param["epsilon"]) and close(r["beta"], row.param["beta"])]
    if not cells:
        return None
    cells.sort(key=lambda r: float(r["d"]))
    bad = []
    for r in cells:
        p, n = float(r["oracle_exact"]), float(r["trials"])
        tol = max(3.0 * math.sqrt(p * (1.0 - p) / n), 0.02)
        if abs(float(r["success_rate"]) - p) > tol:
            bad.append(f"d = {int(float(r['d']))}: {float(r['success_rate']):.3f} vs oracle "
                       f"{p:.3f} (tolerance {tol:.3f})")
    rates = [float(r["success_rate"]) for r in cells]
    ds = "/".join(str(int(float(r["d"]))) for r in cells)
    text = (f"{min(rates):.3f}-{max(rates):.3f}" if len(rates) > 1 else f"{rates[0]:.3f}")
    text += f" (d = {ds}; oracle {float(cells[0]['oracle_exact']):.3f}, " \
            f"{int(float(cells[0]['trials']))} trials)"
    return Value(mean(rates), text, rates, ok=not bad, detail="; ".join(bad), cells=True)


def gpm_hist_l2(outs, row: Row) -> Value | None:
    """GPM Table 4 cell: our RMS L2 error at beta = 1e-4, within 1.5% of sigma sqrt(d)."""
    cells = [r for r in _hist_rows(outs)
             if int(float(r["d"])) == row.param["d"] and close(r["epsilon"], row.param["epsilon"])
             and close(r["beta"], 1e-4)]
    if not cells:
        return None
    r = cells[0]
    ours = float(r[f"l2_error_{row.param['which']}"])
    expect = float(r["l2_error_expected"])
    rel = abs(ours / expect - 1.0)
    return Value(ours, f"{ours:.1f} ({100 * rel:.2f}% from sigma sqrt(d) = {expect:.1f})",
                 [ours], ok=rel <= 0.015)


def _dpsgd_rows(outs) -> list[dict]:
    out = outs["dpsgd"][0]["csv"]
    return [r for name, rows in sorted(out.items()) if name.startswith("gpm_dpsgd")
            for r in rows]


def gpm_dpsgd_cells(outs, row: Row) -> Value | None:
    """GPM Figure 6 / Table 2: the success range over (C, eps*) at one phase and beta."""
    phase, beta = row.param["phase"], row.param["beta"]
    cells = [r for r in _dpsgd_rows(outs)
             if (phase is None or r["phase"] == phase) and close(r["beta"], beta)]
    if not cells:
        return None
    rates = [float(r["success_rate"]) for r in cells]
    low, high = row.param["low"], row.param["high"]
    ok = (low is None or min(rates) >= low) and (high is None or max(rates) <= high)
    trials = int(float(cells[0]["trials"]))
    oracle = [float(r["oracle_mean"]) for r in cells]
    return Value(mean(rates), f"{min(rates):.2f}-{max(rates):.2f} ({len(cells)} cells, "
                 f"{trials} trials each; oracle {min(oracle):.2f}-{max(oracle):.2f})", rates,
                 ok=ok, cells=True)


def gpm_dpsgd_gap(outs, row: Row) -> Value | None:
    """Mean success over cells: not converged minus converged."""
    rows = _dpsgd_rows(outs)
    nc = [float(r["success_rate"]) for r in rows if r["phase"] == "not_converged"]
    c = [float(r["success_rate"]) for r in rows if r["phase"] == "converged"]
    if not nc or not c:
        return None
    gap = mean(nc) - mean(c)
    return Value(gap, f"{gap:+.3f} ({mean(nc):.3f} vs {mean(c):.3f})", [gap])


def gpm_dpsgd_dq(outs, row: Row) -> Value | None:
    """Median ||dq|| at one phase and clip norm."""
    cells = [r for r in _dpsgd_rows(outs) if r["phase"] == row.param["phase"]
             and close(r["clip_norm"], row.param["clip"])]
    if not cells:
        return None
    v = float(cells[0]["median_dq_norm"])
    return Value(v, f"{v:.3g}", [v])
