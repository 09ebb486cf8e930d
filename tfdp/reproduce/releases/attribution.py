"""The releases beside tfdp: a Markdown section and learning-curve figures from
results/releases/ (the harness's and tfdp_side's result files).

Per paper: release and tfdp at the same budget (mean +- sd over seeds, steps, commit), a Welch
two-sample t-test on the final test accuracies, and an attribution class derived by the rule in
`attribution_class`, with the files it rests on. Reads result files only; draws nothing unless
asked. The comparisons are the papers' own (tfdp/papers/<paper>/releases.py), declared as
registry kind "release_comparisons"; this module holds what they are made of and the rule.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
import statistics
import textwrap
from typing import Any, Sequence

from tfdp import registry
from tfdp.reproduce import runner

RESULTS_DIR = os.path.join(runner.REPO_ROOT, "results", "releases")
FIGURES_DIR = "figures"
ALPHA = 0.05  # the test's level
SECTION_HEADING = "## The authors' releases beside tfdp (same budget)"
KIND = "release_comparisons"


@dataclasses.dataclass(frozen=True)
class Toggle:
    """tfdp at the comparison's budget with some of the release's options left out: what
    each option moves, one factor at a time.

    Attributes:
      key: short id.
      tfdp_glob: its result files (relative to the results directory).
      text: which release options it leaves out (or sets), in words.
    """

    key: str
    tfdp_glob: str
    text: str


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One paper's release-vs-tfdp comparison at one budget.

    Attributes:
      key: short id, also the figure's file name.
      title: the paper and data set.
      job: the release job (tfdp.reproduce.releases.jobs).
      release_glob: result files of the release runs (relative to the results directory).
      tfdp_glob: result files of the tfdp runs.
      budget: the budget in words.
      release_steps: the release's training steps at that budget (its scripts print none).
      identical: whether every hyperparameter is equal (else the closest tfdp offers).
      settings_note: what is equal, or what differs.
      published: the published value drawn as a line, or None.
      published_text: what that value is and where it is published.
      release_metric: the release result's number compared with tfdp's test accuracy
        (`test_accuracy`, the release's own, or one of the job's extra metrics).
      release_metric_text: what that number is, in words.
      paper: the report section (paper id) whose conclusion this comparison attributes.
      rows: the report rows whose gap to the paper the attribution speaks for.
      toggles: tfdp runs with some of the release options of `tfdp_glob` left out, each
        compared with the release and with `tfdp_glob`'s runs.
      scale_of: for a longer-budget run of another comparison's settings (issue 39 item 3:
        scale measured on the release itself), that comparison's key; "" otherwise.
    """

    key: str
    title: str
    job: str
    release_glob: str
    tfdp_glob: str
    budget: str
    release_steps: str
    identical: bool
    settings_note: str
    published: float | None
    published_text: str
    release_metric: str = "test_accuracy"
    release_metric_text: str = ""
    paper: str = ""
    rows: tuple[str, ...] = ()
    toggles: tuple[Toggle, ...] = ()
    scale_of: str = ""


def comparisons() -> tuple[Comparison, ...]:
    """Every paper's comparisons (registry kind "release_comparisons"), in report order: those
    at a paper's first budget, paper by paper, then the longer-budget ones (`scale_of`), which
    refer to theirs above; within a paper, in its declared order.

    Raises:
      TypeError: a declaration's target is not a tuple of Comparison of its paper.
      ValueError: two comparisons share a key, or `scale_of` names no comparison.
    """
    found = []
    for name, declared in registry.extensions(KIND).items():
        paper = registry.extension_paper(KIND, name)
        comps = declared.load()
        if not isinstance(comps, tuple) or not all(
                isinstance(c, Comparison) and c.paper == paper for c in comps):
            raise TypeError(f"{KIND} {name!r} of paper {paper!r}: {declared.target} is not a "
                            f"tuple of Comparison whose paper is {paper!r}")
        found.extend(comps)
    keys = [c.key for c in found]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{KIND}: comparison keys declared twice in {keys}")
    for c in found:
        if c.scale_of and c.scale_of not in keys:
            raise ValueError(f"{KIND}: comparison {c.key!r} is the longer budget of "
                             f"{c.scale_of!r}, which no paper declares")
    return tuple(sorted(found, key=lambda c: bool(c.scale_of)))  # stable


