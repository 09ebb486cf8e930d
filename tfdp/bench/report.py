"""`tfdp-bench all --report` / `tfdp-bench report`: BENCHMARKS.md from the result files.

`all` runs every benchmark and writes each result to `results/bench/<name>.json`; the report
is rendered from those files only (never from numbers held in memory), so
`tfdp-bench report` regenerates the committed BENCHMARKS.md byte for byte from the committed
result files (tests/bench/test_report.py checks this).
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import statistics
import tempfile
from typing import Any, Optional

from tfdp import rundir
from tfdp.bench.dpsgd import machine
import importlib
from tfdp.bench import BENCHMARKS
from tfdp.bench import keras_fit

# (result file stem, benchmark, run() overrides, the command that produces the file).
RUNS = (
    ("layers", "layers", {},
     "tfdp-bench layers --output=results/bench/layers.json"),
    ("layers_mnist", "layers", {"model": "mnist"},
     "tfdp-bench layers --layers_model=mnist --output=results/bench/layers_mnist.json"),
    ("layers_fused", "layers", {"noise_kernel": "fused"},
     "tfdp-bench layers --layers_noise_kernel=fused --output=results/bench/layers_fused.json"),
    ("layers_mnist_fused", "layers", {"model": "mnist", "noise_kernel": "fused"},
     "tfdp-bench layers --layers_model=mnist --layers_noise_kernel=fused "
     "--output=results/bench/layers_mnist_fused.json"),
    ("certify", "certify", {},
     "tfdp-bench certify --output=results/bench/certify.json"),
    ("certify_smoothing", "certify", {"certificate": "gaussian_smoothing"},
     "tfdp-bench certify --certify_certificate=gaussian_smoothing "
     "--output=results/bench/certify_smoothing.json"),
    ("gpm", "gpm", {},
     "tfdp-bench gpm --output=results/bench/gpm.json"),
    ("dpsgd", "dpsgd", {},
     "tfdp-bench dpsgd --output=results/bench/dpsgd.json"),
    ("export", "export", {},
     "tfdp-bench export --output=results/bench/export.json"),
    ("stobatch", "stobatch", {},
     "tfdp-bench stobatch --output=results/bench/stobatch.json"),
    ("evaluate", "evaluate", {},
     "tfdp-bench evaluate --output=results/bench/evaluate.json"),
    ("tf_options", "tf_options", {},
     "tfdp-bench tf_options --output=results/bench/tf_options.json"),
    # CIFAR-10's residual network: 3,840 images (15 steps a round; TF Privacy's step takes
    # seconds). MNIST's steps take tens of milliseconds: more of them per round (the default
    # 12,800 images, 50 steps) and more rounds, so that one round's noise moves its median less.
    ("keras_fit", "keras_fit", {"models": ["cifar10"], "num_train": 3840, "rounds": 3},
     "tfdp-bench keras_fit --keras_bench_models=cifar10 --keras_bench_num_train=3840 "
     "--keras_bench_rounds=3 --output=results/bench/keras_fit.json"),
    ("keras_fit_mnist", "keras_fit", {"models": ["mnist"], "rounds": 5},
     "tfdp-bench keras_fit --keras_bench_models=mnist --keras_bench_rounds=5 "
     "--output=results/bench/keras_fit_mnist.json"),
    ("allocator", "allocator", {},
     "tfdp-bench allocator --output=results/bench/allocator.json"),
    ("onednn", "onednn", {},
     "tfdp-bench onednn --output=results/bench/onednn.json"),
)
PLOT = "dpsgd.png"
# Whether a benchmark's ratio must stay below (time ratios) or above (throughput) its target.
DIRECTION = {"layers": "<=", "layers_mnist": "<=", "layers_fused": "<=",
             "layers_mnist_fused": "<=", "gpm": "<=", "dpsgd": "<=",
             "certify": ">=", "certify_smoothing": ">=", "export": ">=", "stobatch": "<=", "evaluate": ">=",
             "tf_options": "<=", "keras_fit": "<=", "keras_fit_mnist": "<=", "allocator": "<=",
             "allocator_adlm": "<=", "onednn": "<="}


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def _machine(result: dict) -> str:
    m = result.get("host") or result.get("machine")
    if isinstance(m, dict):
        parts = [m.get("cpu_model") or m.get("processor") or m.get("machine"),
                 f"{m.get('cpu_count')} logical CPUs" if m.get("cpu_count") else None,
                 m.get("platform")]
        text = ", ".join(p for p in parts if p)
    else:
        text = ", ".join(p for p in (
            result.get("machine"),
            f"{result['cpu_count']} logical CPUs" if result.get("cpu_count") else None) if p)
    if result.get("loadavg_before"):
        text += (f"; load average {_fmt(result['loadavg_before'][0])} before, "
                 f"{_fmt(result['loadavg_after'][0])} after")
    return text or "not recorded"


def load_results(results_dir: str) -> dict[str, dict]:
    """All `*.json` result files of `results_dir`, by file stem (sorted)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(results_dir, "*.json"))):
        with open(path, encoding="utf-8") as f:
            out[os.path.splitext(os.path.basename(path))[0]] = json.load(f)
    return out


