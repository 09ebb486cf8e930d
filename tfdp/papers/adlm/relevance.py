"""Layer-wise relevance propagation and its differentially private average (AdLM, ILM)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import tensorflow as tf
import keras

from tfdp import mechanisms
from tfdp.papers.adlm import budgets

# Layers that LRP treats as linear maps (epsilon rule) or passes relevance through.
_LINEAR = (keras.layers.Dense, keras.layers.Conv2D, keras.layers.AveragePooling2D,
           keras.layers.GlobalAveragePooling2D)
_WINNER_TAKE_ALL = (keras.layers.MaxPooling2D, keras.layers.GlobalMaxPooling2D)
_RESHAPE = (keras.layers.Flatten, keras.layers.Reshape)

LRP_STARTS = ("true_class", "predicted")
GRANULARITIES = ("feature", "pixel")
TRANSFORMS = ("paper", "ref_code_mnist", "ref_code_cifar")


# ----------------------------------------------------------------------------- LRP


def _sign0(z: tf.Tensor) -> tf.Tensor:
    """sign(z) with sign0(0) = +1 (AdLM Eq. 5: z >= 0 uses +mu)."""
    return tf.where(z >= 0, tf.ones_like(z), -tf.ones_like(z))


def _preactivation(layer: keras.layers.Layer, a: tf.Tensor) -> tf.Tensor:
    """The linear part z = f(a) of a Dense/Conv2D/average-pooling layer (no activation)."""
    if isinstance(layer, keras.layers.Dense):
        z = tf.tensordot(a, tf.convert_to_tensor(layer.kernel), axes=[[a.shape.rank - 1], [0]])
        if layer.use_bias:
            z = z + tf.convert_to_tensor(layer.bias)
        return z
    if isinstance(layer, keras.layers.Conv2D):
        if layer.data_format != "channels_last" or layer.groups != 1:
            raise ValueError(f"layer: LRP supports channels_last, groups=1 Conv2D, got {layer.name}")
        z = tf.nn.convolution(a, tf.convert_to_tensor(layer.kernel), strides=layer.strides,
                              padding=layer.padding.upper(), dilations=layer.dilation_rate)
        if layer.use_bias:
            z = z + tf.convert_to_tensor(layer.bias)
        return z
    # Average pooling is linear in its input with no bias.
    return layer(a)


def _lrp_linear(layer: keras.layers.Layer, a: tf.Tensor, r_out: tf.Tensor, mu: float
                ) -> tf.Tensor:
    """LRP-epsilon through a linear layer.

    AdLM Eq. 4-5: R_{p<-m} = z_pm / (z_m + mu*sign0(z_m)) * R_m, R_p = sum_m R_{p<-m}.
    With s = R_out / (z + mu*sign0(z)) and c = J^T s (the gradient of sum(z * stop(s))
    with respect to the input), R_in = a * c, since z_pm = a_p * w_pm.
    """
    with tf.GradientTape() as tape:
        tape.watch(a)
        z = _preactivation(layer, a)
        s = tf.stop_gradient(r_out / (z + mu * _sign0(z)))
        total = tf.reduce_sum(z * s)
    c = tape.gradient(total, a)
    return a * c


def _lrp_max(layer: keras.layers.Layer, a: tf.Tensor, r_out: tf.Tensor) -> tf.Tensor:
    """Winner-take-all through max pooling: relevance goes to the arg-max input (not in AdLM)."""
    with tf.GradientTape() as tape:
        tape.watch(a)
        total = tf.reduce_sum(layer(a) * tf.stop_gradient(r_out))
    return tape.gradient(total, a)


def _chain(model: keras.Model) -> list[keras.layers.Layer]:
    """The model's layers in order, without the input layer; each layer must have one input."""
    out = []
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        out.append(layer)
    return out


