"""Where tfdp finds its papers: their training methods and their reproduction rows.

A paper is a package that declares, in its `__init__.py`, one module-level constant

    PAPER = registry.Paper(name="adlm", title="AdLM (Phan et al., ICDM 2017)",
                           methods=(registry.MethodSpec("adlm", "tfdp.papers.adlm.method:AdLM",
                                                        "one line for --list_methods"),),
                           rows="tfdp.papers.adlm.rows:rows")

and nothing else is needed: the trainer registry (`tfdp.train.registry`), `tfdp-train`'s
flags and help, and the reproduction registry (`tfdp.reproduce.registry`) are assembled from
the declarations. Targets are "module:attribute" strings, imported only when used, so
listing the methods (and `tfdp-train --help`) imports no trainer and no TensorFlow.

Read the declarations through `papers()` and `methods()` (they load them on first use).
The papers tfdp ships are listed in BUILTIN_PAPERS (adding one is a folder under
tfdp/papers/ plus one line there). Papers outside tfdp are named, as importable packages, in
the environment variable TFDP_PAPERS (comma-separated), read when the registry is first
loaded and by `reload()`. This module imports no paper statically; it loads them by name,
as a plugin system does, so no import cycle runs through it.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re

# The papers tfdp ships, in report order: one line per paper.
BUILTIN_PAPERS = ("tfdp.papers.adlm", "tfdp.papers.hgm", "tfdp.papers.stobatch",
                  "tfdp.papers.gpm")
PLUGINS_ENV = "TFDP_PAPERS"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_EXTENSION_NAME = re.compile(r"^[a-z][a-z0-9_.-]*$")
_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclasses.dataclass(frozen=True)
class MethodSpec:
    """One training method: its `--method` name, its class and a one-line summary.

    Attributes:
      name: the `--method` value (lower case, digits, underscores).
      target: "module:Class" of its `tfdp.train.base.Method` subclass; the module also holds
        the method's OPTIONS (the source of its flags).
      summary: one line for `tfdp-train --list_methods` and the help.
    """

    name: str
    target: str
    summary: str

    def __post_init__(self):
        if not _NAME.match(self.name):
            raise ValueError(f"method name {self.name!r}: use lower case, digits and _")
        if not _TARGET.match(self.target):
            raise ValueError(f"method {self.name!r}: target {self.target!r} is not "
                             "'module:Class'")

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]


# What else a paper may add to shared machinery, by kind, and what the target must be. Shared
# code finds them through `extensions(kind)` and imports a target only when it is used.
EXTENSION_KINDS = {
    "baseline_model": "module:function(input_shape, num_classes) -> keras.Model, a choice of "
                      "--nonprivate_model / --dpsgd_model",
    "certificate": "module:Class, a tfdp.certify.registry.Certificate subclass: the "
                   "certificate named `name` in a run's certification",
    "unsound_options": "module:function(options) -> list of 'flag=value': the paper's training "
                       "options whose certificates are only claimed (need "
                       "--allow_unsound_certificates)",
    "extractor": "module:function(row, jobs) -> value: the reproduction extractor `name`",
    "figure": "module:function(rows_by_key, out_dir, rel, draw) -> link or None: a figure "
              "of the reproduction report (drawn into out_dir when draw; the link relative "
              "to the report; None when no row has a value)",
    "subcommand": "module:ATTRIBUTE, a tfdp.audit.experiment.Subcommand: the experiment "
                  "`tfdp-audit <name>` and the typed settings its flags come from",
    "flagfile_rule": "module:function(method, dataset, eps, scale, eps_r, variant) -> "
                     "(flagfile, arguments): how a reproduction row trains the method `name` "
                     "(tfdp.reproduce.registry.train_command)",
    "noisy_method": "module:Class of the method `name`, whose model holds a robustness noise "
                    "layer: the rows score it by its noisy expectation (Monte-Carlo)",
    "card_fields": "module:CARD_FIELDS, {section: allow-list spec}: the model card's fields "
                   "the paper adds (tfdp.export; only 'certification' is read)",
    "audit_cases": "module:function(rng) -> list of cases (tfdp.audit.dp_suite.audit_cases' "
                   "form): the paper's mechanisms in `tfdp-audit dp`, after the shared ones",
    "benchmark": "module:OPTIONS, in a module with run(**overrides) -> dict (keys at least "
                 "ratio, target, reference, candidate): `tfdp-bench <name>`",
    "release_job": "module:ATTRIBUTE, a tfdp.reproduce.releases.jobs.ReleaseJob named `name` "
                   "(`<paper>.<dataset>`): the authors' release `tfdp-release --job=<name>` "
                   "runs",
    "release_comparisons": "module:ATTRIBUTE, a tuple of "
                           "tfdp.reproduce.releases.attribution.Comparison, each with `paper` "
                           "the declaring paper: its releases beside tfdp in the report (in "
                           "tuple order; tfdp.reproduce.releases.attribution.comparisons)",
}


@dataclasses.dataclass(frozen=True)
class Extension:
    """One thing a paper adds to shared machinery (see EXTENSION_KINDS).

    Attributes:
      kind: one of EXTENSION_KINDS.
      name: its name where shared code looks it up (lower case, digits, _, - and .).
      target: "module:attribute", imported only when used.
    """

    kind: str
    name: str
    target: str

    def __post_init__(self):
        if self.kind not in EXTENSION_KINDS:
            raise ValueError(f"extension {self.name!r}: kind {self.kind!r} is not one of "
                             f"{sorted(EXTENSION_KINDS)}")
        if not _EXTENSION_NAME.match(self.name):
            raise ValueError(f"extension name {self.name!r}: use lower case, digits, _, - and "
                             ".")
        if not _TARGET.match(self.target):
            raise ValueError(f"extension {self.name!r}: target {self.target!r} is not "
                             "'module:attribute'")

    def load(self):
        """The target, imported."""
        return load(self.target)


@dataclasses.dataclass(frozen=True)
class Paper:
    """One paper's declaration (the PAPER constant of its package).

    Attributes:
      name: the paper's key (`--papers`, row ids start with it).
      title: the heading of its section in the reproduction report.
      methods: the training methods it adds.
      rows: "module:function" returning its reproduction rows (a list of
        `tfdp.reproduce.registry.Row`), or None.
      keras_modules: modules that register Keras layers or models (with
        `keras.saving.register_keras_serializable`); imported before a saved model is loaded.
      extensions: everything else the paper adds to shared machinery (certificates,
        extractors, report figures, experiment subcommands, benchmarks, ...): one
        `Extension` each, of a kind of EXTENSION_KINDS.
    """

    name: str
    title: str
    methods: tuple[MethodSpec, ...] = ()
    rows: str | None = None
    keras_modules: tuple[str, ...] = ()
    extensions: tuple[Extension, ...] = ()

    def __post_init__(self):
        if not _NAME.match(self.name):
            raise ValueError(f"paper name {self.name!r}: use lower case, digits and _")
        if self.rows is not None and not _TARGET.match(self.rows):
            raise ValueError(f"paper {self.name!r}: rows {self.rows!r} is not 'module:function'")
        object.__setattr__(self, "methods", tuple(self.methods))
        object.__setattr__(self, "keras_modules", tuple(self.keras_modules))
        object.__setattr__(self, "extensions", tuple(self.extensions))
        for e in self.extensions:
            if not isinstance(e, Extension):
                raise TypeError(f"paper {self.name!r}: extensions holds {e!r}, not an Extension")


# Methods that belong to no paper: the non-private and DP-SGD baselines every paper uses.
CORE_METHODS = (
    MethodSpec("nonprivate", "tfdp.train.nonprivate:NonPrivate",
               "plain minibatch training, no privacy (the papers' non-private baseline)"),
    MethodSpec("dpsgd", "tfdp.train.dpsgd:DPSGD",
               "DP-SGD: per-example clipping + Gaussian noise (Abadi et al. 2016, Alg. 1)"),
)

# Filled in place by reload() (on first use through ensure_loaded()), so that a module holding
# a reference sees every reload. Nothing is read at import: a paper package imports this
# module while it is itself being imported.
PAPERS: dict[str, Paper] = {}
METHODS: dict[str, MethodSpec] = {}
METHOD_PAPER: dict[str, str | None] = {}
EXTENSIONS: dict[str, dict[str, Extension]] = {}
EXTENSION_PAPER: dict[tuple[str, str], str] = {}


_STATE = {"loaded": False}


def ensure_loaded() -> None:
    """Reads the papers' declarations once (`reload()` reads them again)."""
    if not _STATE["loaded"]:
        reload()


