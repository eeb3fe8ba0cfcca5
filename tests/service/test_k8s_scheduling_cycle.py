"""A simulated kube-scheduler over 5,000 nodes using a3fast as its extender (NodeNames mode): the
feasible share sampled as percentageOfNodesToScore does, Filter and Prioritize through the
extender client of tests/k8s_extender_client.py, retries with backoff, preemption reading
FailedNodes (resolvable) against FailedAndUnresolvableNodes. The trace must hold the decisions the
scheduler made, and retries must not grow it without bound."""
from __future__ import annotations

import orjson
import pytest

pytest.importorskip("starlette")
pytest.importorskip("kubernetes")

from starlette.testclient import TestClient  # noqa: E402

from a3fast.service.app import create_app  # noqa: E402
from a3fast.service.config import ServiceConfig  # noqa: E402
from a3fast.workload import generate_fleet, generate_tasks  # noqa: E402
from k8s_extender_client import ExtenderClient  # noqa: E402
from test_k8s_extender import decisions, node, pod, wait_ready  # noqa: E402

NODES = 5_000
AGENTS = 4_500
#: kube-scheduler's backoff: 1 s doubling to 10 s (podInitialBackoffSeconds, podMaxBackoffSeconds)
BACKOFF = (1, 2, 4, 8, 10, 10)


def feasible_to_find(n: int, percentage: int = 0) -> int:
    """numFeasibleNodesToFind of pkg/scheduler/schedule_one.go (adaptive when percentage is 0)."""
    if n < 100:
        return n
    if percentage == 0:
        percentage = max(50 - n // 125, 5)
    return max(n * percentage // 100, 100)


class Scheduler:
    """The parts of kube-scheduler's cycle an extender sees."""

    def __init__(self, nodes, extender: ExtenderClient):
        self.nodes = nodes
        self.extender = extender
        self.next_start = 0
        self.clock = 0.0

    def offered(self) -> list[dict]:
        """The feasible share: every node passes the in-tree filters here; the search starts where
        the previous cycle stopped (nextStartNodeIndex)."""
        k = feasible_to_find(len(self.nodes))
        sample = [self.nodes[(self.next_start + i) % len(self.nodes)] for i in range(k)]
        self.next_start = (self.next_start + k) % len(self.nodes)
        return sample

    def attempt(self, the_pod, offered):
        passed, failed, unresolvable = self.extender.filter(the_pod, offered)
        if not passed:
            # preemption considers only nodes whose failure it could resolve by evicting pods
            return None, passed, failed, unresolvable, [n for n in failed if n not in unresolvable]
        scores = self.extender.prioritize(the_pod, passed)
        best = max(score for _, score in scores)
        return [h for h, s in scores if s == best], passed, failed, unresolvable, []


@pytest.fixture(scope="module")
def cluster():
    declarations = generate_fleet(AGENTS, seed=3)
    agent_names = [d["agent"]["name"] for d in declarations]
    # plain nodes between the agents, as in a cluster where a few nodes host agents
    names = []
    plain = iter(f"worker-{k:04d}" for k in range(NODES - AGENTS))
    for k, name in enumerate(agent_names):
        names.append(name)
        if k % 9 == 8:
            names.append(next(plain))
    names.extend(plain)
    # the whole fleet in one bulk add: past the default --max-bulk-body (docs/service.md, Limits)
    app = create_app(ServiceConfig(max_bulk_body=16 * 1024 * 1024))
    with TestClient(app) as client:
        wait_ready(client)
        body = b"\n".join(orjson.dumps(d) for d in declarations)
        assert client.post("/v1/agents", content=body).status_code == 200
        yield client, declarations, [node(n) for n in names], set(agent_names), agent_names


def test_a_scheduling_cycle_over_5000_nodes_records_the_decisions_made(cluster):
    client, declarations, nodes, agents, join_order = cluster
    position = {n: k for k, n in enumerate(join_order)}
    scheduler = Scheduler(nodes, ExtenderClient("http://testserver/k8s", node_cache_capable=True, client=client))
    tasks = generate_tasks(declarations, 12, seed=5)
    tasks.append({"v": "1.0", "capabilities": [{"name": "no.such.capability", "version": 1}], "clearances": []})
    for k, requirements in enumerate(tasks):
        uid = f"pod-{k}"
        the_pod = pod(requirements, uid=uid, name=uid)
        attempts = []
        for delay in BACKOFF:
            offered = scheduler.offered()
            chosen, passed, failed, unresolvable, preemptible = scheduler.attempt(the_pod, offered)
            attempts.append((offered, chosen, passed))
            # nothing a3fast refuses is left for preemption to evict pods for
            assert failed == {} and preemptible == []
            offered_names = [n["metadata"]["name"] for n in offered]
            assert set(unresolvable) | {n["metadata"]["name"] for n in passed} == set(offered_names)
            if chosen is not None:
                break
            scheduler.clock += delay
        recorded = decisions(client, uid)
        assert len(recorded) == len(attempts)
        for (offered, chosen, passed), (candidates, agent) in zip(attempts, recorded):
            offered_agents = sorted((n["metadata"]["name"] for n in offered if n["metadata"]["name"] in agents),
                                    key=position.__getitem__)
            assert candidates == offered_agents
            if chosen is None:
                assert agent is None
            else:
                # a3fast's first choice is one the scheduler, ranking by its scores, could pick
                assert agent in chosen and agent in {n["metadata"]["name"] for n in passed}


def test_a_pending_pod_retried_with_backoff_adds_at_most_1_kb_per_retry(cluster):
    client, declarations, nodes, agents, join_order = cluster
    extender = ExtenderClient("http://testserver/k8s", node_cache_capable=True, client=client)
    impossible = {"v": "1.0", "capabilities": [{"name": "no.such.capability", "version": 1}], "clearances": []}
    the_pod = pod(impossible, uid="pending", name="pending")
    offered = nodes[:feasible_to_find(len(nodes))]
    extender.filter(the_pod, offered)
    size = len(client.get("/v1/trace").content)
    for _ in BACKOFF:
        passed, failed, _ = extender.filter(the_pod, offered)
        assert passed == [] and failed == {}
    assert len(client.get("/v1/trace").content) - size <= 1024
