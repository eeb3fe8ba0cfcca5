"""`a3fast.replay`: every recorded placement placed again on a changed fleet or policy.

The differential test holds the replay to the literal oracle (tests/oracle.py): random worlds, a
random change to the fleet (a clearance revoked, a model class retired, new weights, a route), and
for every placement the replay's verdict must be what placing the trace's tasks from scratch, in
order, on the new fleet gives. The other tests pin each rule docs/replay.md states.
"""
from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import a3fast
from a3fast.record.compact import encode_trace
from a3fast.record.write import placement_records
from a3fast.replay import (CHANGED_KINDS, MOVED, NOT_IN_FLEET, SAME, SCHEDULABLE, STILL_REJECTED, TIE_BREAK,
                           UNSCHEDULABLE, UNRECORDED_SESSIONS, ReplayError, Verdict, parse_thresholds, parse_weights, replay,
                           run_replay, summarise)
from a3fast.workload import generate_fleet, generate_tasks

from oracle import FleetModel, every_failed, predicates_of
from strategies import CLEARANCES, NAMES, TOOLS, declarations, requirements

VECTORS = Path(__file__).resolve().parents[2] / "vectors"


def records_of(placements) -> list[dict]:
    """The trace records of placements, in order, as dicts."""
    out, seq = [], 1
    for p in placements:
        for kind, content in placement_records(p):
            out.append({"seq": seq, "kind": kind, "content": orjson.loads(content)})
            p.seq = seq if kind in ("task.bound", "task.rejected") else p.seq
            seq += 1
    return out


def as_jsonl(records) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def placed(docs, tasks, engine, **kwargs):
    fleet = a3fast.Fleet(engine=engine, **kwargs)
    fleet.extend(docs)
    return fleet, [fleet.place(t) for t in tasks]


def fleet_of(docs, engine, **kwargs):
    fleet = a3fast.Fleet(engine=engine, **kwargs)
    fleet.extend(docs)
    return fleet


# -- the differential test -------------------------------------------------------------------------

@st.composite
def worlds(draw):
    docs = draw(st.lists(declarations(), min_size=1, max_size=7, unique_by=lambda d: d["agent"]["name"]))
    tasks = draw(st.lists(requirements(), min_size=1, max_size=12))
    change = draw(st.sampled_from(["revoke", "retire", "reweight", "route"]))
    if change == "revoke":
        detail = draw(st.sampled_from(CLEARANCES))
    elif change == "retire":
        detail = draw(st.sampled_from(["interactive", "batch"]))
    elif change == "reweight":
        detail = tuple(draw(st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0, 2.0]), min_size=4, max_size=4)))
    else:
        detail = draw(st.sampled_from([{"clearances": [c]} for c in CLEARANCES] + [{"tools": [t]} for t in TOOLS]
                                      + [{"exclude": [n]} for n in NAMES[:4]]
                                      + [{"capabilities": [{"name": "a.x", "version": 1}]}]))
    compact = draw(st.booleans())
    outcomes = draw(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 11), st.booleans()), max_size=4))
    return docs, tasks, change, detail, compact, outcomes


def changed_docs(docs, change, detail):
    if change == "revoke":
        return [{**d, "clearances": [c for c in d["clearances"] if c != detail]} for d in docs]
    if change == "retire":
        return [d for d in docs if (d.get("model") or {}).get("latency_class") != detail]
    return docs


def with_route(doc, adds):
    out = dict(doc)
    for key, values in adds.items():
        present = list(out.get(key) or [])
        out[key] = present + [v for v in values if v not in present]
    return out


def last_removed(docs, predicates) -> str | None:
    """The predicate after which no candidate of `docs` remains, read literally."""
    reached = list(docs)
    for p in predicates:
        left = [d for d in reached if every_failed(d, [p]) == []]
        if reached and not left:
            return p
        reached = left
    return None


@settings(max_examples=150)
@given(worlds())
def test_replay_verdicts_equal_placing_from_scratch_on_the_new_fleet(engine, world):
    docs, tasks, change, detail, compact, outcomes = world
    _, placements = placed(docs, tasks, engine)
    records = records_of(placements)
    if compact:
        records = list(encode_trace(records))
    new_docs = changed_docs(docs, change, detail)
    weights = detail if change == "reweight" else None
    route = a3fast.Route("what-if", detail) if change == "route" else None
    new_fleet = fleet_of(new_docs, engine)
    model = FleetModel(weights or (0.4, 0.3, 0.2, 0.1))
    for model_doc in new_docs:
        model.add(model_doc)
    for agent_i, task_i, success in outcomes:   # history the scorer reads, in both
        if agent_i < len(new_docs):
            name, task = new_docs[agent_i]["agent"]["name"], tasks[task_i % len(tasks)]
            new_fleet.record_outcome(name, task, success)
            model.record_outcome(name, task, success)

    verdicts = list(replay(records, new_fleet, weights=weights, route=route))
    assert [v.seq for v in verdicts] == [p.seq for p in placements]
    by_name = {d["agent"]["name"]: d for d in new_docs}
    for p, verdict, task in zip(placements, verdicts, tasks):
        matched = with_route(task, detail) if route is not None else task
        winner, scores = model.place(matched)
        expected = (SAME if p.agent == winner else MOVED) if p.agent is not None and winner is not None \
            else UNSCHEDULABLE if p.agent is not None else SCHEDULABLE if winner is not None else STILL_REJECTED
        assert (verdict.kind, verdict.before, verdict.after) == (expected, p.agent, winner), verdict
        predicates = predicates_of(matched)
        if verdict.kind == UNSCHEDULABLE:
            assert verdict.decided_by == last_removed(list(by_name.values()), predicates)
        if verdict.kind in (MOVED, UNSCHEDULABLE) and p.agent not in scores:
            old = by_name.get(p.agent)
            assert verdict.before_fails == (NOT_IN_FLEET if old is None else every_failed(old, predicates)[0])
        if verdict.kind == MOVED and p.agent in scores:
            assert verdict.before_fails is None
            assert {n: e["total"] for n, e in verdict.scores_after.items()} == \
                {n: scores[n]["total"] for n in (p.agent, winner)}
            if scores[winner]["total"] == scores[p.agent]["total"]:
                assert verdict.decided_by == TIE_BREAK


# -- no change, no changes -----------------------------------------------------------------------

def test_replay_against_the_unchanged_fleet_changes_nothing(engine):
    docs = generate_fleet(300, 7)
    tasks = generate_tasks(docs, 150, 7)
    _, placements = placed(docs, tasks, engine)
    records = records_of(placements)
    for form in (records, list(encode_trace(records)), as_jsonl(records), as_jsonl(encode_trace(records))):
        summary = summarise(replay(form, fleet_of(docs, engine)))
        assert summary.placements == len(tasks)
        assert summary.changed == 0
        assert summary.kinds[SAME] == sum(p.bound for p in placements)


