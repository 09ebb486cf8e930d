"""tfdp-train --num_classes: Tiny ImageNet's class subset reaches the loader and the evaluator.

StoBatch's Tiny ImageNet setting uses the first 30 classes (the paper's subset). A fake directory in
the official layout with 4 classes stands in for the data set here.
"""

import json
import os

import pytest
from PIL import Image

from tfdp import evaluate
from tfdp.apps import train as train_app

_WNIDS = ["n01443537", "n01629819", "n01641577", "n01644900"]


def _write_fake_tiny_imagenet(root, per_class: int = 3) -> None:
    """wnids.txt, words.txt, train/<wnid>/images and val/ in the official layout."""
    os.makedirs(root)
    with open(root / "wnids.txt", "w") as f:
        f.write("\n".join(_WNIDS) + "\n")
    with open(root / "words.txt", "w") as f:
        f.writelines(f"{w}\tclass {i}\n" for i, w in enumerate(_WNIDS))
    for c, w in enumerate(_WNIDS):
        d = root / "train" / w / "images"
        os.makedirs(d)
        with open(root / "train" / w / f"{w}_boxes.txt", "w") as f:
            f.writelines(f"{w}_{i}.JPEG\t0\t0\t63\t63\n" for i in range(per_class))
        for i in range(per_class):
            Image.new("RGB", (64, 64), (60 * c, 30 * i, 90)).save(d / f"{w}_{i}.JPEG")
    os.makedirs(root / "val" / "images")
    lines = []
    for k, (c, w) in enumerate((c, w) for c, w in enumerate(_WNIDS) for _ in range(2)):
        Image.new("RGB", (64, 64), (60 * c, 200, 90)).save(root / "val" / "images" / f"v{k}.JPEG")
        lines.append(f"v{k}.JPEG\t{w}\t0\t0\t63\t63\n")
    with open(root / "val" / "val_annotations.txt", "w") as f:
        f.writelines(lines)


def _values(tmp_path, **kw):
    values = {"method": "stobatch", "dataset": "tiny_imagenet", "data_dir": str(tmp_path),
              "model_dir": str(tmp_path / "run"), "epochs": 1, "batch_size": 3, "seed": 1,
              "epsilon": 50.0, "learning_rate": 0.01, "verbose": 0}
    values.update(kw)
    return values


_OPTIONS = {"stobatch_architecture": "tiny", "stobatch_hidden_units": 4,
            "stobatch_attack_iters": 1, "stobatch_num_draws": 4}


def test_num_classes_reaches_loader_model_and_evaluator(tmp_path):
    _write_fake_tiny_imagenet(tmp_path / "tiny_imagenet")
    spec = train_app.resolve(_values(tmp_path, num_classes=2), dict(_OPTIONS))
    assert spec.num_classes == 2
    data = train_app.load_data(spec)
    assert data.num_classes == 2
    assert len(data.x_train) == 6 and set(data.y_train.tolist()) == {0, 1}
    assert set(data.y_test.tolist()) == {0, 1}
    result = train_app.execute(spec)
    assert result.model.output_layer.kernel.shape[-1] == 2  # K = 2, not the 4 wnids
    config = json.load(open(tmp_path / "run" / "config.json"))
    assert config["data_options"] == {"num_classes": 2}
    assert config["flags"]["num_classes"] == 2
    assert "--num_classes=2" in open(tmp_path / "run" / "flags.txt").read()
    summary = evaluate.evaluate_run(str(tmp_path / "run"), evaluate.EvalOptions(
        attacks=(), attack_sizes=(), seed=0))
    assert summary["num_examples"] == 4  # the 2 classes' 4 validation images, not all 8


def test_without_num_classes_all_classes_are_used(tmp_path):
    _write_fake_tiny_imagenet(tmp_path / "tiny_imagenet")
    spec = train_app.resolve(_values(tmp_path), dict(_OPTIONS))
    data = train_app.load_data(spec)
    assert len(data.x_train) == 12 and set(data.y_train.tolist()) == {0, 1, 2, 3}
    assert data.num_classes == 200  # the full data set's K (this fake holds only 4 wnids)


@pytest.mark.parametrize("kw, match", [
    ({"num_classes": 0}, "--num_classes"),
    ({"num_classes": 201}, "--num_classes"),
    ({"num_classes": 10, "dataset": "mnist"}, "--num_classes: only --dataset=tiny_imagenet"),
])
def test_bad_num_classes_names_the_flag(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        train_app.resolve(_values(tmp_path, **kw), dict(_OPTIONS))
    assert not (tmp_path / "run").exists()
