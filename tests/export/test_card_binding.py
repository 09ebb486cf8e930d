"""The model card is bound to the export (issue 43 items 3 and 5, docs/export.md).

The SavedModel holds the sha256 of model_card.json; loading through tfdp (and the plain
TensorFlow snippet of docs/export.md) refuses an edited card in one line. Inputs of the wrong
shape are refused naming the card's input shape.
"""

import hashlib
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from tfdp import export


@pytest.fixture(name="export_dir")
def _export_dir(pixeldp_export):
    return pixeldp_export.export_dir


def _copy(src, tmp_path):
    dst = tmp_path / "export"
    shutil.copytree(src, dst)
    return str(dst)


def test_an_export_carries_its_card_digest(export_dir):
    loaded = tf.saved_model.load(export_dir)
    with open(os.path.join(export_dir, export.CARD_FILE), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    assert loaded.model_card_sha256.numpy().decode() == digest
    assert export.ExportedModel(export_dir).card["format"] == export.CARD_FORMAT


@pytest.mark.parametrize("where", [export.CARD_FILE, os.path.join("assets", export.CARD_FILE)])
def test_an_edited_card_is_refused_in_one_line(export_dir, tmp_path, where):
    path = os.path.join(_copy(export_dir, tmp_path), where)
    with open(path, encoding="utf-8") as f:
        card = json.load(f)
    card["ledger"]["epsilon"] = 0.01  # the edit the issue tried
    with open(path, "w", encoding="utf-8") as f:
        json.dump(card, f, indent=2, sort_keys=True)
    with pytest.raises(ValueError) as err:
        export.ExportedModel(os.path.dirname(path) if where == export.CARD_FILE
                             else os.path.dirname(os.path.dirname(path)))
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"saved_model: {path} is not the card this model was exported with")


def test_wrong_input_shape_names_the_card_shape(export_dir):
    model = export.ExportedModel(export_dir)
    shape = model.card["data"]["input_shape"]
    with pytest.raises(ValueError) as err:
        model.noise_free(np.zeros([2, 32, 32, 3], np.float32))
    assert str(err.value) == (
        f"x: the model takes float32 batches of shape [batch, {', '.join(map(str, shape))}] "
        "(model card data.input_shape), got shape [2, 32, 32, 3] (float32)")
    with pytest.raises(ValueError, match=r"got shape \[2, 784\]"):
        model.noise_free(np.zeros([2, 784], np.float32))
    with pytest.raises(ValueError, match="takes float32 values, got string"):
        model.check_input(tf.fill([1] + list(shape), "a"))
