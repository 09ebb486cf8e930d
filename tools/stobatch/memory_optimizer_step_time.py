"""Training-step time with tfdp's memory-optimizer level against TensorFlow's default.

Writes memory_optimizer_step_time.json beside it. In ONE process, each training step of a
tfdp-train run is called twice, once optimised with tfdp's level (SWAPPING_HEURISTICS, no
scheduling pass) and once with TensorFlow's default level, in alternating order; the first
two steps (tracing, optimisation) are not timed. It also records how many TemporaryVariable
nodes (the scheduling pass's accumulators) each variant's optimised graphs hold. Each call
advances training, so the two variants time nearby, not identical, states.

    PYTHONPATH=. TFDP_DATA_DIR=/path/to/data python tools/stobatch/memory_optimizer_step_time.py [WORK_DIR]

(run directories go to WORK_DIR, default runs/memory_optimizer_step_time)
"""

import collections
import json
import os
import statistics
import sys
import time

from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.eager import context

from tfdp import tf_options
from tfdp.apps import train as train_app

from tfdp.train import loop

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_R = rewriter_config_pb2.RewriterConfig
_LEVELS = {"tfdp (SWAPPING_HEURISTICS)": _R.SWAPPING_HEURISTICS,
           "TensorFlow default": _R.DEFAULT_MEM_OPT}
# method: (generic flags, method options); real MNIST
RUNS = {
    "stobatch": ({"num_train": 29970, "batch_size": 999, "epsilon": 2.0,
                  "value_range": (-1.0, 1.0), "learning_rate": 0.01},
                 {"stobatch_attack_iters": 3, "stobatch_bn_momentum": 0.5,
                  "stobatch_ae_learning_rate": 0.01}),
    "dpsgd": ({"num_train": 256 * 17, "batch_size": 256, "epsilon": 2.0}, {}),
}


def _set_level(level: int) -> None:
    ctx = context.context()
    ctx._config.graph_options.rewrite_options.memory_optimization = level  # pylint: disable=protected-access
    ctx._thread_local_data.function_call_options = None  # pylint: disable=protected-access


def _measure(method: str, model_dir: str) -> dict:
    times = collections.defaultdict(list)
    temporaries = {}
    make_step = loop._make_step_fn  # pylint: disable=protected-access

    def recording(*args, **kwargs):
        step = make_step(*args, **kwargs)
        calls = [0]

        def call(*batch):
            names = list(_LEVELS)
            if calls[0] % 2:
                names.reverse()
            for name in names:
                _set_level(_LEVELS[name])
                if calls[0] == 0:
                    context.context().enable_run_metadata()
                start = time.perf_counter()
                out = {k: float(v) for k, v in step(*batch).items()}
                elapsed = time.perf_counter() - start
                if calls[0] == 0:
                    meta = context.context().export_run_metadata()
                    context.context().disable_run_metadata()
                    temporaries[name] = sum(n.op == "TemporaryVariable"
                                            for g in meta.function_graphs
                                            for n in g.post_optimization_graph.node)
                elif calls[0] >= 2:
                    times[name].append(elapsed)
            calls[0] += 1
            _set_level(tf_options.MEMORY_OPTIMIZATION)
            return out
        return call

    loop._make_step_fn = recording  # pylint: disable=protected-access
    try:
        generic, options = RUNS[method]
        values = dict(generic, method=method, dataset="mnist", epochs=1, num_test=100,
                      seed=1, verbose=0, model_dir=model_dir, overwrite=True)
        train_app.execute(train_app.resolve(values, options))
    finally:
        loop._make_step_fn = make_step  # pylint: disable=protected-access
    names = list(_LEVELS)
    ratios = [a / b for a, b in zip(times[names[0]], times[names[1]])]
    return {"method": method, "flags": RUNS[method][0], "options": RUNS[method][1],
            "timed_pairs": len(ratios),
            "median_step_seconds": {n: statistics.median(times[n]) for n in names},
            "temporary_variable_nodes": temporaries,
            "median_ratio_tfdp_over_default": statistics.median(ratios)}


def main(work_dir: str) -> None:
    tf_options.configure_tensorflow()
    out = {"command": "PYTHONPATH=. TFDP_DATA_DIR=... python "
                      "tools/stobatch/memory_optimizer_step_time.py WORK_DIR",
           "load_average_at_start": os.getloadavg()[0], "runs": []}
    for method in RUNS:
        row = _measure(method, os.path.join(work_dir, method))
        print(row, flush=True)
        out["runs"].append(row)
    out["load_average_at_end"] = os.getloadavg()[0]
    path = os.path.join(_ROOT, "results", "stobatch", "memory_optimizer_step_time.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/memory_optimizer_step_time")
