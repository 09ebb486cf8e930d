"""What an evaluation says: its plan, console lines and per-example certificates (TSV)."""

from __future__ import annotations

import math
import os
from typing import Any, Mapping, Optional, Sequence

from tfdp.eval_options import EvalOptions

__all__ = ["TSV_COLUMNS", "DEFAULT_CERTIFY_EXAMPLES", "certified_key", "summary_lines",
           "write_certificates", "default_num_examples", "work_plan"]

# Test examples a --certify evaluation of a run directory uses when --num_examples is unset:
# the run's own num_test (config.json), at most this many (a Monte-Carlo certificate per
# example and per attack; 1,000 examples give a binomial standard error <= 1.6 points).
DEFAULT_CERTIFY_EXAMPLES = 1000
TSV_COLUMNS = ("attack", "attack_size", "index", "label", "prediction", "radius", "correct",
               "certified", "seconds")


def certified_key(summary: Mapping[str, Any]) -> str:
    """"certified_accuracy", or "claimed_certified_accuracy" for an unsound certificate."""
    cert = summary.get("certification") or {}
    return "certified_accuracy" if cert.get("sound", False) or not cert else \
        "claimed_certified_accuracy"


def _ci(res: Mapping[str, Any], key: str = "ci95") -> str:
    lo, hi = res.get(key) or (float("nan"), float("nan"))
    return f"95% CI {lo:.3f}-{hi:.3f}"


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """Console lines of an evaluation summary; unsound certificates' numbers say CLAIMED.

    The headline is the clean certified accuracy per radius (the standard metric), with the
    accuracy under attack beside it; every accuracy has its N and 95% CI.
    """
    key = certified_key(summary)
    label = "certified" if key == "certified_accuracy" else "CLAIMED certified"
    n = summary["num_examples"]
    norm = {"l2": "l2", "linf": "l_inf"}.get(summary.get("attack_norm", "linf"), "l_inf")
    lines = [f"clean accuracy {summary['clean_accuracy']:.4f} "
             f"({_ci(summary, 'clean_accuracy_ci95')}, N={n}, {summary.get('prediction')})"]
    cert = summary.get("certification") or {}
    if summary.get("num_draws") and cert:
        params = ", ".join(f"{k}={cert[k]}" for k in ("sigma", "lipschitz", "selection_draws",
                                                      "epsilon", "delta",
                                                      "construction_bound",
                                                      "sensitivity_mode") if k in cert)
        lines.append(f"certificate {cert.get('name')} ({cert.get('norm')}, "
                     f"{'sound' if cert.get('sound') else 'NOT sound: numbers are claims'}; "
                     f"{params}), n={summary.get('num_draws')} draws, alpha="
                     f"{summary.get('alpha')}, {summary.get('bound')}")
    for size, res in sorted((summary.get("clean_" + key) or {}).items(),
                            key=lambda kv: float(kv[0])):
        lines.append(f"clean {label} accuracy at {norm} radius {size}: {res['value']:.4f} "
                     f"({_ci(res)}, N={res['n']})")
    for name, entry in summary["attacks"].items():
        for size, res in sorted(entry.items(), key=lambda kv: float(kv[0])):
            on_attacked = res.get(key + "_on_attacked_inputs")
            extra = ("" if on_attacked is None else
                     f"; {label} on attacked inputs {on_attacked:.4f}")
            lines.append(f"{name} ({norm}) at {size}: accuracy {res['accuracy']:.4f} "
                         f"({_ci(res, 'accuracy_ci95')}, N={res.get('n', n)}){extra}")
    if summary.get("radius_conversion"):
        lines.append("radii in l_inf from the l2 certificate: " + summary["radius_conversion"])
    if summary.get("claimed_note"):
        lines.append(summary["claimed_note"])
    check = summary.get("soundness_check")
    if check:
        verdict = ("passed" if check["passed"] else
                   "inconclusive" if not check["conclusive"] else "FAILED")
        lines.append(f"soundness check ({verdict}): {check['flipped']} of "
                     f"{check['certified']} certified examples flipped under {check['attack']}"
                     f"; p-value {check['p_value']:.3g} (flips ~ Binomial(certified, "
                     f"{check['null_rate']:g}) if sound); {check['note']}")
        power = check.get("power")
        if power:
            lines.append(f"soundness check power: {power['flipped']} of {power['of']} flipped "
                         f"at {power['radius_factor']:g} r (the same attacks beyond the "
                         "certified radius)")
    return lines


def write_certificates(path: str, records: Sequence[tuple], claimed: bool = False) -> str:
    """Writes the per-example records as a TSV (header TSV_COLUMNS); returns the path.

    With `claimed` (an unsound certificate) the radius and certified columns are named
    claimed_radius and claimed_certified.
    """
    columns = [("claimed_" + c if claimed and c in ("radius", "certified") else c)
               for c in TSV_COLUMNS]
    lines = ["\t".join(columns)]
    for name, size, index, label, pred, radius, correct, certified, seconds in records:
        lines.append("\t".join([
            name, repr(float(size)), str(index), str(label), str(pred),
            "nan" if math.isnan(radius) else f"{radius:.6g}", str(int(correct)),
            "" if certified is None else str(int(certified)), f"{seconds:.6f}"]))
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, ".tmp-" + os.path.basename(path))
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return path


def default_num_examples(options: EvalOptions, config: Mapping[str, Any]
                         ) -> tuple[Optional[int], str]:
    """The number of test examples an evaluation of a run uses, and where it comes from.

    --num_examples when given; else, with --certify (a Monte-Carlo certificate per example
    and per attack, minutes per hundred examples on a CPU), the run's own num_test from
    config.json, at most DEFAULT_CERTIFY_EXAMPLES; else every test example.
    """
    if options.num_examples is not None:
        return int(options.num_examples), "--num_examples"
    if not options.certify:
        return None, "all test examples"
    num_test = config.get("num_test")
    if isinstance(num_test, int) and 0 < num_test <= DEFAULT_CERTIFY_EXAMPLES:
        return num_test, f"the run's --num_test={num_test}"
    return DEFAULT_CERTIFY_EXAMPLES, (f"--certify's default cap of {DEFAULT_CERTIFY_EXAMPLES}"
                                      + (f" (the run used {num_test})"
                                         if isinstance(num_test, int) else ""))


def work_plan(n: int, options: EvalOptions, certification: Optional[Mapping[str, Any]],
              source: str) -> str:
    """One line naming the planned work: examples, attack jobs, Monte-Carlo draws, flags."""
    jobs = 1 + len(options.attacks) * len(options.attack_sizes)
    certify = bool(options.certify and certification)
    draws = int(options.num_draws or (certification or {}).get("num_draws") or 1000)
    what = (f"{n} test examples ({source}) x {jobs} jobs (clean"
            + (f" + {len(options.attacks)} attacks x {len(options.attack_sizes)} sizes"
               if jobs > 1 else "") + ")")
    if certify:
        what += f", {draws} Monte-Carlo draws each"
    return (f"evaluating {what}; --num_examples=N sets the number of examples"
            + (", --num_draws the draws, --attacks/--attack_sizes the jobs" if certify else ""))