def test_replay_of_the_matching_vectors_changes_nothing(engine):
    cases = [case for path in sorted((VECTORS / "matching").glob("*.json")) if path.name != "schema.json"
             for case in json.loads(path.read_text()) if "fleet" in case]
    assert cases
    for case in cases:
        try:
            fleet, placements = placed(case["fleet"], [case["requirements"]], engine)
        except (a3fast.SchemaError, a3fast.FleetError):
            continue  # a vector of a refused document has no placement to replay
        summary = summarise(replay(records_of(placements), fleet_of(case["fleet"], engine)))
        assert (summary.placements, summary.changed) == (1, 0), case["description"]


def test_sessions_held_by_replayed_placements_decide_later_ones(engine):
    # two equal agents; the first task of the session goes to "a" (the smaller name), which then
    # holds the session, so the second goes to "a" too by affinity — on the new fleet as recorded
    docs = [{"v": "1.0", "agent": {"name": n, "namespace": "x"}, "capabilities": [{"name": "a.x", "version": 1}],
             "clearances": []} for n in ("a", "b")]
    task = {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}], "session": "s"}
    _, placements = placed(docs, [task, task], engine)
    new = fleet_of(docs, engine)
    new.hold_session("b", "s")     # the new fleet's own sessions count from the first placement on
    verdicts = list(replay(records_of(placements), new))
    assert [(v.kind, v.after) for v in verdicts] == [(MOVED, "b"), (MOVED, "b")]
    assert verdicts[0].decided_by == "affinity"
    # the first change comes from a session the trace does not record; the second follows from it
    assert verdicts[0].why() == "b outscores a on affinity (unrecorded: sessions the fleet held before the trace)"
    assert verdicts[0].unrecorded == UNRECORDED_SESSIONS and verdicts[0].caused_by is None
    assert verdicts[1].caused_by == verdicts[0].seq and verdicts[1].unrecorded is None


def test_replay_places_on_a_copy_and_leaves_the_given_fleet_unchanged(engine):
    docs = generate_fleet(50, 1)
    tasks = [dict(t, session="s1") for t in generate_tasks(docs, 20, 1)]
    _, placements = placed(docs, tasks, engine)
    new = fleet_of(docs, engine)
    generation = new.generation
    assert summarise(replay(records_of(placements), new)).changed == 0
    assert new.generation == generation
    assert not any(new.holds_session(name, "s1") for name in new.names())


def test_weights_replace_the_fleets_weights_for_the_replay_only(engine):
    docs = generate_fleet(200, 3)
    _, placements = placed(docs, generate_tasks(docs, 80, 3), engine)
    new = fleet_of(docs, engine)
    moved = [v for v in replay(records_of(placements), new, weights="cost=0,substantiated=1") if v.kind == MOVED]
    assert moved, "putting all weight on substantiated claims moves some placements"
    assert all(v.decided_by in ("substantiated", "success_rate", "affinity", TIE_BREAK) for v in moved)
    assert new.weights == (0.4, 0.3, 0.2, 0.1)


