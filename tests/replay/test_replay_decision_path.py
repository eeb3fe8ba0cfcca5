"""A replay on a `Fleet` decides each placement with `Fleet.scored` (no Placement built) and builds
an unchanged verdict through its slots; any other fleet places. Both must give the same verdicts and
leave the same sessions held, on a trace whose sessions decide later placements."""
from __future__ import annotations

import importlib
from typing import Any

import a3fast
from a3fast.replay import SAME, STILL_REJECTED, Verdict, replay
from a3fast.workload import generate_fleet, generate_tasks

from test_replay import records_of

verdict_module = importlib.import_module("a3fast.replay.verdict")


class ForwardingFleet:
    """A fleet that is not a `Fleet`: every attribute is the wrapped fleet's (what a fleet of
    another implementation of the same protocol offers a replay)."""

    def __init__(self, fleet: a3fast.Fleet):
        self._fleet = fleet

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fleet, name)


def test_unchanged_verdict_is_the_verdict_the_constructor_makes():
    for kind, agent in ((SAME, "a"), (STILL_REJECTED, None)):
        made = verdict_module.unchanged(7, kind, agent, {"v": "1.0"}, "s", "r", offered_new="b")
        expected = Verdict(7, kind, agent, agent, {"v": "1.0"}, "s", "r", offered_new="b")
        assert made == expected
        assert made.to_dict() == expected.to_dict()
        assert not made.changed and made.why() == ""
    one, two = (verdict_module.unchanged(1, SAME, "a", {}, None, None) for _ in range(2))
    assert one.scores_before is not two.scores_before   # no mapping shared between verdicts


def test_replay_on_a_fleet_decides_as_placing_on_any_fleet(engine):
    docs = generate_fleet(60, 3)
    tasks = generate_tasks(docs, 300, 3)
    recorded = a3fast.Fleet(engine=engine)
    recorded.extend(docs)
    records = records_of([recorded.place(t) for t in tasks])
    revoked = [{**d, "clearances": d["clearances"][1:]} for d in docs]
    direct, forwarded = a3fast.Fleet(engine=engine), a3fast.Fleet(engine=engine)
    direct.extend(revoked)
    forwarded.extend(revoked)
    fast = list(replay(records, direct, copy=False))
    placed = list(replay(records, ForwardingFleet(forwarded), copy=False))
    assert [v.to_dict() for v in fast] == [v.to_dict() for v in placed]
    assert {v.kind for v in fast} >= {SAME}, "the trace must have unchanged placements to mean anything"
    assert any(v.changed for v in fast), "and changed ones"
    sessions = {t["session"] for t in tasks if t.get("session")}
    assert sessions, "the workload must name sessions for the held sessions to mean anything"
    for name in direct.names():
        for session in sessions:
            assert direct.holds_session(name, session) == forwarded.holds_session(name, session)
