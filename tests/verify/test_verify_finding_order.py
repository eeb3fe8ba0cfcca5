"""Findings come in trace order whichever way the trace is given: an authority-envelope warning,
which is found only when the placement after its task.admitted is read, still comes before that
placement's own findings, in a list of records (no lines to sort by) as in a file."""
from __future__ import annotations

import orjson

from a3fast.verify import verify, verify_bytes

from factories import section_10_order_analyst, section_10_requirements

REQUIREMENTS = section_10_requirements()
DECLARATION = section_10_order_analyst()


def test_an_envelope_warning_comes_before_the_next_placements_findings_in_both_readings():
    trace = [
        {"seq": 1, "kind": "task.submitted", "content": {"requirements": REQUIREMENTS}},
        {"seq": 2, "kind": "task.admitted", "content": {"agent": DECLARATION["agent"], "authority_envelope": None}},
        {"seq": 3, "kind": "task.bound", "content": {"scheduling": {
            "requirements": None, "declaration": DECLARATION, "candidates": ["order-analyst"],
            "filters_passed": [], "filters_failed": [], "scores": {"order-analyst": {"total": 1.0}}}}},
    ]
    from_values = [(f.code, f.seq) for f in verify(trace)]
    from_file = [(f.code, f.seq) for f in verify_bytes(b"".join(orjson.dumps(r) + b"\n" for r in trace))]
    assert from_values == from_file
    assert from_values[0] == ("W_ENVELOPE_MALFORMED", 2)
    assert ("E_STRUCTURE", 3) in from_values
