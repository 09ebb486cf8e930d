"""tfdp commands ask for oneDNN's CPU kernels on x86 (tfdp/onednn.py); a user's choice stays."""

import os
import platform
import subprocess
import sys

import pytest

from tfdp import onednn

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PROBE = """
import os
from tfdp.apps import cli
cli.import_tensorflow()
from tfdp import onednn
from tfdp.train import integrity
print(os.environ.get("TF_ENABLE_ONEDNN_OPTS"), onednn.state(), integrity.platform_record()["onednn"])
"""

x86_only = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                              reason="TensorFlow's oneDNN switch is for x86 builds")


def _probe(**env_changes):
    env = {k: v for k, v in os.environ.items() if k != onednn.ENV}
    env.update(env_changes, PYTHONPATH=_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-c", _PROBE], cwd=_ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout
    return out.split()


@x86_only
def test_a_command_runs_onednn_kernels_when_the_variable_is_unset():
    # On CPUs where TensorFlow leaves oneDNN off by default (AMD EPYC, CPUs without AVX-512
    # VNNI / AMX) this is the case that changes; on the others it was already on.
    assert _probe() == ["1", "on", "on"]


@x86_only
def test_the_users_setting_is_kept():
    assert _probe(TF_ENABLE_ONEDNN_OPTS="0") == ["0", "off", "off"]


def test_use_onednn_keeps_a_set_value(monkeypatch):
    monkeypatch.setenv(onednn.ENV, "0")
    assert onednn.use_onednn() == "0"
    monkeypatch.delenv(onednn.ENV)
    expected = "1" if platform.machine().lower() in ("x86_64", "amd64") else None
    assert onednn.use_onednn() == expected
    assert onednn.use_onednn() == expected  # idempotent