def papers() -> dict[str, Paper]:
    """name -> Paper, in report order (built-in papers first)."""
    ensure_loaded()
    return PAPERS


def methods() -> dict[str, MethodSpec]:
    """name -> MethodSpec of every training method (core and papers')."""
    ensure_loaded()
    return METHODS


def extensions(kind: str) -> dict[str, Extension]:
    """name -> Extension of every paper's extensions of `kind`, in report order.

    Raises:
      ValueError: `kind` is not one of EXTENSION_KINDS.
    """
    if kind not in EXTENSION_KINDS:
        raise ValueError(f"kind {kind!r} is not one of {sorted(EXTENSION_KINDS)}")
    ensure_loaded()
    return EXTENSIONS.get(kind, {})


def extension_paper(kind: str, name: str) -> str | None:
    """The paper that declares the extension (kind, name), or None."""
    ensure_loaded()
    return EXTENSION_PAPER.get((kind, name))


def plugin_packages() -> list[str]:
    """The packages named in TFDP_PAPERS, in order."""
    return [p.strip() for p in os.environ.get(PLUGINS_ENV, "").split(",") if p.strip()]


def _declaration(package: str) -> Paper:
    try:
        module = importlib.import_module(package)
    except ImportError as e:
        source = "BUILTIN_PAPERS" if package in BUILTIN_PAPERS else PLUGINS_ENV
        raise ImportError(f"{source}: cannot import paper package {package!r}: {e}") from e
    paper = getattr(module, "PAPER", None)
    if not isinstance(paper, Paper):
        raise TypeError(f"paper package {package!r} has no PAPER = tfdp.registry.Paper(...)")
    return paper


