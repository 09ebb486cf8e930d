"""tfdp-export on the command line: the export directory and signatures are printed."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfdp import data, evaluate, export

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args, timeout=600):
    env = dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", *args], cwd=_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_cli_exports_and_refuses_a_busy_directory(tmp_path, pixeldp_run):
    out = _run("tfdp.apps.export", f"--model_dir={pixeldp_run.model_dir}",
               f"--export_dir={tmp_path / 'out'}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"export directory: {tmp_path / 'out'}" in out.stdout
    for line in ("  certify(alpha: float64[], attack_size: float64[], num_draws: int32[], "
                 "seed: int64[], x: float32[None, 28, 28, 1])",
                 "  noisy_predict(seed: int64[], x: float32[None, 28, 28, 1])",
                 "  serving_default(x: float32[None, 28, 28, 1]) -> {class: int64[None], "
                 "logits: float32[None, 10], probabilities: float32[None, 10]}"):
        assert line in out.stdout
    again = _run("tfdp.apps.export", f"--model_dir={pixeldp_run.model_dir}",
                 f"--export_dir={tmp_path / 'out'}")
    assert again.returncode != 0
    assert "--export_dir" in again.stderr and "--overwrite" in again.stderr


@pytest.mark.slow
def test_adlm_run_exports(tmp_path):
    # AdLM through the training app (the main job's flag file, scaled down), then tfdp-export.
    run = tmp_path / "adlm"
    out = _run("tfdp.apps.train", "--flagfile=flags/adlm/sample.flags", "--method=adlm",
               "--dataset=sample", "--num_train=600", "--num_test=100", "--epochs=1",
               "--batch_size=200", "--adlm_aux_epochs=1", f"--model_dir={run}", "--verbose=0")
    assert out.returncode == 0, out.stderr[-3000:]
    exported = _run("tfdp.apps.export", f"--latest_under={tmp_path}")
    assert exported.returncode == 0, exported.stderr[-3000:]
    target = run / "saved_model"
    assert f"export directory: {target}" in exported.stdout
    model, config = evaluate.load_run(str(run))
    x, _ = data.load("sample", "test", value_range=config["value_range"], num_examples=50)
    loaded = tf.saved_model.load(str(target))
    got = loaded.signatures["serving_default"](x=tf.constant(x))["logits"].numpy()
    np.testing.assert_allclose(got, model(x, training=False).numpy(), atol=1e-6)
    card = json.load(open(target / export.CARD_FILE))
    # The ledger as the run wrote it: the claimed budget and the sound total (AdLM's
    # code-release modes are not DP, so the sound epsilon is inf; see the entries' notes).
    assert card["ledger"] == json.load(open(run / "ledger.json"))
    assert card["ledger"]["claimed_epsilon"] == pytest.approx(8.0)
    assert card["run"]["method"] == "adlm"
    assert not any(line.startswith("--seed") for line in card["flags"])


def test_latest_run(tmp_path):
    with pytest.raises(ValueError, match="latest_under"):
        export.latest_run(str(tmp_path))
    for i, name in enumerate(["b-old", "a-new", "c-unfinished"]):
        (tmp_path / name).mkdir()
        if name != "c-unfinished":
            (tmp_path / name / "model.keras").write_text("x")
            os.utime(tmp_path / name / "model.keras", (1000 + i, 1000 + i))
    assert export.latest_run(str(tmp_path)) == str(tmp_path / "a-new")
