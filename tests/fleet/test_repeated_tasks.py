"""Repeated tasks reuse the filter and explanation of the same predicates on the same membership,
and give exactly the record they would give without the cache."""
import orjson

from a3fast.schema import parse_requirements

from factories import declaration, fleet_of

TASK = {"capabilities": [{"name": "x.y", "version": 1}], "clearances": ["r.read"]}


def record(p):
    body = orjson.loads(p.scheduling_json() if p.bound else orjson.dumps(p.rejection))
    body.pop("timings")
    return body


def six_agents(engine):
    """a0–a5: x.y at version 1 or 2 in turn, r.read held by the first four."""
    return fleet_of(engine, [declaration(f"a{i}", capabilities=[("x.y", 1 + i % 2)],
                                         clearances=["r.read"] if i < 4 else []) for i in range(6)])


def uncached(fleet, task, **kw):
    fleet.forget_explanations()
    return fleet.place(task, **kw)


def test_a_repeated_task_reuses_the_explanation_and_gives_the_same_record(engine):
    f = six_agents(engine)
    first, again = f.place(TASK), f.place(parse_requirements(TASK))
    assert again.explanation is first.explanation
    assert record(again) == record(first) == record(uncached(f, TASK))


def test_any_change_of_membership_invalidates_the_cache(engine):
    f = six_agents(engine)
    first = f.place(TASK)
    f.add(declaration("a9", capabilities=[("x.y", 1)], clearances=["r.read"]))
    added = f.place(TASK)
    assert added.explanation is not first.explanation and "a9" in added.eligible
    f.remove("a0")
    assert "a0" not in f.place(TASK).candidates
    f.add(declaration("a2", capabilities=[("x.y", 2)]))  # replace: a2 no longer qualifies
    replaced = f.place(TASK)
    assert "a2" not in replaced.eligible and record(replaced) == record(uncached(f, TASK))


def test_sessions_and_outcomes_change_scores_but_reuse_the_filter(engine):
    f = six_agents(engine)
    first = f.place(TASK)
    f.hold_session("a2", "s-1")
    f.record_outcome("a2", TASK, True)
    again = f.place(TASK, session="s-1")
    assert again.explanation is first.explanation
    assert again.agent == "a2" and record(again) == record(uncached(f, TASK, session="s-1"))


def test_agent_ref_and_exclude_are_part_of_what_is_reused(engine):
    f = six_agents(engine)
    by_ref = f.place({**TASK, "agentRef": "a2"})
    assert by_ref.agent == "a2"
    assert f.place({**TASK, "agentRef": "a0"}).agent == "a0"
    assert f.place({**TASK, "exclude": ["a0"]}).agent != "a0"
    assert f.place({**TASK, "agentRef": "newcomer"}).bound is False
    f.add(declaration("newcomer", capabilities=[("x.y", 1)], clearances=["r.read"]))
    assert f.place({**TASK, "agentRef": "newcomer"}).agent == "newcomer"


def test_the_cache_is_bounded_by_fleet_size(engine):
    from a3fast.fleet import EXPLAINED_CACHE_BUDGET

    f = six_agents(engine)
    for i in range(50):
        f.place({"clearances": [f"c.x{i}"]})
    assert len(f._rows.explained) * len(f) <= EXPLAINED_CACHE_BUDGET
