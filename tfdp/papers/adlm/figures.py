"""AdLM's figure in the reproduction report: Figure 4a (MNIST accuracy against eps).

Registry kind "figure": `tfdp.reproduce.report` calls it with the rows' records by (scale,
row id), the figures folder, the link prefix and whether to draw; it returns the figure's
link (relative to the report), or None when no row has a value.
"""

from __future__ import annotations

import os
import re

from tfdp.reproduce import registry


def accuracy_vs_eps(rows_by_key: dict, out_dir: str, rel: str, draw: bool) -> str | None:
    """AdLM Figure 4a: MNIST accuracy vs eps, ours (per scale) and published."""
    # lazy: matplotlib only when a figure is drawn
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    # lazy: matplotlib only when a figure is drawn
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    series = {}
    for (scale, rid), rec in sorted(rows_by_key.items()):
        row = registry.ROWS_BY_ID.get(rid)
        match = re.fullmatch(r"adlm\.mnist\.(adlm|ilm|dpsgd)\.eps([0-9.]+)", rid)
        if row is None or match is None or rec.get("value") is None:
            continue
        eps = float(match.group(2))
        series.setdefault((match.group(1), scale), []).append((eps, rec["value"], row.published))
    if not series:
        return None
    if not draw:
        return f"{rel}/adlm_accuracy_vs_eps.png"
    fig, ax = plt.subplots(figsize=(6, 4))
    colors = {"adlm": "C0", "ilm": "C1", "dpsgd": "C2"}
    markers = {"smoke": "x", "short": "s", "reduced": "o", "full": "D"}
    published = {}
    for (method, scale), pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=markers[scale],
                color=colors.get(method, "k"), label=f"{method} (ours, {scale})")
        for p in pts:
            published[(method, p[0])] = p[2]
    for method in colors:
        pts = sorted((e, v) for (m, e), v in published.items() if m == method)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "*", ms=12,
                    color=colors[method], label=f"{method} (published)")
    ax.set_xlabel("epsilon")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("AdLM Fig. 4a: MNIST accuracy vs epsilon")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(out_dir, "adlm_accuracy_vs_eps.png")
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return f"{rel}/adlm_accuracy_vs_eps.png"
