"""tfdp-train's help: the common flags first, then each method's, and `--list_methods`.

The method flags come from the methods' option declarations (`OPTIONS` of each method module,
`tfdp.options`), whose modules import TensorFlow. So that `--help` does not wait for
TensorFlow, the declarations and each method's defaults are kept in a small JSON catalogue
in the user's cache directory (TFDP_CACHE_DIR, else $XDG_CACHE_HOME/tfdp, else
~/.cache/tfdp), keyed by a hash of the installed tfdp sources: any change to tfdp makes a new
key, so a stale catalogue is never read. Without a usable cache the modules are imported.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import textwrap
from typing import Any, Optional, Sequence

from tfdp.apps import cli
from tfdp import registry as tfdp_registry
from tfdp.train import registry
import tfdp


_CATALOGUE_VERSION = 1


def _source_hash() -> str:
    """sha256 over every .py file of the installed tfdp package and of the packages named in
    TFDP_PAPERS (and the Python version)."""
    roots = [os.path.dirname(os.path.abspath(tfdp.__file__))]
    for package in tfdp_registry.plugin_packages():
        module = importlib.import_module(package)
        roots.append(os.path.dirname(os.path.abspath(module.__file__)))
    h = hashlib.sha256(f"{_CATALOGUE_VERSION} {sys.version_info[:2]}".encode())
    for root in roots:
        h.update(root.encode())
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    h.update(os.path.relpath(path, root).encode())
                    with open(path, "rb") as f:
                        h.update(f.read())
    return h.hexdigest()[:20]


def cache_dir() -> str:
    """Where the help catalogue is kept."""
    if os.environ.get("TFDP_CACHE_DIR"):
        return os.environ["TFDP_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tfdp")


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def build_catalogue() -> dict:
    """Every method's module and defaults and every method module's options (imports them)."""
    methods, modules = {}, {}
    for name in registry.METHODS:
        module = registry.method_module(name)
        cls = registry.get_method_class(name)
        methods[name] = {"module": module,
                         "defaults": {k: _jsonable(v) for k, v in
                                      (getattr(cls, "default_flags", {}) or {}).items()}}
        if module not in modules:
            modules[module] = [
                {"name": o.name, "kind": o.kind, "default": _jsonable(o.default),
                 "help": o.help, "enum_values": _jsonable(o.enum_values)}
                for o in importlib.import_module(module).OPTIONS]
    return {"methods": methods, "modules": modules}


def catalogue(use_cache: bool = True) -> dict:
    """The catalogue, from the cache when it matches the installed sources."""
    path = None
    if use_cache:
        try:
            path = os.path.join(cache_dir(), f"train-help-{_source_hash()}.json")
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            if set(data.get("methods", {})) == set(registry.METHODS):
                return data
        except (OSError, ValueError):
            pass
    cli.quiet_start(sys.argv, level=2)
    data = build_catalogue()
    if path:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only home: the next help imports the modules again
    return data


def _option_default(opt: dict) -> str:
    value = opt["default"]
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def _option_help(opt: dict) -> str:
    if opt["kind"] == "enum":
        return f"<{'|'.join(opt['enum_values'])}>: {opt['help']}"
    return opt["help"]


def _methods_of(cat: dict, module: str) -> list[str]:
    return [n for n, m in cat["methods"].items() if m["module"] == module]


def list_methods_lines(cat: Optional[dict] = None) -> list[str]:
    """--list_methods: every method, its summary and its flag prefix."""
    cat = cat if cat is not None else catalogue()
    width = max(len(n) for n in registry.METHODS)
    lines = ["Methods of tfdp-train --method (tfdp-train --method=NAME --help shows its flags):"]
    summaries = registry.summaries()
    for name in registry.METHODS:
        prefix = _prefix(cat, cat["methods"][name]["module"])
        lines.append(f"  {name:<{width}}  {summaries[name]}"
                     + (f" [--{prefix}*]" if prefix else ""))
    return lines


def _prefix(cat: dict, module: str) -> str:
    names = [o["name"] for o in cat["modules"].get(module, [])]
    if not names:
        return ""
    return os.path.commonprefix(names).rsplit("_", 1)[0] + "_" if "_" in names[0] else ""


def help_lines(common_flags: Sequence, method: Optional[str], kind: str,
               doc: str) -> list[str]:
    """tfdp-train's help.

    Args:
      common_flags: the absl flags of tfdp.apps.train, in definition order.
      method: with --method=X --help, X (only X's flags are shown, in full).
      kind: 'short' (one line per flag) or 'full' (wrapped full text; --helpfull).
      doc: the first line of the app's docstring.
    """
    cat = catalogue()
    lines = [doc, "",
             "usage: tfdp-train --method=METHOD [--dataset=DATA] [--epsilon=EPS] [flags]",
             "       tfdp-train --flagfile=FILE [flags]     (samples: flags/*/*.flags)",
             "       tfdp-train --method=METHOD --help      (that method's flags in full)",
             "       tfdp-train --list_methods              (what each method is)",
             "       tfdp-train --helpfull                  (every flag in full)",
             "",
             "Methods: " + ", ".join(registry.METHODS)]
    full = kind == "full" or method is not None
    lines += ["", "Common flags (unset values take the method's defaults):"]
    lines += cli.format_flags(common_flags, full=full)
    if method is not None:
        modules = [cat["methods"][method]["module"]]
    else:
        modules = list(dict.fromkeys(m["module"] for m in cat["methods"].values()))
    for module in modules:
        names = [method] if method else _methods_of(cat, module)
        lines += ["", f"Flags of {', '.join(names)} ({module}):"]
        for name in names if full else ():  # the defaults: in --method=X --help
            defaults = cat["methods"][name]["defaults"]
            if defaults:
                text = f"  --method={name} defaults: " + " ".join(
                    f"--{k}={_option_default({'default': v})}" for k, v in defaults.items())
                lines += textwrap.wrap(text, cli.line_width(), subsequent_indent="      ")
        for opt in cat["modules"][module]:
            lines += cli.format_flag(opt["name"], _option_default(opt), _option_help(opt),
                                     full=full)
    lines += cli.common_footer("--verbose=2")
    return lines
