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
