"""The README's Python API as a user's typed script: `mypy --strict` must accept it as it is.

tests/project/test_typing.py type-checks this file (it is not collected as a test); it also runs, so the
types it states are the ones the API returns.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import a3fast
from a3fast import Finding, Fleet, Placement, Problem, Requirements, Route, SchemaError


def build_fleet() -> Fleet:
    fleet = a3fast.Fleet()                      # engine=None: a3fast.ENGINE ("native" | "pure")
    fleet.add({"v": "1.0", "agent": {"name": "order-analyst", "namespace": "support"},
               "capabilities": [{"name": "order.investigate", "version": 2}],
               "clearances": ["orders.read", "customers.read"], "residency": ["eu"]})
    fleet.add({"v": "1.0", "agent": {"name": "summariser", "namespace": "support"},
               "capabilities": [{"name": "case.summarise", "version": 1}],
               "clearances": ["orders.read"], "residency": ["eu"]})
    fleet.extend([{"v": "1.0", "agent": {"name": "spare", "namespace": "support"},
                   "capabilities": [], "clearances": []}])
    fleet.remove("spare").agent.name
    return fleet


def place_and_read(fleet: Fleet) -> Placement:
    p: Placement = fleet.place({"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 2}],
                                "clearances": ["orders.read"], "residency": "eu"}, session="case-7")
    bound: bool = p.bound
    agent: str | None = p.agent
    summary: str = p.summary()
    scheduling: dict[str, Any] | None = p.scheduling
    encoded: bytes | None = p.scheduling_json()
    rejection: dict[str, Any] | None = p.rejection
    candidates: list[str] = p.candidates
    eligible: list[str] = p.eligible
    first: dict[str, str] = p.first_failed()
    counts: dict[str, int] = p.failed_counts()
    predicates: tuple[str, ...] = p.predicates
    if scheduling is not None:
        passed: list[str] = scheduling["filters_passed"]
        assert passed == list(predicates)
    assert bound and agent == "order-analyst" and encoded is not None and rejection is None
    assert summary and candidates and eligible and isinstance(first, dict) and isinstance(counts, dict)
    return p


def prepared_and_routed(fleet: Fleet) -> Placement:
    req: Requirements = a3fast.parse_requirements({"capabilities": [{"name": "case.summarise", "version": 1}]})
    route = Route("eu-only", {"residency": "eu"})
    p = fleet.place(req, route=route, reason_limit=3)
    refused = fleet.place({"capabilities": [{"name": "case.triage", "version": 1}]})
    assert refused.rejection is not None and refused.scheduling is None
    reason: str = refused.rejection["reason"]
    assert reason
    return p


def history(fleet: Fleet, p: Placement) -> Placement:
    fleet.record_outcome("order-analyst", "order.investigate", True)
    fleet.hold_session("summariser", "case-9")
    fleet.release_session("summariser", "case-9")
    resumed: Placement = fleet.resume(p, seq=2)
    assert resumed.agent == p.agent
    return resumed


def check_trace(p: Placement) -> list[Finding]:
    records = [{"seq": 1, "kind": "task.submitted", "content": {"requirements": p.submitted.doc}}]
    findings: list[Finding] = a3fast.verify(records)
    for finding in findings:
        code: str = finding.code
        seq: int | None = finding.seq
        message: str = finding.message
        assert code and message and (seq is None or seq >= 0)
    return findings


def snapshot(fleet: Fleet) -> Fleet:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "fleet.a3snap"
        fleet.save(path)
        loaded: Fleet = Fleet.load(path, engine=None)
    assert len(loaded) == len(fleet)
    return loaded


def problems_of(fleet: Fleet) -> list[Problem]:
    try:
        fleet.add({"v": "1.0", "agent": {"name": "triager", "namespace": "support"},
                   "capabilities": [{"name": "case.triage", "version": True}], "residency": "eu"})
    except SchemaError as e:
        problems: list[Problem] = e.problems
        paths: list[str] = [problem.path for problem in problems]
        expected: str = problems[1].expected
        found: str = problems[1].found
        assert paths and expected and found and str(problems[1])
        return problems
    raise AssertionError("an invalid declaration was accepted")


def main() -> None:
    fleet = build_fleet()
    p = place_and_read(fleet)
    prepared_and_routed(fleet)
    history(fleet, p)
    check_trace(p)
    snapshot(fleet)
    assert len(problems_of(fleet)) == 3 and len(fleet) == 2


if __name__ == "__main__":
    main()
