"""A copy of a run directory holding only what may be published (`tfdp-publish`).

A run directory mixes public results with private state: the checkpoint folder holds the
run's secret key (every noise draw derives from it), the hash of the training arrays and
the non-private training statistics; metrics.json and the TensorBoard logs carry training
loss and accuracy computed without privacy; config.json may carry statistics fitted on the
training data (e.g. Secure-SGD's pre-training accuracy) and local paths. `publish_run`
writes a new directory with:

* model.keras, byte for byte (it is saved without seeds, `tfdp.rundir.save_model`);
* config.json, ledger.json, evaluation.json and metrics.json, each filtered by the model
  card's allow-list (`tfdp.export.card_allow_list`): a key not listed is dropped, so no
  training statistic, seed, data hash or path is copied; metrics.json keeps the test
  accuracy and the run's progress counters only;
* flags.txt with the public flags only (no seed, path or run control);
* certificates.tsv and tfdp-evaluate's plot (computed on the test split only);
* published.json: what was copied and what was withheld.

Everything else (checkpoints/, logs/, workers/, saved_model/, the lock) stays behind. The
copy is written to a temporary folder beside the destination and renamed into place, so
the destination either does not exist or holds the complete copy; an existing non-empty
destination is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any, Mapping

from tfdp import rundir

PUBLISHED_FILE = "published.json"
FORMAT = "tfdp-publish/1"
# metrics.json fields that are not training statistics: the test accuracy (the card's
# allow-list) and the run's progress counters.
_METRICS_PROGRESS = ("epochs_completed", "steps", "stopped_early")
_FLAGS_HEADER = ("# Published copy of a run's flags: the public hyper-parameters only. The seed, "
                 "local paths and run controls\n# are left out; train again with --flagfile="
                 "flags.txt --model_dir=<new directory> (the noise then comes from OS "
                 "entropy).\n")
# Copied byte for byte: the model (saved without seeds), the per-test-example certificates
# and tfdp-evaluate's plot (tfdp.evaluate.PLOT_FILE; test-set accuracies only).
_COPIED_AS_IS = (rundir.MODEL_FILE, rundir.CERTIFICATES_FILE, "accuracy_vs_attack_size.png")


def _read_json(path: str) -> Any:
    return rundir.read_json(path)


def _dump(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8")


def check_out_dir(out: str) -> str:
    """Absolute destination path; refuses an existing file or non-empty directory.

    Raises:
        ValueError: naming `out`.
    """
    if not out:
        raise ValueError("out: a destination directory is required")
    path = os.path.abspath(os.path.expanduser(out))
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"out: {path} exists and is not a directory")
    if os.path.isdir(path) and os.listdir(path):
        raise ValueError(f"out: {path} exists and is not empty; tfdp-publish never overwrites, "
                         "choose a new directory")
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise ValueError(f"out: the parent folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"out: {parent} is not writable")
    return path


def check_run(model_dir: str) -> str:
    """Absolute path of a finished run directory (config.json, ledger.json, model.keras).

    Raises:
        ValueError: naming model_dir and the missing file.
    """
    if not model_dir:
        raise ValueError("model_dir: a run directory is required")
    path = os.path.abspath(os.path.expanduser(model_dir))
    if not os.path.isdir(path):
        raise ValueError(f"model_dir: {path} is not a directory")
    for name in (rundir.CONFIG_FILE, rundir.LEDGER_FILE, rundir.MODEL_FILE):
        if not os.path.isfile(os.path.join(path, name)):
            raise ValueError(f"model_dir: {path} has no {name} (only a finished run, one with "
                             "model.keras, is published)")
    return path


def public_files(model_dir: str, allow: Mapping[str, Any]) -> dict[str, bytes]:
    """The published files of a run: name -> content.

    Args:
        model_dir: a finished run directory.
        allow: the allow-list (`tfdp.export.card_allow_list` of the run's method).

    Returns:
        file name -> bytes, for every file of the copy except published.json.
    """
    # lazy: tfdp.export loads tensorflow; importing tfdp.publish does not
    from tfdp import export  # pylint: disable=import-outside-toplevel
    run = rundir.RunDir(model_dir)
    out: dict[str, bytes] = {}
    config = _read_json(run.file(rundir.CONFIG_FILE))
    config_spec = {**allow["run"], "options": allow["options"],
                   "certification": allow["certification"]}
    out[rundir.CONFIG_FILE] = _dump(export.apply_allow_list(config, config_spec))
    out[rundir.LEDGER_FILE] = _dump(export.apply_allow_list(
        _read_json(run.file(rundir.LEDGER_FILE)), allow["ledger"]))
    if run.exists(rundir.METRICS_FILE):
        metrics_spec = {**allow["test"], **{k: export.ANY for k in _METRICS_PROGRESS}}
        out[rundir.METRICS_FILE] = _dump(export.apply_allow_list(
            _read_json(run.file(rundir.METRICS_FILE)), metrics_spec))
    if run.exists(rundir.EVALUATION_FILE):
        out[rundir.EVALUATION_FILE] = _dump(export.apply_allow_list(
            _read_json(run.file(rundir.EVALUATION_FILE)), allow["evaluation"]))
    if run.exists(rundir.FLAGS_FILE):
        with open(run.file(rundir.FLAGS_FILE), encoding="utf-8") as f:
            lines = export.apply_allow_list(
                [ln.strip() for ln in f.read().splitlines() if ln.strip().startswith("--")],
                allow["flags"])
        out[rundir.FLAGS_FILE] = (_FLAGS_HEADER + "".join(f"{ln}\n" for ln in lines)).encode()
    for name in _COPIED_AS_IS:
        if run.exists(name):
            with open(run.file(name), "rb") as f:
                out[name] = f.read()
    return out


def publish_run(model_dir: str, out: str) -> dict:
    """Writes the publishable copy of run `model_dir` to the new directory `out`.

    Args:
        model_dir: a finished run directory.
        out: the destination; must not exist or be an empty directory.

    Returns:
        the manifest written as published.json (files copied, names withheld).

    Raises:
        ValueError: naming the argument (not a finished run; destination not empty).
        OSError: when the copy cannot be written (nothing is left behind).
    """
    src = check_run(model_dir)
    dst = check_out_dir(out)
    if dst == src or dst.startswith(src + os.sep):
        raise ValueError(f"out: {dst} is inside the run directory {src}; publish elsewhere")
    # lazy: tfdp.export loads tensorflow; importing tfdp.publish does not
    from tfdp import export  # pylint: disable=import-outside-toplevel
    config = _read_json(os.path.join(src, rundir.CONFIG_FILE))
    files = public_files(src, export.card_allow_list(config.get("method")))
    withheld = sorted(n for n in rundir.result_files(src) if n not in files)
    manifest = {
        "format": FORMAT,
        "files": sorted(files),
        "withheld": withheld,
        "note": ("a copy of a tfdp run holding only what may be published: no checkpoint, "
                 "seed, training statistic, data hash, TensorBoard log or local path; JSON "
                 "files filtered by the model card's allow-list"),
    }
    files[PUBLISHED_FILE] = _dump(manifest)
    tmp = tempfile.mkdtemp(dir=os.path.dirname(dst), prefix=f".tmp-{os.path.basename(dst)}-")
    try:
        for name, blob in files.items():
            rundir.atomic_write_bytes(os.path.join(tmp, name), blob)
        os.chmod(tmp, 0o755)
        if os.path.isdir(dst):
            os.rmdir(dst)  # empty (checked above); rmdir fails if something appeared since
        os.rename(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest
