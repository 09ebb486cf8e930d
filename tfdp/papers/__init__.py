"""The four papers tfdp reproduces, one package each (docs/architecture.md).

Each package holds what only its paper needs (its training methods, networks, paper-specific
helpers, figures and reproduction rows) and declares itself in its `__init__.py` with a
`PAPER = tfdp.registry.Paper(...)` constant; `tfdp.registry` lists the packages.
"""
