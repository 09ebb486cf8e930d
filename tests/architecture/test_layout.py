"""The tree's shape: one package per paper, no import cycles, tools apart from results."""

from __future__ import annotations

import functools
import os
import subprocess

from tests.architecture import imports

ROOT = imports.ROOT


@functools.lru_cache(maxsize=1)
def _graph() -> dict:
    """The tree's import graph, read once for the tests of this module (not modified)."""
    return imports.edges()


def _describe(graph, cycle):
    lines = []
    for a in cycle:
        for b, linenos in sorted(graph[a].items()):
            if b in cycle:
                lines.append(f"  {a} -> {b} (line {', '.join(map(str, linenos))})")
    return "\n".join(lines)


def test_no_import_cycle_among_tfdp_layers_and_attacks_counting_function_level_imports():
    graph = _graph()
    assert len(graph) > 100  # every module was read
    found = imports.cycles(graph)
    assert not found, "import cycles:\n" + "\n\n".join(_describe(graph, c) for c in found)


def test_the_cycle_finder_sees_an_import_hidden_in_a_function(tmp_path):
    pkg = tmp_path / "tfdp"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from tfdp import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from tfdp.a import x\n")
    (pkg / "b.py").write_text("def f():\n    from .sub import c  # hidden\n    return c\n")
    known = imports.modules(str(tmp_path), ("tfdp",))
    graph = imports.edges(known)
    assert graph["tfdp.b"] == {"tfdp.sub.c": [2]}
    assert imports.cycles(graph) == [["tfdp.a", "tfdp.b", "tfdp.sub.c"]]


def test_paper_helpers_live_in_their_paper_packages():
    for name in ("relevance.py", "redistribution.py", "hgm_figure.py"):
        assert not os.path.exists(os.path.join(ROOT, "tfdp", name)), name
    for paper, files in {"adlm": ("method.py", "models.py", "relevance.py"),
                         "hgm": ("method.py", "models.py", "redistribution.py", "figure.py"),
                         "stobatch": ("method.py", "models.py"),
                         "gpm": ("pancake.py", "experiments.py")}.items():
        for name in ("__init__.py",) + files:
            assert os.path.exists(os.path.join(ROOT, "tfdp", "papers", paper, name)), \
                f"tfdp/papers/{paper}/{name}"


def test_results_hold_data_only():
    try:
        listed = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: walk the tree
        listed = [os.path.relpath(os.path.join(d, f), ROOT)
                  for d, _, fs in os.walk(os.path.join(ROOT, "results")) for f in fs]
    assert listed, "results/ is empty or unreadable"
    scripts = [p for p in listed if p.endswith((".py", ".sh"))]
    assert not scripts, f"scripts under results/ (move them to tools/): {scripts}"


def test_every_builtin_paper_declares_itself_and_the_registry_imports_no_paper():
    from tfdp import registry  # pylint: disable=import-outside-toplevel
    assert list(registry.papers()) == ["adlm", "hgm", "stobatch", "gpm"]
    for paper in registry.papers().values():
        for m in paper.methods:
            assert m.module.startswith(f"tfdp.papers.{paper.name}."), m
        assert paper.rows == f"tfdp.papers.{paper.name}.rows:rows"
    graph = _graph()
    assert not [m for m in graph["tfdp.registry"] if m.startswith("tfdp.papers")]
    assert not [m for m in graph["tfdp.reproduce.registry"] if m.startswith("tfdp.papers")]
    assert not [m for m in graph["tfdp.train.registry"] if m.startswith("tfdp.papers")]


def _is_app(mod: str) -> bool:
    """An app module, or a `__main__` module (run as a program, never imported)."""
    return mod.startswith("tfdp.apps.") or mod.split(".")[-1] == "__main__"


def test_shared_code_imports_no_paper():
    """Issue 42: outside tfdp/papers (apps included) nothing imports a paper's modules, at
    module level or in a function; papers are found through the registry alone."""
    graph = _graph()
    found = [f"{a} -> {b} (line {', '.join(map(str, lines))})"
             for a, targets in sorted(graph.items()) if not a.startswith("tfdp.papers")
             for b, lines in sorted(targets.items()) if b.startswith("tfdp.papers.")]
    assert not found, "shared modules importing a paper:\n" + "\n".join(found)


