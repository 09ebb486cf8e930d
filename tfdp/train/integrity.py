"""A run's files checked against its checkpoint, and the checkpoint a resume starts from.

The checkpoint is the run's private record: with the model it stores the run's secret key,
the ledger as charged when it was written (`ledger_state`) and the run's configuration with
its sha256 digest (`run_config`). On resume, config.json and ledger.json are compared with
them and an edited field is refused, naming the field and both values. A resume starts
from the newest checkpoint whose files read back completely (a truncated or corrupt newer
one is skipped and named). See docs/ledger.md ("Resume, replay and edited files").
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
import shutil
from typing import Any, Iterable, Mapping, Optional

import tensorflow as tf

from tfdp import onednn

__all__ = ["CONFIG_STATE", "PLATFORM_KEY", "platform_record", "config_record",
           "read_config_record", "first_difference", "config_edit", "replay_differences",
           "readable_checkpoints", "remove_temp_files", "clean_error_text",
           "checkpoint_names", "first_line", "choose_checkpoint",
           "check_config_against_checkpoint"]

# Checkpoint name of the run's configuration record.
CONFIG_STATE = "run_config"

# config.json's record of the machine and TensorFlow build of the process that last trained
# (`platform_record`); a resume on another platform charges the replayed steps again.
PLATFORM_KEY = "platform"
# config.json keys a resume rewrites (besides the method's resume-mutable flags): the resume
# history, the device split, the platform and the flags of the latest segment (checked key by
# key below).
_RESUME_WRITTEN = ("resumes", "num_replicas", "cpu_replicas", "strategy",
                   "noise_kernel_fallback", PLATFORM_KEY)
# CPU features that select different arithmetic kernels in oneDNN / Eigen (vector widths,
# fused multiply-add, reduced-precision units): two CPUs that differ in one of them may
# round differently.
_CPU_FEATURES = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw",
                 "avx512dq", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                 "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve", "sve2")
# Entries the run rewrites after every epoch from the model's state (a method's
# `epoch_config_updates`, e.g. StoBatch's certification), also between checkpoints; they do
# not enter the accounting.
_REFRESHED = ("certification",)
# Flags (config.json "flags") that steer only how a run executes; a resume may change them.
_CONTROL_FLAGS = ("model_dir", "strategy", "cpu_replicas", "checkpoint_every", "noise_kernel",
                  "data_dir", "num_test", "stop_after_epochs", "verbose")
# Settings that do not change what a step computes: a resume that differs from the stopped
# process only in these replays its steps bit for bit.
# (noise_seed: the key itself comes from the checkpoint; noise_kernel_fallback: a message,
# the kernel used is flags.noise_kernel.)
_REPLAY_NEUTRAL = ("epochs", "resumes", "data_dir", "data_dir_source", "num_test",
                   "certification", "noise_seed", "noise_kernel_fallback", "flags.epochs",
                   "flags.checkpoint_every", "flags.data_dir", "flags.num_test",
                   "flags.model_dir", "flags.stop_after_epochs", "flags.verbose")


def _cpu_info() -> tuple[str, list[str]]:
    """(CPU model name, the `_CPU_FEATURES` it has) from /proc/cpuinfo, else `platform`."""
    model, flags = "", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key in ("model name", "cpu model", "hardware") and not model:
                    model = value.strip()
                elif key in ("flags", "features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return model or platform.processor() or platform.machine(), sorted(
        f for f in _CPU_FEATURES if f in flags)


def platform_record() -> dict:
    """What decides the training step's floating-point arithmetic besides the run's settings:
    the CPU model and vector features, the logical CPUs this process may use (the kernels'
    parallel splits), TensorFlow's version and build, the oneDNN switch, the thread-pool
    settings and the accelerators. Two processes with the same record replay a step bit for
    bit (tests/train/test_determinism.py); one that differs is not known to
    (docs/ledger.md, "Resume, replay and charging each step once")."""
    model, features = _cpu_info()
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 0
    accelerators = []
    for device in tf.config.list_physical_devices():
        if device.device_type == "CPU":
            continue
        try:
            details = tf.config.experimental.get_device_details(device)
        except (ValueError, RuntimeError):
            details = {}
        accelerators.append(f"{device.device_type}:{details.get('device_name', '?')}:"
                            f"{details.get('compute_capability', '')}")
    return {"cpu": model, "cpu_features": features, "logical_cpus": int(cpus),
            "tensorflow": tf.__version__, "tensorflow_build": tf.version.GIT_VERSION,
            "onednn": onednn.state(),
            "intra_op_threads": int(tf.config.threading.get_intra_op_parallelism_threads()),
            "inter_op_threads": int(tf.config.threading.get_inter_op_parallelism_threads()),
            "accelerators": accelerators}


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, allow_nan=True)


def config_record(config: Mapping[str, Any]) -> bytes:
    """The checkpoint's record of a run configuration: its JSON with a sha256 digest."""
    text = _canonical(dict(config))
    return _canonical({"config": json.loads(text),
                       "sha256": hashlib.sha256(text.encode()).hexdigest()}).encode()


