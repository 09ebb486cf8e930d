"""One step-metrics helper: the accuracy every trainer reports, bit for bit as before."""

import numpy as np
import tensorflow as tf

from tfdp.train import metrics


def _logits_and_labels():
    rng = np.random.default_rng(3)
    logits = tf.constant(rng.normal(size=(7, 4)).astype(np.float32))
    y = tf.constant(np.array([0, 1, 2, 3, 0, 1, 2], np.int32))
    return logits, y


def test_correct_predictions_marks_the_argmax_equal_to_the_label():
    logits, y = _logits_and_labels()
    want = (np.argmax(logits.numpy(), axis=-1) == y.numpy()).astype(np.float32)
    np.testing.assert_array_equal(metrics.correct_predictions(logits, y).numpy(), want)
    # One example (a per-example gradient's logits[0]).
    assert float(metrics.correct_predictions(logits[0], y[0])) == want[0]


def test_step_accuracy_is_the_count_over_the_global_batch_in_the_given_type():
    logits, y = _logits_and_labels()
    correct = (np.argmax(logits.numpy(), axis=-1) == y.numpy()).sum()
    # A replica's share: its correct predictions over the global batch of 20.
    assert float(metrics.step_accuracy(logits, y, 20)) == np.float32(correct) / np.float32(20)
    as64 = metrics.step_accuracy(logits, y, 20, tf.float64)
    assert as64.dtype == tf.float64 and float(as64) == correct / 20


def test_step_accuracy_equals_the_formula_the_trainers_inlined():
    """Same ops as the trainers' former inline code (AdLM, StoBatch, privatize): equal bits."""
    logits, y = _logits_and_labels()
    inline = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int64),
                                            tf.cast(y, tf.int64)), tf.float32)) / float(16)
    assert metrics.step_accuracy(logits, y, 16).numpy().tobytes() == inline.numpy().tobytes()
    loss = tf.constant(0.25)
    out = metrics.step_metrics(loss, logits, y, 16)
    assert set(out) == {"loss", "accuracy"} and out["loss"] is loss
    assert out["accuracy"].numpy().tobytes() == inline.numpy().tobytes()
