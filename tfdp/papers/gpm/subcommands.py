"""GPM's experiment subcommands of tfdp-audit and their flags (registry kind "subcommand").

`tfdp-audit samplers | gpm-hist | gpm-dpsgd | gpm-bounds | gpm-precision`: the sampler
conformance suite (tfdp's samplers, GPM's and controls), the DP-hist game (GPM Figure 5,
Table 4), GPM on DP-SGD gradients (Figure 6, Table 2), the privacy bounds against delta
(Figure 4) and the float64 / float32 key attack (docs/gpm.md). Their flags are the fields of
`GPMSettings` (--gpm_*) and `SamplerSettings` (--audit_samples); tfdp-audit defines them and
checks them before any work. This module imports neither TensorFlow nor scipy when imported.
"""

from __future__ import annotations

import csv
import json
import os
import time
import warnings
from typing import Optional

from absl import logging
import numpy as np

from tfdp import options
from tfdp.audit import experiment

_WARNING = ("GPM is backdoored research/attack code: it is run here only to measure the "
            "backdoor, never to protect data.")


@options.declare("gpm_")
class GPMSettings:
    """The gpm-* subcommands' settings (the --gpm_* flags without the prefix)."""

    ds: tuple[str, ...] = options.field(("256", "4096", "65536"), "gpm-hist: dimensions d.")
    epsilons: tuple[str, ...] = options.field(
        ("0.125", "0.25", "0.5", "1"), "Claimed epsilon* of the imitated Gaussian mechanism.")
    betas: Optional[tuple[str, ...]] = options.field(
        None, "beta values (default: gpm-hist 1e-5..1e-1, gpm-dpsgd 1e-5..1e-3).")
    delta: float = options.field(1e-10, "Claimed delta* (the GPM experiments' value).")
    fresh_data: bool = options.field(
        True, "gpm-hist: a new database per trial (else one per cell).")
    hist_inputs: Optional[tuple[str, ...]] = options.field(
        None, "gpm-hist: instead of running, merge these gpm_hist.csv files (e.g. runs with "
              "different settings per d) and plot them.")
    fixed_key: bool = options.field(False, "gpm-hist: one key per cell instead of one per "
                                           "trial.")
    dg_method: str = options.field("cks", "Discrete Gaussian sampler.",
                                   choices=("cks", "table"))
    model: str = options.field(
        "lenet5", "gpm-dpsgd: model (lenet5 on MNIST, the others on CIFAR-10).",
        choices=("lenet5", "vgg19_bn", "resnet50", "mobilenetv2"))
    phases: tuple[str, ...] = options.field(
        ("not_converged", "converged"), "gpm-dpsgd: phases (random init / pretrained).")
    clips: tuple[str, ...] = options.field(("4", "8"), "gpm-dpsgd: clip norms C.")
    batch_size: int = options.field(128, "gpm-dpsgd: DP-SGD batch size n.")
    pretrain_epochs: int = options.field(20, "gpm-dpsgd: Adam epochs for the converged phase.")
    num_train: Optional[int] = options.field(
        None, "gpm-dpsgd: use only this many training (and test) examples.")
    weights: Optional[str] = options.field(
        None, "gpm-dpsgd: load converged weights from this .weights.h5 instead of "
              "pretraining.")
    save_weights: bool = options.field(
        True, "gpm-dpsgd: save pretrained weights in the output dir.")

    def validate(self) -> None:
        """Cross-field rules, checked before any work (ValueError naming the flag)."""
        for d in self.ds:
            try:
                int(d)
            except ValueError:
                raise ValueError(f"--gpm_ds: expected integers, got {d!r}") from None
        for name, values in (("epsilons", self.epsilons), ("betas", self.betas or ()),
                             ("clips", self.clips)):
            try:
                _floats(values)
            except ValueError:
                raise ValueError(f"--gpm_{name}: expected numbers, got {list(values)}") from None
        for phase in self.phases:
            if phase not in ("not_converged", "converged"):
                raise ValueError(f"--gpm_phases: unknown phase {phase!r}")


@options.declare("audit_")
class SamplerSettings:
    """The samplers subcommand's own setting (--audit_samples)."""

    samples: int = options.field(20000, "samplers: samples per sampler call.")


def _floats(values) -> list[float]:
    return [float(v) for v in values]


