"""A process that changes a durable fleet's state directory, for the crash-point tests: the
service's (ServiceState) or a shard's of a ShardedFleet (FleetShard, in this process without Ray),
both kept by a3fast.durable.DurableFleet.

    python state_driver.py DIR history [shard]   # a history of changes, a checkpoint, more changes,
                                         # all acknowledged (written and fsynced), then the process
                                         # ends as kill -9 would end it (no clean stop)
    python state_driver.py DIR checkpoint [shard]  # open DIR, take a checkpoint, stop without closing
    python state_driver.py DIR checkpoint-and-go-on [shard]  # a checkpoint, then more changes,
                                         # acknowledged
    python state_driver.py DIR change-again [shard]  # open DIR, replace an agent of the last round,
                                         # acknowledged, stop without closing

Run with A3FAST_STOP_AT_STEP=N, the process is killed just before its Nth filesystem step of the
state directory (a3fast.durable.statedir), as a crash there would end it; with A3FAST_FAIL_AT_STEP=N
that step fails (OSError), as a failing disk would make it.
"""
from __future__ import annotations

import os
import sys

from a3fast.schema import parse_declaration
from a3fast.service.state import ServiceState

TASK = {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 1}], "residency": "eu"}
KIND = "order.investigate"


def decl(name: str, version: int = 1, namespace: str = "crash") -> dict:
    return {"v": "1.0", "agent": {"name": name, "namespace": namespace},
            "capabilities": [{"name": "order.investigate", "version": version}],
            "clearances": ["orders.read"], "residency": ["eu"]}


def changes(state: ServiceState, round_: int) -> None:
    """Every kind of change the service journals; the order matters (removal, re-adding)."""
    p = f"r{round_}-"
    state.put_agents([parse_declaration(decl(f"{p}a{k}")) for k in range(4)])
    state.put_agents([parse_declaration(decl(f"{p}solo", version=1))])
    state.delete_agent(f"{p}a1")
    state.put_agents([parse_declaration(decl(f"{p}a1"))])          # takes back its place
    state.delete_agent(f"{p}a2")
    state.record_outcome(f"{p}a0", KIND, True)
    state.record_outcome(f"{p}a0", KIND, False)
    state.record_outcome(f"{p}a3", KIND, True)
    state.hold_session(f"{p}a3", "kept")
    state.hold_session(f"{p}a0", "let-go")
    state.release_session(f"{p}a0", "let-go")
    state.place(TASK, session=f"{p}placed")
    state.place(TASK, compact=True)


def shard_changes(shard, round_: int) -> None:
    """The same history on a shard: every change a shard journals."""
    p = f"r{round_}-"
    shard.extend([decl(f"{p}a{k}") for k in range(4)])
    shard.add(decl(f"{p}solo", version=1))
    shard.remove(f"{p}a1")
    shard.add(decl(f"{p}a1"))
    shard.remove(f"{p}a2")
    shard.record_outcome(f"{p}a0", KIND, True)
    shard.record_outcome(f"{p}a0", KIND, False)
    shard.record_outcomes(f"{p}a3", KIND, 1, 1)
    shard.hold_session(f"{p}a3", "kept")
    shard.hold_session(f"{p}a0", "let-go")
    shard.release_session(f"{p}a0", "let-go")
    shard.hold_session(f"{p}solo", f"{p}placed")


#: The agent `change-again` replaces, and its declaration before and after.
AGAIN = "r3-a0"


def main() -> None:
    directory, what = sys.argv[1], sys.argv[2]
    if sys.argv[3:] == ["shard"]:
        from a3fast.distributed.shard import FleetShard

        shard = FleetShard(0, state_dir=directory, fsync=True, checkpoint_every=10_000)
        durable, change = shard.durable, lambda round_: shard_changes(shard, round_)
        again = lambda: shard.add(decl(AGAIN, version=2))   # noqa: E731
    else:
        state = ServiceState(directory, log=lambda message: print(message, file=sys.stderr))
        state.open()
        durable, change = state.durable_fleet, lambda round_: changes(state, round_)
        again = lambda: state.put_agents([parse_declaration(decl(AGAIN, version=2))])   # noqa: E731
    if what == "history":
        change(1)
        durable.sync()
        durable.checkpoint()
        change(2)
        durable.sync()                   # acknowledged: every change above is durable
    elif what == "checkpoint":
        durable.checkpoint()
    elif what == "checkpoint-and-go-on":
        durable.try_checkpoint()         # a failure part-way is logged; the owner goes on
        change(3)
        durable.sync()
    elif what == "change-again":
        again()
        durable.sync()
    sys.stdout.flush()
    os._exit(0)                          # no clean stop: no close, no checkpoint on the way out


if __name__ == "__main__":
    main()
