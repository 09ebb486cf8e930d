"""Collects the reduced-small HGM runs (run_reduced_small.sh) into results/hgm/*.json.

Usage: python tools/hgm/collect_reduced_small.py RUNS_DIR [OUT_DIR]
Gaps are percentage points averaged over every (attack, x value) cell, with a paired
two-tailed t-test over the same cells (spec §8 A18, A20).
"""

import json
import os
import sys

import numpy as np
import scipy.stats

ATTACKS = ("fgsm", "ifgsm", "mim", "madry")


def load(run_dir):
    out = {}
    for name in ("config.json", "ledger.json", "evaluation.json", "metrics.json", "flags.txt"):
        path = os.path.join(run_dir, name)
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            out[name.split(".")[0]] = f.read() if name.endswith(".txt") else json.load(f)
    return out


def cells(run, key, sizes):
    ev = run["evaluation"]["attacks"]
    return [ev[a][s][key] for a in ATTACKS for s in sizes]


def gap(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    diff = 100.0 * (a - b)
    p = float(scipy.stats.ttest_rel(a, b).pvalue) if np.any(diff != diff[0]) else None
    return {"gap_points": float(diff.mean()), "p_value": p, "cells": len(diff)}


def main():
    runs_dir = sys.argv[1]
    out_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results", "hgm")
    runs = {name: load(os.path.join(runs_dir, name)) for name in sorted(os.listdir(runs_dir))}
    runs = {k: v for k, v in runs.items() if v is not None}
    for name, run in runs.items():
        cert = run["config"].get("certification") or {}
        record = {"run": name, "method": run["config"]["method"],
                  "flags": run["flags"].splitlines(), "ledger_epsilon": run["ledger"]["epsilon"],
                  "ledger_claimed_epsilon": run["ledger"]["claimed_epsilon"],
                  "steps": run["metrics"]["steps"],
                  "noise_free_test_accuracy": run["metrics"]["test_accuracy"],
                  "certification": {k: v for k, v in cert.items() if k != "r_stats"},
                  "evaluation": {k: run["evaluation"][k] for k in (
                      "clean_accuracy", "clean_certified_accuracy", "attacks", "num_examples",
                      "prediction", "num_draws", "bound", "alpha", "attack_labels")}}
        with open(os.path.join(out_dir, f"reduced_small_{name}.json"), "w") as f:
            json.dump(record, f, indent=1)
    summary = {"scale": "reduced-small: MNIST, 10,000 training images, 2 epochs, CPU-sized "
                        "network, 200 (Fig. 5) / 100 (Fig. 3) test images, 200 draws",
               "rows": {}}
    s5 = ["0.1"]
    need5 = [f"{m}_eps{e}" for m in ("secure_sgd", "secure_sgd_agm", "dpsgd")
             for e in ("0.2", "2")]
    if all(n in runs for n in need5):
        acc = {n: cells(runs[n], "accuracy", s5) for n in need5}
        sec = acc["secure_sgd_eps0.2"] + acc["secure_sgd_eps2"]
        summary["rows"]["fig5_vs_dpsgd"] = {
            **gap(sec, acc["dpsgd_eps0.2"] + acc["dpsgd_eps2"]), "published": 10.74}
        summary["rows"]["fig5_vs_agm"] = {
            **gap(sec, acc["secure_sgd_agm_eps0.2"] + acc["secure_sgd_agm_eps2"]),
            "published": 2.9}
        summary["rows"]["tradeoff_eps0.2_to_2"] = {
            **gap(acc["secure_sgd_eps2"], acc["secure_sgd_eps0.2"]), "published": 29.67}
    if "secure_sgd_sound_eps2" in runs:
        summary["rows"]["secure_sgd_sound_layer_max_eps2"] = {
            "clean_accuracy": runs["secure_sgd_sound_eps2"]["evaluation"]["clean_accuracy"],
            "mean_accuracy_under_attack": float(np.mean(cells(
                runs["secure_sgd_sound_eps2"], "accuracy", s5)))}
    s3 = ["0.05", "0.1", "0.2", "0.3"]
    if "hgm_pixeldp_epsr4" in runs and "pixeldp_epsr1" in runs:
        summary["rows"]["fig3_certified_hgm_vs_pixeldp"] = {
            **gap(cells(runs["hgm_pixeldp_epsr4"], "certified_accuracy", s3),
                  cells(runs["pixeldp_epsr1"], "certified_accuracy", s3)), "published": 4.17}
    for name, run in runs.items():
        summary.setdefault("per_run_mean_accuracy_under_attack", {})[name] = float(np.mean(
            [v["accuracy"] for e in run["evaluation"]["attacks"].values() for v in e.values()]))
    with open(os.path.join(out_dir, "reproduction_reduced_small.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
