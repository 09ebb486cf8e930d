"""tfdp's tf.functions run without grappler's memory-optimizer scheduling pass (tfdp/tf_options.py).

The pass rewrites a multi-input AddN into a TemporaryVariable plus unordered AssignAdds when
the graph's estimated peak memory exceeds 0.8 x the free memory TensorFlow sees, which made
float sums, and so StoBatch's weights, differ between processes. These tests force that
condition offline (a virtual device with 1 KiB of memory) on a real tfdp training step.
"""

import ast
import collections
import os
import threading

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import (config_pb2, device_properties_pb2, meta_graph_pb2,
                                      rewriter_config_pb2)
from tensorflow.python.grappler import cluster as grappler_cluster
from tensorflow.python.grappler import tf_optimizer

from tfdp import tf_options
from tfdp.train import loop
from tfdp.papers.stobatch import method as stobatch
from tfdp.train.base import TrainConfig

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_MEM = rewriter_config_pb2.RewriterConfig
_ACCUMULATION_OPS = ("TemporaryVariable", "DestroyTemporaryVariable", "AssignAdd")


def _level_in_new_thread():
    out = []
    thread = threading.Thread(target=lambda: out.append(tf_options.memory_optimization_level()))
    thread.start()
    thread.join()
    return out[0]


def test_tf_function_calls_get_swapping_heuristics_in_every_thread():
    # Importing tfdp.train.loop configured the process; what grappler receives is read back
    # from the config_proto TensorFlow attaches to tf.function calls.
    assert tf_options.MEMORY_OPTIMIZATION == _MEM.SWAPPING_HEURISTICS
    assert tf_options.memory_optimization_level() == _MEM.SWAPPING_HEURISTICS
    assert _level_in_new_thread() == _MEM.SWAPPING_HEURISTICS
    # Public optimizer options rebuild the call options; the level survives.
    tf.config.optimizer.set_experimental_options(tf.config.optimizer.get_experimental_options())
    assert tf_options.memory_optimization_level() == _MEM.SWAPPING_HEURISTICS
    tf_options.configure_tensorflow()  # idempotent
    assert tf_options.memory_optimization_level() == _MEM.SWAPPING_HEURISTICS


def _stobatch_step():
    """The concrete tf.function of one tfdp StoBatch training step (tiny network, 1 step)."""
    captured = {}
    make_step = loop._make_step_fn  # pylint: disable=protected-access

    def recording(*args, **kwargs):
        step = make_step(*args, **kwargs)

        def call(*batch):
            captured.setdefault("fn", step.get_concrete_function(*batch))
            return step(*batch)
        return call

    rng = np.random.default_rng(0)
    shape, k = (8, 8, 1), 3
    x = rng.uniform(-1, 1, (40,) + shape).astype(np.float32)
    y = rng.integers(0, k, 40)
    return recording, captured, loop.Data(x, y, x[:10], y[:10], shape, k)


def _optimized_op_counts(concrete, config):
    graph_def = concrete.graph.as_graph_def()
    meta = meta_graph_pb2.MetaGraphDef(graph_def=graph_def)
    meta.collection_def["train_op"].node_list.value.extend(
        [t.op.name for t in concrete.outputs])
    # A CPU with 1 KiB of memory: the graph's estimated peak memory exceeds 0.8 x this.
    device = device_properties_pb2.DeviceProperties(type="CPU", memory_size=1024, num_cores=2,
                                                    frequency=1000)
    cluster = grappler_cluster.Cluster(devices=[device_properties_pb2.NamedDevice(
        name="/job:localhost/replica:0/task:0/device:CPU:0", properties=device)])
    optimized = tf_optimizer.OptimizeGraph(config, meta, cluster=cluster)
    ops = collections.Counter(n.op for n in optimized.node)
    for function in optimized.library.function:
        ops.update(n.op for n in function.node_def)
    return ops


def test_stobatch_step_has_no_unordered_accumulation_even_with_no_free_memory(
        tmp_path, monkeypatch):
    recording, captured, data = _stobatch_step()
    monkeypatch.setattr(loop, "_make_step_fn", recording)
    cfg = TrainConfig(method="stobatch", dataset="synthetic", model_dir=str(tmp_path / "run"),
                      epochs=1, batch_size=10, learning_rate=0.01, seed=3, epsilon=100.0,
                      options={"stobatch_architecture": "tiny", "stobatch_hidden_units": 8,
                               "stobatch_attack_iters": 2})
    loop.train(stobatch.StoBatch(cfg), data, optimizer="sgd", verbose=0)
    step = captured["fn"]
    # Control: TensorFlow's default level rewrites this step's gradient sums (AddN of the
    # tied kernel's uses) into unordered accumulations when memory is short.
    default = config_pb2.ConfigProto()
    assert default.graph_options.rewrite_options.memory_optimization == _MEM.DEFAULT_MEM_OPT
    ops = _optimized_op_counts(step, default)
    assert ops["TemporaryVariable"] > 0 and ops["AssignAdd"] > 0, dict(ops)
    # tfdp's tf.function calls carry the configuration that does not.
    tfdp_config = config_pb2.ConfigProto()
    tfdp_config.ParseFromString(
        tf_options._context().function_call_options.config_proto_serialized)  # pylint: disable=protected-access
    ops = _optimized_op_counts(step, tfdp_config)
    assert not any(ops[op] for op in _ACCUMULATION_OPS), dict(ops)
    assert ops["AddN"] > 0  # the sums are still there, as ordered AddN


# Modules that call tf_options.configure_tensorflow() when imported.
_CONFIGURING = {"tfdp.mechanisms", "tfdp.train.loop", "attacks.core", "attacks.graph", "tfdp.soundness",
                "tfdp.train.example_grads"}
_PACKAGES = ("tfdp", "attacks", "layers")


def _module_name(path):
    rel = os.path.relpath(path, _ROOT)[:-3].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def _imports(path):
    """Repository modules `path` imports anywhere (with their parent packages)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    out = set()
    for name in names:
        parts = name.split(".")
        if parts[0] in _PACKAGES:
            out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out


def test_every_module_that_runs_tf_functions_configures_tensorflow_on_import():
    files = {}
    for package in _PACKAGES:
        for dirpath, _, names in os.walk(os.path.join(_ROOT, package)):
            for name in names:
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    files[_module_name(path)] = path
    for module in _CONFIGURING:
        with open(files[module], encoding="utf-8") as f:
            assert "tf_options.configure_tensorflow()" in f.read(), module
    graph = {m: _imports(p) & set(files) for m, p in files.items()}
    runs_tf = [m for m, p in files.items()
               if any(s in open(p, encoding="utf-8").read()
                      for s in ("tf.function", ".fit(", ".predict("))
               and m != "tfdp.tf_options"]
    assert len(runs_tf) >= 10, runs_tf
    uncovered = []
    for module in runs_tf:
        seen, todo = set(), [module]
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(graph.get(m, ()))
        if not seen & _CONFIGURING:
            uncovered.append(module)
    assert not uncovered, uncovered