def _load(results_dir: str, pattern: str) -> list[dict]:
    out = []
    for path in sorted(glob.glob(os.path.join(results_dir, pattern))):
        with open(path, encoding="utf-8") as f:
            rec = json.load(f)
        rec["_file"] = os.path.relpath(path, runner.REPO_ROOT).replace(os.sep, "/")
        out.append(rec)
    return out


def _mean_sd(values: Sequence[float]) -> str:
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.2f}% (1 seed)"
    return f"{statistics.mean(values):.2f}% ± {statistics.stdev(values):.2f}"


def welch(a: Sequence[float], b: Sequence[float]) -> dict[str, float] | None:
    """Welch's two-sample t-test of mean(b) - mean(a); None with fewer than 2 values a side.

    Returns:
      {"diff", "t", "df", "p", "ci_low", "ci_high"} (95% interval of the difference).
    """
    if len(a) < 2 or len(b) < 2:
        return None
    # lazy: scipy only when a test is computed
    from scipy import stats  # pylint: disable=import-outside-toplevel
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.mean(b) - statistics.mean(a)
    se = math.sqrt(va + vb)
    if se == 0.0:
        return {"diff": diff, "t": math.inf if diff else 0.0, "df": math.nan,
                "p": 0.0 if diff else 1.0, "ci_low": diff, "ci_high": diff}
    # Welch-Satterthwaite degrees of freedom.
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    t = diff / se
    p = 2.0 * stats.t.sf(abs(t), df)
    half = stats.t.ppf(0.975, df) * se
    return {"diff": diff, "t": t, "df": df, "p": p, "ci_low": diff - half,
            "ci_high": diff + half}


def _tfdp_version(result: dict) -> str:
    """The tfdp commit (else version) a tfdp-side result file ran."""
    versions = result.get("versions", {})
    return str(versions.get("git_commit", versions.get("tfdp", "")))[:12]


def _code_versions(results: list, version) -> str:
    """Each distinct code version of `results`, in seed order; with more than one, each names
    its seeds (e.g. "d8e84b1 (seeds 1, 2), 00b52a7 (seed 3)"): a table never shows one commit
    for seeds that ran another."""
    seeds: dict = {}
    for r in results:
        seeds.setdefault(version(r), []).append(str(r["seed"]))
    if len(seeds) == 1:
        return next(iter(seeds))
    return ", ".join(f"{v} (seed{'s' if len(ss) > 1 else ''} {', '.join(ss)})"
                     for v, ss in seeds.items())


def attribution_class(comp: Comparison, release: Sequence[float], tfdp: Sequence[float],
                      test: dict[str, float] | None) -> str:
    """The attribution this comparison supports, by an explicit rule.

    scale: identical settings, the test does not separate release and tfdp, and the release
    itself is below the published value by more than the two sides differ (it is as far from
    the paper as tfdp at this budget). Otherwise the comparison attributes nothing, and says why.
    """
    if test is None:
        return ("not attributed: the test needs at least 2 seeds on each side "
                f"(release {len(release)}, tfdp {len(tfdp)})")
    if test["p"] < ALPHA:
        where = ("at identical settings" if comp.identical else
                 "at these settings (not all identical: see Settings above)")
        return (f"not attributed: release and tfdp differ {where} (p = "
                f"{test['p']:.3g} < {ALPHA:g}); a difference between tfdp and the release "
                "remains to be found (class *tfdp*, or a release departure tfdp has no "
                "option for)")
    if not comp.identical:
        cls = attribution_class(dataclasses.replace(comp, identical=True), release, tfdp, test)
        return ("provisional, the settings are not all identical (see Settings above): "
                + cls)
    if comp.published is None:
        return (f"not attributed to a class: release and tfdp are not separated at this budget "
                f"(tfdp − release = {test['diff']:+.2f} points, 95% interval "
                f"{test['ci_low']:+.2f} to {test['ci_high']:+.2f}, p = {test['p']:.2g}), but the "
                "paper publishes no value to measure the scale gap against")
    gap = comp.published - statistics.mean(release)
    bound = max(abs(test["ci_low"]), abs(test["ci_high"]))
    if gap > bound:
        # Not rejecting is not equivalence: the claim is only that the release's own gap to
        # the paper exceeds what the 95% interval allows between tfdp and the release.
        return (f"*scale* (mostly): the release itself is {gap:.1f} points below the published "
                f"value at this budget, while tfdp − release = {test['diff']:+.2f} points (95% "
                f"interval {test['ci_low']:+.2f} to {test['ci_high']:+.2f}; p = "
                f"{test['p']:.2g}, not separated at level {ALPHA:g}); up to {bound:.1f} points "
                "of tfdp's gap may still be tfdp's own, which more seeds would resolve")
    return ("not attributed: the release's gap to the published value "
            f"({gap:.1f} points) is within the 95% interval of tfdp − release "
            f"({test['ci_low']:+.2f} to {test['ci_high']:+.2f})")


