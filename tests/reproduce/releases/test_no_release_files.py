"""The authors' releases never enter tfdp: no file of theirs (by name) and none of their
distinctive identifiers in the repository's tracked files or in what the package installs."""

import os
import subprocess

from setuptools import find_packages

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

# The releases' script and data file names (AdLM, Secure-SGD, StoBatch).
RELEASE_FILES = {"AdLM.py", "dpLRP_MNIST.py", "AdLMCNN_CIFAR.py", "CifarEval_AdLM2.py",
                 "SecureSGD.py", "SecureSGDCifar.py", "robustnessGGaussian.py",
                 "gaussian_moments.py", "more_attack.py", "StoBatch.py",
                 "StoBatch_cifar10.py", "StoBatch_cifar10_testing.py",
                 "StoBatch_resnet_pretrain.py", "Relevance_R_0_075.txt", "LRP_0_25_v12.txt",
                 "cifar10_read.py", "priv_calc.py", "build_graph.py", "build_utils.py"}
# Function and class names found only in the releases' code (never needed to run them: the
# harness edits a temporary copy by the job's short line fragments only). Spelled in pieces
# so that this file does not contain them whole.
_PIECES = (("generateIdLM", "Noise"), ("generateHk", "Noise"), ("robustness_size", "_argmax"),
           ("CustomCallable", "ModelWrapper"), ("get_train", "_ops2"), ("redistribute", "Noise"),
           ("DataSet", "Parallel"), ("next_super", "_batch"), ("inference_test", "_input_probs"),
           ("Taylor", "Exp("))
IDENTIFIERS = tuple(a + b for a, b in _PIECES)
_THIS = os.path.abspath(__file__)


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, check=True, capture_output=True,
                             text=True).stdout.split("\n")
        return [os.path.join(ROOT, p) for p in out if p]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: walk the tree
        return [os.path.join(d, f) for d, dirs, fs in os.walk(ROOT)
                for f in fs if ".git" not in d.split(os.sep)]


def _packaged() -> list[str]:
    """The files setup.py installs: its packages' files (find_packages as setup.py calls it)."""
    files = []
    for pkg in find_packages(where=ROOT, include=["tfdp", "tfdp.*", "layers", "layers.*",
                                                  "attacks", "attacks.*"]):
        folder = os.path.join(ROOT, *pkg.split("."))
        files.extend(os.path.join(folder, f) for f in os.listdir(folder)
                     if os.path.isfile(os.path.join(folder, f)))
    return files


def _offenders(paths: list[str]) -> list[str]:
    bad = []
    for path in paths:
        if os.path.abspath(path) == _THIS or not os.path.isfile(path):
            continue
        if os.path.basename(path) in RELEASE_FILES:
            bad.append(f"{os.path.relpath(path, ROOT)}: a release file name")
            continue
        with open(path, "rb") as f:
            data = f.read(2_000_000)
        for ident in IDENTIFIERS:
            if ident.encode() in data:
                bad.append(f"{os.path.relpath(path, ROOT)}: contains {ident!r}")
    return bad


def test_no_release_file_or_identifier_in_the_tree():
    paths = _tracked()
    assert len(paths) > 100  # the listing worked
    assert not _offenders(paths)


def test_no_release_file_or_identifier_in_the_package():
    paths = _packaged()
    assert any(p.endswith(os.path.join("releases", "harness.py")) for p in paths)
    assert not _offenders(paths)


def test_the_check_finds_a_planted_release_file(tmp_path):
    planted = tmp_path / "StoBatch.py"
    planted.write_text("x = 1\n")
    copied = tmp_path / "helper.py"
    copied.write_text("def " + IDENTIFIERS[0] + "(): pass\n")
    found = _offenders([str(planted), str(copied)])
    assert len(found) == 2 and "release file name" in found[0] and IDENTIFIERS[0] in found[1]