def test_a_resumed_placement_follows_its_tasks_replayed_placement(engine):
    docs = [{"v": "1.0", "agent": {"name": "a", "namespace": "x"}, "capabilities": [{"name": "a.x", "version": 1}],
             "clearances": ["r.read"]}]
    fleet = fleet_of(docs, engine)
    first = fleet.place({"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}], "clearances": ["r.read"]})
    records = records_of([first])
    resumed = fleet.resume(first, seq=first.seq)
    records += [{"seq": 4, "kind": kind, "content": orjson.loads(content)} for kind, content in placement_records(resumed)]
    same = list(replay(records, fleet_of(docs, engine)))
    assert [(v.kind, v.resumed) for v in same] == [(SAME, False), (SAME, True)]
    revoked = fleet_of([{**docs[0], "clearances": []}], engine)
    verdicts = list(replay(records, revoked))
    assert [(v.kind, v.resumed, v.before_fails) for v in verdicts] == [
        (UNSCHEDULABLE, False, "clearance:r.read"), (UNSCHEDULABLE, True, "clearance:r.read")]
    assert verdicts[1].caused_by == verdicts[0].seq   # the resumption follows its task
    # ... and is that task's change, not a knock-on of another's session (the task had none)
    assert summarise(verdicts).knock_on == 0 and summarise(verdicts).changed == 2
    gone = list(replay(records, a3fast.Fleet(engine=engine)))
    assert gone[1].before_fails == NOT_IN_FLEET
    assert gone[1].why() == "no candidates remain; a has left the fleet (resuming the placement of seq 3)"


def test_newly_schedulable_names_what_removed_the_last_candidates_when_recorded(engine):
    docs = [{"v": "1.0", "agent": {"name": "a", "namespace": "x"}, "capabilities": [{"name": "a.x", "version": 1}],
             "clearances": []}]
    _, placements = placed(docs, [{"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}],
                                   "clearances": ["r.read"]}], engine)
    (verdict,) = replay(records_of(placements), fleet_of([{**docs[0], "clearances": ["r.read"]}], engine))
    assert (verdict.kind, verdict.after, verdict.decided_by) == (SCHEDULABLE, "a", "clearance:r.read")
    assert verdict.funnel_before.eligible == 0 and verdict.funnel_after.eligible == 1


def test_the_recorded_funnel_counts_each_candidate_once_as_explain_does(engine):
    # §7 lets a trace list a failure of no candidate, or one candidate twice: the recorded funnel
    # counts each candidate once, so no count goes negative
    docs = [{"v": "1.0", "agent": {"name": n, "namespace": "x"}, "clearances": [],
             "capabilities": [{"name": c, "version": 1}]} for n, c in (("a", "a.x"), ("b", "b.x"))]
    _, placements = placed(docs, [{"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}]}], engine)
    records = records_of(placements)
    failed = records[-1]["content"]["scheduling"]["filters_failed"]
    failed += [{"candidate": "ghost", "predicate": failed[0]["predicate"]}, dict(failed[0])]
    for trace in (records, list(encode_trace(records))):
        (verdict,) = replay(trace, fleet_of(docs[1:], engine))        # the chosen agent gone
        funnel = verdict.funnel_before
        assert (funnel.candidates, funnel.eligible) == (2, 1)
        assert all(count.reached >= count.removed >= 0 for count in funnel.predicates)


def test_a_compact_funnel_counts_a_candidate_listed_under_two_predicates_once(engine):
    # the compact form keeps a failed set per predicate: one candidate in two of them counts once
    docs = [{"v": "1.0", "agent": {"name": n, "namespace": "x"}, "clearances": [],
             "capabilities": [{"name": c, "version": 1} for c in caps]}
            for n, caps in (("a", ("a.x", "b.x")), ("b", ("a.x",)), ("c", ("c.x",)))]
    _, placements = placed(docs, [{"v": "1.0", "capabilities": [{"name": "a.x", "version": 1},
                                                                 {"name": "b.x", "version": 1}]}], engine)
    records = records_of(placements)
    scheduling = records[-1]["content"]["scheduling"]
    first, second = scheduling["filters_passed"][:2]
    scheduling["filters_failed"] = [{"candidate": n, "predicate": p} for p in (first, second) for n in ("b", "c")]
    assert a3fast.verify(as_jsonl(records)) == []
    for trace in (records, list(encode_trace(records))):
        (verdict,) = replay(trace, fleet_of(docs[1:], engine))
        funnel = verdict.funnel_before
        assert (funnel.candidates, funnel.eligible) == (3, 1)
        assert [(c.reached, c.removed) for c in funnel.predicates] == [(3, 2), (1, 0)]


def test_a_route_adds_to_what_each_task_was_recorded_with(engine):
    docs = generate_fleet(100, 5)
    tasks = generate_tasks(docs, 40, 5)
    _, placements = placed(docs, tasks, engine)
    route = a3fast.Route("no-secrets", {"clearances": ["secrets.admin"]})
    verdicts = list(replay(records_of(placements), fleet_of(docs, engine), route=route))
    assert all(v.route == "no-secrets" for v in verdicts)
    assert all("secrets.admin" in v.requirements["clearances"] for v in verdicts)
    assert sum(v.kind == UNSCHEDULABLE for v in verdicts) == sum(p.bound for p in placements)


def test_a_route_that_would_change_a_stated_requirement_is_a_replay_error(engine):
    docs = generate_fleet(20, 2)
    _, placements = placed(docs, [{"v": "1.0", "residency": "us"}], engine)
    with pytest.raises(ReplayError, match="seq 3: route 'eu' would change residency"):
        list(replay(records_of(placements), fleet_of(docs, engine), route=a3fast.Route("eu", {"residency": "eu"})))


def test_a_snapshot_fleet_brings_its_outcomes_sessions_and_weights(engine, tmp_path):
    docs = [{"v": "1.0", "agent": {"name": n, "namespace": "x"}, "capabilities": [{"name": "a.x", "version": 1}],
             "clearances": []} for n in ("a", "b")]
    _, placements = placed(docs, [{"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}]}], engine)
    new = fleet_of(docs, engine, weights=(0.0, 1.0, 0.0, 0.0))
    for _ in range(3):
        new.record_outcome("b", {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}]}, True)
    new.save(tmp_path / "fleet.snapshot")
    (verdict,) = replay(records_of(placements), a3fast.Fleet.load(tmp_path / "fleet.snapshot", engine=engine))
    assert (verdict.kind, verdict.after, verdict.decided_by) == (MOVED, "b", "success_rate")
    assert verdict.scores_after["b"]["success_rate"] == 0.8


# -- input ---------------------------------------------------------------------------------------

def test_replay_reads_paths_bytes_arrays_and_chunks_alike(engine, tmp_path):
    docs = generate_fleet(80, 4)
    _, placements = placed(docs, generate_tasks(docs, 30, 4), engine)
    records = records_of(placements)
    new = fleet_of([d for d in docs if "model" not in d], engine)
    expected = [v.to_dict() for v in replay(records, new)]
    (tmp_path / "t.jsonl").write_bytes(as_jsonl(records))
    (tmp_path / "t.json").write_bytes(orjson.dumps(records))
    data = as_jsonl(records)
    chunks = [data[i:i + 777] for i in range(0, len(data), 777)]
    for form in (tmp_path / "t.jsonl", str(tmp_path / "t.json"), data, chunks, iter(records)):
        assert [v.to_dict() for v in replay(form, new)] == expected
    assert any(v["kind"] != SAME for v in expected)


def test_a_line_that_is_not_a_record_is_a_replay_error_naming_its_line(engine):
    docs = generate_fleet(10, 1)
    _, placements = placed(docs, generate_tasks(docs, 3, 1), engine)
    data = as_jsonl(records_of(placements)) + b'{"seq": 99, "kind": "task.bound", "content": {"scheduling": 1}}\n'
    lines = data.count(b"\n")
    with pytest.raises(ReplayError, match=rf"line {lines}: seq 99: \$\.content\.scheduling: expected the scheduling object"):
        list(replay(data, fleet_of(docs, engine)))
    with pytest.raises(ReplayError, match="line 2: "):
        list(replay(data.replace(b"\n", b"\nnot json\n", 1), fleet_of(docs, engine)))


def test_a_failure_read_ahead_comes_after_the_verdicts_before_it_and_not_past_until(engine):
    """A replay reads placements ahead of deciding them (READ_AHEAD): a bad record is still raised
    only after every verdict before it, and a replay stopped before it (`until`) never meets it."""
    from a3fast.replay.run import READ_AHEAD, run_replay

    docs = generate_fleet(10, 1)
    count = READ_AHEAD + 5
    _, placements = placed(docs, generate_tasks(docs, count, 1), engine)
    good = records_of(placements)
    last = good[-1]["seq"]
    data = as_jsonl(good) + orjson.dumps({"seq": last + 1, "kind": "task.bound",
                                          "content": {"scheduling": 1}}) + b"\n"
    seen = []
    with pytest.raises(ReplayError, match=rf"seq {last + 1}: \$\.content\.scheduling"):
        for verdict in replay(data, fleet_of(docs, engine)):
            seen.append(verdict.seq)
    assert len(seen) == count
    # a bad record within the first run read ahead, after the seq the replay stops at
    head = [r for r in good if r["seq"] <= placements[19].seq]
    data = as_jsonl(head) + orjson.dumps({"seq": placements[19].seq + 1, "kind": "task.bound",
                                          "content": {"scheduling": 1}}) + b"\n"
    summary, _ = run_replay(data, fleet_of(docs, engine), until=placements[9].seq)
    assert summary.placements == 10


def test_recorded_requirements_that_are_not_requirements_are_named_by_path(engine):
    record = {"seq": 5, "kind": "task.rejected", "content": {"code": "unschedulable", "reason": "x",
                                                             "requirements": {"capabilities": [{"name": "a.x", "version": "2"}]}}}
    with pytest.raises(ReplayError, match=r"seq 5: \$\.content\.requirements\.capabilities\[0\]\.version: expected"):
        list(replay(as_jsonl([record]), a3fast.Fleet(engine=engine)))


def test_an_unreadable_trace_file_is_a_replay_error(tmp_path, engine):
    with pytest.raises(ReplayError, match="cannot read"):
        list(replay(tmp_path / "missing.jsonl", a3fast.Fleet(engine=engine)))


def test_weights_are_four_numbers_or_named_components():
    base = (0.4, 0.3, 0.2, 0.1)
    assert parse_weights("1,0,0,0", base) == (1.0, 0.0, 0.0, 0.0)
    assert parse_weights("cost=0.5", base) == (0.4, 0.3, 0.5, 0.1)
    assert parse_weights({"affinity": 0}, base) == (0.0, 0.3, 0.2, 0.1)
    for bad, words in (("1,2", "expected 4 numbers"), ("speed=1", "unknown component 'speed'"),
                       ("cost=x", "cost: expected a number"), ("cost=1,2", "not both"), ("nan,0,0,0", "finite"),
                       ("1e308,1e308,1e308,1e308", "magnitudes add up to a finite number"),
                       ("cost=1e308,affinity=1e308", "magnitudes add up to a finite number"),
                       # an integer past any float raised OverflowError, where Fleet(weights=) names it
                       ([10**400, 0, 0, 0], "affinity: expected a finite number, found an integer of about 401 digits"),
                       ({"cost": 10**400}, "cost: expected a finite number, found an integer of about 401 digits")):
        with pytest.raises(ValueError, match=words):
            parse_weights(bad, base)


def test_thresholds_count_or_share_each_kind_of_change():
    rules = parse_thresholds("moved>1%, unschedulable>0,changed>=5")
    assert [str(r) for r in rules] == ["moved>1%", "unschedulable>0", "changed>=5"]
    summary = summarise([Verdict(i, MOVED if i < 2 else SAME, "a", "b" if i < 2 else "a", {}) for i in range(100)])
    assert [r.exceeded(summary) for r in rules] == [True, False, False]
    for bad in ("moved", "moved>x", "bogus>1", "moved<1"):
        # named in words of the rule alone: the command line adds its flag, the HTTP route its member
        with pytest.raises(ValueError, match=f"^'{bad}': (expected KIND>N|unknown kind)"):
            parse_thresholds(bad)


def test_verdicts_say_in_words_why_they_changed():
    assert Verdict(1, MOVED, "a", "b", {}, before_fails="clearance:r.read").why() == "a now fails clearance:r.read; b chosen instead"
    assert Verdict(1, MOVED, "a", "b", {}, before_fails=NOT_IN_FLEET).why() == "a has left the fleet; b chosen instead"
    assert Verdict(1, SAME, "a", "a", {}).why() == ""
    assert set(CHANGED_KINDS) == {MOVED, UNSCHEDULABLE, SCHEDULABLE}
    changed = Verdict(3, UNSCHEDULABLE, "a", None, {"v": "1.0"}, decided_by="tool:t", before_fails="tool:t").to_dict()
    assert changed["why"] == "tool:t now removes the last candidates; a now fails tool:t"
    assert "why" not in Verdict(3, SAME, "a", "a", {}).to_dict()


def test_run_replay_writes_every_change_keeps_the_first_moves_first_and_stops_after_until(engine):
    import gc
    import io

    docs = generate_fleet(150, 9)
    _, placements = placed(docs, generate_tasks(docs, 60, 9), engine)
    records = records_of(placements)
    new = fleet_of([d for d in docs if (d.get("model") or {}).get("latency_class") != "batch"], engine)
    every = [v for v in replay(records, new) if v.changed]
    out = io.BytesIO()
    summary, kept = run_replay(records, new, changes=out, keep=2)
    assert summary.changed == len(every) > 2
    assert [orjson.loads(line)["seq"] for line in out.getvalue().splitlines()] == [v.seq for v in every]
    # moves first: the first of each kind in trace order, moves before the others
    first = [v for kind in CHANGED_KINDS for v in every if v.kind == kind]
    assert [v.seq for v in kept] == [v.seq for v in first[:2]]
    assert gc.isenabled()
    summary, _ = run_replay(records, new, until=every[0].seq)
    assert summary.changed == 1 and summary.placements == sum(p.seq <= every[0].seq for p in placements)


def test_run_replay_stops_where_its_check_raises(engine):
    docs = generate_fleet(50, 2)
    _, placements = placed(docs, generate_tasks(docs, 600, 2), engine)

    def check(summary):
        raise TimeoutError(summary.placements)

    with pytest.raises(TimeoutError, match="256"):
        run_replay(records_of(placements), fleet_of(docs, engine), check=check)


def test_replay_of_routed_hostile_and_custom_scored_traces_against_their_fleets_changes_nothing(engine):
    from report_traces import hostile_placements

    fleet, hostile = hostile_placements(engine)
    assert summarise(replay(records_of(hostile), fleet)).changed == 0

    docs = generate_fleet(120, 11)
    tasks = generate_tasks(docs, 50, 11)
    route = a3fast.Route("audited", {"tools": ["mcp:github/list"]})
    routed = fleet_of(docs, engine)
    placements = [routed.place(t, route=route if i % 2 else None, reason_limit=3) for i, t in enumerate(tasks)]
    verdicts = list(replay(records_of(placements), fleet_of(docs, engine)))
    assert [v.kind for v in verdicts if v.changed] == []
    assert [v.route for v in verdicts] == [p.route for p in placements]

    def cheapest(task, agents):   # prefers the agents whose number is odd, whatever their scores
        return [{"total": float(int(a.agent.name[-1]) % 2), "odd": int(a.agent.name[-1]) % 2} for a in agents]

    _, scored = placed(docs, tasks, engine, scorer=cheapest)
    assert summarise(replay(records_of(scored), fleet_of(docs, engine, scorer=cheapest))).changed == 0
    moved = [v for v in replay(records_of(scored), fleet_of(docs, engine)) if v.kind == MOVED]
    assert moved and all(v.before_fails is None for v in moved)


def test_a_filters_answer_holds_no_session_when_replayed(engine):
    # "b" answers the first filter (only it was offered) without holding the session, so the second
    # task of the session, offered both, goes to "a" by the tie; a replay that held the session for
    # the first would send it to "b" by affinity
    docs = [{"v": "1.0", "agent": {"name": n, "namespace": "x"}, "capabilities": [{"name": "a.x", "version": 1}],
             "clearances": []} for n in ("a", "b")]
    task = {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}], "session": "s"}
    fleet = fleet_of(docs, engine)
    first = fleet.place(task, candidates=["b"], remember_session=False)
    first.session_held = False
    second = fleet.place(task, candidates=["a", "b"], remember_session=False)
    second.session_held = False
    records = records_of([first, second])
    assert records[2]["content"]["scheduling"]["a3fast.session_held"] is False
    verdicts = list(replay(records, fleet_of(docs, engine)))
    assert [(v.kind, v.after) for v in verdicts] == [(SAME, "b"), (SAME, "a")]
    assert a3fast.verify(as_jsonl(records)) == [] and a3fast.verify(as_jsonl(encode_trace(records))) == []


@pytest.mark.parametrize("batch", [False, True])
def test_a_placement_that_held_no_session_is_recorded_so_and_replays_unchanged(engine, batch):
    # `remember_session=False` leaves the session unheld; the record says so by itself, so a replay
    # on the very fleet the trace was made on holds nothing for it and finds every decision the same
    # (it held the session before, and sent the second task to "b" by an affinity it never had)
    docs = [{"v": "1.0", "agent": {"name": n, "namespace": "x"}, "clearances": [],
             "capabilities": [{"name": "a.x", "version": 1}], "model": {"latency_class": "batch", "cost_ceiling_usd": cost}}
            for n, cost in (("a", "0.5"), ("b", "1"))]
    task = {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}]}
    fleet = fleet_of(docs, engine)
    if batch:
        first = fleet.place_many([task], sessions=["s"], remember_session=False)[0]
        [miss] = fleet.place_many([{**task, "capabilities": [{"name": "c.y", "version": 1}]}], sessions=["s"],
                                  remember_session=False)
    else:
        first = fleet.place(task, session="s", candidates=["b"], remember_session=False)
        miss = fleet.place({**task, "capabilities": [{"name": "c.y", "version": 1}]}, session="s",
                           remember_session=False)
    second = fleet.place(task, session="s")
    assert not fleet.holds_session(first.agent, "s") or first.agent == second.agent
    assert first.session_held is False and miss.session_held is False and second.session_held is None
    records = records_of([first, miss, second])
    bound, rejected = records[2]["content"], records[4]["content"]
    assert bound["scheduling"]["a3fast.session_held"] is False and rejected["a3fast.session_held"] is False
    assert "a3fast.session_held" not in orjson.dumps(records[7]).decode()
    for trace in (records, list(encode_trace(records))):
        assert summarise(replay(trace, fleet_of(docs, engine))).changed == 0
    assert a3fast.verify(as_jsonl(records)) == []


def test_a_rejected_filters_answer_holds_no_session_when_a_replay_binds_it(engine):
    # the first filter finds no agent with c.y and holds nothing; in the proposed fleet "z" has c.y,
    # so the replay binds it there. Had the replay held the session for it, the session's second
    # task would go to "z" by affinity instead of to "a" by the tie.
    docs = [{"v": "1.0", "agent": {"name": n, "namespace": "x"}, "capabilities": [{"name": "a.x", "version": 1}],
             "clearances": []} for n in ("a", "b")]
    added = {"v": "1.0", "agent": {"name": "z", "namespace": "x"}, "clearances": [],
             "capabilities": [{"name": "a.x", "version": 1}, {"name": "c.y", "version": 1}]}
    fleet = fleet_of(docs, engine)
    first = fleet.place({"v": "1.0", "capabilities": [{"name": "c.y", "version": 1}], "session": "s"},
                        candidates=["a", "b"], remember_session=False)
    first.session_held = False
    second = fleet.place({"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}], "session": "s"})
    records = records_of([first, second])
    assert records[1]["kind"] == "task.rejected" and records[1]["content"]["a3fast.session_held"] is False
    for trace in (records, list(encode_trace(records))):
        verdicts = list(replay(trace, fleet_of(docs + [added], engine), offer_new=True))
        assert [(v.kind, v.after) for v in verdicts] == [(SCHEDULABLE, "z"), (SAME, "a")]
    assert a3fast.verify(as_jsonl(records)) == [] and a3fast.verify(as_jsonl(encode_trace(records))) == []


def test_a_session_given_beside_the_requirements_is_recorded_and_replayed(engine):
    docs = [{"v": "1.0", "agent": {"name": n, "namespace": "x"}, "capabilities": [{"name": "a.x", "version": 1}],
             "clearances": []} for n in ("a", "b")]
    task = {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}]}
    fleet = fleet_of(docs, engine)
    first = fleet.place(task, candidates=["b"], session="s")       # b holds s from here on
    second = fleet.place(task, session="s")                         # so b wins by affinity
    assert second.agent == "b"
    records = records_of([first, second])
    assert records[2]["content"]["scheduling"]["a3fast.session"] == "s"
    for form in (records, list(encode_trace(records))):
        verdicts = list(replay(form, fleet_of(docs, engine)))
        assert [(v.kind, v.after, v.session) for v in verdicts] == [(SAME, "b", "s"), (SAME, "b", "s")]
        assert a3fast.verify(as_jsonl(form)) == []


def test_a_record_is_never_taken_for_another_kind_by_a_glance_at_its_bytes(engine):
    # requirements whose own `kind` reads "task.submitted", written content first: the first bytes
    # of the task.bound line look like a task.submitted; replay still replays every placement
    docs = [{"v": "1.0", "agent": {"name": "a", "namespace": "x"}, "capabilities": [], "clearances": []}]
    _, placements = placed(docs, [{"v": "1.0", "kind": "task.submitted"}] * 3, engine)
    records = records_of(placements)
    trace = b"".join(orjson.dumps({"content": r["content"], "kind": r["kind"], "seq": r["seq"]}) + b"\n"
                     for r in records)
    assert b'"kind":"task.submitted"' in trace.splitlines()[2][:160]
    assert a3fast.verify(trace) == []
    verdicts = list(replay(trace, fleet_of(docs, engine)))
    assert [(v.seq, v.kind) for v in verdicts] == [(r["seq"], SAME) for r in records if r["kind"] == "task.bound"]


def test_a_knock_on_change_names_the_change_it_follows_from_in_baseline_mode(engine):
    # two equal agents; the first task of session s goes to "a" on the current fleet and to "b" once
    # "a" loses the clearance; the second task (no clearance needed) then follows s to "b" by affinity
    def decl(name, clearances):
        return {"v": "1.0", "agent": {"name": name, "namespace": "x"},
                "capabilities": [{"name": "a.x", "version": 1}], "clearances": clearances}
    docs = [decl("a", ["r.read"]), decl("b", ["r.read"])]
    first = {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}], "clearances": ["r.read"], "session": "s"}
    second = {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}], "session": "s"}
    _, placements = placed(docs, [first, second], engine)
    proposed = fleet_of([decl("a", []), decl("b", ["r.read"])], engine)
    summary, changes = run_replay(records_of(placements), proposed, baseline=fleet_of(docs, engine))
    moved = [(v.seq, v.before, v.after, v.decided_by, v.caused_by) for v in changes]
    assert moved == [(placements[0].seq, "a", "b", None, None),
                     (placements[1].seq, "a", "b", "affinity", placements[0].seq)]
    assert changes[0].before_fails == "clearance:r.read"
    assert "follows from the change at seq" in changes[1].why()
    assert summary.knock_on == 1 and summary.namespaces["moved"] == {"x": 2}
    assert summary.fleet.changed == {"x/a": ["clearances"]} and summary.fleet.added == []
    assert summary.fleet.digest != summary.fleet.baseline_digest