def _order(results: dict) -> list[str]:
    known = [stem for stem, *_ in RUNS if stem in results]
    return known + sorted(s for s in results if s not in known)


def _dpsgd_section(result: dict, results_dir: str) -> list[str]:
    lines = ["", "### DP-SGD against the non-private step and the peers", ""]
    cfg = result.get("config", {})
    lines.append(f"Batch {cfg.get('batch_size')}, clip C = {cfg.get('l2_clip')}, noise "
                 f"multiplier {cfg.get('noise_multiplier')}, {cfg.get('rounds')} interleaved "
                 f"rounds of {cfg.get('steps')} steps after {cfg.get('warmup')} warm-up "
                 "steps; each system in its own process. Ratio = median over rounds of "
                 "(system ms/step) / (non-private ms/step in the same round).")
    paths = result.get("measured_paths")
    if paths:
        lines += ["", "Path of each system (`path` column): "
                  + "; ".join(f"`{k}` = {v}" for k, v in paths.items())
                  + f". tfdp-train's runs use the first {cfg.get('num_train')} training "
                  "examples (Poisson rate batch / that number) and warm up for at least one "
                  "epoch, which traces the padded lots' bucket graphs once. The headline ratio "
                  "is tfdp-dpsgd-auto (tfdp-train's default DP-SGD) over nonprivate, both on "
                  "the train path; `static-*` rows are the same steps traced for one static "
                  "batch shape and fed one batch, shown for comparison only. A round's ms/step "
                  "is the median of its steps' times when the file has `mean_ms_per_round` "
                  "(the rounds' means are there too)."]
    by_model = result.get("ratio_by_model") or {}
    targets = result.get("target_by_model") or {}
    if by_model:
        lines += ["", "Headline per model (train path): " + ", ".join(
            f"{m} {_fmt(v)} (target <= {_fmt(targets.get(m))})" for m, v in by_model.items())
            + "."]
    for model, res in result.get("models", {}).items():
        with_path = any("measured_path" in s for s in res.get("systems", {}).values())
        lines += ["", f"**{model}** ({res.get('data')}, small_cnn)", ""]
        if with_path:
            lines += ["| system | path | ms/step median [min, max] | ratio to non-private "
                      "median [min, max] | threads |", "|---|---|---|---|---|"]
        else:
            lines += ["| system | ms/step median [min, max] | ratio to non-private median "
                      "[min, max] | threads |", "|---|---|---|---|"]
        for system, s in res.get("systems", {}).items():
            ms, ratio, setup = s["ms_per_step"], s["ratio_to_nonprivate"], s.get("setup", {})
            threads = ", ".join(f"{k}={setup[k]}" for k in (
                "intra_op_threads", "inter_op_threads", "torch_threads", "omp_num_threads",
                "omp_wait_policy")
                if k in setup)
            path = f" {s.get('measured_path', 'not recorded')} |" if with_path else ""
            lines.append(f"| {system} |{path} {_fmt(ms['median'])} [{_fmt(ms['min'])}, "
                         f"{_fmt(ms['max'])}] | {_fmt(ratio['median'])} "
                         f"[{_fmt(ratio['min'])}, {_fmt(ratio['max'])}] | {threads} |")
        for system, why in res.get("skipped", {}).items():
            lines.append(f"| {system} | skipped: {why} | | |" + (" |" if with_path else ""))
    if os.path.exists(os.path.join(results_dir, PLOT)):
        lines += ["", f"![ms/step per system](results/bench/{PLOT})"]
    return lines