def lrp(model: keras.Model, x: Any, y: Any = None, *, mu: float = 0.01,
        start: str = "true_class", batch_size: int = 1000) -> np.ndarray:
    """Input relevances of a sequential (chain) model by LRP with the epsilon rule.

    The propagation starts from the score of one class (AdLM Eq. 8: F_x = z_o, the other
    outputs set to 0) and runs the epsilon rule (AdLM Eq. 4-5) through Dense and Conv2D
    layers (including their biases) and average pooling. Max pooling sends relevance to the
    winning input; activations, normalisation, dropout, clipping and noise layers pass it
    through unchanged; Flatten/Reshape reshape it (the paper covers neither; tfdp's choice).

    Args:
        model: a keras model whose layers form a chain (each layer feeds the next) and whose
            last layer outputs the class scores (logits).
        x: inputs, shape [n, ...].
        y: integer labels [n]; required for start="true_class".
        mu: the epsilon-rule stabiliser, >= 0 (not given in AdLM; tfdp uses 0.01).
        start: "true_class" (score of the label) or "predicted" (score of the arg-max class).
        batch_size: records per propagation batch.

    Returns:
        float64 array shaped like x: relevance of every input feature of every record.

    Raises:
        ValueError: on a bad mu, start, batch_size, missing y or an unsupported layer.
    """
    if not (isinstance(mu, (int, float)) and math.isfinite(mu) and mu >= 0):
        raise ValueError(f"mu must be a finite number >= 0, got {mu!r}")
    if start not in LRP_STARTS:
        raise ValueError(f"start must be one of {LRP_STARTS}, got {start!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    x = np.asarray(x, dtype=np.float32)
    if start == "true_class":
        if y is None:
            raise ValueError("y: labels are required when start='true_class'")
        y = np.asarray(y).astype(np.int64).reshape(-1)
        if y.shape[0] != x.shape[0]:
            raise ValueError(f"y has {y.shape[0]} labels for {x.shape[0]} records")
    layers = _chain(model)
    for layer in layers:
        if len(getattr(layer, "_inbound_nodes", [None])) > 1:
            raise ValueError(f"model: layer {layer.name} is used more than once")
    propagate = tf.function(lambda xb, yb: _propagate(layers, xb, yb, mu, start),
                            reduce_retracing=True)
    out = np.empty(x.shape, dtype=np.float64)
    for lo in range(0, x.shape[0], batch_size):
        hi = min(lo + batch_size, x.shape[0])
        yb = y[lo:hi] if start == "true_class" else np.zeros(hi - lo, np.int64)
        out[lo:hi] = propagate(tf.constant(x[lo:hi]), tf.constant(yb)).numpy()
    return out


def _propagate(layers: Sequence[keras.layers.Layer], x: tf.Tensor, y: tf.Tensor, mu: float,
               start: str) -> tf.Tensor:
    """Forward pass recording every layer input, then relevance from the top down."""
    acts = [x]
    a = x
    for layer in layers:
        a = layer(a, training=False)
        acts.append(a)
    logits = acts[-1]
    num_classes = logits.shape[-1]
    cls = tf.argmax(logits, axis=-1) if start == "predicted" else y
    r = logits * tf.one_hot(cls, num_classes, dtype=logits.dtype)  # AdLM Eq. 8: R = F_x for class o
    for layer, a_in in zip(reversed(layers), reversed(acts[:-1])):
        if isinstance(layer, _LINEAR):
            r = _lrp_linear(layer, a_in, r, mu)
        elif isinstance(layer, _WINNER_TAKE_ALL):
            r = _lrp_max(layer, a_in, r)
        elif isinstance(layer, _RESHAPE):
            r = tf.reshape(r, tf.shape(a_in))
        elif r.shape == a_in.shape:
            # Shape-preserving layers (activations, normalisation, dropout, clipping, noise):
            # relevance passes through unchanged (tfdp's choice).
            pass
        else:
            raise ValueError(f"model: LRP has no rule for layer {layer.name} "
                             f"({type(layer).__name__})")
    return tf.cast(r, tf.float64)


# ----------------------------------------------------------------------------- normalisation


def to_granularity(relevance: Any, granularity: str = "feature") -> np.ndarray:
    """Per-record relevance vectors of d entries.

    Args:
        relevance: [n, H, W, C] (or [n, d]) relevances.
        granularity: "feature" (one entry per H*W*C feature) or "pixel" (mean over the
            channel axis, one entry per H*W pixel; AdLM code release, CIFAR-10).

    Returns:
        float64 array [n, d].

    Raises:
        ValueError: on an unknown granularity.
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    r = np.asarray(relevance, dtype=np.float64)
    if granularity == "pixel" and r.ndim == 4:
        r = r.mean(axis=-1)  # AdLM code release (CIFAR-10): relevance averaged over channels
    return r.reshape(r.shape[0], -1)


def normalize_per_record(relevance: Any) -> np.ndarray:
    """Per-record min-max normalisation into [0, 1] (the AdLM paper's formula).

    R_ij <- (R_ij - chi_i) / (phi_i - chi_i) with chi_i, phi_i the min and max of record i's
    d relevances; a record whose relevances are all equal maps to 0.

    Args:
        relevance: [n, d] relevances.

    Returns:
        float64 array [n, d] with entries in [0, 1].

    Raises:
        ValueError: if relevance is not 2-D or not finite.
    """
    r = np.asarray(relevance, dtype=np.float64)
    if r.ndim != 2:
        raise ValueError(f"relevance must have shape [n, d], got {r.shape}")
    if not np.all(np.isfinite(r)):
        raise ValueError("relevance must be finite")
    lo = r.min(axis=1, keepdims=True)
    span = r.max(axis=1, keepdims=True) - lo
    safe = np.where(span > 0, span, 1.0)
    out = np.where(span > 0, (r - lo) / safe, 0.0)
    return np.clip(out, 0.0, 1.0)


# ----------------------------------------------------------------------------- private average


def relevance_sensitivity(*, d: int, n: int) -> float:
    """Delta_R = 2d/|D| of the average normalised relevance (AdLM Lemma 1): the one formula,
    `budgets.adlm_relevance_sensitivity`, under the names this module uses.

    Raises:
        ValueError: if d or n is not a positive int.
    """
    return budgets.adlm_relevance_sensitivity(num_features=d, num_examples=n)


def transform_average(avg: Any, transform: str = "paper") -> np.ndarray:
    """Optional code-release post-processing of the average relevance, applied before the noise.

    Args:
        avg: [d] average normalised relevance.
        transform: "paper" (none), "ref_code_mnist" (min-max normalise the average, 4th
            power) or "ref_code_cifar" (|average|, min-max normalise, +0.3, clip to [0,1]).
            Both code-release transforms are heuristics; the min-max of the average is not
            covered by Delta_R (see the ledger note).

    Returns:
        float64 [d].

    Raises:
        ValueError: on an unknown transform.
    """
    if transform not in TRANSFORMS:
        raise ValueError(f"transform must be one of {TRANSFORMS}, got {transform!r}")
    a = np.asarray(avg, dtype=np.float64)
    if transform == "paper":
        return a
    if transform == "ref_code_cifar":
        a = np.abs(a)
    span = a.max() - a.min()
    a = (a - a.min()) / span if span > 0 else np.zeros_like(a)
    if transform == "ref_code_mnist":
        return a ** 4  # AdLM code release (MNIST dpLRP): normalised map to the 4th power
    return np.clip(a + 0.3, 0.0, 1.0)  # AdLM code release (CIFAR): +0.3, clipped


def private_average(normalized: Any, *, epsilon: float, rng: np.random.Generator,
                    transform: str = "paper") -> tuple[np.ndarray, dict]:
    """The eps1-DP average relevance Rbar_j = R_j(D) + Lap(Delta_R/eps1) (AdLM Eq. 10-12).

    Args:
        normalized: [n, d] per-record relevances in [0, 1] (normalize_per_record); n must be
            the whole private data set |D| (the average runs over the n in Delta_R).
        epsilon: eps1 > 0.
        rng: numpy Generator for the Laplace draws.
        transform: post-processing of the average before the noise (see transform_average).

    Returns:
        (Rbar [d] float64, info dict with d, n, sensitivity and scale).

    Raises:
        ValueError: if the relevances are outside [0, 1], epsilon <= 0, or bad rng.
    """
    r = np.asarray(normalized, dtype=np.float64)
    if r.ndim != 2 or r.shape[0] < 1:
        raise ValueError(f"normalized must have shape [n, d] with n >= 1, got {r.shape}")
    if np.any(r < 0) or np.any(r > 1) or not np.all(np.isfinite(r)):
        raise ValueError("normalized relevances must lie in [0, 1] (use normalize_per_record)")
    n, d = r.shape
    sens = relevance_sensitivity(d=d, n=n)
    scale = mechanisms.laplace_scale(epsilon=epsilon, sensitivity=sens)  # AdLM Eq. 12
    avg = transform_average(r.mean(axis=0), transform)  # AdLM Eq. 10
    noisy = avg + mechanisms.sample_laplace(scale, size=(d,), rng=rng)
    return noisy, {"d": d, "n": n, "sensitivity": sens, "scale": scale}


def adaptive_budgets(rbar: Any, *, floor: float) -> np.ndarray:
    """Budget ratios beta_j = d * r_j / sum_k r_k with r_j = max(|Rbar_j|, floor) (AdLM Eq. 16)
    of a flattened relevance vector: `budgets.adaptive_budget_weights` (the one formula).

    Args:
        rbar: private average relevance (flattened to [d]).
        floor: r_min > 0.

    Returns:
        float64 [d] ratios with mean 1.

    Raises:
        ValueError: if floor is not finite and > 0 or rbar is empty / not finite.
    """
    return budgets.adaptive_budget_weights(np.reshape(np.asarray(rbar, dtype=np.float64), -1),
                                           floor=floor)


def read_relevance_file(path: str) -> np.ndarray:
    """A relevance map in the AdLM code release's text form (one row per line, values
    separated by white space; its MNIST map is 32 x 32, the image padded by 2 on each side).

    Raises:
        ValueError: naming --adlm_relevance_file, when the file cannot be read or is not a
            non-empty rectangular table of finite numbers.
    """
    try:
        with open(path, encoding="utf-8") as f:
            rows = [line.split() for line in f if line.strip()]
        table = np.asarray([[float(v) for v in row] for row in rows], dtype=np.float64)
    except (OSError, ValueError) as e:
        raise ValueError(f"--adlm_relevance_file: cannot read {path!r} as a table of numbers: "
                         f"{e}") from None
    if table.ndim != 2 or table.size == 0 or not np.all(np.isfinite(table)):
        raise ValueError(f"--adlm_relevance_file: {path!r} is not a non-empty rectangular "
                         "table of finite numbers")
    return table


def file_budgets(table: Any, *, floor: float, image_hw: tuple[int, int]) -> np.ndarray:
    """Budget ratios from a relevance map as the AdLM code release computes them.

    The release (AdLM/MNIST/AdLM.py at 77fb357) floors each relevance at r_min (negative values
    become r_min, not |R|), normalises over the whole padded map, beta = N * r / sum(r) with N
    the map's size, floors beta at r_min again, and gives the pixel (i, j) of the image the
    ratio at (i + p, j + p) of the map, p the padding. So the image's ratios need not sum to
    its size (with the release's 32 x 32 map they sum to more than 784 when the relevance sits
    inside the image).

    Args:
        table: [H + 2p, W + 2p] relevance map.
        floor: r_min > 0.
        image_hw: (H, W) of the images.

    Returns:
        float64 [H * W] ratios, row-major.

    Raises:
        ValueError: naming --adlm_relevance_file when the map is smaller than the image or the
            padding is not the same on both sides.
    """
    r = np.asarray(table, dtype=np.float64)
    h, w = (int(v) for v in image_hw)
    pad_h, pad_w = r.shape[0] - h, r.shape[1] - w
    if pad_h < 0 or pad_w < 0 or pad_h % 2 or pad_w % 2:
        raise ValueError(f"--adlm_relevance_file: a {r.shape[0]} x {r.shape[1]} map does not "
                         f"center a {h} x {w} image (it must be the image padded by the same "
                         "number of pixels on each side)")
    if not (math.isfinite(floor) and floor > 0):
        raise ValueError(f"floor must be a finite number > 0, got {floor!r}")
    r = np.maximum(r, floor)  # the release: R < r_min -> r_min
    beta = np.maximum(r.size * r / r.sum(), floor)
    top, left = pad_h // 2, pad_w // 2
    return beta[top:top + h, left:left + w].reshape(-1)


def uniform_budgets(d: int) -> np.ndarray:
    """ILM: beta_j = 1 for every feature (the AdLM paper's ablation).

    Raises:
        ValueError: if d is not an int >= 1.
    """
    if not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"d must be an int >= 1, got {d!r}")
    return np.ones(int(d), dtype=np.float64)
