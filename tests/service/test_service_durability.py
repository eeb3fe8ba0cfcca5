"""Durable state: every acknowledged change survives kill -9; torn tails are cut and reported;
damage in the middle refuses to start (exit 2)."""
from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import threading
import time

import httpx
import orjson
import pytest

import a3fast

from a3fast.durable.journal import frame, read_entries, JournalCorrupt
from service_process import SECTION_10_TASK, Server

pytest.importorskip("starlette")


def decl(name, version=1, residency="eu", namespace="load"):
    return {"v": "1.0", "agent": {"name": name, "namespace": namespace},
            "capabilities": [{"name": "order.investigate", "version": version}],
            "clearances": ["orders.read"], "residency": [residency]}


TASK = {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 1}], "residency": "eu"}


def test_journal_reads_back_its_entries_and_cuts_a_torn_tail():
    data = b"".join(frame(b"entry %d" % k) for k in range(5))
    assert read_entries(data).entries == [b"entry %d" % k for k in range(5)]
    torn = read_entries(data[:-3])
    assert len(torn.entries) == 4 and torn.cut_bytes > 0


def test_journal_refuses_damage_before_a_valid_entry():
    data = bytearray(b"".join(frame(b"entry %d" % k) for k in range(5)))
    data[len(frame(b"entry 0")) + 14] ^= 0x01        # a byte of entry 1's payload
    with pytest.raises(JournalCorrupt, match="entry 2 at byte"):
        read_entries(bytes(data))


def test_kill_9_under_load_loses_nothing_acknowledged(tmp_path):
    state = tmp_path / "state"
    server = Server("--state", str(state), "--fsync", "group")
    acknowledged: dict[str, dict] = {}
    removed: set[str] = set()
    placed_seqs: list[int] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    async def load():
        rng = random.Random(7)
        async with httpx.AsyncClient(base_url=server.url, timeout=5) as client:
            async def worker(w):
                k = 0
                while not stop.is_set() and k < 400:
                    k += 1
                    name = f"agent-{w}-{k % 37}"
                    try:
                        roll = rng.random()
                        if roll < 0.6:
                            d = decl(name, version=rng.choice([1, 2]))
                            r = await client.put(f"/v1/agents/{name}", json=d)
                            if r.status_code == 200:
                                acknowledged[name] = d
                                removed.discard(name)
                        elif roll < 0.75 and name in acknowledged:
                            r = await client.delete(f"/v1/agents/{name}")
                            if r.status_code == 200:
                                acknowledged.pop(name, None)
                                removed.add(name)
                        else:
                            r = await client.post("/v1/place", json={"requirements": TASK, "session": f"s{w}"})
                            if r.status_code == 200:
                                placed_seqs.append(r.json()["records"][-1]["seq"])
                    except httpx.TransportError:
                        return
            await asyncio.gather(*(worker(w) for w in range(8)))

    thread = threading.Thread(target=lambda: asyncio.run(load()))
    thread.start()
    deadline = time.monotonic() + 10
    while len(acknowledged) < 60 and time.monotonic() < deadline:
        time.sleep(0.02)
    server.kill()                       # mid-load
    stop.set()
    thread.join(timeout=20)
    assert acknowledged, "the load made no change before the kill"

    again = Server("--state", str(state))
    try:
        for name, d in acknowledged.items():
            r = again.client.get(f"/v1/agents/{name}")
            assert r.status_code == 200 and r.json()["declaration"] == d, name
        for name in removed:
            assert again.client.get(f"/v1/agents/{name}").status_code == 404
        trace = [orjson.loads(x) for x in again.client.get("/v1/trace").content.splitlines()]
        seqs = [r["seq"] for r in trace]
        assert seqs == list(range(1, len(seqs) + 1))
        assert set(placed_seqs) <= set(seqs)
        nxt = again.client.post("/v1/place", json={"requirements": TASK}).json()["records"][0]["seq"]
        assert nxt == seqs[-1] + 1
    finally:
        assert again.stop() == 0


def _history(client):
    """A sequence of changes whose order matters: removal and re-adding, outcomes, sessions."""
    for k in range(6):
        assert client.put(f"/v1/agents/a{k}", json=decl(f"a{k}")).status_code == 200
    client.delete("/v1/agents/a1")
    client.delete("/v1/agents/a3")
    client.put("/v1/agents/a1", json=decl("a1"))           # takes back its place before a2
    client.post("/v1/outcomes", json={"agent": "a4", "kind": "order.investigate", "success": True})
    client.post("/v1/outcomes", json={"agent": "a4", "kind": "order.investigate", "success": True})
    client.post("/v1/outcomes", json={"agent": "a2", "requirements": TASK, "success": False})
    client.put("/v1/sessions/s9/a5")
    client.post("/v1/place", json={"requirements": TASK, "session": "s7"})


def _next_placements(client):
    out = []
    for session in (None, "s9", "s7"):
        body = {"requirements": TASK, **({"session": session} if session else {})}
        s = client.post("/v1/place", json=body).json()["records"][-1]["content"]["scheduling"]
        out.append((s["candidates"], s["filters_failed"], s["scores"]))
    return out


