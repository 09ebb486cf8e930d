"""Benchmark `tfdp-bench dpsgd`: DP-SGD step time against the non-private step, and the peers.

The headline is measured on the path users run (`measured_path: "train"`): tfdp-train's own
`Run` (`tfdp.train.loop.Run.prepare`, `make_step_fn`, `epoch_inputs`, `run_step`) for
`--method=nonprivate` and `--method=dpsgd` with the default clipping, fed the run's own
batches (Poisson lots for DP-SGD) through its input pipeline. Systems named `static-*` time
one graph traced for one static batch shape on a repeated batch and are labelled so.

Every system (the non-private step, tfdp DP-SGD with each clipping path, and when installed
TF Privacy's DPModel and vectorized optimizer and Opacus) runs in its own worker process
(`tfdp.bench.dpsgd_worker`) on the same model, batch, clip and noise multiplier. All workers
are started and warmed up first; then each round times `steps` steps of every system, one
system at a time, in a rotated order, so slow drifts of a shared machine's load hit all
systems alike. Reported: per-system median and range of ms/step, and the median and range of
the per-round ratio to the non-private step of the same round. A round's ms/step is the median
of its steps' times, each step finished before the next as in tfdp-train's loop: it leaves out
one-time costs a short round can hit (tracing a new lot-size bucket's graph, building an
epoch's dataset), which a real run amortises; the rounds' mean step times and their ratios
are recorded too.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import tempfile
from typing import Any

import numpy as np

from tfdp import options

from tfdp.bench import dpsgd_worker, worker_process

TARGET_RATIO = 2.0
TARGET_BY_MODEL = {"mnist": 2.0, "cifar10": 2.5}
# Timed by default: tfdp-train's path (nonprivate, auto = the default clipping), the
# static-graph figures of both (labelled), and the peers. The vectorized and ghost paths
# (about 5x and 15-20x here) are available by name.
TFDP_SYSTEMS = ("nonprivate", "tfdp-dpsgd-auto", "static-nonprivate", "static-tfdp-dpsgd-auto")
# TF Privacy's vectorized optimizer ("tfprivacy-vectorized") is available by name; on this
# 24 GB machine it grew past 8 GiB (MNIST) and 19 GB (CIFAR-10) at batch 256 and never gave
# a timing, so it is not timed by default.
PEER_SYSTEMS = ("tfprivacy-dpmodel", "opacus")

OPTIONS = options.OptionSet("dpsgd_bench_")  # every dpsgd_bench_* setting: name, default, help

_MODELS = OPTIONS.list("dpsgd_bench_models", ["mnist", "cifar10"],
                       "Models: mnist (small_cnn on 28x28x1) and/or cifar10 (small_cnn "
                       "on 32x32x3), the CNNs of --method=dpsgd --dpsgd_model=cnn.")
_SYSTEMS = OPTIONS.list("dpsgd_bench_systems", list(TFDP_SYSTEMS + PEER_SYSTEMS),
                        f"Systems to time, from {dpsgd_worker.SYSTEMS}; 'nonprivate' "
                        "is always included (it is the reference).")
_BATCH = OPTIONS.integer("dpsgd_bench_batch_size", 256, "Examples per step.")
_STEPS = OPTIONS.integer("dpsgd_bench_steps", 10, "Timed steps per system per round.")
_ROUNDS = OPTIONS.integer("dpsgd_bench_rounds", 5, "Interleaved rounds.")
_WARMUP = OPTIONS.integer("dpsgd_bench_warmup", 3,
                         "Untimed steps after tracing (tfdp-train's path: at least one epoch, "
                         "which traces the padded lots' bucket graphs).")
_NUM_TRAIN = OPTIONS.integer("dpsgd_bench_num_train", 12800,
                             "tfdp-train's path: training examples of the run (--num_train); "
                             "the Poisson lots' rate is batch_size / num_train.")
_CLIP = OPTIONS.float("dpsgd_bench_l2_clip", 1.0, "Clipping bound C.")
_SIGMA = OPTIONS.float("dpsgd_bench_noise_multiplier", 1.1, "Noise multiplier sigma.")
_TIMEOUT = OPTIONS.integer("dpsgd_bench_worker_timeout", 1800,
                           "Seconds a worker may take to start or to answer a round.")
_PEER_PYTHON = OPTIONS.string("dpsgd_bench_peer_python", "",
                              "Interpreter of the peer systems (opacus, tfprivacy-*), e.g. a "
                              "separate virtual environment holding torch, opacus, tf-keras "
                              "and tensorflow-privacy; empty: $TFDP_BENCH_PEER_PYTHON if set, "
                              "else this interpreter.")
_MEMORY = OPTIONS.float("dpsgd_bench_memory_limit_gb", 8.0,
                        "A worker whose resident memory exceeds this many GiB stops and its "
                        "system is reported as failed (0: no limit).")


def _flag(name: str, overrides: dict) -> Any:
    return OPTIONS.setting(overrides, name)


class _Worker(worker_process.WorkerProcess):
    """A running worker process speaking the line protocol of dpsgd_worker."""

    def __init__(self, system: str, model: str, args: dict, timeout: int):
        args = dict(args)
        python = args.pop("peer_python", "") if system in PEER_SYSTEMS else ""
        args.pop("peer_python", None)
        if system in dpsgd_worker.TRAIN_PATH_SYSTEMS:
            args.pop("batch_file", None)
        env = {}
        if system.startswith("tfprivacy"):
            env["TF_USE_LEGACY_KERAS"] = "1"
        if system == "opacus" and "OMP_WAIT_POLICY" not in os.environ:
            # PyTorch's OpenMP threads spin while waiting by default; on a shared, loaded
            # machine that spinning took a plain 2-thread torch step from about 200 ms to
            # 400-850 ms. Passive waiting is what TensorFlow's thread pool does already.
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        self.timeout = timeout
        module = (dpsgd_worker.TRAIN_PATH_WORKER if system in dpsgd_worker.TRAIN_PATH_SYSTEMS
                  else "tfdp.bench.dpsgd_worker")
        super().__init__(system, module,
                         [f"--system={system}", f"--model={model}"]
                         + [f"--{k}={v}" for k, v in args.items() if v is not None],
                         python=python, env=env)

    def run(self, steps: int) -> dict:
        return self.request(f"run {steps}")


def _failure(error: RuntimeError, when: str) -> str:
    """The report's text for a worker that ended `when` (RuntimeError from _Worker._read)."""
    if len(error.args) > 2:  # the worker said why
        return f"failed {when}: {error.args[2]}"
    code = error.args[1] if len(error.args) > 1 else "?"
    hint = " (killed by signal 9: most likely out of memory)" if code == -9 else ""
    return f"failed: the worker process ended {when} (exit code {code}){hint}"


