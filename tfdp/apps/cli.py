"""What every tfdp command line shares: its own help text, and a quiet TensorFlow start-up.

absl's `--help` of a console script shows only "Try --helpfull", and `--helpfull` lists every
flag of every imported library (TPU, absl testing, ...). The apps call `handle_help` before
`absl.app.run`: it prints the app's own flags, grouped into sections, and exits. TensorFlow
writes its start-up notices (oneDNN, CPU features, "All log messages before
absl::InitializeLog()") from C++ straight to file descriptor 2; `import_tensorflow` holds
them back unless the user asks for them (`--verbose`), and passes on any other output.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from typing import Callable, Iterable, Optional, Sequence
from absl import flags

from tfdp import allocator, onednn
from tfdp import quiet_start as tf_start

HELP_FLAGS = ("-h", "-?", "--help", "--helpshort", "--helpfull")

# Start-up notices TensorFlow prints on every import (tfdp/quiet_start.py; held back by
# default; any other line written during the import is passed on).
_TF_NOISE = tf_start.TF_NOISE


def help_requested(argv: Sequence[str]) -> Optional[str]:
    """'full' for --helpfull, 'short' for -h/--help/--helpshort, else None."""
    for arg in argv[1:]:
        if arg == "--":
            break
        if arg == "--helpfull":
            return "full"
        if arg in HELP_FLAGS:
            return "short"
    return None


def argv_value(argv: Sequence[str], name: str) -> Optional[str]:
    """The value of --name in argv (`--name=V` or `--name V`), else in a --flagfile; else None.

    A pre-parse look-up for help and logging choices, made before the flags are defined; the
    full parse later validates every value.
    """
    value = None
    args = list(argv[1:])
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
        elif arg == f"--{name}" and i + 1 < len(args) and not args[i + 1].startswith("-"):
            value = args[i + 1]
        elif arg.startswith("--flagfile=") and value is None:
            value = _flagfile_value(arg.split("=", 1)[1], name)
    return value


def _flagfile_value(path: str, name: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None  # reported by the real parse
    value = None
    for line in lines:
        line = line.strip()
        if line.startswith(f"--{name}="):
            value = line.split("=", 1)[1]
    return value


def verbose_requested(argv: Sequence[str], level: int = 1) -> bool:
    """Whether argv asks for TensorFlow's start-up log (`--verbose`, `--verbose=N` >= level).

    TFDP_VERBOSE=1 in the environment does the same.
    """
    if os.environ.get("TFDP_VERBOSE", "") not in ("", "0"):
        return True
    for arg in argv[1:]:
        if arg == "--":
            break
        if arg == "--verbose" and level <= 1:
            return True
        if arg.startswith("--verbose="):
            value = arg.split("=", 1)[1].lower()
            if value in ("true", "t", "yes"):
                value = "1"
            try:
                if int(value) >= level:
                    return True
            except ValueError:
                pass
    return False


def keep_freed_memory() -> None:
    """Before TensorFlow allocates: freed tensors' memory stays in the process for reuse
    (tfdp/allocator.py; TFDP_MALLOC=glibc keeps glibc's defaults). Exits 2 on a bad value.
    Also asks for oneDNN's CPU kernels on x86 unless TF_ENABLE_ONEDNN_OPTS is set
    (tfdp/onednn.py)."""
    onednn.use_onednn()
    try:
        allocator.keep_freed_memory()
    except ValueError as err:
        sys.stderr.write(f"error: {err}\n")
        sys.exit(2)


def import_tensorflow(verbose: bool = False):
    """Imports TensorFlow, holding back its start-up notices unless `verbose`.

    First keeps freed memory in the process for reuse (`tfdp.allocator.keep_freed_memory`).
    Sets TF_CPP_MIN_LOG_LEVEL=2 (unless set or verbose), then imports with file descriptor 2
    redirected to a temporary file; afterwards every captured line that is not a known
    start-up notice is written to stderr (an import error's output is never lost).

    Returns:
      The tensorflow module.
    """
    keep_freed_memory()
    if verbose:
        tf_start.uninstall()  # the user asked for the start-up log: no filter at all
        # lazy: loads tensorflow; importing tfdp.apps.cli does not
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        return tf
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    with tf_start.filtered_stderr():
        # lazy: loads tensorflow; importing tfdp.apps.cli does not
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf


def quiet_start(argv: Sequence[str], level: int = 1) -> None:
    """Before the app imports TensorFlow: keeps freed memory for reuse (`keep_freed_memory`),
    then a quiet import unless argv asks for `--verbose`."""
    keep_freed_memory()
    if not verbose_requested(argv, level):
        import_tensorflow(verbose=False)


# ----------------------------------------------------------------------------- help text

def line_width() -> int:
    """Help line width: the terminal's, between 60 and 100."""
    return max(60, min(100, shutil.get_terminal_size((100, 24)).columns))


def flag_default(flag) -> str:
    """A flag's default as the command line writes it ('' when unset)."""
    value = flag.default
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def format_flag(name: str, default: str, help_text: str, *, full: bool = True,
                width: Optional[int] = None) -> list[str]:
    """Help lines of one flag.

    Args:
      name: flag name without dashes.
      default: its default as text ('' when unset).
      help_text: its help text.
      full: wrapped full text under the name; else one line, the first sentence, cut to width.
      width: line width (default: the terminal's, at most 100).
    """
    width = width or line_width()
    head = f"  --{name}" + (f"={default}" if default != "" else "")
    text = " ".join(help_text.split())
    if not full:
        if text.startswith("<") and ">: " in text:  # enum choices: in the full help
            text = text.split(">: ", 1)[1]
        line = f"{head:<32} {text}" if len(head) < 32 else f"{head} {text}"
        return [line if len(line) <= width else line[:width - 3].rstrip() + "..."]
    return [head] + textwrap.wrap(text, width, initial_indent="      ",
                                  subsequent_indent="      ")


def format_flags(flag_list: Iterable, *, full: bool = True) -> list[str]:
    """Help lines of absl Flag objects, in the given order."""
    lines = []
    for flag in flag_list:
        lines += format_flag(flag.name, flag_default(flag), flag.help or "", full=full)
    return lines


def module_flags(module_name: str, flag_values=None) -> list:
    """The absl flags defined by module `module_name`, in definition order."""
    fv = flags.FLAGS if flag_values is None else flag_values
    return list(fv.flags_by_module_dict().get(module_name, []))


def define_verbose() -> None:
    """Defines the apps' --verbose (a bool), unless a flag of that name exists already (apps
    imported together, e.g. in tests; tfdp-train's --verbose is a level)."""
    if "verbose" not in flags.FLAGS:
        flags.DEFINE_bool("verbose", False,
                          "Show TensorFlow's start-up log and library warnings.")


def new_flags(before: set, flag_values=None) -> tuple[str, ...]:
    """Names of the flags defined since `before` (a set of names), in definition order."""
    fv = flags.FLAGS if flag_values is None else flag_values
    return tuple(dict.fromkeys(fv[n].name for n in fv if n not in before))


def app_help(doc: str, names: Sequence[str], kind: str, flag_values=None,
             extra: Sequence[str] = ()) -> list[str]:
    """An app's help: its docstring, `extra` lines, then its own flags (full text)."""
    fv = flags.FLAGS if flag_values is None else flag_values
    lines = [line.rstrip() for line in doc.strip("\n").splitlines()]
    lines += list(extra)
    lines += ["", "Flags:"]
    lines += format_flags([fv[n] for n in names], full=True)
    return lines + common_footer()


def print_and_exit(lines: Sequence[str], code: int = 0) -> None:
    """Prints the help lines to stdout and exits."""
    sys.stdout.write("\n".join(lines).rstrip() + "\n")
    sys.stdout.flush()
    sys.exit(code)


def handle_help(argv: Sequence[str], make_lines: Callable[[str], Sequence[str]]) -> None:
    """If argv asks for help, prints `make_lines(kind)` ('short' or 'full') and exits."""
    kind = help_requested(argv)
    if kind:
        print_and_exit(make_lines(kind))


def common_footer(verbose: str = "--verbose") -> list[str]:
    """The lines every help ends with (`verbose`: how this app asks for the full log)."""
    return ["",
            "Any flag may also be given in a file: --flagfile=FILE (one --name=value a line).",
            f"{verbose} shows TensorFlow's start-up log and library warnings."]
