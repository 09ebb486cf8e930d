"""Poisson lots padded to bucket sizes: padding rows add nothing; the noisy update is unchanged."""

import numpy as np
import pytest
import tensorflow as tf

from tfdp.train import dpsgd, loop, privatize
from tfdp.train.base import StepContext, TrainConfig, lot_bucket
from tfdp.train.nonprivate import build_baseline_model, per_example_cross_entropy


def _example_loss(model):
    def example_loss(xi, yi):
        logits = model(xi, training=True)
        return per_example_cross_entropy(yi, logits)[0], logits
    return example_loss


def test_lot_bucket_sizes():
    # g = 8 * ceil(sqrt(m) / 8): 16 at m = 256 (sqrt 16), 8 at m = 16 and m = 64.
    assert [lot_bucket(s, 256) for s in (0, 1, 16, 17, 255, 256, 257, 300)] == [
        16, 16, 16, 32, 256, 256, 272, 304]
    assert [lot_bucket(s, 16) for s in (0, 5, 8, 9, 30)] == [8, 8, 8, 16, 32]
    sizes = np.random.default_rng(0).binomial(60000, 256 / 60000, size=2000)
    buckets = {lot_bucket(s, 256) for s in sizes}
    assert all(lot_bucket(s, 256) >= s for s in sizes)
    assert len(buckets) <= 9  # a few static graphs, not one per lot size
    waste = np.mean([lot_bucket(s, 256) - s for s in sizes])
    assert waste < 16  # below one bucket step per lot (about 7.5 rows on average)


def test_padded_dataset_rows_are_zero_with_index_minus_one():
    x = np.arange(10 * 2, dtype=np.float32).reshape(10, 2) + 1.0
    y = np.arange(10, dtype=np.int64)
    batches = [np.array([1, 4, 7]), np.array([0, 2, 3, 5, 6, 8, 9])]
    ds = loop._epoch_dataset(tf.distribute.get_strategy(), x, y, batches,
                             pad_to=lambda n: lot_bucket(n, 4))  # g = 8
    got = list(ds)
    assert [int(b[0].shape[0]) for b in got] == [8, 8]
    xb, yb, ib = (t.numpy() for t in got[0])
    np.testing.assert_array_equal(ib, [1, 4, 7, -1, -1, -1, -1, -1])
    np.testing.assert_array_equal(xb[:3], x[[1, 4, 7]])
    np.testing.assert_array_equal(yb[:3], y[[1, 4, 7]])
    assert not xb[3:].any() and not yb[3:].any()


@pytest.mark.parametrize("clipping", ["auto", "ghost", "vectorized"])
def test_padded_and_unpadded_lots_give_the_same_noisy_update(clipping):
    tf.keras.utils.set_random_seed(3)
    model = build_baseline_model("cnn", (12, 12, 1), 10)
    variables = model.trainable_variables
    real = 11
    x = tf.random.stateless_uniform((real, 12, 12, 1), [5, 1], minval=-1, maxval=1)
    y = tf.constant(np.arange(real) % 10, tf.int64)
    padded = 16
    x_pad = tf.concat([x, tf.zeros((padded - real, 12, 12, 1))], 0)
    y_pad = tf.concat([y, tf.zeros([padded - real], tf.int64)], 0)
    indices = tf.constant(list(range(real)) + [-1] * (padded - real), tf.int64)

    @tf.function
    def update(xb, yb, idx, seed):
        ctx = StepContext.current(seed, 12, idx)  # expected lot size 12: the divisor
        return privatize.dpsgd_gradients(
            ctx, model, variables, xb, yb, _example_loss(model), l2_clip=0.5,
            noise_multiplier=1.0, clipping=clipping,
            mask=None if idx is None else ctx.row_mask())

    seed = tf.constant([21, 22], tf.int64)
    ref, ref_m = update(x, y, None, seed)
    got, got_m = update(x_pad, y_pad, indices, seed)
    # The padding rows' terms are exactly 0 (clip factor 0 times a finite gradient) and the
    # noise is the same draw (same step seed, parameter shapes); what differs is only the
    # order in which float32 adds the same 11 nonzero terms per entry (batched reductions
    # block by batch length): at most ~11 ulps relative to the terms' magnitude, far below
    # rtol 1e-5 (and atol 1e-6 for entries that nearly cancel).
    for r, g in zip(ref, got):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-5, atol=1e-6)
    for k in ("loss", "accuracy"):
        np.testing.assert_allclose(got_m[k].numpy(), ref_m[k].numpy(), rtol=1e-5)
    # The update is noisy (another seed moves it by about sigma * C / 12 per entry), so the
    # agreement above is that of the same noise draw, not of two noiseless sums.
    other, _ = update(x_pad, y_pad, indices, tf.constant([21, 23], tf.int64))
    assert max(float(tf.reduce_max(tf.abs(a - b))) for a, b in zip(got, other)) > 1e-2


@pytest.mark.parametrize("clipping", ["auto", "vectorized"])
def test_padding_rows_alone_add_exactly_nothing(clipping):
    tf.keras.utils.set_random_seed(4)
    model = build_baseline_model("cnn", (8, 8, 1), 10)
    x = tf.zeros((8, 8, 8, 1))
    y = tf.zeros([8], tf.int64)
    sums, _, _ = privatize.clipped_gradient_sum(
        model, model.trainable_variables, x, y, _example_loss(model), 1.0, clipping,
        mask=tf.zeros([8]))
    for s in sums:
        assert not np.any(s.numpy())


def test_dpsgd_pads_poisson_lots_on_the_ghost_paths_only():
    def method(**opts):
        cfg = TrainConfig(method="dpsgd", dataset="synthetic", model_dir="/tmp/unused",
                          epochs=1, batch_size=8, epsilon=None, delta=1e-5, seed=0,
                          options=dict({"dpsgd_noise_multiplier": 1.0}, **opts))
        return dpsgd.DPSGD(cfg)

    assert method().pads_lots()  # the default: auto clipping, Poisson lots
    assert method(dpsgd_clipping="ghost").pads_lots()
    assert not method(dpsgd_clipping="vectorized").pads_lots()
    assert not method(dpsgd_sampling="shuffle").pads_lots()
