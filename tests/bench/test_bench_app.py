"""tfdp-bench's --output: checked before the benchmark runs, folders created, written whole."""

import json
import os
import subprocess
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TINY_GPM = ["--gpm_bench_d=64", "--gpm_bench_samples=2", "--gpm_bench_repeats=2"]


def _bench(*args):
    env = dict(os.environ, PYTHONPATH=_ROOT)
    return subprocess.run([sys.executable, "-m", "tfdp.apps.bench", *args], cwd=_ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def test_output_in_folders_that_do_not_exist_yet_is_written(tmp_path):
    out = tmp_path / "runs" / "bench" / "gpm.json"
    proc = _bench("gpm", *_TINY_GPM, f"--output={out}")
    assert proc.returncode == 0, proc.stderr
    with open(out, encoding="utf-8") as f:
        result = json.load(f)
    assert result["command"].startswith("tfdp-bench gpm ") and "ratio" in result
    assert f"wrote {out}" in proc.stdout
    assert not [n for n in os.listdir(out.parent) if n.startswith(".tmp-")]


def test_an_output_that_cannot_be_written_is_refused_before_the_benchmark(tmp_path):
    folder = tmp_path / "a_folder"
    folder.mkdir()
    blocker = tmp_path / "a_file"
    blocker.write_text("x", encoding="utf-8")
    for output, says in ((folder, "is a directory"), (blocker / "gpm.json", "is a file")):
        proc = _bench("gpm", *_TINY_GPM, f"--output={output}")
        assert proc.returncode != 0
        assert "--output" in proc.stderr and says in proc.stderr, proc.stderr
        # Refused before any work: the benchmark's result (printed before it is written)
        # never appears.
        assert '"command"' not in proc.stdout
    assert sorted(os.listdir(tmp_path)) == ["a_file", "a_folder"]
    assert os.listdir(folder) == []
