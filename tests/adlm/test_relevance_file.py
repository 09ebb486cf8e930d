"""--adlm_relevance_file: a relevance map read from a file, budgets made as the AdLM code
release makes them, and a ledger that claims nothing for a map made outside the run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tfdp.papers.adlm import relevance
from tfdp.train.base import DataSpec
from tfdp.train.config import TrainConfig
from tfdp import accounting
from tfdp.papers.adlm.method import AdLM, ILM


def _write(path, table):
    path.write_text("\n".join("\t".join(repr(float(v)) for v in row) for row in table) + "\n")
    return str(path)


def test_file_budgets_follow_the_release_arithmetic(tmp_path):
    rng = np.random.default_rng(0)
    table = rng.normal(size=(8, 8))
    floor = 1e-3
    got = relevance.file_budgets(relevance.read_relevance_file(_write(tmp_path / "r.txt", table)),
                                 floor=floor, image_hw=(4, 4))
    # The release's loops, written out: floor R, beta over the whole padded map, floor beta,
    # pixel (i, j) reads beta[i + 2][j + 2].
    r = [[max(v, floor) for v in row] for row in table.tolist()]
    total = sum(sum(row) for row in r)
    beta = [[max(64 * v / total, floor) for v in row] for row in r]
    want = [beta[i + 2][j + 2] for i in range(4) for j in range(4)]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # Not normalised to the image: the inner ratios need not sum to 16.
    assert abs(got.sum() - 16) > 1e-3


@pytest.mark.parametrize("text, match", [
    ("1 2\n3\n", "cannot read|rectangular"),
    ("1 x\n", "cannot read"),
    ("nan 1\n1 1\n", "finite"),
])
def test_a_bad_file_is_refused_naming_the_flag(tmp_path, text, match):
    p = tmp_path / "r.txt"
    p.write_text(text)
    with pytest.raises(ValueError, match=f"--adlm_relevance_file: .*({match})"):
        relevance.file_budgets(relevance.read_relevance_file(str(p)), floor=1e-5,
                               image_hw=(1, 1))


def test_a_map_that_does_not_center_the_image_is_refused():
    with pytest.raises(ValueError, match="--adlm_relevance_file: a 5 x 6 map does not center"):
        relevance.file_budgets(np.ones((5, 6)), floor=1e-5, image_hw=(4, 4))


def _config(tmp_path, **options):
    return TrainConfig(method="adlm", dataset="sample", model_dir=str(tmp_path / "run"),
                       epochs=1, batch_size=50, learning_rate=1e-2, seed=1, epsilon=1.0,
                       delta=0.0, value_range=(0.0, 1.0), options=options)


def test_the_ledger_records_no_finite_epsilon_for_an_outside_map(tmp_path):
    path = _write(tmp_path / "r.txt", np.random.default_rng(1).uniform(size=(32, 32)))
    cfg = _config(tmp_path, adlm_relevance_file=path)
    method = AdLM(cfg)
    method.validate()
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(60, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, size=60)
    ledger = accounting.PrivacyLedger()
    method.setup(DataSpec((28, 28, 1), 10, (0.0, 1.0), 60, "sample", x, y), ledger,
                 np.random.default_rng(2))
    entry = [e for e in ledger.entries if e["name"] == "adlm_eps1_relevance"][0]
    assert math.isinf(entry["epsilon"]) and entry["claimed_epsilon"] == pytest.approx(0.25)
    assert "r.txt" in entry["note"] and "sha256" in entry["note"]
    want = relevance.file_budgets(relevance.read_relevance_file(path), floor=1e-5,
                                  image_hw=(28, 28))
    np.testing.assert_allclose(method.setup_state()["beta"].reshape(-1), want)


def test_ilm_and_public_split_refuse_the_file(tmp_path):
    path = _write(tmp_path / "r.txt", np.ones((32, 32)))
    with pytest.raises(ValueError, match="--adlm_relevance_file: ilm has no relevance step"):
        ILM(_config(tmp_path, adlm_relevance_file=path)).validate()
    with pytest.raises(ValueError, match="--adlm_relevance_file: .*--adlm_aux_data=public_split"):
        AdLM(_config(tmp_path, adlm_relevance_file=path, adlm_aux_data="public_split"))


def test_ref_code_delta_f_is_the_release_constant_and_only_for_linear_modes(tmp_path):
    """--adlm_delta_f=ref_code: 10 (25 + 25^2 / 4) = 1812.5 with the output bias (tfdp's
    Lemma 5 count: 1950); refused with per-record FM noise, whose ledger bound would use it."""
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(60, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, size=60)
    spec = DataSpec((28, 28, 1), 10, (0.0, 1.0), 60, "sample", x, y)
    for delta_f, want in (("lemma5", 1950.0), ("ref_code", 1812.5)):
        method = AdLM(_config(tmp_path, adlm_fm_mode="ref_code", adlm_output_bias=True,
                              adlm_delta_f=delta_f, adlm_aux_model="mlp", adlm_aux_epochs=1))
        method.setup(spec, accounting.PrivacyLedger(), np.random.default_rng(1))
        assert method.setup_state()["scalars"][4] == want
    with pytest.raises(ValueError, match="--adlm_delta_f: ref_code understates"):
        AdLM(_config(tmp_path, adlm_fm_mode="per_example_label_only", adlm_delta_f="ref_code"))


def test_adam_epsilon_on_the_mean_equals_the_release_sum_with_its_epsilon(tmp_path):
    """--adlm_adam_epsilon: Adam on the batch mean with epsilon e / |L| takes the same steps
    as Adam on the batch sum with e (the release: TF1's 1e-8 on the sum)."""
    import keras  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    method = AdLM(_config(tmp_path, adlm_adam_epsilon=1e-8 / 50))
    on_mean = method.make_optimizer("adam", 1e-2)
    on_sum = keras.optimizers.Adam(1e-2, epsilon=1e-8)
    rng = np.random.default_rng(0)
    a, b = (tf.Variable(np.zeros(4, np.float32)) for _ in range(2))
    for _ in range(5):
        g = tf.constant(rng.normal(scale=1e-6, size=(50, 4)).astype(np.float32))
        on_mean.apply_gradients([(tf.reduce_mean(g, 0), a)])
        on_sum.apply_gradients([(tf.reduce_sum(g, 0), b)])
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4)
    default = AdLM(_config(tmp_path)).make_optimizer("adam", 1e-2)
    assert default.epsilon == pytest.approx(1e-7)
