"""A placement's spec records written by the engine (`Index.write_rejection`, `write_scheduling`
with a line around it, `trace.placement_lines`): byte for byte what orjson writes of the records'
dict form (§6: `rejection_dict`, `scheduling_dict`), framed as `trace.record_lines` frames them, on
both engines.

The reference here is the literal one: each record built as a dict and encoded by orjson, so a
writer that drifts from §6's members, their order, the reason's text or JSON's escapes fails it."""
from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from a3fast import _pure
from a3fast.engines import NATIVE_AVAILABLE
from a3fast.fleet import Fleet
from a3fast.fleet.placement import Route
from a3fast.record.write import (placement_records, rejection_dict, rejection_json, scheduling_dict,
                                 scheduling_json)
from a3fast.trace import TraceWriter, placement_lines, record_lines
from a3fast.workload import generate_fleet, generate_tasks

from factories import declaration, fleet_of, requirements
from strategies import declarations, requirements as requirement_docs

#: names JSON must escape (a quote, a backslash) and names beyond ASCII
AWKWARD_NAMES = ['quote"d', "back\\slash", "ünïcode-名前", "\U0001F600-agent", "plain"]


def dict_records(p, task=None) -> list[tuple[str, bytes]]:
    """(kind, content) of a placement's records, each content its dict form as orjson writes it."""
    if p.resumed:
        return [("task.bound", orjson.dumps({"resumed": True, "scheduling": scheduling_dict(p)}))]
    submitted = dict(task or {})
    submitted["requirements"] = dict(p.submitted.doc)
    out = [("task.submitted", orjson.dumps(submitted))]
    if p.bound:
        out += [("task.admitted", orjson.dumps({"agent": p.declaration.agent.to_dict()})),
                ("task.bound", orjson.dumps({"scheduling": scheduling_dict(p)}))]
    else:
        out.append(("task.rejected", orjson.dumps(rejection_dict(p))))
    return out


def assert_written_as_dicts(p, task=None, seq: int = 1) -> None:
    expected = dict_records(p, task)
    assert list(placement_records(p, task)) == expected
    assert placement_lines(p, seq, task) == (record_lines(expected, seq), len(expected))
    if not p.bound:
        assert rejection_json(p) == expected[-1][1]


def awkward_fleet(engine: str, **options) -> Fleet:
    docs = [declaration(name, capabilities=[("case.triage", 2)] if i % 2 else [("case.triage", 1)],
                        clearances=["pii.read"] if i % 3 else [])
            for i, name in enumerate(AWKWARD_NAMES)]
    return fleet_of(engine, docs, **options)


def test_a_rejections_content_is_its_dict_form_as_orjson_writes_it(engine):
    fleet = awkward_fleet(engine)
    p = fleet.place(requirements(capabilities=[("case.triage", 2)], clearances=["pii.read"], tools=["mcp:x/y"]))
    assert not p.bound
    assert_written_as_dicts(p)
    content = orjson.loads(rejection_json(p))
    assert list(content) == ["code", "reason", "requirements", "candidates", "filters_failed", "timings"]
    # the reason names every candidate under the predicate it failed first, as §6 asks
    for name in AWKWARD_NAMES:
        assert name in content["reason"]


def test_a_rejections_reason_is_derived_from_the_lists_only_when_it_names_everyone(engine):
    fleet = awkward_fleet(engine)
    task = requirements(capabilities=[("case.triage", 2)], clearances=["pii.read"], tools=["mcp:x/y"])
    limited = fleet.place(task, reason_limit=1)
    assert not limited.bound and " more" in orjson.loads(rejection_json(limited))["reason"]
    assert_written_as_dicts(limited)
    assert_written_as_dicts(fleet.place(task))


def test_a_rejection_among_no_candidates_says_the_fleet_is_empty(engine):
    empty = Fleet(engine=engine)
    for task in (requirements(capabilities=[("case.triage", 1)]), {"v": "1.0"}):
        p = empty.place(task)
        assert orjson.loads(rejection_json(p))["reason"].startswith("no eligible agent: the fleet has no agents")
        assert_written_as_dicts(p)
    everyone_gone = fleet_of(engine, [declaration("gone")])
    everyone_gone.remove("gone")
    assert_written_as_dicts(everyone_gone.place(requirements(capabilities=[("case.triage", 1)])))


