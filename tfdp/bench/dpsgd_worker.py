"""One system of `tfdp-bench dpsgd`, timed in its own process.

Protocol (one JSON object per line on stdout): after building the model and running the
warm-up steps the worker prints {"ready": true, ...setup}; then for every line "run N" on
stdin it times N training steps on the same batch and prints {"ms_per_step": ...}; "quit"
ends it. Only one worker runs at a time, so the systems never compete for the cores.

Systems: "nonprivate" and "tfdp-dpsgd-<clipping>" (tfdp on Keras 3), "tfprivacy-dpmodel" and
"tfprivacy-vectorized" (TensorFlow Privacy through tf-keras, TF_USE_LEGACY_KERAS=1), "opacus"
(PyTorch CPU). The peers build the same network: small_cnn (conv 3x3 16 + max-pool, conv 3x3
32 + max-pool, dense 64, logits), same batch, clip and noise multiplier.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

import numpy as np
from tfdp import data
from tfdp.train.base import StepContext
from tfdp import tf_privacy_shim
from importlib import metadata
import threading

# tfdp-train's path: "nonprivate" and "tfdp-dpsgd-<clipping>" run tfdp-train's own `Run` (its
# Poisson or shuffled batches, input pipeline and traced step). "static-*": one step graph
# traced for one static batch shape, fed the same batch again and again (not what tfdp-train
# runs; shown labelled as such). The peers run their own frameworks' fixed-batch steps.
TRAIN_PATH_SYSTEMS = ("nonprivate", "tfdp-dpsgd-vectorized", "tfdp-dpsgd-ghost",
                      "tfdp-dpsgd-auto")
# The worker module of those systems (the same protocol, with tfdp-train's run).
TRAIN_PATH_WORKER = "tfdp.apps.bench_worker"
STATIC_SYSTEMS = tuple(f"static-{s}" for s in TRAIN_PATH_SYSTEMS)
SYSTEMS = TRAIN_PATH_SYSTEMS + STATIC_SYSTEMS + (
    "tfprivacy-dpmodel", "tfprivacy-vectorized", "opacus")
MEASURED_PATHS = {
    "train": "tfdp-train's Run: its batches (Poisson lots for DP-SGD, shuffled fixed batches "
             "for nonprivate), input pipeline, traced step and per-step metric fetch",
    "static": "one step graph traced for one static batch shape, the same batch every step",
    "peer": "the peer framework's own fixed-batch training step, the same batch every step",
}


def measured_path(system: str) -> str:
    """Which path a system's timings measure: "train", "static" or "peer"."""
    if system in TRAIN_PATH_SYSTEMS:
        return "train"
    return "static" if system.startswith("static-") else "peer"
PEER_INSTALL = "pip install -e '.[bench-peers]'"
INPUT_SHAPES = {"mnist": (28, 28, 1), "cifar10": (32, 32, 3)}