def _allocator_section(result: dict) -> list[str]:
    """Per case: seconds per step under each setting (median over rounds) and the ratio."""
    variants = result.get("variants", ["tfdp", "glibc"])
    heads = {"tfdp": "tfdp", "glibc": "glibc default", "eigen": "TensorFlow's own kernels"}
    lines = ["", "| case | " + " | ".join(f"{heads.get(v, v)} (s/step)" for v in variants)
             + " | ratio | command |", "|---|" + "---|" * len(variants) + "---|---|"]
    for case, v in result.get("cases", {}).items():
        t = v.get("seconds_per_step", {})
        med = {k: statistics.median(x) if x else None for k, x in t.items()}
        lines.append(f"| `{case}` | " + " | ".join(_fmt(med.get(n)) for n in variants)
                     + f" | {_fmt(v.get('ratio'))} | `{v.get('command', '')}` |")
    return lines


def _keras_fit_section(result: dict) -> list[str]:
    """Per model and system: ms/step, ratio to the non-private fit step, a peer's (TF Privacy,
    Opacus) step over tfdp's, Opacus' over PyTorch's non-private step (medians over rounds,
    [min, max])."""
    lines = ["", "| model | system | ms/step | ratio to nonprivate | peer / tfdp "
                 "| Opacus / PyTorch non-private |",
             "|---|---|---|---|---|---|"]

    def cell(summary):
        if not summary:
            return ""
        return (f"{_fmt(summary['median'])} [{_fmt(summary['min'])}, "
                f"{_fmt(summary['max'])}]")

    for model, res in result.get("models", {}).items():
        for system, v in res.get("systems", {}).items():
            lines.append(f"| {model} | {system} | {cell(v.get('ms_per_step'))} | "
                         f"{cell(v.get('ratio_to_nonprivate'))} | "
                         f"{cell(v.get('speedup_of_tfdp'))} | "
                         f"{cell(v.get('ratio_to_torch_nonprivate'))} |")
        for system, why in res.get("skipped", {}).items():
            lines.append(f"| {model} | {system} | skipped: {why} | | | |")
    lines += ["", f"Load average before / after: {result.get('loadavg_before')} / "
                  f"{result.get('loadavg_after')}."]
    for model, v in result.get("verdict_by_model", {}).items():
        lines.append(f"- {model}: {v['reason']}.")
    # A system whose environment could not read the images trains on uniform noise of the
    # same shape (keras_fit_worker.load_data): its step time stands, its data is said here.
    for model, res in result.get("models", {}).items():
        for system, v in res.get("systems", {}).items():
            data = v.get("setup", {}).get("data")
            if data and data != model:
                lines.append(f"- {model}: {system} trained on {data}, not {model} images (its "
                             "environment could not read them); same shapes, so its step time "
                             "stands.")
    return lines


