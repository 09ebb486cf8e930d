"""The import graph of tfdp, layers and attacks, read from the source (nothing is imported).

Every import statement counts, at module level or inside a function, so a cycle cannot hide
behind a function-level import.
"""

from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("tfdp", "layers", "attacks")


def modules(root: str = ROOT, packages=PACKAGES) -> dict[str, str]:
    """Dotted module name -> file path, for every .py file of the packages."""
    out = {}
    for pkg in packages:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, pkg)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if not name.endswith(".py"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root)[:-3]
                parts = rel.split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                out[".".join(parts)] = os.path.join(dirpath, name)
    return out


def _resolve(name: str, known: dict[str, str]) -> str | None:
    """The longest known module that `name` is or lies in."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def _targets(node, mod: str, is_pkg: bool, known: dict[str, str]) -> list[str]:
    """The dotted names an import statement of module `mod` imports (relative ones resolved;
    `from pkg import name` names the submodule when `pkg.name` is a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        anchor = mod.split(".") if is_pkg else mod.split(".")[:-1]
        anchor = anchor[:len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def edges(known: dict[str, str] | None = None) -> dict[str, dict[str, list[int]]]:
    """importer -> {imported module: [line numbers]}; an import of a package's submodule
    (`from tfdp.certify import core`) counts as an edge to the submodule only."""
    known = modules() if known is None else known
    graph: dict[str, dict[str, list[int]]] = {m: {} for m in known}
    for mod, path in known.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        is_pkg = os.path.basename(path) == "__init__.py"
        for node in ast.walk(tree):
            targets = (_targets(node, mod, is_pkg, known)
                       if isinstance(node, (ast.Import, ast.ImportFrom)) else [])
            for t in targets:
                dest = _resolve(t, known)
                if dest is not None and dest != mod:
                    graph[mod].setdefault(dest, []).append(node.lineno)
    return graph


def cycles(graph: dict[str, dict[str, list[int]]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# Packages whose import is slow or optional: a function-level import is justified only for
# these (directly, or through a tfdp module that loads one at import time).
HEAVY = ("tensorflow", "keras", "matplotlib", "scipy", "dp_accounting", "tensorflow_privacy",
         "cleverhans", "PIL", "torch")


def _imports(tree: ast.AST, mod: str, is_pkg: bool, known: dict[str, str], top_level: bool):
    """(node, [internal module or external dotted name]) of each import statement; only those
    run at import time when `top_level`, only those inside functions otherwise."""
    out = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                       ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function != top_level:
                targets = _targets(child, mod, is_pkg, known)
                resolved = [_resolve(t, known) or t for t in targets]
                out.append((child, resolved))
            visit(child, inside)

    visit(tree, False)
    return out


def parents(name: str, known: dict[str, str]) -> list[str]:
    """`name` and the packages above it that importing it runs (their __init__)."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)
            if ".".join(parts[:i]) in known]


def heavy_at_import(known: dict[str, str] | None = None) -> dict[str, str]:
    """module -> the heavy package its import loads (module-level imports, followed through
    tfdp modules); modules whose import loads none are absent."""
    known = modules() if known is None else known
    direct: dict[str, list[str]] = {}
    for mod, path in known.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        names = []
        for _, targets in _imports(tree, mod, os.path.basename(path) == "__init__.py", known,
                                   top_level=True):
            names.extend(targets)
        direct[mod] = names
    result: dict[str, str] = {}

    def heavy(mod, seen):
        if mod in result:
            return result[mod]
        if mod in seen:
            return None
        seen.add(mod)
        for target in direct.get(mod, ()):
            if target in known:
                for dep in parents(target, known):
                    found = heavy(dep, seen)
                    if found:
                        result[mod] = found
                        return found
            elif target.split(".")[0] in HEAVY:
                result[mod] = target.split(".")[0]
                return result[mod]
        return None

    for mod in known:
        for dep in parents(mod, known):
            found = heavy(dep, set())
            if found:
                result[mod] = found
                break
    return result


def function_imports(known: dict[str, str] | None = None) -> list[tuple]:
    """(module, path, line number, line text, [targets]) of every import inside a function."""
    known = modules() if known is None else known
    out = []
    for mod, path in known.items():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        lines = text.splitlines()
        for node, targets in _imports(ast.parse(text, path), mod,
                                      os.path.basename(path) == "__init__.py", known,
                                      top_level=False):
            out.append((mod, path, node.lineno, lines[node.lineno - 1], targets))
    return out


# The floors of the tree (docs/architecture.md, "Floors"): a module may import modules on its
# own floor or below. A room is a top-level module or package of tfdp (each paper its own
# room), or `layers` / `attacks`; a `__main__` module is run, never imported, so it stands
# with the apps.
FLOORS = (
    ("base", ("tfdp", "allocator", "onednn", "checks", "clopper_pearson", "quiet_start", "tf_options", "options",
              "registry", "rundir",
              "kernels", "serving_inputs", "soundness", "tf_privacy_shim")),
    ("primitives", ("mechanisms", "data", "models", "attacks")),
    ("layers and maths", ("accounting", "composition", "dpsgd_accounting", "layers", "losses",
                          "certify", "data_files")),
    ("training", ("train", "run_model", "audit")),
    ("using a run", ("export", "export_signatures", "exported_model", "evaluate",
                     "eval_arrays", "eval_checks", "eval_options", "eval_report", "publish")),
    ("harnesses", ("keras", "bench", "reproduce")),
    ("papers", ("papers",)),
    ("apps", ("apps", "__main__")),
)


def room(mod: str) -> str:
    """The room of a module: `papers.<name>` for a paper, `__main__` for a module that is run,
    else the tfdp top-level module or package it lies in (`layers`, `attacks` outside tfdp)."""
    parts = mod.split(".")
    if parts[-1] == "__main__":
        return "__main__"
    if parts[0] != "tfdp":
        return parts[0]
    if len(parts) == 1:
        return "tfdp"
    if parts[1] == "papers" and len(parts) > 2:
        return f"papers.{parts[2]}"
    return parts[1]


def floor(mod: str) -> int:
    """The floor (0 = bottom) of a module's room.

    Raises:
      KeyError: the room is on no floor (add it to FLOORS).
    """
    name = room(mod).split(".")[0]
    for level, (_, rooms) in enumerate(FLOORS):
        if name in rooms:
            return level
    raise KeyError(f"{mod}: room {name!r} is on no floor of FLOORS")


def upward(graph: dict[str, dict[str, list[int]]]) -> list[tuple[str, str, list[int]]]:
    """(importer, imported, line numbers) of every import that runs back up to a higher floor,
    sorted."""
    return sorted((a, b, lines) for a, targets in graph.items()
                  for b, lines in targets.items() if floor(b) > floor(a))
