"""Every app's --help: its own flags (no foreign ones), subcommands listed, quickly."""

import os
import subprocess
import sys

import pytest

from tfdp.apps import cli, train_help
from tfdp.bench import BENCHMARKS
from tfdp.train import registry

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Flags of libraries that absl's --helpfull lists and tfdp's help must not.
FOREIGN = ("--tpu", "--test_srcdir", "--test_tmpdir", "--test_random_seed",
           "--xml_output_file", "Try --helpfull", "--only_check_args", "--pdb_post_mortem",
           "--run_with_profiling", "--logtostderr")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("help-cache"))


def _app(module, *args, cache=None, code=None):
    env = dict(os.environ, PYTHONPATH=_ROOT)
    if cache:
        env["TFDP_CACHE_DIR"] = cache
    argv = [sys.executable, "-c", code] if code else [sys.executable, "-m", module]
    return subprocess.run(argv + list(args), cwd=_ROOT, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


def _no_foreign(text):
    for word in FOREIGN:
        assert word not in text, word


def test_train_help_lists_common_then_method_flags(cache_dir):
    out = _app("tfdp.apps.train", "--help", cache=cache_dir)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert len(lines) < 150, len(lines)
    text = out.stdout
    for flag in ("--method", "--epsilon", "--model_dir", "--dataset", "--list_methods"):
        assert f"  {flag}" in text, flag
    _no_foreign(text)
    assert "oneDNN" not in out.stderr and "absl::InitializeLog" not in out.stderr
    # common flags first, then one section per method module, naming every method
    assert text.index("Common flags") < text.index("Flags of ")
    for name in registry.METHODS:
        assert any(line.startswith("Flags of ") and name in line for line in lines), name
    assert "--dpsgd_l2_clip" in text and "--stobatch_eps2" in text
    full = _app("tfdp.apps.train", "--helpfull", cache=cache_dir).stdout
    assert "\u00a7" not in full  # section signs cite private design notes, not in the repository


def test_train_method_help_shows_only_that_method(cache_dir):
    out = _app("tfdp.apps.train", "--method=dpsgd", "--help", cache=cache_dir)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert "--dpsgd_l2_clip" in text and "  --epsilon" in text and "  --model_dir" in text
    for other in ("--adlm_", "--hgm_", "--stobatch_", "--nonprivate_"):
        assert other not in text, other
    assert "--method=dpsgd defaults:" in text
    _no_foreign(text)
    out = _app("tfdp.apps.train", "--method=nosuch", "--help", cache=cache_dir)
    assert out.returncode != 0 and "--method" in out.stderr


def test_help_from_the_cache_imports_no_tensorflow(cache_dir):
    _app("tfdp.apps.train", "--help", cache=cache_dir)  # fills the cache (if not yet)
    code = ("import sys\nfrom tfdp.apps import train\nsys.argv = ['tfdp-train', '--help']\n"
            "try:\n    train.run()\nexcept SystemExit:\n    pass\n"
            "print('TF-IMPORTED', 'tensorflow' in sys.modules)")
    out = _app(None, cache=cache_dir, code=code)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "TF-IMPORTED False"
    assert "--dpsgd_l2_clip" in out.stdout


def test_catalogue_equals_the_declarations():
    cat = train_help.build_catalogue()
    assert set(cat["methods"]) == set(registry.METHODS)
    assert set(registry.summaries()) == set(registry.METHODS)
    assert all(registry.summaries().values())
    import importlib  # pylint: disable=import-outside-toplevel
    for module, options in cat["modules"].items():
        assert [o["name"] for o in options] == list(importlib.import_module(module).OPTIONS.names)


def test_list_methods(cache_dir):
    out = _app("tfdp.apps.train", "--list_methods", cache=cache_dir)
    assert out.returncode == 0, out.stderr[-2000:]
    for name in registry.METHODS:
        assert any(line.split()[:1] == [name] for line in out.stdout.splitlines()), name


@pytest.mark.parametrize("module,needed", [
    ("tfdp.apps.audit", ("samplers", "dp", "training", "gpm-hist", "gpm-dpsgd", "gpm-bounds",
                         "gpm-precision", "--audit_output_dir")),
    ("tfdp.apps.bench", tuple(BENCHMARKS) + ("all", "report", "--results_dir")),
    ("tfdp.apps.evaluate", ("--model_dir", "--attacks", "--certify")),
    ("tfdp.apps.export", ("--model_dir", "--export_dir")),
    ("tfdp.apps.reproduce", ("--scale", "--papers")),
    ("tfdp.apps.runs", ("--format", "--plot", "markdown")),
])
def test_app_help(module, needed):
    out = _app(module, "--help")
    assert out.returncode == 0, out.stderr[-2000:]
    for word in needed:
        assert word in out.stdout, word
    _no_foreign(out.stdout)
    assert "oneDNN" not in out.stderr


def test_audit_training_help_shows_the_training_flags():
    out = _app("tfdp.apps.audit", "training", "--help")
    assert out.returncode == 0, out.stderr[-2000:]
    for word in ("--audit_num_canaries", "--audit_canary", "--method", "--model_dir", "--seed"):
        assert word in out.stdout, word
    assert "oneDNN" not in out.stderr


def test_bench_name_help_shows_its_flags():
    out = _app("tfdp.apps.bench", "gpm", "--help")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Flags of gpm:" in out.stdout and "--gpm_bench_" in out.stdout


def test_format_flag_short_is_one_line():
    lines = cli.format_flag("x", "1", "a " * 200, full=False, width=80)
    assert len(lines) == 1 and len(lines[0]) <= 80
    assert len(cli.format_flag("x", "1", "a " * 200, full=True, width=80)) > 2


def test_argv_value_reads_flagfiles(tmp_path):
    path = tmp_path / "f.flags"
    path.write_text("# c\n--method=stobatch\n")
    assert cli.argv_value(["p", f"--flagfile={path}"], "method") == "stobatch"
    assert cli.argv_value(["p", f"--flagfile={path}", "--method=ilm"], "method") == "ilm"
    assert cli.argv_value(["p", "--method", "adlm"], "method") == "adlm"
    assert cli.argv_value(["p"], "method") is None
