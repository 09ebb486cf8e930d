"""TensorFlow's start-up notices are held back wherever tfdp is used (issue 40): the Python
API, `python -m tfdp.mechanisms` and the pipeline behind `make run`; any other output of the
import is passed on."""

import os
import subprocess
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_NOTICES = ("oneDNN custom operations", "absl::InitializeLog", "cpu_feature_guard")


def _py(*args, **env):
    environ = {k: v for k, v in os.environ.items()
               if k not in ("TF_CPP_MIN_LOG_LEVEL", "TFDP_VERBOSE")}
    environ.update(PYTHONPATH=_ROOT, **env)
    out = subprocess.run([sys.executable, *args], cwd=_ROOT, env=environ, capture_output=True,
                         text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return out


def _notices(text):
    return [n for n in _NOTICES if n in text]


def test_python_api_and_module_entry_points_are_quiet():
    # Positive control: a plain import of TensorFlow prints the notices on this machine.
    assert _notices(_py("-c", "import tensorflow").stderr)
    # The Python API, and the modules `make run`'s own process imports (tfdp.apps.pipeline).
    api = _py("-c", "import tfdp.apps.pipeline; from tfdp.train import loop; "
                    "import tensorflow as tf; print(float(tf.constant(1.0) + 1))")
    assert api.stdout.strip() == "2.0" and _notices(api.stderr) == [], api.stderr
    table = _py("-m", "tfdp.mechanisms", "--epsilons=1")
    assert "| 1 |" in table.stdout and _notices(table.stderr) == [], table.stderr
    # An app's --verbose still shows them (cli.import_tensorflow(verbose=True)).
    verbose = _py("-c", "from tfdp.apps import cli; cli.import_tensorflow(verbose=True)")
    assert _notices(verbose.stderr), verbose.stderr


def test_other_output_of_the_import_is_passed_on():
    code = ("import os; from tfdp import quiet_start\n"
            "with quiet_start.filtered_stderr():\n"
            "    os.write(2, b'I0000 port.cc:153] oneDNN custom operations are on\\n'\n"
            "                b'E0000 a real error from C++\\n')\n")
    out = _py("-c", code)
    assert "a real error from C++" in out.stderr and "oneDNN" not in out.stderr


def test_a_failing_import_keeps_its_error_output(tmp_path):
    # A stand-in "tensorflow" that writes to descriptor 2 (as C++ code would) and fails.
    fake = tmp_path / "tensorflow"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "import os\n"
        "os.write(2, b'oneDNN custom operations are on\\nF0000 fake fatal from C++\\n')\n"
        "raise ImportError('fake tensorflow cannot load')\n")
    out = subprocess.run([sys.executable, "-c", "import tfdp; import tensorflow"], cwd=_ROOT,
                         env=dict(os.environ, PYTHONPATH=f"{_ROOT}{os.pathsep}{tmp_path}"),
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode != 0
    assert "fake fatal from C++" in out.stderr and "fake tensorflow cannot load" in out.stderr
    assert "oneDNN" not in out.stderr
