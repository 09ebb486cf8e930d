"""The run directory: every file a run writes lives under one folder."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import tempfile
import time
from typing import Any

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
