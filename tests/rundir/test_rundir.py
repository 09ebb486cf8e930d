"""Run directory: atomic result files, the exclusive lock, clear errors on corrupt state."""

import json
import os
import stat

import pytest

from tfdp import accounting, rundir


def test_result_file_written_atomically_survives_a_crash_mid_write(tmp_path, monkeypatch):
    """A crash during a result-file write leaves the previous file intact (no partial file)."""
    path = str(tmp_path / rundir.LEDGER_FILE)
    led = accounting.PrivacyLedger()
    led.add("a", mechanism="laplace", epsilon=1.0)
    led.save(path)
    before = open(path).read()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # like model.keras
    led.add("b", mechanism="laplace", epsilon=2.0)

    real_fsync = os.fsync
    calls = []

    def crash(fd):
        # Simulates the process dying after part of the new content reached the disk.
        real_fsync(fd)
        calls.append(fd)
        raise KeyboardInterrupt("killed during write")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(KeyboardInterrupt):
        led.save(path)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert calls  # the crash happened inside the write
    assert open(path).read() == before
    assert accounting.PrivacyLedger.load(path).total() == (1.0, 0.0)
    assert [p.name for p in tmp_path.iterdir()] == [rundir.LEDGER_FILE]  # no temp file left
    led.save(path)
    assert accounting.PrivacyLedger.load(path).total() == (3.0, 0.0)


def test_killed_writer_process_leaves_previous_file(tmp_path):
    """A real process killed (SIGKILL) in the middle of writing a large result file."""
    import signal  # pylint: disable=import-outside-toplevel
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel
    import time  # pylint: disable=import-outside-toplevel

    path = tmp_path / rundir.METRICS_FILE
    rundir.write_json_atomic(str(path), {"test_accuracy": 0.5})
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import os, sys; from tfdp import rundir\n"
            "real = os.fsync\n"
            "def slow(fd):\n"
            "    print('writing', flush=True); import time; time.sleep(60)\n"
            "os.fsync = slow\n"
            f"rundir.write_json_atomic({str(path)!r}, {{'x': list(range(200000))}})\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=root, stdout=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=root), text=True)
    assert proc.stdout.readline().strip() == "writing"  # the temp file is being written
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert json.load(open(path)) == {"test_accuracy": 0.5}


def test_corrupt_or_missing_files_name_the_file(tmp_path):
    rd = rundir.RunDir(str(tmp_path))
    with pytest.raises(ValueError, match="config.json: file is missing"):
        rd.read_json(rundir.CONFIG_FILE)
    (tmp_path / rundir.LEDGER_FILE).write_text('{"entries": [')
    with pytest.raises(ValueError, match="ledger.json"):
        accounting.PrivacyLedger.load(str(tmp_path / rundir.LEDGER_FILE))
    (tmp_path / rundir.CONFIG_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="config.json: corrupt"):
        rd.read_json(rundir.CONFIG_FILE)


def test_lock_is_exclusive_names_the_holder_and_stale_locks_are_taken_over(tmp_path):
    run = str(tmp_path / "run")
    first = rundir.RunLock(run).acquire()
    with pytest.raises(rundir.RunDirLocked, match=f"process {os.getpid()}"):
        rundir.RunLock(run).acquire()
    first.release()
    # A lock file left by a dead process (no flock held) is stale: taken over.
    with open(os.path.join(run, rundir.LOCK_FILE), "w") as f:
        json.dump({"pid": 999999, "host": "gone"}, f)
    second = rundir.RunLock(run).acquire()
    assert json.load(open(os.path.join(run, rundir.LOCK_FILE)))["pid"] == os.getpid()
    second.release()
    assert rundir.result_files(run) == []  # the lock file is not a result
    with pytest.raises(ValueError, match="not a directory"):
        rundir.RunLock(str(tmp_path / "run" / rundir.LOCK_FILE)).acquire()
