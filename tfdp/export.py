"""SavedModel export of a run: deterministic, noisy and certifying signatures, and a model card.

`export_run(model_dir, export_dir)` turns a finished run directory (model.keras, config.json,
ledger.json) into a TensorFlow SavedModel that loads with `tf.saved_model.load` and serves
with TF Serving or `saved_model_cli` in a process that cannot import tfdp. Signatures (all
inputs float32 images of the run's input shape, pixel values in the run's value range):

* `serving_default(x)`: the noise-free prediction (every tfdp noise layer off):
  {"logits", "probabilities", "class"}.
* `serve(x)`: the logits alone, the endpoint Keras 3's `model.export()` writes (so
  `keras.layers.TFSMLayer(export_dir, call_endpoint="serve")` wraps the export).
* `noisy_predict(x, seed)` (models with tfdp noise layers): one forward pass with every
  noise layer's inference noise on; each row of x gets its own draw. The noise is a
  stateless function of the int64 `seed`: the same seed gives the same output.
* `certify(x, num_draws, alpha, attack_size, seed)` (runs whose config.json has a
  "certification" entry): the Monte-Carlo prediction, class counts, confidence bounds,
  robustness radius and `certified = radius >= attack_size and radius > 0`, computed in
  the graph with the formulas of `tfdp.certify` (same bound, same radius) for every
  mechanism `tfdp.certify.names()` lists. Noise drawn once ("once" mode) is part of
  the model's variables and saved with them; fresh noise is drawn from `seed`.

A model card (`model_card.json`, beside `saved_model.pb` and as the SavedModel asset
`assets/model_card.json`) states the ledger, the data set and its value range, the flags,
the certification parameters, the versions and, when the run has one, the evaluation
summary. It is built from an allow-list: it never holds training loss or accuracy, the
run's seed (which would let anyone regenerate its privacy noise) or local paths.

Noise seeds: a draw of the exported graph takes the stateless seed
fold_in(fold_in([seed, tag], chunk), site), where tag separates `noisy_predict` from
`certify`, chunk is the Monte-Carlo step (0 for `noisy_predict`) and site counts the
model's noise draws in call order. `certify_in_process` draws the same noise through
`tfdp.certify.MonteCarloPredictor`, which is how the export is checked against tfdp.certify.

This module holds the model card and `export_run`; the signatures live in
`tfdp.export_signatures` and the loaded export in `tfdp.exported_model` (their names stay
importable from here).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib
import json
import os
import platform
import shutil
import tempfile
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf

from layers import noise as noise_layers
from tfdp import certify as certify_lib
from tfdp import accounting, checks, run_model, rundir, serving_inputs
from tfdp.train import registry
from tfdp import registry as paper_registry
import keras
import tfdp

# The signatures and the loaded export, split out of this module (issue 42); their names
# stay importable from here.
from tfdp.export_signatures import (DEFAULT_DRAWS_PER_STEP, SIGNATURES,  # noqa: F401,E402
                                    build_module, certify_in_process, noisy_in_process,
                                    tf_bernstein_bounds, tf_certified_radius,
                                    tf_clopper_pearson_bounds, tf_hoeffding_bounds,
                                    tf_max_epsilon)
from tfdp.exported_model import (CARD_DIGEST, CARD_FILE, ExportedModel,  # noqa: F401,E402
                                 check_card_binding)

KERAS_FILE = "model.keras"
CARD_FORMAT = "tfdp-model-card/1"

# ------------------------------------------------------------- model card allow-list
# The model card is built from an allow-list (issue 22): every key it may carry is declared
# below, section by section; a key not listed is dropped, whatever its value. A spec is a dict
# key -> ANY (any JSON value: a constant, a public hyper-parameter, a test-set figure or a
# quantity of the released weights), a nested spec (a dict filtered by it), a one-element
# list [spec] (a list of dicts, each filtered by spec) or a frozenset (a list of
# "--name=value" flag lines whose names are in it). Nothing computed from the training data
# outside the privately trained weights is listed: no training loss or accuracy, no r
# statistics or pre-training accuracy (Secure-SGD), no data fingerprint, no seed, no path.
ANY = True

# config.json keys of the card's "run" section.
_CONFIG_KEYS = ("method", "dataset", "value_range", "input_shape", "num_classes", "epochs",
                "batch_size", "learning_rate", "optimizer", "epsilon", "delta",
                "strategy", "num_replicas", "num_train", "num_test", "batch_schedule",
                "noise_seed")
# Generic flags of flags.txt that are public hyper-parameters (no seed, path or run control).
_CARD_FLAGS = ("method", "dataset", "epochs", "batch_size", "learning_rate", "optimizer",
               "epsilon", "delta", "value_range", "strategy", "num_train", "num_test",
               "num_classes", "noise_kernel", "smoothing_sigma",
               "allow_unsound_certificates")
# Names never copied to the model card, even when declared as a method option: the seed
# regenerates the run's privacy noise; the others are local paths or run-control switches.
_PRIVATE_FLAGS = ("seed", "model_dir", "data_dir", "resume", "stop_after_epochs", "verbose",
                  "download", "flagfile")  # (a paper's *_file flags: the suffix rule)
# metrics.json: only these test-set fields (no training statistics of any kind).
_METRICS_KEYS = ("test_accuracy",)
# evaluation.json: the test-set summary fields (computed on the test split only).
_EVALUATION_KEYS = ("clean_accuracy", "clean_accuracy_ci95", "clean_certified_accuracy",
                    "clean_claimed_certified_accuracy", "claimed_note", "certified_label",
                    "attack_norm", "soundness_check", "attacks", "num_examples",
                    "value_range", "size_range", "prediction", "attack_target",
                    "attack_labels", "nb_iter", "eot_draws", "certification",
                    "certified_accuracy_note", "num_draws", "alpha", "bound", "robust_rule")
# ledger.json: the public summary and the entries (mechanism, budget, notes, DP-SGD segments
# and their dp_accounting event).
_LEDGER_SPEC = {
    **{k: ANY for k in ("epsilon", "delta", "claimed_epsilon", "claimed_delta", "differs",
                        "relation", "guarantee", "note", "noise_seed", "noise_seed_note")},
    "entries": [{
        **{k: ANY for k in ("name", "mechanism", "epsilon", "delta", "protects",
                            "composition", "group", "claimed_epsilon", "claimed_delta",
                            "note", "relation", "covers")},
        "segments": [{k: ANY for k in accounting.SEGMENT_KEYS}],
        # the dp_accounting event of the segments (sampling rates, noise multipliers, counts)
        "dp_event": ANY}],
}
# The certification parameters: public hyper-parameters of the mechanisms, constants, and
# sensitivities of the released weights. The papers add their own (`_certification_spec`:
# StoBatch's radius parameters and Delta_r^h, Secure-SGD's r_stats without r's range).
_CERTIFICATION_SPEC = {
    **{k: ANY for k in (
        "mechanism", "construction_bound", "epsilon", "delta", "sigma", "sigma_multiplier",
        "sensitivity", "sensitivity_mode", "sensitivity_sound", "noised_layer", "layer",
        "num_units", "h1_shape", "redistribution", "train_noise", "test_noise", "norm",
        "num_draws", "alpha", "bound", "note", "eps_cap",
        # the certificate registry (tfdp.certify): name, derived soundness, smoothing
        "name", "sound", "lipschitz", "selection_draws", "noise", "input_dim")},
}


def _certification_spec() -> dict:
    """_CERTIFICATION_SPEC with the certification fields the papers add (registry kind
    "card_fields", e.g. StoBatch's radius parameters, Secure-SGD's r_stats)."""
    spec = dict(_CERTIFICATION_SPEC)
    for declared in paper_registry.extensions("card_fields").values():
        spec.update(declared.load().get("certification", {}))
    return spec


def _public_options(method: Any) -> tuple:
    """The options of `method` the card may show: its module's declared OPTIONS (settings the
    user chose, never values fitted on data), without seeds and paths."""
    try:
        module = registry.method_module(str(method))
    except ValueError:
        return ()  # not a registered method: no option is known to be public
    declared = getattr(importlib.import_module(module), "OPTIONS", None)
    return tuple(n for n in (declared.names if declared is not None else ())
                 if not _is_private_flag(n))


def card_allow_list(method: Any) -> dict:
    """The model card's allow-list for a run of `method` (see the spec format above)."""
    options = _public_options(method)
    return {
        **{k: ANY for k in ("format", "created_utc", "noise_seeding", "signatures",
                            "signatures_exported")},
        "run": {k: ANY for k in _CONFIG_KEYS},
        "options": {k: ANY for k in options},
        "flags": frozenset(_CARD_FLAGS + options),
        "data": {k: ANY for k in ("dataset", "value_range", "input_shape", "num_classes",
                                  "preprocessing")},
        "ledger": _LEDGER_SPEC,
        "certification": _certification_spec(),
        "versions": {k: ANY for k in ("tfdp", "tensorflow", "keras", "numpy", "python")},
        "test": {k: ANY for k in _METRICS_KEYS},
        "evaluation": {k: ANY for k in _EVALUATION_KEYS},
        "source": {"model_sha256": ANY},
        "input_validation": {k: ANY for k in ("value_range", "non_finite", "out_of_range",
                                              "out_of_range_meaning", "shape", "num_draws")},
    }


