"""Laplace and Gaussian noise samplers in numpy and TensorFlow (graph-safe, seeded)."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from tfdp.mechanisms import _validate

_Shape = Union[Sequence[int], tf.TensorShape, tf.Tensor]

# ----------------------------------------------------------------------------- numpy


def sample_laplace(scale: Any, size: Any = None, *, rng: np.random.Generator) -> np.ndarray:
    """Draws Laplace(0, scale) noise with numpy.

    Args:
        scale: Laplace scale b >= 0 (density exp(-|x|/b) / 2b); a scalar or an array
            that broadcasts against `size` (e.g. one scale per feature).
        size: output shape; None gives the broadcast shape of `scale`.
        rng: the numpy Generator that supplies the randomness.

    Returns:
        float64 array of samples.

    Raises:
        ValueError: if scale has a negative/non-finite entry, rng is not a Generator, or
            scale does not broadcast to size.
    """
    b = _validate.check_scale_array(scale, "scale")
    _validate.check_rng(rng)
    size = _check_np_size(b, size)
    # Standard Laplace (variance 2), then scaled: X = b * L.
    return rng.laplace(0.0, 1.0, size=size) * b


def sample_gaussian(stddev: Any, size: Any = None, *, rng: np.random.Generator) -> np.ndarray:
    """Draws N(0, stddev^2) noise with numpy.

    Args:
        stddev: standard deviation >= 0; a scalar or an array broadcasting against `size`
            (e.g. HGM's per-coordinate standard deviations).
        size: output shape; None gives the broadcast shape of `stddev`.
        rng: the numpy Generator that supplies the randomness.

    Returns:
        float64 array of samples.

    Raises:
        ValueError: if stddev has a negative/non-finite entry, rng is not a Generator, or
            stddev does not broadcast to size.
    """
    s = _validate.check_scale_array(stddev, "stddev")
    _validate.check_rng(rng)
    size = _check_np_size(s, size, name="stddev")
    return rng.standard_normal(size=size) * s


def _check_np_size(scale: np.ndarray, size: Any, name: str = "scale") -> tuple:
    if size is None:
        return scale.shape
    if isinstance(size, (int, np.integer)):
        size = (int(size),)
    try:
        size = tuple(int(d) for d in size)
    except TypeError as e:
        raise ValueError(f"size must be None, an int or a sequence of ints, got {size!r}") from e
    if any(d < 0 for d in size):
        raise ValueError(f"size must have non-negative dimensions, got {size}")
    try:
        out = np.broadcast_shapes(scale.shape, size)
    except ValueError as e:
        raise ValueError(f"{name} of shape {scale.shape} does not broadcast to size {size}") from e
    if out != size:
        raise ValueError(f"{name} of shape {scale.shape} does not broadcast to size {size}")
    return size


# ----------------------------------------------------------------------------- TensorFlow


def tf_laplace(shape: _Shape, scale: Any, *, seed: Any = None,
               generator: Optional[tf.random.Generator] = None,
               dtype: tf.DType = tf.float32, draw_dtype: tf.DType = tf.float64) -> tf.Tensor:
    """Draws Laplace(0, scale) noise in TensorFlow; usable inside `tf.function`.

    The uniform draws are made in `draw_dtype` (float64 by default) and transformed by the
    inverse CDF (x = -b sign(u) log(1 - 2|u|), u ~ U(-1/2, 1/2)) before the cast to
    `dtype`; in float64 the tails extend to about 36 b rather than the ~16 b a float32
    uniform allows. float32 draws are about 2.5x faster on CPU.

    Args:
        shape: output shape.
        scale: Laplace scale b >= 0; scalar or a tensor broadcasting to `shape` (e.g.
            per-feature scales of shape [features]).
        seed: a stateless seed, int32/int64 tensor of shape [2]. Same seed, same noise.
        generator: a `tf.random.Generator`; each call advances its state.
        dtype: floating dtype of the result.
        draw_dtype: tf.float64 (default) or tf.float32, the precision of the draws.

    Returns:
        Tensor of shape `shape` and type `dtype`.

    Raises:
        ValueError: if not exactly one of seed/generator is given, the seed is not an
            int tensor of shape [2], dtype is not floating, or scale is negative,
            non-finite or does not broadcast to shape (checked when known statically;
            otherwise a runtime assertion).
    """
    shape_t, scale_t, dtype = _prepare(shape, scale, seed, generator, dtype, "scale")
    draw = _draw_dtype(draw_dtype)
    u = _uniform(shape_t, seed, generator, -0.5, 0.5, draw)
    # Largest value below 1 in the draw precision keeps log1p finite at |u| = 1/2.
    mag = tf.minimum(2.0 * tf.abs(u), float(np.nextafter(1.0, 0.0, dtype=draw.as_numpy_dtype)))
    x = -tf.sign(u) * tf.math.log1p(-mag) * tf.cast(scale_t, draw)
    return tf.cast(x, dtype)


def tf_gaussian(shape: _Shape, stddev: Any, *, seed: Any = None,
                generator: Optional[tf.random.Generator] = None,
                dtype: tf.DType = tf.float32, draw_dtype: tf.DType = tf.float64) -> tf.Tensor:
    """Draws N(0, stddev^2) noise in TensorFlow; usable inside `tf.function`.

    Normals are drawn in `draw_dtype` (float64 by default; float32 is faster but its
    Box-Muller tails stop near 5.8 sd) and cast to `dtype`.

    Args:
        shape: output shape.
        stddev: standard deviation >= 0; scalar or tensor broadcasting to `shape`.
        seed: a stateless seed, int32/int64 tensor of shape [2].
        generator: a `tf.random.Generator`.
        dtype: floating dtype of the result.
        draw_dtype: tf.float64 (default) or tf.float32, the precision of the draws.

    Returns:
        Tensor of shape `shape` and type `dtype`.

    Raises:
        ValueError: as for `tf_laplace`, naming `stddev`.
    """
    shape_t, std_t, dtype = _prepare(shape, stddev, seed, generator, dtype, "stddev")
    draw = _draw_dtype(draw_dtype)
    if generator is not None:
        z = generator.normal(shape_t, dtype=draw)
    else:
        z = tf.random.stateless_normal(shape_t, seed=seed, dtype=draw)
    return tf.cast(z * tf.cast(std_t, draw), dtype)


def _draw_dtype(draw_dtype: Any) -> tf.DType:
    try:
        draw = tf.as_dtype(draw_dtype)
    except TypeError as e:
        raise ValueError(f"draw_dtype must be tf.float64 or tf.float32, got {draw_dtype!r}") from e
    if draw not in (tf.float64, tf.float32):
        raise ValueError(f"draw_dtype must be tf.float64 or tf.float32, got {draw_dtype!r}")
    return draw


def _uniform(shape: tf.Tensor, seed: Any, generator: Optional[tf.random.Generator],
             lo: float, hi: float, dtype: tf.DType) -> tf.Tensor:
    if generator is not None:
        return generator.uniform(shape, minval=lo, maxval=hi, dtype=dtype)
    return tf.random.stateless_uniform(shape, seed=seed, minval=lo, maxval=hi, dtype=dtype)


def _prepare(shape: _Shape, scale: Any, seed: Any, generator: Any, dtype: Any, scale_name: str):
    """Validates the common arguments; returns (shape tensor, float64 scale, dtype)."""
    if (seed is None) == (generator is None):
        raise ValueError("exactly one of seed (stateless, shape [2]) or generator must be given")
    if generator is not None and not isinstance(generator, tf.random.Generator):
        raise ValueError(f"generator must be a tf.random.Generator, got {type(generator).__name__}")
    if seed is not None:
        seed_t = tf.convert_to_tensor(seed)
        if not seed_t.dtype.is_integer:
            raise ValueError(
                f"seed must be an integer tensor of shape [2], got dtype {seed_t.dtype}")
        if seed_t.shape.rank is not None and seed_t.shape.as_list() != [2]:
            raise ValueError(f"seed must have shape [2], got {seed_t.shape}")
    try:
        dtype = tf.as_dtype(dtype)
    except TypeError as e:
        raise ValueError(f"dtype must be a floating dtype, got {dtype!r}") from e
    if not dtype.is_floating:
        raise ValueError(f"dtype must be a floating dtype, got {dtype!r}")

    static_shape = _static_shape(shape)
    shape_t = tf.convert_to_tensor(shape, dtype=tf.int32) if static_shape is None else \
        tf.constant(static_shape, dtype=tf.int32, shape=[len(static_shape)])

    if isinstance(scale, tf.Variable):
        static_scale = None  # may change between calls: checked at run time
    elif tf.is_tensor(scale):
        static_scale = tf.get_static_value(scale)
    else:
        static_scale = scale
    if static_scale is not None:
        arr = _validate.check_scale_array(static_scale, scale_name)
        if static_shape is not None:
            try:
                out = np.broadcast_shapes(arr.shape, tuple(static_shape))
            except ValueError as e:
                raise ValueError(f"{scale_name} of shape {arr.shape} does not broadcast to "
                                 f"shape {tuple(static_shape)}") from e
            if out != tuple(static_shape):
                raise ValueError(f"{scale_name} of shape {arr.shape} does not broadcast to "
                                 f"shape {tuple(static_shape)}")
        scale_t = tf.constant(arr, dtype=tf.float64)
        if static_shape is None:
            scale_t = tf.broadcast_to(scale_t, shape_t)
    else:
        scale_t = tf.cast(scale, tf.float64)
        with tf.control_dependencies([
                tf.debugging.assert_non_negative(scale_t, message=f"{scale_name} must be >= 0"),
                tf.debugging.assert_all_finite(scale_t, message=f"{scale_name} must be finite")]):
            scale_t = tf.broadcast_to(scale_t, shape_t)
    return shape_t, scale_t, dtype


def _static_shape(shape: _Shape) -> Optional[list]:
    """The shape as a list of non-negative ints, or None when only known at run time."""
    if isinstance(shape, tf.TensorShape):
        if not shape.is_fully_defined():
            raise ValueError(f"shape must be fully defined, got {shape}")
        dims = shape.as_list()
    elif tf.is_tensor(shape):
        value = tf.get_static_value(shape)
        if value is None:
            return None
        dims = np.asarray(value).reshape(-1).tolist()
    else:
        if isinstance(shape, (int, np.integer)):
            shape = [int(shape)]
        dims = []
        try:
            for d in shape:
                if tf.is_tensor(d):
                    d = tf.get_static_value(d)
                    if d is None:
                        return None
                dims.append(int(d))
        except TypeError as e:
            raise ValueError(f"shape must be a sequence of ints, got {shape!r}") from e
    if any(d < 0 for d in dims):
        raise ValueError(f"shape must have non-negative dimensions, got {dims}")
    return [int(d) for d in dims]


def replica_seed(seed: Any) -> tf.Tensor:
    """A per-replica stateless seed: `seed` folded with the replica id (0 outside replicas).

    Use inside `strategy.run` so replicas draw independent noise from one base seed.

    Args:
        seed: int tensor of shape [2].

    Returns:
        int64 tensor of shape [2].

    Raises:
        ValueError: if seed is not an integer tensor of shape [2].
    """
    seed_t = tf.convert_to_tensor(seed)
    if not seed_t.dtype.is_integer or (seed_t.shape.rank is not None
                                       and seed_t.shape.as_list() != [2]):
        raise ValueError(f"seed must be an integer tensor of shape [2], got {seed_t}")
    ctx = tf.distribute.get_replica_context()
    replica = 0 if ctx is None else ctx.replica_id_in_sync_group
    return fold_in_replica(tf.cast(seed_t, tf.int64), replica)


def fold_in_replica(seed: Any, replica_id: Any) -> tf.Tensor:
    """`seed` (int64 [2]) with a replica id folded in: independent noise per replica.

    The one fold-in of tfdp: `replica_seed` (replica from the strategy's context) and
    `tfdp.train.base.StepContext.replica_seed` (replica from the step's context) use it.
    """
    return tf.random.experimental.stateless_fold_in(tf.convert_to_tensor(seed),
                                                    tf.cast(replica_id, tf.int64))