def test_the_fleet_digest_is_of_what_the_fleet_declares_not_its_order(engine):
    from a3fast.replay import fleet_change, fleet_digest

    docs = generate_fleet(30, 4)
    assert fleet_digest(fleet_of(docs, engine)) == fleet_digest(fleet_of(docs[::-1], engine))
    assert fleet_digest(fleet_of(docs, engine)) != fleet_digest(fleet_of(docs[1:], engine))
    change = fleet_change(fleet_of(docs[1:] + [generate_fleet(31, 5)[30]], engine), fleet_of(docs, engine))
    first = docs[0]["agent"]
    assert change.removed == [f"{first['namespace']}/{first['name']}"] and len(change.added) == 1


def test_the_page_shows_moves_first():
    from a3fast.replay import ReplaySummary
    from a3fast.report.replay_page import render_replay

    changes = [Verdict(1, UNSCHEDULABLE, "a", None, {}), Verdict(2, MOVED, "a", "b", {}, task="ns/pod-2"),
               Verdict(3, SCHEDULABLE, None, "b", {})]
    summary = summarise(changes)
    page = render_replay(summary, changes, trace="t", fleet="f")
    kinds = [page.index(f'data-kind="{kind}"') for kind in (MOVED, UNSCHEDULABLE, SCHEDULABLE)]
    assert kinds == sorted(kinds) and "ns/pod-2 (seq 2)" in page
    assert isinstance(summary, ReplaySummary)


