"""A fleet snapshot a client holds: an HTTP place answer whose records carry a snapshot's table says
so in its `A3-Fleet` header, a token naming the record that carried it; a request that sends the
token back (`?fleet=TOKEN`) is answered with records that refer to that record rather than carry the
fleet's names again. Read after the answer that carried the table, every answer decodes to exactly
the trace's records and verifies. A token of another service process (a restarted one, whose trace
may have begun again at seq 1) or one forgotten is not taken: the answer carries the table, and a
new token (docs/protocol.md, "A snapshot the client holds")."""
from __future__ import annotations

from contextlib import contextmanager

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
#: a task no agent can take (its placement is a task.rejected record), and one whose requirements
#: hold a member named like the compact one, which no slice may take for the record's own
UNSCHEDULABLE = {"v": "1.0", "capabilities": [{"name": "no.such-capability", "version": 1}]}
DECOY = {**UNSCHEDULABLE, "a3fast.compact": {"format": 1, "fleet": 1}}
TABLE = b'"names":['


#: the same fleet under other names: a service that decoded one with the other's table would say so
RENAMED = [{**d, "agent": {**d["agent"], "name": "renamed-" + d["agent"]["name"]}} for d in FLEET]


@contextmanager
def _service(fleet: list[dict] = FLEET):
    with TestClient(create_app(ServiceConfig())) as client:
        wait_ready(client)
        assert client.post("/v1/agents", content=b"\n".join(orjson.dumps(d) for d in fleet)).status_code == 200
        yield client


@pytest.fixture()
def client():
    with _service() as client:
        yield client


def _place(client, task, query: str = "?record=compact") -> tuple[list[dict], str | None]:
    answer = client.post("/v1/place" + query, json={"requirements": task})
    assert answer.status_code == 200, answer.content
    return answer.json()["records"], answer.headers.get("a3-fleet")


def _trace(client) -> dict[int, dict]:
    return {r["seq"]: r for r in decode_trace(map(orjson.loads, client.get("/v1/trace").content.splitlines()))}


def _read_in_order(client, records: list[dict]) -> None:
    """The records, read in order, are the trace's and pass the verifier."""
    whole = _trace(client)
    assert list(decode_trace(records)) == [whole[r["seq"]] for r in records]
    data = b"".join(orjson.dumps(r) + b"\n" for r in records)
    assert [f for f in verify_bytes(data) if f.is_error] == []


@pytest.mark.parametrize("first", [TASKS[0], UNSCHEDULABLE, DECOY], ids=["bound", "rejected", "decoy"])
@pytest.mark.parametrize("earlier", [False, True], ids=["first-placement", "after-others"])
def test_answers_sending_the_token_back_refer_to_the_record_that_carried_the_table(client, first, earlier):
    if earlier:     # the trace's own snapshot record is another client's: this one's refers to it
        _place(client, TASKS[11])
    held, token = _place(client, first)
    assert token is not None and TABLE in orjson.dumps(held)
    read = list(held)
    for task in TASKS[1:5]:
        records, again = _place(client, task, f"?record=compact&fleet={token}")
        assert TABLE not in orjson.dumps(records) and again is None
        assert orjson.dumps(records).count(b'"fleet":%s' % token.split("-")[0].encode()) == 1
        read += records
    for form in ("compact", "compact-stream"):     # a batch's answers, in either compact form
        answer = client.post(f"/v1/place?record={form}&fleet={token}", json=[{"requirements": t} for t in TASKS[5:8]])
        assert answer.status_code == 200 and "a3-fleet" not in answer.headers
        assert TABLE not in answer.content
        read += [r for a in answer.json() for r in a["records"]]
    _read_in_order(client, read)


def test_a_token_of_another_service_process_is_not_taken():
    with _service() as before:
        _, token = _place(before, TASKS[0])
    with _service(RENAMED) as after:       # a restart without a state directory: the trace begins again
        # another client's first answer: a token for the same seq, in the new trace
        _, theirs = _place(after, TASKS[0])
        assert theirs.split("-")[0] == token.split("-")[0] and theirs != token
        records, renewed = _place(after, TASKS[1], f"?record=compact&fleet={token}")
        assert TABLE in orjson.dumps(records) and renewed is not None and renewed != token
        _read_in_order(after, records)
        later, _ = _place(after, TASKS[2], f"?record=compact&fleet={renewed}")
        assert TABLE not in orjson.dumps(later)
        _read_in_order(after, records + later)


