"""A slice of the service's trace (`GET /v1/trace?since=N`, the stdio `trace` op) and the records of
one `?record=compact` answer are readable on their own: the fleet snapshots they need are carried
inside them, and decoded they are exactly the records of the whole trace."""
from __future__ import annotations

import orjson
import pytest

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402

from a3fast.record.compact import MAX_BASED_CHAIN, decode_trace  # noqa: E402
from a3fast.service.app import create_app  # noqa: E402
from a3fast.service.config import ServiceConfig  # noqa: E402
from a3fast.service.slices import Slice  # noqa: E402
from a3fast.workload import generate_fleet, generate_tasks  # noqa: E402
from test_k8s_extender import wait_ready  # noqa: E402

DECLARATIONS = generate_fleet(60, seed=2)
TASKS = generate_tasks(DECLARATIONS, 6, seed=2)


@pytest.fixture(params=["memory", "journal"])
def served(request, tmp_path):
    config = ServiceConfig(state=tmp_path / "state" if request.param == "journal" else None)
    with TestClient(create_app(config)) as client:
        wait_ready(client)
        body = b"\n".join(orjson.dumps(d) for d in DECLARATIONS)
        assert client.post("/v1/agents", content=body).status_code == 200
        yield client


def place(client, task):
    r = client.post("/v1/place?record=compact", json={"requirements": task})
    assert r.status_code == 200
    return r.json()["records"]


def lines(records):
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def valid(client, data: bytes) -> bool:
    return client.post("/v1/verify", content=data).json()["valid"]


def decoded(records):
    return [r for r in decode_trace(records)]


def test_a_second_compact_answer_is_readable_on_its_own(served):
    place(served, TASKS[0])
    second = place(served, TASKS[1])
    assert valid(served, lines(second))
    whole = decoded(orjson.loads(x) for x in served.get("/v1/trace").content.splitlines())
    assert decoded(second) == whole[-len(second):]


def test_a_since_slice_is_readable_on_its_own(served):
    first = place(served, TASKS[0])
    for task in TASKS[1:4]:
        place(served, task)
    since = first[-1]["seq"]
    data = served.get(f"/v1/trace?since={since}").content
    assert valid(served, data)
    whole = decoded(orjson.loads(x) for x in served.get("/v1/trace").content.splitlines())
    part = decoded(orjson.loads(x) for x in data.splitlines())
    assert part == [r for r in whole if r["seq"] > since]
    # the table is carried once; the slice's later records refer to the record that carries it
    carried = [x for x in data.splitlines() if b'"fleet":{"names"' in x]
    assert len(carried) == 1


def test_a_slice_after_many_based_snapshots_is_readable_on_its_own(served):
    place(served, TASKS[0])
    # each removal changes the live set: a based snapshot per placement
    names = [d["agent"]["name"] for d in DECLARATIONS]
    for k in range(MAX_BASED_CHAIN + 5):
        assert served.delete(f"/v1/agents/{names[k % len(names)]}").status_code == 200
        place(served, {"v": "1.0", "capabilities": [], "clearances": []})
        served.post("/v1/agents", content=orjson.dumps(DECLARATIONS[k % len(names)]))
    whole_data = served.get("/v1/trace").content
    whole = decoded(orjson.loads(x) for x in whole_data.splitlines())
    since = whole[-4]["seq"]
    data = served.get(f"/v1/trace?since={since}").content
    assert valid(served, data)
    assert decoded(orjson.loads(x) for x in data.splitlines()) == [r for r in whole if r["seq"] > since]
    # a whole table is written again at least every MAX_BASED_CHAIN snapshots
    assert whole_data.count(b'"fleet":{"names"') >= 2


def test_the_stdio_trace_op_gives_the_same_readable_slice(served):
    first = place(served, TASKS[0])
    place(served, TASKS[1])
    since = first[-1]["seq"]
    from a3fast.service.operations import Operations
    import asyncio

    state = served.app.state.service
    answer = asyncio.run(Operations(state).trace({"since": since}))
    records = orjson.loads(orjson.dumps(answer["records"]))
    assert valid(served, lines(records))