def render(results_dir: str = "results/bench") -> str:
    """The BENCHMARKS.md text for the result files in `results_dir`."""
    results = load_results(results_dir)
    commands = {stem: cmd for stem, _, _, cmd in RUNS}
    lines = [
        "# Benchmarks",
        "",
        "Generated by `tfdp-bench all --report` (re-render from the result files with "
        "`tfdp-bench report`); do not edit by hand. Every figure is a ratio of two timings "
        "taken in the same run on the same machine, never an absolute target; the raw "
        "timings, per-repetition values and settings are in the result file.",
        "",
        "The `measured path` column says what each benchmark times (design principle 9): "
        "`train` = tfdp-train's own run (its batches, input pipeline and traced step), "
        "`evaluate` = tfdp-evaluate's evaluation of a loaded model, "
        "`export` = the exported SavedModel, `component` = one library piece called directly "
        "(labelled as such, not a user's end-to-end path); `not recorded` = a result file "
        "written before the field existed.",
        "",
        "| benchmark | ratio | target | met | candidate | reference | measured path "
        "| result file |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for stem, r in results.items():  # judged by the reference-spread rule, old files too
        if r.get("benchmark") == "keras_fit":
            results[stem] = keras_fit.with_verdicts(r)
    order = _order(results)
    for stem in order:
        r = results[stem]
        lines.append(
            f"| {stem} | {_fmt(r.get('ratio'))} | {DIRECTION.get(stem, '')} "
            f"{_fmt(r.get('target'))} | "
            f"{_fmt(r.get('passed', r.get('meets_target')))} | {r.get('candidate', '')} | "
            f"{r.get('reference', '')} | {r.get('measured_path', 'not recorded')} | "
            f"[results/bench/{stem}.json](results/bench/{stem}.json) |")
    lines += ["", "## Runs", ""]
    for stem in order:
        r = results[stem]
        lines += [f"### {stem}", "",
                  f"- command: `{r.get('command') or commands.get(stem, 'not recorded')}`",
                  f"- date: {r.get('date', 'not recorded')}",
                  f"- machine: {_machine(r)}",
                  f"- ratio {_fmt(r.get('ratio'))} (target {DIRECTION.get(stem, '')} "
                  f"{_fmt(r.get('target'))})",
                  f"- measured path: {r.get('measured_path', 'not recorded')}"
                  + (f" ({r['measured_path_description']})"
                     if r.get("measured_path_description") else "")]
        if stem == "dpsgd":
            lines += _dpsgd_section(r, results_dir)
        if r.get("benchmark") == "keras_fit":
            lines += _keras_fit_section(r)
        if r.get("benchmark") in ("allocator", "onednn"):
            lines += _allocator_section(r)
        lines.append("")
    return "\n".join(lines)


def plot_dpsgd(result: dict, path: str) -> None:
    """Bar chart of ms/step (median, min-max whiskers) per system and model."""
    # lazy: matplotlib only when a figure is drawn
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    # lazy: matplotlib only when a figure is drawn
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    models = list(result.get("models", {}))
    fig, axes = plt.subplots(1, max(len(models), 1), figsize=(6 * max(len(models), 1), 4))
    axes = axes if hasattr(axes, "__len__") else [axes]
    for ax, model in zip(axes, models):
        systems = result["models"][model]["systems"]
        names = list(systems)
        med = [systems[s]["ms_per_step"]["median"] for s in names]
        low = [m - systems[s]["ms_per_step"]["min"] for m, s in zip(med, names)]
        high = [systems[s]["ms_per_step"]["max"] - m for m, s in zip(med, names)]
        ax.bar(range(len(names)), med, yerr=[low, high], capsize=3)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("ms / step (median, min-max)")
        ax.set_title(f"{model}: batch {result.get('config', {}).get('batch_size')}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def add_context(result: dict, command: str, loadavg_before: list) -> dict:
    """Adds what a result file records besides the numbers: the command, the UTC date, the
    load average before and after, and the machine (kept where the benchmark set them)."""
    result["command"] = command
    result.setdefault("date", datetime.datetime.now(datetime.timezone.utc)
                      .strftime("%Y-%m-%d %H:%M UTC"))
    result.setdefault("loadavg_before", list(loadavg_before))
    result.setdefault("loadavg_after", list(os.getloadavg()))
    result.setdefault("host", machine())
    return result


def run_all(results_dir: str, only: Optional[list] = None,
            base_overrides: Optional[dict] = None) -> list[str]:
    """Runs every benchmark of RUNS (or `only` stems), writing results_dir/<stem>.json.

    Args:
      results_dir: directory of the result files.
      only: result stems to run (None: all).
      base_overrides: benchmark name -> `run` keyword values (e.g. the parsed flags) that
        each RUNS entry's own overrides take precedence over.

    Returns:
      The written paths.
    """

    os.makedirs(results_dir, exist_ok=True)
    written = []
    for stem, name, overrides, command in RUNS:
        if only and stem not in only:
            continue
        before = list(os.getloadavg())
        kwargs = {**(base_overrides or {}).get(name, {}), **overrides}
        result = importlib.import_module(BENCHMARKS[name]).run(**kwargs)
        add_context(result, command, before)
        path = os.path.join(results_dir, f"{stem}.json")
        rundir.atomic_write_bytes(path, (json.dumps(result, indent=2, sort_keys=True,
                                                     default=float) + "\n").encode("utf-8"))
        written.append(path)
    return written


def write_report(results_dir: str, report_path: str) -> str:
    """Writes the plot (if there is a DP-SGD result) and BENCHMARKS.md; returns the text.

    Raises:
      ValueError: naming --results_dir when it holds no result file (nothing is written).
    """
    if not glob.glob(os.path.join(results_dir, "*.json")):
        raise ValueError(f"--results_dir: no benchmark result files (*.json) in "
                         f"{results_dir!r}; run `tfdp-bench all` first, or render the "
                         "committed ones with --results_dir=results/bench "
                         "--report_file=BENCHMARKS.md")
    dpsgd = os.path.join(results_dir, "dpsgd.json")
    if os.path.exists(dpsgd):
        with open(dpsgd, encoding="utf-8") as f:
            plot_dpsgd(json.load(f), os.path.join(results_dir, PLOT))
    text = render(results_dir)
    folder = os.path.dirname(os.path.abspath(report_path))
    os.makedirs(folder, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=folder, delete=False,
                                     suffix=".tmp") as f:
        f.write(text)
    os.replace(f.name, report_path)  # atomic: a reader sees the old or the new file
    return text
