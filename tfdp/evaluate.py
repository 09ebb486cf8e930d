"""Evaluation of a trained run: accuracy clean and under attack, certified accuracy, records.

Definitions (the HGM and StoBatch papers' metrics):

    conventional accuracy = (1/|test|) sum_i isCorrect(x_i)
    certified accuracy    = (1/|test|) sum_i [isCorrect(x_i) and isRobust(x_i)],
    isRobust(x_i)         = radius(x_i) >= mu_a,

with x_i the adversarial version of test example i crafted at size mu_a. Adversarial
examples are crafted against the noise-free network (as in both papers' code releases),
or, with `eot_draws > 1`, against the noisy network with gradients averaged over noise
draws. When certifying, the prediction is the Monte-Carlo prediction of the noisy network
(argmax of the counts for Clopper-Pearson, of the mean softmax otherwise); otherwise it is
one forward pass of the noise-free network. A run whose `config.json` has
`"certification": null` gets `certified_accuracy: null` and a note saying why.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any, Callable, Mapping, Optional

from absl import logging

from tfdp import clopper_pearson, export, run_model, rundir
from tfdp import kernels
from tfdp.train import report
from tfdp import data as data_lib
# The evaluation's parts (issue 42); their names stay importable from here.
from tfdp.eval_arrays import (binomial_ci95, evaluate_arrays, proportion,  # noqa: F401
                              size_key)
from tfdp.eval_checks import (ATTACK_NORMS, check_certificate_norm,  # noqa: F401
                              validate_options)
from tfdp.eval_options import ATTACK_PRESETS, EvalOptions, apply_attack_preset  # noqa: F401
from tfdp.eval_report import (DEFAULT_CERTIFY_EXAMPLES, TSV_COLUMNS,  # noqa: F401
                              certified_key, default_num_examples, summary_lines, work_plan,
                              write_certificates)

PLOT_FILE = "accuracy_vs_attack_size.png"

# A run's model and its noise-free / noisy / score functions live in tfdp.run_model, below
# this module and tfdp.export (both use them); the names stay importable from here.
load_run = run_model.load_run
model_functions = run_model.model_functions


def _plot_title(path: str, summary: Mapping[str, Any], n: Optional[int]) -> str:
    """Method, data, sound epsilon (the run's ledger.json), N and the certificates' soundness."""
    parts = [f"{summary.get('method', '?')} on {summary.get('dataset', '?')}"]
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(path)), "ledger.json"),
                  encoding="utf-8") as f:
            eps = json.load(f).get("epsilon")
        parts.append(f"sound eps {report.round_up(eps)}")
    except (OSError, ValueError):
        pass
    if n:
        parts.append(f"N = {n}")
    cert = summary.get("certification")
    if isinstance(cert, Mapping):
        sound = cert.get("sound", cert.get("sensitivity_sound", False))
        parts.append("certificates sound" if sound else "certificates CLAIMED (not sound)")
    return ", ".join(parts)


def plot_accuracy(path: str, summary: Mapping[str, Any]) -> str:
    """PNG of accuracy (solid) and certified accuracy (dashed) against attack size.

    The x axis is the attack size as a fraction of the pixel range (comparable across
    methods whatever their value range); the bands are 95% Clopper-Pearson intervals over the
    N evaluated examples; the title names the method, data, sound epsilon, N and whether the
    certificates are sound.
    """
    # lazy: matplotlib only when a figure is drawn
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    # lazy: matplotlib only when a figure is drawn
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    n = summary.get("num_examples")
    n = n if isinstance(n, int) and n > 0 else None
    lo, hi = (float(v) for v in summary["size_range"])

    def band(ax, xs, ys, color):
        if n is None:
            return
        bounds = [clopper_pearson.interval(int(round(y * n)), n, 1.0 - 0.95) for y in ys]
        ax.fill_between(xs, [b[0] for b in bounds], [b[1] for b in bounds], color=color,
                        alpha=0.15, linewidth=0)

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for i, (name, entry) in enumerate(sorted(summary["attacks"].items())):
        sizes = sorted(entry, key=float)
        xs = [0.0] + [float(s) / (hi - lo) for s in sizes]
        ys = [summary["clean_accuracy"]] + [entry[s]["accuracy"] for s in sizes]
        color = f"C{i}"
        ax.plot(xs, ys, "o-", color=color, label=f"{name}")
        band(ax, xs, ys, color)
        key = certified_key(summary)
        cert = [entry[s].get(key + "_on_attacked_inputs") for s in sizes]
        if all(c is not None for c in cert) and cert:
            label = "certified" if key == "certified_accuracy" else "CLAIMED certified"
            cx = [float(s) / (hi - lo) for s in sizes]
            ax.plot(cx, cert, "s--", color=color, label=f"{name} ({label}, attacked inputs)")
            band(ax, cx, cert, color)
    clean = summary.get("clean_" + certified_key(summary)) or {}
    if clean:
        sizes = sorted(clean, key=float)
        label = ("certified" if certified_key(summary) == "certified_accuracy"
                 else "CLAIMED certified")
        cx = [float(s) / (hi - lo) for s in sizes]
        cy = [clean[s]["value"] for s in sizes]
        ax.plot(cx, cy, "k^:", label=f"clean {label} accuracy")
        band(ax, cx, cy, "k")
    norm = {"l2": "l2", "linf": "l_inf"}.get(summary.get("attack_norm", "linf"), "l_inf")
    ax.set_xlabel(f"attack size / radius ({norm}, as a fraction of the pixel range)")
    ax.set_ylabel("accuracy" + (" (95% CI bands)" if n else ""))
    ax.set_ylim(0.0, 1.02)
    ax.set_title(_plot_title(path, summary, n), fontsize=9)
    ax.grid(alpha=0.3)
    if summary["attacks"]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def evaluate_run(model_dir: str, options: EvalOptions,
                 say: Optional[Callable[[str], None]] = None) -> dict:
    """Evaluates a run directory; writes evaluation.json, certificates.tsv and a PNG.

    Before any work, `say` gets the planned work (`work_plan`); then a progress line with
    the rate and the ETA after the first batch and at least every 30 s.

    Args:
        model_dir: a run directory left by tfdp-train (model.keras + config.json).
        options: what to evaluate; with `certify` and no `num_examples`, the run's num_test
            examples (at most DEFAULT_CERTIFY_EXAMPLES) are evaluated.
        say: where the plan and progress lines go (default: absl logging.info).

    Returns:
        the summary written to evaluation.json.

    Raises:
        ValueError: on bad options or an incomplete run directory, before any work.
    """
    opts = validate_options(options)
    model, config = load_run(model_dir)
    check_certificate_norm(opts, config.get("certification"))
    rd = rundir.RunDir(model_dir)
    value_range = tuple(config.get("value_range") or (-1.0, 1.0))
    load_kwargs = dict(config.get("data_options") or {})  # e.g. Tiny ImageNet's num_classes
    num_examples, source = default_num_examples(opts, config)
    if num_examples is not None:
        load_kwargs["num_examples"] = num_examples
        opts = dataclasses.replace(opts, num_examples=num_examples)
    x, y = data_lib.load(config["dataset"], "test",
                         data_dir=opts.data_dir or config.get("data_dir"),
                         value_range=value_range, **load_kwargs)
    say = say or (lambda text: logging.info("%s", text))
    say(work_plan(len(x), opts, config.get("certification"), source))
    start = time.perf_counter()
    last = [None]

    def progress(done: int, total: int) -> None:
        now = time.perf_counter()
        if last[0] is None or now - last[0] >= 30.0 or done == total:
            last[0] = now
            rate = done / max(now - start, 1e-9)
            eta = (total - done) / max(rate, 1e-9)
            say(f"evaluated {done}/{total} example-jobs ({rate:.2f}/s, ETA "
                f"{report.seconds_text(eta)}; attacked jobs run slower than the clean one)")


    with kernels.noise_kernel_flag(opts.noise_kernel, flag="noise_kernel"):
        summary, records = evaluate_arrays(model, x, y, value_range=value_range,
                                           certification=config.get("certification"),
                                           options=opts, progress=progress)
    summary["num_examples_source"] = source
    summary["noise_kernel"] = opts.noise_kernel
    if opts.noise_kernel_fallback:
        summary["noise_kernel_fallback"] = opts.noise_kernel_fallback
    summary["model_dir"] = rd.path
    summary["method"] = config.get("method")
    summary["dataset"] = config.get("dataset")
    summary["seconds"] = time.perf_counter() - start
    write_certificates(rd.file(rundir.CERTIFICATES_FILE), records,
                       claimed=certified_key(summary) != "certified_accuracy")
    summary["plot"] = PLOT_FILE
    plot_accuracy(rd.file(PLOT_FILE), summary)
    rd.write_json(rundir.EVALUATION_FILE, summary)
    return summary


def evaluate_saved_model(saved_model: str, options: EvalOptions,
                         output_dir: Optional[str] = None) -> dict:
    """Evaluates a SavedModel written by tfdp-export, e.g. one received from someone else.

    The data set and value range come from the export's model card. Attacks differentiate
    through the exported `serve` endpoint (or `noisy_predict` with `eot_draws > 1`);
    certification calls the exported `certify` signature, whose bound is fixed at export.

    Args:
        saved_model: the export directory.
        options: what to evaluate.
        output_dir: where evaluation.json, certificates.tsv and the plot go (default:
            SAVED_MODEL-evaluation beside the export; the export itself is never written).

    Returns:
        the summary written to evaluation.json.

    Raises:
        ValueError: on bad options, a directory without an export, or data that does not
            fit the export's input shape; before any work.
    """
    opts = validate_options(options)
    model = export.ExportedModel(saved_model)
    check_certificate_norm(opts, model.certification)
    card = model.card
    data_card = card.get("data") or {}
    if not data_card.get("dataset"):
        raise ValueError(f"saved_model: the model card of {model.path} names no dataset")
    value_range = tuple(data_card.get("value_range") or (-1.0, 1.0))
    out_path = os.path.abspath(output_dir) if output_dir else model.path + "-evaluation"
    if os.path.commonpath([out_path, model.path]) == model.path:
        raise ValueError("model_dir: the evaluation output must not go inside the export")
    load_kwargs = {}
    if opts.num_examples is not None:
        load_kwargs["num_examples"] = int(opts.num_examples)
    x, y = data_lib.load(data_card["dataset"], "test", data_dir=opts.data_dir,
                         value_range=value_range, **load_kwargs)
    want_shape = list(data_card.get("input_shape") or [])
    if want_shape and list(x.shape[1:]) != [int(d) for d in want_shape]:
        raise ValueError(f"data_dir: test examples of shape {list(x.shape[1:])} do not fit "
                         f"the export's input shape {want_shape}")
    start = time.perf_counter()
    summary, records = evaluate_arrays(model, x, y, value_range=value_range,
                                       certification=model.certification, options=opts)
    rd = rundir.RunDir(out_path, create=True)
    summary["saved_model"] = model.path
    summary["method"] = (card.get("run") or {}).get("method")
    summary["dataset"] = data_card["dataset"]
    summary["seconds"] = time.perf_counter() - start
    write_certificates(rd.file(rundir.CERTIFICATES_FILE), records,
                       claimed=certified_key(summary) != "certified_accuracy")
    summary["plot"] = PLOT_FILE
    plot_accuracy(rd.file(PLOT_FILE), summary)
    rd.write_json(rundir.EVALUATION_FILE, summary)
    summary["output_dir"] = rd.path
    return summary