def test_an_agent_new_to_a_placement_is_counted_unless_offered(engine):
    # "z" joins in the proposed fleet and would outscore "a" (a lower cost); the placement was not
    # offered it, so it is counted as "would have been offered" — or offered on request
    def decl(name, cost):
        return {"v": "1.0", "agent": {"name": name, "namespace": "x"}, "capabilities": [], "clearances": [],
                "model": {"cost_ceiling_usd": cost}}
    _, placements = placed([decl("a", "1.0")], [{"v": "1.0"}], engine)
    records = records_of(placements)
    current, proposed = fleet_of([decl("a", "1.0")], engine), fleet_of([decl("a", "1.0"), decl("z", "0.0")], engine)
    for baseline in (None, current):
        (v,) = replay(records, proposed, baseline=baseline)
        assert (v.kind, v.after, v.offered_new) == (SAME, "a", "z")
        assert summarise([v]).offered_new == 1
        (v,) = replay(records, proposed, baseline=baseline, offer_new=True)
        assert (v.kind, v.before, v.after, v.decided_by) == (MOVED, "a", "z", "cost")


def test_requirements_are_parsed_at_most_twice_per_distinct_document(engine, monkeypatch):
    # the service's rule for requirements texts (a3fast.prepared): a document met once is parsed
    # once and not kept; one that recurs is kept from its second sighting and never parsed again
    import importlib

    reading = importlib.import_module("a3fast.replay.reading")   # a3fast.replay is the function
    docs = generate_fleet(40, 2)
    recurring = generate_tasks(docs, 3, 2)
    once = [{**task, "kind": f"once-{n}"} for n, task in enumerate(generate_tasks(docs, 4, 3))]
    tasks = recurring * 20 + once
    _, placements = placed(docs, tasks, engine)
    parsed = []
    real = reading.parse_requirements
    monkeypatch.setattr(reading, "parse_requirements", lambda doc: parsed.append(doc) or real(doc))
    assert summarise(replay(as_jsonl(records_of(placements)), fleet_of(docs, engine))).placements == 64
    assert len({orjson.dumps(t) for t in recurring}) == 3
    assert sorted(map(orjson.dumps, parsed)) == sorted(map(orjson.dumps, recurring * 2 + once))