def load_batch(model: str, batch: int, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """One batch of real images in [-1, 1] if the data set is found, else uniform noise."""
    try:
        x, y = data.load(model, "train", num_examples=batch, download=False)
        return np.asarray(x, np.float32), np.asarray(y, np.int64), f"real {model}"
    except Exception:  # pylint: disable=broad-except
        rng = np.random.default_rng(seed)
        x = rng.uniform(-1, 1, size=(batch,) + INPUT_SHAPES[model]).astype(np.float32)
        return x, rng.integers(0, 10, size=batch), f"synthetic {model}-shaped"


def _tfdp_step(system: str, x: np.ndarray, y: np.ndarray, args: Any) -> tuple[Callable, dict]:
    # lazy: loads keras; importing tfdp.bench.dpsgd_worker does not
    import keras
    # lazy: loads tensorflow; importing tfdp.bench.dpsgd_worker does not
    import tensorflow as tf

    # lazy: loads keras/tensorflow; importing tfdp.bench.dpsgd_worker does not
    from tfdp.train import ghost, privatize
    # lazy: loads keras; importing tfdp.bench.dpsgd_worker does not
    from tfdp.train.nonprivate import build_baseline_model, per_example_cross_entropy

    keras.utils.set_random_seed(args.seed)
    model = build_baseline_model("cnn", x.shape[1:], 10)
    optimizer = keras.optimizers.Adam(args.learning_rate)
    variables = model.trainable_variables
    xt, yt = tf.constant(x), tf.constant(y)
    batch = int(x.shape[0])
    info = {"tensorflow": tf.__version__, "keras": keras.__version__,
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads()}

    if system == "static-nonprivate":
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(per_example_cross_entropy(yt, model(xt, training=True)))
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
            return loss
        return step, info

    clipping = system.rsplit("-", 1)[1]
    if clipping not in ("vectorized",):
        info["layer_plan"] = [list(p) for p in ghost.describe(model, variables, clipping)]

    def example_loss(xi, yi):
        logits = model(xi, training=True)
        return per_example_cross_entropy(yi, logits)[0], logits

    counter = tf.Variable(0, dtype=tf.int64)

    @tf.function
    def step():
        seed = tf.stack([tf.constant(args.seed, tf.int64), counter.assign_add(1)])
        grads, metrics = privatize.dpsgd_gradients(
            StepContext.current(seed, batch), model, variables, xt, yt, example_loss,
            l2_clip=args.l2_clip, noise_multiplier=args.noise_multiplier, clipping=clipping)
        optimizer.apply_gradients(zip(grads, variables))
        return metrics["loss"]
    return step, info


def _tfprivacy_step(system: str, x: np.ndarray, y: np.ndarray, args: Any
                    ) -> tuple[Callable, dict]:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    # lazy: loads tensorflow; importing tfdp.bench.dpsgd_worker does not
    import tensorflow as tf
    try:
        # optional: imported only if installed (the except clause handles its absence)
        import tf_keras
    except ImportError as e:
        raise _Skip(f"{e.name or e} is not installed; {PEER_INSTALL}") from e
    try:
        dp_model = tf_privacy_shim.get_module(
            "tensorflow_privacy.privacy.keras_models.dp_keras_model", required=True)
        dp_vec = tf_privacy_shim.get_module(
            "tensorflow_privacy.privacy.optimizers.dp_optimizer_keras_vectorized",
            required=True)
    except ImportError as e:
        raise _Skip(f"tensorflow-privacy is not usable ({e}); {PEER_INSTALL}") from e
    tf_keras.utils.set_random_seed(args.seed)
    layers = tf_keras.layers

    def body():
        return [layers.Conv2D(16, 3, padding="same", activation="relu"), layers.MaxPooling2D(2),
                layers.Conv2D(32, 3, padding="same", activation="relu"), layers.MaxPooling2D(2),
                layers.Flatten(), layers.Dense(64, activation="relu"), layers.Dense(10)]

    inputs = [layers.InputLayer(input_shape=x.shape[1:])]
    if system == "tfprivacy-dpmodel":
        model = dp_model.DPSequential(l2_norm_clip=args.l2_clip,
                                 noise_multiplier=args.noise_multiplier,
                                 layers=inputs + body())
        loss = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer=tf_keras.optimizers.Adam(args.learning_rate), loss=loss)
    else:
        model = tf_keras.Sequential(inputs + body())
        opt = dp_vec.VectorizedDPKerasAdamOptimizer(
            l2_norm_clip=args.l2_clip, noise_multiplier=args.noise_multiplier,
            num_microbatches=int(x.shape[0]), learning_rate=args.learning_rate)
        loss = tf_keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf_keras.losses.Reduction.NONE)
        model.compile(optimizer=opt, loss=loss)
    xt, yt = tf.constant(x), tf.constant(y)

    def step():
        return model.train_on_batch(xt, yt)
    info = {"tensorflow": tf.__version__, "tf_keras": tf_keras.__version__,
            "tensorflow_privacy": _version("tensorflow-privacy"),
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads()}
    return step, info


