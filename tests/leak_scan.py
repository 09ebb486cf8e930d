"""Scans run directories and exports for a run's secret seed and values derived from it.

Used by the tests of issue 22 ("nothing computed from the training data leaves a run except
through the ledger"). The secret is read from the run's checkpoint (its private state); the
derived values are recomputed the way `tfdp.train.loop` derives them; every file outside the
checkpoint folder (and every file of an export) is then searched for the values as decimal
text, hex text and little-endian 64-bit words.
"""

from __future__ import annotations

import os
from typing import Iterable

import numpy as np
import tensorflow as tf

from tfdp import rundir
from tfdp.train import loop
from tfdp.train.base import derive_seed

_MASK64 = (1 << 64) - 1


def run_secret(model_dir: str) -> tuple[int, bool]:
    """(run key, user supplied) from the latest checkpoint of `model_dir`."""
    latest = tf.train.latest_checkpoint(rundir.checkpoint_dir(model_dir))
    assert latest, f"no checkpoint in {model_dir}"
    var = tf.Variable(b"", dtype=tf.string)
    tf.train.Checkpoint(run_secret=var).restore(latest).expect_partial()
    return loop._decode_secret(var.numpy(), latest)  # pylint: disable=protected-access


def derived_values(key: int, epochs: int = 4, steps: int = 8) -> list[int]:
    """The run key and every seed the loop derives from it (streams, epochs, layers, steps)."""
    values = [key]
    for stream in range(1, 9):
        for index in range(epochs + 1):
            values.append(derive_seed(key, stream, index))
            values.append(derive_seed(key, stream, index, bits=63))
            values.append(derive_seed(key, stream, index, bits=31))
    for bits in (63, 128):  # the noise layers' key (128 bits; 63 before issue 22's last item)
        layer = derive_seed(key, 7, bits=bits)
        values.append(layer)
        hgm_words = np.random.SeedSequence([layer, 11]).generate_state(2, np.uint64)
        values.append(int(hgm_words[0] >> 1))
        values.append((int(hgm_words[0]) << 64) | int(hgm_words[1]))  # Secure-SGD's layer key
        values.extend(int(w) for w in hgm_words)
        values.append(int(np.random.SeedSequence([layer, 7]).generate_state(1, np.uint32)[0] >> 1))
    gen = tf.random.Generator.from_seed(derive_seed(key, 5))
    for s in gen.make_seeds(steps).numpy().T:
        values.extend(int(v) for v in s)
    return values


def patterns(values: Iterable[int], min_digits: int = 7) -> dict[bytes, str]:
    """Byte patterns that reveal any of `values`: decimal and hex text, 64-bit LE words."""
    out: dict[bytes, str] = {}
    for v in values:
        words = []
        rest = int(v) & _MASK64 if v < 0 else int(v)  # an int64 stands for its 64-bit word
        while True:
            words.append(rest & _MASK64)
            rest >>= 64
            if not rest:
                break
        candidates = {int(v), *words}
        for w in candidates:
            signed = w - (1 << 64) if w >= 1 << 63 else w
            for text in {str(w), str(signed), format(w, "x")}:
                if len(text.lstrip("-")) >= min_digits:
                    out[text.encode()] = f"{v} as text {text}"
            if (1 << 24) <= w <= _MASK64:
                out[int(w).to_bytes(8, "little")] = f"{v} as 64-bit word {w}"
    return out


def public_files(model_dir: str) -> list[str]:
    """Every file of a run directory outside its private checkpoint folder."""
    ckpt = os.path.abspath(rundir.checkpoint_dir(model_dir))
    out = []
    for root, _, files in os.walk(model_dir):
        if os.path.abspath(root).startswith(ckpt):
            continue
        out += [os.path.join(root, f) for f in files if f != ".lock"]
    return out


def all_files(directory: str) -> list[str]:
    return [os.path.join(r, f) for r, _, fs in os.walk(directory) for f in fs]


def find(paths: Iterable[str], pats: dict[bytes, str]) -> list[str]:
    """'path: what' for every pattern found in a file."""
    hits = []
    for path in paths:
        with open(path, "rb") as f:
            blob = f.read()
        hits += [f"{path}: {what}" for pat, what in pats.items() if pat in blob]
    return hits


def _floats(obj) -> list[float]:
    """Every float of a JSON value (at any depth)."""
    if isinstance(obj, dict):
        return [f for v in obj.values() for f in _floats(v)]
    if isinstance(obj, list):
        return [f for v in obj for f in _floats(v)]
    if isinstance(obj, float):
        return [obj]
    return []


def training_statistics(model_dir: str) -> list[float]:
    """The run's non-private training statistics (issue 40): the marked statistics of
    metrics.json and checkpoints/segments.json, and Secure-SGD's r statistics in config.json."""
    stats: list[float] = []
    for path in (os.path.join(model_dir, rundir.METRICS_FILE),
                 os.path.join(rundir.checkpoint_dir(model_dir), rundir.SEGMENTS_FILE)):
        if os.path.exists(path):
            stats += _floats(rundir.read_json(path).get(loop.NONPRIVATE_STATS_KEY))
    config = rundir.read_json(os.path.join(model_dir, rundir.CONFIG_FILE))
    r_stats = (config.get("certification") or {}).get("r_stats") or {}
    stats += _floats({k: v for k, v in r_stats.items()
                      if k in ("pretrain_train_accuracy", "r_min_times_K", "r_max_times_K")})
    return stats


def statistic_patterns(values: Iterable[float], min_chars: int = 8) -> dict[bytes, str]:
    """Text patterns of training statistics: the JSON text of each float with enough digits
    not to occur by chance, and its first 6 significant digits (a rounded copy)."""
    out: dict[bytes, str] = {}
    for v in values:
        text = repr(float(v))
        if len(text.lstrip("-0.")) >= min_chars - 2:
            out[text.encode()] = f"statistic {text}"
            out[format(float(v), ".6g").encode()] = f"statistic {text} (6 digits)"
    return out


def data_hash_patterns(model_dir: str) -> dict[bytes, str]:
    """The hash of the training arrays (checkpoints/private_state.json), as hex text (full
    and its first 12 characters, what a resume error shows) and as raw bytes."""
    path = os.path.join(rundir.checkpoint_dir(model_dir), rundir.PRIVATE_STATE_FILE)
    digest = rundir.read_json(path)["data_sha256"]
    return {digest.encode(): "data_sha256", digest[:12].encode(): "data_sha256 prefix",
            bytes.fromhex(digest): "data_sha256 bytes"}
