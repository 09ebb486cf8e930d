"""Typed method and benchmark options: one declaration holds each name, default and help text.

A training method declares its settings once, as a frozen dataclass of typed fields
(`declare` and `field`): each field's type, default, help text, allowed values and per-value
check, plus the class's `validate` for rules that join several fields. `declare` derives the
method's `OptionSet` from it, the command-line apps (`tfdp/apps/`) turn that into absl flags
(`tfdp.apps.option_flags`), and a trainer reads the typed instance as `self.settings.<field>`
(`tfdp.train.base.Method.settings`). So flag names, defaults, help texts, choices and checks
can never drift from the library's, and Python code builds a method's settings without any
flag. Benchmarks declare their options on an `OptionSet` directly (no absl involved).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import math
import types
import typing
from typing import Any, Iterator, Mapping, Optional, Sequence

import numpy as np

KINDS = ("float", "integer", "bool", "string", "enum", "list")


@dataclasses.dataclass(frozen=True)
class Option:
    """One setting: its (flag) name, kind, default, help text and, for enums, the choices."""

    name: str
    kind: str
    default: Any
    help: str
    enum_values: Optional[tuple] = None


class OptionSet:  # pylint: disable=redefined-builtin
    """An ordered set of options sharing a name prefix (e.g. "dpsgd_").

    The declaring methods (`float`, `integer`, `bool`, `string`, `enum`, `list`) take the
    arguments of the absl `DEFINE_*` function of the same kind.
    """

    def __init__(self, prefix: str):
        """Creates an empty set.

        Args:
          prefix: the prefix every option name starts with.

        Raises:
          ValueError: if prefix is empty.
        """
        if not prefix:
            raise ValueError("prefix must be a non-empty string")
        self.prefix = prefix
        self._options: dict[str, Option] = {}

    def _add(self, option: Option) -> Option:
        if not option.name.startswith(self.prefix):
            raise ValueError(f"name: option {option.name!r} must start with {self.prefix!r}")
        if option.name in self._options:
            raise ValueError(f"name: option {option.name!r} declared twice")
        if option.kind == "enum" and option.default is not None and (
                option.default not in option.enum_values):
            raise ValueError(f"default: {option.default!r} is not one of {option.enum_values}")
        self._options[option.name] = option
        return option

    def float(self, name: str, default: Optional[float], help: str) -> Option:
        """Declares a float option."""
        return self._add(Option(name, "float", default, help))

    def integer(self, name: str, default: Optional[int], help: str) -> Option:
        """Declares an integer option."""
        return self._add(Option(name, "integer", default, help))

    def bool(self, name: str, default: Optional[bool], help: str) -> Option:
        """Declares a boolean option."""
        return self._add(Option(name, "bool", default, help))

    def string(self, name: str, default: Optional[str], help: str) -> Option:
        """Declares a string option."""
        return self._add(Option(name, "string", default, help))

    def enum(self, name: str, default: Optional[str], enum_values: Sequence[str],
             help: str) -> Option:
        """Declares an option restricted to `enum_values`."""
        return self._add(Option(name, "enum", default, help, tuple(enum_values)))

    def list(self, name: str, default: Optional[Sequence[str]],
             help: str) -> Option:
        """Declares a comma-separated list option (default stored as a tuple)."""
        return self._add(Option(name, "list", None if default is None else tuple(default), help))

    def __iter__(self) -> Iterator[Option]:
        return iter(self._options.values())

    def __len__(self) -> int:
        return len(self._options)

    def __contains__(self, name: str) -> bool:
        return name in self._options

    def __getitem__(self, name: str) -> Option:
        try:
            return self._options[name]
        except KeyError:
            raise KeyError(f"{name!r} is not an option of {self.prefix}*") from None

    @property
    def names(self) -> tuple[str, ...]:
        """Option names in declaration order."""
        return tuple(self._options)

    def default(self, name: str) -> Any:
        """The declared default of `name` (a list for list options, as the flag gives it).

        Raises:
          KeyError: if `name` is not declared here.
        """
        value = self[name].default
        return list(value) if isinstance(value, tuple) else value

    def defaults(self) -> dict[str, Any]:
        """Every option's default, by full name."""
        return {name: self.default(name) for name in self._options}

    def get(self, options: Mapping[str, Any], name: str) -> Any:
        """options[name] if given, else the declared default (like `options.get(name, default)`).

        Raises:
          KeyError: if `name` is not declared here.
        """
        return options.get(name, self.default(name))

    def setting(self, overrides: Mapping[str, Any], short_name: str) -> Any:
        """overrides[short_name] if given, else the default of prefix + short_name.

        Raises:
          KeyError: if prefix + short_name is not declared here.
        """
        if short_name in overrides:
            return overrides[short_name]
        return self.default(self.prefix + short_name)


