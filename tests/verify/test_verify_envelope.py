"""The verifier's a3fast-specific envelope check: warnings, never §7 errors."""
import copy

import orjson

import a3fast
from a3fast.verify import is_valid, verify

from factories import fleet_of, requirements, section_10_order_analyst, spec_records

DECL = section_10_order_analyst()
REQ = requirements(capabilities=[("order.investigate", 2)], v=None)


def trace_with_envelope(engine, envelope):
    records = spec_records([fleet_of(engine, [DECL]).place(REQ)])
    for record in records:
        if record["kind"] == "task.admitted" and envelope is not None:
            record["content"]["authority_envelope"] = envelope
    return records


def test_an_envelope_made_by_admit_raises_no_warning(engine):
    envelope = a3fast.admit(DECL, ["orders.read", "refunds.issue"])
    assert envelope["clearances"] == ["orders.read"]
    assert verify(trace_with_envelope(engine, envelope)) == []


def test_an_envelope_wider_than_the_declared_clearances_is_a_warning_not_an_error(engine):
    findings = verify(trace_with_envelope(engine, {"clearances": ["orders.read", "refunds.issue"], "expires": ""}))
    assert [(f.code, f.seq, f.severity) for f in findings] == [("W_ENVELOPE_EXCEEDS_CLEARANCES", 2, "warning")]
    assert "refunds.issue" in findings[0].message
    assert is_valid(findings)


def test_a_malformed_envelope_is_a_warning(engine):
    findings = verify(trace_with_envelope(engine, {"clearances": "orders.read"}))
    assert [(f.code, f.severity) for f in findings] == [("W_ENVELOPE_MALFORMED", "warning")]


def test_an_envelope_warning_stands_at_its_task_admitted_before_the_placements_errors(engine):
    # The envelope is checked when the placement is read, yet its warning belongs to task.admitted:
    # findings come in record order, for a list of records as for the same trace as JSON Lines.
    records = trace_with_envelope(engine, {"clearances": "orders.read"})
    bound = next(r for r in records if r["kind"] == "task.bound")
    bound["content"]["scheduling"]["requirements"] = None  # an E_STRUCTURE, found before the envelope is checked
    expected = [("W_ENVELOPE_MALFORMED", 2), ("E_STRUCTURE", bound["seq"])]
    assert [(f.code, f.seq) for f in verify(records)] == expected
    as_lines = b"".join(orjson.dumps(r) + b"\n" for r in records)
    assert [(f.code, f.seq) for f in verify(as_lines)] == expected


def test_an_envelope_is_checked_once_against_a_placement_on_the_agent_it_admitted(engine):
    # a placement on another agent (E_DECLARATION_SCOPE) is not the one the envelope is checked
    # against; the next placement on the admitted agent is, and the one after it is not again
    records = trace_with_envelope(engine, {"clearances": ["orders.read", "refunds.issue"], "expires": ""})
    bound = next(r for r in records if r["kind"] == "task.bound")
    other = copy.deepcopy(bound)
    other["content"]["scheduling"]["declaration"]["agent"]["name"] = "summariser"
    other["content"]["scheduling"]["declaration"]["clearances"] = ["orders.read", "refunds.issue"]
    trace = records[:-1] + [other, dict(bound, seq=bound["seq"] + 1), dict(bound, seq=bound["seq"] + 2)]
    findings = [(f.code, f.seq) for f in verify(trace)]
    assert ("E_DECLARATION_SCOPE", 3) in findings
    assert [(code, seq) for code, seq in findings if code.startswith("W_")] == [("W_ENVELOPE_EXCEEDS_CLEARANCES", 2)]


def test_an_envelope_warning_and_findings_made_when_the_trace_ends_keep_trace_order(engine):
    # the envelope waits for a placement on the agent it admitted; a seq-less resumed placement on
    # another agent comes between, and its finding (made when the trace ends) stays after its own
    records = trace_with_envelope(engine, {"clearances": ["orders.read", "refunds.issue"], "expires": ""})
    bound = next(r for r in records if r["kind"] == "task.bound")
    resumed = copy.deepcopy(bound)
    scheduling = resumed["content"]["scheduling"]
    for key in ("candidates", "filters_passed", "filters_failed", "scores"):
        scheduling.pop(key, None)
    scheduling["recorded_in"] = {"kind": "task.bound"}
    resumed["content"]["resumed"] = True
    elsewhere = copy.deepcopy(resumed)
    elsewhere["content"]["scheduling"]["declaration"]["agent"]["name"] = "summariser"
    trace = records[:-1] + [dict(elsewhere, seq=bound["seq"]), dict(resumed, seq=bound["seq"] + 1)]
    expected = [("W_ENVELOPE_EXCEEDS_CLEARANCES", 2), ("E_DECLARATION_SCOPE", 3), ("E_EXPLANATION", 3),
                ("E_EXPLANATION", 4)]
    assert [(f.code, f.seq) for f in verify(trace)] == expected
    as_lines = b"".join(orjson.dumps(r) + b"\n" for r in trace)
    assert [(f.code, f.seq) for f in verify(as_lines)] == expected
