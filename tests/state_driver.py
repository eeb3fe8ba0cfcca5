"""A process that changes a service state directory, for the crash-point tests.

    python state_driver.py DIR history   # a history of changes, a checkpoint, more changes, all
                                         # acknowledged (written and fsynced), then the process ends
                                         # as kill -9 would end it (no clean stop)
    python state_driver.py DIR checkpoint  # open DIR, take a checkpoint, stop without closing
    python state_driver.py DIR checkpoint-and-go-on  # a checkpoint, then more changes, acknowledged

Run with A3FAST_STOP_AT_STEP=N, the process is killed just before its Nth filesystem step of the
state directory (a3fast.statedir), as a crash there would end it; with A3FAST_FAIL_AT_STEP=N that
step fails (OSError), as a failing disk would make it.
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


def main() -> None:
    directory, what = sys.argv[1], sys.argv[2]
    state = ServiceState(directory, log=lambda message: print(message, file=sys.stderr))
    state.open()
    if what == "history":
        changes(state, 1)
        state.journal.sync()
        state.checkpoint()
        changes(state, 2)
        state.journal.sync()             # acknowledged: every change above is durable
    elif what == "checkpoint":
        state.checkpoint()
    elif what == "checkpoint-and-go-on":
        state.checkpoint()               # a failure part-way is logged; the service goes on
        changes(state, 3)
        state.journal.sync()
    sys.stdout.flush()
    os._exit(0)                          # no clean stop: no close, no checkpoint on the way out


if __name__ == "__main__":
    main()
