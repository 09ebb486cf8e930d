"""The HGM code release's Secure-SGD procedures that tfdp offers as options, off by default.

Read from the authors' MNIST script (haiphanNJIT/SecureSGD at 1115cc1; docs/reproduce.md,
"The authors' releases", lists each departure from the paper and its flag):

- `abs_mean_sign_scores`: the redistribution score of one batch, |mean_i sign(d loss /
  d h_k)| at conv1's post-ReLU output h (the paper's Eq. 7 averages |gradient|^beta at the
  pre-activation);
- `release_map`: the release scales r to sum 256 * 32 = 8,192 (not K) and multiplies its
  HGM draw by that map itself (HGM Theorem 3 spreads the noise by sqrt(K r_k));
- `pretrained_delta`: its sensitivity, the largest singular value of the pre-trained conv1
  kernel over the square root of the map's largest singular value;
- `mixture_stddevs`: its training noise L (E + H) / 2 at conv1's pre-activation, with
  E ~ N(0, mult^2) per unit (the extended Gaussian mechanism at sensitivity 1) and
  H_k ~ N(0, (mult Delta M_k)^2); the sum of independent Gaussians is Gaussian, so one
  heterogeneous draw of these standard deviations has the release's distribution;
- `pretrain_batch_mean`: its pre-training for r, the run's own batch-mean step (per-kernel
  clipping, Gaussian noise on every gradient, the run's optimizer; dropout on) without
  robustness noise.
"""

from __future__ import annotations

from typing import Callable, Sequence

import keras
import numpy as np
import tensorflow as tf

from tfdp.papers.hgm import models as hgm_models

# HGM code release: r is scaled to sum 256 * 32 before it spreads the HGM draw.
RELEASE_MAP_SUM = 256 * 32


def release_map(r: np.ndarray) -> np.ndarray:
    """M = 8,192 r / sum(r), the release's redistribution map (entries >= 0).

    Raises:
      ValueError: if r has a negative or non-finite entry, or sums to 0.
    """
    arr = np.asarray(r, np.float64)
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError("r: entries must be finite and >= 0")
    total = float(arr.sum())
    if total <= 0.0:
        raise ValueError("r: must not be all zero")
    return RELEASE_MAP_SUM * arr / total


def pretrained_delta(kernel: np.ndarray, r: np.ndarray) -> float:
    """The release's Delta: sigma_max(W1 as [k_h k_w C_in, C]) / sqrt(sigma_max(M as [P, C])).

    Args:
      kernel: the pre-trained conv1 kernel [k_h, k_w, C_in, C].
      r: the redistribution over conv1's units [H, W, C] (entries >= 0).

    Returns:
      Delta > 0 (not a sound bound of anything: docs/hgm.md).

    Raises:
      ValueError: on a kernel or r of the wrong rank or channel count.
    """
    w = np.asarray(kernel, np.float64)
    r_arr = np.asarray(r, np.float64)
    if w.ndim != 4 or r_arr.ndim != 3 or w.shape[-1] != r_arr.shape[-1]:
        raise ValueError(f"kernel, r: expected [k, k, C_in, C] and [H, W, C], got "
                         f"{w.shape} and {r_arr.shape}")
    top = np.linalg.svd(w.reshape(-1, w.shape[-1]), compute_uv=False)[0]
    m = release_map(r_arr).reshape(-1, r_arr.shape[-1])
    return float(top / np.sqrt(np.linalg.svd(m, compute_uv=False)[0]))


def mixture_stddevs(multiplier: float, delta: float, r: np.ndarray,
                    construction_bound: float) -> np.ndarray:
    """Per-unit std of L (E + H) / 2: L / 2 sqrt(mult^2 + (mult Delta M_k)^2).

    Args:
      multiplier: mult_HGM(eps_r, delta_r) (the release computes it with delta 1e-5).
      delta: `pretrained_delta`.
      r: the redistribution [H, W, C] (entries >= 0).
      construction_bound: L.

    Returns:
      float64 array of r's shape, every entry > 0.

    Raises:
      ValueError: on a non-positive multiplier, delta or bound.
    """
    for name, value in (("multiplier", multiplier), ("delta", delta),
                        ("construction_bound", construction_bound)):
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    m = release_map(r)
    return 0.5 * construction_bound * np.sqrt(multiplier ** 2 + (multiplier * delta * m) ** 2)


def layer_scale(stddevs: np.ndarray) -> tuple[float, np.ndarray]:
    """(sigma, r') with sigma sqrt(K r'_k) = stddevs_k: the HGM noise layer's arguments.

    Raises:
      ValueError: if a standard deviation is not finite and > 0.
    """
    std = np.asarray(stddevs, np.float64)
    if std.size == 0 or not np.all(np.isfinite(std)) or np.any(std <= 0):
        raise ValueError("stddevs: entries must be finite and > 0")
    var = std ** 2
    return float(np.sqrt(var.sum() / var.size)), var / var.sum()