def test_a_resumption_that_carries_its_own_lists_is_replayed_alike_in_both_forms(engine):
    # §6 lets a resumed placement repeat the lists rather than cite them: its compact form keeps
    # `recorded_in` in the member's rest, and is replayed as the resumption it is (it follows its
    # task, caused by its move), as its spec form is
    docs = [{"v": "1.0", "agent": {"name": n, "namespace": "x"}, "capabilities": [{"name": "a.x", "version": 1}],
             "clearances": ["o.r"]} for n in ("a", "b")]
    task = {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}], "clearances": ["o.r"]}
    first = fleet_of(docs, engine).place(task)
    records = records_of([first])
    again = json.loads(json.dumps(records[-1]))
    again["seq"] = records[-1]["seq"] + 1
    again["content"]["resumed"] = True
    again["content"]["scheduling"]["recorded_in"] = {"kind": "task.bound", "seq": records[-1]["seq"]}
    records.append(again)
    proposed = [d | {"clearances": []} if d["agent"]["name"] == first.agent else d for d in docs]
    compact = list(encode_trace(records))
    assert compact[-1]["content"]["a3fast.compact"]["rest"]["recorded_in"] == {"kind": "task.bound",
                                                                               "seq": records[-2]["seq"]}
    verdicts = [[(v.seq, v.kind, v.after, v.caused_by) for v in replay(form, fleet_of(proposed, engine))]
                for form in (records, compact)]
    assert verdicts[0] == verdicts[1]
    assert verdicts[0][1][1:] == (MOVED, verdicts[0][0][2], records[-2]["seq"])     # it followed its task
    assert a3fast.verify(as_jsonl(records)) == a3fast.verify(as_jsonl(compact)) == []


# -- what a change is attributed to ------------------------------------------------------------------

def _agent(name, clearances=(), cost=None):
    doc = {"v": "1.0", "agent": {"name": name, "namespace": "x"}, "capabilities": [{"name": "a.x", "version": 1}],
           "clearances": list(clearances)}
    if cost is not None:
        doc["model"] = {"cost_ceiling_usd": cost}
    return doc


_COST_HEAVY = (0.1, 0.1, 0.7, 0.1)


def test_a_change_of_a_moved_session_is_no_knock_on_when_the_winner_gained_no_affinity(engine):
    # "a" holds s on both sides from before the trace. The first task (it needs r.read) moves from
    # "a" to "b" on the proposed fleet, where "a" lost r.read: b holds s there too. The second moves
    # from "a" to the cheap "c" under the proposed fleet's cost-heavy weights: "c" holds no session
    # on either side and trails "a" on affinity by as much as before, so the session's move has
    # nothing to do with it; it is decided by cost
    current = [_agent("a", ["r.read"]), _agent("b", ["r.read"]), _agent("c")]
    proposed = [_agent("a"), _agent("b", ["r.read"]), _agent("c", cost="0")]
    first = {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}], "clearances": ["r.read"], "session": "s"}
    second = {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}], "session": "s"}
    recording = fleet_of(current, engine)
    recording.hold_session("a", "s")
    placements = [recording.place(t) for t in (first, second)]
    sides = []
    for docs, weights in ((current, None), (proposed, _COST_HEAVY)):
        fleet = fleet_of(docs, engine, **({"weights": weights} if weights else {}))
        fleet.hold_session("a", "s")
        sides.append(fleet)
    summary, changes = run_replay(records_of(placements), sides[1], baseline=sides[0])
    changes = sorted(changes, key=lambda v: v.seq)
    moved = [(v.before, v.after, v.decided_by, v.caused_by) for v in changes]
    assert moved == [("a", "b", None, None), ("a", "c", "cost", None)]
    assert changes[1].why() == "c outscores a on cost"
    assert summary.knock_on == 0


