"""A batch of placements over HTTP does not hold the event loop: it is placed in steps with turns of
the loop between them, /healthz is answered meanwhile, and every change that arrives during the
batch is applied after it — its seqs after the batch's, never among them (docs/design.md, "How the
HTTP service orders changes"; docs/service.md, "Placing many tasks in one request")."""
from __future__ import annotations

import asyncio
import http.client
import select
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from a3fast.durable.journal import TRACE as TRACE_ENTRY, decode_change, read_entries
from a3fast.record.compact import decode_trace
from a3fast.service.k8s import REQUIREMENTS_ANNOTATION, Extender
from a3fast.service.operations import Operations, PlaceAnswer, verify_text
from a3fast.service.state import ServiceState
from a3fast.workload import generate_fleet, generate_tasks

pytest.importorskip("starlette")

from service_process import Server  # noqa: E402

#: agents served: at this size a batch of 1,000 takes hundreds of ms to place, a /healthz a few
FLEET = generate_fleet(1000, seed=11)
TASKS = generate_tasks(FLEET, 1000, seed=11)


@pytest.fixture(scope="module")
def server():
    s = Server()
    try:
        for half in (FLEET[:500], FLEET[500:]):      # each half within --max-bulk-body
            r = s.client.post("/v1/agents", content=b"\n".join(orjson.dumps(d) for d in half))
            assert r.status_code == 200, r.text
        yield s
    finally:
        assert s.stop() == 0


def _last_seq(s: Server) -> int:
    """The seq of the trace's last record (/readyz tells the next one)."""
    return s.client.get("/readyz").json()["next_seq"] - 1


class _Posted:
    """A batch posted on its own connection, its answer read only when asked for: until then,
    whether any of it has arrived is known without reading it."""

    def __init__(self, url: str, body: bytes, query: str = ""):
        where = urlsplit(url)
        self.connection = http.client.HTTPConnection(where.hostname, where.port, timeout=120)
        self.connection.request("POST", "/v1/place" + query, body=body,
                                headers={"Content-Type": "application/json"})

    def answered(self) -> bool:
        """Whether any byte of the answer has arrived (the server writes it whole, once placed)."""
        return bool(select.select([self.connection.sock], [], [], 0)[0])

    def answer(self) -> list:
        response = self.connection.getresponse()
        data = response.read()
        self.connection.close()
        assert response.status == 200, data[:300]
        return orjson.loads(data)


