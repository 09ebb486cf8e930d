"""The committed release results (results/releases/) are what the harness writes: the job's
commit, a diff made of the job's overrides only, a curve, and tfdp's side with its command."""

import glob
import json
import os

from tfdp.reproduce.releases import jobs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
FILES = sorted(glob.glob(os.path.join(ROOT, "results", "releases", "*.json")))


def _changed(diff: str) -> tuple[list[str], list[str]]:
    lines = [ln for ln in diff.splitlines() if not ln.startswith(("+++", "---", "@@"))]
    return ([ln[1:] for ln in lines if ln.startswith("-")],
            [ln[1:] for ln in lines if ln.startswith("+")])


def test_release_results_carry_the_jobs_commit_and_only_its_overrides():
    releases = [f for f in FILES if "_release_" in os.path.basename(f)]
    assert releases, "no release result committed"
    for path in releases:
        with open(path, encoding="utf-8") as f:
            rec = json.load(f)
        job = jobs.get(rec["job"])
        assert rec["release"]["commit"] == job.commit and rec["release"]["repo"] == job.repo
        assert rec["exit_code"] == 0 and rec["curve"], path
        removed, added = _changed(rec["diff"])
        olds = [ln.strip() for o in job.overrides for ln in o.old.splitlines() if ln.strip()]
        news = [ln.strip() for o in job.overrides
                for ln in o.new.format(**rec["settings"]).splitlines() if ln.strip()]
        assert removed and added, path
        # Every changed line holds one of the job's fragments (and nothing else changed).
        assert all(any(x in line for x in olds) for line in removed), path
        assert all(any(x in line for x in news) for line in added), path
        assert rec["numbers"]["test_accuracy"] == (rec["curve"][-1][1] if not
                                                   rec["numbers"]["final_line"] else
                                                   rec["numbers"]["test_accuracy"])


def test_tfdp_side_results_name_their_flagfile_and_seed():
    sides = [f for f in FILES if "_tfdp_" in os.path.basename(f)]
    for path in sides:
        with open(path, encoding="utf-8") as f:
            rec = json.load(f)
        assert rec["side"] == "tfdp" and rec["job"] in jobs.names()
        assert f"--seed={rec['seed']}" in rec["command"]
        flagfile = [w.split("=", 1)[1] for w in rec["command"].split()
                    if w.startswith("--flagfile=")]
        assert flagfile and os.path.isfile(os.path.join(ROOT, flagfile[0]))
        assert rec["curve"][-1] == [rec["numbers"]["steps"], rec["numbers"]["test_accuracy"]]
