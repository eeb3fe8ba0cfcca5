"""A served fleet whose agents come and go under new names is compacted (`Fleet.compact`) once it
holds as many names of agents gone as live agents (and at least `COMPACT_FROM`), as a change of its
own in the journal: a restart that replays the journal finds the fleet the service had, a name that
came back after the compaction included. One whose agents are re-declared with ever new values drops
the rows no agent is in (`Fleet.drop_unused_rows`) once, counted every `COMPACT_FROM` agents put, it
holds as many as live agents: nothing it shows changes, so nothing is journaled (docs/service.md,
"Limits")."""
from __future__ import annotations

import pytest

from a3fast.schema import parse_declaration
from a3fast.service import state as state_module
from a3fast.service.state import ServiceState

from factories import declaration


def _churn(state: ServiceState, rounds: int, first: int = 0) -> None:
    for k in range(first, first + rounds):
        name = f"passing-{k}"
        state.put_agents([parse_declaration(declaration(name))])
        state.record_outcome(name, "k", True)
        state.delete_agent(name)


def _seen(state: ServiceState) -> tuple:
    fleet = state.fleet
    return (fleet.names(), fleet.names_gone, fleet.outcomes("passing-0", "k"), fleet.outcomes("live-0", "k"),
            fleet.place({}, remember_session=False).candidates)


@pytest.mark.parametrize("checkpoint_every", [3, 10**6])
def test_a_served_fleet_is_compacted_and_a_restart_finds_the_fleet_it_had(tmp_path, monkeypatch, engine,
                                                                         checkpoint_every):
    monkeypatch.setattr(state_module, "COMPACT_FROM", 8)
    state = ServiceState(tmp_path / "state", engine=engine, checkpoint_every=checkpoint_every)
    state.open()
    state.put_agents([parse_declaration(declaration(f"live-{i}")) for i in range(4)])
    state.record_outcome("live-0", "k", False)
    _churn(state, 7)
    assert state.fleet.names_gone == 7               # fewer than COMPACT_FROM: kept
    _churn(state, 1, first=7)
    assert state.fleet.names_gone == 0               # 8 gone, 4 live: compacted
    # a name that comes back after the compaction is a new agent, with no history, last in the order
    state.put_agents([parse_declaration(declaration("passing-0"))])
    seen = _seen(state)
    assert seen == (["live-0", "live-1", "live-2", "live-3", "passing-0"], 0, (0, 0), (0, 1),
                    ["live-0", "live-1", "live-2", "live-3", "passing-0"])
    state.close(checkpoint=False)                    # as a crash leaves it: the journal replayed
    again = ServiceState(tmp_path / "state", engine=engine, checkpoint_every=checkpoint_every)
    again.open()
    try:
        assert _seen(again) == seen
    finally:
        again.close()


def test_a_fleet_with_fewer_names_gone_than_live_agents_is_left_as_it_is(monkeypatch, engine):
    monkeypatch.setattr(state_module, "COMPACT_FROM", 2)
    state = ServiceState(engine=engine)
    state.open()
    try:
        state.put_agents([parse_declaration(declaration(f"live-{i}")) for i in range(10)])
        _churn(state, 9)
        assert state.fleet.names_gone == 9
        _churn(state, 1, first=9)
        assert state.fleet.names_gone == 0
    finally:
        state.close()


def _failing(monkeypatch, engine: str, method: str, compact_from: int) -> tuple[ServiceState, list[str]]:
    """An open state of one agent, "live-0", whose fleet's `method` runs out of memory, with
    COMPACT_FROM at `compact_from`; and the lines it logs."""
    monkeypatch.setattr(state_module, "COMPACT_FROM", compact_from)
    logged: list[str] = []
    state = ServiceState(engine=engine, log=logged.append)
    state.open()
    state.put_agents([parse_declaration(declaration("live-0"))])

    def out_of_memory() -> int:
        raise MemoryError()

    monkeypatch.setattr(state.fleet, method, out_of_memory)
    return state, logged


