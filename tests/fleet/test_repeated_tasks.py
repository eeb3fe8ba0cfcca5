"""Repeated tasks reuse the filter and explanation of the same predicates on the same membership,
and give exactly the record they would give without the cache."""
import gc
import sys

import orjson
import pytest

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
    first = f.place(TASK)
    assert not f._rows.explained        # a set explained once is only noted
    second = f.place(TASK)
    third = f.place(parse_requirements(TASK))
    assert third.explanation is second.explanation is not first.explanation
    assert record(third) == record(second) == record(first) == record(uncached(f, TASK))


def test_a_task_met_once_leaves_no_explanation_behind(engine):
    f = six_agents(engine)
    for i in range(20):
        f.place({"clearances": [f"c.x{i}"]})
    assert not f._rows.explained and len(f._rows.explained_once) == 20


def test_any_change_of_membership_invalidates_the_cache(engine):
    f = six_agents(engine)
    f.place(TASK)
    first = f.place(TASK)
    assert f._rows.explained
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
    f.place(TASK)
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
        for _ in range(2):
            f.place({"clearances": [f"c.x{i}"]})
    assert 0 < len(f._rows.explained) and len(f._rows.explained) * len(f) <= EXPLAINED_CACHE_BUDGET


def test_the_cache_is_bounded_by_every_agent_ever_added_not_the_live_ones(engine, monkeypatch):
    # an explanation's sets span the id space: agents that came and went under new names widen
    # every one, so a budget counted in live agents would let the cache grow with the churn
    import a3fast.fleet.rows

    monkeypatch.setattr(a3fast.fleet.rows, "EXPLAINED_CACHE_BUDGET", 600)
    f = six_agents(engine)
    for k in range(94):
        f.add(declaration(f"passing-{k}"))
        f.remove(f"passing-{k}")
    assert len(f) == 6
    for i in range(40):
        for _ in range(2):
            f.place({"clearances": [f"c.x{i}"]})
    assert 0 < len(f._rows.explained) <= 600 // 100


def counting_resolutions(f):
    """Count the engine's resolutions of predicates to rows on fleet `f`."""
    rows, calls = f._rows, []
    resolve = rows.resolve_predicates
    rows.resolve_predicates = lambda *args: calls.append(args[0]) or resolve(*args)
    return calls


def test_a_predicate_set_is_kept_resolved_from_its_second_resolution_on(engine):
    f = six_agents(engine)
    calls, rows = counting_resolutions(f), f._rows
    prepared = parse_requirements(TASK)
    first = uncached(f, prepared)           # resolved, its predicate set only noted: nothing held
    assert len(calls) == 1 and hash(prepared.predicates) in rows.resolved_once and not rows.resolved
    second = uncached(f, prepared)          # resolved again, and now kept, by the set
    assert len(calls) == 2 and list(rows.resolved) == [prepared.predicates]
    assert hash(prepared.predicates) not in rows.resolved_once
    third = uncached(f, prepared)           # the kept resolution
    assert len(calls) == 2
    # the same task from its dict, parsed for its placement, finds the same entry
    assert record(first) == record(second) == record(third) == record(uncached(f, TASK))
    assert len(calls) == 2


def test_a_kept_resolution_holds_no_task(engine):
    f = six_agents(engine)
    prepared = parse_requirements(TASK)
    references = sys.getrefcount(prepared)
    uncached(f, prepared)
    uncached(f, prepared)       # kept resolved now
    gc.collect()
    assert len(f._rows.resolved) == 1 and sys.getrefcount(prepared) == references


def test_a_kept_resolution_is_made_again_once_the_fleet_interns_something_new(engine):
    f = six_agents(engine)
    calls = counting_resolutions(f)
    prepared = parse_requirements(TASK)
    uncached(f, prepared)
    uncached(f, prepared)
    f.add(declaration("a9", capabilities=[("x.y", 1)], clearances=["r.read"]))
    again = uncached(f, prepared)
    assert len(calls) == 3 and "a9" in again.eligible
    assert record(again) == record(uncached(f, TASK))


def test_what_is_noted_once_is_bounded(engine, monkeypatch):
    from a3fast.fleet import rows as rows_module

    monkeypatch.setattr(rows_module, "NOTED_ONCE_LIMIT", 3)
    f = six_agents(engine)
    tasks = [parse_requirements({**TASK, "clearances": [f"c.x{i}"]}) for i in range(7)]
    for task in tasks:
        f.place(task)
        assert 1 <= len(f._rows.resolved_once) <= 3 and 1 <= len(f._rows.explained_once) <= 3
    assert not f._rows.resolved and not f._rows.explained       # each placed once: none kept


def test_distinct_tasks_placed_once_leave_no_resolution_though_their_ids_are_reused(engine):
    f = six_agents(engine)
    for i in range(50):     # each freed once placed, so a later one is often given its id
        prepared = parse_requirements({**TASK, "clearances": [f"c.x{i}"]})
        uncached(f, prepared)
        del prepared
    assert not f._rows.resolved


class ComparisonRefused(Exception):
    pass


class HashedLike:
    """A stand-in for a predicate: hashed as `text` is, so a set holding it hashes as the set
    holding `text` does, but refusing to be compared."""

    compared = False

    def __init__(self, text: str):
        self.text = text

    def __hash__(self):
        return hash(self.text)

    def __eq__(self, other):
        HashedLike.compared = True
        raise ComparisonRefused(self.text)


def test_a_predicate_that_could_refuse_a_cache_comparison_is_refused_before_any_cache_is_asked(engine):
    # the caches are looked up with the set's hash computed once, and a lookup that meets a kept set
    # of the same hash compares the two: a predicate that is no str (hashed as one, refusing to be
    # compared) raised from inside that comparison. Predicates are held to a tuple of str first now
    # (docs/design.md), so no comparison a cache makes can run a caller's code
    f = six_agents(engine)
    prepared = parse_requirements(TASK)
    f.place(prepared)
    f.place(prepared)                       # kept explained, by its predicate set
    assert list(f._rows.explained) == [prepared.predicates]
    first, *rest = prepared.predicates
    lookalike = prepared._replace(predicates=(HashedLike(first), *rest))
    assert hash(lookalike.predicates) == hash(prepared.predicates)
    with pytest.raises(TypeError, match="found a tuple holding HashedLike"):
        f.place(lookalike)
    assert not HashedLike.compared
    assert record(f.place(prepared)) == record(uncached(f, TASK))
