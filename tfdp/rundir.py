"""The run directory: every file a run writes lives under one folder."""

from __future__ import annotations

import contextlib
import hashlib
import errno
import fcntl
import json
import os
import socket
import tempfile
import time
import zipfile
from typing import Any, Iterator
import shutil
import io
import numpy as np
import secrets

# File names inside a run directory (DESIGN.md "A run is a directory").
FLAGS_FILE = "flags.txt"
CONFIG_FILE = "config.json"
LEDGER_FILE = "ledger.json"
METRICS_FILE = "metrics.json"
EVALUATION_FILE = "evaluation.json"
CERTIFICATES_FILE = "certificates.tsv"
MODEL_FILE = "model.keras"
CHECKPOINT_DIR = "checkpoints"
TENSORBOARD_DIR = "logs"
SAVED_MODEL_DIR = "saved_model"
LOCK_FILE = ".lock"
# Permissions of result files (what Keras gives model.keras under the usual umask 022).
FILE_MODE = 0o644


class RunDir:
    """Paths and atomic JSON I/O for one run directory.

    Args:
        path: the directory.
        create: create it if missing.
    """

    def __init__(self, path: str, create: bool = False):
        if not path:
            raise ValueError("model_dir: a run directory path is required")
        self.path = os.path.abspath(os.path.expanduser(path))
        if create:
            os.makedirs(self.path, exist_ok=True)

    def file(self, name: str) -> str:
        """Absolute path of `name` inside the run directory."""
        return os.path.join(self.path, name)

    def exists(self, name: str) -> bool:
        return os.path.exists(self.file(name))

    def write_json(self, name: str, obj: Any) -> str:
        """Writes `obj` as JSON atomically (temp file + rename); returns the path."""
        return write_json_atomic(self.file(name), obj)

    def read_json(self, name: str) -> Any:
        """Reads JSON file `name`.

        Raises:
            ValueError: naming the file when it is missing, unreadable or not valid JSON.
        """
        return read_json(self.file(name))

    def write_text(self, name: str, text: str) -> str:
        path = self.file(name)
        _atomic_write(path, text)
        return path


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str, data: bytes, mode: int = FILE_MODE) -> None:
    """Writes `data` to `path` atomically: temp file in the same folder, fsync, rename.

    A crash at any point leaves either the previous file or the new one, never a half-written
    file; the file gets permissions `mode` (0644).
    """
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        _fsync_dir(directory)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _atomic_write(path: str, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json_atomic(path: str, obj: Any) -> str:
    """Writes JSON to `path` atomically (temp file, fsync, rename; mode 0644); returns path."""
    _atomic_write(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")
    return path


def check_output_file(path: str, flag: str) -> str:
    """Absolute path of a file a command will write at its end, checked before any work.

    Missing parent folders are fine (the writer creates them); an existing directory at
    `path`, or a nearest existing ancestor that is not a writable directory, is refused.

    Raises:
      ValueError: naming `flag`.
    """
    full = os.path.abspath(os.path.expanduser(path))
    if os.path.isdir(full):
        raise ValueError(f"{flag}: {path} is a directory; give a file name (e.g. result.json)")
    probe = os.path.dirname(full)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise ValueError(f"{flag}: {probe} is a file, so {path} cannot be created")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"{flag}: {probe} is not writable")
    return full


def read_json(path: str) -> Any:
    """Reads a JSON result file.

    Raises:
        ValueError: naming `path` when it is missing, unreadable or not valid JSON.
    """
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{path}: file is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: corrupt or unreadable ({e})") from None


class RunDirLocked(ValueError):
    """Another live process holds the run directory's lock."""


class RunLock:
    """Exclusive lock on a run directory, held for the life of a run (train or evaluate).

    The lock is an advisory `flock` on `<dir>/.lock`, taken atomically: exactly one process
    gets it. The kernel releases it when the holder exits, however it exits, so a lock file
    left by a killed process is stale and is simply taken over. The file records the holder
    (pid, host, start time) for the error message of the process that is refused.

    Args:
        path: the run directory (created if missing).
    """

    def __init__(self, path: str):
        self.path = os.path.abspath(os.path.expanduser(path))
        self.lock_path = os.path.join(self.path, LOCK_FILE)
        self._fd: int | None = None
        self.created_dir = False

    def acquire(self) -> "RunLock":
        """Takes the lock.

        Raises:
            RunDirLocked: when another live process holds it (names its pid).
            ValueError: when the directory cannot be created or written.
        """
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise ValueError(f"model_dir: {self.path} exists and is not a directory")
        self.created_dir = not os.path.exists(self.path)
        try:
            os.makedirs(self.path, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        except OSError as e:
            raise ValueError(f"model_dir: cannot create or write {self.path} ({e.strerror})"
                             ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            raise RunDirLocked(f"model_dir: {self.path} is in use by {self._holder()}; wait for "
                               "it to finish or choose another --model_dir") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.time()}).encode())
        os.fsync(fd)
        self._fd = fd
        return self

    def _holder(self) -> str:
        for _ in range(20):  # the holder writes its pid right after taking the lock
            try:
                with open(self.lock_path, encoding="utf-8") as f:
                    info = json.loads(f.read() or "null")
            except (OSError, ValueError):
                info = None
            if info:
                return f"process {info.get('pid')} on {info.get('host')}"
            time.sleep(0.05)
        return "another process (pid not yet recorded)"

    def release(self) -> None:
        """Releases the lock (the lock file stays; it is stale once released)."""
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, 0)
            except OSError:
                pass
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def discard(self) -> None:
        """Releases the lock and removes the lock file, and the directory if this lock
        created it and it is otherwise empty (a run refused before any work)."""
        self.release()
        try:
            os.remove(self.lock_path)
            if self.created_dir and not os.listdir(self.path):
                os.rmdir(self.path)
        except OSError:
            pass

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def result_files(path: str) -> list[str]:
    """Names in run directory `path`, without the lock file."""
    if not os.path.isdir(path):
        return []
    return sorted(n for n in os.listdir(path) if n != LOCK_FILE)


