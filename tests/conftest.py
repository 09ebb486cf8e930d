"""Shared test set-up: two logical CPUs, real-data location, fast TF logging."""

import fcntl
import os
import shutil
import tarfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

from tfdp import allocator, onednn  # noqa: E402

# As every tfdp command does before TensorFlow allocates (tfdp/allocator.py): freed tensors'
# memory stays in the process for reuse instead of being faulted in again at every step.
allocator.keep_freed_memory()
# And as every tfdp command does before TensorFlow is imported (tfdp/onednn.py): oneDNN's CPU
# kernels on every x86 CPU, not only where TensorFlow turns them on by default.
onednn.use_onednn()

import tensorflow as tf  # noqa: E402  # pylint: disable=wrong-import-position

# Two logical CPU devices, so MirroredStrategy tests run on a CPU-only machine. This must
# happen before TensorFlow initialises its devices.
_cpus = tf.config.list_physical_devices("CPU")
try:
    tf.config.set_logical_device_configuration(
        _cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
except RuntimeError:  # devices already initialised by an earlier import
    pass

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SHARED_DATA = os.path.join(os.path.dirname(_ROOT), "shared", "data")


def _prepare_local_data_dir() -> str | None:
    """Builds .cache/testdata from ../shared/data (MNIST link, CIFAR-10 JPEG extracted).

    Several pytest-xdist workers may call this at once: an exclusive lock on
    .cache/testdata.lock makes one of them build the directory while the others wait.
    """
    if not os.path.isdir(os.path.join(_SHARED_DATA, "mnist")):
        return None
    target = os.path.join(_ROOT, ".cache", "testdata")
    os.makedirs(target, exist_ok=True)
    with open(target + ".lock", "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            _fill_local_data_dir(target)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target


def _fill_local_data_dir(target: str) -> None:
    mnist = os.path.join(target, "mnist")
    if not os.path.exists(mnist):
        os.symlink(os.path.join(_SHARED_DATA, "mnist"), mnist)
    cifar = os.path.join(target, "cifar10")
    tarball = os.path.join(_SHARED_DATA, "cifar10-jpeg.tar.gz")
    if not os.path.isdir(os.path.join(cifar, "test")) and os.path.exists(tarball):
        tmp = cifar + ".partial"
        shutil.rmtree(tmp, ignore_errors=True)
        with tarfile.open(tarball) as t:
            t.extractall(tmp, filter="data")
        os.replace(tmp, cifar)


@pytest.fixture(scope="session")
def real_data_dir() -> str:
    """Directory holding real `mnist/` and `cifar10/` data.

    TFDP_DATA_DIR if set (CI sets it), else a cache built from ../shared/data. In CI a
    missing data directory is a failure, never a skip.
    """
    path = os.environ.get("TFDP_DATA_DIR") or _prepare_local_data_dir()
    if not path or not os.path.isdir(os.path.join(path, "mnist")):
        if os.environ.get("CI"):
            pytest.fail("real data not found: set TFDP_DATA_DIR (see .ci/run)")
        pytest.skip("real MNIST/CIFAR-10 not available: set TFDP_DATA_DIR")
    return path


def _tests_module(filename: str):
    """tests/<filename> (a helper of the tests, not a package module), imported by path."""
    import importlib.util  # pylint: disable=import-outside-toplevel
    spec = importlib.util.spec_from_file_location(
        "tfdp_tests_" + filename.removesuffix(".py"), os.path.join(_ROOT, "tests", filename))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def leak_scan():
    """tests/leak_scan.py (finds a run's seed and derived values in files), as a module."""
    return _tests_module("leak_scan.py")


def _load_schedule():
    """tests/schedule.py (the longest-first order of the xdist scopes), as a module."""
    return _tests_module("schedule.py")


@pytest.fixture(scope="module")
def schedule():
    """tests/schedule.py, as a module (tests/test_schedule.py)."""
    return _load_schedule()


@pytest.hookimpl(optionalhook=True)  # an unknown hook where pytest-xdist is not installed
def pytest_xdist_make_scheduler(config, log):
    """`make test` (pytest-xdist, -n 2 --dist loadfile) runs each test file on one worker, so
    that its module-scoped fixtures are built once; the files of tests/export, which share
    session-scoped trained runs (tests/export/conftest.py), go to one worker together; the
    tests of a few heavy files go one by one. The scopes go out longest first, by the
    measured durations in tests/durations.json (tests/schedule.py)."""
    if config.getvalue("dist") != "loadfile":
        return None
    # lazy: pytest-xdist is imported only when its scheduler is asked for
    from xdist.scheduler import LoadFileScheduling  # pylint: disable=import-outside-toplevel

    schedule = _load_schedule()
    durations = schedule.load_durations()

    class _LongestFirstScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return schedule.scope_of(nodeid)

        def _assign_work_unit(self, node) -> None:
            # The queue is complete at the first assignment (schedule() fills it, then
            # assigns): order it once, longest first.
            if not getattr(self, "_ordered", False):
                order = schedule.longest_first(self.workqueue, durations)
                self.workqueue = type(self.workqueue)(
                    (scope, self.workqueue[scope]) for scope in order)
                self._ordered = True
            super()._assign_work_unit(node)

    return _LongestFirstScheduling(config, log)