# ---------------------------------------------------------------------------------------------
# Typed configs: a frozen dataclass with typed fields is the single declaration of a method's
# settings. `declare` derives the OptionSet (flags, help, choices) from the fields, checks each
# value when a config is made, then runs the class's own `validate` (its cross-field rules).


_META_KEY = "tfdp_option"


def field(default: Any, help: str, *, choices: Optional[Sequence[str]] = None,
          check: Optional[Any] = None) -> Any:
    """One typed setting of a `declare`d config class.

    Args:
      default: the default (None: unset, the method chooses; lists are given as tuples).
      help: the help text of its flag.
      choices: for a `str` field, the allowed values (the flag is then an enum).
      check: a per-value rule, e.g. `options.positive` (a callable returning None when the
        value is acceptable, else what was expected); not applied to None.

    Returns:
      A dataclasses.field carrying the declaration.
    """
    meta = {"help": help, "choices": None if choices is None else tuple(choices),
            "check": check}
    return dataclasses.field(default=default, metadata={_META_KEY: meta})


def _rule(expected: str, ok) -> Any:
    def check(value):
        try:
            good = ok(value)
        except (TypeError, ValueError):
            good = False
        return None if good else expected
    check.expected = expected
    return check


def _finite(value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


positive = _rule("a finite number > 0", lambda v: _finite(v) and v > 0)
nonnegative = _rule("a finite number >= 0", lambda v: _finite(v) and v >= 0)
open_unit = _rule("a number in (0, 1)", lambda v: _finite(v) and 0 < v < 1)
unit_interval = _rule("a number in [0, 1]", lambda v: _finite(v) and 0 <= v <= 1)
below_one = _rule("a number in [0, 1)", lambda v: _finite(v) and 0 <= v < 1)


def at_least(bound: int) -> Any:
    """The rule 'an integer >= bound'."""
    return _rule(f"an integer >= {bound}", lambda v: isinstance(v, int) and v >= bound)


def _kind_of(annotation) -> tuple[str, Any]:
    """(OptionSet kind, element type for lists) of a field annotation."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        if len(args) != 1:
            raise TypeError(f"unsupported option annotation {annotation!r}")
        return _kind_of(args[0])
    if annotation is bool:
        return "bool", None
    if annotation is int:
        return "integer", None
    if annotation is float:
        return "float", None
    if annotation is str:
        return "string", None
    if typing.get_origin(annotation) in (tuple, collections.abc.Sequence) and args:
        return "list", args[0]
    raise TypeError(f"unsupported option annotation {annotation!r}")


def _coerce(kind: str, element, value, flag: str):
    """value converted to the field's type (int -> float, list/str -> tuple), or ValueError."""
    if value is None:
        return None
    if kind == "float":
        if isinstance(value, (bool, np.bool_)) or not isinstance(
                value, (int, float, np.integer, np.floating)):
            raise ValueError(f"{flag}: expected a number, got {value!r}")
        return float(value)
    if kind == "integer":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{flag}: expected an integer, got {value!r}")
        return int(value)
    if kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{flag}: expected true or false, got {value!r}")
        return bool(value)
    if kind == "string" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)  # a number given for a string setting (e.g. a preset or a number)
    if kind in ("string", "enum"):
        if not isinstance(value, str):
            raise ValueError(f"{flag}: expected a string, got {value!r}")
        return value
    items = value.split(",") if isinstance(value, str) else list(value)
    if element is float:
        try:
            return tuple(float(v) for v in items)
        except (TypeError, ValueError):
            raise ValueError(f"{flag}: expected comma-separated numbers, got {value!r}") from None
    return tuple(str(v) for v in items)