def read_config_record(value: bytes, path: str) -> dict:
    """The configuration stored by `config_record`.

    Raises:
      ValueError: naming `path` when the record is not valid JSON or fails its digest.
    """
    try:
        record = json.loads(value.decode("utf-8"))
        config = record["config"]
        digest = record["sha256"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise ValueError(f"{path}: the run configuration stored in the checkpoint is "
                         "corrupt") from None
    if hashlib.sha256(_canonical(config).encode()).hexdigest() != digest:
        raise ValueError(f"{path}: the run configuration stored in the checkpoint fails its "
                         "sha256 digest (corrupt)")
    return config


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, float) or isinstance(b, float):
            if math.isnan(a) or math.isnan(b):
                return math.isnan(a) and math.isnan(b)
            return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)
        return a == b
    return a == b


def first_difference(a: Any, b: Any, path: str = "",
                     ignore: Iterable[str] = ()) -> Optional[tuple[str, Any, Any]]:
    """The first field (a dotted path, list items as `[i]` or `[name]`) where `a` and `b`
    differ, with both values; None when they agree. Paths in `ignore` are skipped.

    Lists of dicts that all carry a "name" (ledger entries) are compared by name.
    """
    ignore = tuple(ignore)
    if path in ignore:
        return None
    missing = "(missing)"
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                if sub not in ignore:
                    return sub, a.get(key, missing), b.get(key, missing)
                continue
            found = first_difference(a[key], b[key], sub, ignore)
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        named = all(isinstance(x, dict) and "name" in x for x in a + b)
        if named:
            da, db = {x["name"]: x for x in a}, {x["name"]: x for x in b}
            if list(da) != list(db):
                return path, [x["name"] for x in a], [x["name"] for x in b]
            for name in da:
                found = first_difference(da[name], db[name], f"{path}[{name}]", ignore)
                if found:
                    return found
            return None
        if len(a) != len(b):
            return path, a, b
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{i}]", ignore)
            if found:
                return found
        return None
    return None if _same_value(a, b) else (path, a, b)


