"""Generates REPRODUCTION.md and its figures from results/reproduce/.

The report is a function of the result files only (no clock, no environment): the same
files give the same Markdown, except the "Timings" section at the end, which lists wall
times and dates. Rows without a result at a scale say "not run at this scale", never a
number. Written text is included from results/reproduce/preamble.md (top) and
results/reproduce/earlier_runs.md (an appendix of the earlier hand-recorded runs); every
number they state about a row or run is a citation filled in from its file (`cite`).
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

from tfdp import registry as _papers
from tfdp.reproduce import cite, jobfiles, registry, tasks, values
from tfdp.reproduce.releases import attribution
import json

TIMINGS_HEADING = "## Timings"
FIGURES_DIR = "figures"
_PASS = ("reproduced", "within band", "ordering holds")


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _cell(rec: dict | None, row: registry.Row | None = None) -> str:
    if rec is None:
        return values.NOT_RUN
    verdict = rec["verdict"]
    if verdict == values.STALE:
        prev = rec.get("previous_value_text") or "—"
        return f"—<br>**{verdict}** (earlier result: {_md(prev)})"
    value = rec.get("value_text") or "—"
    seeds = rec.get("seeds") or []
    seeded = rec.get("jobs") and any("@seed" in j for j in rec["jobs"])
    need = row.min_seeds if row is not None and rec.get("scale") in registry.DECIDING_SCALES \
        else 1
    if seeded and len(seeds) < need:
        # Visibly resting on fewer seeds than the row needs (issue 39).
        value += f" ({len(seeds)} seed{'' if len(seeds) == 1 else 's'} of {need} needed)"
    elif len(seeds) <= 1 and rec.get("value") is not None and seeded:
        value += " (1 seed)"
    if rec.get("flags"):
        value += " (flagged: noise kernel differs from its command's, see reason)"
    return f"{_md(value)}<br>**{verdict}**"


def _published(row: registry.Row) -> str:
    return _md(row.published_text)


def _scales_with_results(rows_by_key: dict) -> list[str]:
    return [s for s in registry.SCALES if any(k[0] == s for k in rows_by_key)]


_X_OF_FIGURE = {"acc_vs_eps_attack": ("eps", "privacy budget eps (claimed)"),
                "certified_vs_mu": ("mu", "attack size mu_a (fraction of the pixel range)"),
                "acc_vs_mu": ("mu", "attack size mu_a (fraction of the pixel range)")}


def _row_x(row: registry.Row, axis: str) -> float | None:
    """The row's position on a real axis: its eps (from the setting) or its attack size."""
    if axis == "eps":
        m = re.search(r"\beps = ([0-9.]+)", row.setting)
        return float(m.group(1)) if m else None
    size = row.param.get("size")
    return float(size) if size not in (None, "") else None


def _series_name(row: registry.Row, scale: str) -> str:
    """Method and data set of a row (its id without the eps / size part), and the scale."""
    name = re.sub(r"\.(?:eps|mu)\d+(?:\.\d+)?(?=\.[a-z]|$)", "", row.id)
    return f"{name.split('.', 1)[1]} ({scale})"