def declare(prefix: str) -> Any:
    """Class decorator: a class of typed `field`s becomes a frozen dataclass of a method's settings.

    The class gets `OPTIONS` (the OptionSet its flags and help are made from: one option per
    field, named prefix + field, kind from the annotation: float, int, bool, str (an enum with
    `choices`), tuple[...] (a comma-separated list)), `as_options()` and
    `from_options(mapping)` (the `TrainConfig.options` form; None or an absent name gives the
    default). Making an instance converts each value to its type, checks it (choices, the
    field's `check`) with a ValueError naming the flag, then calls the class's `validate()`
    (cross-field rules) if it has one.

    Args:
      prefix: the flags' prefix, e.g. "dpsgd_".
    """
    def wrap(cls):
        specs: list = []  # (field, flag name, kind, list element type, declaration)
        own_validate = cls.__dict__.get("validate")

        def post_init(cfg) -> None:
            for short, name, kind, element, meta in specs:
                flag = "--" + name
                value = _coerce(kind, element, getattr(cfg, short), flag)
                object.__setattr__(cfg, short, value)
                if value is None:
                    continue
                if kind == "enum" and value not in meta["choices"]:
                    raise ValueError(f"{flag}: expected one of {list(meta['choices'])}, "
                                     f"got {value!r}")
                if meta["check"] is not None:
                    expected = meta["check"](value)
                    if expected is not None:
                        raise ValueError(f"{flag}: expected {expected}, got {value!r}")
            if own_validate is not None:
                own_validate(cfg)

        def as_options(cfg) -> dict[str, Any]:
            out = {}
            for short, name, *_ in specs:
                value = getattr(cfg, short)
                out[name] = list(value) if isinstance(value, tuple) else value
            return out

        def from_options(klass, mapping: Mapping[str, Any]):
            return klass(**{short: mapping[name] for short, name, *_ in specs
                            if mapping.get(name) is not None})

        cls.__post_init__ = post_init  # set before dataclass(), whose __init__ then calls it
        cls.as_options = as_options
        cls.from_options = classmethod(from_options)
        cls = dataclasses.dataclass(frozen=True)(cls)
        hints = typing.get_type_hints(cls)
        option_set = OptionSet(prefix)
        for f in dataclasses.fields(cls):
            meta = f.metadata.get(_META_KEY)
            if meta is None:
                raise TypeError(f"{cls.__name__}.{f.name}: declare it with tfdp.options.field")
            kind, element = _kind_of(hints[f.name])
            name = prefix + f.name
            if meta["choices"] is not None:
                if kind != "string":
                    raise TypeError(f"{cls.__name__}.{f.name}: choices need a str field")
                kind = "enum"
                option_set.enum(name, f.default, meta["choices"], meta["help"])
            else:
                getattr(option_set, kind)(name, f.default, meta["help"])
            specs.append((f.name, name, kind, element, meta))
        cls.OPTIONS = option_set
        cls.PREFIX = prefix
        return cls
    return wrap


# ---------------------------------------------------------------------------------------------
# Flags of a plain settings dataclass (e.g. `tfdp.eval_options.EvalOptions`): fields declared
# with `flag` become command-line flags without a prefix, named as the field or as given.


_FLAG_KEY = "tfdp_flag"


def flag(default: Any, help: str, *, name: Optional[str] = None,
         choices: Optional[Sequence[str]] = None) -> Any:
    """A field of a settings dataclass that is also an app's command-line flag.

    The dataclass stays an ordinary one (its own checks run where it is used); `flag_options`
    derives the flags from its fields, so the flag list is never written twice.

    Args:
      default: the field's default (lists as tuples).
      help: the flag's help text.
      name: the flag's name when it is not the field's.
      choices: for a `str` field, the allowed values (the flag is then an enum).

    Returns:
      A dataclasses.field carrying the declaration.
    """
    meta = {"help": help, "name": name, "choices": None if choices is None else tuple(choices)}
    return dataclasses.field(default=default, metadata={_FLAG_KEY: meta})


def flag_options(cls: type) -> tuple[tuple[str, Option], ...]:
    """(field name, its flag's Option) of every `flag` field of dataclass `cls`, in order.

    The kind comes from the field's annotation (float, int, bool, str or an enum with
    `choices`, a tuple or Sequence for a comma-separated list; Optional allowed).

    Raises:
      TypeError: for an annotation no flag kind fits, or choices on a non-str field.
    """
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get(_FLAG_KEY)
        if meta is None:
            continue
        kind, _ = _kind_of(hints[f.name])
        if meta["choices"] is not None:
            if kind != "string":
                raise TypeError(f"{cls.__name__}.{f.name}: choices need a str field")
            kind = "enum"
        out.append((f.name, Option(meta["name"] or f.name, kind, f.default, meta["help"],
                                   meta["choices"])))
    return tuple(out)
