"""A task's predicates resolved to the engine's arguments (`resolve_predicates` of each engine), as
every placement's explain stage resolves them (a3fast.fleet.rows): held to a literal reading of
what the arguments mean, on both engines, and through a fleet."""
from __future__ import annotations

from hypothesis import given, strategies as st

from a3fast.engines import engine_module
from a3fast.fleet import Fleet
from a3fast.predicates import (AGENT_REF, ANTI_AFFINITY, CAPABILITY, capability, clearance,
                               residency, tool)
from factories import declaration, requirements

NO_AGENT_REF = -2


def literal_resolution(predicates, rows, eval_rows, ids, no_agent_ref):
    """What the engine's arguments are, read off each predicate's kind (§5's forms): the predicate's
    row (or -1) for a filter predicate, the named agent's id (or -1) for agentRef and
    anti-affinity, and for each capability predicate the row of agents that substantiate it."""
    filter_rows, excluded, substantiated = [], [], []
    only = no_agent_ref
    for p in predicates:
        kind, _, arg = p.partition(":")
        if p in rows:     # a value some agent declared is a row, whatever its text
            filter_rows.append(rows[p])
            if kind == CAPABILITY:
                substantiated.append(eval_rows.get(p, -1))
        elif kind == ANTI_AFFINITY:
            excluded.append(ids.get(arg, -1))
        elif kind == AGENT_REF:
            only = ids.get(arg, -1)
        else:
            filter_rows.append(-1)
            if kind == CAPABILITY:
                substantiated.append(-1)
    return filter_rows, only, excluded, substantiated


def test_resolve_predicates_gives_rows_ids_and_substantiating_rows_in_derivation_order(engine):
    resolve = engine_module(engine).resolve_predicates
    rows = {capability("a.b", 1): 0, clearance("x"): 1, tool("mcp:t"): 2, residency("eu"): 3}
    eval_rows = {capability("a.b", 1): 4}
    ids = {"agent-1": 7, "agent-2": 9}
    predicates = (capability("a.b", 1), capability("c.d", 2), clearance("x"), clearance("y"),
                  tool("mcp:t"), residency("eu"), f"{AGENT_REF}:agent-2", f"{ANTI_AFFINITY}:agent-1",
                  f"{ANTI_AFFINITY}:gone")
    assert resolve(predicates, rows, eval_rows, ids, NO_AGENT_REF) == (
        [0, -1, 1, -1, 2, 3], 9, [7, -1], [4, -1])
    assert resolve((f"{AGENT_REF}:nobody",), rows, eval_rows, ids, NO_AGENT_REF) == ([], -1, [], [])
    assert resolve((), rows, eval_rows, ids, NO_AGENT_REF) == ([], NO_AGENT_REF, [], [])


# é is stored in a byte a character, € in two, 😀 in four: a prefix is read in each width
_name = st.text(alphabet="ab.-:/é€\U0001F600", min_size=0, max_size=6)
_predicate = st.one_of(
    st.builds(lambda n, v: capability(n, v), _name, st.integers(0, 3)),
    st.builds(clearance, _name), st.builds(tool, _name), st.builds(residency, _name),
    st.builds(lambda n: f"{AGENT_REF}:{n}", _name), st.builds(lambda n: f"{ANTI_AFFINITY}:{n}", _name),
    _name)


@given(predicates=st.lists(_predicate, max_size=8).map(tuple), data=st.data())
def test_resolve_predicates_equals_the_literal_reading(engine, predicates, data):
    resolve = engine_module(engine).resolve_predicates
    # the fleet's maps hold some of the task's predicates and names, and others of their own
    known = st.sampled_from(predicates + ("capability:z/1", "clearance:z")) if predicates else st.just("clearance:z")
    rows = data.draw(st.dictionaries(known, st.integers(0, 50), max_size=6))
    eval_rows = data.draw(st.dictionaries(known, st.integers(0, 50), max_size=4))
    ids = data.draw(st.dictionaries(_name, st.integers(0, 50), max_size=6))
    assert resolve(predicates, rows, eval_rows, ids, NO_AGENT_REF) == literal_resolution(
        predicates, rows, eval_rows, ids, NO_AGENT_REF)


def test_a_fleet_places_by_the_rows_its_engine_resolves(engine):
    fleet = Fleet(engine=engine)
    fleet.extend([declaration("a", capabilities=[("x.y", 1)], clearances=["org.c"]),
                  declaration("b", capabilities=[("x.y", 1)], clearances=["org.c"])])
    task = requirements(capabilities=[("x.y", 1)], clearances=["org.c"], exclude=["b"])
    assert fleet.filter_rows(task) == [fleet._rows.rows[p] for p in ("capability:x.y/1", "clearance:org.c")]
    placement = fleet.place(task)
    assert placement.agent == "a"
    assert fleet.place(requirements(capabilities=[("x.y", 1)], agentRef="b")).agent == "b"
    assert fleet.place(requirements(capabilities=[("x.y", 1)], agentRef="nobody")).agent is None