def test_a_compaction_that_fails_leaves_the_removal_made_and_answered(monkeypatch, engine):
    state, logged = _failing(monkeypatch, engine, "compact", 2)
    try:
        _churn(state, 2)                       # each removal answered; the compaction logged
        assert state.fleet.names() == ["live-0"] and state.fleet.names_gone == 2
        assert len(logged) == 1 and "not compacted (MemoryError" in logged[0]
        _churn(state, 1, first=2)              # not tried again until twice as many names are gone
        assert len(logged) == 1
        monkeypatch.undo()
        monkeypatch.setattr(state_module, "COMPACT_FROM", 2)
        _churn(state, 1, first=3)
        assert state.fleet.names_gone == 0
        _churn(state, 2, first=4)              # the doubled wait was for that try only
        assert state.fleet.names_gone == 0
    finally:
        state.close()


def _redeclare(state: ServiceState, rounds: int, first: int = 0, name: str = "live-0") -> None:
    for k in range(first, first + rounds):
        state.put_agents([parse_declaration(declaration(name, capabilities=[f"x.new{k}/1"]))])


def _shown(state: ServiceState) -> tuple:
    fleet = state.fleet
    return (fleet.names(), fleet.names_gone, fleet.outcomes("live-0", "k"), fleet.outcomes("gone", "k"),
            fleet.generation, fleet.place({"capabilities": [{"name": "x.new11", "version": 1}]}).agent,
            fleet.place({}, remember_session=False).candidates)


@pytest.mark.parametrize("checkpoint_every", [3, 10**6])
def test_a_served_fleet_re_declared_with_new_values_drops_its_unused_rows_and_nothing_else(tmp_path, monkeypatch,
                                                                                          engine, checkpoint_every):
    monkeypatch.setattr(state_module, "COMPACT_FROM", 8)
    state = ServiceState(tmp_path / "state", engine=engine, checkpoint_every=checkpoint_every)
    state.open()
    state.put_agents([parse_declaration(declaration(f"live-{i}")) for i in range(4)])    # one put of 4
    state.put_agents([parse_declaration(declaration("gone"))])
    state.record_outcome("gone", "k", True)
    state.delete_agent("gone")                       # a name gone, far below the names' bound
    state.record_outcome("live-0", "k", True)
    _redeclare(state, 2)                             # 7 agents put: not counted yet
    assert state.fleet.rows_unused == 1
    _redeclare(state, 1, first=2)                    # 8 put: 2 unused, fewer than COMPACT_FROM
    assert state.fleet.rows_unused == 2
    _redeclare(state, 8, first=3)                    # 16 put: 10 unused, more than 8 and than 4 live
    assert state.fleet.rows_unused == 0
    shown = _shown(state)
    assert shown[:4] == (["live-0", "live-1", "live-2", "live-3"], 1, (1, 1), (1, 1))   # the name kept
    state.close(checkpoint=False)                    # as a crash leaves it: the journal replayed
    again = ServiceState(tmp_path / "state", engine=engine, checkpoint_every=checkpoint_every)
    again.open()
    try:
        assert _shown(again) == shown
        # the drop was not journaled, and no checkpoint came after it (the last put): the restart
        # replays the puts that left the rows unused, and holds them until the next count
        assert again.fleet.rows_unused == 10
    finally:
        again.close()


def test_unused_rows_that_cannot_be_dropped_leave_the_put_made_and_answered(monkeypatch, engine):
    state, logged = _failing(monkeypatch, engine, "drop_unused_rows", 1)      # counted after every put
    try:
        _redeclare(state, 2)                   # x.new0 unused: tried, logged, the put made
        assert state.fleet.rows_unused == 1 and state.fleet.get("live-0").capabilities[0].name == "x.new1"
        assert len(logged) == 1 and "unused rows were not dropped (MemoryError" in logged[0]
        monkeypatch.undo()
        monkeypatch.setattr(state_module, "COMPACT_FROM", 1)
        _redeclare(state, 1, first=2)          # counted again at the next put, and dropped
        assert state.fleet.rows_unused == 0 and len(logged) == 1
    finally:
        state.close()