def short(value: Any, limit: int = 120) -> str:
    text = _canonical(value) if isinstance(value, (dict, list)) else repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def config_edit(on_disk: Mapping[str, Any], recorded: Mapping[str, Any],
                mutable: Iterable[str]) -> Optional[tuple[str, Any, Any]]:
    """The first field where config.json differs from the checkpoint's record of it.

    config.json must be the record, except after a resume that stopped before its first
    checkpoint: that resume appended its entry to "resumes" and may have rewritten the
    device split, the flags it changed and the method's resume-mutable settings (which must
    then be the ones its "resumes" entry names).

    Returns:
      (field, value in config.json, value in the checkpoint), or None.
    """
    disk, rec = dict(on_disk), dict(recorded)
    mutable = tuple(mutable)
    old_resumes = rec.get("resumes") or []
    new_resumes = disk.get("resumes") or []
    if not (isinstance(new_resumes, list) and len(new_resumes) > len(old_resumes)
            and new_resumes[:len(old_resumes)] == old_resumes):
        return first_difference(disk, rec, ignore=_REFRESHED)
    last = new_resumes[-1] if isinstance(new_resumes[-1], dict) else {}
    for key in mutable:
        if key in last and key in disk and not _same_value(disk[key], last[key]):
            return key, disk[key], last[key]
    ignore = (list(_REFRESHED) + list(_RESUME_WRITTEN) + list(mutable)
              + [f"flags.{k}" for k in tuple(_CONTROL_FLAGS) + mutable])
    return first_difference(disk, rec, ignore=ignore)


def config_edit_message(path: str, checkpoint: str, diff: tuple[str, Any, Any]) -> str:
    """One line refusing an edited config.json."""
    field, disk, ckpt = diff
    return (f"resume: {path} was edited: {field} is {short(disk)} there but "
            f"{short(ckpt)} in the run's checkpoint {checkpoint} (which decides the "
            "accounting); restore the value, or start a new run to change it")


