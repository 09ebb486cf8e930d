"""One system of `tfdp-bench keras_fit`, timed in its own process.

Protocol (one JSON object per line on stdout): after building the model and one untimed
warm-up epoch the worker prints {"ready": true, ...}; for every line "run" on stdin it trains
one epoch through the framework's own `fit` and prints {"ms_per_step": median of the epoch's
step times, "mean_ms_per_step": ...}; "quit" ends it.

Systems (the same user model, data, lot size, clip and noise multiplier):
  nonprivate: Keras 3 `model.fit` with shuffled batches (the reference);
  tfdp-keras: `tfdp.keras.make_private(model).fit` (Poisson lots, registry clipping);
  tfprivacy-dpmodel: TF Privacy's DPModel / DPSequential `fit` through tf-keras
    (TF_USE_LEGACY_KERAS=1), the optimizer `tfdp-bench dpsgd` found fastest.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from importlib import metadata
from typing import Any

import numpy as np

from tfdp import data, tf_privacy_shim

SYSTEMS = ("nonprivate", "tfdp-keras", "tfprivacy-dpmodel")
MODELS = ("mnist", "cifar10")
INPUT_SHAPES = {"mnist": (28, 28, 1), "cifar10": (32, 32, 3)}


def build_model(name: str, layers: Any, model_cls: Any, input_cls: Any) -> Any:
    """The benchmark's user models, with any Keras' `layers`, `Model` and `Input`.

    mnist: the CNN of README "Your own model" (TF Privacy's tutorial CNN).
    cifar10: a small residual network with GroupNormalization (3 stages, 16/32/64 channels).
    """
    if name == "mnist":
        inp = input_cls(INPUT_SHAPES["mnist"])
        h = layers.Conv2D(16, 8, strides=2, padding="same", activation="relu")(inp)
        h = layers.MaxPooling2D(2, 1)(h)
        h = layers.Conv2D(32, 4, strides=2, activation="relu")(h)
        h = layers.MaxPooling2D(2, 1)(h)
        h = layers.Dense(32, activation="relu")(layers.Flatten()(h))
        return model_cls(inp, layers.Dense(10)(h))

    def block(h, filters, stride):
        skip = h
        h = layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(h)
        h = layers.Activation("relu")(layers.GroupNormalization(groups=4)(h))
        h = layers.Conv2D(filters, 3, padding="same", use_bias=False)(h)
        h = layers.GroupNormalization(groups=4)(h)
        if stride != 1 or skip.shape[-1] != filters:
            skip = layers.Conv2D(filters, 1, strides=stride, use_bias=False)(skip)
        return layers.Activation("relu")(layers.Add()([h, skip]))

    inp = input_cls(INPUT_SHAPES["cifar10"])
    h = layers.Conv2D(16, 3, padding="same", use_bias=False)(inp)
    h = layers.Activation("relu")(layers.GroupNormalization(groups=4)(h))
    for filters, stride in ((16, 1), (32, 2), (64, 2)):
        h = block(h, filters, stride)
    h = layers.GlobalAveragePooling2D()(h)
    return model_cls(inp, layers.Dense(10)(h))


def load_data(model: str, num_train: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Real training images in [0, 1] when found, else uniform noise (said in the result)."""
    try:
        x, y = data.load(model, "train", value_range=(0, 1), num_examples=num_train,
                         download=False)
        return x.astype(np.float32), y.astype(np.int32), model
    except Exception:  # pylint: disable=broad-except
        rng = np.random.default_rng(0)
        x = rng.uniform(0, 1, (num_train,) + INPUT_SHAPES[model]).astype(np.float32)
        return x, rng.integers(0, 10, num_train).astype(np.int32), "uniform noise"


class _Timer:
    """Per-step wall times from the framework's own batch callbacks."""

    def __init__(self, base: Any):
        outer = self

        class Callback(base):  # pylint: disable=too-few-public-methods
            def on_train_batch_begin(self, batch, logs=None):
                outer.start = time.perf_counter()

            def on_train_batch_end(self, batch, logs=None):
                for value in (logs or {}).values():  # finish the step (its metrics)
                    float(np.asarray(value))
                    break
                outer.times.append(1000.0 * (time.perf_counter() - outer.start))

        self.callback = Callback()
        self.times: list[float] = []
        self.start = 0.0


def _keras3(system: str, args: Any, x: np.ndarray, y: np.ndarray):
    # lazy: loads keras
    import keras  # pylint: disable=import-outside-toplevel
    keras.utils.set_random_seed(args.seed)
    model = build_model(args.model, keras.layers, keras.Model, keras.Input)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    timer = _Timer(keras.callbacks.Callback)
    if system == "nonprivate":
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss, metrics=["accuracy"])

        def epoch():
            model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=0, shuffle=True,
                      callbacks=[timer.callback])
        info = {"keras": keras.__version__}
    else:
        # lazy: loads tfdp.keras
        import tfdp.keras as tk  # pylint: disable=import-outside-toplevel
        from tfdp.keras import clip  # pylint: disable=import-outside-toplevel
        dp = tk.make_private(model, batch_size=args.batch_size, l2_clip=args.l2_clip,
                             noise_multiplier=args.noise_multiplier, seed=args.seed)
        dp.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss, metrics=["accuracy"])

        def epoch():
            dp.fit(x, y, epochs=1, verbose=0, callbacks=[timer.callback])
        info = {"keras": keras.__version__,
                "clipping": [f"{n}: {r}" for n, _, r in clip.describe(model)]}
    return epoch, timer, info


