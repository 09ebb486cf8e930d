"""The tfdp wheel: what it contains, and (slow) `python -m build` + a fresh venv that runs the
README's "Your own model" tutorial outside the checkout."""

import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _source_copy(dest: str) -> str:
    """The repository's files (tracked and new, not ignored) copied to `dest`, so a build
    leaves nothing (build/, *.egg-info) in the checkout."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for rel in listed:
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src):
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, rel))
    return dest


def _wheel_names(wheel: str) -> set:
    with zipfile.ZipFile(wheel) as z:
        return set(z.namelist())


REQUIRED = ["tfdp/keras/__init__.py", "tfdp/keras/model.py", "tfdp/keras/clip.py",
            "tfdp/keras/layers.py", "tfdp/keras/certify.py", "tfdp/keras/audit.py",
            "tfdp/data_files/mnist_sample.npz", "tfdp/data_files/mnist_sample_20k.npz",
            "tfdp/kernels/noise_kernel.cc", "tfdp/apps/train.py", "layers/noise.py",
            "attacks/core.py"]


def test_wheel_contents(tmp_path):
    src = _source_copy(str(tmp_path / "src"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--quiet", "-w", str(tmp_path / "dist"), src], check=True)
    wheels = glob.glob(str(tmp_path / "dist" / "tfdp-*.whl"))
    assert len(wheels) == 1
    names = _wheel_names(wheels[0])
    missing = [n for n in REQUIRED if n not in names]
    assert not missing
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    with zipfile.ZipFile(wheels[0]) as z:
        text = z.read(entry_points).decode()
    assert "tfdp-train = tfdp.apps.train:run" in text
    assert not any(n.startswith(("tests/", "results/")) for n in names)


@pytest.mark.slow
def test_build_install_and_run_tutorial_in_a_fresh_venv(tmp_path):
    """`python -m build` (PyPI for the build tools), the wheel installed with --no-deps into a
    fresh venv that reuses this environment's packages through a .pth file, then the README's
    tutorial run from a folder outside the checkout with no PYTHONPATH."""
    src = _source_copy(str(tmp_path / "src"))
    tools = tmp_path / "buildenv"
    subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True)
    subprocess.run([str(tools / "bin" / "python"), "-m", "pip", "install", "--quiet", "build"],
                   check=True)
    subprocess.run([str(tools / "bin" / "python"), "-m", "build", "--wheel", "--outdir",
                    str(tmp_path / "dist"), src], check=True, capture_output=True)
    wheel = glob.glob(str(tmp_path / "dist" / "tfdp-*.whl"))[0]
    assert not [n for n in REQUIRED if n not in _wheel_names(wheel)]

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # The big dependencies (TensorFlow, Keras, ...) from this environment; tfdp from the wheel
    # (the venv's own site-packages comes first on sys.path).
    with open(os.path.join(site, "deps.pth"), "w", encoding="utf-8") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([py, "-m", "pip", "install", "--quiet", "--no-deps", wheel], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    work = tmp_path / "user"
    work.mkdir()
    where = subprocess.run([py, "-c", "import tfdp; print(tfdp.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(site), where
    sys.path.insert(0, os.path.join(ROOT, "tools", "keras"))
    try:
        import run_readme_tutorial  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    (work / "own_model.py").write_text(run_readme_tutorial.readme_block())
    out = subprocess.run([py, "own_model.py"], cwd=work, env=env, capture_output=True,
                         text=True, check=True, timeout=3600).stdout
    match = run_readme_tutorial.LINE.search(out.strip().splitlines()[-1])
    assert match and float(match["eps"]) <= 3.0
    assert float(match["acc"]) > 0.8