def _fig_attack(rows_by_key: dict, out_dir: str, rel: str, draw: bool, figure: str,
                title: str) -> str | None:
    """HGM / StoBatch figures: one quantity per axis.

    Left: accuracies (%) on a real x axis (eps, or the attack size mu_a as a fraction of the
    pixel range), one line per method, data set and scale, the published values as stars.
    Right (when the figure has them): differences between methods in points, which average
    over a grid, as bars per row beside the published difference.
    """
    pts = [(rid, scale, rec) for (scale, rid), rec in sorted(rows_by_key.items())
           if (registry.ROWS_BY_ID.get(rid) is not None
               and registry.ROWS_BY_ID[rid].figure == figure and rec.get("value") is not None)]
    if not pts:
        return None
    if not draw:
        return f"{rel}/{figure}.png"
    # lazy: matplotlib only when a figure is drawn
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    # lazy: matplotlib only when a figure is drawn
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    axis, x_label = _X_OF_FIGURE.get(figure, ("eps", "eps"))
    level = [(registry.ROWS_BY_ID[rid], scale, rec) for rid, scale, rec in pts
             if registry.ROWS_BY_ID[rid].unit == "%"
             and _row_x(registry.ROWS_BY_ID[rid], axis) is not None]
    gaps = [(registry.ROWS_BY_ID[rid], scale, rec) for rid, scale, rec in pts
            if not (registry.ROWS_BY_ID[rid].unit == "%"
                    and _row_x(registry.ROWS_BY_ID[rid], axis) is not None)]
    panels = [p for p in (("level", level), ("gap", gaps)) if p[1]]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.2), squeeze=False)
    for ax, (kind, items) in zip(axes[0], panels):
        if kind == "level":
            series: dict[str, list] = {}
            for row, scale, rec in items:
                series.setdefault(_series_name(row, scale), []).append((row, rec))
            for i, (name, members) in enumerate(sorted(series.items())):
                members.sort(key=lambda m: _row_x(m[0], axis))
                xs = [_row_x(r, axis) for r, _ in members]
                ys = [rec["value"] for _, rec in members]
                sd = [rec.get("value_sd") or 0.0 for _, rec in members]
                color = f"C{i % 10}"
                ax.errorbar(xs, ys, yerr=sd, marker="o", color=color, label=name, capsize=3)
                pub = [(x, r.published) for x, (r, _) in zip(xs, members)
                       if isinstance(r.published, (int, float))]
                if pub:
                    ax.plot(*zip(*pub), "*", ms=11, color=color, markeredgecolor="k")
            if axis == "eps" and len({_row_x(r, axis) for r, _, _ in items}) > 1:
                ax.set_xscale("log")
            ax.set_xlabel(x_label)
            ax.set_ylabel("accuracy (%)")
            ax.set_ylim(0, 100)
            ax.set_title(f"{title}: ours (o, bars = sd over seeds), published (*)", fontsize=9)
            ax.legend(fontsize=6, loc="lower right")
        else:
            labels = [f"{r.id.split('.', 1)[1]} ({scale})" for r, scale, _ in items]
            ys = [rec["value"] for _, _, rec in items]
            ax.bar(range(len(items)), ys, color="C0", label="ours")
            pub = [(i, r.published) for i, (r, _, _) in enumerate(items)
                   if isinstance(r.published, (int, float))]
            if pub:
                ax.plot(*zip(*pub), "*", ms=11, color="C3", label="published")
            ax.axhline(0.0, color="k", lw=0.5)
            ax.set_xticks(range(len(items)))
            ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=6)
            ax.set_ylabel("difference (points)")
            ax.set_title("differences between methods (averaged over the row's grid)",
                         fontsize=9)
            ax.legend(fontsize=7)
    fig.tight_layout()
    name = f"{figure}.png"
    fig.savefig(os.path.join(out_dir, name), dpi=100, metadata={"Software": None})
    plt.close(fig)
    return f"{rel}/{name}"


def _read(path: str) -> str:
    if not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read().rstrip() + "\n"


def _headline(paper: str, rows: list[registry.Row], rows_by_key: dict) -> list[str]:
    lines = []
    for scale in registry.SCALES:
        found = [(r, rows_by_key.get((scale, r.id))) for r in rows if r.headline]
        found = [(r, rec) for r, rec in found if rec is not None]
        if not found:
            continue
        holds = sum(1 for _, rec in found if rec["verdict"] in _PASS)
        items = "; ".join(f"`{r.id}`: {rec['verdict']}" for r, rec in found)
        lines.append(f"- **{scale}**: {holds} of {len(found)} headline checks hold ({items}).")
    return lines


TRAINING_AUDIT_DIR = os.path.join(tasks.REPO_ROOT, "results", "audit", "training")


def _eps_cell(value: Any) -> str:
    if value is None or (isinstance(value, str) and value.lower() in ("inf", "infinity")):
        return "inf (no guarantee)"
    value = float(value)
    return "inf (no guarantee)" if math.isinf(value) else f"{value:.3g}"


