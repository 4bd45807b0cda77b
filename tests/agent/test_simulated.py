"""Simulated GPUs shared by processes, and simjob's CUDA-like OOM."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.backends.simulated import SimulatedBackend
from agent.backends.simulated_state import STATE_ENV, SimulatedGpuStore, SimulatedOutOfMemory
from agent.cluster import ClusterFileError, SimulatedNode, load_cluster, parse_cluster
from agent.protocol import GpuInfo
from agent.simjob import SimjobError, parse_peaks


def node() -> SimulatedNode:
    (nodes_spec,) = parse_cluster({"nodes": [{"name": "n", "gpus": [{"model": "T4", "count": 2}]}]})
    return nodes_spec


def simjob(state: Path, uuids: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, STATE_ENV: str(state), "CUDA_VISIBLE_DEVICES": ",".join(uuids)}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "simjob", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cluster_file_resolves_models_and_stable_uuids(repo_root: Path) -> None:
    nodes = load_cluster(repo_root / "agent" / "clusters" / "example.yaml")
    models = {gpu.model for n in nodes for gpu in n.gpus}
    assert len(nodes) >= 2 and len(models) >= 2
    again = load_cluster(repo_root / "agent" / "clusters" / "example.yaml")
    assert [g.uuid for n in nodes for g in n.gpus] == [g.uuid for n in again for g in n.gpus]
    (t4,) = parse_cluster({"nodes": [{"name": "x", "gpus": [{"model": "T4"}]}]})
    assert t4.gpus[0].model == "Tesla T4" and t4.gpus[0].memory_total_mib == 15360


@pytest.mark.parametrize(
    "data, message",
    [
        (None, "non-empty 'nodes'"),
        ({"nodes": [{"gpus": [{"model": "T4"}]}]}, "needs a 'name'"),
        ({"nodes": [{"name": "node a", "gpus": [{"model": "T4"}]}]}, "'node a': at most 128"),
        (
            {"nodes": [{"name": "a", "gpus": [{"model": "T4", "cuda_driver_version": 12}]}]},
            "'cuda_driver_version': Input should be greater than or equal to 1000",
        ),
        ({"nodes": [{"name": "a", "gpus": []}]}, "non-empty list"),
        ({"nodes": [{"name": "a", "gpus": [{"model": "Acme"}]}]}, "memory_mib"),
        ({"nodes": [{"name": "a", "gpus": [{"model": "T4", "count": 0}]}]}, "count"),
        ({"nodes": [{"name": "a", "gpus": [{"model": "T4"}]}] * 2}, "twice"),
    ],
)
def test_bad_cluster_files_say_what_is_wrong(data: object, message: str) -> None:
    with pytest.raises(ClusterFileError, match=message):
        parse_cluster(data)


def test_store_accounts_memory_per_process_and_refuses_overflow(tmp_path: Path) -> None:
    store = SimulatedGpuStore(tmp_path)
    store.create(GpuInfo(uuid="GPU-x", index=0, model="Tesla T4", memory_total_mib=1000))
    me = os.getpid()
    store.set_usage("GPU-x", me, 600)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(SimulatedOutOfMemory) as raised:
            store.set_usage("GPU-x", sleeper.pid, 500)
        assert raised.value.free_mib == 400
        store.set_usage("GPU-x", sleeper.pid, 400)
        assert sum(e["mib"] for e in store.read("GPU-x")["processes"].values()) == 1000
    finally:
        sleeper.kill()
        sleeper.wait()
    # a dead process's memory is freed, as the driver frees it
    assert list(store.read("GPU-x")["processes"]) == [str(me)]
    store.release("GPU-x", me)
    assert store.read("GPU-x")["processes"] == {}


def test_backend_samples_what_simjobs_hold(tmp_path: Path) -> None:
    backend = SimulatedBackend(node(), tmp_path)
    first, second = backend.devices()
    job = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "simjob", "--peak-mib", "T4=3000", "--seconds", "30"],
        env={**os.environ, **backend.job_environment(), "CUDA_VISIBLE_DEVICES": first.uuid},
    )
    try:
        for _ in range(100):
            sample = {s.uuid: s for s in backend.sample()}
            if sample[first.uuid].memory_used_mib:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        assert sample[first.uuid].memory_used_mib == 3000
        assert [p.pid for p in sample[first.uuid].processes] == [job.pid]
        assert sample[second.uuid].memory_used_mib == 0
    finally:
        job.terminate()
        assert job.wait(timeout=10) == 143
    assert {s.memory_used_mib for s in backend.sample()} == {0}


def test_simjob_dies_like_a_pytorch_cuda_oom(tmp_path: Path) -> None:
    backend = SimulatedBackend(node(), tmp_path)
    gpu = backend.devices()[0]
    result = simjob(
        tmp_path, [gpu.uuid], "--peak-mib", "20000", "--seconds", "1", "--ramp-seconds", "0.5"
    )
    assert result.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory." in result.stderr
    assert "GPU 0 has a total capacity of 15.00 GiB" in result.stderr
    assert backend.sample()[0].memory_used_mib == 0


def test_simjob_peaks_per_model_and_gang(tmp_path: Path) -> None:
    backend = SimulatedBackend(node(), tmp_path)
    uuids = [d.uuid for d in backend.devices()]
    ok = simjob(tmp_path, uuids, "--peak-mib", "A100-40GB=30000,T4=1000", "--seconds", "0")
    assert ok.returncode == 0, ok.stderr
    missing = simjob(tmp_path, uuids, "--peak-mib", "A100-40GB=30000", "--seconds", "0")
    assert missing.returncode == 2 and "no peak for GPU model 'Tesla T4'" in missing.stderr
    no_gpu = simjob(tmp_path, [], "--peak-mib", "10", "--seconds", "0")
    assert no_gpu.returncode == 2 and "no simulated GPU visible" in no_gpu.stderr
    assert "Traceback" not in missing.stderr + no_gpu.stderr


@pytest.mark.parametrize("text", ["0", "-5", "abc", "T4=", "=5", "T4=1,x"])
def test_bad_peaks_are_refused(text: str) -> None:
    with pytest.raises(SimjobError):
        parse_peaks(text)


def test_concurrent_simjobs_never_overfill_a_gpu(tmp_path: Path) -> None:
    store = SimulatedGpuStore(tmp_path)
    store.create(GpuInfo(uuid="GPU-shared", index=0, model="Tesla T4", memory_total_mib=10000))
    env = {**os.environ, STATE_ENV: str(tmp_path), "CUDA_VISIBLE_DEVICES": "GPU-shared"}
    # each holds its 3000 MiB for 15 s: long past the last one's start on a slow machine
    command = [sys.executable, "-m", "service.cli", "simjob", "--peak-mib", "3000"]
    jobs = [
        subprocess.Popen(
            [*command, "--seconds", "15"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    results = [(job.wait(timeout=60), job.stderr.read() if job.stderr else "") for job in jobs]
    assert sorted(code for code, _ in results) == [0, 0, 0, 1, 1, 1]
    assert all("CUDA out of memory" in err for code, err in results if code == 1)
    assert store.read("GPU-shared")["processes"] == {}
