"""After a bulk load the service freezes what is alive out of the garbage collector's later full
passes (a fleet's declarations and rows are long-lived and would be walked again and again)."""
from __future__ import annotations

from a3fast.schema import parse_declaration
from a3fast.service.state import ServiceState
from a3fast.workload import generate_fleet

FLEET = generate_fleet(2, seed=8)


def test_the_fleet_is_frozen_out_of_the_collector_once_it_has_grown_in_bulk():
    import gc

    from a3fast.service.state import SETTLE_AFTER

    state = ServiceState(settle=True)
    state.open()
    try:
        gc.unfreeze()
        state.put_agents([parse_declaration(d) for d in FLEET[:2]])
        assert gc.get_freeze_count() == 0          # two agents: not yet
        many = generate_fleet(SETTLE_AFTER, seed=9)
        state.put_agents([parse_declaration(d) for d in many])
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        state.close()


def test_a_state_embedded_in_another_program_leaves_its_collector_alone():
    import gc

    from a3fast.service.state import SETTLE_AFTER

    state = ServiceState()
    state.open()
    try:
        gc.unfreeze()
        state.put_agents([parse_declaration(d) for d in generate_fleet(SETTLE_AFTER, seed=9)])
        assert gc.get_freeze_count() == 0
    finally:
        state.close()