def _flag_name(line: str) -> str:
    return line.strip()[2:].partition("=")[0] if line.strip().startswith("--") else ""


def apply_allow_list(value: Any, spec: Any) -> Any:
    """`value` with every key (at any depth) that `spec` does not list dropped."""
    if spec is ANY or value is None:
        return value
    if not isinstance(value, list) and isinstance(spec, (frozenset, list)):
        return None
    if isinstance(spec, frozenset):
        return [v for v in value if isinstance(v, str) and _flag_name(v) in spec]
    if isinstance(spec, list):
        return [apply_allow_list(v, spec[0]) for v in value if isinstance(v, dict)]
    if not isinstance(value, Mapping):
        return None
    return {k: apply_allow_list(v, spec[k]) for k, v in value.items() if k in spec}


def disallowed_paths(value: Any, spec: Any, path: str = "") -> list:
    """The paths ("ledger.entries[0].x", "flags[--seed]") of `value` that `spec` does not list."""
    if spec is ANY or value is None:
        return []
    if isinstance(spec, frozenset):
        if not isinstance(value, list):
            return [path]
        return [f"{path}[{v}]" for v in value if not isinstance(v, str)
                or _flag_name(v) not in spec]
    if isinstance(spec, list):
        if not isinstance(value, list):
            return [path]
        return [p for i, v in enumerate(value)
                for p in disallowed_paths(v, spec[0], f"{path}[{i}]")]
    if not isinstance(value, Mapping):
        return [path]
    out = []
    for k, v in value.items():
        sub = f"{path}.{k}" if path else str(k)
        out += [sub] if k not in spec else disallowed_paths(v, spec[k], sub)
    return out


