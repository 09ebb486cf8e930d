"""tfdp-audit: sampler conformance, empirical DP audits, training audits, GPM experiments.

Usage: tfdp-audit SUBCOMMAND [flags], SUBCOMMAND one of:
  samplers       black-box conformance suite on tfdp's samplers and on controls
  dp             empirical DP audit of every shipped mechanism (and GPM with/without key)
  training       one-run canary audit of a trained model: any tfdp-train method and flags
                 (Steinke, Nasr, Jagielski 2023); `tfdp-audit training --help` lists the
                 training flags too
  gpm-hist       GPM DP-hist experiment (GPM Figure 5, Table 4)
  gpm-dpsgd      GPM on DP-SGD gradients (MNIST LeNet-5: Figure 6; CIFAR-10: Table 2)
  gpm-bounds     GPM privacy bounds vs delta (GPM Figure 4)
  gpm-precision  float64 vs float32 key attack at d = 1e6 (docs/gpm.md)
Results (CSV, PNG, text; audit.json for training) go to --audit_output_dir (default
runs/audit; the committed results/ files are rewritten only when a directory there is named
explicitly).
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
import warnings
from typing import Any

from absl import app, flags, logging
import numpy as np

from tfdp.apps import cli
import dataclasses
from tfdp import rundir

_BEFORE = set(flags.FLAGS)
SUBCOMMANDS = ("samplers", "dp", "training", "gpm-hist", "gpm-dpsgd", "gpm-bounds",
               "gpm-precision")

_OUT = flags.DEFINE_string("audit_output_dir", "runs/audit",
                           "Directory for CSV / PNG / text (committed results name theirs).")
_SEED = flags.DEFINE_integer("audit_seed", 0, "Seed of every random draw.")
_TRIALS = flags.DEFINE_integer("audit_trials", None,
                               "Games per cell (default: dp 20000, gpm-hist 1000, "
                               "gpm-dpsgd 100, gpm-precision 40).")
_THRESH = flags.DEFINE_integer("audit_threshold_trials", 200000,
                               "dp: runs per input of the tail-threshold audit (0: skip it).")
_GDP = flags.DEFINE_integer("audit_gdp_trials", 200000,
                            "dp: runs per input of the Gaussian-DP (mu) audit of the Gaussian "
                            "mechanisms (0: skip it).")
_N = flags.DEFINE_integer("audit_samples", 20000, "samplers: samples per sampler call.")
_CANARIES = flags.DEFINE_integer("audit_num_canaries", 1000,
                                 "training: canaries m (training images with a random wrong "
                                 "label), each included with probability 1/2.")
_KPLUS = flags.DEFINE_integer("audit_k_plus", None,
                              "training: guesses 'included' for the k+ highest-scoring "
                              "canaries (default m // 10).")
_KMINUS = flags.DEFINE_integer("audit_k_minus", None,
                               "training: guesses 'excluded' for the k- lowest-scoring "
                               "canaries (default m // 10).")
_CANARY = flags.DEFINE_enum("audit_canary", "mislabelled", ["mislabelled", "ood", "dirac"],
                            "training: mislabelled (training images taken out of the training "
                            "set, relabelled to a random wrong class), ood (uniform-noise "
                            "images in the data range with random labels), both black-box "
                            "(scored by the model's loss); or dirac (white-box, dpsgd with "
                            "Poisson lots only: gradient canaries C e_j, scored from every "
                            "noisy gradient sum).")
_CONF = flags.DEFINE_float("audit_confidence", 0.95,
                           "training: confidence of the eps lower bound.")
_ADELTA = flags.DEFINE_float("audit_delta", None,
                             "training: delta of the lower bound (default: the run's claimed "
                             "delta).")
_DATA_DIR = flags.DEFINE_string("audit_data_dir", None,
                                "Root with mnist/ and cifar10/ (default: $TFDP_DATA_DIR).")
_DS = flags.DEFINE_list("gpm_ds", ["256", "4096", "65536"], "gpm-hist: dimensions d.")
_EPS = flags.DEFINE_list("gpm_epsilons", ["0.125", "0.25", "0.5", "1"],
                         "Claimed epsilon* of the imitated Gaussian mechanism.")
_BETAS = flags.DEFINE_list("gpm_betas", None,
                           "beta values (default: gpm-hist 1e-5..1e-1, gpm-dpsgd 1e-5..1e-3).")
_DELTA = flags.DEFINE_float("gpm_delta", 1e-10, "Claimed delta* (the GPM experiments' value).")
_FRESH = flags.DEFINE_boolean("gpm_fresh_data", True,
                              "gpm-hist: a new database per trial (else one per cell).")
_HIST_INPUTS = flags.DEFINE_list("gpm_hist_inputs", None,
                                 "gpm-hist: instead of running, merge these gpm_hist.csv files "
                                 "(e.g. runs with different settings per d) and plot them.")
_FIXED_KEY = flags.DEFINE_boolean("gpm_fixed_key", False,
                                  "gpm-hist: one key per cell instead of one per trial.")
_DG = flags.DEFINE_enum("gpm_dg_method", "cks", ["cks", "table"], "Discrete Gaussian sampler.")
_MODEL = flags.DEFINE_enum("gpm_model", "lenet5",
                           ["lenet5", "vgg19_bn", "resnet50", "mobilenetv2"],
                           "gpm-dpsgd: model (lenet5 on MNIST, the others on CIFAR-10).")
_PHASES = flags.DEFINE_list("gpm_phases", ["not_converged", "converged"],
                            "gpm-dpsgd: phases (random init / pretrained).")
_CLIPS = flags.DEFINE_list("gpm_clips", ["4", "8"], "gpm-dpsgd: clip norms C.")
_BATCH = flags.DEFINE_integer("gpm_batch_size", 128, "gpm-dpsgd: DP-SGD batch size n.")
_EPOCHS = flags.DEFINE_integer("gpm_pretrain_epochs", 20,
                               "gpm-dpsgd: Adam epochs for the converged phase.")
_NUM_TRAIN = flags.DEFINE_integer("gpm_num_train", None,
                                  "gpm-dpsgd: use only this many training (and test) examples.")
_WEIGHTS = flags.DEFINE_string("gpm_weights", None,
                               "gpm-dpsgd: load converged weights from this .weights.h5 "
                               "instead of pretraining.")
_SAVE_WEIGHTS = flags.DEFINE_boolean("gpm_save_weights", True,
                                     "gpm-dpsgd: save pretrained weights in the output dir.")

cli.define_verbose()
OWN_FLAGS = cli.new_flags(_BEFORE)


def _write_csv(path: str, rows: list[dict]) -> None:
    if not rows:
        return
    keys = list(dict.fromkeys(k for r in rows for k in r))  # union, first-seen order
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in keys})
    logging.info("wrote %s", path)


def _plt():
    # lazy: matplotlib only when a figure is drawn
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    # lazy: matplotlib only when a figure is drawn
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    return plt


def _floats(values: list[str]) -> list[float]:
    return [float(v) for v in values]


def _cmd_samplers(out: str) -> None:
    # lazy: loads tensorflow; importing tfdp.apps.audit does not
    from tfdp import mechanisms  # pylint: disable=import-outside-toplevel
    # lazy: loads scipy; importing tfdp.apps.audit does not
    from tfdp.audit import samplers  # pylint: disable=import-outside-toplevel
    from tfdp.papers.gpm import pancake  # pylint: disable=import-outside-toplevel
    # lazy: loads tensorflow; importing tfdp.apps.audit does not
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    n, seed = _N.value, _SEED.value
    key256 = pancake.generate_key(256, rng=np.random.default_rng(seed + 11))
    key2 = pancake.generate_key(2, rng=np.random.default_rng(seed + 12))
    rng_fixed = 12345

    def tf_gauss(num, s):
        return tf.cast(mechanisms.tf_gaussian([num, 64], 2.0, seed=[s, 0], dtype=tf.float64),
                       tf.float64).numpy()

    def tf_lap(num, s):
        return tf.cast(mechanisms.tf_laplace([num, 64], 1.5, seed=[s, 0], dtype=tf.float64),
                       tf.float64).numpy()

    cases = [
        ("sample_gaussian d=256", "gaussian", 2.0, "pass",
         lambda num, s: mechanisms.sample_gaussian(2.0, (num, 256), rng=np.random.default_rng(s))),
        ("tf_gaussian d=64", "gaussian", 2.0, "pass", tf_gauss),
        ("sample_laplace d=64", "laplace", 1.5, "pass",
         lambda num, s: mechanisms.sample_laplace(1.5, (num, 64), rng=np.random.default_rng(s))),
        ("tf_laplace d=64", "laplace", 1.5, "pass", tf_lap),
        ("GPM d=256 gamma=32 beta=1e-4 (unknown key)", "gaussian", 2.0, "pass (undetectable)",
         lambda num, s: pancake.pancake_noise(key256, 2.0, 1e-4, 32.0, num,
                                              rng=np.random.default_rng(s))),
        ("control: Gaussian sigma x 0.9", "gaussian", 2.0, "fail",
         lambda num, s: 1.8 * np.random.default_rng(s).standard_normal((num, 256))),
        ("control: GPM d=2 beta=0.3 gamma=5", "gaussian", 1.0, "fail",
         lambda num, s: pancake.pancake_noise(key2, 1.0, 0.3, 5.0, num,
                                              rng=np.random.default_rng(s))),
        ("control: repeated seed", "gaussian", 2.0, "fail",
         lambda num, s: 2.0 * np.random.default_rng(rng_fixed).standard_normal((num, 64))),
    ]
    rows, texts = [], []
    for name, fam, scale, expect, sampler in cases:
        t0 = time.time()
        size = 10000 if "d=2 " in name else n
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pancake.GPMResearchWarning)
            rep = samplers.conformance_suite(sampler, family=fam, scale=scale, n=size,
                                             seed=seed)
        groups = rep.groups()
        rows.append({"sampler": name, "family": fam, "n": size, "d": rep.d,
                     "expected": expect, "result": "PASS" if rep.passed else "FAIL",
                     "tests": len(rep.results), "rejected": len(rep.rejected),
                     "rejected_groups": ";".join(g for g, v in groups.items() if v["rejected"]),
                     "min_p": min(r.p_value for r in rep.results),
                     "seconds": round(time.time() - t0, 2)})
        texts.append(f"== {name} (expected: {expect})\n{rep.to_text()}\n")
        print(texts[-1])
    _write_csv(os.path.join(out, "samplers.csv"), rows)
    with open(os.path.join(out, "samplers.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(texts))


def _check_dp() -> None:
    if _GDP.value and _GDP.value < 100:
        raise app.UsageError(f"--audit_gdp_trials must be 0 or >= 100, got {_GDP.value}")
    if _THRESH.value and _THRESH.value < 200:
        raise app.UsageError(f"--audit_threshold_trials must be 0 or >= 200, got {_THRESH.value}")


def _cmd_dp(out: str) -> None:
    # lazy: loads tensorflow; importing tfdp.apps.audit does not
    from tfdp.audit import dp_suite  # pylint: disable=import-outside-toplevel

    trials = _TRIALS.value or 20000
    res = dp_suite.run_dp_suite(trials=trials, seed=_SEED.value,
                                threshold_trials=_THRESH.value, gdp_trials=_GDP.value,
                                progress=print)
    rows = [r.to_dict() for r in res]
    for r in rows:
        r.pop("disclaimer", None)
    _write_csv(os.path.join(out, "dp_audit.csv"), rows)
    print(res[0].disclaimer)


def _training_ks() -> tuple[int, int]:
    m = _CANARIES.value
    k_plus = m // 10 if _KPLUS.value is None else _KPLUS.value
    k_minus = m // 10 if _KMINUS.value is None else _KMINUS.value
    return k_plus, k_minus


_CANARY_TEXT = {
    "mislabelled": ("training images (taken out of the training set) relabelled to a "
                    "uniformly random wrong class",
                    "log-probability of the canary label under the trained model"),
    "ood": ("uniform-noise images in the data range with uniformly random labels",
            "log-probability of the canary label under the trained model"),
    "dirac": ("Dirac gradient canaries C e_j (one model coordinate each), joining each "
              "Poisson lot at the lots' rate when included",
              "sum over steps of the log-likelihood ratio of the released noisy gradient "
              "sum at the canary's coordinate (white-box: every step is observed)"),
}


def _check_training() -> Any:
    """Validates the audit and training flags before any work; returns the train RunSpec."""
    train_app = sys.modules.get("tfdp.apps.train")
    if train_app is None or "method" not in flags.FLAGS:
        raise app.UsageError("training: run it as `tfdp-audit training [flags]` (the training "
                             "flags are defined when the first argument is `training`)")
    m = _CANARIES.value
    if m < 2:
        raise app.UsageError(f"--audit_num_canaries must be >= 2, got {m}")
    k_plus, k_minus = _training_ks()
    if k_plus < 0 or k_minus < 0 or k_plus + k_minus < 1 or k_plus + k_minus > m:
        raise app.UsageError(f"--audit_k_plus/--audit_k_minus: need k+, k- >= 0 with "
                             f"1 <= k+ + k- <= {m}, got {k_plus}, {k_minus}")
    if not 0 < _CONF.value < 1:
        raise app.UsageError(f"--audit_confidence must be in (0, 1), got {_CONF.value}")
    if _ADELTA.value is not None and not 0 <= _ADELTA.value < 1:
        raise app.UsageError(f"--audit_delta must be in [0, 1), got {_ADELTA.value}")
    values, options, present = train_app.values_from_flags(flags.FLAGS)
    if values.get("resume"):
        raise app.UsageError("--resume: an audit trains one fresh run (the canaries are part of "
                             "its training set)")
    try:
        spec = train_app.resolve(values, options, present)
    except (ValueError, ImportError) as e:
        raise app.UsageError(str(e)) from None
    if _CANARY.value == "dirac":
        if spec.config.method != "dpsgd":
            raise app.UsageError(f"--audit_canary=dirac: white-box gradient canaries need "
                                 f"--method=dpsgd, got {spec.config.method}")
        if spec.config.options.get("dpsgd_sampling", "poisson") != "poisson":
            raise app.UsageError("--audit_canary=dirac: needs --dpsgd_sampling=poisson (the "
                                 "canaries join each lot like Poisson-sampled records)")
    return spec


def _blackbox_run(spec: Any, data: Any, rng: np.random.Generator) -> tuple:
    """Black-box run: canaries in the training data, one training run, log-prob scores.

    Returns:
      (canaries, training inputs with canaries, RunResult, scores).
    """
    # lazy: an app module defines absl flags when imported
    from tfdp.apps import train as train_app  # pylint: disable=import-outside-toplevel
    # lazy: loads scipy; importing tfdp.apps.audit does not
    from tfdp.audit import training  # pylint: disable=import-outside-toplevel
    # lazy: loads keras; importing tfdp.apps.audit does not
    from tfdp.train import loop  # pylint: disable=import-outside-toplevel

    cfg = spec.config
    try:
        if _CANARY.value == "ood":
            canaries, x_rest, y_rest = training.make_ood_canaries(
                data.x_train, data.y_train, data.num_classes, _CANARIES.value,
                cfg.value_range, rng)
        else:
            canaries, x_rest, y_rest = training.make_canaries(
                data.x_train, data.y_train, data.num_classes, _CANARIES.value, rng)
    except ValueError as e:
        raise app.UsageError(f"--audit_num_canaries: {e}") from None
    total = len(x_rest) + int(canaries.included.sum())
    allowed = None
    num_public = int(spec.method_cls(cfg).public_split_size(total))
    if num_public:
        # Keep the canaries out of the method's public split (data the method declares
        # public, outside its guarantee). The loop picks that split from the run key, the
        # same function as tfdp.train.loop.Run._split_public.
        if cfg.seed is None:
            raise app.UsageError(f"--seed: {cfg.method} holds out a public split; the audit "
                                 "needs --seed to keep the canaries in the private part")
        allowed = loop.public_split_indices(total, num_public, int(cfg.seed))[1]
    x, y, _ = training.insert_canaries(x_rest, y_rest, canaries, rng, allowed)
    logging.info("training %s with %d of %d canaries included (audit seed %d)", cfg.method,
                 int(canaries.included.sum()), len(canaries.included), _SEED.value)
    result = train_app.execute(spec, dataclasses.replace(data, x_train=x, y_train=y))
    scores = training.log_prob_scores(result.model, canaries.x, canaries.y)
    return canaries, x, result, scores


def _whitebox_run(spec: Any, data: Any, rng: np.random.Generator) -> tuple:
    """White-box DP-SGD run with Dirac gradient canaries (`tfdp.audit.whitebox`)."""
    # lazy: an app module defines absl flags when imported
    from tfdp.apps import train as train_app  # pylint: disable=import-outside-toplevel
    # lazy: loads scipy/tensorflow; importing tfdp.apps.audit does not
    from tfdp.audit import training, whitebox  # pylint: disable=import-outside-toplevel

    m = _CANARIES.value
    num_params = whitebox.count_parameters(spec.method_cls(spec.config), data.input_shape,
                                           data.num_classes)
    try:
        coords = whitebox.choose_coordinates(num_params, m, rng)
    except ValueError as e:
        raise app.UsageError(f"--audit_num_canaries: {e}") from None
    canaries = training.Canaries(np.zeros((m, 0), np.float32), np.zeros(m, np.int64),
                                 rng.random(m) < 0.5, coords)
    store: dict = {}
    spec = dataclasses.replace(spec, method_cls=whitebox.dirac_dpsgd_class(
        coords, canaries.included, store))
    logging.info("training dpsgd with %d of %d Dirac canaries included (audit seed %d)",
                 int(canaries.included.sum()), m, _SEED.value)
    result = train_app.execute(spec)
    return canaries, data.x_train, result, store["scores"].numpy()


def _cmd_training(out: str, spec: Any) -> None:
    # lazy: an app module defines absl flags when imported
    from tfdp.apps import train as train_app  # pylint: disable=import-outside-toplevel
    # lazy: loads scipy; importing tfdp.apps.audit does not
    from tfdp.audit import training  # pylint: disable=import-outside-toplevel

    cfg = spec.config
    data = train_app.load_data(spec)
    rng = np.random.default_rng(_SEED.value)
    run = _whitebox_run if _CANARY.value == "dirac" else _blackbox_run
    canaries, x, result, scores = run(spec, data, rng)
    claimed, sound, claim_delta = training.ledger_epsilons(result.ledger)
    delta = claim_delta if _ADELTA.value is None else _ADELTA.value
    k_plus, k_minus = _training_ks()
    res = training.audit_result(scores, canaries, k_plus=k_plus, k_minus=k_minus, delta=delta,
                                confidence=_CONF.value)
    report = {"method": cfg.method, "dataset": cfg.dataset,
              "epsilon_lower_bound": res.pop("epsilon_lower_bound"),
              "claimed_epsilon": training.json_epsilon(claimed),
              "sound_epsilon": training.json_epsilon(sound), **res,
              "claimed_delta": claim_delta, "audit_seed": _SEED.value,
              "canary_type": _CANARY.value,
              "canaries": _CANARY_TEXT[_CANARY.value][0],
              "score": _CANARY_TEXT[_CANARY.value][1],
              "bound": "Steinke, Nasr, Jagielski 2023, Theorem 3 (eps, delta with abstentions)",
              "num_train_with_canaries": int(len(x)),
              "test_accuracy": result.metrics.get("test_accuracy"),
              "model_dir": result.model_dir,
              "command": "tfdp-audit " + " ".join(a for a in sys.argv[1:])}
    path = os.path.join(out, "audit.json")
    rundir.write_json_atomic(path, report)
    print(f"{cfg.method}: eps lower bound {report['epsilon_lower_bound']:.3f} at delta "
          f"{delta:g} ({100 * _CONF.value:g}% confidence; {res['correct_guesses']} of "
          f"{res['guesses_made']} guesses correct, m = {res['num_canaries']} canaries); "
          f"claimed eps {claimed:g}, sound eps {sound:g}")
    if report["epsilon_lower_bound"] > sound:
        print("AUDIT FAILURE: the lower bound exceeds the sound epsilon")
    elif report["epsilon_lower_bound"] > claimed:
        print("the lower bound exceeds the claimed epsilon: the claim is refuted")
    logging.info("wrote %s", path)


def _read_hist_csv(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k, v in r.items():
            if k not in ("fresh_data", "fixed_key"):
                r[k] = float(v) if any(c in v for c in ".en") else int(v)
    return rows


def _plot_hist(rows: list[dict], path: str) -> None:
    plt = _plt()
    ds = sorted({int(r["d"]) for r in rows})
    eps = sorted({float(r["epsilon"]) for r in rows})
    fig, axes = plt.subplots(1, len(ds), figsize=(4.5 * len(ds), 3.6), squeeze=False)
    for ax, d in zip(axes[0], ds):
        for e in eps:
            sel = sorted((r for r in rows if int(r["d"]) == d and float(r["epsilon"]) == e),
                         key=lambda r: r["beta"])
            x = [r["beta"] for r in sel]
            line = ax.errorbar(x, [r["success_rate"] for r in sel],
                               yerr=[[r["success_rate"] - r["ci_low"] for r in sel],
                                     [r["ci_high"] - r["success_rate"] for r in sel]],
                               marker="o", capsize=2, label=f"eps*={e:g}")
            ax.plot(x, [r["oracle_exact"] for r in sel], ls="--", color=line[0].get_color())
        trials = sorted({int(r["trials"]) for r in rows if int(r["d"]) == d})
        ax.set_xscale("log")
        ax.set_xlabel("beta")
        ax.set_title(f"DP-hist d={d} ({'/'.join(map(str, trials))} trials; dashed: oracle)",
                     fontsize=9)
        ax.set_ylim(0.45, 1.02)
    axes[0][0].set_ylabel("key-holder attack success")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _cmd_gpm_hist(out: str) -> None:
    # lazy: loads scipy; importing tfdp.apps.audit does not
    from tfdp.papers.gpm import experiments as gpm  # pylint: disable=import-outside-toplevel

    if _HIST_INPUTS.value:
        rows = [r for p in _HIST_INPUTS.value for r in _read_hist_csv(p)]
        _write_csv(os.path.join(out, "gpm_hist.csv"), rows)
        _plot_hist(rows, os.path.join(out, "gpm_hist.png"))
        return
    trials = _TRIALS.value or 1000
    betas = _floats(_BETAS.value or ["1e-5", "1e-4", "1e-3", "1e-2", "1e-1"])
    ds, eps = [int(v) for v in _DS.value], _floats(_EPS.value)
    rows = []
    t0 = time.time()
    for i, (d, e, b) in enumerate((d, e, b) for d in ds for e in eps for b in betas):
        cell_seed = int(np.random.SeedSequence([_SEED.value, i]).generate_state(1)[0])
        r = gpm.hist_experiment(d, e, b, trials, cell_seed, delta=_DELTA.value,
                                fresh_data=_FRESH.value, fixed_key=_FIXED_KEY.value,
                                dg_method=_DG.value)
        r["seconds_total"] = round(time.time() - t0, 2)
        rows.append(r)
        print(f"d={d} eps*={e} beta={b:g}: success {r['success_rate']:.4f} "
              f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}] oracle {r['oracle_exact']:.4f}; "
              f"L2 GM {r['l2_error_gm']:.1f} GPM {r['l2_error_gpm']:.1f} "
              f"expected {r['l2_error_expected']:.1f}")
    _write_csv(os.path.join(out, "gpm_hist.csv"), rows)
    _plot_hist(rows, os.path.join(out, "gpm_hist.png"))


def _cmd_gpm_dpsgd(out: str) -> None:
    # lazy: loads keras; importing tfdp.apps.audit does not
    import keras  # pylint: disable=import-outside-toplevel
    from tfdp.papers.gpm import dpsgd as gpm_dpsgd  # pylint: disable=import-outside-toplevel

    trials = _TRIALS.value or 100
    betas = _floats(_BETAS.value or ["1e-5", "1e-4", "1e-3"])
    data_dir = _DATA_DIR.value or os.environ.get("TFDP_DATA_DIR")
    name = _MODEL.value
    x, y = gpm_dpsgd.load_task(name, "train", data_dir, _NUM_TRAIN.value)
    xt, yt = gpm_dpsgd.load_task(name, "test", data_dir, _NUM_TRAIN.value)
    rows = []
    for phase in _PHASES.value:
        if phase not in ("not_converged", "converged"):
            raise app.UsageError(f"--gpm_phases: unknown phase {phase!r}")
        keras.utils.set_random_seed(_SEED.value)
        model = gpm_dpsgd.build_model(name)
        if phase == "converged":
            if _WEIGHTS.value:
                model.load_weights(_WEIGHTS.value)
                acc = gpm_dpsgd.pretrain(model, x, y, xt, yt, epochs=0, seed=_SEED.value)
            else:
                t0 = time.time()
                acc = gpm_dpsgd.pretrain(model, x, y, xt, yt, epochs=_EPOCHS.value,
                                         seed=_SEED.value, augment=name != "lenet5")
                logging.info("pretrained %s for %d epochs in %.0fs: test acc %.4f", name,
                             _EPOCHS.value, time.time() - t0, acc)
                if _SAVE_WEIGHTS.value:
                    model.save_weights(os.path.join(out, f"{name}_pretrained.weights.h5"))
        else:
            acc = gpm_dpsgd.pretrain(model, x, y, xt, yt, epochs=0, seed=_SEED.value)
        # BN models: per-example gradients use the moving statistics (one example per
        # forward pass cannot give batch statistics); LeNet-5 has no BN.
        phase_rows = gpm_dpsgd.dpsgd_experiment(
            model, x, y, phase=phase, epsilons=_floats(_EPS.value), betas=betas,
            clips=_floats(_CLIPS.value), trials=trials, seed=_SEED.value,
            batch_size=_BATCH.value, delta=_DELTA.value, accuracy=acc,
            training=name == "lenet5", dg_method=_DG.value)
        for r in phase_rows:
            print(f"{name} {phase} acc={acc:.4f} C={r['clip_norm']:g} eps*={r['epsilon']:g} "
                  f"beta={r['beta']:g}: success {r['success_rate']:.2f} "
                  f"oracle {r['oracle_mean']:.3f} median||dq|| {r['median_dq_norm']:.3g}")
        rows += phase_rows
    _write_csv(os.path.join(out, f"gpm_dpsgd_{name}.csv"), rows)
    plt = _plt()
    clips = _floats(_CLIPS.value)
    fig, axes = plt.subplots(len(_PHASES.value), len(clips), squeeze=False,
                             figsize=(4.5 * len(clips), 3.4 * len(_PHASES.value)))
    for i, phase in enumerate(_PHASES.value):
        for j, c in enumerate(clips):
            ax = axes[i][j]
            for e in _floats(_EPS.value):
                sel = [r for r in rows if r["phase"] == phase and r["clip_norm"] == c
                       and r["epsilon"] == e]
                line = ax.plot([r["beta"] for r in sel], [r["success_rate"] for r in sel],
                               marker="o", label=f"eps*={e:g}")
                ax.plot([r["beta"] for r in sel], [r["oracle_mean"] for r in sel], ls="--",
                        color=line[0].get_color())
            ax.set_xscale("log")
            ax.set_ylim(0.4, 1.02)
            ax.set_title(f"{name} {phase}, C={c:g} ({trials} trials)", fontsize=9)
            ax.set_xlabel("beta")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"gpm_dpsgd_{name}.png"), dpi=120)


def _cmd_gpm_bounds(out: str) -> None:
    # lazy: loads scipy; importing tfdp.apps.audit does not
    from tfdp.papers.gpm import experiments as gpm  # pylint: disable=import-outside-toplevel

    rows = gpm.bounds_curves()
    _write_csv(os.path.join(out, "gpm_bounds.csv"), rows)
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (beta, gamma) in zip(axes, ((1e-3, 1e2), (1e-5, 1e4))):
        for sigma in (0.25, 1.0, 4.0, 16.0, 64.0):
            sel = [r for r in rows if r["sigma"] == sigma and r["beta"] == beta
                   and r["gamma"] == gamma]
            dl = [r["delta"] for r in sel]
            line = ax.plot(dl, [r["gm_eps"] for r in sel], label=f"GM sigma={sigma:g}")
            ax.plot(dl, [r["gpm_eps_upper"] for r in sel], ls=":", color=line[0].get_color())
        ax.plot(dl, [r["gpm_eps_lower"] for r in sel], color="k", ls="--",
                label="GPM lower (t=0.25)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("delta")
        ax.set_ylabel("epsilon")
        ax.set_title(f"beta={beta:g}, gamma={gamma:g} (dotted: GPM upper)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "gpm_bounds.png"), dpi=120)


def _cmd_gpm_precision(out: str) -> None:
    # lazy: loads scipy; importing tfdp.apps.audit does not
    from tfdp.papers.gpm import experiments as gpm  # pylint: disable=import-outside-toplevel

    res = gpm.precision_check(trials=_TRIALS.value or 40, seed=_SEED.value)
    print(json.dumps(res, indent=2))
    _write_csv(os.path.join(out, "gpm_precision.csv"), [res])


_COMMANDS = {"samplers": _cmd_samplers, "dp": _cmd_dp, "training": None,
             "gpm-hist": _cmd_gpm_hist,
             "gpm-dpsgd": _cmd_gpm_dpsgd, "gpm-bounds": _cmd_gpm_bounds,
             "gpm-precision": _cmd_gpm_precision}


def main(argv: list[str]) -> None:
    if len(argv) != 2 or argv[1] not in _COMMANDS:
        raise app.UsageError(f"name one subcommand: tfdp-audit {{{'|'.join(SUBCOMMANDS)}}} "
                             "[flags]")
    if argv[1].startswith("gpm"):
        logging.warning("GPM is backdoored research/attack code: it is run here only to "
                        "measure the backdoor, never to protect data.")
    out = _OUT.value
    if argv[1] == "dp":
        _check_dp()
    spec = _check_training() if argv[1] == "training" else None
    os.makedirs(out, exist_ok=True)
    if argv[1] == "training":
        _cmd_training(out, spec)
    else:
        _COMMANDS[argv[1]](out)
    print(f"results in {os.path.abspath(out)}")


_TRAINING_HELP = ("", "tfdp-audit training also takes every tfdp-train flag (below); a "
                  "method's own flags: tfdp-train --method=M --help.")


def _define_training_common_flags() -> None:
    """tfdp-train's common flags (no TensorFlow import); its integer --verbose replaces the
    apps' boolean one (both only steer logging)."""
    if "tfdp.apps.train" not in sys.modules and "verbose" in flags.FLAGS:
        delattr(flags.FLAGS, "verbose")
    # lazy: an app module defines absl flags when imported
    import tfdp.apps.train  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import


def _train_common_flags() -> tuple:
    # lazy: an app module defines absl flags when imported
    from tfdp.apps import train as train_app  # pylint: disable=import-outside-toplevel
    return tuple(n for n in train_app.COMMON_FLAGS if n not in OWN_FLAGS)


def define_training_flags() -> None:
    """Defines every tfdp-train flag, the methods' too, for `tfdp-audit training`."""
    _define_training_common_flags()
    # lazy: an app module defines absl flags when imported
    from tfdp.apps import train as train_app  # pylint: disable=import-outside-toplevel
    train_app.define_method_flags()


def run() -> None:
    """Console-script entry point."""
    training = len(sys.argv) > 1 and sys.argv[1] == "training"
    if training:
        _define_training_common_flags()
    cli.handle_help(sys.argv, lambda kind: cli.app_help(
        __doc__, OWN_FLAGS + (_train_common_flags() if training else ()), kind,
        extra=_TRAINING_HELP if training else ()))
    cli.quiet_start(sys.argv)
    if training:
        define_training_flags()  # only then: the method modules import TensorFlow
    app.run(main, argv=sys.argv)


if __name__ == "__main__":
    run()