@pytest.mark.parametrize("how", ["kill -9", "SIGTERM (snapshot)"])
def test_a_restarted_server_places_as_one_that_never_stopped(tmp_path, how):
    steady = Server()
    _history(steady.client)
    expected = _next_placements(steady.client)
    steady.stop()

    state = tmp_path / "state"
    first = Server("--state", str(state))
    _history(first.client)
    if how == "kill -9":
        first.kill()
    else:
        assert first.stop() == 0
        assert (state / "checkpoint").exists()
    again = Server("--state", str(state))
    try:
        assert _next_placements(again.client) == expected
    finally:
        again.stop()


def test_a_torn_journal_tail_is_cut_and_reported(tmp_path):
    state = tmp_path / "state"
    s = Server("--state", str(state))
    for k in range(3):
        s.client.put(f"/v1/agents/t{k}", json=decl(f"t{k}"))
    s.kill()
    journal = state / "journal.00000001"
    whole = journal.read_bytes()
    with open(journal, "ab") as fh:
        fh.write(frame(orjson.dumps({"op": "put"}))[:7])     # a write cut short
    again = Server("--state", str(state))
    try:
        assert again.client.get("/v1/agents").json()["names"] == ["t0", "t1", "t2"]
    finally:
        again.stop()
    err = again.stderr()
    assert "the last 7 bytes (from byte" in err and "are not a whole entry: cut" in err
    assert "may or may not have been acknowledged" in err


def test_a_flipped_byte_in_the_middle_refuses_to_start(tmp_path):
    state = tmp_path / "state"
    s = Server("--state", str(state))
    for k in range(4):
        s.client.put(f"/v1/agents/f{k}", json=decl(f"f{k}"))
    s.kill()
    journal = state / "journal.00000001"
    data = bytearray(journal.read_bytes())
    data[len(data) // 3] ^= 0x20
    journal.write_bytes(bytes(data))
    r = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--port", "0", "--state", str(state)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "damaged" in r.stderr and "Traceback" not in r.stderr


def test_a_damaged_snapshot_refuses_to_start(tmp_path):
    state = tmp_path / "state"
    s = Server("--state", str(state))
    s.client.put("/v1/agents/x0", json=decl("x0"))
    assert s.stop() == 0
    snap = state / "checkpoint"
    data = bytearray(snap.read_bytes())
    data[-5] ^= 0x01
    snap.write_bytes(bytes(data))
    r = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--port", "0", "--state", str(state)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "checkpoint is damaged" in r.stderr


@pytest.mark.parametrize("engine", ["pure", "native"])
def test_record_outcomes_equals_as_many_record_outcome_calls(engine):
    one_by_one, at_once = a3fast.Fleet(engine), a3fast.Fleet(engine)
    agents = [decl("a"), decl("b"), decl("c")]
    one_by_one.extend(agents)
    at_once.extend(agents)
    for k in range(7):
        one_by_one.record_outcome("a", TASK, k < 2)
    one_by_one.record_outcome("b", TASK, True)
    from a3fast.schema import parse_requirements, task_kind

    kind = task_kind(parse_requirements(TASK))
    at_once.record_outcomes("a", kind, 2, 7)
    at_once.record_outcomes("b", kind, 1, 1)
    assert at_once.outcomes("a", kind) == one_by_one.outcomes("a", kind) == (2, 7)
    first, second = one_by_one.place(TASK), at_once.place(TASK)
    assert first.agent == second.agent
    assert list(first.scores.total) == list(second.scores.total)
    assert list(first.scores.success_rate) == list(second.scores.success_rate)
    with pytest.raises(ValueError, match="between 0 and attempts"):
        at_once.record_outcomes("a", kind, 3, 2)


def test_a_journal_that_cannot_be_written_stops_the_service_and_loses_nothing_acknowledged(tmp_path):
    """A failed journal write (here a file-size limit: EFBIG, as a full disk gives ENOSPC) leaves a
    change in memory that was answered with an error; the service then answers every request with
    503 — reads and /healthz too — and takes no snapshot of that memory on its way out, so a restart
    holds exactly the changes that were acknowledged."""
    state = tmp_path / "state"
    server = Server("--state", str(state), "--fsync", "always", file_size_limit=24_000)
    acknowledged, refused = [], None
    for k in range(400):
        answer = server.client.put(f"/v1/agents/a{k}", json=decl(f"a{k}"))
        if answer.status_code != 200:
            refused = (f"a{k}", answer)
            break
        acknowledged.append(f"a{k}")
    assert refused is not None, "the journal never reached the file-size limit"
    name, answer = refused
    assert answer.status_code == 503
    assert "journal" in answer.json()["problems"][0]["expected"]
    assert len(acknowledged) > 10
    # fail-stop: nothing is served from memory that may hold the refused change
    for method, path in [("GET", f"/v1/agents/{acknowledged[0]}"), ("GET", f"/v1/agents/{name}"),
                         ("PUT", "/v1/agents/later"), ("GET", "/healthz"), ("GET", "/readyz")]:
        kwargs = {"json": decl("later")} if method == "PUT" else {}
        assert server.client.request(method, path, **kwargs).status_code == 503, path
    assert server.client.post("/v1/place", json={"requirements": TASK}).status_code == 503
    assert server.stop() == 0
    again = Server("--state", str(state))
    try:
        listed = again.client.get("/v1/agents", params={"limit": 10000}).json()
        assert sorted(listed["names"]) == sorted(acknowledged)
        assert again.client.put("/v1/agents/later", json=decl("later")).status_code == 200
    finally:
        again.stop()
