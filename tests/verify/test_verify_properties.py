"""Properties of the verifier: any JSON in any field gives findings, never an exception; the typed
fast reading and the generic reading agree on every finding; what a3fast's Fleet records verifies.
"""
from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from a3fast import Route
from a3fast.conformance import load_vectors
from a3fast.record.write import placement_records
from a3fast.trace import TraceWriter
from a3fast.verify import Finding, verify, verify_bytes

from edge_documents import paths
from factories import declaration, fleet_of

VECTORS = Path(__file__).parents[2] / "vectors"
SEEDS = [v.trace for v in load_vectors(VECTORS) if isinstance(v.trace, list) and v.valid]

# Words the records use, so that random values often land on the interesting branches.
VOCABULARY = ["task.bound", "task.submitted", "task.admitted", "task.rejected", "order-analyst",
              "summariser", "support", "unschedulable", "capability:order.investigate/2",
              "clearance:orders.read", "residency:eu", "orders.read", "eu", "interactive", ""]
SAFE_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | SAFE_TEXT | st.sampled_from(VOCABULARY),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(SAFE_TEXT | st.sampled_from(VOCABULARY), children, max_size=4),
    max_leaves=12)


def mutate(trace: list, path: tuple, op: str, value: Any) -> list:
    trace = copy.deepcopy(trace)
    if not path:
        return [value]
    parent = trace
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    if op == "delete" and isinstance(parent, dict):
        del parent[key]
    elif op == "add" and isinstance(parent[key], dict):
        parent[key]["extra"] = value
    else:
        parent[key] = value
    return trace


@st.composite
def mutated_traces(draw) -> list:
    trace = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths(trace)))
        trace = mutate(trace, path, draw(st.sampled_from(["replace", "delete", "add"])), draw(JSON))
    return trace


def comparable(findings: list[Finding]) -> list[tuple]:
    # A record's line exists only in a file; E_TRACE says "record N" for a list and "line N" for a file.
    return [(f.code, f.seq, f.severity, "" if f.code == "E_TRACE" else f.message) for f in findings]


def as_jsonl(trace: list) -> bytes:
    return b"".join(orjson.dumps(record) + b"\n" for record in trace)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(mutated_traces())
def test_any_json_in_any_field_gives_findings_and_both_readings_agree(trace):
    # A first line that is itself an array would make the file a JSON array trace: not comparable.
    assume(not (trace and isinstance(trace[0], list)))
    from_values = verify(trace)
    from_file = verify_bytes(as_jsonl(trace))
    assert all(isinstance(f, Finding) for f in from_values + from_file)
    assert comparable(from_values) == comparable(from_file)


@settings(max_examples=100, deadline=None)
@given(st.lists(JSON, max_size=5))
def test_any_json_values_as_records_give_findings(values):
    findings = verify(values)
    assert all(isinstance(f, Finding) for f in findings)
    # A value that is not an object is never a record: each is one E_TRACE.
    not_records = sum(1 for v in values if not isinstance(v, dict))
    assert sum(1 for f in findings if f.code == "E_TRACE" and f.seq is None) >= not_records


