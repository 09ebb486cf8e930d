"""Trains the same runs with two checkouts of tfdp and compares what they produced.

Issue 28 keeps every behaviour. A change to how the trainers read their settings (or to
anything else they run) must leave a run's outputs as they were: this trains each given
`tfdp-train` argument list once with a checkout of commit BEFORE and once with a checkout of
AFTER (each in its own `git worktree`, run with that tree on PYTHONPATH), then compares the
final weights (every array, exactly), metrics.json (except wall-clock seconds) and the ledger's
numbers. The record goes to OUT (JSON), written after each run; a run that fails with either
checkout is recorded with its error and counts as not the same.

Run from the repository root with real data in TFDP_DATA_DIR:
    python tools/architecture/before_after.py BEFORE AFTER OUT -- ARGS [-- ARGS ...]
e.g. python tools/architecture/before_after.py 27ffb60 HEAD /tmp/x.json -- \\
    --flagfile=flags/hgm/mnist_reduced.flags --method=secure_sgd --epsilon=0.5 --seed=1
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from rerun_check import _strip  # noqa: E402  pylint: disable=wrong-import-position


def _ledger_numbers(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    keep = ("name", "epsilon", "delta", "claimed_epsilon", "claimed_delta", "segments")
    return {"epsilon": data.get("epsilon"), "delta": data.get("delta"),
            "claimed_epsilon": data.get("claimed_epsilon"),
            "entries": [{k: e.get(k) for k in keep} for e in data.get("entries", [])]}


_WEIGHTS = """
import json, sys, hashlib
import keras, numpy as np
import tfdp.registry
tfdp.registry.import_keras_objects()
m = keras.models.load_model(sys.argv[1], compile=False)
print(json.dumps([hashlib.sha256(np.ascontiguousarray(w).tobytes()).hexdigest()
                  for w in m.get_weights()]))
"""


def _train(tree: str, args: list[str], run_dir: str) -> dict:
    env = dict(os.environ, PYTHONPATH=tree)
    cmd = [sys.executable, "-m", "tfdp.apps.train", *args, f"--model_dir={run_dir}"]
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"failed": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "?"}
    weights = subprocess.run([sys.executable, "-c", _WEIGHTS,
                              os.path.join(run_dir, "model.keras")], cwd=tree, env=env,
                             capture_output=True, text=True, check=True)
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as f:
        metrics = _strip(json.load(f))
    return {"weights_sha256": json.loads(weights.stdout.strip().splitlines()[-1]),
            "metrics": metrics,
            "ledger": _ledger_numbers(os.path.join(run_dir, "ledger.json"))}


def _commit(ref: str) -> str:
    return subprocess.run(["git", "rev-parse", "--short", ref], cwd=_ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()


def main(argv: list[str]) -> None:
    if len(argv) < 5 or argv[3] != "--":
        raise SystemExit(__doc__)
    before, after, out_path = _commit(argv[0]), _commit(argv[1]), argv[2]
    runs, current = [], []
    for item in argv[4:] + ["--"]:
        if item == "--":
            if current:
                runs.append(current)
            current = []
        else:
            current.append(item)
    work = tempfile.mkdtemp(prefix="tfdp-before-after-")
    trees = {}
    for name, commit in (("before", before), ("after", after)):
        trees[name] = os.path.join(work, name)
        subprocess.run(["git", "worktree", "add", "-q", "--detach", trees[name], commit],
                       cwd=_ROOT, check=True)
    record = {"before": before, "after": after, "checks": []}
    try:
        for i, args in enumerate(runs):
            results = {name: _train(tree, args, os.path.join(work, f"run{i}-{name}"))
                       for name, tree in trees.items()}
            check = {"command": "tfdp-train " + " ".join(shlex.quote(a) for a in args)}
            failed = {name: r["failed"] for name, r in results.items() if "failed" in r}
            if failed:  # recorded, never counted as the same
                check.update(same=False, failed=failed)
            else:
                same = {part: results["before"][part] == results["after"][part]
                        for part in ("weights_sha256", "metrics", "ledger")}
                check.update(same=all(same.values()), same_parts=same,
                             final_test_accuracy=results["after"]["metrics"].get(
                                 "test_accuracy"),
                             epsilon=results["after"]["ledger"]["epsilon"])
            record["checks"].append(check)
            print(json.dumps(check), flush=True)
            _write(out_path, record)
    finally:
        for tree in trees.values():
            subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=_ROOT,
                           check=False)
    _write(out_path, record)


def _write(path: str, record: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


if __name__ == "__main__":
    main(sys.argv[1:])
