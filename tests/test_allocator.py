"""tfdp.allocator: tfdp's processes keep freed memory for reuse (docs/performance.md)."""

import os
import subprocess
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Allocates and frees 64 MiB (above glibc's largest mmap threshold, 32 MiB) after the
# process's setting, and prints the setting's result and how many more bytes malloc held in
# mmapped regions while the block was live.
_PROBE = """
import ctypes, sys
from tfdp import allocator
applied = allocator.keep_freed_memory()
libc = ctypes.CDLL("libc.so.6")
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
before = libc.mallinfo2().hblkhd
block = libc.malloc(64 * 2**20)
mapped = libc.mallinfo2().hblkhd - before
libc.free(block)
print(applied, allocator.state(), mapped)
"""

# The same seeded convolutional training steps on 42 MB activations; prints a digest of the
# weights after them.
_TRAIN = """
import hashlib, sys
from tfdp.apps import cli
cli.keep_freed_memory()
tf = cli.import_tensorflow()
from tfdp import allocator
tf.random.set_seed(3)
x = tf.random.normal([160, 32, 32, 3], seed=1)
w1 = tf.Variable(tf.random.normal([5, 5, 3, 64], stddev=0.1, seed=2))
w2 = tf.Variable(tf.random.normal([5, 5, 64, 64], stddev=0.05, seed=3))
@tf.function
def step():
    with tf.GradientTape() as tape:
        h = tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME"))
        loss = tf.reduce_mean(tf.square(tf.nn.conv2d(h, w2, 1, "SAME")))
    for v, g in zip((w1, w2), tape.gradient(loss, [w1, w2])):
        v.assign_sub(0.1 * g)
for _ in range(2):
    step()
print(allocator.state(), hashlib.sha256(w1.numpy().tobytes() + w2.numpy().tobytes()).hexdigest())
"""


def _run(code, malloc=None):
    env = dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TFDP_MALLOC", None)
    if malloc is not None:
        env["TFDP_MALLOC"] = malloc
    return subprocess.run([sys.executable, "-c", code], cwd=_ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


linux_glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.confstr("CS_GNU_LIBC_VERSION"),
    reason="the allocator settings are glibc's (Linux); elsewhere they are not applied")


@linux_glibc
def test_a_large_block_is_not_mmapped_once_freed_memory_is_kept():
    kept = _run(_PROBE)
    assert kept.returncode == 0, kept.stderr[-2000:]
    applied, state, mapped = kept.stdout.split()
    assert (applied, state, int(mapped)) == ("True", "keep", 0)
    # glibc's own setting, as the control: the same block is an mmapped region.
    default = _run(_PROBE, malloc="glibc")
    assert default.returncode == 0, default.stderr[-2000:]
    applied, state, mapped = default.stdout.split()
    assert (applied, state) == ("False", "glibc") and int(mapped) >= 64 * 2**20


@linux_glibc
def test_training_steps_compute_the_same_bits_under_both_settings():
    outs = [_run(_TRAIN, malloc=m) for m in ("glibc", None)]
    for out in outs:
        assert out.returncode == 0, out.stderr[-2000:]
    (state0, digest0), (state1, digest1) = (o.stdout.split() for o in outs)
    assert (state0, state1) == ("glibc", "keep")
    assert digest0 == digest1


def test_a_bad_setting_is_refused_naming_the_variable_before_any_work():
    out = _run("from tfdp.apps import cli; cli.quiet_start([]); print('imported')",
               malloc="jemalloc")
    assert out.returncode == 2
    assert "imported" not in out.stdout
    assert out.stderr.strip().splitlines() == [
        "error: TFDP_MALLOC: expected 'keep' (the default) or 'glibc', got 'jemalloc'"]
    assert "tensorflow" not in out.stderr.lower()


def test_the_setting_is_idempotent_and_reports_its_state(monkeypatch):
    from tfdp import allocator  # pylint: disable=import-outside-toplevel
    monkeypatch.delenv("TFDP_MALLOC", raising=False)
    first = allocator.keep_freed_memory()
    assert allocator.keep_freed_memory() == first
    assert allocator.state() == ("keep" if first else "glibc")
    monkeypatch.setenv("TFDP_MALLOC", "glibc")  # too late to undo an earlier call's settings
    assert allocator.keep_freed_memory() == (allocator.state() == "keep")

