"""HGM noise redistribution r from a pre-trained model, and the noised layer's sensitivity.

HGM Eq. 7: s_k = (1/n) sum_x |d loss(theta0; x, y) / d h1_k(x)|^beta and
r = s / sum(s), computed once from a noise-free pre-trained model theta0 of the same
architecture, then mixed with the uniform vector and floored (`tfdp.mechanisms.
redistribution_from_scores`). HGM Eq. 6: the l_inf -> r-weighted l2 sensitivity
Delta_f of the first (noised) convolution, in TensorFlow so that the model can keep its
effective kernel inside the bound at every step.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf

from tfdp import mechanisms
import keras

# Sensitivity modes (HGM Eq. 6; docs/hgm.md). layer_max and layer_sum are sound for l_inf
# attacks; l2_fourier and l2_patch are sound for l2 attacks (their certificates are l2).
SENSITIVITY_MODES = ("layer_max", "layer_sum", "per_map", "code_spectral", "l2_fourier",
                     "l2_patch")
SOUND_SENSITIVITY_MODES = ("layer_max", "layer_sum", "l2_fourier", "l2_patch")
L2_SENSITIVITY_MODES = ("l2_fourier", "l2_patch")
# Relative margin added to the float32 FFT bound so that rounding cannot understate it.
_FFT_MARGIN = 1e-4


def sensitivity_norm(mode: str) -> str:
    """The attack norm a sensitivity mode bounds: "l2" or "linf"."""
    return "l2" if mode in L2_SENSITIVITY_MODES else "linf"


def conv_operator_norm_fourier(kernel: tf.Tensor, out_hw: Any, strides: int = 1
                               ) -> tf.Tensor:
    """Upper bound of a zero-padded 2-D convolution's l2 operator norm, from its FFT.

    Sedghi, Gupta, Long (ICLR 2019), Theorem 6: the singular values of a multi-channel
    circular convolution on an N x N grid are those of the C_in x C_out matrices
    P(u, v) = sum_(a,b) K[a, b] exp(-2 pi i (u a + v b) / N), one per frequency (u, v).
    A zero-padded convolution of an n x n input (any padding, any stride s) is a submatrix
    of the circular one on a grid with N >= n + k - 1 (the rows kept by the stride and the
    output window, the columns of the input's support), and a submatrix's norm is at most
    the whole's. Here N = s * H_out + k >= n + k - 1.

    Args:
        kernel: [k_h, k_w, C_in, C_out].
        out_hw: (H_out, W_out) of the layer.
        strides: the stride s.

    Returns:
        scalar tensor (kernel's dtype), an upper bound of ||W||_(2->2).
    """
    kernel = tf.convert_to_tensor(kernel)
    kh, kw, cin, _ = (int(d) for d in kernel.shape)
    n_h = int(strides) * int(out_hw[0]) + kh
    n_w = int(strides) * int(out_hw[1]) + kw
    kt = tf.transpose(tf.cast(kernel, tf.float32), [2, 3, 0, 1])  # [C_in, C_out, k_h, k_w]
    padded = tf.pad(kt, [[0, 0], [0, 0], [0, n_h - kh], [0, n_w - kw]])
    freq = tf.transpose(tf.signal.fft2d(tf.cast(padded, tf.complex64)), [2, 3, 0, 1])
    if cin == 1:  # sigma_max of a 1 x C_out matrix is its l2 norm
        top = tf.sqrt(tf.reduce_max(tf.reduce_sum(tf.abs(freq) ** 2, axis=[-2, -1])))
    else:
        gram = tf.matmul(freq, freq, adjoint_b=True)  # [N, N, C_in, C_in], P P^H
        top = tf.sqrt(tf.reduce_max(tf.math.real(tf.linalg.eigvalsh(gram))))
    return tf.cast(top * (1.0 + _FFT_MARGIN), kernel.dtype)


def conv_operator_norm_patch(kernel: tf.Tensor, strides: int = 1) -> tf.Tensor:
    """ceil(k_h/s) ceil(k_w/s) bound: ||W||_(2->2) <= sqrt(ceil(k_h/s) ceil(k_w/s)) sigma_max.

    Every input pixel lies in at most ceil(k_h/s) ceil(k_w/s) patches, so
    ||W x||^2 = sum_p ||K^T x_p||^2 <= sigma_max(K)^2 sum_p ||x_p||^2
    <= sigma_max(K)^2 ceil(k_h/s) ceil(k_w/s) ||x||^2, with K the kernel reshaped to
    [k_h k_w C_in, C_out] (for square kernels: ceil(k/s) sigma_max(K)).
    """
    kernel = tf.convert_to_tensor(kernel)
    kh, kw = int(kernel.shape[0]), int(kernel.shape[1])
    s = int(strides)
    mult = float(np.sqrt((-(-kh // s)) * (-(-kw // s))))
    mat = tf.reshape(kernel, [-1, tf.shape(kernel)[-1]])
    return mult * tf.linalg.svd(mat, compute_uv=False)[0]
R_SOURCES = ("nonprivate_pretrain", "uniform")


def check_sensitivity_mode(mode: Any, name: str = "sensitivity_mode") -> str:
    """Returns `mode` if it is one of SENSITIVITY_MODES.

    Raises:
        ValueError: naming `name` otherwise.
    """
    if mode not in SENSITIVITY_MODES:
        raise ValueError(f"{name}: unknown sensitivity mode {mode!r}; choose one of "
                         f"{SENSITIVITY_MODES}")
    return mode


def kernel_unit_l1_norms(kernel: tf.Tensor) -> tf.Tensor:
    """||W_c||_1 of every output channel c of a conv (or dense) kernel.

    For a convolution every unit (position p, channel c) is fed by the whole kernel W_c, so
    ||w_(p,c)||_1 = ||W_c||_1 (HGM Eq. 6); zero padding can only lower the change.

    Args:
        kernel: [k_h, k_w, C_in, C_out] (conv) or [d, units] (dense).

    Returns:
        [C_out] tensor.
    """
    kernel = tf.convert_to_tensor(kernel)
    return tf.reduce_sum(tf.abs(tf.reshape(kernel, [-1, tf.shape(kernel)[-1]])), axis=0)


def layer_sensitivity(kernel: tf.Tensor, r: Any, mode: str = "layer_max",
                      strides: int = 1) -> tf.Tensor:
    """Delta_f of the noised layer per unit of input change, r-weighted (HGM Eq. 6).

    r has the layer's output feature shape [..., C] (e.g. [H, W, C]); K = r.size.

    - "layer_max" (a, paper form with the square root of K r restored, sound):
      max_(p,c) ||W_c||_1 / sqrt(r_(p,c)).
    - "layer_sum" (b, tighter, sound): sqrt(sum_(p,c) ||W_c||_1^2 / (K r_(p,c))).
    - "per_map" (c, as published for conv layers; NOT sound for l_inf attacks, since all
      maps move together): max_c sqrt(sum_p ||W_c||_1^2 / (K r_(p,c))).
    - "code_spectral" (the authors' code release; NOT sound): the largest singular value
      of the kernel reshaped to [k_h k_w C_in, C_out], divided by the square root of the
      largest singular value of the map K r reshaped to [positions, C].
    - "l2_fourier" (sound for l2 attacks): ||W||_(2->2) bounded from the kernel's FFT
      (`conv_operator_norm_fourier`, Sedghi et al. 2019) over sqrt(min_k K r_k), since
      sum_k dh_k^2 / (K r_k) <= ||dh||_2^2 / min_k K r_k.
    - "l2_patch" (sound for l2 attacks): the same with ceil(k/s) sigma_max(reshaped kernel)
      (`conv_operator_norm_patch`).

    Args:
        kernel: [k_h, k_w, C_in, C_out] conv kernel (or [d, C] dense kernel).
        r: redistribution vector of the output feature shape, entries > 0 summing to 1.
        mode: one of SENSITIVITY_MODES.
        strides: the convolution's stride (the l2 modes only).

    Returns:
        scalar tensor (kernel's dtype), differentiable in the kernel.

    Raises:
        ValueError: on an unknown mode or an invalid r.
    """
    check_sensitivity_mode(mode, "mode")
    r_arr = mechanisms.check_redistribution(r, "r")
    if r_arr.ndim < 1:
        raise ValueError("r: needs a channel (last) axis")
    kernel = tf.convert_to_tensor(kernel)
    dtype = kernel.dtype
    k = r_arr.size
    channels = r_arr.shape[-1]
    r2 = r_arr.reshape(-1, channels)  # [positions, C]
    l1 = kernel_unit_l1_norms(kernel)  # [C]
    if mode == "layer_max":
        # max over positions of 1/sqrt(r) is 1/sqrt(min_p r_(p,c)).  HGM Eq. 6 (sqrt restored)
        inv = tf.constant(1.0 / np.sqrt(r2.min(axis=0)), dtype)
        return tf.reduce_max(l1 * inv)
    if mode == "layer_sum":
        w = tf.constant(np.sum(1.0 / (k * r2), axis=0), dtype)  # sum_p 1/(K r_(p,c))
        return tf.sqrt(tf.reduce_sum(tf.square(l1) * w))  # tighter sound bound
    if mode == "per_map":
        w = tf.constant(np.sum(1.0 / (k * r2), axis=0), dtype)
        return tf.reduce_max(tf.sqrt(tf.square(l1) * w))  # per feature map, as published
    if mode in L2_SENSITIVITY_MODES:
        if len(kernel.shape) != 4 or r_arr.ndim != 3:
            raise ValueError("mode: the l2 modes need a conv kernel [k_h, k_w, C_in, C_out] and "
                             "r of shape [H, W, C]")
        if mode == "l2_fourier":
            op = conv_operator_norm_fourier(kernel, r_arr.shape[:2], strides)
        else:
            op = conv_operator_norm_patch(kernel, strides)
        return op / tf.constant(np.sqrt(k * r_arr.min()), dtype)
    # code_spectral: HGM code release (docs/hgm.md, "Findings"), recorded as not sound.
    mat = tf.reshape(kernel, [-1, tf.shape(kernel)[-1]])
    top = tf.linalg.svd(mat, compute_uv=False)[0]
    r_top = float(np.linalg.svd(k * r2, compute_uv=False)[0])
    return top / tf.constant(np.sqrt(r_top), dtype)


def layer_sensitivity_numpy(kernel: Any, r: Any, mode: str = "layer_max") -> float:
    """Float64 reference of `layer_sensitivity` through `tfdp.mechanisms.layer_sensitivity`.

    Only the three l1-based modes ("layer_max", "layer_sum", "per_map").

    Raises:
        ValueError: on another mode or invalid inputs.
    """
    bound = {"layer_max": "max", "layer_sum": "sum", "per_map": "per_map"}.get(mode)
    if bound is None:
        raise ValueError(f"mode: expected layer_max, layer_sum or per_map, got {mode!r}")
    r_arr = mechanisms.check_redistribution(r, "r")
    w = np.asarray(kernel, np.float64)
    l1 = np.abs(w.reshape(-1, w.shape[-1])).sum(axis=0)
    units = np.broadcast_to(l1, r_arr.shape)
    return mechanisms.layer_sensitivity(unit_l1_norms=units, r=r_arr, bound=bound)


def gradient_scores(h1_fn: Callable[[tf.Tensor], tf.Tensor],
                    head_fn: Callable[[tf.Tensor], tf.Tensor], x: np.ndarray, y: np.ndarray,
                    beta: float = 1.0, batch_size: int = 250) -> np.ndarray:
    """s_k = mean over examples of |d loss_i / d h1_k(x_i)|^beta (HGM Eq. 7).

    Absolute value first, then the mean (HGM Eq. 7). The loss of example i depends on
    h1 of example i only, so the gradient of the summed loss with respect to the batch's h1
    holds every example's own gradient.

    Args:
        h1_fn: inputs [b, ...] -> first-layer pre-activations [b, *feature_shape].
        head_fn: pre-activations -> logits [b, num_classes].
        x: inputs.
        y: integer labels.
        beta: inflation rate >= 0 (beta = 0 gives uniform scores).
        batch_size: examples per gradient batch.

    Returns:
        float64 array of the feature shape, entries >= 0.

    Raises:
        ValueError: on negative beta or empty data.
    """
    if not (np.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta: expected a finite number >= 0, got {beta!r}")
    if len(x) == 0 or len(x) != len(y):
        raise ValueError("x, y: need the same non-zero number of examples")

    @tf.function(reduce_retracing=True)
    def batch_scores(xb, yb):
        h1 = h1_fn(xb)
        with tf.GradientTape() as tape:
            tape.watch(h1)
            logits = head_fn(h1)
            loss = tf.reduce_sum(tf.keras.losses.sparse_categorical_crossentropy(
                yb, logits, from_logits=True))
        g = tf.cast(tf.abs(tape.gradient(loss, h1)), tf.float64)
        # |g|^0 = 1 also for g = 0, so beta = 0 gives exactly uniform scores.
        return tf.reduce_sum(tf.pow(g, tf.constant(float(beta), tf.float64)), axis=0)

    total = None
    for start in range(0, len(x), batch_size):
        part = batch_scores(tf.constant(x[start:start + batch_size]),
                            tf.constant(np.asarray(y[start:start + batch_size], np.int64)))
        total = part if total is None else total + part
    return total.numpy() / len(x)


@dataclasses.dataclass
class RedistributionResult:
    """r and how it was obtained.

    Attributes:
        r: float64 array of the noised layer's feature shape, > 0, summing to 1.
        source: one of R_SOURCES.
        stats: numbers to record with the run (pre-training accuracy, min/max of r, ...).
        kernel: the pre-trained first layer's kernel (private: never recorded in a public
            file), for the code release's sensitivity (`tfdp.papers.hgm.release`).
    """

    r: np.ndarray
    source: str
    stats: dict
    kernel: Optional[np.ndarray] = None


def _pretrain(model: Any, x: np.ndarray, y: np.ndarray, *, epochs: int, batch_size: int,
              learning_rate: float, rng: np.random.Generator,
              pretrain_fn: Optional[Callable[[Any, np.random.Generator], None]]) -> float:
    """Trains `model` in place (noise free: Adam epochs, or `pretrain_fn`).

    Returns:
      Its accuracy on the first 2,000 training examples.
    """
    opt = keras.optimizers.Adam(learning_rate)
    variables = model.trainable_variables

    @tf.function(reduce_retracing=True)
    def step(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb, training=False)
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                yb, logits, from_logits=True))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    n = len(x)
    if pretrain_fn is not None:
        pretrain_fn(model, rng)
    else:
        for _ in range(int(epochs)):
            order = rng.permutation(n)
            for start in range(0, n - batch_size + 1, batch_size):
                idx = order[start:start + batch_size]
                step(tf.constant(x[idx]), tf.constant(np.asarray(y[idx], np.int64)))
    pred = np.argmax(model.predict(x[:2000], verbose=0), axis=-1)
    return float(np.mean(pred == np.asarray(y[:2000])))


def _split_at_noise(model: Any, h1_layer: str, noise_layer: str
                    ) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """(inputs -> h1, the noised layer's output; h -> logits after the noise layer)."""
    names = [layer.name for layer in model.layers]
    split = names.index(noise_layer)
    h1_index = names.index(h1_layer)
    pre = [layer for layer in model.layers[:h1_index + 1]
           if not isinstance(layer, keras.layers.InputLayer)]
    post = model.layers[split + 1:]

    def h1_fn(xb):
        h = xb
        for layer in pre:
            h = layer(h)
        return h

    def head_fn(h):
        for layer in post:
            h = layer(h)
        return h

    return h1_fn, head_fn


def pretrain_redistribution(build_fn: Callable[[], Any], h1_layer: str, noise_layer: str,
                            x: np.ndarray, y: np.ndarray, *, epochs: int = 1,
                            batch_size: int = 128, learning_rate: float = 1e-3,
                            beta: float = 1.0, mix: float = 0.0, floor: float = 0.01,
                            num_score_examples: int = 5000,
                            rng: Optional[np.random.Generator] = None,
                            pretrain_fn: Optional[Callable[[Any, np.random.Generator], None]]
                            = None,
                            score_fn: Optional[Callable[[Any, np.ndarray, np.ndarray],
                                                        np.ndarray]] = None,
                            allow_zero: bool = False) -> RedistributionResult:
    """Pre-trains a noise-free model, then computes r from its loss gradients (HGM Eq. 7).

    The pre-trained model is thrown away afterwards: Secure-SGD re-initialises and trains
    from scratch (the authors' code). r is NOT differentially private (docs/hgm.md, "Methods").

    Args:
        build_fn: builds a fresh Keras model (inputs -> logits) whose noise layer adds no
            noise (sigma 0).
        h1_layer: name of the first (noised) layer.
        noise_layer: name of the noise layer that follows it.
        x, y: training data.
        epochs: pre-training epochs (Adam).
        batch_size: pre-training batch size.
        learning_rate: Adam learning rate.
        beta: inflation rate of Eq. 7.
        mix: weight lam of the uniform vector (tfdp's option; 0 = the paper).
        floor: relative floor (r_k >= floor / K before renormalisation).
        num_score_examples: random examples used for s (all if fewer).
        rng: numpy generator for shuffling and the score subset.
        pretrain_fn: `f(model, rng)` training the model in place instead of the Adam epochs
            (e.g. the code release's batch-mean step, `tfdp.papers.hgm.release`).
        score_fn: `f(model, x, y) -> scores` instead of Eq. 7's mean |gradient|^beta (e.g.
            `release.abs_mean_sign_scores`).
        allow_zero: with floor 0 and mix 0, keep zero entries of r (only for a noise that
            does not divide by r; r then sums to 1 with entries >= 0).

    Returns:
        A RedistributionResult.

    Raises:
        ValueError: on bad arguments.
    """
    if int(epochs) < 1:
        raise ValueError(f"epochs: expected >= 1, got {epochs!r}")
    rng = rng if rng is not None else np.random.default_rng()
    model = build_fn()
    train_acc = _pretrain(model, x, y, epochs=epochs, batch_size=batch_size,
                          learning_rate=learning_rate, rng=rng, pretrain_fn=pretrain_fn)
    h1_fn, head_fn = _split_at_noise(model, h1_layer, noise_layer)
    n = len(x)
    subset = np.sort(rng.permutation(n)[:min(int(num_score_examples), n)])
    if score_fn is None:
        scores = gradient_scores(h1_fn, head_fn, x[subset], y[subset], beta=beta)
    else:
        scores = np.asarray(score_fn(model, x[subset], y[subset]), np.float64)
    if allow_zero and floor == 0.0 and mix == 0.0:
        if not (np.all(np.isfinite(scores)) and np.all(scores >= 0) and scores.sum() > 0):
            raise ValueError("scores: expected finite entries >= 0, not all zero")
        r = scores / scores.sum()  # zero entries kept (allow_zero)
    else:
        r = mechanisms.redistribution_from_scores(scores, floor=floor, mix=mix)
    k = r.size
    stats = {"pretrain_epochs": int(epochs), "pretrain_train_accuracy": train_acc,
             "score_examples": int(len(subset)), "beta": float(beta), "mix": float(mix),
             "floor": float(floor), "r_min_times_K": float(r.min() * k),
             "r_max_times_K": float(r.max() * k)}
    kernel = np.asarray(model.get_layer(h1_layer).kernel.numpy(), np.float64)
    return RedistributionResult(r=r, source="nonprivate_pretrain", stats=stats, kernel=kernel)


def sensitivity_ratio_to_uniform(kernel: Any, r: Any, mode: str) -> float:
    """Delta_f(W, r) / Delta_f(W, uniform) for a kernel (logged)."""
    r_arr = mechanisms.check_redistribution(r, "r")
    uniform = mechanisms.uniform_redistribution(r_arr.shape)
    num = float(layer_sensitivity(tf.constant(kernel, tf.float64), r_arr, mode))
    den = float(layer_sensitivity(tf.constant(kernel, tf.float64), uniform, mode))
    return num / den
