"""The Kubernetes scheduler extender at 5,000 nodes, over HTTP against `a3fast serve` (a process of
its own on 127.0.0.1), as kube-scheduler calls it.

- NodeNames mode (nodeCacheCapable): filter + prioritize of a pod over 5,000 node names, p50.
- Nodes mode: filter of a pod over 5,000 Node objects of about 6.7 KB each (status, images,
  conditions, labels and the a3.dev/declaration annotation, as the API server serialises them),
  median; and /healthz answered while such filters run back to back, p99, beside /healthz idle.
- The trace bytes a pod's repeated identical filter adds.
"""
from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any

import orjson

from .processes import serve_process

__all__ = ["bench_k8s", "node_object", "NODES"]

NODES = 5_000


def node_object(declaration: dict[str, Any], k: int) -> dict[str, Any]:
    """A core/v1 Node as the API server serialises it, declaring `declaration` as an agent."""
    name = declaration["agent"]["name"]
    images = [{"names": [f"registry.k8s.io/example/image-{k % 7}-{j}@sha256:{k * 31 + j:064x}",
                         f"registry.k8s.io/example/image-{k % 7}-{j}:v1.{j}.0"], "sizeBytes": 10_000_000 + j}
              for j in range(16)]
    stamp = "2026-01-01T00:00:00Z"
    return {"metadata": {"name": name, "uid": f"{k:08x}-0000-4000-8000-{k:012x}", "resourceVersion": str(1000 + k),
                         "creationTimestamp": stamp,
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": f"zone-{k % 3}",
                                    "node.kubernetes.io/instance-type": "m5.xlarge"},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                         "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                                         "a3.dev/declaration": orjson.dumps(declaration).decode()}},
            "spec": {"podCIDR": f"10.{k // 256 % 256}.{k % 256}.0/24", "providerID": f"aws:///zone/i-{k:017x}"},
            "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                       "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "110"},
                       "conditions": [{"type": t, "status": "False", "lastHeartbeatTime": stamp,
                                       "lastTransitionTime": stamp, "reason": "Kubelet" + t,
                                       "message": "kubelet has no " + t} for t in
                                      ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")],
                       "addresses": [{"type": "InternalIP", "address": f"10.0.{k // 256 % 256}.{k % 256}"},
                                     {"type": "Hostname", "address": name}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                       "nodeInfo": {"machineID": f"{k:032x}", "systemUUID": f"{k:032x}", "bootID": f"{k:032x}",
                                    "kernelVersion": "6.1.0", "osImage": "Ubuntu 24.04",
                                    "containerRuntimeVersion": "containerd://1.7", "kubeletVersion": "v1.31.0",
                                    "kubeProxyVersion": "v1.31.0", "operatingSystem": "linux",
                                    "architecture": "amd64"},
                       "images": images}}


