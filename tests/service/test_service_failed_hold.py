"""A placement whose session cannot be held (a shard down) writes no record, and leaves the
compact encoder as it was: the trace the service writes next still decodes, every record to the
spec record of its placement."""
from __future__ import annotations

import orjson
import pytest

import a3fast
from a3fast.distributed.sharded import ShardError
from a3fast.record.write import placement_records
from a3fast.schema import parse_declaration, parse_requirements
from a3fast.service.state import ServiceState
from a3fast.workload import generate_fleet

FLEET = generate_fleet(20, seed=3)
TASK = {"v": "1.0", "capabilities": [], "clearances": []}


@pytest.mark.parametrize("batch", [False, True])
def test_a_placement_whose_session_cannot_be_held_leaves_the_trace_decodable(batch, monkeypatch):
    state = ServiceState()
    state.open()
    try:
        state.put_agents([parse_declaration(d) for d in FLEET])
        state.put_agents([parse_declaration(FLEET[0])])     # a new generation: a new snapshot next

        def down(agent, session):
            raise ShardError(0, "down")

        fleet_hold = state.fleet.hold_session
        monkeypatch.setattr(state.fleet, "hold_session", down)
        task = parse_requirements({**TASK, "session": "s1"})
        if batch:
            [refused] = state.place_many([task], [None], [True])
            assert isinstance(refused, ShardError)
        else:
            with pytest.raises(ShardError):
                state.place(task, compact=True)
        monkeypatch.setattr(state.fleet, "hold_session", fleet_hold)
        state.doubt = None                                   # the shard is back
        placed = [state.place(parse_requirements(TASK), compact=True)[0] for _ in range(2)]
        state.flush_trace()
        records = list(a3fast.read_records(state.trace_path))
        expected = [{"seq": seq, "kind": kind, "content": orjson.loads(content)}
                    for seq, (kind, content) in enumerate((r for p in placed for r in placement_records(p)), 1)]
        assert records == expected
    finally:
        state.close()
