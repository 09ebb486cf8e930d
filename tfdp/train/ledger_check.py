"""A resumed run's ledger.json checked against the ledger saved with its checkpoint.

The checkpoint stores the ledger as charged when it was written (`ledger_state`) and the
step counter. On resume, ledger.json must be that ledger, or that ledger with its per-step
entry charged further (steps charged for an epoch that began after the checkpoint); any
other difference is refused, naming the field and both values (docs/ledger.md, "Resume,
replay and edited files").
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Optional

import tensorflow as tf

from tfdp import accounting, rundir
from tfdp.train import integrity

__all__ = ["ledger_digest", "charged_steps", "ledger_difference", "ledger_at_checkpoint"]


def ledger_digest(ledger_dict: Mapping[str, Any]) -> str:
    """sha256 of a ledger's canonical JSON."""
    return hashlib.sha256(json.dumps(ledger_dict, sort_keys=True).encode()).hexdigest()


def charged_steps(ledger_dict: Mapping[str, Any], spend: Any) -> int:
    """Steps the per-step entry of `spend` (an `accounting.StepSpend`) has charged (0 without
    one)."""
    if spend is None:
        return 0
    for e in ledger_dict.get("entries", []):
        if e.get("name") == spend.name:
            return sum(int(seg["steps"]) for seg in e.get("segments") or [])
    return 0


def ledger_difference(ledger: accounting.PrivacyLedger, spend: Any,
                      saved: Mapping[str, Any], path: str
                      ) -> Optional[tuple[str, Any, Any]]:
    """The first field where ledger.json differs from what the checkpoint allows.

    Args:
      ledger: ledger.json as loaded.
      spend: the method's per-step spend (None when it spends nothing per step).
      saved: the ledger saved with the checkpoint, as a dict.
      path: ledger.json's path (read raw, so that totals written in the file are compared).

    Returns:
      (field, value in the file, value allowed by the checkpoint), or None when they agree.
    """
    raw = rundir.read_json(path)
    expected = accounting.PrivacyLedger.from_dict(dict(saved))
    name = spend.name if spend is not None else None
    if name is not None and name in expected and name in ledger:
        file_segs = ledger.get(name).get("segments") or []
        old_segs = expected.get(name)["segments"]
        if accounting._extends(old_segs, file_segs):  # pylint: disable=protected-access
            spend.record(expected, file_segs)
    want = expected.to_dict()
    # The entries first: the totals only follow from them.
    return (integrity.first_difference(raw.get("entries"), want.get("entries"), "entries")
            or integrity.first_difference(raw, want))


def ledger_at_checkpoint(latest: str, path: str, ledger: accounting.PrivacyLedger, spend: Any
                         ) -> tuple[int, int, Optional[accounting.PrivacyLedger]]:
    """Checks ledger.json against the checkpoint; returns what ran and the saved ledger.

    Args:
      latest: the checkpoint a resume starts from.
      path: ledger.json's path.
      ledger: ledger.json as loaded.
      spend: the method's per-step spend (None when it spends nothing per step).

    Returns:
      (steps the checkpoint has run, steps ledger.json charges, the ledger saved with the
      checkpoint or None for a checkpoint written before the ledger was stored with it).

    Raises:
      ValueError: when ledger.json charges fewer steps than ran, or differs from the
        checkpoint's ledger beyond further charges (naming the field, both values and both
        digests), or the checkpoint cannot be read.
    """
    names = integrity.checkpoint_names(latest)
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
    state = tf.Variable(b"", dtype=tf.string, trainable=False)
    objects = {"step": step}
    if "ledger_state" in names:
        objects["ledger_state"] = state
    try:
        tf.train.Checkpoint(**objects).restore(latest).expect_partial()
    except (tf.errors.OpError, ValueError, IndexError) as e:
        raise ValueError(f"{latest}: cannot read the checkpoint "
                         f"({integrity.first_line(e)})") from None
    ran = int(step.numpy())
    file_dict = ledger.to_dict()
    charged = charged_steps(file_dict, spend)
    if spend is not None and charged < ran:
        raise ValueError(
            f"resume: {path} charges {charged} steps of {spend.name!r} but the "
            f"checkpoint {latest} has run {ran} steps; the ledger does not match what ran "
            "(restore the run's own ledger.json)")
    if "ledger_state" not in names:
        return ran, charged, None
    text = state.numpy().decode("utf-8", "replace")
    try:
        saved_ledger = accounting.PrivacyLedger.from_dict(json.loads(text))
    except (ValueError, json.JSONDecodeError) as e:
        raise ValueError(f"{latest}: the ledger stored in the checkpoint is corrupt "
                         f"({integrity.first_line(e)})") from None
    saved = saved_ledger.to_dict()
    diff = ledger_difference(ledger, spend, saved, path)
    if diff is not None:
        field, in_file, in_ckpt = diff
        raise ValueError(
            f"resume: {path} (sha256 {ledger_digest(file_dict)[:16]}, {charged} charged "
            f"steps) does not match the ledger saved in the checkpoint {latest} (sha256 "
            f"{ledger_digest(saved)[:16]}, {charged_steps(saved, spend)} charged "
            f"steps): {field} is {integrity.short(in_file)} in the file but "
            f"{integrity.short(in_ckpt)} in the checkpoint; restore the run's own "
            "ledger.json")
    return ran, charged, saved_ledger
