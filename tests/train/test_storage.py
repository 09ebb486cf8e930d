"""Storage faults (issue 22 item 7): a full disk, a read-only directory or a truncated
checkpoint give a one-line error naming the path; the last good state stays intact."""

import errno
import os

import pytest
import tensorflow as tf

from tfdp import rundir
from tfdp.train import dpsgd, loop
from tfdp.train.base import TrainConfig


@pytest.fixture(scope="module")
def tiny_data(synthetic_data):
    return synthetic_data((6, 6, 1), 3, num_train=96, num_test=40, seed=0)


def _dpsgd(tmp_path, name, epochs=2):
    opts = {"dpsgd_l2_clip": 0.5, "dpsgd_model": "mlp", "dpsgd_sampling": "poisson",
            "dpsgd_noise_multiplier": 1.0}
    return dpsgd.DPSGD(TrainConfig(method="dpsgd", dataset="synthetic",
                                   model_dir=str(tmp_path / name), epochs=epochs, batch_size=16,
                                   learning_rate=0.05, seed=5, delta=1e-5, options=opts))


def test_full_disk_at_the_model_file_is_one_line_and_resumable(tmp_path, tiny_data,
                                                               monkeypatch):
    path = str(tmp_path / "full" / rundir.MODEL_FILE)

    def no_space(model, target):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), target)

    monkeypatch.setattr(rundir, "save_model", no_space)
    with pytest.raises(loop.StorageError) as err:
        loop.train(_dpsgd(tmp_path, "full"), tiny_data, verbose=0)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{path}: cannot write")
    assert "No space left on device" in msg
    # The last good state: the final checkpoint and the ledger that charged its steps.
    assert rundir.has_checkpoint(str(tmp_path / "full"))
    monkeypatch.undo()
    res = loop.train(_dpsgd(tmp_path, "full", epochs=3), tiny_data, resume=True, verbose=0)
    assert res.epochs_completed == 3 and os.path.exists(path)