def test_a_change_that_a_session_moved_earlier_decided_is_a_knock_on_when_the_loser_lost_affinity(engine):
    # the first task of s (it needs r.read, which only "a" has) is rejected on the proposed fleet, so
    # no agent comes to hold s there; the second then goes to the cheap "c" rather than to "a", which
    # won it through holding s: a knock-on of the first change, though now neither holds s, and it
    # is decided by cost
    current = [_agent("a", ["r.read"]), _agent("c", cost="0")]
    proposed = [_agent("a"), _agent("c", cost="0")]
    first = {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}], "clearances": ["r.read"], "session": "s"}
    second = {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}], "session": "s"}
    _, placements = placed(current, [first, second], engine)
    assert [p.agent for p in placements] == ["a", "a"]
    summary, changes = run_replay(records_of(placements), fleet_of(proposed, engine),
                                  baseline=fleet_of(current, engine))
    changes = sorted(changes, key=lambda v: v.seq)     # a report lists moves first
    assert [(v.kind, v.before, v.after) for v in changes] == [(UNSCHEDULABLE, "a", None), (MOVED, "a", "c")]
    assert (changes[1].decided_by, changes[1].caused_by) == ("cost", placements[0].seq)
    assert changes[1].why() == (f"c outscores a on cost (follows from the change at seq {placements[0].seq}, "
                                f"which moved session s)")
    assert summary.knock_on == 1


def test_an_affinity_lead_the_recorded_decision_had_too_is_not_called_unrecorded(engine):
    # recorded under cost-heavy weights, "b" (cheap) won over "a", which held s then as it does on
    # the proposed fleet: the proposed fleet's default weights give it to "a" by affinity. The
    # recorded scores show "a" held s then too, so what changed is the weights, not a session the
    # trace does not record
    docs = [_agent("a"), _agent("b", cost="0")]
    task = {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}], "session": "s"}
    recording = fleet_of(docs, engine, weights=_COST_HEAVY)
    recording.hold_session("a", "s")
    placements = [recording.place(task)]
    assert placements[0].agent == "b"
    proposed = fleet_of(docs, engine)
    proposed.hold_session("a", "s")
    (v,) = replay(records_of(placements), proposed)
    assert (v.kind, v.before, v.after, v.decided_by) == (MOVED, "b", "a", "affinity")
    assert v.unrecorded is None and v.why() == "a outscores b on affinity"
    # had "a" not held s when the trace was recorded, the same move is one the trace cannot explain
    recording = fleet_of(docs, engine, weights=_COST_HEAVY)
    (v,) = replay(records_of([recording.place(task)]), proposed)
    assert (v.after, v.decided_by, v.unrecorded) == ("a", "affinity", UNRECORDED_SESSIONS)


def test_a_resumption_that_cites_no_seq_follows_the_placement_it_goes_back_to(engine):
    # `Fleet.resume(p)` of a placement whose seq was never set writes no recorded_in.seq (§6 makes
    # it optional): the resumption is matched to the latest full placement of its agent and matched
    # predicates. On the proposed fleet "a" lost r.read, the task moves to "b", and the resumption
    # follows it there, caused by that move, rather than failing on "a"
    docs = [_agent("a", ["r.read", "w.write"]), _agent("b", ["r.read", "w.write"])]
    task = {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}], "clearances": ["r.read"]}
    other = {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}], "clearances": ["w.write"]}
    proposed = fleet_of([_agent("a", ["w.write"]), _agent("b", ["r.read", "w.write"])], engine)

    def trace(order):
        fleet = fleet_of(docs, engine)
        placements = [fleet.place(t) for t in order]
        first = placements[order.index(task)]
        resumed = fleet.resume(first)      # before records_of gives `first` its seq
        records = records_of(placements)
        records += [{"seq": records[-1]["seq"] + 1, "kind": kind, "content": orjson.loads(content)}
                    for kind, content in placement_records(resumed)]
        assert "seq" not in records[-1]["content"]["scheduling"]["recorded_in"]
        return first, records

    first, records = trace([other, task])
    assert a3fast.verify(as_jsonl(records)) == []
    for form in (records, list(encode_trace(records))):
        verdicts = list(replay(form, proposed))
        assert [(v.kind, v.after, v.resumed, v.caused_by) for v in verdicts] == [
            (SAME, "a", False, None), (MOVED, "b", False, None), (MOVED, "b", True, first.seq)]
        assert verdicts[2].why() == f"resumes on b, where its task is now placed (resuming the placement of seq {first.seq})"
    # another task placed on the same agent in between (a trace the verifier holds to that task's
    # submission, reading 8, but a replay reads all the same) does not take the resumption's place
    first, records = trace([task, other])
    verdicts = list(replay(records, proposed))
    assert [(v.kind, v.after, v.resumed, v.caused_by) for v in verdicts] == [
        (MOVED, "b", False, None), (SAME, "a", False, None), (MOVED, "b", True, first.seq)]


def _session_task(clearances=(), session="s"):
    task = {"v": "1.0", "capabilities": [{"name": "a.x", "version": 1}]}
    if session is not None:
        task["session"] = session
    if clearances:
        task["clearances"] = list(clearances)
    return task


def _sides(engine, current, proposed, holds_before=("a",), holds_proposed=()):
    """The baseline and proposed fleets, each with its agents holding "s" before the trace."""
    base, prop = fleet_of(current, engine), fleet_of(proposed, engine)
    for agent in holds_before:
        base.hold_session(agent, "s")
        prop.hold_session(agent, "s")
    for agent in holds_proposed:
        prop.hold_session(agent, "s")
    return base, prop


def test_a_knock_on_names_the_change_that_moved_the_session_to_the_new_agent(engine):
    # "a" holds s before the trace. The first task moves a -> c ("a" lost r.read): c holds s; the
    # second moves a -> b ("a" lost w.write): b holds s. The third moves a -> c, which leads on cost
    # and holds s thanks to the first change, not the second (the latest of the session)
    current = [_agent("a", ["r.read", "w.write"]), _agent("b", ["w.write"]), _agent("c", ["r.read"], cost="0")]
    proposed = [_agent("a"), _agent("b", ["w.write"]), _agent("c", ["r.read"], cost="0")]
    recording = fleet_of(current, engine)
    recording.hold_session("a", "s")
    placements = [recording.place(_session_task(c)) for c in (["r.read"], ["w.write"], [])]
    base, prop = _sides(engine, current, proposed)
    _, changes = run_replay(records_of(placements), prop, baseline=base)
    moved = sorted((v.seq, v.after, v.caused_by) for v in changes)
    assert moved == [(placements[0].seq, "c", None), (placements[1].seq, "b", None),
                     (placements[2].seq, "c", placements[0].seq)]


