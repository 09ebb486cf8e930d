"""The worker process of `tfdp-bench dpsgd`'s systems on tfdp-train's own path.

It speaks the protocol of `tfdp.bench.dpsgd_worker` (whose `main` it runs) and builds the
step of the systems in `TRAIN_PATH_SYSTEMS` from tfdp-train's own run, configured through the
train app's `resolve` exactly as `tfdp-train --method=... --dataset=<model>` would be. It is
an app module because it assembles tfdp-train's run; the library module does not import apps.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable

from tfdp.apps import train as train_app
from tfdp.bench import dpsgd_worker


def train_path_step(system: str, model: str, args: Any) -> tuple[Callable, dict]:
    """A step of tfdp-train's own run: `Run.prepare`, then its epochs' inputs and step.

    The run is configured exactly as `tfdp-train --method=... --dataset=<model>` with the
    benchmark's batch, clip and noise (library form of the same flags, `apps.train.resolve`),
    in a temporary run directory. Each call trains one step of the run (a new epoch's Poisson
    lots and dataset when the previous epoch is used up), as `Run.run` does, without the
    progress bar (verbose 0) and the per-epoch ledger and checkpoint writes.
    """

    # lazy: loads tensorflow; importing tfdp.apps.bench_worker does not
    import tensorflow as tf
    from tfdp import kernels
    # lazy: loads keras; importing tfdp.apps.bench_worker does not
    from tfdp.train import loop
    # lazy: loads tensorflow; importing tfdp.apps.bench_worker does not
    from tfdp.train import strategy as strategies

    values = {"method": "nonprivate" if system == "nonprivate" else "dpsgd",
              "dataset": model, "batch_size": args.batch_size, "optimizer": "adam",
              "learning_rate": args.learning_rate, "seed": args.seed, "epochs": 1000000,
              "num_train": args.num_train, "num_test": 100, "verbose": 0,
              "model_dir": os.path.join(tempfile.mkdtemp(prefix="tfdp-bench-"), "run")}
    if system == "nonprivate":
        options = {"nonprivate_model": "cnn"}
    else:
        options = {"dpsgd_model": "cnn", "dpsgd_l2_clip": args.l2_clip,
                   "dpsgd_noise_multiplier": args.noise_multiplier,
                   "dpsgd_clipping": system.rsplit("-", 1)[1]}
    spec = train_app.resolve(values, options)
    with kernels.noise_kernel_flag(spec.noise_kernel):
        method = spec.method_cls(spec.config)
        strategy = strategies.make_strategy(spec.strategy)
        data = train_app.load_data(spec)
        run = loop.Run(method, data, strategy, True, resume=False, checkpoint_every=1,
                       stop_after_epochs=None, flags_text=train_app.flags_text(spec),
                       config_extra={"flags": train_app.run_flags(spec)}, verbose=0,
                       print_fn=lambda _: None)
        run.prepare()
        step_fn = run.make_step_fn()
    state = {"epoch": 0, "it": None, "left": 0, "lot_sizes": []}

    def step():
        if state["left"] == 0:
            dataset, n = run.epoch_inputs(step_fn, state["epoch"])
            state.update(epoch=state["epoch"] + 1, it=iter(dataset), left=n)
        state["left"] -= 1
        return run.run_step(step_fn, next(state["it"]))["loss"]

    info = {"tensorflow": tf.__version__, "method": values["method"],
            "options": options, "num_train": len(data.x_train),
            "batch_schedule": method.batch_schedule(), "pads_lots": method.pads_lots(),
            "steps_per_epoch": len(data.x_train) // args.batch_size,
            "noise_kernel": spec.noise_kernel,
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads()}
    return step, info


def main(argv: list[str] | None = None) -> None:
    """Runs the worker protocol with tfdp-train's path."""
    dpsgd_worker.main(argv, train_path_step=train_path_step)


if __name__ == "__main__":
    main()
