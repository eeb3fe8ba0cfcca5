"""A ShardedFleet over a real two-node Ray cluster on this machine (tests/ray_cluster.py): shards
spread over both nodes by resource requirements; the second node's raylet killed by its process
id; the next placement raises a ShardError naming every lost shard within the configured timeout
(no placement on a subset); the lost shards restarted on the surviving node from their checkpoints
and journals place exactly as before, and a snapshot saved before the loss loads onto the
surviving node and places so too. Every process the test started is ended.
"""
from __future__ import annotations

import os
import random
import time

import pytest

from a3fast import Fleet
from distributed_worlds import declaration, ray_or_fail, requirements, records
from ray_cluster import TwoNodeCluster

pytestmark = pytest.mark.slow

TIMEOUT = 5.0
START = 60.0



@pytest.fixture()
def cluster():
    ray = ray_or_fail()
    if ray.is_initialized():
        # a local Ray an earlier module started in this process (and left connected); its tests
        # are done, and a later module that needs one starts it again
        ray.shutdown()
    nodes = TwoNodeCluster()
    try:
        ray.init(address=nodes.address, log_to_driver=False, configure_logging=False)
        yield nodes
    finally:
        ray.shutdown()
        nodes.stop()
        assert nodes.left() == {}


@pytest.fixture()
def ray(cluster):
    """The ray module, its driver connected to the two-node cluster."""
    return ray_or_fail()


def test_a_lost_node_fails_loudly_and_its_shards_recover_on_the_survivor(ray, cluster, tmp_path):
    from a3fast.distributed import ShardedFleet, ShardError

    started = time.monotonic()
    rng = random.Random(21)
    docs = [declaration(rng, f"agent-{i:03d}") for i in range(120)]
    one = Fleet()
    one.extend(docs)
    on = [{cluster.head: 1}, {cluster.second: 1}] * 2
    # starting an actor (a worker process) takes seconds on a busy 2-core machine: the short
    # timeout is for the placements
    many = ShardedFleet(4, state_dir=str(tmp_path / "state"), timeout=START, resources=on, max_restarts=0)
    many.timeout = TIMEOUT
    many.extend(docs)
    for name in ("agent-001", "agent-050"):
        for fleet in (one, many):
            fleet.record_outcome(name, "review", True)
    many.save(tmp_path / "snapshot")
    tasks = [requirements(rng, one.names()) for _ in range(12)]
    for task in tasks[:4]:
        assert records(many.place(task)) == records(one.place(task))
    states = many.shard_states()
    nodes = {s["shard"]: s["node"] for s in states}
    assert len(set(nodes.values())) == 2, "the shards are spread over both nodes"

    cluster.kill_raylet(1)
    # the node's shards end once their processes find their raylet gone
    lost_pids = [s["pid"] for s in states if s["node"] == nodes[1]]
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{pid}") for pid in lost_pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    asked = time.monotonic()
    with pytest.raises(ShardError) as lost:
        many.place(tasks[4])
    assert time.monotonic() - asked <= TIMEOUT + 2.0
    assert lost.value.shards == [1, 3]
    assert str(lost.value).startswith("shards 1, 3: ") and "nothing was decided" in str(lost.value)

    many.timeout = START
    many.restart_shards(lost.value.shards, resources={cluster.head: 1})
    many.timeout = TIMEOUT
    assert {s["node"] for s in many.shard_states()} == {nodes[0]}
    for task in tasks[4:8]:
        assert records(many.place(task)) == records(one.place(task))

    # the snapshot saved before the loss, every shard on the surviving node
    again = ShardedFleet.load(tmp_path / "snapshot", state_dir=str(tmp_path / "again"), timeout=START,
                              resources=[{cluster.head: 1}] * 4)
    reference = Fleet()
    reference.extend(docs)
    for name in ("agent-001", "agent-050"):
        reference.record_outcome(name, "review", True)
    for task in tasks[8:]:
        assert records(again.place(task)) == records(reference.place(task))
    assert time.monotonic() - started < 120
