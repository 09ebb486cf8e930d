"""absl flags generated from the library's option declarations (`tfdp.options.OptionSet`).

Library modules declare their settings without absl; the apps call `define_flags` on a
module's `OPTIONS` before parsing, so every flag's name, default, help text and enum choices
are the library's. Flags are registered under the declaring library module's name, so
`--helpfull` groups them as before.
"""

from __future__ import annotations

import importlib
from typing import Any, Iterable

from absl import flags

from tfdp.options import Option, OptionSet

_DEFINE = {"float": flags.DEFINE_float, "integer": flags.DEFINE_integer,
           "bool": flags.DEFINE_bool, "string": flags.DEFINE_string,
           "list": flags.DEFINE_list}


def define_flags(option_set: Iterable[Option], module_name: str,
                 flag_values: flags.FlagValues = flags.FLAGS) -> list[str]:
    """Defines one absl flag per option of `option_set` (skipping names already defined).

    Args:
      option_set: the declarations (an OptionSet, or the options of
        `tfdp.options.flag_options`).
      module_name: module the flags are registered under (the declaring library module).
      flag_values: the FlagValues to define them in.

    Returns:
      The names of the flags defined by this call.
    """
    defined = []
    for opt in option_set:
        if opt.name in flag_values:
            continue
        default = list(opt.default) if isinstance(opt.default, tuple) else opt.default
        if opt.kind == "enum":
            flags.DEFINE_enum(opt.name, default, list(opt.enum_values), opt.help,
                              flag_values=flag_values, module_name=module_name)
        else:
            _DEFINE[opt.kind](opt.name, default, opt.help, flag_values=flag_values,
                              module_name=module_name)
        defined.append(opt.name)
    return defined


def define_module_flags(module: str, flag_values: flags.FlagValues = flags.FLAGS) -> OptionSet:
    """Imports library module `module` and defines the flags of its `OPTIONS`.

    Returns:
      The module's OptionSet.
    """
    option_set = importlib.import_module(module).OPTIONS
    define_flags(option_set, module, flag_values)
    return option_set


def option_values(option_set: OptionSet, flag_values: flags.FlagValues = flags.FLAGS
                  ) -> dict[str, Any]:
    """The parsed value of every option's flag, by full name."""
    return {opt.name: flag_values[opt.name].value for opt in option_set}


def overrides(option_set: OptionSet, flag_values: flags.FlagValues = flags.FLAGS
              ) -> dict[str, Any]:
    """Parsed flag values keyed by the option name without the prefix (bench `run` keywords)."""
    n = len(option_set.prefix)
    return {name[n:]: value for name, value in option_values(option_set, flag_values).items()}
