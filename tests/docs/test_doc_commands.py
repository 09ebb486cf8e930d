"""Every fenced bash / sh / python block of README.md and docs/*.md runs as written.

Default suite (fast): each shell command names an existing tool, subcommand, flagfile and
flags (each flag as the app's own --help lists it; that help is also what a reader sees); each
Python block compiles; no document refers to the private specification files (by their
section-sign numbering), which are not in the repository.
Slow suite: every shell block runs as written (bash -e, in a scratch folder that links the
repository's flags/ and the virtual environment), and every Python block runs in a fresh
interpreter, except the commands of SKIP, each with its reason (GPU, multi-host, hours).
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ["README.md"] + sorted(os.path.relpath(p, _ROOT)
                              for p in glob.glob(os.path.join(_ROOT, "docs", "*.md")))
LANGS = ("bash", "sh", "python")

# Console scripts and the modules they run (setup.py entry points).
APPS = {"tfdp-train": "tfdp.apps.train", "tfdp-evaluate": "tfdp.apps.evaluate",
        "tfdp-audit": "tfdp.apps.audit", "tfdp-bench": "tfdp.apps.bench",
        "tfdp-export": "tfdp.apps.export", "tfdp-reproduce": "tfdp.apps.reproduce",
        "tfdp-runs": "tfdp.apps.runs", "tfdp-publish": "tfdp.apps.publish",
        "pipeline": "tfdp.apps.pipeline",
        "mechanisms": "tfdp.mechanisms", "tfdp-release": "tfdp.apps.release"}
# Flags every absl app accepts besides its own.
_ABSL_FLAGS = {"flagfile", "undefok", "help", "helpfull", "helpshort"}

# Commands (a substring of the command as written) not run by the slow test, with the reason.
SKIP = {
    "git clone https://github.com/haiphanNJIT": "needs the network (the authors' releases)",
    "tfdp-release": "needs a checkout of an authors' release (network) and CPU minutes to hours",
    "tfdp.reproduce.releases.tfdp_side": "a tfdp training run at a release's budget: CPU "
                                         "minutes to hours",
    "make run": "builds the repository's .venv first; CI runs the same job through the "
                "pipeline test (tests/hgm/test_pipeline.py)",
    "make test": "runs the whole test suite (this test is part of it)",
    "pip install": "installs packages (the environment is CI's)",
    "python3 -m venv": "creates a virtual environment (the environment is CI's)",
    "_full.flags": "a paper-scale run: GPU-days (tfdp-reproduce --dry_run --scale=full "
                   "prints its compute)",
    "_reduced.flags": "a reduced-scale run: CPU hours; made by tfdp-reproduce --scale=reduced",
    "cifar10_smoke.flags": "CIFAR-10 smoke runs take 20+ CPU minutes",
    "--scale=short": "about 20 CPU minutes (docs/reproduce.md)",
    "--scale=reduced": "CPU hours",
    "--scale=smoke": "runs every paper's smoke grid (CPU minutes); tests/reproduce covers it",
    "tfdp-reproduce --report": "rewrites the committed REPRODUCTION.md from results/reproduce/ "
                               "(a maintainer command; tests/reproduce covers it)",
    "tfdp-bench report": "rewrites the committed BENCHMARKS.md (tests/bench covers it)",
    "--strategy=multi_worker": "needs a TF_CONFIG cluster of several processes or hosts",
    "TF_CONFIG=": "needs a TF_CONFIG cluster of several processes or hosts",
    "hist_full.flags": "the full DP-hist grid: CPU hours",
    "dpsgd_mnist_abadi_adlm.flags": "DP-SGD until the budget is spent: 20-30 CPU minutes "
                                    "(the adlm.mnist.dpsgd.*.paper_settings reproduction rows)",
    "mnist_lenet5.flags": "pretrains LeNet-5 for 20 epochs and plays 100 games per cell",
    "tfdp-bench all": "every benchmark: CPU hours",
    "tools/hgm/run_reduced_small.sh": "reduced-scale HGM grid: CPU hours",
    "-m pytest": "runs part of this test suite (from the repository, not a scratch folder)",
    "runs/sto_epsEPS": "a template over the eps grid of the table below it (one ~30-minute "
                       "run per eps)",
    "runs/red_eps": "evaluates the reduced-scale run above it (CPU hours)",
}


@dataclasses.dataclass
class Block:
    """One fenced code block."""

    path: str
    line: int
    lang: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def blocks() -> list[Block]:
    """The bash / sh / python blocks of the documents."""
    out = []
    for path in DOCS:
        with open(os.path.join(_ROOT, path), encoding="utf-8") as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            m = re.match(r"^```(\w*)\s*$", lines[i])
            if not m:
                i += 1
                continue
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if m.group(1) in LANGS:
                out.append(Block(path, i + 1, m.group(1), "\n".join(lines[i + 1:j])))
            i = j + 1
    return out


def commands(block: Block) -> list[str]:
    """The commands of a shell block: continuation lines and multi-line quotes joined,
    comments dropped, shell variables assigned earlier in the block (NAME="...") expanded."""
    joined = re.sub(r"\\\n\s*", " ", block.text)
    out, variables, pending = [], {}, ""
    for line in joined.split("\n"):
        pending = f"{pending}\n{line}" if pending else line
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on in the next line
            continue
        command, pending = pending.strip(), ""
        if not words:
            continue
        if len(words) == 1 and re.match(r"^[A-Za-z_]+=", words[0]):
            name, value = words[0].split("=", 1)
            variables[name] = value
            continue
        for name, value in variables.items():
            command = command.replace(f"${name}", value)
        out.append(command.rstrip("&").strip())
    return out


def _app_of(words: list[str]) -> tuple[str | None, list[str]]:
    """(app key, its arguments) of a command's words, else (None, words)."""
    while words and re.match(r"^[A-Z_]+=", words[0]):  # environment assignments
        words = words[1:]
    if not words:
        return None, []
    exe = os.path.basename(words[0])
    if exe in APPS:
        return exe, words[1:]
    if exe.startswith("python") and len(words) > 2 and words[1] == "-m":
        for key, module in APPS.items():
            if words[2] == module:
                return key, words[3:]
    return None, words


