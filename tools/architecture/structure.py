"""Draws tfdp's structure: its rooms on their floors and the imports between rooms.

The import graph is the one the architecture tests read (`tests/architecture/imports.py`:
every import statement of tfdp, layers and attacks, at module level or in a function, read
from the source). A room is a top-level module or package of tfdp (each paper its own room);
the floors are `imports.FLOORS`. An arrow runs back up when a module imports one on a higher
floor. The figure draws the floors bottom to top, an arrow between two rooms wherever one of
their modules imports the other's, arrows running back up in red; it prints the count of
imports running back up and each of them (importer -> imported, line).

Run from the repository root (`--root` reads another checkout's source with today's floors):
    python tools/architecture/structure.py --out docs/architecture_structure.png
"""

from __future__ import annotations

import argparse
import json
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, _ROOT)

from tests.architecture import imports  # noqa: E402  pylint: disable=wrong-import-position


def measure(root: str) -> dict:
    """The rooms per floor, the room-to-room arrows and the imports running back up.

    Args:
      root: a checkout of the repository.

    Returns:
      {"floors": [[room, ...] per floor], "arrows": [[from room, to room, imports]],
       "upward": [[importer, imported, [lines]]]}.
    """
    known = imports.modules(root)
    graph = imports.edges(known)
    floors: list[list[str]] = [[] for _ in imports.FLOORS]
    for mod in known:
        r = imports.room(mod)
        if r not in floors[imports.floor(mod)]:
            floors[imports.floor(mod)].append(r)
    arrows: dict[tuple[str, str], int] = {}
    for a, targets in graph.items():
        for b in targets:
            ra, rb = imports.room(a), imports.room(b)
            if ra != rb:
                arrows[(ra, rb)] = arrows.get((ra, rb), 0) + 1
    return {"floors": [sorted(f) for f in floors],
            "arrows": [[a, b, n] for (a, b), n in sorted(arrows.items())],
            "upward": [[a, b, lines] for a, b, lines in imports.upward(graph)]}


def draw(measured: dict, out: str, title: str) -> None:
    """Writes the figure (PNG) of `measure`'s result to `out`."""
    # lazy: loads matplotlib, only when a figure is drawn
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    where = {}
    for level, rooms in enumerate(measured["floors"]):
        for i, r in enumerate(rooms):
            where[r] = ((i + 0.5) / len(rooms), level)
    up_rooms = {(imports.room(a), imports.room(b)) for a, b, _ in measured["upward"]}
    fig, ax = plt.subplots(figsize=(14, 9))
    for a, b, n in measured["arrows"]:
        (x0, y0), (x1, y1) = where[a], where[b]
        up = (a, b) in up_rooms
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                    arrowprops={"arrowstyle": "->", "color": "red" if up else "0.75",
                                "lw": 2.0 if up else 0.5 + 0.1 * min(n, 10),
                                "shrinkA": 12, "shrinkB": 12, "zorder": 3 if up else 1})
    for r, (x, y) in where.items():
        ax.text(x, y, r, ha="center", va="center", fontsize=8, zorder=4,
                bbox={"boxstyle": "round", "fc": "white", "ec": "0.3"})
    for level, (name, _) in enumerate(imports.FLOORS):
        ax.text(-0.02, level, f"{level}: {name}", ha="right", va="center", fontsize=9)
        ax.axhline(level, color="0.93", lw=8, zorder=0)
    ax.set_xlim(-0.25, 1.02)
    ax.set_ylim(-0.6, len(imports.FLOORS) - 0.4)
    ax.axis("off")
    ax.set_title(f"{title}: {len(measured['upward'])} imports run back up (red)")
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=_ROOT, help="checkout to read (default: this one)")
    parser.add_argument("--out", help="PNG to write (default: none)")
    parser.add_argument("--json", help="JSON file to write the measurement to")
    parser.add_argument("--title", default="tfdp", help="the figure's title")
    args = parser.parse_args(argv)
    measured = measure(args.root)
    if args.out:
        draw(measured, args.out, args.title)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(measured, f, indent=1)
            f.write("\n")
    print(f"imports running back up: {len(measured['upward'])}")
    for a, b, lines in measured["upward"]:
        print(f"  {a} -> {b} (line {', '.join(map(str, lines))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