def _opacus_step(x: np.ndarray, y: np.ndarray, args: Any) -> tuple[Callable, dict]:
    try:
        # optional: imported only if installed (the except clause handles its absence)
        import opacus
        import torch
    except ImportError as e:
        raise _Skip(f"{e.name or e} is not installed; {PEER_INSTALL}") from e
    torch.manual_seed(args.seed)
    c, h, w = x.shape[3], x.shape[1], x.shape[2]
    nn = torch.nn
    flat = 32 * (h // 4) * (w // 4)
    model = nn.Sequential(nn.Conv2d(c, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(flat, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    xt = torch.tensor(np.transpose(x, (0, 3, 1, 2)).copy())
    yt = torch.tensor(y)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xt, yt),
                                         batch_size=len(xt))
    engine = opacus.PrivacyEngine()
    model, optimizer, _ = engine.make_private(
        module=model, optimizer=optimizer, data_loader=loader,
        noise_multiplier=args.noise_multiplier, max_grad_norm=args.l2_clip,
        poisson_sampling=False)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad()
        loss = loss_fn(model(xt), yt)
        loss.backward()
        optimizer.step()
        return float(loss)
    info = {"torch": torch.__version__, "opacus": opacus.__version__,
            "torch_threads": torch.get_num_threads()}
    return step, info


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


class _Skip(Exception):
    """The system's packages are not installed."""


def _rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# The machine-wide rule: a worker holding more than _BIG stops when the machine has less
# than _FLOOR available, before the kernel has to kill some process (maybe another program's).
_BIG, _FLOOR = 2 * 2**30, 2**30


def guard_reason(rss: int, available: int | None, limit: int) -> str | None:
    """Why a worker with resident memory `rss` must stop (None: it may go on).

    Args:
        rss: the worker's resident memory in bytes.
        available: the machine's available memory in bytes (None: unknown).
        limit: the worker's own limit in bytes.

    Returns:
        The message for the report, or None.
    """
    if rss > limit:
        return (f"stopped at {rss / 2**30:.1f} GiB resident memory (limit "
                f"{limit / 2**30:.3g} GiB, --dpsgd_bench_memory_limit_gb)")
    if available is not None and available < _FLOOR and rss > _BIG:
        return (f"stopped at {rss / 2**30:.1f} GiB resident memory: the machine had only "
                f"{available / 2**30:.2f} GiB left")
    return None


def start_memory_guard(limit_gb: float, out: Any, interval: float = 0.05) -> None:
    """Ends this process, saying why on `out`, when it holds too much memory.

    That is: its resident memory exceeds `limit_gb`, or it holds over 2 GiB while the machine
    has under 1 GiB available. A peer that needs more memory than the machine has (TF
    Privacy's vectorized optimizer on CIFAR-10 at batch 256 grew past 19 GB here) is stopped
    before the kernel's out-of-memory killer picks a process, possibly another program's.
    The benchmark then reports the system as failed with this message.

    Args:
        limit_gb: the limit in GiB; <= 0 disables the guard.
        out: the protocol stream (stdout).
        interval: seconds between checks.
    """
    if limit_gb <= 0 or not os.path.exists("/proc/self/statm"):
        return

    limit = int(limit_gb * 2**30)

    def watch() -> None:
        while True:
            reason = guard_reason(_rss_bytes(), _available_bytes(), limit)
            if reason is not None:
                print(json.dumps({"failed": reason}), file=out, flush=True)
                os._exit(3)  # pylint: disable=protected-access
            time.sleep(interval)

    threading.Thread(target=watch, daemon=True).start()


def main(argv: list[str] | None = None,
         train_path_step: Callable[[str, str, Any], tuple[Callable, dict]] | None = None
         ) -> None:
    """Runs the worker protocol (see module docstring).

    Args:
      argv: the worker's arguments (default: sys.argv[1:]).
      train_path_step: builds a TRAIN_PATH_SYSTEMS system's step (system, model, args) ->
        (step, info). tfdp-train's run is assembled by the train app, which a library module
        does not import: those systems' workers run `tfdp.apps.bench_worker`, which passes it.
    """
    args = _parser().parse_args(argv)
    out = sys.stdout
    start_memory_guard(args.memory_limit_gb, out)
    if args.system in TRAIN_PATH_SYSTEMS:
        x = y = None
        source = f"real {args.model}, first {args.num_train} training examples"
    elif args.batch_file:
        with np.load(args.batch_file) as f:
            x, y, source = f["x"], f["y"], str(f["source"])
    else:
        x, y, source = load_batch(args.model, args.batch_size, args.seed)
    try:
        if args.system == "opacus":
            step, info = _opacus_step(x, y, args)
        elif args.system.startswith("tfprivacy"):
            step, info = _tfprivacy_step(args.system, x, y, args)
        elif args.system in TRAIN_PATH_SYSTEMS:
            if train_path_step is None:
                raise SystemExit(f"--system={args.system}: tfdp-train's path runs in "
                                 f"{TRAIN_PATH_WORKER}, not in this module")
            step, info = train_path_step(args.system, args.model, args)
        else:
            step, info = _tfdp_step(args.system, x, y, args)
        info["measured_path"] = measured_path(args.system)
    except _Skip as e:
        print(json.dumps({"skipped": str(e)}), file=out, flush=True)
        return
    start = time.perf_counter()
    float(step())  # trace / compile
    first_ms = (time.perf_counter() - start) * 1000.0
    warmup = args.warmup
    if args.system in TRAIN_PATH_SYSTEMS:
        # A full epoch first: padded Poisson lots trace one graph per lot-size bucket, once
        # per run; tracing is not a step's cost.
        warmup = max(warmup, info["steps_per_epoch"])
    for _ in range(warmup):
        float(step())
    info.update({"ready": True, "data": source, "first_step_ms": first_ms,
                 "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                 "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                 "pid": os.getpid()})
    print(json.dumps(info), file=out, flush=True)
    _serve_rounds(step, out)


def _parser() -> argparse.ArgumentParser:
    """The worker's arguments."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--system", choices=SYSTEMS, required=True)
    parser.add_argument("--model", choices=sorted(INPUT_SHAPES), required=True)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--l2_clip", type=float, default=1.0)
    parser.add_argument("--noise_multiplier", type=float, default=1.1)
    parser.add_argument("--learning_rate", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory_limit_gb", type=float, default=0.0)
    parser.add_argument("--num_train", type=int, default=12800)
    parser.add_argument("--batch_file", default=None,
                        help="An .npz with x, y and source: the batch of the static and peer "
                             "systems (written once by the benchmark, so that a peer's "
                             "interpreter needs no TensorFlow to read the data set).")
    return parser


def _serve_rounds(step: Callable[[], Any], out: Any) -> None:
    """Times `step` for each "run <n>" line on stdin (until "quit" or EOF), one JSON line out
    per round."""
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        n = int(cmd[1])
        times = []
        start = time.perf_counter()
        for _ in range(n):
            t0 = time.perf_counter()
            float(step())  # each step finishes before the next (as tfdp-train's loop does)
            times.append((time.perf_counter() - t0) * 1000.0)
        ms = (time.perf_counter() - start) / n * 1000.0
        # The median step leaves out one-time costs that a short round can hit (the trace
        # of a lot-size bucket's graph, an epoch's dataset), which a real run amortises.
        print(json.dumps({"ms_per_step": float(np.median(times)), "mean_ms_per_step": ms,
                          "max_step_ms": max(times)}), file=out, flush=True)


if __name__ == "__main__":
    main()
