"""Compact traces (docs/compact-format.md) verify as the spec traces they stand for."""
from __future__ import annotations

import copy

import orjson
import pytest

from a3fast import Fleet
from a3fast.compact import KEY, encode_trace
from a3fast.records import placement_records
from a3fast.verify import verify, verify_bytes


def declaration(name, capability_version=2):
    return {"v": "1.0", "agent": {"name": name, "namespace": "support"},
            "capabilities": [{"name": "order.investigate", "version": capability_version}],
            "clearances": ["orders.read"], "residency": ["eu"]}


REQ = {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 2}], "clearances": ["orders.read"]}


@pytest.fixture
def spec_trace(engine):
    fleet = Fleet(engine=engine)
    for i in range(40):
        fleet.add(declaration(f"agent-{i:02d}", 2 if i % 3 else 1))
    records, seq = [], 1
    for _ in range(3):
        for kind, content in placement_records(fleet.place(REQ)):
            records.append({"seq": seq, "kind": kind, "content": orjson.loads(content)})
            seq += 1
    records.append({"seq": seq, "kind": "task.submitted", "content": {"requirements": dict(REQ, tools=["x"])}})
    rejected = fleet.place(dict(REQ, tools=["x"]))
    assert not rejected.bound
    records.append({"seq": seq + 1, "kind": "task.rejected", "content": rejected.rejection})
    return records


def test_a_compact_trace_verifies_like_its_spec_form(spec_trace):
    compact = list(encode_trace(spec_trace))
    assert any(KEY in r["content"] for r in compact)
    assert verify(spec_trace) == []
    assert verify(compact) == []
    assert verify_bytes(b"".join(orjson.dumps(r) + b"\n" for r in compact)) == []


def test_a_compact_record_that_cannot_be_decoded_is_E_STRUCTURE(spec_trace):
    compact = copy.deepcopy(list(encode_trace(spec_trace)))
    bound = next(r for r in compact if r["kind"] == "task.bound")
    bound["content"][KEY]["failed"] = "not bitmaps"
    findings = verify(compact)
    assert ("E_STRUCTURE", bound["seq"]) in {(f.code, f.seq) for f in findings}
    assert KEY in findings[0].message