def _summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _bench_model(model: str, systems: list[str], cfg: dict) -> dict:
    worker_args = {"batch_size": cfg["batch_size"], "warmup": cfg["warmup"],
                   "l2_clip": cfg["l2_clip"], "noise_multiplier": cfg["noise_multiplier"],
                   "memory_limit_gb": cfg["memory_limit_gb"], "num_train": cfg.get("num_train"),
                   "peer_python": cfg.get("peer_python", ""),
                   "batch_file": cfg.get("batch_files", {}).get(model)}
    workers, skipped, setup = {}, {}, {}
    try:
        for system in systems:
            try:
                w = _Worker(system, model, worker_args, cfg["timeout"])
            except RuntimeError as e:  # the worker died (e.g. out of memory): say so
                skipped[system] = _failure(e, "during start-up")
                continue
            if "skipped" in w.info:
                skipped[system] = w.info["skipped"]
                w.close()
                continue
            workers[system] = w
            setup[system] = w.info
        names = list(workers)
        times: dict[str, list[float]] = {s: [] for s in names}
        means: dict[str, list[float]] = {s: [] for s in names}
        for rnd in range(cfg["rounds"]):
            k = rnd % len(names)
            for system in names[k:] + names[:k]:
                if system not in workers:
                    continue
                try:
                    msg = workers[system].run(cfg["steps"])
                    times[system].append(float(msg["ms_per_step"]))
                    means[system].append(float(msg.get("mean_ms_per_step",
                                                       msg["ms_per_step"])))
                except RuntimeError as e:
                    if system == "nonprivate":
                        raise  # the reference itself failed: no ratio can be reported
                    # A peer that dies mid-run is reported as failed; its partial timings
                    # are dropped (every reported ratio pairs with the same rounds).
                    skipped[system] = _failure(e, f"in timed round {rnd + 1}")
                    workers.pop(system).close()
                    del times[system], means[system]
        names = [s for s in names if s in workers]
    finally:
        for w in workers.values():
            w.close()
    ref = times["nonprivate"]
    out = {}
    for system in names:
        ratios = [t / r for t, r in zip(times[system], ref)]
        out[system] = {"ms_per_step": _summary(times[system]),
                       "ratio_to_nonprivate": _summary(ratios),
                       "ms_per_round": times[system], "ratio_per_round": ratios,
                       "mean_ms_per_round": means[system],
                       "mean_ratio_to_nonprivate": _summary(
                           [t / r for t, r in zip(means[system], means["nonprivate"])]),
                       "measured_path": dpsgd_worker.measured_path(system),
                       "setup": setup[system]}
    return {"systems": out, "skipped": {s: m for s, m in skipped.items()},
            "data": setup["nonprivate"].get("data")}