def _json_default(o: Any) -> Any:
    # numpy scalars and arrays
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


# ------------------------------------------------------------------ run-directory rules

SETUP_STATE_FILE = "setup_state.npz"
SEGMENTS_FILE = "segments.json"
# Inside the checkpoint folder: the hash of the training arrays (issue 40), never published.
PRIVATE_STATE_FILE = "private_state.json"


def checkpoint_dir(path: str) -> str:
    """The checkpoint folder of run directory `path`."""
    return os.path.join(os.path.abspath(path), CHECKPOINT_DIR)


def has_checkpoint(path: str) -> bool:
    """True when run directory `path` holds a checkpoint to resume from."""
    # lazy: loads tensorflow; importing tfdp.rundir does not
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf.train.latest_checkpoint(checkpoint_dir(path)) is not None


def clear_run_dir(path: str) -> None:
    """Deletes every result file of run directory `path` (its lock file stays)."""
    for name in result_files(path):
        full = os.path.join(path, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)
        else:
            os.remove(full)


def check_run_dir(model_dir: str, *, resume: bool, overwrite: bool = False,
                  epochs: int | None = None, flag_prefix: str = "") -> None:
    """Checks that `model_dir` can be used for a fresh run, a resume or an overwrite.

    Raises:
      ValueError: naming the flag, with the way out (e.g. --overwrite for a run that stopped
        before its first checkpoint).
    """
    p = flag_prefix
    if os.path.exists(model_dir) and not os.path.isdir(model_dir):
        raise ValueError(f"{p}model_dir: {model_dir} exists and is not a directory")
    probe = os.path.abspath(model_dir)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"{p}model_dir: {probe} is not writable")
    files = result_files(model_dir)
    ckpt = has_checkpoint(model_dir) if files else False
    finished = os.path.exists(os.path.join(model_dir, MODEL_FILE))
    if resume:
        if not os.path.isdir(model_dir):
            raise ValueError(f"{p}resume: run directory {model_dir} does not exist")
        if not ckpt:
            raise ValueError(f"{p}resume: run directory {model_dir} holds no checkpoint (the run "
                             "stopped before its first checkpoint); start it again with "
                             f"{p}overwrite")
        if overwrite:
            raise ValueError(f"{p}overwrite: cannot be combined with {p}resume")
        metrics_path = os.path.join(model_dir, METRICS_FILE)
        if finished and os.path.exists(metrics_path):
            done = read_json(metrics_path).get("epochs_completed")
            if epochs is not None and done is not None and int(done) >= int(epochs):
                raise ValueError(f"{p}resume: the run in {model_dir} is finished ({done} epochs; "
                                 f"model.keras and metrics.json written); pass a larger {p}epochs "
                                 "to train further")
        return
    if not files:
        return
    if overwrite:
        if ckpt or finished:
            raise ValueError(f"{p}overwrite: {model_dir} holds a checkpoint or a finished "
                             f"model; continue it with {p}resume or choose another "
                             f"{p}model_dir (it is never deleted)")
        return
    if ckpt or finished:
        raise ValueError(f"{p}model_dir: {model_dir} already exists and is not empty; pass "
                         f"{p}resume to continue that run or choose another directory")
    raise ValueError(f"{p}model_dir: {model_dir} already exists and is not empty, and holds no "
                     "checkpoint (a run stopped before its first checkpoint cannot be resumed); "
                     f"pass {p}overwrite to start it again there, or choose another directory")