def a_record(line: bytes) -> dict | None:
    """The line as a well-formed trace record {seq: int, kind: str, content: object}, else None;
    read with orjson, independently of the verifier's own reader."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    ok = (isinstance(value, dict) and type(value.get("seq")) is int and isinstance(value.get("kind"), str)
          and isinstance(value.get("content"), dict))
    return value if ok else None


# Lines of a JSON Lines trace: garbage, JSON that is no record, records of a kind §7 does not check
# (so that a trace of them is valid), placements with nothing in them, and blank lines.
note = st.builds(lambda seq: orjson.dumps({"seq": seq, "kind": "note", "content": {"text": "x"}}),
                 st.integers(-3, 6))
trace_lines = st.lists(st.one_of(st.binary(max_size=30), st.sampled_from([b"", b"  ", b"[1]", b"7", b"{}", b"null"]),
                                 note, note, st.builds(lambda seq: orjson.dumps(
                                     {"seq": seq, "kind": "task.bound", "content": {}}), st.integers(0, 6))),
                       max_size=8)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=200) | trace_lines.map(b"\n".join))
def test_any_bytes_give_findings_naming_each_line_that_is_not_a_record(data):
    findings = verify_bytes(data)  # never raises, whatever the bytes
    assert all(isinstance(f, Finding) for f in findings)
    lines = [(n, line) for n, line in enumerate(data.split(b"\n"), 1) if line and not line.isspace()]
    if lines and lines[0][1].lstrip()[:1] == b"[":
        # a JSON array trace, read whole: unreadable, it is one E_TRACE at its first line
        try:
            orjson.loads(data)
        except orjson.JSONDecodeError:
            assert ("E_TRACE", lines[0][0]) in [(f.code, f.line) for f in findings]
        return
    trace_lines_found = {f.line for f in findings if f.code == "E_TRACE"}
    records = [(n, a_record(line)) for n, line in lines]
    for n, record in records:
        if record is None:
            assert n in trace_lines_found, f"line {n} is not a record, yet no E_TRACE names it"
    seqs = [record["seq"] for _, record in records if record is not None]
    increasing = all(a < b for a, b in zip(seqs, seqs[1:]))
    if all(record is not None and record["kind"] == "note" for _, record in records) and increasing:
        assert findings == []  # only well-formed records of a kind §7 leaves alone: valid
    if not findings:
        assert all(record is not None for _, record in records) and increasing


@settings(max_examples=50, deadline=None)
@given(JSON)
def test_a_value_that_is_not_a_sequence_of_records_is_one_E_TRACE(value):
    findings = verify(value) if not isinstance(value, list) else verify([value])
    assert findings and all(f.code == "E_TRACE" for f in findings)


# -- what the Fleet records verifies clean -----------------------------------------------------

CAPS = [("order.investigate", 1), ("order.investigate", 2), ("case.summarise", 1)]
CLEARANCES = ["orders.read", "refunds.issue", "customers.read"]


@st.composite
def fleets_and_requirements(draw):
    fleet = []
    for i in range(draw(st.integers(1, 6))):
        capabilities = draw(st.lists(st.sampled_from(CAPS), max_size=3, unique=True))
        doc = declaration(f"agent-{i}", capabilities=capabilities,
                          clearances=draw(st.lists(st.sampled_from(CLEARANCES), max_size=3, unique=True)))
        if draw(st.booleans()):
            doc["residency"] = draw(st.lists(st.sampled_from(["eu", "us"]), max_size=2, unique=True))
        if draw(st.booleans()):
            doc["tools"] = draw(st.lists(st.sampled_from(["crm.lookup", "mail.send"]), max_size=2, unique=True))
        if draw(st.booleans()):
            doc["model"] = {"latency_class": draw(st.sampled_from(["interactive", "batch"]))}
        fleet.append(doc)
    req: dict[str, Any] = {"v": "1.0"}
    if draw(st.booleans()):
        req["capabilities"] = [{"name": n, "version": v} for n, v in draw(st.lists(st.sampled_from(CAPS), max_size=2, unique=True))]
    if draw(st.booleans()):
        req["clearances"] = draw(st.lists(st.sampled_from(CLEARANCES), max_size=2, unique=True))
    if draw(st.booleans()):
        req["residency"] = draw(st.sampled_from(["eu", "us"]))
    if draw(st.booleans()):
        req["model"] = {"latency_class": draw(st.sampled_from(["interactive", "batch"]))}
    if draw(st.booleans()):
        req["exclude"] = [f"agent-{draw(st.integers(0, 5))}"]
    return fleet, req


@settings(max_examples=60, deadline=None)
@given(fleets_and_requirements(), st.booleans())
def test_placements_recorded_by_the_fleet_verify_clean(engine, case, resume):
    fleet_docs, requirements = case
    fleet = fleet_of(engine, fleet_docs)
    placement = fleet.place(requirements)
    records = list(placement_records(placement))
    if resume and placement.bound:
        records += [("task.preempted", b"{}")] + list(placement_records(fleet.resume(placement, seq=3)))
    out = io.BytesIO()
    writer = TraceWriter(out)
    for kind, content in records:
        writer.append(kind, content_json=content)
    findings = verify_bytes(out.getvalue())
    assert [f for f in findings if f.is_error] == []


@settings(max_examples=30, deadline=None)
@given(fleets_and_requirements())
def test_placements_through_a_route_verify_clean(engine, case):
    fleet_docs, requirements = case
    fleet = fleet_of(engine, fleet_docs)
    route = Route("needs-crm", {"tools": ["crm.lookup"]})
    placement = fleet.place(requirements, route=route)
    out = io.BytesIO()
    writer = TraceWriter(out)
    for kind, content in placement_records(placement):
        writer.append(kind, content_json=content)
    assert [f for f in verify_bytes(out.getvalue()) if f.is_error] == []
