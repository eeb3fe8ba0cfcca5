"""Record the Kubernetes-style trace of the README's replay example: a3fast's scheduler extender,
in its NodeNames mode, answering kube-scheduler's filter for 300 pods of three namespaces, each
offered the nodes kube-scheduler's own filters left (a random subset here), on a fleet of 150 agents
(`a3fast gen-fleet --agents 150`). Writes cluster-fleet.jsonl and cluster-trace.jsonl beside itself.

    python examples/replay/record_cluster_trace.py
"""
from __future__ import annotations

import random
from pathlib import Path

import orjson
from starlette.testclient import TestClient

from a3fast.service.app import create_app
from a3fast.service.config import ServiceConfig
from a3fast.workload import generate_fleet, generate_tasks

HERE = Path(__file__).resolve().parent
NAMESPACES = ("shop", "billing", "support")


def main() -> None:
    docs = generate_fleet(150, 0)
    tasks = generate_tasks(docs, 300, 0)
    rng = random.Random(0)
    (HERE / "cluster-fleet.jsonl").write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in docs))
    with TestClient(create_app(ServiceConfig())) as client:
        while client.get("/readyz").status_code != 200:
            pass
        for d in docs:
            client.put(f"/v1/agents/{d['agent']['name']}", json=d).raise_for_status()
        names = [d["agent"]["name"] for d in docs]
        for i, task in enumerate(tasks):
            namespace = NAMESPACES[i % len(NAMESPACES)]
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"worker-{i:03d}", "namespace": namespace, "uid": f"pod-uid-{i:03d}",
                                "annotations": {"a3.dev/requirements": orjson.dumps(task).decode()}},
                   "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
            offered = sorted(rng.sample(names, rng.randint(60, len(names))))
            answer = client.post("/k8s/filter", content=orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": offered}))
            answer.raise_for_status()
        (HERE / "cluster-trace.jsonl").write_bytes(client.get("/v1/trace").content)


if __name__ == "__main__":
    main()