def save_arrays(path: str, arrays: Any) -> None:
    """Writes a mapping name -> array as an .npz file, atomically."""
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    atomic_write_bytes(path, buf.getvalue())


def load_arrays(path: str) -> dict:
    """Reads an .npz file written by `save_arrays`.

    Raises:
      ValueError: naming the file when it is corrupt.
    """
    try:
        with np.load(path) as npz:
            return {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: corrupt setup state ({e})") from None


@contextlib.contextmanager
def _seeds_withheld(model: Any) -> Iterator[None]:
    """Within the block, `model` holds no seed of the run: a saved model is public.

    Every layer's `seed` attribute (written into the saved config) is None, and every Keras
    SeedGenerator state (saved with the weights) is a fresh OS-entropy value, so a saved
    model carries nothing from which the run's noise could be regenerated (issue 22). The
    in-memory model is restored afterwards.
    """
    layers = list(model._flatten_layers(include_self=True, recursive=True))  # pylint: disable=protected-access
    seeds, states = [], []
    try:
        for layer in layers:
            seed = vars(layer).get("seed")
            if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
                seeds.append((layer, seed))
                object.__setattr__(layer, "seed", None)
            for gen in getattr(layer, "_seed_generators", None) or []:
                state = gen.state
                old = np.asarray(state.numpy())
                states.append((state, old))
                fresh = np.zeros_like(old)
                fresh.flat[0] = secrets.randbits(31)
                state.assign(fresh)
        yield
    finally:
        for layer, seed in seeds:
            object.__setattr__(layer, "seed", seed)
        for state, old in states:
            state.assign(old)


def save_model(model: Any, path: str) -> None:
    """Saves a Keras model to `path` atomically (temp file, fsync, rename), without seeds.

    Layer seeds and SeedGenerator states are withheld (`_seeds_withheld`): they derive from
    the run's secret key, and model.keras is a public file.
    """
    directory = os.path.dirname(path)
    tmp = os.path.join(directory, f".tmp-{os.getpid()}-" + os.path.basename(path))
    try:
        with _seeds_withheld(model):
            model.save(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def model_file_problem(path: str) -> str | None:
    """Why the model file at `path` (model.keras, a zip archive) is corrupt; None when it
    reads back whole (every member's CRC checked) or does not exist."""
    if not os.path.exists(path):
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        return f"not a complete Keras archive: {e}"
    if bad is not None:
        return f"member {bad} fails its CRC check"
    return None


def corrupt_model_message(path: str, problem: str) -> str:
    """One line saying that model.keras is corrupt and what to do."""
    return (f"{path}: the model file is corrupt ({problem}); the run's checkpoint is not "
            "affected: restore the file from a copy, or rewrite it with tfdp-train --resume "
            f"--epochs=<more> --model_dir={os.path.dirname(path)}")


def file_sha256(path: str) -> str:
    """The sha256 hex digest of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
