"""Process-wide TensorFlow settings under which tfdp runs: bit-reproducible graphs.

Grappler's memory optimizer, at its default level, has a *scheduling* pass that rewrites a
multi-input ``AddN`` (e.g. the gradient of a weight used several times) into a
``TemporaryVariable`` plus one ``AssignAdd`` per input. Nothing orders those ``AssignAdd``s,
so a float sum then depends on the executor's order, which changes between processes. The
pass fires only when the graph's estimated peak memory exceeds 0.8 x the memory TensorFlow
sees as available, on CPU the machine's free RAM when the function is first optimised: the
same command gave identical weights in one pair of processes and different ones in the
next (docs/stobatch.md, "Reproducibility across processes").

`configure_tensorflow` sets the memory optimizer to ``SWAPPING_HEURISTICS``, the level that
keeps everything the default level does (swapping tensors to host memory on GPUs, which moves
values but does not change them, and relaxing allocator constraints) except the scheduling
pass. The public ``tf.config.optimizer.set_experimental_options`` has no memory-optimizer
key (TF 2.21), so this module writes the level into the eager context's base ``ConfigProto``,
from which TensorFlow builds the ``config_proto`` attribute of every ``tf.function`` call in
every thread (a private attribute: `memory_optimization_level` reads it back and the tests in
tests/train/test_tf_options.py fail if TensorFlow changes it).

tfdp calls `configure_tensorflow` when its TensorFlow modules are imported: the trainers
(``tfdp.train.base``), ``tfdp.checks`` (imported by evaluation, certification, export, the
layers and ``attacks.core``), ``attacks.graph`` and the benchmarks. It is idempotent.
"""

from __future__ import annotations

import threading

import tensorflow as tf
from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
from tensorflow.python.eager import context as tf_context

__all__ = ["MEMORY_OPTIMIZATION", "configure_tensorflow", "memory_optimization_level"]

# Every pass of the default level except the scheduling pass (AddN -> TemporaryVariable +
# unordered AssignAdds).
MEMORY_OPTIMIZATION = rewriter_config_pb2.RewriterConfig.SWAPPING_HEURISTICS

_LOCK = threading.Lock()


def _context():
    ctx = tf_context.context()
    if not hasattr(ctx, "_config") or not hasattr(ctx, "_thread_local_data"):
        raise RuntimeError(
            f"tfdp.tf_options: TensorFlow {tf.__version__} changed its eager context (no "
            "_config / _thread_local_data); update configure_tensorflow, or tf.function "
            "steps may not be bit-reproducible across processes")
    return ctx


def configure_tensorflow() -> None:
    """Turns grappler's memory-optimizer scheduling pass off for every tf.function (idempotent).

    Call it before the process's other threads first call a tf.function: each thread caches
    its function-call options when it first needs them (the calling thread's cache is reset
    here). Options set later through ``tf.config.optimizer.set_experimental_options`` keep it.
    """
    with _LOCK:
        ctx = _context()
        base = ctx._config  # pylint: disable=protected-access
        if (base is not None and base.graph_options.rewrite_options.memory_optimization
                == MEMORY_OPTIMIZATION):
            return
        config = config_pb2.ConfigProto()
        if base is not None:
            config.CopyFrom(base)
        config.graph_options.rewrite_options.memory_optimization = MEMORY_OPTIMIZATION
        ctx._config = config  # pylint: disable=protected-access
        # This thread's cached tf.function call options were built from the old config.
        ctx._thread_local_data.function_call_options = None  # pylint: disable=protected-access


def memory_optimization_level() -> int:
    """The memory-optimizer level the next tf.function call in this thread is optimised with.

    Read from the ``config_proto`` attribute TensorFlow attaches to the call, i.e. what
    grappler receives (a ``RewriterConfig.MemOptType`` value).
    """
    serialized = _context().function_call_options.config_proto_serialized
    config = config_pb2.ConfigProto()
    config.ParseFromString(serialized)
    return config.graph_options.rewrite_options.memory_optimization