def test_failed_checkpoint_write_keeps_the_previous_checkpoint(tmp_path, tiny_data,
                                                               monkeypatch):
    real_save = tf.train.CheckpointManager.save
    calls = []

    def fail_second(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")
        return real_save(self, *args, **kwargs)

    monkeypatch.setattr(tf.train.CheckpointManager, "save", fail_second)
    with pytest.raises(loop.StorageError, match=r"^.*ckpt: cannot write|cannot write") as err:
        loop.train(_dpsgd(tmp_path, "ck", epochs=3), tiny_data, verbose=0)
    assert "\n" not in str(err.value) and "No space left on device" in str(err.value)
    monkeypatch.undo()
    latest = tf.train.latest_checkpoint(rundir.checkpoint_dir(str(tmp_path / "ck")))
    assert latest.endswith("-1")  # epoch 1's checkpoint, intact
    res = loop.train(_dpsgd(tmp_path, "ck", epochs=3), tiny_data, resume=True, verbose=0)
    assert res.epochs_completed == 3


def test_truncated_checkpoint_is_a_one_line_error(tmp_path, tiny_data):
    first = loop.train(_dpsgd(tmp_path, "t", epochs=3), tiny_data, stop_after_epochs=1,
                       verbose=0)
    latest = tf.train.latest_checkpoint(rundir.checkpoint_dir(first.model_dir))
    data_file = [f for f in os.listdir(os.path.dirname(latest))
                 if f.startswith(os.path.basename(latest) + ".data")][0]
    full = os.path.join(os.path.dirname(latest), data_file)
    with open(full, "r+b") as f:
        f.truncate(os.path.getsize(full) // 3)
    with pytest.raises(ValueError) as err:
        loop.train(_dpsgd(tmp_path, "t", epochs=3), tiny_data, resume=True, verbose=0)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(latest) and "checkpoint" in msg


def test_read_only_directory_is_a_one_line_error(tmp_path, tiny_data, monkeypatch):
    """EROFS injected at the ledger's atomic write (tests run as root, for whom chmod does
    not make a directory read-only)."""
    first = loop.train(_dpsgd(tmp_path, "ro", epochs=3), tiny_data, stop_after_epochs=1,
                       verbose=0)
    ledger_path = os.path.join(first.model_dir, rundir.LEDGER_FILE)
    before = open(ledger_path, "rb").read()
    real = rundir.write_json_atomic

    def read_only(path, obj):
        if os.path.basename(path) == rundir.LEDGER_FILE:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
        return real(path, obj)

    monkeypatch.setattr(rundir, "write_json_atomic", read_only)
    with pytest.raises(loop.StorageError) as err:
        loop.train(_dpsgd(tmp_path, "ro", epochs=3), tiny_data, resume=True, verbose=0)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(f"{ledger_path}: cannot write the run's files (Read-only")
    assert open(ledger_path, "rb").read() == before  # the last good ledger is intact


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 2 MB tmpfs (needs root and mount rights; skipped, with the reason, without them)."""
    import subprocess  # pylint: disable=import-outside-toplevel
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)  # lazy: files may be open


def _fill(folder, leave):
    """Fills the file system of `folder` up to `leave` free bytes."""
    stat = os.statvfs(folder)
    free = stat.f_bavail * stat.f_frsize
    with open(os.path.join(folder, "filler"), "wb") as f:
        f.write(b"\0" * max(0, free - leave))


@pytest.mark.slow
def test_real_full_disk_at_a_checkpoint_leaves_no_temp_folder(small_tmpfs, tiny_data):
    """A real ENOSPC inside TensorFlow's checkpoint write (a full tmpfs): one line naming the
    checkpoint folder without TensorFlow internals, no ckpt-N_temp left, resumable."""
    first = loop.train(_dpsgd(small_tmpfs, "run", epochs=3), tiny_data, stop_after_epochs=1,
                       verbose=0)
    ckpt_dir = rundir.checkpoint_dir(first.model_dir)
    size = sum(os.path.getsize(os.path.join(ckpt_dir, f)) for f in os.listdir(ckpt_dir)
               if f.startswith("ckpt-1.data"))
    _fill(small_tmpfs, leave=12 * 1024)  # room for the JSON files, not for a checkpoint
    assert size > 12 * 1024
    with pytest.raises(loop.StorageError) as err:
        loop.train(_dpsgd(small_tmpfs, "run", epochs=3), tiny_data, resume=True, verbose=0)
    msg = str(err.value)
    assert "\n" not in msg and "No space left on device" in msg
    assert msg.startswith(f"{ckpt_dir}: cannot write"), msg
    assert "{{" not in msg and "Op:" not in msg and "_temp" not in msg
    assert not [f for f in os.listdir(ckpt_dir) if "_temp" in f or "tempstate" in f]
    os.remove(small_tmpfs / "filler")
    res = loop.train(_dpsgd(small_tmpfs, "run", epochs=3), tiny_data, resume=True, verbose=0)
    assert res.epochs_completed == 3


def test_truncated_last_checkpoint_resumes_from_the_previous_one(tmp_path, tiny_data, capsys):
    """The newest checkpoint truncated: the resume starts from the one before, says which and
    how many steps it replays, and ends with the uninterrupted run's ledger and weights."""
    clean = loop.train(_dpsgd(tmp_path, "clean", epochs=3), tiny_data, verbose=0)
    first = loop.train(_dpsgd(tmp_path, "t2", epochs=3), tiny_data, stop_after_epochs=2,
                       verbose=0)
    ckpt_dir = rundir.checkpoint_dir(first.model_dir)
    latest = tf.train.latest_checkpoint(ckpt_dir)
    assert latest.endswith("-2")
    data_file = [f for f in os.listdir(ckpt_dir)
                 if f.startswith(os.path.basename(latest) + ".data")][0]
    full = os.path.join(ckpt_dir, data_file)
    with open(full, "r+b") as f:
        f.truncate(os.path.getsize(full) // 3)
    capsys.readouterr()
    res = loop.train(_dpsgd(tmp_path, "t2", epochs=3), tiny_data, resume=True, verbose=1)
    out = capsys.readouterr().out
    previous = os.path.join(ckpt_dir, "ckpt-1")
    assert f"resume: {latest} is damaged" in out and f"from the older intact checkpoint " \
        f"{previous}" in out
    assert "steps run after it are replayed with the same lots and noise and charged once" in out
    assert res.epochs_completed == 3 and res.ledger == clean.ledger
    for a, b in zip(res.model.weights, clean.model.weights):
        assert (a.numpy() == b.numpy()).all(), a.name
