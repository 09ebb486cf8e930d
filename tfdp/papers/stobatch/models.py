"""StoBatch networks f(x) = g(a(x, theta1), theta2) (StoBatch paper and code release).

`StoBatchNet` holds the whole classifier:

- `input_noise`: a `layers.LaplaceNoise` in "once" mode whose stored draw is chi1 / m
  (StoBatch Lemma 3; scale Delta_R / eps1, divisor m, fresh inference noise 1/psi);
- the encoder a(., theta1): `encoder_conv` (the first affine layer, with the l1 -> l1 norm
  bound of docs/stobatch.md as a kernel constraint), ReLU, `encoder_bn`, clip to [-1, 1]
  (the code release's recipe), and the tied decoder used by the auto-encoder objective (Eq. 6);
- `latent_noise`: a "once" `LaplaceNoise` whose stored draw is 2 chi2 / m (Lemma 3);
- the classifier body g(., theta2) ending in h_pi (BN, clip to [-1, 1]) and the output
  layer W_pi without bias (the paper has none);
- `chi3`, the output-coefficient noise [|h_pi|, K] (Alg. 1 line 1), a non-trainable weight.

`call(x, training=False)` is the noise-free network (the evaluation attack target, as in the code);
the tfdp evaluator switches the noise layers on for Monte-Carlo certification (Alg. 3).
The trainer uses `forward`, which adds the stored noise explicitly and lets BN run in
either mode independently of the noise (the training attack target is f with chi2 and
BN in inference mode; docs/stobatch.md).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from layers.bounding import Clip
from layers.noise import LaplaceNoise

ARCHITECTURES = ("mnist", "cifar10", "resnet18", "tiny")
BN_EVAL_MODES = ("moving", "batch")
COMPUTE_DTYPES = ("float32", "float64")


@keras.saving.register_keras_serializable(package="tfdp")
class RowL1Bound(keras.constraints.Constraint):
    """Keeps max_j sum_c |W[j, c]| <= bound for a kernel viewed as [fan_in, C_out].

    tfdp's enforce_norm_bound (docs/stobatch.md): the l1 -> l1 norm Delta_h1 of the first layer,
    fixed at initialisation, stays an upper bound during training. Rows (inputs j) whose
    l1 norm exceeds the bound are scaled down onto it.
    """

    def __init__(self, bound: float) -> None:
        self.bound = float(bound)

    def __call__(self, w):
        w = tf.convert_to_tensor(w)
        flat = tf.reshape(w, [-1, tf.shape(w)[-1]])
        norms = tf.reduce_sum(tf.abs(flat), axis=1, keepdims=True)
        one = tf.ones([], w.dtype)
        factor = tf.minimum(one, self.bound / tf.maximum(norms, 1e-12 * one))
        return tf.reshape(flat * factor, tf.shape(w))

    def get_config(self) -> dict:
        return {"bound": self.bound}


def first_layer_norms(kernel: Any) -> dict:
    """Norms of a first-layer kernel viewed as W [fan_in = k*k*C_in, C_out] (docs/stobatch.md).

    Returns:
        {"l1_rows": max_j sum_c |W[j,c]| (the l1 -> l1 operator norm of x -> W^T x, used for
        gamma), "l1_cols": max_c sum_j |W[j,c]| (used for Delta_r^h), "spectral": largest
        singular value (the reference code's choice)}.
    """
    w = np.asarray(kernel, np.float64)
    w = w.reshape(-1, w.shape[-1])
    return {"l1_rows": float(np.abs(w).sum(axis=1).max()),
            "l1_cols": float(np.abs(w).sum(axis=0).max()),
            "spectral": float(np.linalg.norm(w, 2))}


def glorot_uniform(shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """Glorot-uniform initial kernel drawn on the host (`StoBatch.setup`)."""
    shape = tuple(int(s) for s in shape)
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape).astype(np.float32)


def encoder_spec(architecture: str, input_shape: Sequence[int]) -> dict:
    """First-layer geometry of an architecture: filters, kernel, stride, h1 shape, d, beta.

    Returns:
        {"filters", "kernel_size", "strides", "h1_shape", "fan_in", "beta", "decoder_bias"}:
        fan_in = k*k*C_in (Lemma 2's d), beta = H1*W1 (neurons of ONE feature map, App. P).

    Raises:
        ValueError: on an unknown architecture or an input that is not [H, W, C].
    """
    if architecture not in ARCHITECTURES:
        raise ValueError(f"stobatch_architecture: unknown architecture {architecture!r}; "
                         f"choose one of {ARCHITECTURES}")
    if len(input_shape) != 3:
        raise ValueError(f"input_shape: expected [height, width, channels], got {input_shape}")
    h, w, c = (int(v) for v in input_shape)
    filters, k, s, bias = {"mnist": (32, 5, 2, True), "cifar10": (128, 4, 2, False),
                           "resnet18": (64, 7, 2, False), "tiny": (4, 3, 2, True)}[architecture]
    h1, w1 = -(-h // s), -(-w // s)  # SAME padding
    return {"filters": filters, "kernel_size": k, "strides": s, "h1_shape": (h1, w1, filters),
            "fan_in": k * k * c, "beta": h1 * w1, "decoder_bias": bias}


def _phase_taps(kernel_size: int, stride: int) -> tuple:
    """0/1 map P[r, e, a]: tap a of a SAME k-kernel reads input row u + e + e_min of phase r.

    Output row i = s u + r of conv_SAME(nearest_upsample(h, s), K) reads the upsampled row
    i + a - pad_top, i.e. h row u + floor((r + a - pad_top) / s) (TF SAME: pad_top =
    (k - 1) // 2).

    Returns:
        (P as float32 [s, E, k], e_min, e_max).
    """
    k, s = int(kernel_size), int(stride)
    top = (k - 1) // 2
    offset = [[(r + a - top) // s for a in range(k)] for r in range(s)]
    e_min = min(min(o) for o in offset)
    e_max = max(max(o) for o in offset)
    taps = np.zeros((s, e_max - e_min + 1, k), np.float32)
    for r in range(s):
        for a in range(k):
            taps[r, offset[r][a] - e_min, a] = 1.0
    return taps, e_min, e_max


def upsample_conv(h: tf.Tensor, kernel: tf.Tensor, stride: int, out_hw: Sequence[int]
                  ) -> tf.Tensor:
    """conv2d(nearest_upsample(h, stride)[:, :H, :W], kernel, stride 1, SAME).

    When H = stride * h_height and W = stride * h_width, it is computed as one VALID
    convolution of the padded h with the stride^2 phase kernels (kernel taps that read the
    same h pixel summed first) and depth_to_space: equal in exact arithmetic, float rounding
    differs (~1e-6 relative), and far fewer multiply-adds. Otherwise (an odd input size,
    whose crop the phase form does not cover) the upsampled tensor is convolved directly.

    Args:
        h: [B, H1, W1, F].
        kernel: [k, k, F, C].
        stride: the upsampling factor s.
        out_hw: (H, W) of the output.

    Returns:
        [B, H, W, C].
    """
    s = int(stride)
    out_h, out_w = (int(v) for v in out_hw)
    k = int(kernel.shape[0])
    if (s == 1 or kernel.shape[0] != kernel.shape[1] or h.shape[1] is None
            or out_h != s * int(h.shape[1]) or out_w != s * int(h.shape[2])):
        up = h
        if s > 1:
            up = tf.repeat(tf.repeat(h, s, axis=1), s, axis=2)  # nearest-neighbour upsampling
        up = up[:, :out_h, :out_w, :]
        return tf.nn.conv2d(up, kernel, strides=1, padding="SAME")
    taps, e_min, e_max = _phase_taps(k, s)
    taps = tf.constant(taps, kernel.dtype)
    size = e_max - e_min + 1
    f, c = int(kernel.shape[2]), int(kernel.shape[3])
    # phase kernel [E, E, F, (r, q, c)]: depth_to_space reads channel (r * s + q) * C + c
    phase = tf.einsum("rea,qgb,abfc->egfrqc", taps, taps, kernel)
    phase = tf.reshape(phase, [size, size, f, s * s * c])
    padded = tf.pad(h, [[0, 0], [-e_min, e_max], [-e_min, e_max], [0, 0]])
    z = tf.nn.conv2d(padded, phase, strides=1, padding="VALID")
    return tf.nn.depth_to_space(z, s)


def _bn(sync: bool, name: str, momentum: float = 0.99, epsilon: float = 1e-3,
        affine: bool = True):
    """BatchNormalization, synchronized across replicas when `sync`; without `affine` it has
    no trained offset or gain (beta = 0, gamma = 1 for good)."""
    return keras.layers.BatchNormalization(synchronized=sync, momentum=momentum,
                                           epsilon=epsilon, center=affine, scale=affine,
                                           name=name)


# Where the classifier's path adds the latent noise: "shared" (the paper's h_bar, as the
# auto-encoder's path: after the batch norm and the [-1, 1] clip) or "release_pre_relu" (the
# MNIST code release's classifier path: before conv1's ReLU and batch norm, no clip).
CLASSIFIER_H = ("shared", "release_pre_relu")

# TF1's batch_norm epsilon (tf.contrib.layers / tf_slim), which the MNIST code release uses.
RELEASE_BN_EPSILON = 1e-3


@keras.saving.register_keras_serializable(package="tfdp")
class StoBatchNet(keras.Model):
    """StoBatch's classifier with its encoder, decoder and stored noise (see module doc).

    Args:
        input_shape: (H, W, C) of one example.
        num_classes: K.
        architecture: one of ARCHITECTURES ("mnist", "cifar10", "resnet18": the paper's three,
            "tiny": a small test network).
        batch_size: m (the noise divisor).
        input_scale: Laplace scale of chi1 (Delta_R / eps1).
        latent_scale: Laplace scale of 2 chi2 before /m (2 Delta_R / eps1).
        psi: fresh inference noise is 1/psi of the training scale (Alg. 3).
        hidden_units: |h_pi|.
        sync_bn: synchronized BatchNormalization (exact full-batch moments across replicas,
            docs/stobatch.md).
        norm_bound: l1 -> l1 bound of the first-layer kernel, or None for no projection.
        bn_momentum: momentum of the BN moving statistics (ResNet-18 blocks use 0.5, as the code).
        bn_eval: BN at inference: "moving" statistics (default), or "batch" statistics of the
            evaluated batch without updating the moving ones (the reference code's MNIST and
            CIFAR-10 inference).
        compute_dtype: "float32" (default) or "float64": the dtype of every weight and
            computation of the network (the stored noise stays the float32 host draw and is
            cast exactly). float64 makes results independent of float32 summation order, so
            replica-count equivalence (tests/stobatch) can be checked at large m.
        input_clip: clip the (noisy) inputs to [-c, c] before the first layer (the authors'
            code release: 10), or None (the paper: no clip).
        bn_affine: BN layers carry a trained offset and gain (default). False: they have
            none, beta = 0 and gamma = 1 for good (the MNIST code release, whose optimisers'
            variable lists never hold its batch norms' variables).
        classifier_h: the classifier's first hidden layer: "shared" (default: h_bar, the
            auto-encoder's clip(BN(ReLU(conv))) plus the latent noise) or "release_pre_relu"
            (the MNIST code release's classifier path: BN(ReLU(conv + latent noise)), no clip;
            needs bn_eval="batch", whose batch statistics it normalises with).
        **kwargs: Keras model arguments.

    Raises:
        ValueError: on an unknown bn_eval or compute_dtype.
    """

    def __init__(self, input_shape: Sequence[int], num_classes: int, *,
                 architecture: str = "mnist", batch_size: int = 2499, input_scale: float = 1.0,
                 latent_scale: float = 2.0, psi: float = 2.0, hidden_units: int = 256,
                 sync_bn: bool = True, norm_bound: Optional[float] = None,
                 bn_momentum: float = 0.99, bn_eval: str = "moving",
                 compute_dtype: str = "float32", input_clip: Optional[float] = None,
                 bn_affine: bool = True, classifier_h: str = "shared",
                 **kwargs: Any) -> None:
        if compute_dtype not in COMPUTE_DTYPES:
            raise ValueError(f"compute_dtype: expected one of {COMPUTE_DTYPES}, got "
                             f"{compute_dtype!r}")
        kwargs.pop("dtype", None)
        super().__init__(dtype=compute_dtype, **kwargs)
        self.compute_dtype_name = compute_dtype
        self.in_shape = tuple(int(v) for v in input_shape)
        self.num_classes = int(num_classes)
        self.architecture = architecture
        self.batch_size = int(batch_size)
        self.input_scale, self.latent_scale = float(input_scale), float(latent_scale)
        self.psi = float(psi)
        self.hidden_units = int(hidden_units)
        self.sync_bn = bool(sync_bn)
        self.bn_momentum = float(bn_momentum)
        if bn_eval not in BN_EVAL_MODES:
            raise ValueError(f"bn_eval: expected one of {BN_EVAL_MODES}, got {bn_eval!r}")
        self.bn_eval = bn_eval
        self.norm_bound = None if norm_bound is None else float(norm_bound)
        # The authors' code clips the noisy inputs to [-10, 10]; None: no clip (the paper).
        self.input_clip = None if input_clip is None else float(input_clip)
        self.bn_affine = bool(bn_affine)
        if classifier_h not in CLASSIFIER_H:
            raise ValueError(f"classifier_h: expected one of {CLASSIFIER_H}, got "
                             f"{classifier_h!r}")
        if classifier_h == "release_pre_relu" and bn_eval != "batch":
            raise ValueError("classifier_h: release_pre_relu normalises with batch statistics "
                             f"only; it needs bn_eval='batch', got {bn_eval!r}")
        self.classifier_h = classifier_h
        self.spec = encoder_spec(architecture, self.in_shape)
        # Sub-layers take the global dtype policy when they are created.
        previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy(compute_dtype)
        try:
            self._make_layers()
        finally:
            keras.config.set_dtype_policy(previous)

    def _make_layers(self) -> None:
        """Creates the sub-layers (called under the model's dtype policy)."""
        spec = self.spec
        self.input_noise = LaplaceNoise(self.input_scale, noise_mode="once",
                                        batch_divisor=self.batch_size,
                                        inference_fresh_scale=1.0 / self.psi,
                                        name="input_noise")
        constraint = RowL1Bound(self.norm_bound) if self.norm_bound is not None else None
        self.encoder_conv = keras.layers.Conv2D(
            spec["filters"], spec["kernel_size"], strides=spec["strides"], padding="same",
            kernel_constraint=constraint, bias_initializer=keras.initializers.Constant(1e-4),
            name="encoder_conv")
        self.encoder_bn = _bn(self.sync_bn, "encoder_bn", self.bn_momentum,
                              affine=self.bn_affine)
        self.encoder_clip = Clip(-1.0, 1.0, name="encoder_clip")  # StoBatch: h1 in [-1, 1]
        self.latent_noise = LaplaceNoise(self.latent_scale, noise_mode="once",
                                         batch_divisor=self.batch_size,
                                         inference_fresh_scale=1.0 / self.psi,
                                         name="latent_noise")
        self.body = self._make_body()
        self.h_pi_bn = _bn(self.sync_bn, "h_pi_bn", self.bn_momentum, affine=self.bn_affine)
        self.h_pi_clip = Clip(-1.0, 1.0, name="h_pi_clip")  # StoBatch: h_pi in [-1, 1]
        self.output_layer = keras.layers.Dense(self.num_classes, use_bias=False,
                                               name="output")  # the paper has no output bias

    # ------------------------------------------------------------------ structure

    def _make_body(self) -> list:
        sync, units = self.sync_bn, self.hidden_units
        a = self.architecture
        if a == "mnist":  # the code release's MNIST layers
            return [keras.layers.AveragePooling2D(2, 2, padding="same", name="pool1"),
                    keras.layers.Conv2D(64, 5, strides=2, padding="same", activation="relu",
                                        name="conv2"),
                    keras.layers.Flatten(name="flatten"),
                    keras.layers.Dense(units, use_bias=False, name="dense_h_pi")]
        if a == "tiny":
            return [keras.layers.Flatten(name="flatten"),
                    keras.layers.Dense(units, use_bias=False, name="dense_h_pi")]
        if a == "cifar10":  # code release's layers (the concat with n1 is handled in _body)
            return [keras.layers.Conv2D(128, 5, padding="same", activation="relu", name="c2"),
                    _bn(sync, "bn_concat", self.bn_momentum, affine=self.bn_affine),
                    keras.layers.Conv2D(256, 5, padding="same", activation="relu",
                                        name="conv3"),
                    _bn(sync, "bn3", self.bn_momentum, affine=self.bn_affine),
                    keras.layers.AveragePooling2D(2, 2, padding="same", name="pool"),
                    keras.layers.Flatten(name="flatten"),
                    keras.layers.Dense(units, use_bias=False, name="dense_h_pi")]
        # resnet18 (Tiny ImageNet code): pre-activation basic blocks, no stem conv and no max-pool
        body = []
        in_filters = self.spec["filters"]
        for stage, (filters, stride) in enumerate(((64, 1), (128, 1), (256, 2), (512, 2))):
            for block in range(2):
                s = stride if block == 0 else 1
                name = f"s{stage + 1}b{block + 1}"
                body.append({
                    "bn1": _bn(sync, name + "_bn1", 0.5, 1e-5, self.bn_affine),
                    "conv1": keras.layers.Conv2D(filters, 3, strides=s, padding="same",
                                                 use_bias=False, name=name + "_conv1"),
                    "bn2": _bn(sync, name + "_bn2", 0.5, 1e-5, self.bn_affine),
                    "conv2": keras.layers.Conv2D(filters, 3, padding="same", use_bias=False,
                                                 name=name + "_conv2"),
                    "proj": (keras.layers.Conv2D(filters, 1, strides=s, use_bias=False,
                                                 name=name + "_proj")
                             if block == 0 else None)})
                in_filters = filters
        del in_filters
        self.res_blocks = body
        self.res_bn = _bn(sync, "res_bn", 0.5, 1e-5, self.bn_affine)
        return [keras.layers.GlobalAveragePooling2D(name="gap"),
                keras.layers.Dense(units, use_bias=False, name="dense_h_pi")]

    def _body(self, h: tf.Tensor, training: bool) -> tf.Tensor:
        """g(h_bar) up to h_pi (bounded to [-1, 1])."""
        if self.architecture == "cifar10":
            c2 = self.body[0](h)
            out = tf.concat([c2, h], axis=-1)
            out = self._norm(self.body[1], out, training)
            out = self.body[2](out)
            out = self._norm(self.body[3], out, training)
            for layer in self.body[4:]:
                out = layer(out)
        elif self.architecture == "resnet18":
            out = h
            for blk in self.res_blocks:
                pre = tf.nn.relu(self._norm(blk["bn1"], out, training))
                shortcut = blk["proj"](pre) if blk["proj"] is not None else out
                r = blk["conv1"](pre)
                r = blk["conv2"](tf.nn.relu(self._norm(blk["bn2"], r, training)))
                out = shortcut + r
            out = tf.nn.relu(self._norm(self.res_bn, out, training))
            for layer in self.body:
                out = layer(out)
        else:
            out = h
            for layer in self.body:
                out = layer(out)
        out = self._norm(self.h_pi_bn, out, training)
        return self.h_pi_clip(out)

    def _norm(self, layer, h: tf.Tensor, training: bool) -> tf.Tensor:
        """BN in training mode, or at inference with moving or (bn_eval="batch") batch moments."""
        if training or self.bn_eval == "moving":
            return layer(h, training=bool(training))
        if not layer.built:
            layer.build(h.shape)
        axes = list(range(h.shape.rank - 1))
        mean, var = tf.nn.moments(h, axes)
        return tf.nn.batch_normalization(h, mean, var, layer.beta, layer.gamma, layer.epsilon)

    def build(self, input_shape: Any = None) -> None:
        shape = (None,) + self.in_shape
        self.input_noise.build(shape)
        self.encoder_conv.build(shape)
        h1 = (None,) + tuple(self.spec["h1_shape"])
        self.encoder_bn.build(h1)
        self.latent_noise.build(h1)
        if self.spec["decoder_bias"]:
            self.decoder_bias = self.add_weight(shape=(self.in_shape[-1],), initializer="zeros",
                                                name="decoder_bias")
        else:
            self.decoder_bias = None
        self.chi3 = self.add_weight(shape=(self.hidden_units, self.num_classes),
                                    initializer="zeros", trainable=False, name="chi3")
        # Build g by running it once symbolically on zeros.
        self._body(tf.zeros((1,) + tuple(self.spec["h1_shape"]), self.compute_dtype),
                   training=False)
        self.output_layer.build((None, self.hidden_units))
        self.built = True

    # ------------------------------------------------------------------ variables

    @property
    def theta1(self) -> list:
        """Auto-encoder variables: first-layer kernel and bias, encoder BN, decoder bias."""
        out = list(self.encoder_conv.trainable_variables) + list(
            self.encoder_bn.trainable_variables)
        if self.decoder_bias is not None:
            out.append(self.decoder_bias)
        return out

    @property
    def theta2(self) -> list:
        """Classifier variables above h1 (g and W_pi)."""
        ids = {id(v) for v in self.theta1}
        return [v for v in self.trainable_variables if id(v) not in ids]

    def set_noise(self, chi1: np.ndarray, chi2: np.ndarray, chi3: np.ndarray) -> None:
        """Stores the host draws: chi1/m and 2 chi2/m in the noise layers, chi3 as is."""
        m = float(self.batch_size)
        self.input_noise.fixed_noise.assign(
            (np.asarray(chi1, np.float32) / np.float32(m))[None])
        self.latent_noise.fixed_noise.assign(
            (2.0 * np.asarray(chi2, np.float32) / np.float32(m))[None])
        self.chi3.assign(np.asarray(chi3, np.float32).astype(self.chi3.dtype))

    def noise_values(self) -> dict:
        """The stored noise as host arrays: chi1/m, 2 chi2/m and chi3."""
        return {"chi1_over_m": self.input_noise.fixed_noise.numpy()[0],
                "two_chi2_over_m": self.latent_noise.fixed_noise.numpy()[0],
                "chi3": self.chi3.numpy()}

    # ------------------------------------------------------------------ forward passes

    def encode(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        """h = clip(BN(ReLU(conv(x) + b1)), -1, 1) (the code release's recipe)."""
        if self.input_clip is not None:  # the authors' code release (issue 29 item 5)
            x = tf.clip_by_value(x, -self.input_clip, self.input_clip)
        h = tf.nn.relu(self.encoder_conv(x))
        return self.encoder_clip(self._norm(self.encoder_bn, h, training))

    def reconstruct(self, h_bar: tf.Tensor) -> tf.Tensor:
        """Tied decoder logits z shaped like the input (code release): upsample, conv W1^T, ReLU.

        z = relu(conv_SAME(nearest_upsample(h_bar), W1^T) + b). When the input size is a
        multiple of the stride, the same function is computed as one stride-1 convolution
        of h_bar with s*s phase kernels followed by depth_to_space (`upsample_conv`), which
        avoids convolving the s*s times larger upsampled tensor.
        """
        s = self.spec["strides"]
        kernel = tf.transpose(self.encoder_conv.kernel, [1, 0, 3, 2])  # tied weights
        kernel = tf.cast(kernel, h_bar.dtype)
        z = upsample_conv(h_bar, kernel, s, self.in_shape[:2])
        if self.decoder_bias is not None:
            z = z + self.decoder_bias
        return tf.nn.relu(z)

    def classify(self, h_bar: tf.Tensor, training: bool) -> tf.Tensor:
        """Logits of g(h_bar) = h_pi W_pi (no output bias)."""
        return self.output_layer(self._body(h_bar, training))

    def forward(self, x: tf.Tensor, *, training: bool, input_noise: bool = False,
                latent_noise: bool = True) -> tf.Tensor:
        """Logits with the stored noise added explicitly (BN mode = `training`).

        Args:
            x: inputs; pass x_bar (already perturbed) with input_noise=False.
            training: BN in training mode (batch statistics) or inference mode.
            input_noise: add the stored chi1/m to x.
            latent_noise: add the stored 2 chi2/m to h1.
        """
        x = tf.cast(x, self.compute_dtype)
        if input_noise:
            x = x + tf.cast(self.input_noise.fixed_noise, x.dtype)
        noise = tf.cast(self.latent_noise.fixed_noise, x.dtype) if latent_noise else None
        return self.classify(self.classifier_hidden(x, training, noise), training)

    def classifier_hidden(self, x: tf.Tensor, training: bool,
                          noise: Optional[tf.Tensor]) -> tf.Tensor:
        """The classifier's first hidden layer on `x` with the latent `noise` (or None).

        "shared": the auto-encoder's h = clip(BN(ReLU(conv x))) plus the noise (Alg. 1's
        h_bar). "release_pre_relu": BN(ReLU(conv x + noise)) with the batch's statistics and
        no clip (the MNIST code release's classifier path, `inference`).
        """
        if self.classifier_h == "shared":
            h = self.encode(x, training)
            return h if noise is None else h + tf.cast(noise, h.dtype)
        if self.input_clip is not None:
            x = tf.clip_by_value(x, -self.input_clip, self.input_clip)
        z = self.encoder_conv(x)
        if noise is not None:
            z = z + tf.cast(noise, z.dtype)
        return self._batch_moments_norm(self.encoder_bn, tf.nn.relu(z))

    def _batch_moments_norm(self, layer, h: tf.Tensor) -> tf.Tensor:
        """`layer`'s normalisation with the statistics of `h`'s batch, its moving statistics
        untouched (the code release's separate classifier-path batch norm)."""
        if not layer.built:
            layer.build(h.shape)
        mean, var = tf.nn.moments(h, list(range(h.shape.rank - 1)))
        return tf.nn.batch_normalization(h, mean, var, layer.beta, layer.gamma, layer.epsilon)

    def forward_unnormalised(self, x: tf.Tensor) -> tf.Tensor:
        """Logits of the MNIST code release's training-attack network on `x` (as given).

        The release crafts its training attacks on a second copy of the network built with
        its batch norms in inference mode. Those batch norms create variables of their own
        that nothing trains or updates (moving mean 0, variance 1, beta 0, gamma 1), so each
        divides by sqrt(1 + 1e-3) and normalises nothing. The copy also has no latent noise,
        no input clip and no [-1, 1] clip at h1 or h_pi; it shares the kernels.

        Raises:
            ValueError: for an architecture other than "mnist" (the only release with it).
        """
        if self.architecture != "mnist":
            raise ValueError(f"forward_unnormalised: the MNIST code release's attack network; "
                             f"architecture is {self.architecture!r}")
        scale = tf.cast(1.0 / np.sqrt(1.0 + RELEASE_BN_EPSILON), self.compute_dtype)
        h = tf.nn.relu(self.encoder_conv(tf.cast(x, self.compute_dtype))) * scale
        for layer in self.body:
            h = layer(h)
        return self.output_layer(h * scale)

    def call(self, inputs: Any, training: Optional[bool] = None) -> tf.Tensor:
        x = self.input_noise(inputs, training=training)
        if self.classifier_h == "release_pre_relu":
            if self.input_clip is not None:
                x = tf.clip_by_value(x, -self.input_clip, self.input_clip)
            z = self.latent_noise(self.encoder_conv(x), training=training)
            h = self._batch_moments_norm(self.encoder_bn, tf.nn.relu(z))
            return self.classify(h, bool(training))
        h = self.latent_noise(self.encode(x, bool(training)), training=training)
        return self.classify(h, bool(training))

    def get_config(self) -> dict:
        config = {"input_shape": list(self.in_shape), "num_classes": self.num_classes,
                  "architecture": self.architecture, "batch_size": self.batch_size,
                  "input_scale": self.input_scale, "latent_scale": self.latent_scale,
                  "psi": self.psi, "hidden_units": self.hidden_units, "sync_bn": self.sync_bn,
                  "norm_bound": self.norm_bound, "bn_momentum": self.bn_momentum,
                  "bn_eval": self.bn_eval, "compute_dtype": self.compute_dtype_name,
                  "name": self.name}
        if self.input_clip is not None:
            config["input_clip"] = self.input_clip
        if not self.bn_affine:
            config["bn_affine"] = False
        if self.classifier_h != "shared":
            config["classifier_h"] = self.classifier_h
        return config
