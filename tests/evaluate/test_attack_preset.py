"""Attack presets: the papers' step mu/T and a stronger PGD (step 2.5 mu/T, more steps, restarts)."""

import keras
import numpy as np
import pytest

from tfdp import data, evaluate


@pytest.fixture(scope="module")
def small_model():
    x, y = data.load("sample", "train", value_range=(-1.0, 1.0), num_examples=1000)
    keras.utils.set_random_seed(0)
    inp = keras.Input((28, 28, 1))
    h = keras.layers.Dense(32, activation="relu")(keras.layers.Flatten()(inp))
    model = keras.Model(inp, keras.layers.Dense(10)(h))
    model.compile(keras.optimizers.Adam(3e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=50, epochs=2, verbose=0)
    xt, yt = data.load("sample", "test", value_range=(-1.0, 1.0), num_examples=200)
    return model, xt, yt


def test_presets_set_step_iterations_and_restarts():
    base = evaluate.EvalOptions(nb_iter=10)
    paper = evaluate.apply_attack_preset(base, "paper")
    assert (paper.eps_iter_scale, paper.nb_iter, paper.restarts) == (1.0, 10, 1)
    strong = evaluate.apply_attack_preset(base, "strong")
    assert (strong.eps_iter_scale, strong.nb_iter, strong.restarts) == (2.5, 50, 5)
    with pytest.raises(ValueError, match="attack_preset"):
        evaluate.apply_attack_preset(base, "weak")
    with pytest.raises(ValueError, match="restarts"):
        evaluate.validate_options(evaluate.EvalOptions(restarts=0))
    with pytest.raises(ValueError, match="eps_iter_scale"):
        evaluate.validate_options(evaluate.EvalOptions(eps_iter_scale=0.0))


def test_strong_preset_is_at_least_as_strong_as_the_paper_setting(small_model):
    """PGD with larger steps, more iterations and restarts leaves no more accuracy.

    Both use the same model and 200 examples; the strong attack keeps, per example, the first
    restart that breaks it, so its accuracy is at most that of one restart of the same attack
    up to the randomness of the starts. We allow no slack beyond 1 example in 200.
    """
    model, x, y = small_model
    common = dict(attacks=("madry",), attack_sizes=(0.1,), nb_iter=10, seed=0,
                  batch_size=100)
    paper = evaluate.validate_options(evaluate.apply_attack_preset(
        evaluate.EvalOptions(**common), "paper"))
    strong = evaluate.validate_options(evaluate.apply_attack_preset(
        evaluate.EvalOptions(**common), "strong"))
    s_paper, _ = evaluate.evaluate_arrays(model, x, y, value_range=(-1.0, 1.0),
                                          certification=None, options=paper)
    s_strong, _ = evaluate.evaluate_arrays(model, x, y, value_range=(-1.0, 1.0),
                                           certification=None, options=strong)
    key = evaluate.size_key(0.1)
    acc_paper = s_paper["attacks"]["madry"][key]["accuracy"]
    acc_strong = s_strong["attacks"]["madry"][key]["accuracy"]
    assert s_strong["restarts"] == 5 and s_strong["eps_iter_scale"] == 2.5
    assert s_strong["nb_iter"] == 50 and s_paper["nb_iter"] == 10
    assert acc_strong <= acc_paper + 1.0 / len(y), (acc_paper, acc_strong)
    assert s_paper["clean_accuracy"] == s_strong["clean_accuracy"]
    assert np.isfinite(acc_strong)