def run_samplers(out: str, settings: SamplerSettings, common: experiment.Common) -> None:
    """`tfdp-audit samplers`: the black-box conformance suite on tfdp's samplers, GPM's and
    controls (docs/gpm.md); samplers.csv and samplers.txt."""
    # lazy: loads tensorflow; importing tfdp.papers.gpm.subcommands does not
    from tfdp import mechanisms  # pylint: disable=import-outside-toplevel
    # lazy: loads scipy; importing tfdp.papers.gpm.subcommands does not
    from tfdp.audit import samplers  # pylint: disable=import-outside-toplevel
    from tfdp.papers.gpm import pancake  # pylint: disable=import-outside-toplevel
    # lazy: loads tensorflow; importing tfdp.papers.gpm.subcommands does not
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    n, seed = settings.samples, common.seed
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
    experiment.write_csv(os.path.join(out, "samplers.csv"), rows)
    with open(os.path.join(out, "samplers.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(texts))


def _read_hist_csv(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k, v in r.items():
            if k not in ("fresh_data", "fixed_key"):
                r[k] = float(v) if any(c in v for c in ".en") else int(v)
    return rows


def _plot_hist(rows: list[dict], path: str) -> None:
    plt = experiment.pyplot()
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


def run_hist(out: str, settings: GPMSettings, common: experiment.Common) -> None:
    """`tfdp-audit gpm-hist`: the DP-hist game (GPM Figure 5, Table 4); gpm_hist.csv/png."""
    logging.warning(_WARNING)
    # lazy: loads scipy; importing tfdp.papers.gpm.subcommands does not
    from tfdp.papers.gpm import experiments as gpm  # pylint: disable=import-outside-toplevel

    if settings.hist_inputs:
        rows = [r for p in settings.hist_inputs for r in _read_hist_csv(p)]
        experiment.write_csv(os.path.join(out, "gpm_hist.csv"), rows)
        _plot_hist(rows, os.path.join(out, "gpm_hist.png"))
        return
    trials = common.trials or 1000
    betas = _floats(settings.betas or ["1e-5", "1e-4", "1e-3", "1e-2", "1e-1"])
    ds, eps = [int(v) for v in settings.ds], _floats(settings.epsilons)
    rows = []
    t0 = time.time()
    for i, (d, e, b) in enumerate((d, e, b) for d in ds for e in eps for b in betas):
        cell_seed = int(np.random.SeedSequence([common.seed, i]).generate_state(1)[0])
        r = gpm.hist_experiment(d, e, b, trials, cell_seed, delta=settings.delta,
                                fresh_data=settings.fresh_data, fixed_key=settings.fixed_key,
                                dg_method=settings.dg_method)
        r["seconds_total"] = round(time.time() - t0, 2)
        rows.append(r)
        print(f"d={d} eps*={e} beta={b:g}: success {r['success_rate']:.4f} "
              f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}] oracle {r['oracle_exact']:.4f}; "
              f"L2 GM {r['l2_error_gm']:.1f} GPM {r['l2_error_gpm']:.1f} "
              f"expected {r['l2_error_expected']:.1f}")
    experiment.write_csv(os.path.join(out, "gpm_hist.csv"), rows)
    _plot_hist(rows, os.path.join(out, "gpm_hist.png"))


def run_dpsgd(out: str, settings: GPMSettings, common: experiment.Common) -> None:
    """`tfdp-audit gpm-dpsgd`: GPM on DP-SGD gradients (Figure 6, Table 2)."""
    logging.warning(_WARNING)
    # lazy: loads keras; importing tfdp.papers.gpm.subcommands does not
    import keras  # pylint: disable=import-outside-toplevel
    from tfdp.papers.gpm import dpsgd as gpm_dpsgd  # pylint: disable=import-outside-toplevel

    trials = common.trials or 100
    betas = _floats(settings.betas or ["1e-5", "1e-4", "1e-3"])
    data_dir = common.data_dir
    name = settings.model
    x, y = gpm_dpsgd.load_task(name, "train", data_dir, settings.num_train)
    xt, yt = gpm_dpsgd.load_task(name, "test", data_dir, settings.num_train)
    rows = []
    for phase in settings.phases:
        if phase not in ("not_converged", "converged"):
            raise ValueError(f"--gpm_phases: unknown phase {phase!r}")
        keras.utils.set_random_seed(common.seed)
        model = gpm_dpsgd.build_model(name)
        if phase == "converged":
            if settings.weights:
                model.load_weights(settings.weights)
                acc = gpm_dpsgd.pretrain(model, x, y, xt, yt, epochs=0, seed=common.seed)
            else:
                t0 = time.time()
                acc = gpm_dpsgd.pretrain(model, x, y, xt, yt, epochs=settings.pretrain_epochs,
                                         seed=common.seed, augment=name != "lenet5")
                logging.info("pretrained %s for %d epochs in %.0fs: test acc %.4f", name,
                             settings.pretrain_epochs, time.time() - t0, acc)
                if _SAVEsettings.weights:
                    model.save_weights(os.path.join(out, f"{name}_pretrained.weights.h5"))
        else:
            acc = gpm_dpsgd.pretrain(model, x, y, xt, yt, epochs=0, seed=common.seed)
        # BN models: per-example gradients use the moving statistics (one example per
        # forward pass cannot give batch statistics); LeNet-5 has no BN.
        phase_rows = gpm_dpsgd.dpsgd_experiment(
            model, x, y, phase=phase, epsilons=_floats(settings.epsilons), betas=betas,
            clips=_floats(settings.clips), trials=trials, seed=common.seed,
            batch_size=settings.batch_size, delta=settings.delta, accuracy=acc,
            training=name == "lenet5", dg_method=settings.dg_method)
        for r in phase_rows:
            print(f"{name} {phase} acc={acc:.4f} C={r['clip_norm']:g} eps*={r['epsilon']:g} "
                  f"beta={r['beta']:g}: success {r['success_rate']:.2f} "
                  f"oracle {r['oracle_mean']:.3f} median||dq|| {r['median_dq_norm']:.3g}")
        rows += phase_rows
    experiment.write_csv(os.path.join(out, f"gpm_dpsgd_{name}.csv"), rows)
    plt = experiment.pyplot()
    clips = _floats(settings.clips)
    fig, axes = plt.subplots(len(settings.phases), len(clips), squeeze=False,
                             figsize=(4.5 * len(clips), 3.4 * len(settings.phases)))
    for i, phase in enumerate(settings.phases):
        for j, c in enumerate(clips):
            ax = axes[i][j]
            for e in _floats(settings.epsilons):
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


def run_bounds(out: str, settings: GPMSettings, common: experiment.Common) -> None:
    """`tfdp-audit gpm-bounds`: GPM's privacy bounds against delta (Figure 4)."""
    del settings, common
    logging.warning(_WARNING)
    # lazy: loads scipy; importing tfdp.papers.gpm.subcommands does not
    from tfdp.papers.gpm import experiments as gpm  # pylint: disable=import-outside-toplevel

    rows = gpm.bounds_curves()
    experiment.write_csv(os.path.join(out, "gpm_bounds.csv"), rows)
    plt = experiment.pyplot()
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


def run_precision(out: str, settings: GPMSettings, common: experiment.Common) -> None:
    """`tfdp-audit gpm-precision`: float64 vs float32 key attack at d = 1e6."""
    del settings
    logging.warning(_WARNING)
    # lazy: loads scipy; importing tfdp.papers.gpm.subcommands does not
    from tfdp.papers.gpm import experiments as gpm  # pylint: disable=import-outside-toplevel

    res = gpm.precision_check(trials=common.trials or 40, seed=common.seed)
    print(json.dumps(res, indent=2))
    experiment.write_csv(os.path.join(out, "gpm_precision.csv"), [res])




SAMPLERS = experiment.Subcommand(
    "black-box conformance suite on tfdp's samplers, GPM's and on controls", run_samplers,
    SamplerSettings)
HIST = experiment.Subcommand("GPM DP-hist experiment (GPM Figure 5, Table 4)", run_hist,
                             GPMSettings)
DPSGD = experiment.Subcommand(
    "GPM on DP-SGD gradients (MNIST LeNet-5: Figure 6; CIFAR-10: Table 2)", run_dpsgd,
    GPMSettings)
BOUNDS = experiment.Subcommand("GPM privacy bounds vs delta (GPM Figure 4)", run_bounds,
                               GPMSettings)
PRECISION = experiment.Subcommand("float64 vs float32 key attack at d = 1e6 (docs/gpm.md)",
                                  run_precision, GPMSettings)