def _tfprivacy(args: Any, x: np.ndarray, y: np.ndarray):
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    try:
        # optional: tf-keras (peer environment only), loaded after TF_USE_LEGACY_KERAS
        import tf_keras  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise RuntimeError(f"skipped: {e.name or e} is not installed (pip install tf-keras)")
    dp_keras = tf_privacy_shim.get_module(
        "tensorflow_privacy.privacy.keras_models.dp_keras_model", required=True)
    tf_keras.utils.set_random_seed(args.seed)
    dp_class = dp_keras.make_dp_model_class(tf_keras.Model)

    def model_cls(inputs, outputs):
        return dp_class(l2_norm_clip=args.l2_clip, noise_multiplier=args.noise_multiplier,
                        inputs=inputs, outputs=outputs)

    model = build_model(args.model, tf_keras.layers, model_cls, tf_keras.Input)
    model.compile(optimizer=tf_keras.optimizers.Adam(1e-3), metrics=["accuracy"],
                  loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    timer = _Timer(tf_keras.callbacks.Callback)

    def epoch():
        model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=0, shuffle=True,
                  callbacks=[timer.callback])
    # lazy: tensorflow
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return epoch, timer, {"tf_keras": tf_keras.__version__, "tensorflow": tf.__version__,
                          "tensorflow_privacy": metadata.version("tensorflow-privacy")}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--system", choices=SYSTEMS, required=True)
    parser.add_argument("--model", choices=MODELS, required=True)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--num_train", type=int, default=12800)
    parser.add_argument("--l2_clip", type=float, default=1.0)
    parser.add_argument("--noise_multiplier", type=float, default=1.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    x, y, source = load_data(args.model, args.num_train)
    try:
        if args.system == "tfprivacy-dpmodel":
            epoch, timer, info = _tfprivacy(args, x, y)
        else:
            epoch, timer, info = _keras3(args.system, args, x, y)
    except RuntimeError as e:
        print(json.dumps({"skipped": str(e)}), flush=True)
        return
    epoch()  # warm-up: traces the step graph(s)
    print(json.dumps({"ready": True, "data": source, **info}), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        timer.times.clear()
        epoch()
        times = timer.times[1:]  # the first step of a fit call also starts its iterator
        print(json.dumps({"ms_per_step": statistics.median(times),
                          "mean_ms_per_step": statistics.fmean(times),
                          "steps": len(times)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
