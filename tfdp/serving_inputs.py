"""Input validation of the exported signatures (issue 22 item 8), in graph ops.

A SavedModel's signatures are called by code that never saw the training run, so they check
what the model and its certificates assume before any computation:

* `x`: the signature's TensorSpec fixes the rank and the per-example shape (a call with
  another shape is refused by TensorFlow before the graph runs); the values must be finite
  (NaN and Inf are rejected) and inside the value range declared in the model card: outside
  it, `"reject"` (default) fails the call, `"clip"` clips into the range. The choice is made
  at export time and recorded in the card (`input_validation`).
* `num_draws`: 1 (2 for Bernstein) <= num_draws <= `MAX_NUM_DRAWS`, and the Monte-Carlo loop
  counts in 64-bit integers.

A failed check raises `tf.errors.InvalidArgumentError` whose message names the input.
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

MAX_NUM_DRAWS = 10_000_000
OUT_OF_RANGE = ("reject", "clip")


def check_out_of_range(mode: str) -> str:
    """Returns `mode` if it is one of OUT_OF_RANGE.

    Raises:
        ValueError: naming out_of_range otherwise.
    """
    if mode not in OUT_OF_RANGE:
        raise ValueError(f"out_of_range: expected one of {OUT_OF_RANGE}, got {mode!r}")
    return mode


def card_entry(value_range: Sequence[float], mode: str) -> dict:
    """What the model card records about the signatures' input checks."""
    lo, hi = (float(v) for v in value_range)
    return {"value_range": [lo, hi], "non_finite": "rejected (NaN, Inf)",
            "out_of_range": check_out_of_range(mode),
            "out_of_range_meaning": ("values outside value_range fail the call"
                                     if mode == "reject" else
                                     "values outside value_range are clipped into it"),
            "shape": "rank and per-example shape fixed by the signature",
            "num_draws": f"1 (2 for bernstein) to {MAX_NUM_DRAWS}"}


def checked_x(x: tf.Tensor, value_range: Sequence[float], mode: str) -> tf.Tensor:
    """`x` after the finiteness and range checks (clipped in "clip" mode)."""
    lo, hi = (float(v) for v in value_range)
    mode = check_out_of_range(mode)
    asserts = [tf.debugging.assert_all_finite(x, "x must be finite: NaN or Inf in the input")]
    if mode == "reject":
        with tf.control_dependencies(asserts):
            asserts += [
                tf.debugging.assert_greater_equal(
                    x, tf.constant(lo, x.dtype),
                    message=f"x must lie in the value range [{lo:g}, {hi:g}] of the model card"),
                tf.debugging.assert_less_equal(
                    x, tf.constant(hi, x.dtype),
                    message=f"x must lie in the value range [{lo:g}, {hi:g}] of the model card"),
            ]
    with tf.control_dependencies(asserts):
        x = tf.identity(x)
    return tf.clip_by_value(x, lo, hi) if mode == "clip" else x


def checked_num_draws(num_draws: tf.Tensor, minimum: int) -> tf.Tensor:
    """num_draws as int64 after checking minimum <= num_draws <= MAX_NUM_DRAWS."""
    n = tf.cast(num_draws, tf.int64)
    asserts = [
        tf.debugging.assert_greater_equal(
            n, tf.constant(minimum, tf.int64),
            message=(f"num_draws must be >= {minimum}"
                     + (" for the empirical Bernstein bound" if minimum == 2 else ""))),
        tf.debugging.assert_less_equal(
            n, tf.constant(MAX_NUM_DRAWS, tf.int64),
            message=f"num_draws must be <= {MAX_NUM_DRAWS}"),
    ]
    with tf.control_dependencies(asserts):
        return tf.identity(n)