def machine() -> dict:
    """Machine, thread settings and load, recorded with every result."""
    info = {"platform": platform.platform(), "machine": platform.machine(),
            "processor": platform.processor(), "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "tf_num_intraop_threads": os.environ.get("TF_NUM_INTRAOP_THREADS"),
            "tf_num_interop_threads": os.environ.get("TF_NUM_INTEROP_THREADS")}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return info


def run(**overrides: Any) -> dict:
    """Runs the DP-SGD benchmark.

    Args:
        **overrides: values for the flags without the `dpsgd_bench_` prefix (models,
            systems, batch_size, steps, rounds, warmup, l2_clip, noise_multiplier,
            worker_timeout); unset ones take the OPTIONS defaults.

    Returns:
        dict with ratio (MNIST, tfdp-dpsgd-auto over nonprivate, median of per-round
        ratios), target, passed, per-model per-system results, skipped peers with the
        install hint, machine, load averages, date.

    Raises:
        ValueError: on a bad size, an unknown model or system.
    """
    models = list(_flag("models", overrides))
    systems = list(_flag("systems", overrides))
    cfg = {k: _flag(k, overrides) for k in ("batch_size", "steps", "rounds", "warmup",
                                            "l2_clip", "noise_multiplier", "num_train")}
    cfg["timeout"] = int(_flag("worker_timeout", overrides))
    cfg["memory_limit_gb"] = float(_flag("memory_limit_gb", overrides))
    for name in ("batch_size", "steps", "rounds", "num_train"):
        if int(cfg[name]) < 1:
            raise ValueError(f"dpsgd_bench_{name} must be >= 1, got {cfg[name]}")
    if cfg["memory_limit_gb"] < 0:
        raise ValueError(f"dpsgd_bench_memory_limit_gb must be >= 0, got "
                         f"{cfg['memory_limit_gb']}")
    if int(cfg["warmup"]) < 0:
        raise ValueError(f"dpsgd_bench_warmup must be >= 0, got {cfg['warmup']}")
    if int(cfg["num_train"]) < int(cfg["batch_size"]):
        raise ValueError(f"dpsgd_bench_num_train: {cfg['num_train']} examples are fewer than "
                         f"one batch ({cfg['batch_size']})")
    for m in models:
        if m not in dpsgd_worker.INPUT_SHAPES:
            raise ValueError(f"dpsgd_bench_models: unknown model {m!r}")
    for s in systems:
        if s not in dpsgd_worker.SYSTEMS:
            raise ValueError(f"dpsgd_bench_systems: unknown system {s!r}")
    systems = ["nonprivate"] + [s for s in systems if s != "nonprivate"]
    cfg["peer_python"] = str(_flag("peer_python", overrides)
                             or os.environ.get("TFDP_BENCH_PEER_PYTHON", ""))
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tfdp-bench-dpsgd-") as tmp:
        cfg["batch_files"] = {}
        if any(dpsgd_worker.measured_path(s) != "train" for s in systems):
            for m in models:  # one batch for the static and peer systems, read once here
                x, y, source = dpsgd_worker.load_batch(m, int(cfg["batch_size"]), 0)
                path = os.path.join(tmp, f"{m}.npz")
                np.savez(path, x=x, y=y, source=np.array(source))
                cfg["batch_files"][m] = path
        results = {m: _bench_model(m, systems, cfg) for m in models}
        del cfg["batch_files"]
    load_after = os.getloadavg()
    headline = results.get("mnist", next(iter(results.values())))["systems"]
    ratio = headline.get("tfdp-dpsgd-auto", {}).get("ratio_to_nonprivate", {}).get("median")
    by_model = {m: r["systems"].get("tfdp-dpsgd-auto", {}).get("ratio_to_nonprivate",
                                                                 {}).get("median")
                for m, r in results.items()}
    return {
        "benchmark": "dpsgd",
        "ratio": ratio,
        "target": TARGET_RATIO,
        "passed": None if ratio is None else bool(ratio <= TARGET_RATIO),
        "measured_path": "train",
        "measured_path_description": dpsgd_worker.MEASURED_PATHS["train"],
        "measured_paths": dict(dpsgd_worker.MEASURED_PATHS),
        "reference": "tfdp-train --method=nonprivate step (small_cnn, Adam, shuffled batches)",
        "candidate": "tfdp-train --method=dpsgd step with the default --dpsgd_clipping=auto "
                     "(Poisson lots padded to bucket sizes; MNIST small_cnn)",
        "ratio_by_model": by_model,
        "target_by_model": dict(TARGET_BY_MODEL),
        "models": results,
        "config": {k: v for k, v in cfg.items()},
        "systems": systems,
        "machine": machine(),
        "loadavg_before": list(load_before),
        "loadavg_after": list(load_after),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
