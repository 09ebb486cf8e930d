"""Issue 40 item 3: the hash of the training arrays is private state (checkpoints/
private_state.json, never config.json) and still refuses a resume on other data; the
non-private statistics of checkpoints/segments.json carry the "never release" marker."""

import json
import os

import numpy as np
import pytest

from tfdp import rundir
from tfdp.train import dpsgd, loop
from tfdp.train.base import TrainConfig

_SHAPE = (6, 6, 1)
_CLASSES = 3


@pytest.fixture(scope="module")
def tiny_data(synthetic_data):
    return synthetic_data(_SHAPE, _CLASSES, num_train=96, num_test=40, seed=0)


def _dpsgd(path, epochs=2):
    opts = {"dpsgd_l2_clip": 0.5, "dpsgd_noise_multiplier": 1.0, "dpsgd_model": "mlp"}
    return dpsgd.DPSGD(TrainConfig(method="dpsgd", dataset="synthetic", model_dir=str(path),
                                   epochs=epochs, batch_size=16, learning_rate=0.05,
                                   delta=1e-5, options=opts))


def _other_data(data):
    x = np.array(data.x_train)
    x[0] = -x[0] + 0.25  # one record changed
    return loop.Data(x, data.y_train, data.x_test, data.y_test, data.input_shape,
                     data.num_classes)


def test_data_hash_is_private_and_a_resume_on_other_data_is_refused(tmp_path, tiny_data):
    run = tmp_path / "run"
    loop.train(_dpsgd(run), tiny_data, stop_after_epochs=1, verbose=0)
    digest = loop.data_fingerprint(tiny_data.x_train, tiny_data.y_train)
    config = json.load(open(run / rundir.CONFIG_FILE))
    assert "data_sha256" not in config
    private = json.load(open(run / rundir.CHECKPOINT_DIR / rundir.PRIVATE_STATE_FILE))
    assert private["data_sha256"] == digest and "never release" in private["never_release"]
    public = [os.path.join(r, f) for r, _, fs in os.walk(run) for f in fs
              if rundir.CHECKPOINT_DIR not in os.path.relpath(r, run).split(os.sep)]
    assert public and not [p for p in public if digest[:12].encode() in open(p, "rb").read()]

    segments = json.load(open(run / rundir.CHECKPOINT_DIR / rundir.SEGMENTS_FILE))
    marked = segments[loop.NONPRIVATE_STATS_KEY]
    assert marked["privatized"] is False and "never release" in marked["note"]
    assert "loss" in marked["last_epoch"] and "last_stats" not in segments

    with pytest.raises(ValueError, match="training data: the data differ"):
        loop.train(_dpsgd(run), _other_data(tiny_data), resume=True, verbose=0)
    done = loop.train(_dpsgd(run), tiny_data, resume=True, verbose=0)
    assert done.epochs_completed == 2
    assert "data_sha256" not in json.load(open(run / rundir.CONFIG_FILE))
    stats = json.load(open(run / rundir.METRICS_FILE))[loop.NONPRIVATE_STATS_KEY]
    assert stats["train_loss"] is not None


def test_a_run_with_the_hash_in_config_json_resumes_and_moves_it(tmp_path, tiny_data):
    # A run written before issue 40: data_sha256 in config.json, last_stats unmarked.
    run = tmp_path / "old"
    loop.train(_dpsgd(run), tiny_data, stop_after_epochs=1, verbose=0)
    digest = loop.data_fingerprint(tiny_data.x_train, tiny_data.y_train)
    rd = rundir.RunDir(str(run))
    rd.write_json(rundir.CONFIG_FILE, dict(rd.read_json(rundir.CONFIG_FILE),
                                           data_sha256=digest))
    os.remove(run / rundir.CHECKPOINT_DIR / rundir.PRIVATE_STATE_FILE)
    seg_path = str(run / rundir.CHECKPOINT_DIR / rundir.SEGMENTS_FILE)
    seg = rundir.read_json(seg_path)
    rundir.write_json_atomic(seg_path, {"segments": seg["segments"], "last_stats":
                                        seg[loop.NONPRIVATE_STATS_KEY]["last_epoch"]})
    with pytest.raises(ValueError, match="training data: the data differ"):
        loop.train(_dpsgd(run), _other_data(tiny_data), resume=True, verbose=0)
    loop.train(_dpsgd(run), tiny_data, resume=True, verbose=0)
    assert "data_sha256" not in rd.read_json(rundir.CONFIG_FILE)
    assert rundir.read_json(str(run / rundir.CHECKPOINT_DIR / rundir.PRIVATE_STATE_FILE)
                            )["data_sha256"] == digest


def test_no_committed_file_holds_a_training_data_hash():
    """Run files committed as records (results/, tests/) were copied before the data hash moved
    to the private state; none may carry it (a hash of private training arrays is a membership
    test). Every JSON file in the checkout outside run folders is read and searched by key."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def keys(obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                yield k
                yield from keys(v)
        elif isinstance(obj, list):
            for v in obj:
                yield from keys(v)

    checked, found = 0, []
    for top in ("results", "tests", "flags", "docs"):
        for dirpath, dirnames, files in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if d not in (rundir.CHECKPOINT_DIR, "__pycache__")]
            for name in files:
                if name.endswith(".json"):
                    path = os.path.join(dirpath, name)
                    with open(path, encoding="utf-8") as f:
                        try:
                            data = json.load(f)
                        except ValueError:
                            continue
                    checked += 1
                    if "data_sha256" in set(keys(data)):
                        found.append(os.path.relpath(path, root))
    assert checked > 100 and found == []
