"""Optional compiled kernels, built on this machine on first use.

`load()` compiles `noise_kernel.cc` against the installed TensorFlow with the system C++
compiler (g++ by default, `CXX` to change it) into a cache directory keyed by the source,
the TensorFlow version, the compiler flags and the CPU, then loads it. tfdp-train's default
`--noise_kernel=auto` uses it wherever it builds and falls back to the portable kernel
elsewhere, recording the kernel used and the reason in the run's config.json
(`resolve_noise_kernel`); asked for explicitly (`--noise_kernel=fused`,
`layers.set_noise_kernel("fused")`) and unbuildable, the error says why.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from typing import Any, Iterator

import tensorflow as tf

from tfdp import checks

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "noise_kernel.cc")
# -ffast-math only for the vectorised libmvec log/cos/sin; no FMA contraction, so the
# multiply-adds are the portable path's float32 operations.
_OPT_FLAGS = ("-O3", "-march=native", "-ffast-math",
              "-ffp-contract=off", "-fopenmp-simd", "-fPIC", "-shared")
# Eigen's AVX512-FP16 headers fail to compile under GCC 12 with -march=native on CPUs that
# report the extension; the kernel computes in float32 only, so the extension is switched off
# wherever the compiler knows the switch.
_NO_FP16_FLAG = "-mno-avx512fp16"
_LOCK = threading.Lock()
_TARGET_FLAGS: dict[str, tuple[str, ...]] = {}
_MODULE: dict[str, Any] = {}


class KernelUnavailable(RuntimeError):
    """The compiled kernel cannot be built or loaded here (the message says why)."""


def cache_dir() -> str:
    """Where built kernels are kept: $TFDP_KERNEL_CACHE, else ~/.cache/tfdp/kernels."""
    return os.environ.get("TFDP_KERNEL_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "tfdp", "kernels")


def _cpu_signature() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return line.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _build_key(compiler: str) -> str:
    h = hashlib.sha256()
    with open(_SOURCE, "rb") as f:
        h.update(f.read())
    for part in (tf.__version__, compiler, " ".join(_OPT_FLAGS + _target_flags(compiler)),
                 " ".join(tf.sysconfig.get_compile_flags()), _cpu_signature(), sys.platform):
        h.update(part.encode())
    return h.hexdigest()[:16]


def _target_flags(compiler: str) -> tuple[str, ...]:
    """Extra target flags `compiler` accepts: `-mno-avx512fp16` where it knows the switch."""
    if compiler not in _TARGET_FLAGS:
        try:
            probe = subprocess.run([compiler, _NO_FP16_FLAG, "-x", "c++", "-fsyntax-only",
                                    os.devnull], capture_output=True, timeout=60, check=False)
            ok = probe.returncode == 0
        except (OSError, subprocess.SubprocessError):
            ok = False
        _TARGET_FLAGS[compiler] = (_NO_FP16_FLAG,) if ok else ()
    return _TARGET_FLAGS[compiler]


def library_path() -> str:
    """Path of the built library for this source, TensorFlow, compiler and CPU (built if absent).

    Raises:
        KernelUnavailable: no compiler, not Linux/x86-64, or the build failed.
    """
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
        raise KernelUnavailable(
            f"the fused noise kernel is built for Linux x86-64 only (this is {sys.platform} "
            f"{platform.machine()}); use the portable kernel")
    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None:
        raise KernelUnavailable(
            f"the fused noise kernel needs a C++ compiler: {compiler!r} is not on PATH "
            "(install g++ or set CXX), or use the portable kernel")
    out_dir = os.path.join(cache_dir(), _build_key(compiler))
    lib = os.path.join(out_dir, "tfdp_noise_kernel.so")
    if os.path.exists(lib):
        return lib
    os.makedirs(out_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out_dir)
    os.close(fd)
    cmd = ([compiler, "-std=c++17", *_OPT_FLAGS, *_target_flags(compiler), _SOURCE, "-o", tmp]
           + tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags() + ["-lmvec", "-lm"])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        os.unlink(tmp)
        raise KernelUnavailable(f"building the fused noise kernel failed: {exc}") from exc
    if proc.returncode != 0:
        os.unlink(tmp)
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise KernelUnavailable(
            f"building the fused noise kernel failed (exit {proc.returncode}):\n{tail}")
    os.replace(tmp, lib)  # atomic: a concurrent builder sees no half-written library
    return lib


def load() -> Any:
    """The loaded op module (ops: tfdp_noisy_add); builds it on first use.

    Raises:
        KernelUnavailable: see `library_path`.
    """
    with _LOCK:
        if "module" not in _MODULE:
            module = tf.load_op_library(library_path())

            @tf.RegisterGradient("TfdpNoisyAdd")
            def _noisy_add_grad(op: Any, grad: tf.Tensor) -> list:  # pylint: disable=unused-argument
                # y = x + scale * z with z independent of every input: dy/dx = identity.
                return [grad, None, None, None]

            _MODULE["module"] = module
        return _MODULE["module"]


def available() -> bool:
    """Whether the fused kernel builds and loads here."""
    try:
        load()
        return True
    except KernelUnavailable:
        return False


# "portable" draws with TensorFlow ops (any device; the default of the layers). "fused" adds
# the fresh per-example/inference draws with the compiled CPU op of this module. The noise
# layers (layers.noise) read the choice when they are traced: set it before building a
# training step.
NOISE_KERNELS = ("portable", "fused")
_KERNEL = {"mode": "portable"}


def set_noise_kernel(mode: str) -> None:
    """Selects how fresh noise is drawn from now on: "portable" or "fused".

    Args:
        mode: one of NOISE_KERNELS. "fused" builds the compiled kernel now (once per
            machine; a few seconds) so that a missing compiler fails here, before any work.

    Raises:
        ValueError: if mode is unknown.
        KernelUnavailable: if mode is "fused" and the kernel cannot be built.
    """
    checks.check_choice(mode, "noise kernel", NOISE_KERNELS)
    if mode == "fused":
        load()
    _KERNEL["mode"] = mode


def get_noise_kernel() -> str:
    """The noise kernel layers use when traced now."""
    return _KERNEL["mode"]


@contextlib.contextmanager
def noise_kernel(mode: str) -> Iterator[None]:
    """Context manager form of `set_noise_kernel` (restores the previous kernel on exit)."""
    previous = _KERNEL["mode"]
    set_noise_kernel(mode)
    try:
        yield
    finally:
        _KERNEL["mode"] = previous


def check_noise_kernel(kernel: str, flag: str = "--noise_kernel") -> str:
    """Checks a noise kernel name; for "fused", builds the kernel now, before any work.

    Returns:
        kernel, unchanged.

    Raises:
        ValueError: naming `flag`, for an unknown kernel or one that cannot be built here.
    """
    checks.check_choice(kernel, flag, NOISE_KERNELS)
    if kernel == "fused":
        try:
            load()
        except KernelUnavailable as e:
            raise ValueError(f"{flag}=fused: {e}") from e
    return kernel


# What the apps' --noise_kernel takes: "auto" (the default of tfdp-train) is the fused kernel
# wherever it builds and the portable kernel elsewhere, the fallback recorded with the run.
KERNEL_CHOICES = ("auto", "portable", "fused")


def resolve_noise_kernel(kernel: str, flag: str = "--noise_kernel") -> tuple[str, str | None]:
    """The kernel the noise layers will use for `kernel`, and why it fell back (or None).

    "auto" gives "fused" when the fused kernel builds and loads here (it is built now),
    else "portable" with the reason; "portable" and "fused" are checked as by
    `check_noise_kernel`.

    Raises:
        ValueError: naming `flag`, for an unknown kernel, or "fused" that cannot be built.
    """
    checks.check_choice(kernel, flag, KERNEL_CHOICES)
    if kernel != "auto":
        return check_noise_kernel(kernel, flag), None
    try:
        load()
    except KernelUnavailable as e:
        reason = str(e).strip().splitlines()[0]
        return "portable", f"{flag}=auto: the fused kernel is unavailable here ({reason})"
    return "fused", None


@contextlib.contextmanager
def noise_kernel_flag(kernel: str, flag: str = "--noise_kernel") -> Iterator[None]:
    """The noise layers use `kernel` inside the block (the apps' form of layers.noise_kernel).

    Raises:
        ValueError: naming `flag`, for an unknown kernel or one that cannot be built here.
    """
    with noise_kernel(check_noise_kernel(kernel, flag)):
        yield