def reload() -> None:
    """(Re)reads the built-in papers and those named in TFDP_PAPERS.

    Raises:
      ImportError: a named package cannot be imported.
      TypeError: a package declares no Paper.
      ValueError: two papers share a name, two methods share a name, or two extensions of
        one kind share a name.
    """
    papers: dict[str, Paper] = {}
    methods: dict[str, MethodSpec] = {m.name: m for m in CORE_METHODS}
    owner: dict[str, str | None] = {m.name: None for m in CORE_METHODS}
    exts: dict[str, dict[str, Extension]] = {}
    ext_owner: dict[tuple[str, str], str] = {}
    for package in list(BUILTIN_PAPERS) + plugin_packages():
        paper = _declaration(package)
        if paper.name in papers:
            raise ValueError(f"paper {paper.name!r} declared twice ({package})")
        papers[paper.name] = paper
        for m in paper.methods:
            if m.name in methods:
                raise ValueError(f"method {m.name!r} of paper {paper.name!r} is already "
                                 f"registered (by {owner[m.name] or 'tfdp core'})")
            methods[m.name] = m
            owner[m.name] = paper.name
        for e in paper.extensions:
            if (e.kind, e.name) in ext_owner:
                raise ValueError(f"{e.kind} {e.name!r} of paper {paper.name!r} is already "
                                 f"declared by paper {ext_owner[(e.kind, e.name)]!r}")
            exts.setdefault(e.kind, {})[e.name] = e
            ext_owner[(e.kind, e.name)] = paper.name
    PAPERS.clear()
    PAPERS.update(papers)
    METHODS.clear()
    METHODS.update(methods)
    METHOD_PAPER.clear()
    METHOD_PAPER.update(owner)
    EXTENSIONS.clear()
    EXTENSIONS.update(exts)
    EXTENSION_PAPER.clear()
    EXTENSION_PAPER.update(ext_owner)
    _STATE["loaded"] = True


def import_keras_objects() -> list[str]:
    """Imports the modules that register tfdp's Keras objects: the shared layers and every
    paper's `keras_modules`, so that `keras.saving.load_model` finds them by name.

    Returns:
      The module names imported.
    """
    names = ["layers"] + [m for paper in papers().values() for m in paper.keras_modules]
    for name in names:
        importlib.import_module(name)
    return names


def load(target: str):
    """Imports and returns the attribute named by a "module:attribute" target."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)