@functools.lru_cache(maxsize=None)
def help_flags(app: str, subcommand: str = "") -> frozenset:
    """The flag names the app's help lists (with a benchmark name: its flags too)."""
    args = [sys.executable, "-m", APPS[app]]
    if subcommand:
        args.append(subcommand)
    args.append("--helpfull" if app == "tfdp-train" else "--help")
    out = subprocess.run(args, cwd=_ROOT, env=dict(os.environ, PYTHONPATH=_ROOT),
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, (app, out.stderr[-2000:])
    names = set(re.findall(r"(?m)^\s+--([A-Za-z0-9_]+)", out.stdout))
    if app == "pipeline":
        names |= set(re.findall(r"--([a-z_]+)", out.stdout))
    return frozenset(names | _ABSL_FLAGS)


def _subcommands(app: str) -> tuple:
    if app == "tfdp-audit":
        from tfdp.apps.audit import SUBCOMMANDS  # pylint: disable=import-outside-toplevel
        return SUBCOMMANDS
    if app == "tfdp-bench":
        from tfdp.bench import BENCHMARKS  # pylint: disable=import-outside-toplevel
        return tuple(BENCHMARKS) + ("all", "report")
    return ()


def check_command(command: str) -> list[str]:
    """Problems of one shell command as written (empty when it names only existing things)."""
    problems = []
    words = shlex.split(command, comments=True)
    if words and words[0] == "make":
        with open(os.path.join(_ROOT, "Makefile"), encoding="utf-8") as f:
            targets = set(re.findall(r"(?m)^([a-z][\w-]*):", f.read()))
        problems += [f"make target {t!r} missing" for t in words[1:]
                     if "=" not in t and t not in targets]
        return problems
    for word in words:  # repository scripts and flagfiles named anywhere in the command
        path = word.split("=", 1)[1] if word.startswith("--") and "=" in word else word
        if re.match(r"^(flags|results|tfdp|tests|docs)/\S+\.(flags|sh|py|json|csv)$", path):
            if not os.path.exists(os.path.join(_ROOT, path)):
                problems.append(f"{path} does not exist")
    app, args = _app_of(words)
    if app is None:
        return problems
    positional = [a for a in args if not a.startswith("-")]
    subs = _subcommands(app)
    sub = ""
    if subs:
        if not positional or positional[0] not in subs:
            problems.append(f"{app}: expected a subcommand of {subs}, got {positional[:1]}")
        else:
            # tfdp-bench's benchmarks and `tfdp-audit training` add flags to the help.
            sub = positional[0] if app == "tfdp-bench" or positional[0] == "training" else ""
    elif app in ("tfdp-runs",):
        pass
    elif positional and app != "pipeline":
        problems.append(f"{app}: unexpected arguments {positional}")
    known = help_flags(app, sub)
    for arg in args:
        if not arg.startswith("--"):
            continue
        name = arg[2:].split("=", 1)[0]
        if name in known or (name.startswith("no") and name[2:] in known):
            continue
        problems.append(f"{app}: --{name} is not a flag of {app} (its --help does not list it)")
    return problems


_BLOCKS = blocks()
_SHELL = [b for b in _BLOCKS if b.lang in ("bash", "sh")]
_PYTHON = [b for b in _BLOCKS if b.lang == "python"]


def test_blocks_found():
    assert len(_SHELL) >= 5 and len(_PYTHON) >= 3


@pytest.mark.parametrize("block", _SHELL, ids=lambda b: b.id)
def test_shell_block_names_existing_tools_flags_and_files(block):
    problems = [f"{cmd!r}: {p}" for cmd in commands(block) for p in check_command(cmd)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("block", _PYTHON, ids=lambda b: b.id)
def test_python_block_compiles(block):
    compile(block.text, block.id, "exec")


def test_no_reference_to_the_specification_files():
    hits = []
    for path in DOCS:
        if not os.path.exists(os.path.join(_ROOT, path)):
            continue
        with open(os.path.join(_ROOT, path), encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                # A section sign is the specification's numbering (the papers are cited by
                # Sec., Eq., Alg., Thm); "spec" before an item id (E4, A15), its possessive
                # and the spec folder's *.md files name them too.
                if re.search(r"\u00a7|\bspec\s+[A-Z]\d|spec[/]\w+\.md|\bspec[ ]section"
                             r"|\bthe specs?\b|\bspec's\b|\bspecs'", line):
                    hits.append(f"{path}:{i}: {line.strip()[:100]}")
    assert not hits, "documents point to specification files that are not in the " \
                     "repository:\n" + "\n".join(hits)


def test_check_command_can_fail():
    assert check_command("tfdp-train --no_such_flag=1")
    assert check_command("tfdp-train --flagfile=flags/none/missing.flags")
    assert check_command("tfdp-audit no-such-subcommand")
    assert not check_command("tfdp-train --method=dpsgd --epsilon=2 --nodownload")


# ------------------------------------------------------------------------------ slow: run them

def _skip_reason(command: str) -> str | None:
    for key, reason in SKIP.items():
        if key in command:
            return reason
    return None


def _scratch(tmp_path) -> dict:
    """A scratch working folder: flags/ linked, .venv pointing at this interpreter's prefix."""
    os.symlink(os.path.join(_ROOT, "flags"), tmp_path / "flags")
    os.symlink(sys.prefix, tmp_path / ".venv")
    env = dict(os.environ, PYTHONPATH=_ROOT,
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return env


# A Python block whose first line is this comment lists signatures with placeholders (model_fn,
# x, ...); it is compiled, not run.
API_SUMMARY = "# API summary"  # the first line of such a block


@pytest.mark.slow
@pytest.mark.parametrize("path", DOCS)
def test_document_runs_as_written(path, tmp_path):
    """The page's blocks in order, in one scratch folder, as a reader would run them."""
    env = _scratch(tmp_path)
    ran, skipped = 0, []
    for block in (b for b in _BLOCKS if b.path == path):
        if block.lang == "python":
            if block.text.lstrip().startswith(API_SUMMARY):
                skipped.append(f"{block.id}: an API summary")
                continue
            out = subprocess.run([sys.executable, "-c", block.text], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=3600, check=False)
            assert out.returncode == 0, (block.id, out.stderr[-3000:])
            ran += 1
            continue
        for command in commands(block):
            reason = _skip_reason(command)
            if reason:
                skipped.append(f"{block.id}: {command[:60]}: {reason}")
                continue
            out = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=3600, check=False)
            assert out.returncode == 0, (block.id, command, out.stdout[-2000:],
                                         out.stderr[-3000:])
            ran += 1
    if not ran:
        pytest.skip("; ".join(skipped) or "no bash/sh/python block")


@pytest.mark.slow
def test_readme_python_example_trains_above_80_percent(tmp_path):
    """README's "Use it from Python" block, in a fresh interpreter: > 80% on the sample."""
    block = next(b for b in _PYTHON if b.path == "README.md")
    assert "loop.train(" in block.text and 'data.load("sample"' in block.text
    env = _scratch(tmp_path)
    out = subprocess.run([sys.executable, "-c", block.text], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=3600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    accuracy, epsilon = (float(v) for v in out.stdout.strip().splitlines()[-1].split())
    assert accuracy > 0.8 and 0 < epsilon <= 2.0
