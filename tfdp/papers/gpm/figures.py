"""GPM's figure in the reproduction report: Figures 5 and 6 (success against beta).

Registry kind "figure": `tfdp.reproduce.report` calls it with the rows' records by (scale,
row id), the figures folder, the link prefix and whether to draw; it returns the figure's
link (relative to the report), or None when no row has a value.
"""

from __future__ import annotations

import os

from tfdp.reproduce import registry


def success_vs_beta(rows_by_key: dict, out_dir: str, rel: str, draw: bool) -> str | None:
    """GPM Figure 5 / 6: key holder's success vs beta, ours (per scale) and published."""
    # lazy: matplotlib only when a figure is drawn
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    # lazy: matplotlib only when a figure is drawn
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    hist, lenet = {}, {}
    for (scale, rid), rec in sorted(rows_by_key.items()):
        row = registry.ROWS_BY_ID.get(rid)
        if row is None or row.figure != "gpm_success_vs_beta" or rec.get("value") is None:
            continue
        p = row.param
        if rid.startswith("gpm.fig5."):
            hist.setdefault((p["epsilon"], scale), []).append((p["beta"], rec["value"],
                                                               row.published))
        else:
            lenet.setdefault((p["phase"], scale), []).append((p["beta"], rec["value"],
                                                              row.published))
    if not hist and not lenet:
        return None
    if not draw:
        return f"{rel}/gpm_success_vs_beta.png"
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, data, title in ((axes[0], hist, "Fig. 5: DP-hist (eps*)"),
                            (axes[1], lenet, "Fig. 6: MNIST LeNet-5 DP-SGD (phase)")):
        for i, ((key, scale), pts) in enumerate(sorted(data.items(), key=lambda kv: str(kv[0]))):
            pts.sort()
            color = f"C{i % 10}"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color,
                    label=f"{key} (ours, {scale})")
            ax.plot([p[0] for p in pts], [p[2] for p in pts], "*", ms=10, color=color,
                    label=f"{key} (authors' logs)")
        ax.set_xscale("log")
        ax.set_xlabel("beta")
        ax.set_ylabel("success rate")
        ax.set_title(title)
        ax.set_ylim(0.4, 1.02)
        if data:
            ax.legend(fontsize=6)
    fig.tight_layout()
    path = os.path.join(out_dir, "gpm_success_vs_beta.png")
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return f"{rel}/gpm_success_vs_beta.png"
