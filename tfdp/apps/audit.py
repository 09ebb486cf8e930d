"""tfdp-audit: empirical DP audits, training audits, and the papers' experiments.

Usage: tfdp-audit SUBCOMMAND [flags], SUBCOMMAND one of:
  dp             empirical DP audit of every shipped mechanism (and the papers' own cases,
                 e.g. GPM with/without key)
  training       one-run canary audit of a trained model: any tfdp-train method and flags
                 (Steinke, Nasr, Jagielski 2023); `tfdp-audit training --help` lists the
                 training flags too
and the experiment subcommands the papers add (listed below; GPM's: sampler conformance,
its DP-hist and DP-SGD experiments, privacy bounds and precision check).
Results (CSV, PNG, text; audit.json for training) go to --audit_output_dir (default
runs/audit; the committed results/ files are rewritten only when a directory there is named
explicitly).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from absl import app, flags, logging
import numpy as np

from tfdp.apps import cli, option_flags
import dataclasses
from tfdp import registry, rundir
from tfdp.audit import experiment

_BEFORE = set(flags.FLAGS)

_OUT = flags.DEFINE_string("audit_output_dir", "runs/audit",
                           "Directory for CSV / PNG / text (committed results name theirs).")
_SEED = flags.DEFINE_integer("audit_seed", 0, "Seed of every random draw.")
_TRIALS = flags.DEFINE_integer("audit_trials", None,
                               "Games per cell (default: the subcommand's; dp 20000, "
                               "gpm-hist 1000, gpm-dpsgd 100, gpm-precision 40).")
_THRESH = flags.DEFINE_integer("audit_threshold_trials", 200000,
                               "dp: runs per input of the tail-threshold audit (0: skip it).")
_GDP = flags.DEFINE_integer("audit_gdp_trials", 200000,
                            "dp: runs per input of the Gaussian-DP (mu) audit of the Gaussian "
                            "mechanisms (0: skip it).")
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

# The subcommands the papers add (registry kind "subcommand", e.g. GPM's), with the flags of
# their settings classes (tfdp.audit.experiment.Subcommand).
PAPER_SUBCOMMANDS = {name: declared.load()
                     for name, declared in registry.extensions("subcommand").items()}
for _sub in PAPER_SUBCOMMANDS.values():
    if _sub.settings_class is not None:
        option_flags.define_flags(_sub.settings_class.OPTIONS, _sub.settings_class.__module__)
SUBCOMMANDS = ("dp", "training") + tuple(PAPER_SUBCOMMANDS)

cli.define_verbose()
OWN_FLAGS = cli.new_flags(_BEFORE)


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
    experiment.write_csv(os.path.join(out, "dp_audit.csv"), rows)
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


def _paper_settings(name: str) -> Any:
    """The settings of a paper's subcommand from its flags (checked before any work)."""
    cls = PAPER_SUBCOMMANDS[name].settings_class
    if cls is None:
        return None
    try:
        return cls.from_options(option_flags.option_values(cls.OPTIONS))
    except ValueError as e:
        raise app.UsageError(str(e)) from e


def main(argv: list[str]) -> None:
    if len(argv) != 2 or argv[1] not in SUBCOMMANDS:
        raise app.UsageError(f"name one subcommand: tfdp-audit {{{'|'.join(SUBCOMMANDS)}}} "
                             "[flags]")
    name, out = argv[1], _OUT.value
    if name == "dp":
        _check_dp()
    spec = _check_training() if name == "training" else None
    settings = _paper_settings(name) if name in PAPER_SUBCOMMANDS else None
    os.makedirs(out, exist_ok=True)
    if name == "training":
        _cmd_training(out, spec)
    elif name == "dp":
        _cmd_dp(out)
    else:
        common = experiment.Common(seed=_SEED.value, trials=_TRIALS.value,
                                   data_dir=_DATA_DIR.value or os.environ.get("TFDP_DATA_DIR"))
        PAPER_SUBCOMMANDS[name].run(out, settings, common)
    print(f"results in {os.path.abspath(out)}")


_TRAINING_HELP = ("", "tfdp-audit training also takes every tfdp-train flag (below); a "
                  "method's own flags: tfdp-train --method=M --help.")


def _paper_help() -> tuple[str, ...]:
    """The help lines of the papers' subcommands."""
    lines = tuple(f"  {name:<14} {sub.summary} ({registry.extension_paper('subcommand', name)})"
                  for name, sub in PAPER_SUBCOMMANDS.items())
    return ("", "Subcommands the papers add:") + lines if lines else ()


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
        extra=(_TRAINING_HELP if training else ()) + _paper_help()))
    cli.quiet_start(sys.argv)
    if training:
        define_training_flags()  # only then: the method modules import TensorFlow
    app.run(main, argv=sys.argv)


if __name__ == "__main__":
    run()