def test_a_placements_spec_lines_carry_its_task_session_and_route(engine):
    fleet = awkward_fleet(engine)
    task = {"goal": "triage the case", "inputs": {"case": 7}}
    bound = fleet.place(requirements(capabilities=[("case.triage", 1)]), session="s-1")
    rejected = fleet.place(requirements(capabilities=[("case.triage", 9)]), session="s-2",
                           route=Route("eu-only", {"residency": "eu"}))
    restricted = fleet.place(requirements(capabilities=[("case.triage", 1)]), candidates=["plain", "back\\slash"])
    for p in (bound, rejected, restricted):
        assert_written_as_dicts(p, task, seq=41)
        assert_written_as_dicts(p)
    assert bound.bound and not rejected.bound
    resumed = fleet.resume(bound, seq=43)
    assert resumed.resumed
    assert_written_as_dicts(resumed, seq=50)


def test_a_trace_writer_writes_the_spec_lines(engine, tmp_path):
    fleet = awkward_fleet(engine)
    placements = [fleet.place(requirements(capabilities=[("case.triage", v)])) for v in (1, 2, 9)]
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path)
    for p in placements:
        writer.write(p)
    writer.close()
    expected, seq = b"", 1
    for p in placements:
        records = dict_records(p)
        expected += record_lines(records, seq)
        seq += len(records)
    assert path.read_bytes() == expected


def test_a_generated_fleets_placements_write_their_dict_forms(engine):
    docs = generate_fleet(300, seed=5)
    fleet = fleet_of(engine, docs, batch=True)
    outcomes = set()
    for task in generate_tasks(docs, 60, seed=5):
        p = fleet.place(task)
        outcomes.add(p.bound)
        assert_written_as_dicts(p, seq=len(outcomes) * 1000)
    assert outcomes == {True, False}


@settings(max_examples=80, deadline=None)
@given(fleet_docs=st.lists(declarations(), max_size=10), task=requirement_docs(),
       limit=st.sampled_from([None, None, 1, 2]), session=st.sampled_from([None, "s-1"]))
def test_random_fleets_placements_write_their_dict_forms(engine, fleet_docs, task, limit, session):
    fleet = fleet_of(engine, fleet_docs)
    assert_written_as_dicts(fleet.place(task, session=session, reason_limit=limit), seq=3)


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the a3fast._core extension is not built")
def test_both_engines_escape_every_control_character_as_orjson_does():
    """Names that a declaration cannot carry (the schema refuses control characters) still reach
    the Index through its own API: its JSON is orjson's, short escapes (\\n, \\t, ...) included."""
    from a3fast import _core

    names = ["tab\there", "nl\nline", "cr\rret", "bell\x07", "\x00nul", "ff\x0c", "bs\x08", "esc\x1b", 'q"\\']
    predicate = "tool:odd\n\"name\"\\"
    out = {}
    for engine, index in (("native", _core.Index()), ("pure", _pure.Index())):
        row = index.add_row()
        for aid, name in enumerate(names):
            index.put(aid, name, [row] if aid % 2 else [], 0.25)
        expl = index.explain([row], _core.NO_AGENT_REF, [])
        scores = index.score(expl, [], -1, -1, (0.4, 0.3, 0.2, 0.1))
        out[engine] = (index.write_rejection(expl, [predicate], None, b"{}", b'"route":"r"', b"<", b">"),
                       index.write_scheduling(expl, scores, [predicate], b"{}", b"{}", b"", b"<", b">"))
    assert out["native"] == out["pure"]
    rejection = orjson.loads(out["native"][0][1:-1])
    assert rejection["candidates"] == names
    assert rejection["reason"] == (f"no eligible agent among {len(names)} candidates: {predicate} failed by "
                                   + ", ".join(names[0::2]))
    assert orjson.dumps(names) in out["native"][0]


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the a3fast._core extension is not built")
def test_a_rejection_among_no_candidates_must_be_given_its_reason():
    from a3fast import _core

    for index in (_core.Index(), _pure.Index()):
        row = index.add_row()
        expl = index.explain([row], _core.NO_AGENT_REF, [])
        with pytest.raises(ValueError, match="no candidates"):
            index.write_rejection(expl, ["capability:x@1"], None, b"{}", b"")
        with pytest.raises(ValueError, match="predicates"):
            index.write_rejection(expl, [], b'"r"', b"{}", b"")
        assert orjson.loads(index.write_rejection(expl, ["capability:x@1"], b'"r"', b"{}", b"")) == {
            "code": "unschedulable", "reason": "r", "requirements": {}, "candidates": [], "filters_failed": []}
