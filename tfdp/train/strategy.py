"""tf.distribute strategies and the TF_CONFIG cluster: which strategy, and who is chief."""

from __future__ import annotations

import json
import os

import tensorflow as tf

STRATEGIES = ("default", "mirrored", "multi_worker")


def make_strategy(name: str) -> tf.distribute.Strategy:
    """Builds the tf.distribute strategy named by --strategy.

    "default" runs on one device; "mirrored" on every local GPU, or on every logical CPU when
    there is no GPU; "multi_worker" is MultiWorkerMirroredStrategy configured by TF_CONFIG.

    Raises:
      ValueError: if `name` is unknown.
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        if gpus:
            return tf.distribute.MirroredStrategy([d.name for d in gpus])
        return cpu_mirrored_strategy()
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError(f"strategy: unknown strategy {name!r}; choose one of {STRATEGIES}")


def cpu_mirrored_strategy() -> tf.distribute.MirroredStrategy:
    """MirroredStrategy over every logical CPU, reducing through one device.

    CPU collectives key their instances per strategy object, so two strategies in one process
    (a test session, a notebook) can collide ("Shape mismatch in the collective instance");
    reducing through one device uses no collective instances and is what CPUs need anyway.
    """
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    return tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


def tf_config_is_chief() -> bool:
    """Whether this process is the chief of the TF_CONFIG cluster (True without TF_CONFIG).

    The chief is the "chief" task, or worker 0 when the cluster has no "chief" task.
    """
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return True
    conf = json.loads(raw)
    task = conf.get("task") or {}
    return _chief_task(task.get("type"), int(task.get("index", 0)), conf.get("cluster", {}))


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process is the chief of `strategy`'s cluster (True without a cluster)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return True
    return _chief_task(resolver.task_type, resolver.task_id, resolver.cluster_spec().as_dict())


def worker_name(strategy: tf.distribute.Strategy) -> str:
    """"<task_type>-<task_id>" of this process in `strategy`'s cluster."""
    resolver = strategy.cluster_resolver
    return f"{resolver.task_type}-{resolver.task_id}"


def _chief_task(task_type, index: int, cluster) -> bool:
    if task_type in (None, "chief"):
        return True
    return task_type == "worker" and int(index) == 0 and "chief" not in cluster
