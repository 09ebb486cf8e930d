"""glibc malloc settings for tfdp's command-line processes: freed memory is kept for reuse.

TensorFlow's CPU allocator takes every tensor from the C library's `malloc` and frees it when
the step no longer needs it. glibc serves a request above its mmap threshold (at most 32 MiB)
with a fresh `mmap` and unmaps it on `free`, so a step whose tensors are that large (the first
layer's output for a StoBatch lot of 2,499 MNIST images is 63 MB) faults every page of them in
again, zeroed by the kernel, at every step. On a 2-core AMD EPYC virtual machine a StoBatch run
spent 40% of its CPU time in the kernel, and `tfdp-bench allocator` measured StoBatch's and
DP-SGD's steps 1.6 and 1.9 times faster with the memory kept (docs/performance.md).

`keep_freed_memory` turns that off for the process: no request is served by `mmap`
(M_MMAP_MAX = 0), and the heap is never trimmed back to the kernel below 2 GiB of free top
memory (M_TRIM_THRESHOLD), so a freed tensor's pages are reused by the next one of its size.
The process's resident memory stays at its peak instead of falling between steps; the
arithmetic is unchanged (which address a tensor gets does not change what is computed:
tests/test_allocator.py trains the same run under both settings and compares the weights).

Every tfdp command calls it before importing TensorFlow (`tfdp.apps.cli.import_tensorflow`);
a user's own script can call it first thing. ``TFDP_MALLOC=glibc`` in the environment keeps
glibc's defaults (as do platforms other than glibc's Linux, where this does nothing).
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["ENV", "keep_freed_memory", "state"]

ENV = "TFDP_MALLOC"  # "glibc": leave glibc's own settings

# mallopt parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_MAX = -4
_TRIM_THRESHOLD = 2**31 - 1        # bytes of free top memory before the heap is trimmed
_TOP_PAD = 256 * 2**20             # bytes added to each heap extension

_STATE = {"mode": "glibc"}


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # pylint: disable=pointless-statement  # glibc, not musl
        return libc
    except (OSError, AttributeError):
        return None


def keep_freed_memory() -> bool:
    """Keeps freed memory in the process for reuse (see the module docstring); idempotent.

    Returns:
      True if the settings are in force in this process, False where they were never applied
      (``TFDP_MALLOC=glibc`` from the start, or a C library other than glibc).

    Raises:
      ValueError: if ``TFDP_MALLOC`` is set to anything but "glibc" or "keep".
    """
    choice = os.environ.get(ENV, "keep").strip().lower() or "keep"
    if choice not in ("keep", "glibc"):
        raise ValueError(f"{ENV}: expected 'keep' (the default) or 'glibc', got "
                         f"{os.environ[ENV]!r}")
    if choice == "glibc" or _STATE["mode"] == "keep":
        return _STATE["mode"] == "keep"  # (an earlier call's settings stay in force)
    libc = _libc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = (mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD) == 1
          and mallopt(_M_TOP_PAD, _TOP_PAD) == 1)
    if ok:
        _STATE["mode"] = "keep"
    return ok


def state() -> str:
    """"keep" once `keep_freed_memory` is in force in this process, else "glibc"."""
    return _STATE["mode"]