def _curve(rec: dict, metric: str) -> list:
    """The record's learning curve of `metric` (its main curve for test_accuracy)."""
    if metric == "test_accuracy":
        return rec["curve"]
    return rec.get("extra_curves", {}).get(metric, [])


def _figure(comp: Comparison, release: list[dict], tfdp: list[dict], out_dir: str) -> None:
    # lazy: matplotlib only when a figure is drawn
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    # lazy: matplotlib only when a figure is drawn
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    fig, ax = plt.subplots(figsize=(6, 4))
    for recs, color, name in ((release, "C3", "release"), (tfdp, "C0", "tfdp")):
        for i, rec in enumerate(recs):
            pts = _curve(rec, comp.release_metric if recs is release else "test_accuracy")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color, ms=3,
                    alpha=0.8, label=f"{name} (seeds {', '.join(str(r['seed']) for r in recs)})"
                    if i == 0 else None)
    if comp.published is not None:
        ax.axhline(comp.published, color="k", ls="--", lw=1,
                   label=f"published {comp.published:g}%")
    ax.set_xlabel("training steps")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(textwrap.fill(f"{comp.title}: release vs tfdp, {comp.budget}", 90),
                 fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, f"{comp.key}.png"), dpi=100, metadata={"Software": None})
    plt.close(fig)


def _p(test: dict[str, float] | None) -> str:
    return "—" if test is None else f"{test['diff']:+.2f} (p = {test['p']:.2g})"


def _toggle_lines(comp: Comparison, results_dir: str, r_acc: Sequence[float],
                  t_acc: Sequence[float]) -> list[str]:
    """The table of the comparison's toggles ([] without toggle files): each variant's final
    test accuracy, its difference to the release and to the comparison's tfdp runs (Welch)."""
    rows = []
    for tog in comp.toggles:
        recs = _load(results_dir, tog.tfdp_glob)
        if not recs:
            continue
        acc = [r["numbers"]["test_accuracy"] for r in recs]
        rows.append(f"| {tog.text} | {', '.join(str(r['seed']) for r in recs)} | "
                    f"{_mean_sd(acc)} | {_p(welch(r_acc, acc))} | {_p(welch(t_acc, acc))} | "
                    + ", ".join(f"`{r['_file']}`" for r in recs) + " |")
    if not rows:
        return []
    return ["One factor at a time: tfdp at the same budget with some of the release options "
            "above left out (Welch tests of the variant minus the release, and minus tfdp "
            "with all of them):\n",
            "| tfdp variant | seeds | final test accuracy | − release | − tfdp above | files |",
            "|---|---|---|---|---|---|", *rows, ""]


def _summary(comp: Comparison, results_dir: str) -> dict[str, Any] | None:
    """The comparison's numbers and attribution, or None without any result file."""
    release = [r for r in _load(results_dir, comp.release_glob)
               if comp.release_metric in r["numbers"]]
    tfdp = _load(results_dir, comp.tfdp_glob)
    if not release and not tfdp:
        return None
    r_acc = [r["numbers"][comp.release_metric] for r in release]
    t_acc = [r["numbers"]["test_accuracy"] for r in tfdp]
    test = welch(r_acc, t_acc)
    return {"release": release, "tfdp": tfdp, "r_acc": r_acc, "t_acc": t_acc, "test": test,
            "class": attribution_class(comp, r_acc, t_acc, test)}


