"""An exported SavedModel loaded with its model card, as the evaluation harness uses it.

The card is bound to the model: the SavedModel holds the sha256 of model_card.json
(`CARD_DIGEST`), checked at load, so an edited card is refused (docs/export.md).
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from tfdp import checks, rundir, serving_inputs

__all__ = ["CARD_FILE", "CARD_DIGEST", "check_card_binding", "ExportedModel"]

CARD_FILE = "model_card.json"
# The SavedModel attribute holding the sha256 of model_card.json (hex, tf.string variable).
CARD_DIGEST = "model_card_sha256"


def _read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)




def check_card_binding(loaded: Any, export_dir: str) -> Optional[str]:
    """Checks that the export's model_card.json files are the card it was exported with.

    Args:
      loaded: the loaded SavedModel (`tf.saved_model.load(export_dir)`).
      export_dir: the export directory.

    Returns:
      The card's sha256, or None for an export made before cards were bound (no digest).

    Raises:
      ValueError: one line naming the edited card file and both digests.
    """
    if not hasattr(loaded, CARD_DIGEST):
        return None
    want = getattr(loaded, CARD_DIGEST).numpy().decode("ascii")
    for path in (os.path.join(export_dir, CARD_FILE),
                 os.path.join(export_dir, "assets", CARD_FILE)):
        if os.path.isfile(path):
            got = rundir.file_sha256(path)
            if got != want:
                raise ValueError(f"saved_model: {path} is not the card this model was exported "
                                 f"with (sha256 {got[:16]}..., the SavedModel's "
                                 f"{CARD_DIGEST} is {want[:16]}...); it was edited: export the "
                                 "run again")
    return want


class ExportedModel:
    """An exported SavedModel and its model card, as the evaluation harness uses it.

    Needs only TensorFlow to load; tfdp is used only for argument checks.

    Args:
        path: the export directory.

    Raises:
        ValueError: if the directory holds no SavedModel or no model card.
    """

    def __init__(self, path: str):
        self.path = os.path.abspath(os.path.expanduser(path or ""))
        if not path or not os.path.isfile(os.path.join(self.path, "saved_model.pb")):
            raise ValueError(f"saved_model: {self.path} holds no saved_model.pb")
        card_path = os.path.join(self.path, CARD_FILE)
        if not os.path.isfile(card_path):
            card_path = os.path.join(self.path, "assets", CARD_FILE)
        if not os.path.isfile(card_path):
            raise ValueError(f"saved_model: {self.path} has no {CARD_FILE}")
        self.loaded = tf.saved_model.load(self.path)
        self.card = _read_json(card_path)
        check_card_binding(self.loaded, self.path)
        self.signatures = sorted(self.loaded.signatures.keys())

    @property
    def certification(self) -> Optional[dict]:
        return self.card.get("certification")

    @property
    def certify_bound(self) -> Optional[str]:
        sig = self.card.get("signatures", {}).get("certify")
        return sig.get("bound") if sig else None

    @property
    def has_noise(self) -> bool:
        return hasattr(self.loaded, "noisy_predict")

    def check_input(self, x: Any) -> None:
        """Refuses inputs whose shape the signatures do not take, naming the card's.

        Raises:
          ValueError: naming the expected shape and dtype (from the card) and the given.
        """
        shape = (self.card.get("data") or {}).get("input_shape")
        if not shape:
            return
        got = list(getattr(x, "shape", np.shape(x)))
        dtype = getattr(getattr(x, "dtype", None), "name", None) or str(np.asarray(x).dtype)
        if len(got) != len(shape) + 1 or [int(d) for d in got[1:]] != [int(d) for d in shape]:
            raise ValueError(f"x: the model takes float32 batches of shape [batch, "
                             f"{', '.join(str(int(d)) for d in shape)}] (model card "
                             f"data.input_shape), got shape {got} ({dtype})")
        if not (dtype.startswith("float") or dtype.startswith("int")
                or dtype.startswith("uint")):
            raise ValueError(f"x: the model takes float32 values, got {dtype}")

    def noise_free(self, x: tf.Tensor) -> tf.Tensor:
        """Noise-free logits (the `serve` endpoint); differentiable."""
        self.check_input(x)
        return self.loaded.serve(tf.cast(x, tf.float32))

    def noisy(self, x: tf.Tensor) -> tf.Tensor:
        """Logits of one noisy pass with a fresh random seed per call; differentiable."""
        self.check_input(x)
        seed = tf.random.uniform([], 0, 2**62, dtype=tf.int64)
        return self.loaded.noisy_predict(tf.cast(x, tf.float32), seed)["logits"]

    def certify(self, x: Any, num_draws: int, alpha: float, attack_size: float,
                seed: int) -> dict:
        """Calls the `certify` signature; returns numpy arrays.

        Raises:
            ValueError: without a certify signature, or on bad arguments (before calling).
        """
        if not hasattr(self.loaded, "certify"):
            raise ValueError("saved_model: the export has no certify signature (the run has "
                             "no certification entry)")
        self.check_input(x)
        n = checks.check_positive_int(num_draws, "num_draws", allow_integral_float=True)
        if n > serving_inputs.MAX_NUM_DRAWS:
            raise ValueError(f"num_draws must be <= {serving_inputs.MAX_NUM_DRAWS}, got {n}")
        alpha = checks.check_unit_interval(alpha, "alpha")
        size = checks.check_nonnegative(attack_size, "attack_size")
        out = self.loaded.certify(tf.constant(np.asarray(x, np.float32)),
                                  tf.constant(n, tf.int32), tf.constant(alpha, tf.float64),
                                  tf.constant(size, tf.float64),
                                  tf.constant(int(seed), tf.int64))
        return {k: v.numpy() for k, v in out.items()}
