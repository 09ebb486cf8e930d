"""Composition of privacy-ledger entries, and epsilon values as ledger JSON writes them.

Basic sequential composition, parallel composition within a group, and the conversion of
add/remove-one guarantees to replace-one when a total mixes both neighbouring relations
(`tfdp.accounting.PrivacyLedger.total` and `claimed_total` use them). An infinite epsilon
(no finite bound) is the JSON string "inf"; `epsilon_value` reads it back.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Optional

from tfdp.mechanisms import _validate

__all__ = ["COMPOSITIONS", "RELATIONS", "INF_JSON", "NO_GUARANTEE", "compose", "total_relation",
           "to_replace_one", "close", "epsilon_value", "format_epsilon", "json_epsilon",
           "json_entry"]

COMPOSITIONS = ("sequential", "parallel", "separate")
# Neighbouring relations a sound epsilon can refer to: "replace_one" (bounded DP: one record's
# value changes; the papers' sensitivity analyses) and "add_remove" (unbounded DP: one record is
# added or removed; dp_accounting's Poisson-subsampled analysis).
RELATIONS = ("replace_one", "add_remove")
# How an infinite epsilon ("no finite bound") is written in ledger.json and model cards: the
# JSON string "inf" (JSON has no infinity; Python's json would write the non-standard
# `Infinity`). `epsilon_value` reads it back.
INF_JSON = "inf"
NO_GUARANTEE = "no differential-privacy guarantee"


def epsilon_value(value: Any) -> float:
    """A ledger epsilon as a float: numbers as they are, "inf" (`INF_JSON`) as math.inf.

    Raises:
        ValueError: for anything else (other strings, None, bools).
    """
    if isinstance(value, str):
        if value.strip().lower() in (INF_JSON, "infinity", "+inf"):
            return math.inf
        raise ValueError(f"epsilon must be a number or {INF_JSON!r}, got {value!r}")
    if value is None:
        raise ValueError(f"epsilon must be a number or {INF_JSON!r}, got None")
    eps = _validate.as_float(value, "epsilon", allow_nonfinite=True)
    if math.isnan(eps) or eps < 0.0:
        raise ValueError(f"epsilon must be >= 0 (or {INF_JSON!r}), got {value!r}")
    return eps


def format_epsilon(value: Any) -> str:
    """An epsilon for people: "inf (no differential-privacy guarantee)" or the number."""
    eps = epsilon_value(value)
    return f"inf ({NO_GUARANTEE})" if math.isinf(eps) else f"{eps:.4g}"


def json_epsilon(value: Optional[float]) -> Any:
    return INF_JSON if value is not None and math.isinf(value) else value


def json_entry(entry: dict) -> dict:
    out = dict(entry)
    for key in ("epsilon", "claimed_epsilon"):
        out[key] = json_epsilon(out[key])
    return out


def close(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)


def total_relation(entries: Iterable[dict]) -> str:
    rels = {e["relation"] for e in entries if e["composition"] != "separate"}
    return "add_remove" if rels == {"add_remove"} else "replace_one"


def to_replace_one(eps: float, dlt: float) -> tuple[float, float]:
    """add/remove-one (eps, delta)-DP implies replace-one (2 eps, (1 + e^eps) delta)-DP.

    A replacement is a removal followed by an addition: group privacy for k = 2 (Dwork &
    Roth 2014, Thm 2.2 and its (eps, delta) form).
    """
    if math.isinf(eps):
        return math.inf, dlt
    return 2.0 * eps, min((1.0 + math.exp(min(eps, 700.0))) * dlt, 1.0)


def compose(entries: Iterable[dict], claimed: bool) -> tuple[float, float]:
    """Basic sequential composition over entries and parallel groups (max within a group).

    Sound totals mixing neighbouring relations convert add/remove-one entries to
    replace-one first (`to_replace_one`); claimed totals compose the numbers as claimed.
    """
    entries = list(entries)
    convert = not claimed and total_relation(entries) == "replace_one"
    eps_total, delta_total = 0.0, 0.0
    groups: dict[str, tuple[float, float]] = {}
    for e in entries:
        eps, dlt = e["epsilon"], e["delta"]
        if claimed:
            eps = eps if e["claimed_epsilon"] is None else e["claimed_epsilon"]
            dlt = dlt if e["claimed_delta"] is None else e["claimed_delta"]
        elif convert and e["relation"] == "add_remove" and e["composition"] != "separate":
            eps, dlt = to_replace_one(eps, dlt)
        if e["composition"] == "sequential":
            eps_total += eps  # basic sequential composition (Dwork & Roth 2014, Thm 3.16)
            delta_total += dlt
        elif e["composition"] == "parallel":
            g_eps, g_dlt = groups.get(e["group"], (0.0, 0.0))
            groups[e["group"]] = (max(g_eps, eps), max(g_dlt, dlt))  # parallel composition
    for g_eps, g_dlt in groups.values():
        eps_total += g_eps
        delta_total += g_dlt
    return eps_total, min(delta_total, 1.0)