def _pod(requirements: dict[str, Any], uid: str) -> dict[str, Any]:
    return {"metadata": {"name": uid, "namespace": "default", "uid": uid,
                         "annotations": {"a3.dev/requirements": orjson.dumps(requirements).decode()}},
            "spec": {"containers": [{"name": "task", "image": "busybox",
                                     "resources": {"limits": {"a3.dev/agent": "1"}}}]}}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _in_process(declarations, task, names, rounds: int) -> dict[str, float]:
    """The same NodeNames filter + prioritize called on the extender directly: its own cost,
    without HTTP."""
    import asyncio

    from ..schema import parse_declaration, parse_requirements
    from ..service.k8s import Extender
    from ..service.state import ServiceState

    state = ServiceState()
    state.open()
    state.put_agents([parse_declaration(d) for d in declarations])
    extender = Extender(state)

    async def run() -> tuple[list[float], list[float]]:
        times, cpu = [], []
        for k in range(rounds + 2):
            pod = _pod(task, f"inproc-{k}")
            started, began = time.perf_counter(), time.thread_time()
            answer = await extender.filter(orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}))
            passed = orjson.loads(answer)["NodeNames"]
            await extender.prioritize(orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": passed}))
            times.append(time.perf_counter() - started)
            cpu.append(time.thread_time() - began)
        return times, cpu

    def floor() -> list[float]:
        """The placement alone, as the filter asks it: the same task over the 5,000 offered names."""
        requirements = parse_requirements(task)
        times = []
        for _ in range(rounds + 2):
            began = time.thread_time()
            state.fleet.place(requirements, candidates=names, remember_session=False)
            times.append(time.thread_time() - began)
        return times
    try:
        times, cpu = asyncio.run(run())
        place = floor()
    finally:
        extender.close()
        state.close()
    # CPU time of this thread beside the wall time: the machine is shared, and its load shows in
    # the wall time only
    return {"names_filter_prioritize_in_process_p50_ms": statistics.median(times[2:]) * 1e3,
            "names_filter_prioritize_in_process_cpu_p50_ms": statistics.median(cpu[2:]) * 1e3,
            "names_place_candidates_cpu_p50_ms": statistics.median(place[2:]) * 1e3}


def bench_k8s(quick: bool = False) -> dict[str, Any]:
    import httpx

    from ..workload import generate_fleet, generate_tasks

    declarations = generate_fleet(NODES, seed=0)
    task = generate_tasks(declarations, 1, seed=0)[0]
    names = [d["agent"]["name"] for d in declarations]
    rounds = 10 if quick else 30
    out: dict[str, Any] = {"nodes": NODES}
    with_fleet = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"a3fast-bench-k8s-{os.getpid()}.jsonl")
    with open(with_fleet, "wb") as fh:
        fh.write(b"\n".join(orjson.dumps(d) for d in declarations))
    server = serve_process("--fleet", with_fleet)
    try:
        client = httpx.Client(base_url=server.url, timeout=60.0)
        deadline = time.monotonic() + 60
        while client.get("/readyz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        headers = {"Content-Type": "application/json"}
        # NodeNames: filter + prioritize, a new pod each round
        both = []
        for k in range(rounds + 2):
            pod = _pod(task, f"names-{k}")
            body = orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})
            started = time.perf_counter()
            answer = client.post("/k8s/filter", content=body, headers=headers)
            answer.raise_for_status()
            # as kube-scheduler does: prioritize the nodes the filter passed
            passed = orjson.loads(answer.content)["NodeNames"]
            client.post("/k8s/prioritize", content=orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": passed}),
                        headers=headers).raise_for_status()
            both.append(time.perf_counter() - started)
        out["names_filter_prioritize_p50_ms"] = statistics.median(both[2:]) * 1e3
        out.update(_in_process(declarations, task, names, rounds))
        # the trace bytes a repeated identical filter adds
        body = orjson.dumps({"Pod": _pod(task, "pending"), "Nodes": None, "NodeNames": names})
        client.post("/k8s/filter", content=body, headers=headers).raise_for_status()
        size = len(client.get("/v1/trace").content)
        for _ in range(10):
            client.post("/k8s/filter", content=body, headers=headers).raise_for_status()
        out["repeated_filter_trace_bytes"] = (len(client.get("/v1/trace").content) - size) / 10
        # /healthz idle: the baseline of the one under load
        idle = []
        for _ in range(200):
            started = time.perf_counter()
            client.get("/healthz")
            idle.append(time.perf_counter() - started)
        out["healthz_idle_p99_ms"] = _percentile(idle, 0.99) * 1e3
        # Nodes: 5,000 Node objects, filters back to back while /healthz is asked every 10 ms
        nodes_body = orjson.dumps({"Pod": _pod(task, "nodes"),
                                   "Nodes": {"metadata": {}, "items": [node_object(d, k) for k, d in
                                                                       enumerate(declarations)]},
                                   "NodeNames": None})
        out["nodes_body_mb"] = len(nodes_body) / 1e6
        started = time.perf_counter()
        orjson.loads(nodes_body)
        out["nodes_body_orjson_parse_ms"] = (time.perf_counter() - started) * 1e3
        filters: list[float] = []
        warm_from: list[float] = []
        stop = threading.Event()

        def filtering() -> None:
            with httpx.Client(base_url=server.url, timeout=60.0) as own:
                for _ in range(4 if quick else 8):
                    began = time.perf_counter()
                    own.post("/k8s/filter", content=nodes_body, headers=headers).raise_for_status()
                    filters.append(time.perf_counter() - began)
                    if len(filters) == 1:
                        warm_from.append(time.perf_counter())
            stop.set()
        worker = threading.Thread(target=filtering)
        worker.start()
        loaded: list[tuple[float, float]] = []
        while not stop.is_set():
            began = time.perf_counter()
            client.get("/healthz")
            loaded.append((began, time.perf_counter() - began))
            time.sleep(0.01)
        worker.join()
        out["nodes_filter_first_ms"] = filters[0] * 1e3
        out["nodes_filter_median_ms"] = statistics.median(filters[1:]) * 1e3
        # the first filter parses every declaration and builds the fleet; the rest find both kept
        warm = [t for began, t in loaded if began >= warm_from[0]] if warm_from else []
        out["healthz_under_nodes_filters_p99_ms"] = _percentile(warm or [t for _, t in loaded], 0.99) * 1e3
        out["healthz_under_first_nodes_filter_max_ms"] = max(t for began, t in loaded if not warm_from
                                                            or began < warm_from[0]) * 1e3
        out["healthz_under_nodes_filters_samples"] = len(warm)
        client.close()
    finally:
        server.stop()
        os.unlink(with_fleet)
    return out
