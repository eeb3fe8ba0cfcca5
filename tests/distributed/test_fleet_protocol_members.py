"""The members of `FleetProtocol` the service relies on answer alike on both fleets: the namespace a
name is held by, the generation a cache is keyed by, and `close` (a no-op on a Fleet; a sharded
fleet's actors ended). mypy holds the signatures (tests/typing/fleet_protocol.py); this holds the
answers. A local Ray is started for the module."""
from __future__ import annotations

from a3fast import Fleet
from a3fast.fleet import FleetProtocol


def agent(name: str, namespace: str) -> dict:
    return {"v": "1.0", "agent": {"name": name, "namespace": namespace}, "capabilities": [],
            "clearances": ["orders.read"]}


def answers(fleet: FleetProtocol) -> list:
    """What the service asks of its fleet, in one run written against the protocol."""
    seen = []
    start = fleet.generation
    fleet.add(agent("a", "support"))
    fleet.extend([agent("b", "billing"), agent("c", "support")])
    seen.append([fleet.namespace_of(n) for n in ("a", "b", "c", "nobody")])
    fleet.remove("b")
    seen.append([fleet.namespace_of(n) for n in ("a", "b")])
    seen.append(fleet.generation > start)
    before = fleet.generation
    p = fleet.place({"session": "s"}, candidates=["c", "nobody"], remember_session=False)
    seen.append((p.agent, fleet.generation == before, fleet.holds_session("c", "s")))
    fleet.hold_session("c", "s")
    fleet.record_outcome("c", "k", True)
    seen.append((fleet.holds_session("c", "s"), fleet.outcomes("c", "k"), fleet.generation > before))
    return seen


def test_namespace_of_generation_and_close_answer_alike_on_both_fleets(ray, tmp_path):
    from a3fast.distributed import ShardedFleet

    one = Fleet()
    expected = answers(one)
    assert expected[0] == ["support", "billing", "support", None]
    one.close()
    assert one.namespace_of("a") == "support"      # a Fleet's close releases nothing
    many = ShardedFleet(shards=2, state_dir=str(tmp_path / "state"))
    assert answers(many) == expected
    many.close()
    assert many.shards == 0                          # the actors are ended


#: Calls given a value that is no agent's name, or an outcome that is no truth value: a change is
#: refused naming its argument (it raised Python's "unhashable type", or was read as a name that is
#: not held), a query answers as for an agent the fleet does not hold.
WRONG_CALLS = [
    ("get", ([],)), ("get", (1,)), ("namespace_of", ([],)), ("outcomes", ([], "k")),
    ("holds_session", ({}, "s")), ("holds_session", ("c", [])),
    ("remove", ([],)), ("remove", (1,)), ("hold_session", ([], "s")), ("release_session", ([], "s")),
    ("release_session", ("c", [])), ("record_outcome", ([], "k", True)), ("record_outcomes", ((), "k", 1, 1)),
    ("record_outcome", ("c", "k", "false")),
    ("place", ({"session": "s"}, None, None), {"remember_session": "no"}),
    ("place_many", ([{"session": "s"}],), {"remember_session": "no"}),
]


def wrong_answers(fleet: FleetProtocol) -> list:
    fleet.extend([agent("c", "support")])
    before = fleet.generation
    seen = []
    for method, args, *keywords in WRONG_CALLS:
        try:
            seen.append(("answer", getattr(fleet, method)(*args, **(keywords[0] if keywords else {}))))
        except Exception as exc:
            seen.append((type(exc).__name__, str(exc)))
    seen.append(("unchanged", fleet.generation == before, fleet.outcomes("c", "k"), fleet.names(),
                 fleet.holds_session("c", "s")))
    return seen


def test_values_that_are_no_names_are_answered_alike_on_both_fleets(ray, tmp_path):
    from a3fast.distributed import ShardedFleet

    expected = wrong_answers(Fleet())
    assert expected[:6] == [("answer", None), ("answer", None), ("answer", None), ("answer", (0, 0)),
                            ("answer", False), ("answer", False)]
    assert expected[6] == ("TypeError", "name: expected an agent's name (a string), found array of 0")
    assert expected[7] == ("TypeError", "name: expected an agent's name (a string), found 1")
    assert expected[8:10] == [("TypeError", "agent: expected an agent's name (a string), found array of 0")] * 2
    assert expected[10] == ("ValueError", "session: expected a string, found array of 0")
    assert expected[13] == ("ValueError", "success: expected true or false, found string 'false'")
    assert expected[14:16] == [("ValueError", "remember_session: expected true or false, found string 'no'")] * 2
    assert expected[-1] == ("unchanged", True, (0, 0), ["c"], False)
    many = ShardedFleet(shards=2, state_dir=str(tmp_path / "state"))
    try:
        assert wrong_answers(many) == expected
    finally:
        many.close()
