"""`a3fast serve --shards N`: a ShardedFleet behind the service answers as a plain Fleet does, the
service's journal brings it back after kill -9, a clean stop saves it with ShardedFleet.save and a
start loads it (no declaration replayed), and a shard that fails answers 503 naming it."""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import orjson
import pytest

pytest.importorskip("starlette")
pytest.importorskip("ray")

from distributed_worlds import gone, local_ray, without_timings  # noqa: E402
from service_process import SECTION_10_AGENTS, SECTION_10_TASK, Server  # noqa: E402

SHARDED = ("--shards", "2")


def _bytes(records) -> list[bytes]:
    return [without_timings(orjson.dumps(r)) for r in records]


def _changes(server: Server) -> None:
    """Every kind of change the service journals, on the §10 fleet."""
    c = server.client
    for doc in SECTION_10_AGENTS:
        assert c.put(f"/v1/agents/{doc['agent']['name']}", json=doc).status_code == 200
    extra = [{"v": "1.0", "agent": {"name": f"extra-{k}", "namespace": "support"},
              "capabilities": [{"name": "order.investigate", "version": 2}],
              "clearances": ["orders.read"], "residency": ["eu"]} for k in range(4)]
    assert c.post("/v1/agents", content=b"\n".join(orjson.dumps(d) for d in extra)).json() == {"count": 4}
    assert c.delete("/v1/agents/extra-1").status_code == 200
    assert c.post("/v1/outcomes", json={"agent": "extra-2", "requirements": SECTION_10_TASK,
                                        "success": True}).status_code == 200
    assert c.post("/v1/outcomes", json={"agent": "order-analyst", "requirements": SECTION_10_TASK,
                                        "success": False}).status_code == 200
    assert c.put("/v1/sessions/s9/extra-3").status_code == 200
    assert c.put("/v1/agents/extra-1", json=extra[1]).status_code == 200   # back in its old place


def _placements(server: Server) -> list[bytes]:
    c = server.client
    out = []
    for body, query in (({"requirements": SECTION_10_TASK}, ""),
                        ({"requirements": SECTION_10_TASK, "session": "s1"}, "?record=compact"),
                        ({"requirements": SECTION_10_TASK, "session": "s9"}, ""),
                        ({"requirements": {**SECTION_10_TASK, "exclude": ["extra-2"]}, "session": "s1"}, ""),
                        ({"requirements": {"v": "1.0", "capabilities": [{"name": "no.such", "version": 1}]}}, "")):
        answer = c.post(f"/v1/place{query}", json=body)
        assert answer.status_code == 200, answer.text
        out.extend(_bytes(answer.json()["records"]))
    return out


@pytest.mark.slow
def test_serve_with_shards_answers_the_section_10_example_as_a_plain_server(tmp_path):
    plain = Server()
    sharded = Server(*SHARDED, "--state", str(tmp_path / "s"))
    try:
        for server in (plain, sharded):
            for doc in SECTION_10_AGENTS:
                server.client.put(f"/v1/agents/{doc['agent']['name']}", json=doc)
        answers = [_bytes(s.client.post("/v1/place", json={"requirements": SECTION_10_TASK}).json()["records"])
                   for s in (plain, sharded)]
        assert answers[0] == answers[1]
        assert b'"filters_failed":[{"candidate":"summariser","predicate":"capability:order.investigate/2"}]' in answers[1][2]
        _changes(plain)
        _changes(sharded)
        assert _placements(plain) == _placements(sharded)
        traces = [s.client.get("/v1/trace").content for s in (plain, sharded)]
        assert [without_timings(line) for line in traces[0].splitlines()] == \
            [without_timings(line) for line in traces[1].splitlines()]
        verdict = sharded.client.post("/v1/verify", content=traces[1]).json()
        assert verdict["valid"], verdict
        assert sharded.client.get("/v1/agents/extra-3").json()["declaration"]["agent"]["name"] == "extra-3"
    finally:
        assert plain.stop() == 0
        assert sharded.stop() == 0


