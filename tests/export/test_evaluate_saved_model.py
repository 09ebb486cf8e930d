"""tfdp-evaluate --saved_model: an exported model is evaluated through its signatures."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tfdp import certify, data, evaluate, export, rundir

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HGM_CERT = {"mechanism": "hgm", "construction_bound": 0.1, "epsilon": 1.0, "delta": 1e-5,
            "sensitivity_sound": True}  # as in conftest.py


def test_attacks_through_exported_gradients_match_keras(tmp_path, pixeldp_run, pixeldp_export):
    opts = evaluate.EvalOptions(attacks=("fgsm", "ifgsm"), attack_sizes=(0.1,), nb_iter=3,
                                num_examples=40, batch_size=40, seed=0)
    got = evaluate.evaluate_saved_model(pixeldp_export.export_dir, opts,
                                        str(tmp_path / "eval"))
    x, y = data.load("sample", "test", value_range=(-1.0, 1.0), num_examples=40)
    want, _ = evaluate.evaluate_arrays(pixeldp_run.model, x, y, value_range=(-1.0, 1.0),
                                       certification=HGM_CERT, options=opts)
    assert got["clean_accuracy"] == want["clean_accuracy"]
    for name in ("fgsm", "ifgsm"):
        # Same deterministic network, same gradients: the same adversarial accuracy.
        assert got["attacks"][name]["0.1"]["accuracy"] == pytest.approx(
            want["attacks"][name]["0.1"]["accuracy"], abs=1.5 / 40)
    assert got["attacks"]["fgsm"]["0.1"]["accuracy"] < got["clean_accuracy"]
    assert got["attack_target"] == "noise_free"
    # Expectation over transformation through the exported noisy_predict gradients.
    eot = evaluate.evaluate_saved_model(
        pixeldp_export.export_dir,
        evaluate.EvalOptions(attacks=("fgsm",), attack_sizes=(0.1,), num_examples=20,
                             batch_size=20, seed=0, eot_draws=3), str(tmp_path / "eot"))
    assert eot["attack_target"] == "eot_noisy"
    assert eot["attacks"]["fgsm"]["0.1"]["accuracy"] <= eot["clean_accuracy"]
    on_disk = json.load(open(tmp_path / "eval" / rundir.EVALUATION_FILE))
    assert on_disk["saved_model"] == pixeldp_export.export_dir
    assert not os.path.exists(os.path.join(pixeldp_export.export_dir, rundir.EVALUATION_FILE))


def test_certification_through_the_certify_signature(tmp_path, pixeldp_run, pixeldp_export):
    opts = evaluate.EvalOptions(attacks=(), attack_sizes=(0.02, 0.1), num_examples=30,
                                batch_size=30, seed=5, certify=True, num_draws=120)
    got = evaluate.evaluate_saved_model(pixeldp_export.export_dir, opts,
                                        str(tmp_path / "eval"))
    # The harness drew one seed for the batch from its certify stream; tfdp.certify on that
    # seed's noise gives the same certified accuracies.
    seed = int(np.random.default_rng([5, 1]).integers(0, 2**62))
    x, y = data.load("sample", "test", value_range=(-1.0, 1.0), num_examples=30)
    ref = export.certify_in_process(pixeldp_run.model, HGM_CERT, x, 120, 0.05, 0.0, seed)
    assert got["clean_accuracy"] == np.mean(ref["prediction"] == y)
    for size in (0.02, 0.1):
        want = np.mean((ref["prediction"] == y) & certify.is_robust(ref["radius"], size))
        got_acc = got["clean_certified_accuracy"][repr(size)]["value"]
        assert got_acc == pytest.approx(want, abs=1e-12)
    assert got["prediction"] == "monte_carlo" and got["num_draws"] == 120
    with pytest.raises(ValueError, match="bound"):
        evaluate.evaluate_saved_model(
            pixeldp_export.export_dir,
            evaluate.EvalOptions(attacks=(), certify=True, bound="hoeffding"),
            str(tmp_path / "eval2"))
    with pytest.raises(ValueError, match="saved_model"):
        evaluate.evaluate_saved_model(str(tmp_path), opts, str(tmp_path / "eval3"))


@pytest.mark.slow
def test_cli(tmp_path, pixeldp_export):
    env = dict(os.environ, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run(
        [sys.executable, "-m", "tfdp.apps.evaluate", f"--saved_model={pixeldp_export.export_dir}",
         "--attacks=fgsm", "--attack_sizes=0.1", "--num_examples=20", "--certify",
         "--num_draws=50", "--seed=1", f"--model_dir={tmp_path / 'eval'}"],
        cwd=_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.load(open(tmp_path / "eval" / rundir.EVALUATION_FILE))
    assert summary["num_examples"] == 20 and summary["num_draws"] == 50
    assert summary["attacks"]["fgsm"]["0.1"]["certified_accuracy_on_attacked_inputs"] is not None