def paper_lines(paper: str, results_dir: str = RESULTS_DIR) -> list[str]:
    """The paragraph opening a paper's section of the report: what running the authors'
    release beside tfdp at the same budget attributes its gaps to, with the numbers, the rows
    it speaks for and the files it rests on ([] when the paper has no comparison with files).
    """
    out = []
    for comp in comparisons():
        if comp.paper != paper:
            continue
        summ = _summary(comp, results_dir)
        if summ is None:
            continue
        release, tfdp = summ["release"], summ["tfdp"]
        rel = (f"{_mean_sd(summ['r_acc'])} (seeds "
               f"{', '.join(str(r['seed']) for r in release)}, commit "
               f"{release[0]['release']['commit'][:7]})" if release else "not run")
        ours = (f"{_mean_sd(summ['t_acc'])} (seeds {', '.join(str(r['seed']) for r in tfdp)})"
                if tfdp else "not run")
        files = ", ".join(f"`{r['_file']}`" for r in release + tfdp)
        toggles = []
        for tog in comp.toggles:
            acc = [r["numbers"]["test_accuracy"] for r in _load(results_dir, tog.tfdp_glob)]
            if acc:
                test = welch(summ['r_acc'], acc)
                versus = (f"− release {_p(test)}" if test is not None else
                          f"− release {statistics.mean(acc) - statistics.mean(summ['r_acc']):+.2f} "
                          "(no test: one seed)" if summ['r_acc'] else "no test")
                toggles.append(f"{tog.text}: {_mean_sd(acc)}, {versus}")
        toggled = (" One factor at a time, tfdp " + "; ".join(toggles) + "."
                   if toggles else "")
        if comp.scale_of:
            out.append(scale_sentence(comp, summ, rel, ours, files, results_dir, toggled))
            continue
        out.append(f"**Why tfdp misses the paper ({comp.title}), from the authors' release "
                   f"run beside tfdp:** release, same budget ({comp.budget}): {rel}; tfdp: "
                   f"{ours}.{toggled} Attribution: {summ['class']}. It speaks for rows "
                   + ", ".join(f"`{r}`" for r in comp.rows)
                   + f"; it rests on {files} (section \"{SECTION_HEADING[3:]}\").\n")
    return out


def scale_sentence(comp: Comparison, summ: dict[str, Any], rel: str, ours: str,
                   files: str, results_dir: str = RESULTS_DIR, toggled: str = "") -> str:
    """The report's sentence on a longer-budget comparison: how far the release itself still
    is from the published value, against its gap at the shorter budget (and `toggled`, the
    comparison's one-factor-at-a-time sentence, if any)."""
    base = next(c for c in comparisons() if c.key == comp.scale_of)
    short = _summary(base, results_dir)
    gaps = []
    for c, s_ in ((base, short), (comp, summ)):
        if s_ and s_["r_acc"] and c.published is not None:
            gaps.append(f"{c.published - statistics.mean(s_['r_acc']):.1f} points below the "
                        f"published value after {c.release_steps.split(' ')[0]} steps")
    gap = ("; ".join(gaps) if gaps else "no published value to measure against")
    diffs = []
    for c, s_ in ((base, short), (comp, summ)):
        if s_ and s_["r_acc"] and s_["t_acc"]:
            diffs.append(f"{statistics.mean(s_['t_acc']) - statistics.mean(s_['r_acc']):+.2f} "
                         f"points after {c.release_steps.split(' ')[0]} steps "
                         f"({len(s_['r_acc'])} and {len(s_['t_acc'])} seeds)")
    moved = (" tfdp − release (means): " + "; ".join(diffs) + "." if diffs else "")
    test = summ["test"]
    tested = (f" Welch test at this budget: p = {test['p']:.2g}." if test else
              " No test at this budget yet (it needs 2 seeds a side).")
    published = (f" (published {comp.published:g}%: {comp.published_text})"
                 if comp.published is not None else "")
    return (f"**Scale, measured on the release itself ({comp.title}):** at {comp.budget}: "
            f"release {rel}; tfdp {ours}.{toggled} The release is {gap}{published}.{moved}"
            f"{tested} "
            "It speaks for rows "
            + ", ".join(f"`{r}`" for r in comp.rows)
            + f"; it rests on {files} (section \"{SECTION_HEADING[3:]}\", figure "
            f"`{comp.key}.png`).\n")