def test_a_session_the_new_agent_held_before_the_trace_is_no_knock_on_of_another_change(engine):
    # on the proposed fleet "c" (cheap) held s before the trace too; the first task moves a -> b,
    # and the second a -> c through c's own hold: nothing the first change did
    current = [_agent("a", ["r.read"]), _agent("b", ["r.read"]), _agent("c", cost="0")]
    proposed = [_agent("a"), _agent("b", ["r.read"]), _agent("c", cost="0")]
    recording = fleet_of(current, engine)
    recording.hold_session("a", "s")
    placements = [recording.place(_session_task(["r.read"])), recording.place(_session_task())]
    base, prop = _sides(engine, current, proposed, holds_proposed=("c",))
    summary, changes = run_replay(records_of(placements), prop, baseline=base)
    assert sorted((v.seq, v.after, v.caused_by) for v in changes) == [
        (placements[0].seq, "b", None), (placements[1].seq, "c", None)]
    assert summary.knock_on == 0
    # without a baseline, it is what it is: a session the trace does not record
    verdicts = [v for v in replay(records_of(placements), prop) if v.changed]
    assert verdicts[1].unrecorded == UNRECORDED_SESSIONS and verdicts[1].caused_by is None


def test_a_knock_on_that_breaks_a_tie_of_totals_is_one_whatever_the_rounding(engine):
    # a (cost 1, holds s) and c (cost 0) tie on totals before, so "a" wins by name; the first task
    # is rejected on the proposed fleet, nobody holds s there, and c wins: the lost affinity decided
    # it, though the totals' rounding leaves a margin of about 1e-17 rather than 0
    weights = (0.2, 0.3, 0.4, 0.1)
    current = [_agent("a", ["r.read"], cost="1"), _agent("c", cost="0")]
    proposed = [_agent("a", cost="1"), _agent("c", cost="0")]
    recording = fleet_of(current, engine, weights=weights)
    placements = [recording.place(_session_task(["r.read"])), recording.place(_session_task())]
    summary, changes = run_replay(records_of(placements), fleet_of(proposed, engine, weights=weights),
                                  baseline=fleet_of(current, engine, weights=weights))
    moved = next(v for v in changes if v.kind == MOVED)
    assert (moved.after, moved.caused_by) == ("c", placements[0].seq) and summary.knock_on == 1


def test_outcomes_the_trace_does_not_record_are_named_though_another_component_leads_most(engine):
    # recorded with "a" at a success rate of ~0.99; the fleet under test holds no outcomes: "b"
    # wins by its cost lead, unchanged since, which the success rate's fall let decide
    from a3fast.schema import parse_requirements, task_kind

    docs = [_agent("a"), _agent("b", cost="1")]
    task = _session_task(session=None)
    recording = fleet_of(docs, engine)
    recording.record_outcomes("a", task_kind(parse_requirements(task)), 100, 100)
    (v,) = replay(records_of([recording.place(task)]), fleet_of(docs, engine))
    assert (v.kind, v.before, v.after, v.decided_by) == (MOVED, "a", "b", "cost")
    assert v.unrecorded == "outcomes the fleet holds"


def test_a_resumption_that_cites_no_seq_follows_its_own_sessions_placement(engine):
    # two tasks alike but for their sessions, both on "a"; the first resumes without a seq. On the
    # proposed fleet "b" holds s2, so the second task moves: the resumption, of s1, stays with "a"
    docs = [_agent("a"), _agent("b")]
    fleet = fleet_of(docs, engine)
    first, second = fleet.place(_session_task(session="s1")), fleet.place(_session_task(session="s2"))
    resumed = fleet.resume(first)
    records = records_of([first, second])
    records += [{"seq": records[-1]["seq"] + 1, "kind": kind, "content": orjson.loads(content)}
                for kind, content in placement_records(resumed)]
    proposed = fleet_of(docs, engine)
    proposed.hold_session("b", "s2")
    verdicts = list(replay(records, proposed))
    assert [(v.kind, v.after, v.resumed, v.caused_by) for v in verdicts] == [
        (SAME, "a", False, None), (MOVED, "b", False, None), (SAME, "a", True, None)]


def test_the_candidate_sets_a_replay_keeps_are_bounded_and_it_decides_the_same(monkeypatch, engine):
    # each distinct set was kept whole for the whole replay (by the reader and by each side): a
    # 2.4 MB trace of 1,200 sets over 200,000 names ran out of memory
    import random

    from a3fast.replay import deciding, reading

    docs = generate_fleet(60, seed=3)
    names = [d["agent"]["name"] for d in docs]
    rng = random.Random(3)
    fleet = fleet_of(docs, engine)
    tasks = generate_tasks(docs, 80, seed=3)
    placements = [fleet.place(t, candidates=rng.sample(names, rng.randint(5, 40)), remember_session=False)
                  for t in tasks]
    records = records_of(placements)
    trace, compact = as_jsonl(records), as_jsonl(encode_trace(records))
    proposed = fleet_of(docs[:45], engine)
    unbounded = [[(v.seq, v.kind, v.before, v.after) for v in replay(t, proposed)] for t in (trace, compact)]
    kept = []
    original = reading.Reader._token

    def watched(self, key, listed):
        found = original(self, key, listed)
        kept.append(self._offered_names)
        return found

    monkeypatch.setattr(reading, "OFFERED_NAMES_KEPT", 64)
    monkeypatch.setattr(deciding, "OFFERED_NAMES_KEPT", 64)
    monkeypatch.setattr(reading.Reader, "_token", watched)
    bounded = [[(v.seq, v.kind, v.before, v.after) for v in replay(t, proposed)] for t in (trace, compact)]
    assert bounded == unbounded
    assert kept and max(kept) <= 64


def test_a_first_item_of_none_is_a_record_that_is_not_one_not_an_empty_trace():
    fleet = a3fast.Fleet()
    fleet.add({"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": [], "clearances": []})
    recorded = records_of([fleet.place({}), fleet.place({})])
    assert len(list(replay(recorded, fleet))) == 2
    with pytest.raises(ReplayError, match="record 1: expected a record"):
        list(replay([None] + recorded, fleet))
    assert list(replay([], fleet)) == []


@pytest.mark.parametrize("arguments, named", [
    ({"fleet": None}, "fleet: expected an a3fast.Fleet"),
    ({"fleet": {}}, "fleet: expected an a3fast.Fleet"),
    ({"baseline": "x"}, "baseline: expected an a3fast.Fleet"),
    ({"route": "r"}, "route: expected a Route, found string 'r'"),
    ({"scorer": 1}, "scorer: expected a callable"),
])
def test_an_argument_that_is_not_what_a_replay_takes_is_a_type_error_naming_it(arguments, named, tmp_path):
    fleet = a3fast.Fleet()
    fleet.add({"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": [], "clearances": []})
    recorded = records_of([fleet.place({})])
    (tmp_path / "t.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recorded))
    for records in (recorded, [str(tmp_path / "t.jsonl")]):
        with pytest.raises(TypeError, match=named):
            replay(records, **{"fleet": fleet, **arguments})
    with pytest.raises(TypeError, match="records: expected a path, bytes, a binary file or an iterable"):
        replay(None, fleet)
