"""Typed method and benchmark options: one declaration holds each name, default and help text.

Library modules declare their settings with an `OptionSet` (no absl involved): a trainer reads
`config.options` through it, so a default lives in exactly one place, and a frozen dataclass
config made from it (`OptionSet.config_class`) lets Python code build a method's settings
without any flag. The command-line apps (`tfdp/apps/`) turn the same declarations into absl
flags (`tfdp.apps.option_flags`), so flag names, defaults, help texts and enum choices can
never drift from the library's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Mapping, Optional, Sequence

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
          prefix: the prefix every option name starts with; `config_class` strips it.

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

    def config_class(self, class_name: str, doc: str = "") -> type:
        """A frozen dataclass with one field per option (prefix stripped), defaults declared here.

        The class has `as_options()` (full option names, the form `TrainConfig.options` and the
        run directory's config.json use) and `from_options(mapping)` (ignores other names).

        Args:
          class_name: name of the class.
          doc: its docstring.

        Returns:
          The dataclass type.
        """
        prefix = self.prefix
        fields = [(o.name[len(prefix):], Any, dataclasses.field(default=o.default))
                  for o in self]
        opts = self

        def as_options(cfg) -> dict[str, Any]:
            out = {}
            for field in dataclasses.fields(cfg):
                value = getattr(cfg, field.name)
                out[prefix + field.name] = (list(value) if isinstance(value, tuple) else value)
            return out

        def from_options(cls, options: Mapping[str, Any]):
            kw = {}
            for name in opts.names:
                if name in options:
                    value = options[name]
                    kw[name[len(prefix):]] = (tuple(value) if isinstance(value, list) else value)
            return cls(**kw)

        def post_init(cfg) -> None:
            for o in opts:
                value = getattr(cfg, o.name[len(prefix):])
                if o.kind == "enum" and value is not None and value not in o.enum_values:
                    raise ValueError(f"{o.name[len(prefix):]}: {value!r} is not one of "
                                     f"{list(o.enum_values)}")

        cls = dataclasses.make_dataclass(
            class_name, fields, frozen=True,
            namespace={"as_options": as_options, "from_options": classmethod(from_options),
                       "__post_init__": post_init, "__doc__": doc or f"{prefix}* options."})
        return cls
