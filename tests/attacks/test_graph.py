"""Graph-safe batched attacks (attacks.graph): CleverHans agreement, ball, ids, determinism."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from cleverhans.tf2.attacks.basic_iterative_method import basic_iterative_method
from cleverhans.tf2.attacks.fast_gradient_method import fast_gradient_method
from cleverhans.tf2.attacks.momentum_iterative_method import momentum_iterative_method

from attacks import graph


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(),
                             keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(3)])


def _x(n=9, seed=0, low=-1.0, high=1.0):
    return tf.constant(np.random.default_rng(seed).uniform(low, high, (n, 4, 4, 1)), tf.float32)


def test_bitwise_agreement_with_cleverhans_per_example_ids(model):
    x = _x()
    ids = tf.constant([0, 1, 0, 1, 0, 1, 0, 1, 0])
    adv = graph.craft(model, x, 0.2, attack_ids=ids, nb_iter=7, clip_min=-1.0, clip_max=1.0)
    bim = basic_iterative_method(model, x, 0.2, 0.2 / 7, 7, np.inf, clip_min=-1.0,
                                 clip_max=1.0, sanity_checks=False)
    mim = momentum_iterative_method(model, x, 0.2, 0.2 / 7, 7, np.inf, clip_min=-1.0,
                                    clip_max=1.0, sanity_checks=False)
    expect = np.where(ids.numpy()[:, None, None, None] == 1, mim.numpy(), bim.numpy())
    np.testing.assert_array_equal(adv.numpy(), expect)


def test_single_step_ifgsm_equals_fgsm(model):
    # With T_mu = 1 and no random start, I-FGSM equals FGSM (StoBatch Eq. 7-8).
    x = _x()
    adv = graph.craft(model, x, 0.3, attack_ids=tf.zeros([9], tf.int32), nb_iter=1,
                      clip_min=-1.0, clip_max=1.0)
    ref = fast_gradient_method(model, x, 0.3, np.inf, clip_min=-1.0, clip_max=1.0)
    np.testing.assert_array_equal(adv.numpy(), ref.numpy())


def test_inside_ball_without_clip_and_moves(model):
    # Inside the mu-ball and moving (no range clip: x_bar lies outside [-1, 1])
    x = _x(low=-30, high=30)
    ids = graph.ensemble_ids(tf.range(9), 9)
    noise = tf.random.stateless_uniform(x.shape, [1, 2], -1.0, 1.0)
    mu = 0.37
    adv = graph.craft(model, x, mu, attack_ids=ids, nb_iter=5, start_noise=noise).numpy()
    size = np.abs(adv - x.numpy()).reshape(9, -1).max(1)
    assert np.all(size <= mu + 1e-6)
    assert np.all(size[ids.numpy() == graph.IFGSM] > 0)


def test_deterministic_and_seeded(model):
    x = _x()
    ids = tf.constant([0, 1, 2] * 3)
    fn = tf.function(lambda n: graph.craft(model, x, 0.2, attack_ids=ids, nb_iter=3,
                                           start_noise=n))
    n1 = tf.random.stateless_uniform(x.shape, [3, 4], -1.0, 1.0)
    n2 = tf.random.stateless_uniform(x.shape, [5, 6], -1.0, 1.0)
    a, b, c = fn(n1).numpy(), fn(n1).numpy(), fn(n2).numpy()
    np.testing.assert_array_equal(a, b)  # same key: reproducible
    madry = ids.numpy() == graph.MADRY
    assert not np.array_equal(a[madry], c[madry])  # Madry depends on the key
    np.testing.assert_array_equal(a[~madry], c[~madry])  # I-FGSM and MIM do not
    starts = (a[madry] - x.numpy()[madry]).reshape(3, -1)
    assert not np.allclose(starts[0], starts[1])  # differs between examples


def test_ensemble_ids_split_is_fixed_and_balanced():
    # StoBatch's fixed 3-way split: sizes m/3, independent of how positions are sharded
    ids = graph.ensemble_ids(tf.range(2499), 2499).numpy()
    assert np.bincount(ids).tolist() == [833, 833, 833]
    parts = [graph.ensemble_ids(tf.range(lo, hi), 2499).numpy()
             for lo, hi in ((0, 625), (625, 1250), (1250, 1874), (1874, 2499))]
    np.testing.assert_array_equal(np.concatenate(parts), ids)


def test_runs_inside_strategy_run(model):
    from tfdp.train import loop
    strategy = loop.cpu_mirrored_strategy()
    x = _x(n=8)

    @tf.function
    def step():
        def fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            xs = x[rid * 4:(rid + 1) * 4]
            return graph.craft(model, xs, 0.2, attack_ids=tf.zeros([4], tf.int32), nb_iter=2)
        return strategy.run(fn)

    out = strategy.experimental_local_results(step())
    ref = graph.craft(model, x, 0.2, attack_ids=tf.zeros([8], tf.int32), nb_iter=2)
    np.testing.assert_allclose(np.concatenate([o.numpy() for o in out]), ref.numpy(),
                               atol=1e-6)


def test_python_argument_errors(model):
    with pytest.raises(ValueError, match="nb_iter"):
        graph.craft(model, _x(), 0.1, attack_ids=tf.zeros([9], tf.int32), nb_iter=0)
    with pytest.raises(ValueError, match="clip_min"):
        graph.craft(model, _x(), 0.1, attack_ids=tf.zeros([9], tf.int32), nb_iter=1,
                    clip_min=-1.0)


@pytest.mark.parametrize("name", ["fgsm", "ifgsm", "mim", "madry"])
def test_each_attack_under_two_replicas_equals_the_eager_call(model, name):
    """Issue: each attack inside tf.function under a 2-replica MirroredStrategy (two logical
    CPUs) gives the same adversarial examples as the eager API for the same seed."""
    import attacks
    from tfdp.train import loop
    strategy = loop.cpu_mirrored_strategy()
    assert strategy.num_replicas_in_sync == 2
    x, eps, nb_iter, seed = _x(n=8, low=-0.9, high=0.9), 0.2, 3, [7, 3]
    kwargs = {} if name == "fgsm" else {"nb_iter": nb_iter}
    if name == "madry":
        kwargs["seed"] = seed
    eager = getattr(attacks, name)(model, x, eps, clip_min=-1.0, clip_max=1.0, **kwargs)
    # Madry's random start: the same stateless uniform draw as the eager API, over the batch
    start = tf.random.stateless_uniform(x.shape, tf.constant(seed, tf.int64), -1.0, 1.0)
    ids = tf.fill([4], graph.ATTACK_IDS[name])

    @tf.function
    def step():
        def fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            xs, ss = x[rid * 4:(rid + 1) * 4], start[rid * 4:(rid + 1) * 4]
            return graph.craft(model, xs, eps, attack_ids=ids,
                               nb_iter=1 if name == "fgsm" else nb_iter,
                               start_noise=ss if name == "madry" else None,
                               clip_min=-1.0, clip_max=1.0)
        return strategy.run(fn)

    out = np.concatenate([o.numpy() for o in strategy.experimental_local_results(step())])
    np.testing.assert_allclose(out, eager.numpy(), rtol=0, atol=1e-6)
    assert np.max(np.abs(out - x.numpy())) > 0.5 * eps  # the attack moved the points


@pytest.mark.parametrize("name", ["fgsm", "ifgsm", "mim", "madry"])
def test_public_attack_api_inside_strategy_run_equals_the_eager_call(model, name):
    """attacks.fgsm/ifgsm/mim/madry called inside tf.function + strategy.run (2 replicas)."""
    import attacks
    from tfdp.train import loop
    strategy = loop.cpu_mirrored_strategy()
    x, eps = _x(n=8, low=-0.9, high=0.9), 0.2
    kwargs = {} if name == "fgsm" else {"nb_iter": 3}
    if name == "madry":
        kwargs["seed"] = [5, 1]
    fn = getattr(attacks, name)

    @tf.function
    def step():
        def replica():
            # each replica attacks the whole batch, so the seeded Madry start matches
            return fn(model, x, eps, clip_min=-1.0, clip_max=1.0, **kwargs)
        return strategy.run(replica)

    eager = fn(model, x, eps, clip_min=-1.0, clip_max=1.0, **kwargs).numpy()
    for out in strategy.experimental_local_results(step()):
        np.testing.assert_allclose(out.numpy(), eager, rtol=0, atol=1e-6)
    assert np.max(np.abs(eager - x.numpy())) > 0.5 * eps


def test_public_attack_api_in_a_graph_rejects_what_it_cannot_do(model):
    import attacks
    x = _x(n=4)
    with pytest.raises(ValueError, match="seed"):
        tf.function(lambda: attacks.madry(model, x, 0.1))()
    with pytest.raises(ValueError, match="eot_draws"):
        tf.function(lambda: attacks.ifgsm(model, x, 0.1, eot_draws=2))()
