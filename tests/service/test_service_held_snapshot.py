"""`POST /v1/place?fleet=SEQ`: a client that holds a fleet snapshot — carried by record SEQ of an
earlier answer — names that record, and the compact records of its answers refer to it rather than
carry the snapshot's names again. Read after the answer that carried it, every answer decodes to
exactly the trace's records and verifies; a record that carried no snapshot leaves the answers as
they were, standing alone; a new snapshot (the fleet changed) is carried again, based on the one
held where the encoder wrote it so (docs/protocol.md, "Record forms")."""
from __future__ import annotations

import orjson
import pytest

from a3fast.record.compact import decode_trace
from a3fast.verify import verify_bytes
from a3fast.workload import generate_fleet, generate_tasks

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from a3fast.service.app import create_app  # noqa: E402
from a3fast.service.config import ServiceConfig  # noqa: E402
from test_k8s_extender import wait_ready  # noqa: E402

FLEET = generate_fleet(40, seed=11)
TASKS = generate_tasks(FLEET, 12, seed=11)
#: a task no agent can take: its placement is a task.rejected record
UNSCHEDULABLE = {"v": "1.0", "capabilities": [{"name": "no.such-capability", "version": 1}]}
TABLE = b'"names":['


@pytest.fixture()
def client():
    with TestClient(create_app(ServiceConfig())) as client:
        wait_ready(client)
        assert client.post("/v1/agents", content=b"\n".join(orjson.dumps(d) for d in FLEET)).status_code == 200
        yield client


def _carrier(records: list[dict]) -> int:
    """The seq of the record of an answer that carries a fleet snapshot's table."""
    [seq] = [r["seq"] for r in records if type(r["content"].get("a3fast.compact", {}).get("fleet")) is dict]
    return seq


def _records(answer) -> list[dict]:
    assert answer.status_code == 200, answer.content
    return answer.json()["records"]


def _trace(client) -> dict[int, dict]:
    return {r["seq"]: r for r in decode_trace(map(orjson.loads, client.get("/v1/trace").content.splitlines()))}


def _read_in_order(client, records: list[dict]) -> None:
    """The records, read in order, are the trace's and pass the verifier."""
    whole = _trace(client)
    assert list(decode_trace(records)) == [whole[r["seq"]] for r in records]
    data = b"".join(orjson.dumps(r) + b"\n" for r in records)
    assert [f for f in verify_bytes(data) if f.is_error] == []


@pytest.mark.parametrize("first", [UNSCHEDULABLE, TASKS[0]], ids=["carried-by-a-rejection", "carried-by-a-binding"])
def test_answers_naming_the_record_that_carried_the_snapshot_refer_to_it(client, first):
    held = _records(client.post("/v1/place?record=compact", json={"requirements": first}))
    carrier = _carrier(held)
    read = list(held)
    for task in TASKS[1:6]:
        records = _records(client.post(f"/v1/place?record=compact&fleet={carrier}", json={"requirements": task}))
        assert TABLE not in orjson.dumps(records)
        assert orjson.dumps(records).count(b'"fleet":%d' % carrier) == 1
        read += records
    # a batch: every answer refers to the record, in either compact form
    for form in ("compact", "compact-stream"):
        answers = client.post(f"/v1/place?record={form}&fleet={carrier}",
                              json=[{"requirements": t} for t in TASKS[6:9]]).json()
        assert all(TABLE not in orjson.dumps(a) for a in answers)
        read += [r for a in answers for r in a["records"]]
    _read_in_order(client, read)


def test_answers_naming_a_record_that_carried_no_snapshot_stand_alone(client):
    held = _records(client.post("/v1/place?record=compact", json={"requirements": TASKS[0]}))
    submitted = held[0]["seq"]
    assert held[0]["kind"] == "task.submitted"
    for named in (submitted, 0, 10**6):
        records = _records(client.post(f"/v1/place?record=compact&fleet={named}", json={"requirements": TASKS[1]}))
        assert TABLE in orjson.dumps(records)
        _read_in_order(client, records)


def test_spec_answers_are_unchanged_by_a_named_record(client):
    held = _records(client.post("/v1/place?record=compact", json={"requirements": TASKS[0]}))
    records = _records(client.post(f"/v1/place?fleet={_carrier(held)}", json={"requirements": TASKS[1]}))
    assert b"a3fast.compact" not in orjson.dumps(records) and "scheduling" in records[-1]["content"]


def test_a_new_snapshot_is_carried_again_based_on_the_one_held(client):
    held = _records(client.post("/v1/place?record=compact", json={"requirements": TASKS[0]}))
    carrier = _carrier(held)
    assert client.delete(f"/v1/agents/{FLEET[0]['agent']['name']}").status_code == 200
    records = _records(client.post(f"/v1/place?record=compact&fleet={carrier}", json={"requirements": TASKS[1]}))
    assert b'"fleet":{"base":%d' % carrier in orjson.dumps(records)
    # the new snapshot's record is held from then on
    renewed = _carrier(records)
    later = _records(client.post(f"/v1/place?record=compact&fleet={renewed}", json={"requirements": TASKS[2]}))
    assert b'"fleet":%d' % renewed in orjson.dumps(later)
    # an answer naming the older record carries the current snapshot whole
    older = _records(client.post(f"/v1/place?record=compact&fleet={carrier}", json={"requirements": TASKS[3]}))
    assert TABLE in orjson.dumps(older) and _carrier(older) == older[-1]["seq"]
    _read_in_order(client, held + records + later)
    _read_in_order(client, held + older)


@pytest.mark.parametrize("value", ["x", "-1", "1.5", "", "1" * 40, "%C2%B2"])
def test_a_named_record_that_is_not_a_seq_is_refused(client, value):
    answer = client.post(f"/v1/place?record=compact&fleet={value}", json={"requirements": TASKS[0]})
    assert answer.status_code == 400
    [problem] = answer.json()["problems"]
    assert problem["path"] == "$.fleet"
    batch = client.post(f"/v1/place?fleet={value}", json=[{"requirements": TASKS[0]}])
    assert batch.status_code == 400
    assert _trace(client) == {}        # nothing was placed