def test_a_token_for_a_record_that_carried_nothing_is_not_taken(client):
    held, token = _place(client, TASKS[0])
    issuer = token.split("-")[1]
    for record in (held[0]["seq"], 0, 10**6):       # a task.submitted, and seqs never handed out
        records, renewed = _place(client, TASKS[1], f"?record=compact&fleet={record}-{issuer}")
        assert TABLE in orjson.dumps(records) and renewed is not None
        _read_in_order(client, records)


def test_a_new_snapshot_is_carried_again_with_a_new_token(client):
    held, token = _place(client, TASKS[0])
    assert client.delete(f"/v1/agents/{FLEET[0]['agent']['name']}").status_code == 200
    # the fleet's new snapshot is based on the one held: the names added, and the live set
    records, renewed = _place(client, TASKS[1], f"?record=compact&fleet={token}")
    assert b'"fleet":{"base":%s' % token.split("-")[0].encode() in orjson.dumps(records)
    assert renewed is not None and renewed != token
    later, again = _place(client, TASKS[2], f"?record=compact&fleet={renewed}")
    assert TABLE not in orjson.dumps(later) and again is None
    _read_in_order(client, held + records + later)


def test_spec_answers_carry_no_token(client):
    _, token = _place(client, TASKS[0])
    records, again = _place(client, TASKS[1], f"?fleet={token}")
    assert again is None and b"a3fast.compact" not in orjson.dumps(records)


@pytest.mark.parametrize("value", ["x", "", "3", "3-", "-0123456789abcdef", "3-0123456789ABCDEF", "3-0123456789abcde",
                                   "1" * 21 + "-0123456789abcdef", "%C2%B2-0123456789abcdef", "3-0123456789abcdeg",
                                   "%D9%A3-0123456789abcdef", "3-0123456789abcdef%0A", "3--0123456789abcdef",
                                   "+3-0123456789abcdef", "3-0123456789abcdef0"])
def test_text_that_is_no_token_is_refused_and_nothing_is_placed(client, value):
    answer = client.post(f"/v1/place?record=compact&fleet={value}", json={"requirements": TASKS[0]})
    assert answer.status_code == 400
    [problem] = answer.json()["problems"]
    assert problem["path"] == "$.fleet"
    assert client.post(f"/v1/place?fleet={value}", json=[{"requirements": TASKS[0]}]).status_code == 400
    assert _trace(client) == {}


@pytest.mark.parametrize("form", ["compact", "compact-stream"])
def test_a_batch_names_its_last_record_that_carried_a_table(client, form):
    answer = client.post(f"/v1/place?record={form}", json=[{"requirements": t} for t in TASKS[:4]])
    assert answer.status_code == 200
    read = [r for a in answer.json() for r in a["records"]]
    carriers = [r["seq"] for r in read if type(r["content"].get("a3fast.compact", {}).get("fleet")) is dict]
    token = answer.headers["a3-fleet"]
    assert int(token.split("-")[0]) == carriers[-1]
    records, again = _place(client, TASKS[4], f"?record=compact&fleet={token}")
    assert TABLE not in orjson.dumps(records) and again is None
    _read_in_order(client, read + records)


def test_a_token_forgotten_is_not_taken(client, monkeypatch):
    from a3fast.service import operations

    monkeypatch.setattr(operations, "TOKENS_KEPT", 2)
    tokens = [_place(client, task)[1] for task in TASKS[:3]]      # three carriers: the first is forgotten
    assert len(set(tokens)) == 3
    records, renewed = _place(client, TASKS[3], f"?record=compact&fleet={tokens[0]}")
    assert TABLE in orjson.dumps(records) and renewed is not None    # and the second is forgotten now
    for token in (tokens[2], renewed):
        records, again = _place(client, TASKS[4], f"?record=compact&fleet={token}")
        assert TABLE not in orjson.dumps(records) and again is None