def test_library_modules_import_no_app():
    """Issue 42: library modules never import `tfdp.apps` (flags live only in the apps), not
    even inside a function."""
    graph = _graph()
    found = [f"{a} -> {b} (line {', '.join(map(str, lines))})"
             for a, targets in sorted(graph.items()) if not _is_app(a)
             for b, lines in sorted(targets.items()) if b.startswith("tfdp.apps")]
    assert not found, "library modules importing an app:\n" + "\n".join(found)


def test_no_import_runs_back_up_a_floor():
    """Issue 42: every module's room is on a floor (imports.FLOORS) and no import, at module
    level or in a function, reaches a higher floor (tools/architecture/structure.py draws it)."""
    graph = _graph()
    for mod in graph:
        imports.floor(mod)  # KeyError naming a room on no floor
    found = [f"{a} (floor {imports.floor(a)}) -> {b} (floor {imports.floor(b)}), line "
             f"{', '.join(map(str, lines))}" for a, b, lines in imports.upward(graph)]
    assert not found, "imports running back up:\n" + "\n".join(found)


def test_the_floor_check_sees_an_import_running_back_up(tmp_path):
    pkg = tmp_path / "tfdp"
    (pkg / "train").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "train" / "__init__.py").write_text("")
    (pkg / "checks.py").write_text("def f():\n    from tfdp.train import loop  # hidden\n")
    (pkg / "train" / "loop.py").write_text("from tfdp import checks\n")
    graph = imports.edges(imports.modules(str(tmp_path), ("tfdp",)))
    assert imports.upward(graph) == [("tfdp.checks", "tfdp.train.loop", [2])]
    assert imports.room("tfdp.papers.gpm.rows") == "papers.gpm"
    assert imports.floor("tfdp.mechanisms.__main__") == imports.floor("tfdp.apps.train")


def test_each_salt_is_defined_once():
    """Issue 42: an integer salt or tag folded into a seed is one named constant, never two
    (export's smoothing tag and the training step's smoothing salt were two copies)."""
    import ast  # pylint: disable=import-outside-toplevel
    values: dict[int, list[str]] = {}
    for mod, path in imports.modules().items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and ("SALT" in node.targets[0].id.upper() or "_TAG_" in node.targets[0].id)
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int)
                    and node.value.value > 255):  # small tags number streams within one key
                values.setdefault(node.value.value, []).append(f"{mod}.{node.targets[0].id}")
    assert values, "no salt found"
    twice = {v: names for v, names in values.items() if len(names) > 1}
    assert not twice, f"salts defined more than once: {twice}"
    from tfdp.certify import smoothing  # pylint: disable=import-outside-toplevel
    assert smoothing.STEP_SALT == smoothing.SALT == 0x534D  # the one smoothing salt


def test_function_level_imports_are_needed_and_say_why():
    """Issue 28: an import inside a function only where it keeps a slow or optional package
    (TensorFlow, Keras, matplotlib, scipy, ...) out of a module whose import does not load one,
    for matplotlib (figures only), or for an app module (it defines absl flags when imported:
    a library module defines none, another app only for the subcommand that needs them); each
    says why in a comment ("# lazy: ..." or
    "# optional: ...") on the line before it, or above its run of imports."""
    known = imports.modules()
    heavy = imports.heavy_at_import(known)
    problems = []
    for mod, path, line_no, _, targets in imports.function_imports(known):
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        above = line_no - 2
        while above >= 0 and lines[above].strip().startswith(("import ", "from ")):
            above -= 1
        reason = lines[above].strip() if above >= 0 else ""
        where = f"{os.path.relpath(path, imports.ROOT)}:{line_no}"
        if not reason.startswith(("# lazy:", "# optional:")):
            problems.append(f"{where}: no '# lazy:' / '# optional:' comment says why")
            continue
        if reason.startswith("# optional:"):
            continue
        for target in targets:
            if target.startswith("tfdp.apps.") and target != mod and _is_app(mod):
                continue  # an app defines absl flags when imported: only where they are wanted
            root = target.split(".")[0]
            loads = (root if target not in known and root in imports.HEAVY else
                     next((heavy[p] for p in imports.parents(target, known)
                           if p in heavy), None))
            if loads is None:
                problems.append(f"{where}: {target} loads no slow package: import it at the top")
            elif loads != "matplotlib" and mod in heavy:
                problems.append(f"{where}: {mod} already loads {heavy[mod]} when imported: "
                                f"import {target} at the top")
    assert not problems, "\n".join(problems)
