"""Registry of training methods: name -> Method subclass, imported when needed.

The methods are declared by the papers (`tfdp.registry`); this module resolves them.
"""

from __future__ import annotations

from tfdp import registry as _papers
from tfdp.train.base import Method

# name -> "module:Class"; rebuilt by reload() (for papers added through TFDP_PAPERS).
METHODS: dict[str, str] = {}


def reload() -> None:
    """Re-reads the papers' declarations (`tfdp.registry.reload`) and refreshes METHODS."""
    _papers.reload()
    _refresh()


def _refresh() -> None:
    METHODS.clear()
    METHODS.update({name: spec.target for name, spec in _papers.methods().items()})


def summaries() -> dict[str, str]:
    """name -> one-line summary, for --list_methods and the help."""
    return {name: spec.summary for name, spec in _papers.methods().items()}


def _split(name: str) -> tuple[str, str]:
    if name not in METHODS:
        raise ValueError(f"method: unknown method {name!r}; choose one of {sorted(METHODS)}")
    module, _, cls = METHODS[name].partition(":")
    return module, cls


def method_module(name: str) -> str:
    """The module that defines method `name` (and its OPTIONS, the source of its flags).

    Raises:
      ValueError: if `name` is not registered.
    """
    return _split(name)[0]


def get_method_class(name: str) -> type[Method]:
    """Imports and returns the Method subclass registered as `name`.

    Raises:
      ValueError: if `name` is not registered.
      ImportError: if its module cannot be imported (never silently skipped).
      TypeError: if the registered object is not a Method subclass.
    """
    module, cls = _split(name)
    obj = _papers.load(f"{module}:{cls}")
    if not (isinstance(obj, type) and issubclass(obj, Method)):
        raise TypeError(f"METHODS[{name!r}] = {METHODS[name]!r} is not a tfdp Method subclass")
    return obj


def import_method_modules(names=None) -> list[str]:
    """Imports the modules of the given (default: all) registered methods.

    Args:
      names: method names, or None for every registered method.

    Returns:
      The imported module names.

    Raises:
      ImportError: if a module is missing or fails to import.
    """
    modules = sorted({method_module(n) for n in (METHODS if names is None else names)})
    for module in modules:
        _papers.load(module + ":__name__")
    return modules


_refresh()
