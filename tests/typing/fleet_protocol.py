"""Both fleets are a `FleetProtocol`: tests/project/test_typing.py type-checks this file with `mypy
--strict` (it is not collected as a test), so a method either fleet lacks, or offers with another
signature, fails the check. Code written against the protocol runs on either fleet."""
from __future__ import annotations

from a3fast.distributed import ShardedFleet
from a3fast.fleet import Fleet, FleetProtocol
from a3fast.fleet.placement import Placement


def one_process() -> FleetProtocol:
    fleet: FleetProtocol = Fleet()
    return fleet


def sharded(shards: int) -> FleetProtocol:
    fleet: FleetProtocol = ShardedFleet(shards=shards)
    return fleet


def place_and_resume(fleet: FleetProtocol) -> list[Placement]:
    """Written once for any fleet."""
    fleet.add({"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": [], "clearances": []})
    first = fleet.place({"session": "s"}, candidates=fleet.names())
    batch = fleet.place_many([{}, {"session": "s"}], remember_session=False)
    explained = fleet.explain({})
    assert explained.candidates_count == len(fleet) and "a" in fleet
    assert fleet.all_failed({"agentRef": "b"}) == {"a": ["agentRef:b"]}
    assert fleet.namespace_of("a") == "n" and fleet.namespace_of("b") is None
    assert fleet.holds_session("a", "s") and fleet.outcomes("a", "k") == (0, 0)
    generation: int = fleet.generation
    assert generation > 0
    return [first, *batch, fleet.resume(first, seq=3)]


def keep_and_end(fleet: FleetProtocol, where: str) -> None:
    """Lifetime, written once: a snapshot the fleet's own `load` reads, then its resources released."""
    fleet.save(where)
    fleet.close()
