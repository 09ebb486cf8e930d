"""Numbers in the report's written sections, filled in from the result files they cite.

The preamble and the appendix (results/reproduce/preamble.md, earlier_runs.md) hold the
report's discussion and conclusions. Every number or verdict they state about a row or a
run is a citation the report generator replaces with the value in the cited file, so an
edited or rerun result changes the text with it (issue 39) and no number is typed by hand:

  {{row:SCALE/ROW_ID:FIELD[:FORMAT]}}   a field of results/reproduce/SCALE/ROW_ID.json
                                          (value, value_text, value_sd, verdict, per_seed,
                                          seeds, reason, ...; `n_seeds` is len(seeds))
  {{file:PATH:KEY/KEY/...[:FORMAT]}}     a value in a JSON file under results/reproduce/,
                                          or, for a PATH starting with "/", under the
                                          repository (results/adlm/...); keys separated by
                                          "/", list indices as numbers
  {{csv:PATH:NAME=VALUE,...:COLUMN[:FORMAT]}}
                                          COLUMN of the one row of a CSV file (PATH as for
                                          `file`) whose NAME columns equal the VALUEs
                                          (numbers compared as numbers)
  {{attack_mean:PATH:SIZE[:FORMAT]}}     the accuracy under attack at SIZE averaged over
                                          the attacks of an evaluation.json under
                                          results/reproduce/

  {{seeds:PATH:KEY[:FORMAT]}}            as `file`, over the seeds of a run made once per
                                          seed: PATH holds one "*" standing for the seed
                                          number (".../name_seed*/metrics.json"); prints
                                          "mean ± sd (N seeds: v1, v2, ...)" in seed order,
                                          or "v (1 seed)"
  {{seeds_attack_mean:PATH:SIZE[:FORMAT]}}
                                          as `attack_mean`, over the seeds as `seeds`

FORMAT is a Python format spec for numbers (".2f", "+.1f"); a leading "pct" multiplies by
100 first ("pct.1f": 0.7655 -> 76.5). A list is printed item by item, joined by ", ". A row
without a value (stale) prints "—". A row or file the results directory does not have (a
user's own results directory, where the committed discussion is copied) prints
"[not in this results directory: <ref>]"; a missing field or key of an existing file is an
error, as is any citation of the committed report that cannot be filled in (tested).
"""

from __future__ import annotations

import csv
import glob
import json
import math
import os
import re
import statistics
from typing import Any

from tfdp.reproduce import tasks

MISSING = "[not in this results directory: {}]"


class _Missing(Exception):
    """The cited row or file is not in this results directory."""


_CITATION = re.compile(
    r"\{\{(row|file|csv|attack_mean|seeds_attack_mean|seeds):([^{}]*)\}\}")
# The seed number standing for "*" in a `seeds` path: a positive integer.
_SEED = re.compile(r"[1-9][0-9]*")


def _format(value: Any, spec: str) -> str:
    if isinstance(value, list):
        return ", ".join(_format(v, spec) for v in value)
    if value is None:
        return "—"
    if not spec or isinstance(value, str):
        return str(value)
    scale = 1.0
    if spec.startswith("pct"):
        scale, spec = 100.0, spec[3:]
    return format(float(value) * scale, spec)


def _json(results_dir: str, path: str, cache: dict[str, Any]) -> Any:
    return _load(results_dir, path, cache, json.load)


def _csv_rows(f) -> list[dict[str, str]]:
    return list(csv.DictReader(f))


def _same(a: str, b: str) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    except ValueError:
        return a == b


def _csv_cell(results_dir: str, path: str, where: str, column: str,
              cache: dict[str, Any]) -> str:
    rows = _load(results_dir, path, cache, _csv_rows)
    want = [w.partition("=") for w in where.split(",") if w]
    found = [r for r in rows if all(n in r and _same(r[n], v) for n, _, v in want)]
    if len(found) != 1:
        raise ValueError(f"{path}: {len(found)} rows match {where!r}, not one")
    if column not in found[0]:
        raise ValueError(f"{path}: no column {column!r}")
    return found[0][column]


def _load(results_dir: str, path: str, cache: dict[str, Any], reader) -> Any:
    root = results_dir
    if path.startswith("/"):
        root, path = tasks.REPO_ROOT, path.lstrip("/")
    full = os.path.normpath(os.path.join(root, path))
    if not full.startswith(os.path.normpath(root) + os.sep):
        raise ValueError(f"citation path {path!r} leaves {root}")
    if full not in cache:
        if not os.path.isfile(full):
            raise _Missing(path)
        with open(full, encoding="utf-8", newline="") as f:
            cache[full] = reader(f)
    return cache[full]


def _lookup(data: Any, keys: str, where: str) -> Any:
    for key in keys.split("/"):
        if isinstance(data, list):
            data = data[int(key)]
        elif isinstance(data, dict) and key in data:
            data = data[key]
        else:
            raise ValueError(f"{where}: no key {key!r} (in {keys!r})")
    return data