def _wait_for_part_of_the_batch(s: Server, since: int, posted: _Posted) -> int:
    """Records the batch has made after seq `since`, once it has made some (it is being placed),
    or 0 when it was answered before any could be seen."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        seen = _last_seq(s) - since
        if seen or posted.answered():
            return seen
        time.sleep(0.002)
    raise AssertionError("the batch placed nothing within 60 s")


@pytest.mark.slow    # a real server of 1,000 agents, batches of 1,000 and 600: 3-5 s
def test_healthz_is_answered_while_a_batch_of_1000_is_placed(server):
    since = _last_seq(server)
    body = b"[" + b",".join(orjson.dumps({"requirements": t}) for t in TASKS) + b"]"
    posted = _Posted(server.url, body, "?record=compact")
    seen = _wait_for_part_of_the_batch(server, since, posted)
    # the batch is under way (some of its records are in the trace): /healthz, asked now, is
    # answered before the batch is, where a loop held by the whole batch would answer it after
    assert server.client.get("/healthz").status_code == 200
    answered_first = posted.answered()
    answers = posted.answer()
    assert len(answers) == len(TASKS) and all("records" in a for a in answers)
    made = sum(len(a["records"]) for a in answers)
    assert not answered_first, "the batch was answered before /healthz, asked while it was placed"
    assert 0 < seen < made, f"the trace showed {seen} of the batch's {made} records while it was placed"


def _spread(tasks: list[dict]) -> list[bytes]:
    """Place requests of every kind a batch places in its own runs: spec and compact records,
    sessions asked again (a run ends before each), a route (placed alone)."""
    out = []
    for i, task in enumerate(tasks):
        body: dict = {"requirements": task, "record": "spec" if i % 10 == 0 else "compact"}
        if i % 7 == 3:
            body["session"] = f"s{i % 3}"
        if i == 40:
            body["route"] = {"name": "strict", "adds": {"clearances": ["audit.read"]}}
        out.append(orjson.dumps(body))
    return out


def _seqs(answer: dict) -> list[int]:
    return [r["seq"] for r in answer["records"]]


def _is_run(seqs: list[int]) -> bool:
    return seqs == list(range(seqs[0], seqs[0] + len(seqs)))


@pytest.mark.slow    # a real server of 1,000 agents, batches of 1,000 and 600: 3-5 s
def test_places_sent_during_a_batch_take_seqs_after_it_and_the_trace_verifies(server):
    since = _last_seq(server)
    batch = _spread(TASKS[:600])
    singles = [orjson.dumps({"requirements": t, **({"record": "compact"} if i % 2 else {})})
               for i, t in enumerate(TASKS[600:612])]
    posted = _Posted(server.url, b"[" + b",".join(batch) + b"]")
    answers: dict[int, dict] = {}

    def place(k: int) -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            r = client.post("/v1/place", content=singles[k])
            assert r.status_code == 200, r.text
            answers[k] = r.json()

    # some sent as the batch arrives (before or after it, never inside), the rest once it is placing
    early = [threading.Thread(target=place, args=(k,)) for k in range(4)]
    for t in early:
        t.start()
    assert _wait_for_part_of_the_batch(server, since, posted) > 0
    late = [threading.Thread(target=place, args=(k,)) for k in range(4, len(singles))]
    for t in late:
        t.start()
    batch_answers = posted.answer()
    for t in early + late:
        t.join(60)
    assert len(answers) == len(singles)

    assert len(batch_answers) == len(batch)
    assert [a for a in batch_answers if "records" not in a] == []
    batch_seqs = [seq for a in batch_answers for seq in _seqs(a)]
    assert _is_run(batch_seqs), "the batch's records do not take consecutive seqs"
    first, last = batch_seqs[0], batch_seqs[-1]
    for k, answer in answers.items():
        seqs = _seqs(answer)
        assert _is_run(seqs)
        assert seqs[-1] < first or seqs[0] > last, f"place {k} has seqs {seqs} inside the batch's {first}..{last}"
        if k >= 4:
            assert seqs[0] > last, f"place {k}, sent while the batch was placed, has seqs before it"

    whole = server.client.get("/v1/trace").content
    records = [orjson.loads(line) for line in whole.splitlines()]
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    result = server.client.post("/v1/verify", content=whole).json()
    assert result["valid"] and not result["errors"], result
    # each answer's records are the trace's at their seqs (compact ones decoded alike)
    in_trace = {r["seq"]: r for r in decode_trace(records)}
    for answer in [*batch_answers, *answers.values()]:
        for record in decode_trace(answer["records"]):
            assert record == in_trace[record["seq"]]


def _journal(directory) -> list[tuple[str, Any]]:
    """Every entry of the state's journal generations, in order: ("T", the first seq of the
    placement's lines) or ("J", the change's op)."""
    out: list[tuple[str, Any]] = []
    for path in sorted(directory.glob("journal.*")):
        for payload in read_entries(path.read_bytes()).entries:
            tag, body = payload[:1], payload[1:]
            if tag == TRACE_ENTRY:
                out.append(("T", orjson.loads(body.split(b"\n")[1])["seq"]))
            else:
                out.append(("J", decode_change(body)["op"]))
    return out


def test_changes_made_during_a_batch_are_applied_after_it_in_arrival_order_and_recovered_so(tmp_path):
    fleet = generate_fleet(30, seed=3)
    tasks = generate_tasks(fleet, 40, seed=3)
    newcomer, gone = fleet[-1]["agent"]["name"], fleet[0]["agent"]["name"]
    directory = tmp_path / "state"
    bodies = [{"requirements": t, **({"session": f"s{i % 4}"} if i % 3 == 0 else {}),
               **({"record": "compact"} if i % 2 else {})} for i, t in enumerate(tasks)]

    async def run() -> tuple[list, list, ServiceState, list]:
        state = ServiceState(directory)
        state.open()
        ops = Operations(state, turn=0.0)      # a turn of the loop after every task of the batch
        extender = Extender(state)
        await ops.put_agents({"declarations": fleet[:-1]})
        batch = asyncio.ensure_future(ops.place_batch(bodies))
        for _ in range(1000):          # until its first placements are made
            await asyncio.sleep(0)
            if state.next_seq > 1:
                break
        assert 1 < state.next_seq and not batch.done(), "the batch gives the loop turns as it places"
        others = [asyncio.ensure_future(c) for c in (
            ops.place({"requirements": tasks[0], "session": "late"}),
            ops.put_agent({"name": newcomer, "declaration": fleet[-1]}),
            ops.hold_session({"agent": gone, "session": "h"}),
            ops.outcome({"agent": gone, "kind": "k", "success": True}),
            ops.delete_agent({"name": gone}),
            extender.filter(orjson.dumps({"Pod": {"metadata": {"name": "p", "namespace": "default", "uid": "u-1",
                                                               "annotations": {REQUIREMENTS_ANNOTATION: orjson.dumps(tasks[1]).decode()}}},
                                          "NodeNames": [d["agent"]["name"] for d in fleet]})))]
        seen = []              # what each turn of the loop sees while the batch is answered
        while not batch.done():
            await asyncio.sleep(0)
            seen.append((state.next_seq, newcomer in state.fleet, gone in state.fleet))
        answers = await batch
        late = await asyncio.gather(*others)
        extender.close()
        return answers, late, state, seen

    answers, late, state, seen = asyncio.run(run())
    assert all(type(a) is PlaceAnswer for a in answers)
    batch_seqs = [r["seq"] for a in answers for r in orjson.loads(a.records_json)]
    # none of the changes that arrived is applied while the batch is still placing
    during = [(added, kept) for next_seq, added, kept in seen if next_seq <= batch_seqs[-1]]
    assert len(during) > 1 and set(during) == {(False, True)}
    assert batch_seqs == list(range(batch_seqs[0], batch_seqs[0] + len(batch_seqs)))
    assert orjson.loads(late[0].records_json)[0]["seq"] == batch_seqs[-1] + 1
    # the journal, one writer's: the fleet, the batch's placements in order, then each change
    # made during the batch in the order it arrived, the extender's recorded answer last
    entries = _journal(directory)
    assert entries[0] == ("J", "put")
    assert entries[1:1 + len(tasks)] == [("T", orjson.loads(a.records_json)[0]["seq"]) for a in answers]
    after = len(orjson.loads(late[0].records_json))
    assert entries[1 + len(tasks):] == [("T", batch_seqs[-1] + 1), ("J", "put"), ("J", "hold"), ("J", "outcome"),
                                        ("J", "delete"), ("T", batch_seqs[-1] + 1 + after)]
    trace, next_seq = state.trace_path.read_bytes(), state.next_seq
    pairs = [(d["agent"]["name"], session) for d in fleet for session in ("s0", "s1", "s2", "s3", "late", "h")]
    held = [pair for pair in pairs if pair[0] in state.fleet and state.fleet.holds_session(*pair)]
    assert held, "the batch's sessions are held by the agents it bound"
    outcomes = state.fleet.outcomes(gone, "k")
    state.close(checkpoint=False)

    again = ServiceState(directory)       # recovered from the journal alone
    again.open()
    try:
        assert again.trace_path.read_bytes() == trace and again.next_seq == next_seq
        assert newcomer in again.fleet and gone not in again.fleet
        assert [pair for pair in pairs if pair[0] in again.fleet and again.fleet.holds_session(*pair)] == held
        assert again.fleet.outcomes(gone, "k") == outcomes
        result = verify_text(trace)
        assert result["valid"] and not result["errors"], result
    finally:
        again.close()