@pytest.mark.slow
def test_serve_with_shards_keeps_every_acknowledged_change_after_kill_9(tmp_path):
    state, plain_state = str(tmp_path / "s"), str(tmp_path / "plain")
    sharded = Server(*SHARDED, "--state", state)
    _changes(sharded)
    before = sharded.client.get("/v1/trace").content
    sharded.kill()
    restarted = Server(*SHARDED, "--state", state)
    plain = Server("--state", plain_state)
    try:
        assert restarted.client.get("/v1/trace").content == before
        names = restarted.client.get("/v1/agents").json()["names"]
        assert names == sorted(["order-analyst", "summariser", "extra-0", "extra-1", "extra-2", "extra-3"])
        _changes(plain)
        assert _placements(restarted) == _placements(plain)
    finally:
        assert restarted.stop() == 0
        assert plain.stop() == 0
    # a clean stop takes a checkpoint: the sharded fleet saved by its shards (ShardedFleet.save), a
    # plain one by Fleet.save; the next start loads them and replays no journal entry (the current
    # generation is empty), and both restart to the same next placements
    (saved,) = (tmp_path / "s").glob("fleet.*.a3snap")
    assert sorted(p.name for p in saved.iterdir()) == ["shard-0.a3snap", "shard-1.a3snap", "sharded.json"]
    (journal,) = (tmp_path / "s").glob("journal.*")
    assert journal.stat().st_size == 0
    again, plain = Server(*SHARDED, "--state", state), Server("--state", plain_state)
    try:
        assert _placements(again) == _placements(plain)
    finally:
        assert again.stop() == 0
        assert plain.stop() == 0


@pytest.mark.slow
def test_a_shard_down_during_a_request_answers_503_naming_it_and_records_nothing(tmp_path):
    from starlette.testclient import TestClient

    from a3fast.service.app import create_app
    from a3fast.service.config import ServiceConfig
    from a3fast.service.operations import Operations
    from a3fast.service.sharded import sharded_fleet_factory
    from a3fast.service.state import ServiceState
    from a3fast.service.stdio import answer

    ray = local_ray()
    state = ServiceState(tmp_path / "s", fleet_factory=sharded_fleet_factory(2, None, None, tmp_path / "s"))
    with TestClient(create_app(ServiceConfig(state=tmp_path / "s"), state=state)) as client:
        deadline = time.monotonic() + 30
        while client.get("/readyz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        for doc in SECTION_10_AGENTS:
            client.put(f"/v1/agents/{doc['agent']['name']}", json=doc)
        assert client.post("/v1/place", json={"requirements": SECTION_10_TASK}).status_code == 200
        next_seq = state.next_seq
        actor = state.fleet.shard_actor(1)
        ray.kill(actor, no_restart=True)
        gone(ray, actor)
        down = client.post("/v1/place", json={"requirements": SECTION_10_TASK})
        assert down.status_code == 503
        [problem] = down.json()["problems"]
        assert problem["shard"] == 1 and problem["found"].startswith("shard 1: down during place")
        line = asyncio.run(answer(Operations(state), orjson.dumps({"op": "place", "requirements": SECTION_10_TASK})))
        assert orjson.loads(line)["status"] == 503
        assert state.next_seq == next_seq     # no partial decision reached the trace
        assert client.get("/v1/trace").content.count(b"\n") == next_seq - 1
        on_shard_1 = next(n for n in ("order-analyst", "summariser") if state.fleet._owner(n) == 1)
        refused = client.delete(f"/v1/agents/{on_shard_1}")
        assert refused.status_code == 503 and refused.json()["problems"][0]["shard"] == 1
        assert on_shard_1 in state.fleet and state.journal.entries == 3   # two puts, one placement


def test_ray_address_without_shards_is_refused():
    done = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--ray-address", "auto"],
                          capture_output=True, timeout=30)
    assert done.returncode == 2
    assert b"--ray-address: only with --shards N" in done.stderr


@pytest.mark.slow
def test_serve_with_shards_refuses_a_state_saved_with_another_number_of_shards(tmp_path):
    state = str(tmp_path / "s")
    first = Server(*SHARDED, "--state", state)
    _changes(first)
    assert first.stop() == 0
    done = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--port", "0", "--shards", "3",
                           "--state", state], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "holds a fleet of 2 shards, not the 3 of --shards 3; start with --shards 2" in done.stderr


def test_a_replay_on_the_served_sharded_fleet_is_refused_with_501(tmp_path):
    # a replay copies the served fleet through one process's snapshot; a sharded fleet's snapshot
    # is its shards' own, so the caller must post the declarations to replay on
    sharded = Server(*SHARDED)
    try:
        for agent in SECTION_10_AGENTS:
            sharded.client.put(f"/v1/agents/{agent['agent']['name']}", json=agent)
        sharded.client.post("/v1/place", json={"requirements": SECTION_10_TASK})
        r = sharded.client.post("/v1/replay", json={"since": 1})
        assert r.status_code == 501, r.text
        assert "sharded" in r.text
        # posted declarations have no baseline to compare with but the recorded decisions
        r = sharded.client.post("/v1/replay", json={"since": 1, "fleet": SECTION_10_AGENTS})
        assert r.status_code == 501 and "$.compare" in r.text, r.text
        r = sharded.client.post("/v1/replay", json={"since": 1, "fleet": SECTION_10_AGENTS, "compare": "recorded"})
        assert r.status_code == 200 and r.json()["summary"]["changed"] == 0, r.text
    finally:
        sharded.stop()
