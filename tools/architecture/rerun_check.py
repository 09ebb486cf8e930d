"""Reruns committed reproduction jobs with the current code and compares their outputs.

Issue 28 (the paper-packages redesign) must keep every behaviour: the committed results,
rerun, give the same values. For each job key given, this finds the job in the current
registry, runs it again into a scratch folder (no adoption of earlier runs), and compares
every output value with the committed job file, except wall-clock times. The record goes to
results/architecture/rerun_check.json (checks of earlier invocations are kept; a job checked
again replaces its entry).

Run from the repository root with real data in TFDP_DATA_DIR:
    python tools/architecture/rerun_check.py SCALE:JOB_KEY [SCALE:JOB_KEY ...]
e.g. python tools/architecture/rerun_check.py reduced:python.gpm.figure4
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, _ROOT)

from tfdp.reproduce import registry, runner  # noqa: E402  pylint: disable=wrong-import-position

_TIMES = {"seconds", "started_utc", "finished_utc", "adopted_started_utc",
          "adopted_finished_utc", "time"}


def _strip(value):
    """The value without wall-clock entries (seconds, timestamps), recursively."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in _TIMES}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _differences(old, new, path=""):
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new)):
            if k not in old or k not in new:
                out.append(f"{path}/{k}: only in {'new' if k in new else 'committed'}")
            else:
                out += _differences(old[k], new[k], f"{path}/{k}")
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new))
                for d in _differences(a, b, f"{path}[{i}]")]
    return [] if old == new else [f"{path}: committed {old!r}, rerun {new!r}"]


def _task(scale: str, key: str) -> runner.Task:
    job_id, _, seed = key.partition("@seed")
    found = None
    for row in registry.ROWS:
        for job in row.jobs.get(scale, {}).values():
            if job.id == job_id:
                found = job
            elif job.depends == job_id:  # a train job behind an evaluation job
                found = registry.train_job(scale, job_id)
    if found is None:
        raise SystemExit(f"job {job_id!r} is not in the registry at scale {scale}")
    return runner.Task(dataclasses.replace(found, adopt=None), int(seed) if seed else None)


def main(argv: list[str]) -> int:
    if not argv:
        raise SystemExit(__doc__)
    data_dir = os.environ.get("TFDP_DATA_DIR")
    checks = []
    with tempfile.TemporaryDirectory() as scratch:
        for spec in argv:
            scale, _, key = spec.partition(":")
            committed = runner.load_job(runner.DEFAULT_RESULTS, scale, key)
            if committed is None:
                raise SystemExit(f"{spec}: no committed job file")
            print(f"rerunning {scale}:{key} ...", flush=True)
            rerun = runner.run_task(_task(scale, key), scale, os.path.join(scratch, "results"),
                                    os.path.join(scratch, "work"), data_dir, print)
            if rerun.get("status") != "ok":
                diffs = [f"rerun failed: {rerun.get('error', rerun.get('status'))}"]
            else:
                diffs = _differences(_strip(committed.get("output")),
                                     _strip(rerun.get("output")))
            checks.append({"scale": scale, "key": key, "command": committed["command"],
                           "committed_commit": committed["versions"].get("git_commit"),
                           "rerun_commit": rerun.get("versions", {}).get("git_commit"),
                           "same": not diffs, "differences": diffs})
            print(f"  {'same' if not diffs else 'DIFFERENT'}" + "".join(
                f"\n    {d}" for d in diffs), flush=True)
    out = os.path.join(_ROOT, "results", "architecture", "rerun_check.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    record = {"commands": [], "checks": []}
    if os.path.exists(out):  # earlier checks stay; a job checked again replaces its entry
        with open(out, encoding="utf-8") as f:
            record = json.load(f)
    done = {(c["scale"], c["key"]) for c in checks}
    record["checks"] = [c for c in record["checks"]
                        if (c["scale"], c["key"]) not in done] + checks
    record["commands"].append("python tools/architecture/rerun_check.py " + " ".join(argv))
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    os.replace(out + ".tmp", out)
    print(f"wrote {os.path.relpath(out, _ROOT)}")
    return 0 if all(c["same"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