def _row_field(rows_by_key: dict, ref: str, field: str) -> Any:
    scale, _, row_id = ref.partition("/")
    rec = rows_by_key.get((scale, row_id))
    if rec is None:
        raise _Missing(ref)
    if field == "n_seeds":
        return len(rec.get("seeds") or [])
    if field not in rec:
        if field in ("value_sd", "value", "per_seed") and rec.get("value") is None:
            return None  # a stale row: no value to cite
        raise ValueError(f"cited row {ref!r} has no field {field!r}")
    return rec[field]


def _attack_mean(results_dir: str, path: str, size: str, cache: dict[str, Any]) -> float:
    evaluation = _json(results_dir, path, cache)
    vals = [entry[size]["accuracy"] for entry in evaluation.get("attacks", {}).values()
            if size in entry]
    if not vals:
        raise ValueError(f"{path}: no attack at size {size!r}")
    return sum(float(v) for v in vals) / len(vals)


def _seed_paths(results_dir: str, pattern: str) -> list[str]:
    """The paths matching `pattern` (one "*" standing for a seed number), in seed order."""
    if pattern.count("*") != 1:
        raise ValueError(f"seeds path {pattern!r}: needs exactly one '*' for the seed")
    root = tasks.REPO_ROOT if pattern.startswith("/") else results_dir
    lead = "/" if pattern.startswith("/") else ""
    prefix, _, suffix = pattern.lstrip("/").partition("*")
    found = []
    for full in glob.glob(os.path.join(root, glob.escape(prefix)) + "*" + glob.escape(suffix)):
        rel = os.path.relpath(full, root)
        seed = rel[len(prefix):len(rel) - len(suffix)]
        if _SEED.fullmatch(seed) and os.path.isfile(full):
            found.append((int(seed), lead + rel))
    if not found:
        raise _Missing(pattern)
    return [path for _, path in sorted(found)]


def _over_seeds(values: list[float], spec: str) -> str:
    """ "mean ± sd (N seeds: v1, ...)" (sample sd), or "v (1 seed)"; a "pct" FORMAT puts "%"
    after the first number ("62.50% ± 1.20 (3 seeds: 61.20, 62.70, 63.60)")."""
    unit = "%" if spec.startswith("pct") else ""
    if len(values) == 1:
        return f"{_format(values[0], spec)}{unit} (1 seed)"
    sd = _format(statistics.stdev(values), spec).lstrip("+")
    return (f"{_format(statistics.fmean(values), spec)}{unit} ± {sd} ({len(values)} seeds: "
            f"{_format(values, spec)})")


def expand(text: str, rows_by_key: dict, results_dir: str) -> str:
    """The text with every citation replaced by the cited value.

    Args:
      text: Markdown with {{row:...}}, {{file:...}}, {{csv:...}}, {{attack_mean:...}},
        {{seeds:...}} and {{seeds_attack_mean:...}} citations.
      rows_by_key: (scale, row id) -> row JSON (`jobfiles.load_rows`).
      results_dir: the results/reproduce/ directory the file citations are relative to.

    Returns:
      The Markdown with the values filled in.

    Raises:
      ValueError: naming the citation, when a field or key of a cited row or file does not
        exist, or a CSV filter does not select one row.
    """
    cache: dict[str, Any] = {}

    def one(match: re.Match) -> str:
        kind, body = match.group(1), match.group(2)
        parts = body.split(":")
        try:
            if kind == "row":
                value = _row_field(rows_by_key, parts[0], parts[1])
            elif kind == "file":
                value = _lookup(_json(results_dir, parts[0], cache), parts[1], parts[0])
            elif kind == "csv":
                value = _csv_cell(results_dir, parts[0], parts[1], parts[2], cache)
                parts = parts[:2] + parts[3:]  # the format follows the column
                value = float(value) if parts[2:] else value
            elif kind == "seeds":
                values = [float(_lookup(_json(results_dir, path, cache), parts[1], path))
                          for path in _seed_paths(results_dir, parts[0])]
                return _over_seeds(values, parts[2] if len(parts) > 2 else "")
            elif kind == "seeds_attack_mean":
                values = [_attack_mean(results_dir, path, parts[1], cache)
                          for path in _seed_paths(results_dir, parts[0])]
                return _over_seeds(values, parts[2] if len(parts) > 2 else "")
            else:
                value = _attack_mean(results_dir, parts[0], parts[1], cache)
            return _format(value, parts[2] if len(parts) > 2 else "")
        except _Missing as e:
            return MISSING.format(e.args[0])
        except (IndexError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"citation {match.group(0)}: {e}") from e

    return _CITATION.sub(one, text)


def citations(text: str) -> list[str]:
    """The citations of a text, in order (for tests and checks)."""
    return [m.group(0) for m in _CITATION.finditer(text)]