def replay_differences(previous: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Settings in which a resume differs from the process that ran after its checkpoint.

    `previous` is config.json as that process wrote it, `current` the resume's configuration.
    An empty list means every step after the checkpoint is recomputed with the same lots,
    noise, devices and hyperparameters, on the same platform (`platform_record`); a
    platform difference is named with both values, and a stopped process that recorded no
    platform (a run from before it was recorded) counts as a difference.
    """
    out = []
    ignore = list(_REPLAY_NEUTRAL)
    prev, cur = dict(previous), dict(current)
    while True:
        diff = first_difference(prev, cur, ignore=ignore)
        if diff is None:
            return out
        field, then, now = diff
        if field == PLATFORM_KEY and PLATFORM_KEY not in prev:
            out.append("the platform that ran them is not recorded (a run from an older tfdp)")
        elif field.split(".")[0] == PLATFORM_KEY:
            out.append(f"another platform: {field} {short(then, 60)} then, {short(now, 60)} now")
        else:
            out.append(field)
        ignore.append(field)


def readable_checkpoints(ckpt_dir: str) -> tuple[Optional[str], list[tuple[str, str]]]:
    """(newest checkpoint whose every tensor reads back, [(newer damaged one, reason)]).

    The first element is None when no checkpoint reads back.
    """
    state = tf.train.get_checkpoint_state(ckpt_dir)
    paths = list(state.all_model_checkpoint_paths) if state else []
    latest = tf.train.latest_checkpoint(ckpt_dir)
    if latest and latest not in paths:
        paths.append(latest)
    paths = [p if os.path.isabs(p) else os.path.join(ckpt_dir, p) for p in paths]
    damaged = []
    for path in reversed(paths):
        reason = _unreadable(path)
        if reason is None:
            return path, damaged
        damaged.append((path, reason))
    return None, damaged


def _unreadable(path: str) -> Optional[str]:
    """Why the checkpoint at `path` cannot be read back completely (None: it can)."""
    try:
        reader = tf.train.load_checkpoint(path)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except (tf.errors.OpError, ValueError, IndexError, OSError) as e:
        return clean_error_text(e)
    return None


def remove_temp_files(ckpt_dir: str) -> list[str]:
    """Removes what a failed checkpoint write leaves (`ckpt-N_temp` folders, `*.tempstate*`).

    Returns:
      The removed paths.
    """
    removed = []
    if not os.path.isdir(ckpt_dir):
        return removed
    for name in sorted(os.listdir(ckpt_dir)):
        path = os.path.join(ckpt_dir, name)
        if re.search(r"_temp($|[/_.-])", name) or ".tempstate" in name:
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.remove(path)
                except OSError:
                    continue
            removed.append(path)
    return removed


def clean_error_text(e: BaseException) -> str:
    """The first line of an error without TensorFlow's internals (`{{function_node ...}}`,
    `[Op:...]`)."""
    text = str(getattr(e, "message", None) or e).strip()
    line = text.splitlines()[0] if text else type(e).__name__
    line = re.sub(r"\{\{[^}]*\}\}\s*", "", line)
    line = re.sub(r"\s*\[Op:[^\]]*\]", "", line).strip()
    return line or type(e).__name__


def first_line(e: BaseException) -> str:
    """The first line of an error's message (its type's name when it has none)."""
    text = str(getattr(e, "message", None) or e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def checkpoint_names(latest: str | None) -> set[str]:
    """Top-level object names in a checkpoint (e.g. "step", "run_secret").

    Raises:
      ValueError: naming the checkpoint when it is missing, truncated or corrupt.
    """
    if not latest:
        raise ValueError("resume: the run directory holds no checkpoint")
    try:
        return {name.split("/")[0] for name, _ in tf.train.list_variables(latest)}
    except (tf.errors.OpError, ValueError, IndexError) as e:
        raise ValueError(f"{latest}: cannot read the checkpoint ({first_line(e)})") from None


def choose_checkpoint(ckpt_dir: str) -> tuple[str, Optional[dict]]:
    """The newest checkpoint that reads back completely, and what a fallback skipped.

    Returns:
      (checkpoint path, None), or when newer checkpoints are damaged (the older intact
      checkpoint, {"checkpoint": path, "step": its step, "damaged": [newer paths]}).

    Raises:
      ValueError: when the folder holds no checkpoint, or naming the newest checkpoint when
        none reads back.
    """
    latest = tf.train.latest_checkpoint(ckpt_dir)
    if not latest:
        raise ValueError("resume: the run directory holds no checkpoint")
    chosen, damaged = readable_checkpoints(ckpt_dir)
    if chosen is None:
        path, reason = damaged[0] if damaged else (latest, "unreadable")
        raise ValueError(f"{path}: cannot read the checkpoint ({reason}); no older intact "
                         "checkpoint is left to resume from")
    if not damaged:
        return chosen, None
    step = tf.train.load_checkpoint(chosen).get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE")
    return chosen, {"checkpoint": chosen, "step": int(step), "damaged": [p for p, _ in damaged],
                    "reason": damaged[0][1]}


def check_config_against_checkpoint(latest: str, stored_config: Mapping[str, Any],
                                    config_path: str, mutable: Iterable[str]) -> bool:
    """Refuses a config.json that differs from the record in the checkpoint.

    Args:
      latest: the checkpoint a resume starts from.
      stored_config: config.json as read.
      config_path: config.json's path (named in the error).
      mutable: the method's `resume_mutable_flags`.

    Returns:
      False when the checkpoint was written before the configuration was stored with it
      (nothing to compare), True when config.json matches the record.

    Raises:
      ValueError: naming the file, the edited field and both values; or the checkpoint
        when its record cannot be read.
    """
    if CONFIG_STATE not in checkpoint_names(latest):
        return False
    var = tf.Variable(b"", dtype=tf.string, trainable=False)
    try:
        tf.train.Checkpoint(**{CONFIG_STATE: var}).restore(latest).expect_partial()
    except (tf.errors.OpError, ValueError, IndexError) as e:
        raise ValueError(f"{latest}: cannot read the checkpoint ({first_line(e)})") from None
    recorded = read_config_record(var.numpy(), latest)
    on_disk = dict(stored_config)
    if "data_sha256" not in recorded:  # moved to the private state (issue 40), checked there
        on_disk.pop("data_sha256", None)
    diff = config_edit(on_disk, recorded, tuple(mutable))
    if diff is not None:
        raise ValueError(config_edit_message(config_path, latest, diff))
    return True