# ------------------------------------------------------------------------- model card


def _read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _is_private_flag(name: str) -> bool:
    return name in _PRIVATE_FLAGS or name.endswith(("_seed", "_dir", "_file", "_path"))


def _flags_from_text(text: str) -> list:
    """The "--name[=value]" lines of flags.txt, without seeds, paths and run controls."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("--"):
            continue
        name = line[2:].partition("=")[0]
        if _is_private_flag(name) or (name.startswith("no") and _is_private_flag(name[2:])):
            continue
        out.append(line)
    return out


def _signature_docs(has_noise: bool, cert: Optional[dict], input_shape: Sequence[int],
                    value_range: Sequence[float], bound: str, draws_per_step: int) -> dict:
    x_doc = {"dtype": "float32", "shape": [None] + [int(d) for d in input_shape],
             "range": [float(v) for v in value_range],
             "meaning": "images, pixel p in 0..255 scaled to low + (high - low) * p / 255"}
    label = {"logits": "float32 [batch, K]", "probabilities": "float32 [batch, K] (softmax)",
             "class": "int64 [batch] (argmax)"}
    docs = {
        "serving_default": {"inputs": {"x": x_doc}, "outputs": label,
                            "noise": "off (deterministic)"},
        "serve": {"inputs": {"x": x_doc}, "outputs": {"output_0": "float32 [batch, K] logits"},
                  "noise": "off (deterministic); the endpoint keras Model.export() writes"},
    }
    if has_noise:
        docs["noisy_predict"] = {
            "inputs": {"x": x_doc, "seed": {"dtype": "int64", "shape": [],
                                            "meaning": "stateless noise seed"}},
            "outputs": label,
            "noise": "every noise layer's inference noise on; one draw per row of x; the "
                     "same seed gives the same output"}
    if cert is not None:
        prefix = "" if cert.get("sound") else "claimed_"
        docs["certify"] = {
            "inputs": {
                "x": x_doc,
                "num_draws": {"dtype": "int32", "shape": [], "range": ">= 1"
                              + (" (>= 2 for bernstein)" if bound == "bernstein" else "")},
                "alpha": {"dtype": "float64", "shape": [], "range": "(0, 1)",
                          "meaning": "failure probability; confidence 1 - alpha"},
                "attack_size": {"dtype": "float64", "shape": [], "range": ">= 0",
                                "meaning": "l-norm attack size in the units of x's range"},
                "seed": {"dtype": "int64", "shape": [], "meaning": "stateless noise seed; "
                         "use a fresh random seed for a certificate"}},
            "outputs": {"prediction": "int64 [batch]", "counts": "int64 [batch, K]",
                        "mean_scores": "float64 [batch, K]",
                        "lower_bound": "float64 [batch]", "upper_bound": "float64 [batch]",
                        prefix + "radius": "float64 [batch] (0 = abstain)",
                        prefix + "certified": "bool [batch]: radius >= attack_size and "
                                              "radius > 0"},
            "certificate": {"name": cert.get("name"), "norm": cert.get("norm"),
                            "sound": bool(cert.get("sound")),
                            "meaning": ("a proven bound" if cert.get("sound") else
                                        "CLAIMED, not certified: the sensitivity behind the "
                                        "radius is not a proven bound")},
            "bound": bound, "draws_per_step": int(draws_per_step)}
        if cert.get("selection_draws"):
            docs["certify"]["selection_draws"] = int(cert["selection_draws"])
    return docs


def build_model_card(run: rundir.RunDir, config: Mapping[str, Any], *, has_noise: bool,
                     bound: str, draws_per_step: int) -> dict:
    """The model card of a run, filtered by `card_allow_list` (a key not listed is dropped).

    Contains the ledger (sound and claimed totals, entries with their notes), the data set,
    value range and preprocessing, the flags (without the seed and local paths), the
    certification parameters, the versions, the test accuracy and the evaluation summary
    when the run has one. Never training loss, training accuracy or any other statistic of
    the training data.

    Args:
        run: the run directory.
        config: its config.json.
        has_noise: whether the model has noise layers (noisy_predict exists).
        bound: the certify signature's bound.
        draws_per_step: the certify signature's draws per forward pass.

    Returns:
        a JSON-ready dict.
    """
    cert = config.get("certification")
    if cert is not None:  # with the certificate's name, norm and (derived) soundness
        cert = certify_lib.validate_certification(cert)
    value_range = config.get("value_range") or [-1.0, 1.0]
    card: dict[str, Any] = {
        "format": CARD_FORMAT,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"),
        "run": {k: config[k] for k in _CONFIG_KEYS if k in config},
        "options": dict(config.get("options") or {}),
        "data": {
            "dataset": config.get("dataset"),
            "value_range": [float(v) for v in value_range],
            "input_shape": config.get("input_shape"),
            "num_classes": config.get("num_classes"),
            "preprocessing": ("float32 NHWC pixels; 8-bit value p becomes low + (high - low) "
                              "* p / 255 for value_range [low, high]; any further steps are "
                              "layers of the model"),
        },
        "ledger": _read_json(run.file(rundir.LEDGER_FILE)),
        "certification": cert,
        "versions": {"tfdp": tfdp.__version__, "tensorflow": tf.__version__,
                     "keras": keras.__version__, "numpy": np.__version__,
                     "python": platform.python_version()},
        "signatures": _signature_docs(has_noise, cert, config.get("input_shape") or [],
                                      value_range, bound, draws_per_step),
        "noise_seeding": ("draw seed = fold_in(fold_in([seed, tag], chunk), site); tag 1 "
                          "noisy_predict, 2 certify; chunk = Monte-Carlo step; site = the "
                          "model's noise draws in call order"),
        "source": {"model_sha256": rundir.file_sha256(run.file(rundir.MODEL_FILE))},
    }
    if run.exists(rundir.FLAGS_FILE):
        with open(run.file(rundir.FLAGS_FILE), encoding="utf-8") as f:
            card["flags"] = _flags_from_text(f.read())
    if run.exists(rundir.METRICS_FILE):
        card["test"] = _read_json(run.file(rundir.METRICS_FILE))
    if run.exists(rundir.EVALUATION_FILE):
        card["evaluation"] = _read_json(run.file(rundir.EVALUATION_FILE))
    return apply_allow_list(card, card_allow_list(config.get("method")))


# ------------------------------------------------------------------------- export


@dataclasses.dataclass
class ExportResult:
    """What `export_run` wrote.

    Attributes:
        export_dir: the SavedModel directory.
        signatures: the signature names.
        card: the model card.
    """

    export_dir: str
    signatures: list
    card: dict


def check_export_dir(export_dir: str, overwrite: bool) -> str:
    """Absolute export path; refuses an existing non-empty directory without overwrite.

    Raises:
        ValueError: naming export_dir.
    """
    if not export_dir:
        raise ValueError("export_dir: an output directory is required")
    path = os.path.abspath(os.path.expanduser(export_dir))
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"export_dir: {path} exists and is not a directory")
    if os.path.isdir(path) and os.listdir(path) and not overwrite:
        raise ValueError(f"export_dir: {path} exists and is not empty; pass overwrite=True "
                         "(--overwrite) to replace it")
    return path


def export_run(model_dir: str, export_dir: str, *, overwrite: bool = False,
               bound: Optional[str] = None,
               draws_per_step: int = DEFAULT_DRAWS_PER_STEP,
               include_keras: bool = True, out_of_range: str = "reject") -> ExportResult:
    """Exports a finished run directory as a SavedModel with a model card.

    The SavedModel is written to a temporary directory beside `export_dir` and renamed into
    place only when complete, so a failed export leaves no half-written directory.

    Args:
        model_dir: the run directory (model.keras, config.json and ledger.json).
        export_dir: the SavedModel directory to create.
        overwrite: replace an existing non-empty export_dir.
        bound: confidence bound of the certify signature (default: the run's certification
            "bound", else Clopper-Pearson).
        draws_per_step: Monte-Carlo draws per forward pass of certify.
        include_keras: also copy model.keras into the export (Keras users load it with
            tfdp's custom layers; see docs/export.md).
        out_of_range: what the signatures do with x outside the run's value range:
            "reject" (fail the call) or "clip"; recorded in the card's "input_validation".

    Returns:
        an ExportResult.

    Raises:
        ValueError: on an unfinished run directory, an existing export_dir without
            overwrite, or bad options; before any work.
    """
    run = rundir.RunDir(model_dir)
    _check_finished_run(run)
    target = check_export_dir(export_dir, overwrite)
    if os.path.commonpath([target, run.path]) == target:
        raise ValueError("export_dir: must not be the run directory or a folder holding it")
    draws_per_step = checks.check_int(draws_per_step, "draws_per_step", minimum=1)
    out_of_range = serving_inputs.check_out_of_range(out_of_range)
    config, cert, bound = _export_config(run, bound)

    model, _ = run_model.load_run(run.path)
    module, signatures = build_module(model, cert, config["input_shape"],
                                      config["num_classes"], bound=bound,
                                      draws_per_step=draws_per_step,
                                      value_range=config.get("value_range") or (-1.0, 1.0),
                                      out_of_range=out_of_range)
    card = build_model_card(run, config, has_noise="noisy_predict" in signatures,
                            bound=bound, draws_per_step=draws_per_step)
    card["signatures_exported"] = sorted(signatures)
    card["input_validation"] = serving_inputs.card_entry(
        config.get("value_range") or (-1.0, 1.0), out_of_range)
    card = apply_allow_list(card, card_allow_list(config.get("method")))

    parent = os.path.dirname(target)
    created_parent = not os.path.exists(parent)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".tmp-{os.path.basename(target)}-")
    staging = tempfile.mkdtemp(prefix="tfdp-card-")
    try:
        card_path = rundir.write_json_atomic(os.path.join(staging, CARD_FILE), card)
        module.model_card = tf.saved_model.Asset(card_path)
        # The card bound to the model: its sha256, a variable of the SavedModel, checked at
        # load (`ExportedModel`, docs/export.md).
        module.model_card_sha256 = tf.Variable(rundir.file_sha256(card_path), trainable=False,
                                               name=CARD_DIGEST)
        with noise_layers.noise_kernel("portable"):  # any retrace stays portable
            tf.saved_model.save(module, tmp, signatures=signatures)
        shutil.copyfile(card_path, os.path.join(tmp, CARD_FILE))
        if include_keras:
            shutil.copyfile(run.file(rundir.MODEL_FILE), os.path.join(tmp, KERAS_FILE))
        _replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if created_parent:
            with contextlib.suppress(OSError):
                os.rmdir(parent)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ExportResult(target, sorted(signatures), card)


def _check_finished_run(run: rundir.RunDir) -> None:
    """Refuses a run directory without its result files or with a corrupt model.keras.

    Raises:
        ValueError: naming model_dir, or the model file and what is wrong with it.
    """
    if not os.path.isdir(run.path):
        raise ValueError(f"model_dir: {run.path} is not a directory")
    for name in (rundir.CONFIG_FILE, rundir.MODEL_FILE, rundir.LEDGER_FILE):
        if not run.exists(name):
            raise ValueError(f"model_dir: {run.path} has no {name}; is it a finished run?")
    problem = rundir.model_file_problem(run.file(rundir.MODEL_FILE))
    if problem:
        raise ValueError(rundir.corrupt_model_message(run.file(rundir.MODEL_FILE), problem))


def _export_config(run: rundir.RunDir, bound: Optional[str]
                   ) -> tuple[dict, Optional[dict], str]:
    """(config.json, its checked certification or None, the certify signature's bound).

    Raises:
        ValueError: on a bad bound or certification, or a config.json without the input
            shape or the number of classes.
    """
    config = run.read_json(rundir.CONFIG_FILE)
    cert = config.get("certification")
    if cert is not None:
        cert = certify_lib.validate_certification(cert)
    bound = bound or (cert or {}).get("bound") or "clopper_pearson"
    if bound not in certify_lib.BOUNDS:
        raise ValueError(f"bound must be one of {certify_lib.BOUNDS}, got {bound!r}")
    for key in ("input_shape", "num_classes"):
        if not config.get(key):
            raise ValueError(f"model_dir: config.json has no {key!r}")
    return config, cert, bound


def latest_run(folder: str) -> str:
    """The most recently finished run directory directly inside `folder`.

    Args:
        folder: a folder of run directories (e.g. runs/).

    Returns:
        the path of the subdirectory whose model.keras is newest.

    Raises:
        ValueError: naming --latest_under, if the folder holds no finished run.
    """
    candidates = []
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            model = os.path.join(folder, name, rundir.MODEL_FILE)
            if os.path.isfile(model):
                candidates.append((os.path.getmtime(model), os.path.join(folder, name)))
    if not candidates:
        raise ValueError(f"latest_under: {folder} holds no finished run directory "
                         f"(none has {rundir.MODEL_FILE})")
    return max(candidates)[1]


def _replace_dir(src: str, dst: str) -> None:
    """Renames the finished directory src to dst, replacing dst (old copy removed last)."""
    if not os.path.exists(dst):
        os.replace(src, dst)
        return
    if os.path.isdir(dst) and not os.listdir(dst):
        os.rmdir(dst)
        os.replace(src, dst)
        return
    old = tempfile.mkdtemp(dir=os.path.dirname(dst), prefix=f".old-{os.path.basename(dst)}-")
    os.rmdir(old)
    os.replace(dst, old)
    try:
        os.replace(src, dst)
    except BaseException:
        os.replace(old, dst)
        raise
    shutil.rmtree(old, ignore_errors=True)
