"""tfdp-train's module imports after another app's in one process (tests, a notebook)."""

import os
import subprocess
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_SCRIPT = """
from absl import flags
from tfdp.apps import cli
cli.define_verbose()                  # another app's boolean --verbose, defined first
assert flags.FLAGS["verbose"].default is False
from tfdp.apps import train           # failed here with a duplicate-flag error
print(type(flags.FLAGS["verbose"].default).__name__, flags.FLAGS["verbose"].default)
"""


def test_train_app_imports_after_another_apps_verbose_flag():
    env = dict(os.environ, PYTHONPATH=_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True,
                         env=env, cwd=_ROOT, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    # tfdp-train's --verbose is a level (as when it is imported first).
    assert out.stdout.split()[-2:] == ["int", "1"]