def training_audit_section(audit_dir: str = TRAINING_AUDIT_DIR) -> list[str]:
    """The one-run training audits: a table from results/audit/training/<method>/audit.json."""
    reports = []
    if os.path.isdir(audit_dir):
        order = {m: i for i, m in enumerate(("nonprivate", "dpsgd", "secure_sgd", "adlm",
                                             "stobatch"))}
        for name in os.listdir(audit_dir):
            path = os.path.join(audit_dir, name, "audit.json")
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    reports.append((name, json.load(f)))
        reports.sort(key=lambda nr: (order.get(nr[1]["method"], len(order)), nr[0]))
    if not reports:
        return []
    out = ["## Training audits (one run, Steinke, Nasr, Jagielski 2023)\n",
           "`tfdp-audit training` (docs/audit.md): m canaries, each in the training set with "
           "probability 1/2, one training run with the method's own flags, and an eps lower "
           "bound from the guesses (Theorem 3 of the one-run paper) at the run's claimed "
           "delta. A lower bound above the sound eps would be a bug; 0 means no leakage was "
           "detected, not that there is none. Files: `results/audit/training/<run>/"
           "audit.json`.\n",
           "| run | method | canaries | eps lower bound | claimed eps | sound eps | m | "
           "correct / guesses | delta | confidence | test accuracy | claim |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in reports:
        acc = r.get("test_accuracy")
        lb, claimed = float(r["epsilon_lower_bound"]), r["claimed_epsilon"]
        claimed_f = math.inf if _eps_cell(claimed).startswith("inf") else float(claimed)
        verdict = ("no claim" if math.isinf(claimed_f) else
                   "refuted (bound above it)" if lb > claimed_f else "not refuted")
        out.append(f"| `{name}` | {r['method']} | {r.get('canary_type', '')} | "
                   f"{float(r['epsilon_lower_bound']):.3f} | "
                   f"{_eps_cell(r['claimed_epsilon'])} | {_eps_cell(r['sound_epsilon'])} | "
                   f"{r['num_canaries']} | {r['correct_guesses']} / {r['guesses_made']} | "
                   f"{r['delta']:g} | {r['confidence']:g} | "
                   f"{'—' if acc is None else f'{100 * float(acc):.1f}%'} | {verdict} |")
    out.append("\nCommands:\n\n```")
    out.extend(r["command"] for _, r in reports)
    out.append("```\n")
    return out


def releases_section(results_dir: str, figures: bool) -> list[str]:
    """Hook for the authors' releases beside tfdp (tfdp.reproduce.releases.attribution): the
    section built from the repository's results/releases/ ([] when it has no result), the
    same whichever results_dir the rest of the report comes from; its figures are redrawn
    only with the repository's own results (never from a test's copy)."""
    own = os.path.abspath(results_dir) == os.path.join(tasks.REPO_ROOT, "results", "reproduce")
    return attribution.section(attribution.RESULTS_DIR, tasks.REPO_ROOT, figures and own)


def _figure_links(rows_by_key: dict, results_dir: str, target: str,
                  figures: bool) -> list[str]:
    """The report's figure links (drawing the PNGs into <results_dir>/figures/ when asked)."""
    rel_fig = os.path.relpath(os.path.join(results_dir, FIGURES_DIR),
                              os.path.dirname(os.path.abspath(target))).replace(os.sep, "/")
    fig_links = []
    out_dir = os.path.join(results_dir, FIGURES_DIR)
    if figures:
        os.makedirs(out_dir, exist_ok=True)
    # The links depend on the data only, not on whether the PNGs are redrawn.
    # The papers' own figures (registry kind "figure", in paper order), then the shared ones.
    papers_figures = tuple((declared.load(), ())
                           for declared in _papers.extensions("figure").values())
    for fn, args in papers_figures + (
                     (_fig_attack, ("acc_vs_eps_attack", "Accuracy under attack vs eps")),
                     (_fig_attack, ("acc_vs_mu", "Accuracy drop vs mu_a")),
                     (_fig_attack, ("certified_vs_mu", "Certified accuracy vs mu_a"))):
        link = fn(rows_by_key, out_dir, rel_fig, figures, *args)
        if link:
            fig_links.append(link)
    return fig_links


def _scales_section(rows_by_key: dict) -> list[str]:
    """The scales and how many rows have a result at each."""
    out = ["## Scales\n"]
    for s in registry.SCALES:
        n = sum(1 for k in rows_by_key if k[0] == s)
        out.append(f"- **{s}**: {registry.SCALE_NOTES[s]}. Rows with a result: {n}.")
    out.append("")
    return out


def _summary_section(rows_by_key: dict) -> list[str]:
    """The count of each verdict per paper and scale, and what inconclusive and stale mean."""
    out = ["## Summary of verdicts\n"]
    counted = values.VERDICTS + (values.RECORDED, values.INCONCLUSIVE, values.STALE)
    out.append("| paper | scale | reproduced | within band | ordering holds | not reproduced | "
               "recorded | inconclusive | stale (rerun) | rows without a result "
               "(no job, or not run) |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for paper in registry.PAPERS:
        rows = [r for r in registry.ROWS if r.paper == paper]
        for s in registry.SCALES:
            recs = [rows_by_key.get((s, r.id)) for r in rows]
            counts = {v: sum(1 for rec in recs if rec and rec["verdict"] == v) for v in counted}
            missing = sum(1 for rec in recs if rec is None)
            out.append(f"| {paper} | {s} | " + " | ".join(str(counts[v]) for v in counted) +
                       f" | {missing} |")
    out.append("")
    out.append(f"**inconclusive**: the criterion cannot decide because a model behind the row "
               f"is within {values.CHANCE_MARGIN:g} points of chance, or the row certifies "
               f"nothing or fewer than {values.MIN_CERTIFIED} examples; counted apart from "
               f"the verdicts. **stale**: the row's definition (attack-size unit, baseline "
               f"settings, Monte-Carlo scoring) changed after its jobs ran, or a model it "
               f"scores was retrained after its evaluation ran; the earlier number is shown "
               f"only as such, never as a result. A cell with several seeds "
               f"shows mean ± standard deviation; \"(1 seed)\" marks a single-seed result.\n")
    return out


def _figures_section(fig_links: list[str]) -> list[str]:
    """The figures' links ([] without figures)."""
    if not fig_links:
        return []
    out = ["## Figures\n"]
    for link in fig_links:
        out.append(f"![{os.path.basename(link)}]({link})")
    out.append("")
    return out


def _paper_table(rows: list, rows_by_key: dict) -> list[str]:
    """A paper's rows: published value, criterion and our cell at each scale."""
    out = ["| row | source | setting | published | criterion | " +
           " | ".join(registry.SCALES) + " |"]
    out.append("|---|---|---|---|---|" + "---|" * len(registry.SCALES))
    for r in rows:
        cells = [_cell(rows_by_key.get((s, r.id)), r) if s in r.jobs else
                 "no job at this scale" for s in registry.SCALES]
        out.append(f"| `{r.id}` | {_md(r.source)} | {_md(r.setting)} | {_published(r)} | "
                   f"{_md(r.criterion.describe(r.unit))} | " + " | ".join(cells) + " |")
    out.append("")
    return out


def _paper_reasons(rows: list, rows_by_key: dict) -> list[str]:
    """Each verdict of a paper's rows with its reason ([] when none has a result)."""
    notes = []
    for r in rows:
        for s in registry.SCALES:
            rec = rows_by_key.get((s, r.id))
            if rec is None:
                continue
            why = rec["reason"]
            if rec.get("detail") and rec["detail"] not in why:
                why += f" [{rec['detail']}]"
            if rec.get("adopted_from"):
                why += f" [from {', '.join(rec['adopted_from'])}]"
            notes.append(f"- `{r.id}` ({s}): {rec['verdict']}: {_md(why)}")
    if not notes:
        return []
    return ["Verdicts and reasons:\n"] + notes + [""]


def _paper_commands(paper: str, rows_by_key: dict) -> list[str]:
    """The commands behind a paper's rows ([] when none ran)."""
    cmds = sorted({(s, c) for (s, rid), rec in rows_by_key.items()
                   if registry.ROWS_BY_ID.get(rid) and
                   registry.ROWS_BY_ID[rid].paper == paper for c in rec.get("commands", [])})
    if not cmds:
        return []
    out = ["Commands behind these rows (`--data_dir` / `TFDP_DATA_DIR` for real "
           "data; each job's JSON in `results/reproduce/<scale>/jobs/`):\n"]
    out.append("```")
    out.extend(f"[{s}] {c}" for s, c in cmds)
    out.append("```\n")
    return out


def _paper_section(paper: str, rows_by_key: dict) -> list[str]:
    """One paper's section: headline orderings, its rows, their reasons and commands."""
    rows = [r for r in registry.ROWS if r.paper == paper]
    out = [f"## {registry.PAPER_TITLES[paper]}\n"]
    out.extend(attribution.paper_lines(paper))
    head = _headline(paper, rows, rows_by_key)
    if head:
        out.append("Headline orderings:\n")
        out.extend(head)
        out.append("")
    else:
        out.append("Headline orderings: not run at any scale.\n")
    out.extend(_paper_table(rows, rows_by_key))
    out.extend(_paper_reasons(rows, rows_by_key))
    out.extend(_paper_commands(paper, rows_by_key))
    return out


def _timings_section(jobs: dict) -> list[str]:
    """Wall-clock seconds and finishing time of every job (differs between runs)."""
    out = [TIMINGS_HEADING + "\n"]
    out.append("Wall-clock seconds per job on the machine that ran it (2 CPU cores shared "
               "with other work), and when it finished.\n")
    out.append("| scale | job | seconds | finished (UTC) |")
    out.append("|---|---|---|---|")
    for (s, key), job in sorted(jobs.items()):
        sec = job.get("seconds")
        sec = "—" if sec is None or not math.isfinite(float(sec)) else f"{float(sec):.0f}"
        out.append(f"| {s} | `{key}` | {sec} | {job.get('finished_utc') or '—'} |")
    out.append("")
    return out


def generate(results_dir: str = tasks.DEFAULT_RESULTS, report_path: str | None = None,
             figures: bool = True) -> str:
    """Writes REPRODUCTION.md (and its figures) from the row and job JSONs.

    Args:
      results_dir: the results/reproduce/ directory.
      report_path: where to write the Markdown (default: REPRODUCTION.md at the repo root);
        "" only returns the text (the figure links are still relative to the repo root).
      figures: also draw the PNGs into <results_dir>/figures/.

    Returns:
      The Markdown text.
    """
    rows_by_key = jobfiles.load_rows(results_dir)
    jobs = jobfiles.load_jobs(results_dir)
    target = report_path or os.path.join(tasks.REPO_ROOT, "REPRODUCTION.md")
    fig_links = _figure_links(rows_by_key, results_dir, target, figures)
    out: list[str] = []
    out.append("# Reproduction: tfdp against the papers' published numbers\n")
    out.append("<!-- Generated by `tfdp-reproduce --report --repository` from results/reproduce/; do not "
               "edit by hand (edit results/reproduce/preamble.md or earlier_runs.md). -->\n")
    # The written sections cite the row and run files for every number they state.
    preamble = cite.expand(_read(os.path.join(results_dir, "preamble.md")), rows_by_key,
                           results_dir)
    if preamble:
        out.append(preamble)
    out.extend(_scales_section(rows_by_key))
    out.extend(_summary_section(rows_by_key))
    out.extend(_figures_section(fig_links))
    for paper in registry.PAPERS:
        out.extend(_paper_section(paper, rows_by_key))
    out.extend(training_audit_section())
    out.extend(releases_section(results_dir, figures))
    earlier = cite.expand(_read(os.path.join(results_dir, "earlier_runs.md")), rows_by_key,
                          results_dir)
    if earlier:
        out.append(earlier)
    out.extend(_timings_section(jobs))
    text = "\n".join(out)
    if report_path != "":
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
    return text


def strip_timings(text: str) -> str:
    """The report without its Timings section (what must be identical between runs)."""
    head, _, _ = text.partition(TIMINGS_HEADING)
    return head
