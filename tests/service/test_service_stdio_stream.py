"""`record: "compact-stream"`: a stdio stream's answers, read in order, are one slice of the trace
that stands alone — each fleet snapshot goes down the stream once, and decoded, the records are
exactly the trace file's. `compact` answers still stand alone one by one. Over HTTP the answers of
one response (a batch's) are such a slice, and a single answer one of its own."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from a3fast.record.compact import decode_trace
from a3fast.verify import verify_bytes
from a3fast.workload import generate_fleet, generate_tasks

FLEET = generate_fleet(50, seed=5)
TASKS = generate_tasks(FLEET, 24, seed=5)
#: requirements holding a member named like the compact one, which a slice must not take for it
DECOY = {"v": "1.0", "capabilities": [{"name": "no.such-capability", "version": 1}], "clearances": [],
         "a3fast.compact": {"format": 1, "fleet": 1}}


def _requests() -> list[dict]:
    out: list[dict] = [{"op": "put_agents", "id": "load", "declarations": FLEET}]
    for i, task in enumerate(TASKS):
        out.append({"op": "place", "id": i, "requirements": task, "record": "compact-stream"})
        if i == 5:   # a standalone answer and a spec one between stream answers
            out.append({"op": "place", "id": "alone", "requirements": task, "record": "compact"})
            out.append({"op": "place", "id": "spec", "requirements": task})
        if i == 9:   # the live set changes: a new snapshot, carried once more
            out.append({"op": "delete_agent", "id": "gone", "name": FLEET[0]["agent"]["name"]})
        if i == 14:
            out.append({"op": "place", "id": "decoy", "requirements": DECOY, "record": "compact-stream"})
            out.append({"op": "place", "id": "decoy-alone", "requirements": DECOY, "record": "compact"})
    return out


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> tuple[dict, list[dict]]:
    """Answers by id, and the trace file's records in spec form."""
    trace = tmp_path_factory.mktemp("stream") / "trace.jsonl"
    data = b"".join(orjson.dumps(r) + b"\n" for r in _requests())
    out = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--stdio", "--trace", str(trace)],
                         input=data, capture_output=True, timeout=120, check=True).stdout
    answers = {a["id"]: a for a in map(orjson.loads, out.splitlines())}
    assert all(a["ok"] for a in answers.values()), [a for a in answers.values() if not a["ok"]]
    return answers, list(decode_trace(map(orjson.loads, Path(trace).read_bytes().splitlines())))


def _stream_records(answers: dict) -> list[dict]:
    ids = [r["id"] for r in _requests() if r.get("record") == "compact-stream"]
    return [record for i in ids for record in answers[i]["records"]]


def test_stream_answers_read_in_order_decode_to_the_trace_records(served):
    answers, whole = served
    records = _stream_records(answers)
    by_seq = {r["seq"]: r for r in whole}
    assert list(decode_trace(records)) == [by_seq[r["seq"]] for r in records]


def test_stream_answers_read_in_order_pass_the_verifier(served):
    answers, _ = served
    data = b"".join(orjson.dumps(r) + b"\n" for r in _stream_records(answers))
    assert [f for f in verify_bytes(data) if f.is_error] == []


def test_stream_carries_each_snapshot_once(served):
    answers, _ = served
    data = b"".join(orjson.dumps(r) for r in _stream_records(answers))
    # the first answer carries the table; the deletion's placement carries a based snapshot
    assert data.count(b'"fleet":{"names"') == 1
    assert data.count(b'"fleet":{"base"') == 1
    later = [orjson.dumps(answers[i]["records"]) for i in range(1, len(TASKS)) if i != 10]
    assert not any(b'"names":[' in x for x in later)


def test_compact_answers_between_stream_answers_stand_alone(served):
    answers, whole = served
    by_seq = {r["seq"]: r for r in whole}
    for rid in ("alone", "decoy-alone"):
        records = answers[rid]["records"]
        assert list(decode_trace(records)) == [by_seq[r["seq"]] for r in records]


def test_requirements_holding_a_member_named_like_the_compact_one_are_not_rewritten(served):
    answers, whole = served
    by_seq = {r["seq"]: r for r in whole}
    for rid in ("decoy", "decoy-alone"):
        submitted = answers[rid]["records"][0]
        assert submitted["content"]["requirements"] == DECOY
        assert by_seq[submitted["seq"]]["content"]["requirements"] == DECOY


