"""tfdp-bench dpsgd: argument checks, skipped peers, and a tiny interleaved run (slow)."""

import importlib.util
import io
import json
import os
import subprocess
import sys

import pytest

from tfdp.bench import dpsgd, dpsgd_worker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("kwargs,name", [
    (dict(batch_size=0), "dpsgd_bench_batch_size"),
    (dict(num_train=100), "dpsgd_bench_num_train"),
    (dict(rounds=0), "dpsgd_bench_rounds"),
    (dict(warmup=-1), "dpsgd_bench_warmup"),
    (dict(models=["imagenet"]), "dpsgd_bench_models"),
    (dict(systems=["jax"]), "dpsgd_bench_systems"),
    (dict(memory_limit_gb=-1.0), "dpsgd_bench_memory_limit_gb"),
])
def test_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        dpsgd.run(**kwargs)


def test_memory_guard_stops_the_worker_and_says_why():
    # A limit below the interpreter's own footprint trips at the first check.
    code = ("import sys, time; from tfdp.bench import dpsgd_worker; "
            "dpsgd_worker.start_memory_guard(0.001, sys.stdout); time.sleep(30)")
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 3
    msg = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "GiB resident memory (limit 0.001 GiB" in msg["failed"]


def test_memory_guard_reasons():
    gib = 2**30
    assert dpsgd_worker.guard_reason(1 * gib, 10 * gib, 8 * gib) is None
    assert "limit 8 GiB" in dpsgd_worker.guard_reason(9 * gib, 10 * gib, 8 * gib)
    # Machine nearly out of memory: a big worker stops, a small one (the reference) does not.
    assert "0.50 GiB left" in dpsgd_worker.guard_reason(3 * gib, gib // 2, 8 * gib)
    assert dpsgd_worker.guard_reason(gib, gib // 2, 8 * gib) is None
    assert dpsgd_worker.guard_reason(3 * gib, None, 8 * gib) is None


class _FakeWorker:
    """Stands in for a worker process: fixed timings; "peer-b" dies in round 2."""

    def __init__(self, system, model, args, timeout):
        del model, timeout
        assert args["memory_limit_gb"] == 8.0
        self.system, self.rounds = system, 0
        self.info = {"ready": True, "data": "fake"}

    def run(self, steps):
        del steps
        self.rounds += 1
        if self.system == "peer-b" and self.rounds == 2:
            raise RuntimeError("worker peer-b ended", -9)
        ms = {"nonprivate": 10.0, "peer-a": 20.0, "peer-b": 30.0}[self.system]
        return {"ms_per_step": ms, "mean_ms_per_step": 2 * ms}

    def close(self):
        pass


def test_a_worker_dying_mid_run_is_reported_and_the_others_continue(monkeypatch):
    monkeypatch.setattr(dpsgd, "_Worker", _FakeWorker)
    cfg = dict(batch_size=4, warmup=0, l2_clip=1.0, noise_multiplier=1.0, timeout=10,
               memory_limit_gb=8.0, rounds=3, steps=1)
    res = dpsgd._bench_model("mnist", ["nonprivate", "peer-a", "peer-b"], cfg)
    assert set(res["systems"]) == {"nonprivate", "peer-a"}
    assert res["systems"]["peer-a"]["ratio_per_round"] == [2.0, 2.0, 2.0]
    assert res["systems"]["peer-a"]["mean_ms_per_round"] == [40.0, 40.0, 40.0]
    assert res["systems"]["peer-a"]["mean_ratio_to_nonprivate"]["median"] == 2.0
    why = res["skipped"]["peer-b"]
    assert "in timed round 2" in why and "exit code -9" in why and "out of memory" in why


@pytest.mark.skipif(importlib.util.find_spec("opacus") is not None, reason="opacus installed")
def test_absent_peer_is_reported_with_install_hint(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    dpsgd_worker.main(["--system=opacus", "--model=mnist", "--batch_size=4"])
    msg = json.loads(out.getvalue().strip().splitlines()[-1])
    assert "skipped" in msg and "pip install -e '.[bench-peers]'" in msg["skipped"]


@pytest.mark.slow
def test_tiny_run_interleaves_processes():
    res = dpsgd.run(models=["mnist"], systems=["tfdp-dpsgd-auto", "static-tfdp-dpsgd-auto",
                                               "tfprivacy-dpmodel"],
                    batch_size=8, steps=1, rounds=2, warmup=0, num_train=64)
    systems = res["models"]["mnist"]["systems"]
    assert set(systems) == {"nonprivate", "tfdp-dpsgd-auto", "static-tfdp-dpsgd-auto"} | (
        {"tfprivacy-dpmodel"} if importlib.util.find_spec("tf_keras") else set())
    # tfdp-train's own run (Poisson lots, padded) against its non-private run.
    assert res["measured_path"] == "train"
    assert systems["nonprivate"]["measured_path"] == "train"
    assert systems["tfdp-dpsgd-auto"]["measured_path"] == "train"
    assert systems["tfdp-dpsgd-auto"]["setup"]["batch_schedule"] == "poisson"
    assert systems["tfdp-dpsgd-auto"]["setup"]["pads_lots"] is True
    assert systems["static-tfdp-dpsgd-auto"]["measured_path"] == "static"
    pids = {s["setup"]["pid"] for s in systems.values()}
    assert len(pids) == len(systems) and os.getpid() not in pids  # one process each
    assert len(systems["nonprivate"]["ms_per_round"]) == 2
    assert systems["nonprivate"]["ratio_to_nonprivate"]["median"] == 1.0
    assert res["ratio"] == systems["tfdp-dpsgd-auto"]["ratio_to_nonprivate"]["median"]
    assert len(res["loadavg_before"]) == 3
    if not importlib.util.find_spec("tf_keras"):
        assert "bench-peers" in res["models"]["mnist"]["skipped"]["tfprivacy-dpmodel"]


@pytest.mark.slow
def test_cli_writes_json(tmp_path):
    out = tmp_path / "d.json"
    env = dict(os.environ, PYTHONPATH=ROOT)
    subprocess.run([sys.executable, "-m", "tfdp.apps.bench", "dpsgd",
                    "--dpsgd_bench_models=mnist", "--dpsgd_bench_systems=nonprivate",
                    "--dpsgd_bench_batch_size=4", "--dpsgd_bench_steps=1",
                    "--dpsgd_bench_rounds=1", f"--output={out}"],
                   check=True, cwd=ROOT, env=env, capture_output=True, timeout=600)
    assert json.loads(out.read_text())["benchmark"] == "dpsgd"
