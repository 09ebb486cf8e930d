"""The job and row JSON files under a results directory (read, and written atomically).

Layout under the results directory (default results/reproduce/):
  <scale>/jobs/<job key>.json   one finished job: command, seed, versions, times, output
  <scale>/<row id>.json         one row: published value, our value, verdict, commands, jobs
"""

from __future__ import annotations

import glob
import json
import os

from tfdp.reproduce import extract, registry


def _job_file(results_dir: str, scale: str, key: str) -> str:
    return os.path.join(results_dir, scale, "jobs", f"{key}.json")


def load_job(results_dir: str, scale: str, key: str) -> dict | None:
    """The finished job's JSON, or None if it has not finished."""
    path = _job_file(results_dir, scale, key)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return data if data.get("status") == "ok" else None


def _write_json(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(extract.as_jsonable(data), f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def _row_file(results_dir: str, scale: str, row_id: str) -> str:
    return os.path.join(results_dir, scale, f"{row_id}.json")


def _load_row(results_dir: str, scale: str, row_id: str) -> dict | None:
    path = _row_file(results_dir, scale, row_id)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_rows(results_dir: str) -> dict[tuple[str, str], dict]:
    """(scale, row id) -> row JSON, for every row JSON under the results directory."""
    out = {}
    for scale in registry.SCALES:
        for path in sorted(glob.glob(os.path.join(results_dir, scale, "*.json"))):
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            out[(scale, data["id"])] = data
    return out


def load_jobs(results_dir: str) -> dict[tuple[str, str], dict]:
    """(scale, job key) -> job JSON."""
    out = {}
    for scale in registry.SCALES:
        for path in sorted(glob.glob(os.path.join(results_dir, scale, "jobs", "*.json"))):
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            out[(scale, data["key"])] = data
    return out