def clip_kernels(grads: Sequence[tf.Tensor], variables: Sequence[tf.Variable],
                 l2_clip: float) -> list:
    """Each kernel's gradient clipped to l2 norm `l2_clip`; biases left as they are."""
    # HGM code release: the batch-mean gradient is clipped per weight matrix, biases not.
    return [tf.clip_by_norm(g, l2_clip) if len(v.shape) > 1 else g
            for g, v in zip(grads, variables)]


def _split_after(model: keras.Model, layer_name: str) -> tuple[Callable, Callable]:
    """(inputs -> output of `layer_name`, that output -> logits), skipping the noise layer."""
    names = [layer.name for layer in model.layers]
    if layer_name not in names:
        raise ValueError(f"model: has no layer named {layer_name!r}")
    cut = names.index(layer_name) + 1
    pre = [layer for layer in model.layers[:cut]
           if not isinstance(layer, keras.layers.InputLayer)
           and layer.name != hgm_models.NOISE_LAYER]
    post = model.layers[cut:]

    def head(h):
        for layer in post:
            h = layer(h, training=False)
        return h

    def body(x):
        for layer in pre:
            x = layer(x)
        return x

    return body, head


def abs_mean_sign_scores(model: keras.Model, x: np.ndarray, y: np.ndarray,
                         layer_name: str = "relu1", batch_size: int = 250) -> np.ndarray:
    """|mean over examples of sign(d loss_i / d h_k)| at `layer_name`'s output (no noise).

    The release takes the gradient of one batch's mean loss at conv1's post-ReLU output in
    inference mode (dropout off, robustness noise 0); the sign of each example's share is
    the sign of its own gradient.

    Args:
      model: a noise-free `build_model` network.
      x, y: the scored examples and their integer labels.
      layer_name: where the gradient is taken (the ReLU after conv1).
      batch_size: examples per gradient pass (does not change the result).

    Returns:
      float64 array of the layer's feature shape, entries in [0, 1].

    Raises:
      ValueError: on empty or mismatched data.
    """
    if len(x) == 0 or len(x) != len(y):
        raise ValueError("x, y: need the same non-zero number of examples")
    body, head = _split_after(model, layer_name)

    @tf.function(reduce_retracing=True)
    def sign_sum(xb, yb):
        h = body(xb)
        with tf.GradientTape() as tape:
            tape.watch(h)
            loss = tf.reduce_sum(keras.losses.sparse_categorical_crossentropy(
                yb, head(h), from_logits=True))
        return tf.reduce_sum(tf.sign(tf.cast(tape.gradient(loss, h), tf.float64)), axis=0)

    total = None
    for start in range(0, len(x), batch_size):
        part = sign_sum(tf.constant(x[start:start + batch_size]),
                        tf.constant(np.asarray(y[start:start + batch_size], np.int64)))
        total = part if total is None else total + part
    return np.abs(total.numpy() / len(x))


def pretrain_batch_mean(model: keras.Model, x: np.ndarray, y: np.ndarray, *, steps: int,
                        batch_size: int, l2_clip: float, noise_multiplier: float,
                        optimizer: keras.optimizers.Optimizer,
                        rng: np.random.Generator) -> None:
    """Trains `model` in place with the release's batch-mean step, without robustness noise.

    Per step: the mean cross-entropy of a batch (dropout on), each kernel's gradient clipped
    to `l2_clip`, N(0, (noise_multiplier l2_clip / batch_size)^2) added to every gradient,
    then `optimizer`. Batches are consecutive slices of a fresh permutation each epoch (the
    remainder of an epoch is dropped). No privacy is claimed for it (the caller's ledger).

    Raises:
      ValueError: on steps < 1 or a batch larger than the data.
    """
    if int(steps) < 1:
        raise ValueError(f"steps: expected >= 1, got {steps!r}")
    n = len(x)
    if not 1 <= batch_size <= n:
        raise ValueError(f"batch_size: expected 1..{n}, got {batch_size!r}")
    variables = model.trainable_variables
    generator = tf.random.Generator.from_seed(int(rng.integers(0, 2**62)))
    stddev = float(noise_multiplier) * float(l2_clip) / float(batch_size)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            logits = hgm_models.forward_with_noise(model, xb, None, training=True)
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                yb, logits, from_logits=True))
        grads = clip_kernels(tape.gradient(loss, variables), variables, l2_clip)
        grads = [g + generator.normal(tf.shape(g), stddev=stddev, dtype=g.dtype)
                 for g in grads]
        optimizer.apply_gradients(zip(grads, variables))

    per_epoch = n // batch_size
    done = 0
    while done < steps:
        order = rng.permutation(n)
        for b in range(min(per_epoch, steps - done)):
            idx = order[b * batch_size:(b + 1) * batch_size]
            step(tf.constant(x[idx]), tf.constant(np.asarray(y[idx], np.int64)))
        done += min(per_epoch, steps - done)
