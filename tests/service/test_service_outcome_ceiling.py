"""An outcome past the ceiling of counts (docs/design.md, Reading 26) is answered 409 naming it,
not 404 as for an agent that is not in the fleet, and is not journaled."""
from __future__ import annotations

import io

import orjson

from a3fast.schema import parse_declaration
from a3fast.fleet.scoring import MAX_OUTCOMES
from a3fast.service import stdio
from a3fast.service.operations import Operations
from a3fast.service.state import ServiceState
from factories import declaration


def answers(state: ServiceState, *requests: dict) -> list[dict]:
    data = b"".join(orjson.dumps(r) + b"\n" for r in requests)
    out = io.BytesIO()
    stdio.serve_stdio_sync(Operations(state), io.BytesIO(data), out, len(data) + 1)
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def test_an_outcome_past_the_ceiling_is_a_conflict_and_changes_nothing(tmp_path):
    state = ServiceState(tmp_path, log=lambda message: None)
    state.open()
    try:
        state.put_agents([parse_declaration(declaration("a", capabilities=[("x.y", 1)]))])
        state.fleet.record_outcomes("a", "k", 2, MAX_OUTCOMES)
        refused, missing = answers(state, {"op": "outcome", "id": 1, "agent": "a", "kind": "k", "success": True},
                                   {"op": "outcome", "id": 2, "agent": "b", "kind": "k", "success": True})
        assert refused["status"] == 409 and refused["problems"][0]["path"] == "$.success"
        assert f"at most {MAX_OUTCOMES} outcomes" in refused["problems"][0]["expected"]
        assert missing["status"] == 404
        assert state.fleet.outcomes("a", "k") == (2, MAX_OUTCOMES)
    finally:
        state.close()
