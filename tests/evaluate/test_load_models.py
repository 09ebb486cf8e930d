"""Every architecture tfdp saves loads back through the evaluation harness."""

import json
import os
import subprocess
import sys

import numpy as np

from tfdp import rundir
from tfdp.papers.adlm import models as adlm_models

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_adlm_model_loads_in_a_fresh_process(tmp_path):
    # AdLM's networks use custom layers (batch-statistics norm, bias noise); a fresh process
    # that imports only the harness must still load them.
    model = adlm_models.mnist_model(bound_mode="paper_lrn_minmax", bias_noise=True)
    model.save(os.path.join(tmp_path, rundir.MODEL_FILE))
    x = np.linspace(0, 1, 2 * 28 * 28, dtype=np.float32).reshape(2, 28, 28, 1)
    np.save(os.path.join(tmp_path, "x.npy"), x)
    np.save(os.path.join(tmp_path, "want.npy"), model(x, training=False).numpy())
    with open(os.path.join(tmp_path, rundir.CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump({"method": "adlm", "dataset": "mnist", "value_range": [0.0, 1.0],
                   "input_shape": [28, 28, 1], "num_classes": 10, "certification": None}, f)
    code = ("import sys, numpy as np; from tfdp import evaluate; "
            "m, c = evaluate.load_run(sys.argv[1]); "
            "x = np.load(sys.argv[1] + '/x.npy'); w = np.load(sys.argv[1] + '/want.npy'); "
            "np.testing.assert_allclose(m(x, training=False).numpy(), w, rtol=1e-5, atol=1e-6); "
            "print('loaded', c['method'])")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=_ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "loaded adlm" in out.stdout