@pytest.fixture(scope="module")
def http_batches() -> tuple[list[list], list[dict]]:
    """Two batches whose requests ask for `compact-stream` records, but for one `compact` and one
    `spec` (a deletion between the batches: a new snapshot), a single request with
    `?record=compact-stream`, their answers, and the service's whole trace decoded to spec records."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from a3fast.service.app import create_app
    from a3fast.service.config import ServiceConfig
    from test_k8s_extender import wait_ready

    def batch(tasks: list[dict]) -> list[dict]:
        out: list[dict] = [{"requirements": t, "record": "compact-stream"} for t in tasks]
        out[2]["session"] = out[3]["session"] = "twice"          # a run ends before the second
        out[4]["route"] = {"name": "r", "adds": {"clearances": ["x.y"]}}
        out[5]["record"] = "compact"                             # stands alone, not in the slice
        del out[6]["record"]                                     # spec records
        out[7]["requirements"] = {"capabilities": 7}             # refused in its turn
        out[8]["requirements"] = DECOY
        return out

    with TestClient(create_app(ServiceConfig())) as client:
        wait_ready(client)
        assert client.post("/v1/agents", content=b"\n".join(orjson.dumps(d) for d in FLEET)).status_code == 200
        answers = []
        for k, tasks in enumerate((TASKS[:12], TASKS[12:])):
            if k:
                assert client.delete(f"/v1/agents/{FLEET[0]['agent']['name']}").status_code == 200
            answer = client.post("/v1/place", json=batch(tasks))
            assert answer.status_code == 200
            answers.append(answer.json())
        single = client.post("/v1/place?record=compact-stream", json={"requirements": TASKS[0]})
        assert single.status_code == 200
        answers.append([single.json()])
        trace = client.get("/v1/trace").content
    return answers, list(decode_trace(map(orjson.loads, trace.splitlines())))


def _stream_part(answers: list[dict]) -> list[dict]:
    """The records of a response's `compact-stream` answers, in order (refused, `compact` and
    `spec` answers are not part of its slice)."""
    return [record for k, a in enumerate(answers) if k not in (5, 6, 7) for record in a["records"]]


def test_http_batch_answers_in_the_stream_form_read_in_order_decode_to_the_trace_records(http_batches):
    responses, whole = http_batches
    by_seq = {r["seq"]: r for r in whole}
    for answers in responses[:2]:
        assert answers[7]["status"] == 400
        records = _stream_part(answers)
        assert list(decode_trace(records)) == [by_seq[r["seq"]] for r in records]
        data = b"".join(orjson.dumps(r) + b"\n" for r in records)
        assert [f for f in verify_bytes(data) if f.is_error] == []
        # one table a response, in its first answer; the other answers refer to that record
        assert data.count(b'"names":[') == 1 and b'"names":[' in orjson.dumps(answers[0])
        alone = answers[5]["records"]       # a `compact` answer between them stands alone
        assert b'"names":[' in orjson.dumps(alone)
        assert list(decode_trace(alone)) == [by_seq[r["seq"]] for r in alone]
        assert b"a3fast.compact" not in orjson.dumps(answers[6])


def test_http_single_answer_in_the_stream_form_stands_alone(http_batches):
    responses, whole = http_batches
    by_seq = {r["seq"]: r for r in whole}
    [answer] = responses[2]
    assert b'"names":[' in orjson.dumps(answer)
    assert list(decode_trace(answer["records"])) == [by_seq[r["seq"]] for r in answer["records"]]


def test_stream_answers_taken_as_written_are_the_ones_the_slice_would_give(monkeypatch):
    # an answer whose lines plainly refer to a snapshot the stream carries as itself is taken as the
    # encoder wrote it, unread: each such answer, read by a copy of the stream's slice, is unchanged
    # and changes nothing the slice carries; answers of every other kind are read as before
    import io

    from a3fast.schema import parse_declaration
    from a3fast.service.operations import STREAM, Operations
    from a3fast.service.slices import Slice, readable_answer
    from a3fast.service.state import ServiceState
    from a3fast.service.stdio import serve_stdio_sync

    taken = read = 0
    original = Operations._place_answer

    def checked(self, lines, form, reference=None, stream=None, holds=None):
        nonlocal taken, read
        if form == STREAM:
            assert stream is None and holds is None    # stdio's answers join the shell's own stream
            if reference is not None and self.stream.carried.get(reference) == reference:
                trial = Slice()
                trial.carried = dict(self.stream.carried)
                assert readable_answer(self.state, lines, trial) == lines
                assert trial.carried == self.stream.carried
                taken += 1
            else:
                read += 1
        return original(self, lines, form, reference, stream, holds)

    monkeypatch.setattr(Operations, "_place_answer", checked)
    requests = [orjson.dumps(r) + b"\n" for r in _requests() if r["op"] != "put_agents"]
    # the whole stream in one read, then a request a read (batches of one), each on a new service
    for chunks in ([b"".join(requests)], requests):
        state = ServiceState(settle=True)
        state.open()
        try:
            ops = Operations(state, stream=True)
            state.put_agents([parse_declaration(d) for d in FLEET])
            sink = io.BytesIO()
            for chunk in chunks:
                serve_stdio_sync(ops, io.BytesIO(chunk), sink, 1 << 20)
            answers = [orjson.loads(line) for line in sink.getvalue().splitlines()]
            assert len(answers) == len(requests) and all(a["ok"] for a in answers), answers
        finally:
            state.close()
    assert taken > 20 and read >= 2        # the first answer and the deletion's read their lines