def test_a_rejection_s_snapshot_reference_rewritten_in_place_is_the_decoded_rewrite(tmp_path):
    # `Slice._rejected` splices the carried seq or the whole table where the line refers to its
    # snapshot; `Slice._decoded` decodes the line, sets the member and encodes it again: for every
    # rejected line of a service's trace, under each thing a slice may carry, the same bytes and
    # the same snapshots carried afterwards (a line whose one compact name is in its requirements
    # is left alone by both)
    import io

    from a3fast.schema import parse_declaration
    from a3fast.service.operations import Operations
    from a3fast.service.slices import _REJECTED, Slice, table_source
    from a3fast.service.state import ServiceState
    from a3fast.service.stdio import serve_stdio_sync

    unmet = [{"name": "no.such-capability", "version": 1}]
    decoys = [  # the member's name inside the requirements: a member of its own, a value, a key's text
        {"capabilities": unmet, "a3fast.compact": {"format": 1, "fleet": 1}},
        {"capabilities": unmet, "tools": ["a3fast.compact"], "note": "ünïcode ✓", "x": [1.5, 2**64 - 1]},
        {"capabilities": unmet, 'say "a3fast.compact"': {"format": 1, "fleet": 2}},
    ]
    tasks = generate_tasks(DECLARATIONS, 40, seed=9)
    requests = [{"op": "place", "id": i, "requirements": t, "record": "compact"} for i, t in enumerate(tasks)]
    requests[7:7] = [*({"op": "place", "id": f"decoy-{k}", "requirements": d, "record": "compact"}
                       for k, d in enumerate(decoys)),
                     *({"op": "place", "id": f"spec-{k}", "requirements": d} for k, d in enumerate(decoys)),
                     {"op": "delete_agent", "id": "gone", "name": DECLARATIONS[3]["agent"]["name"]}]
    state = ServiceState(settle=True)
    state.open()
    try:
        state.put_agents([parse_declaration(d) for d in DECLARATIONS])
        ops = Operations(state)
        data = b"".join(orjson.dumps(r) + b"\n" for r in requests)
        serve_stdio_sync(ops, io.BytesIO(data), io.BytesIO(), 1 << 20)
        state.flush_trace()
        trace = state.trace_path.read_bytes().splitlines(keepends=True)
        rejected = [(line, int(m.group(1))) for line in trace if (m := _REJECTED.match(line))]
        assert len(rejected) > 5
        source = table_source(state)
        # and lines a3fast does not write: without their newline, nested past any decoder's
        # depth, the record's own member's name escaped beside an unescaped one in the requirements
        line, seq = rejected[0]
        deep = line.replace(b'"requirements":{', b'"requirements":{"deep":' + b"[" * 3000 + b"]" * 3000 + b",", 1)
        escaped = line.replace(b'"a3fast.compact":{"format"', b'"a3fast\\u002ecompact":{"format"', 1)
        escaped = escaped.replace(b'"requirements":{', b'"requirements":{"a3fast.compact":{"format":2,"fleet":0},', 1)
        rejected += [(line.rstrip(b"\n"), seq), (deep, seq), (escaped, seq)]
        for line, seq in rejected:
            try:
                member = orjson.loads(line)["content"].get("a3fast.compact")
            except orjson.JSONDecodeError:
                member = None
            referenced = member["fleet"] if member is not None and type(member["fleet"]) is int else 0
            for carried in ({}, {referenced: referenced}, {referenced: 1}, {0: 0}):
                spliced, decoded_ = Slice(), Slice()
                spliced.carried, decoded_.carried = dict(carried), dict(carried)
                assert spliced._rejected(line, seq, source) == decoded_._decoded(line, seq, source), (seq, carried)
                assert spliced.carried == decoded_.carried
    finally:
        state.close()


class _Unread(Slice):
    """A slice whose answers must all be made without reading their lines."""

    def block(self, *args, **kwargs):
        raise AssertionError("the lines were read, where the encoder said where their one reference is")


def test_an_answers_one_reference_rewritten_is_the_rewrite_its_slice_makes():
    # `_one_reference_pointed` takes the encoder's word (`plain_reference`) for where the lines'
    # own member refers: for every placement of a service whose fleet changes under it (new
    # snapshots, based ones), decoys among the tasks, the same bytes as the Slice's own rewrite,
    # whatever the slice holds already (nothing, the snapshot in another record as a fleet token
    # says, the snapshot as itself, another snapshot), and the slice then holds the same; it
    # declines (None) whenever the member's name is not the lines' one
    from a3fast.schema import parse_declaration, parse_requirements
    from a3fast.service.slices import Slice, _one_reference_pointed, readable_answer, table_source
    from a3fast.service.state import ServiceState

    unmet = [{"name": "no.such-capability", "version": 1}]
    decoys = [{"capabilities": unmet, "a3fast.compact": {"format": 1, "fleet": 1}},
              {"capabilities": [], "tools": ["a3fast.compact"]}]
    tasks = generate_tasks(DECLARATIONS, 30, seed=11)
    state = ServiceState(settle=True)
    state.open()
    try:
        state.put_agents([parse_declaration(d) for d in DECLARATIONS[:40]])
        inlined = pointed = declined = 0
        for i, task in enumerate(tasks + decoys):
            if i % 7 == 3:     # the fleet changes: the next lines refer to a snapshot written anew
                state.put_agents([parse_declaration(DECLARATIONS[40 + i // 7])])
            p, lines, reference = state.place(parse_requirements(task), compact=True)
            expected = Slice().block(lines, table_source(state))
            assert readable_answer(state, lines, None, reference) == expected, i
            held = reference if reference is not None else 1
            for carried in ({held: 2}, {held: held}, {held + 1000: held + 1000}, {held: 3, 0: 0}):
                ours, theirs = Slice(carried), Slice(carried)
                assert readable_answer(state, lines, ours, reference) == theirs.block(lines, table_source(state)), \
                    (i, carried)
                assert (ours.carried, ours.last_table) == (theirs.carried, theirs.last_table), (i, carried)
            found = lines.find(b'"a3fast.compact"')
            if reference is not None and _one_reference_pointed(state, lines, found, reference, None) is not None:
                inlined += 1
                assert expected != lines        # the table was carried in
                assert _one_reference_pointed(state, lines, found, reference, 2) == \
                    Slice({reference: 2}).block(lines, table_source(state)) != lines
                pointed += 1
                # and such lines never reach the slice's reading of them, whatever it holds
                for carried in ({}, {reference: 2}, {reference + 1000: reference + 1000}):
                    readable_answer(state, lines, _Unread(carried), reference)
            else:
                declined += 1
        assert inlined >= 20 and pointed >= 20 and declined >= 2, (inlined, pointed, declined)
    finally:
        state.close()
