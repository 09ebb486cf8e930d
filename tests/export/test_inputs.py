"""The exported signatures validate their inputs (issue 22 item 8): NaN/Inf rejected, values
outside the card's range rejected or clipped as chosen at export, rank and shape checked,
num_draws bounded with 64-bit counting, alpha echoed."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfdp import export, serving_inputs

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _certify(m, x, n=20, alpha=0.05):
    return m.certify(tf.constant(x, tf.float32), tf.constant(n, tf.int32),
                     tf.constant(alpha, tf.float64), tf.constant(0.01, tf.float64),
                     tf.constant(3, tf.int64))


def test_non_finite_and_out_of_range_inputs_are_rejected(pixeldp_export, tiny_data):
    m = tf.saved_model.load(pixeldp_export.export_dir)
    x = np.array(tiny_data.x_test[:2], np.float32)
    calls = {"serving_default": lambda v: m.serving_default(tf.constant(v)),
             "serve": lambda v: m.serve(tf.constant(v)),
             "noisy_predict": lambda v: m.noisy_predict(tf.constant(v), tf.constant(1, tf.int64)),
             "certify": lambda v: _certify(m, v)}
    for name, call in calls.items():
        call(x)  # in range: fine
        for bad in (np.nan, np.inf, -np.inf):
            y = x.copy()
            y[0, 3, 4, 0] = bad
            with pytest.raises(tf.errors.InvalidArgumentError, match="x must be finite"):
                call(y)
        with pytest.raises(tf.errors.InvalidArgumentError, match="value range"):
            call(x * 255.0)  # pixels in 0..255 instead of the card's range
    card = json.load(open(os.path.join(pixeldp_export.export_dir, export.CARD_FILE)))
    assert card["input_validation"]["out_of_range"] == "reject"
    assert card["input_validation"]["value_range"] == card["data"]["value_range"]


def test_clip_mode_is_chosen_at_export_and_recorded(tmp_path, pixeldp_run, tiny_data):
    out = export.export_run(pixeldp_run.model_dir, str(tmp_path / "clip"), out_of_range="clip")
    assert out.card["input_validation"]["out_of_range"] == "clip"
    m = tf.saved_model.load(out.export_dir)
    x = np.array(tiny_data.x_test[:3], np.float32)
    lo, hi = out.card["data"]["value_range"]
    big = x * 255.0
    got = m.serving_default(tf.constant(big))["logits"].numpy()
    want = m.serving_default(tf.constant(np.clip(big, lo, hi)))["logits"].numpy()
    np.testing.assert_array_equal(got, want)
    with pytest.raises(tf.errors.InvalidArgumentError, match="x must be finite"):
        m.serving_default(tf.constant(np.full_like(x, np.nan)))
    with pytest.raises(ValueError, match="out_of_range"):
        export.export_run(pixeldp_run.model_dir, str(tmp_path / "bad"), out_of_range="wrap")


def test_num_draws_is_bounded_and_alpha_echoed(pixeldp_export, tiny_data):
    m = tf.saved_model.load(pixeldp_export.export_dir)
    x = np.array(tiny_data.x_test[:2], np.float32)
    out = _certify(m, x, n=20, alpha=0.05)
    assert float(out["alpha"].numpy()) == 0.05
    assert int(out["counts"].numpy().sum()) == 2 * 20
    for n in (serving_inputs.MAX_NUM_DRAWS + 1, 2**31 - 255, 2**31 - 1):
        with pytest.raises(tf.errors.InvalidArgumentError, match="num_draws must be <="):
            _certify(m, x, n=n)
    with pytest.raises(ValueError, match="num_draws"):
        export.ExportedModel(pixeldp_export.export_dir).certify(
            x, serving_inputs.MAX_NUM_DRAWS + 1, 0.05, 0.1, 1)


def test_wrong_rank_is_an_error_not_a_crash(pixeldp_export):
    """A rank-2 input fails with a Python error in a fresh process (no process abort)."""
    code = (
        "import sys, numpy as np, tensorflow as tf\n"
        "m = tf.saved_model.load(sys.argv[1])\n"
        "for name in ('serving_default', 'certify'):\n"
        "    f = m.signatures[name]\n"
        "    kw = {'x': tf.zeros([2, 784])}\n"
        "    if name == 'certify':\n"
        "        kw.update(num_draws=tf.constant(5), alpha=tf.constant(0.05, tf.float64),\n"
        "                  attack_size=tf.constant(0.0, tf.float64),\n"
        "                  seed=tf.constant(1, tf.int64))\n"
        "    try:\n"
        "        f(**kw)\n"
        "    except (TypeError, ValueError, tf.errors.InvalidArgumentError) as e:\n"
        "        print('refused', name, type(e).__name__)\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    p = subprocess.run([sys.executable, "-c", code, pixeldp_export.export_dir],
                       capture_output=True, text=True, timeout=300, env=env, cwd=_ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "refused serving_default" in p.stdout and "refused certify" in p.stdout
