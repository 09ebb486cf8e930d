"""Registry of training methods: name -> "module:Class", imported when needed."""

from __future__ import annotations

import importlib

from tfdp.train.base import Method

METHODS = {
    "nonprivate": "tfdp.train.nonprivate:NonPrivate",
    "dpsgd": "tfdp.train.dpsgd:DPSGD",
    "adlm": "tfdp.train.adlm:AdLM",
    "ilm": "tfdp.train.adlm:ILM",
    "secure_sgd": "tfdp.train.secure_sgd:SecureSGD",
    "secure_sgd_agm": "tfdp.train.secure_sgd:SecureSGDAGM",
    "pixeldp": "tfdp.train.secure_sgd:PixelDP",
    "hgm_pixeldp": "tfdp.train.secure_sgd:HGMPixelDP",
    "stobatch": "tfdp.train.stobatch:StoBatch",
}


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
    obj = getattr(importlib.import_module(module), cls)
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
        importlib.import_module(module)
    return modules