def section(results_dir: str = RESULTS_DIR, report_dir: str = runner.REPO_ROOT,
            figures: bool = False) -> list[str]:
    """The Markdown lines of the section ([] when no comparison has a result file).

    Args:
      results_dir: where the result files are.
      report_dir: the folder of the report the links are relative to.
      figures: also draw the learning-curve PNGs into <results_dir>/figures/.
    """
    found = [(c, _load(results_dir, c.release_glob), _load(results_dir, c.tfdp_glob))
             for c in comparisons()]
    found = [f for f in found if f[1] or f[2]]
    if not found:
        return []
    rel = os.path.relpath(os.path.join(results_dir, FIGURES_DIR), report_dir).replace(os.sep,
                                                                                       "/")
    if figures:
        os.makedirs(os.path.join(results_dir, FIGURES_DIR), exist_ok=True)
    out = [SECTION_HEADING + "\n",
           "The authors' own code releases, run by `tfdp-release` (docs/reproduce.md, \"The "
           "authors' releases\") on tfdp's MNIST files through tfdp's `tf.compat.v1` shim, "
           "beside tfdp at the same budget. Final test accuracy, mean ± sd over seeds; Welch's "
           f"two-sample t-test (level {ALPHA:g}) of tfdp − release. Three seeds a side detect "
           "only large differences: a test that does not reject is not a proof of "
           "equivalence. Files: `results/releases/`.\n"]
    for comp, release, tfdp in found:
        # Release runs made before the job printed the compared metric cannot enter the test.
        lacking = [r for r in release if comp.release_metric not in r["numbers"]]
        release = [r for r in release if comp.release_metric in r["numbers"]]
        r_acc = [r["numbers"][comp.release_metric] for r in release]
        t_acc = [r["numbers"]["test_accuracy"] for r in tfdp]
        test = welch(r_acc, t_acc)
        out.append(f"### {comp.title}: {comp.budget}\n")
        out.append(f"Settings: {comp.settings_note}.\n")
        if comp.release_metric_text:
            out.append(f"Compared: {comp.release_metric_text}.\n")
        if lacking:
            out.append("Not in the test (made before the release printed "
                       f"`{comp.release_metric}`): "
                       + ", ".join(f"`{r['_file']}` (its own number "
                                   f"{r['numbers']['test_accuracy']:.2f}%)" for r in lacking)
                       + ".\n")
        out.append("| side | seeds | final test accuracy | steps | code | mean seconds |")
        out.append("|---|---|---|---|---|---|")
        if release:
            commit = _code_versions(release, lambda r: str(r["release"]["commit"])[:7])
            out.append(f"| release ({release[0]['release']['repo']} "
                       f"`{release[0]['release']['script']}`) | "
                       f"{', '.join(str(r['seed']) for r in release)} | {_mean_sd(r_acc)} | "
                       f"{comp.release_steps} | commit {commit} | "
                       f"{statistics.mean(r['seconds'] for r in release):.0f} |")
        if tfdp:
            steps = sorted({r["numbers"]["steps"] for r in tfdp})
            out.append(f"| tfdp | {', '.join(str(r['seed']) for r in tfdp)} | "
                       f"{_mean_sd(t_acc)} | {', '.join(map(str, steps))} | "
                       f"tfdp {_code_versions(tfdp, _tfdp_version)} | "
                       f"{statistics.mean(r['seconds'] for r in tfdp):.0f} |")
        pub = (f"{comp.published:g}% ({comp.published_text})" if comp.published is not None
               else comp.published_text)
        out.append(f"\nPublished: {pub}.\n")
        if test:
            out.append(f"Welch test: tfdp − release = {test['diff']:+.2f} points (95% interval "
                       f"{test['ci_low']:+.2f} to {test['ci_high']:+.2f}), t = {test['t']:.2f}, "
                       f"df = {test['df']:.1f}, p = {test['p']:.3g}.\n")
        out.extend(_toggle_lines(comp, results_dir, r_acc, t_acc))
        out.append(f"Attribution: {attribution_class(comp, r_acc, t_acc, test)}. Rows: "
                   + ", ".join(f"`{r['_file']}`" for r in release + tfdp + lacking) + ".\n")
        if figures:
            _figure(comp, release, tfdp, os.path.join(results_dir, FIGURES_DIR))
        out.append(f"![{comp.key}]({rel}/{comp.key}.png)\n")
        toggled = [r for t in comp.toggles for r in _load(results_dir, t.tfdp_glob)]
        out.append("Commands:\n\n```")
        out.extend(r["command"] for r in release + tfdp + lacking + toggled)
        out.append("```\n")
    return out
