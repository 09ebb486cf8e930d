"""No tracked source, test, flagfile or document cites the private specification files.

The implementation notes the project was built from (the "spec" files with their numbered
sections) are not in the repository, so a reference such as "HGM spec <section sign>3.2",
"spec/adlm.md" or "spec s4" cannot be followed by a user. Code and documents cite the papers
(Sec., Eq., Thm, Alg., Fig., Table, App.), the authors' code releases, or the docs/ pages.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SELF = os.path.relpath(os.path.abspath(__file__), _ROOT).replace(os.sep, "/")

# Folders scanned (every tracked file below them) and single files / globs at the top level.
_FOLDERS = ("tfdp/", "layers/", "attacks/", "flags/", "docs/", "tests/")
_FILES = ("README.md", "REPRODUCTION.md", "BENCHMARKS.md", "Makefile", "setup.py")
_RESULT_DOCS = re.compile(r"^results/reproduce/[^/]+\.md$")

# The section sign is the specification's numbering; the papers are cited by Sec., Eq. etc.
_SECTION = "\u00a7"
_PATTERN = re.compile(
    "|".join([
        r"\bspec\s*" + _SECTION,                  # "spec <sign>3.2", "spec<sign>3.2"
        _SECTION,                                 # "StoBatch <sign>2.6", "(<sign>7 A2)"
        r"\bspec/",                               # "spec/adlm.md", "/work/shared/spec/"
        r"\bspec\s+(section|sec\b|sec\.|s\d)",    # "spec section 4", "spec Sec. 5.1", "spec s4"
        r"\bspec\s+[AER]\d",                      # item ids: "spec E4", "spec A15", "spec R1"
    ]),
    re.IGNORECASE)


def _tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=_ROOT, capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    paths = [p for p in out.decode("utf-8").split("\0") if p]
    return sorted(p for p in paths
                  if p != _SELF and (p.startswith(_FOLDERS) or p in _FILES
                                     or _RESULT_DOCS.match(p)))


def _text(path: str) -> str | None:
    full = os.path.join(_ROOT, path)
    if not os.path.isfile(full):  # deleted in the working tree
        return None
    with open(full, "rb") as f:
        data = f.read()
    if b"\0" in data:  # binary (npz, png, ...)
        return None
    return data.decode("utf-8", errors="replace")


def test_pattern_catches_the_forms_in_use():
    for bad in ("HGM spec " + _SECTION + "3.2", "(spec" + _SECTION + "4.2)", "StoBatch spec "
                + _SECTION + "7 A2", "AdLM " + _SECTION + "3.5", "see spec/adlm.md",
                "GPM spec Sec. 5.1", "spec section 4", "Spec S3", "(spec E4)", "spec A15"):
        assert _PATTERN.search(bad), bad
    for fine in ("HGM paper, Sec. 3.2, Eq. 7", "(AdLM, Eq. 16)", "(StoBatch, Alg. 1)",
                 "the authors' code release (MNIST/AdLM.py)", "docs/hgm.md", "TensorSpec",
                 "input_spec", "spec=spec", "spec[0]", "data_spec.x_train", "the spec of arrays"):
        assert not _PATTERN.search(fine), fine


def test_no_tracked_file_cites_the_private_spec():
    files = _tracked_files()
    assert any(p.startswith("tfdp/") for p in files) and "README.md" in files
    hits = []
    for path in files:
        text = _text(path)
        if text is None:
            continue
        for i, line in enumerate(text.splitlines(), 1):
            if _PATTERN.search(line):
                hits.append(f"{path}:{i}: {line.strip()[:120]}")
    assert not hits, ("these lines cite the private specification files, which are not in "
                      "the repository; cite the paper (Sec./Eq./Thm/Alg./Fig./Table/App.), the "
                      "authors' code release or a docs/ page instead:\n" + "\n".join(hits))
