"""The index against a literal per-candidate reading of §5, on random fleets and requirements.

The oracle walks every live declaration through the derived predicates with `satisfies`; the fleet
must give the same eligible set and the same first-failed predicate for every candidate, through
random updates and removals between placements, on both engines.
"""
from hypothesis import given, strategies as st

from a3fast import Fleet
from a3fast.predicates import first_failed
from a3fast.schema import parse_declaration, parse_requirements

from strategies import NAMES, declarations, requirements

# one step of a fleet's life: add/replace an agent, remove one, or place a task
steps = st.lists(st.one_of(st.tuples(st.just("add"), declarations()),
                           st.tuples(st.just("remove"), st.sampled_from(NAMES)),
                           st.tuples(st.just("place"), requirements())), min_size=1, max_size=25)


def literal_reading(live: dict, req_doc: dict):
    """Eligible names and {candidate: first failed predicate}, candidate by candidate (§5)."""
    predicates = parse_requirements(req_doc).predicates
    eligible, failed = [], {}
    for name, decl in live.items():
        miss = first_failed(parse_declaration(decl), predicates)
        if miss is None:
            eligible.append(name)
        else:
            failed[name] = miss
    return sorted(eligible), failed


@given(steps)
def test_index_matches_the_literal_reading_through_updates_and_removals(engine, script):
    fleet = Fleet(engine=engine)
    live: dict[str, dict] = {}
    for action, arg in script:
        if action == "add":
            fleet.add(arg)
            live[arg["agent"]["name"]] = arg
        elif action == "remove":
            if arg in live:
                fleet.remove(arg)
                del live[arg]
        else:
            p = fleet.place(arg)
            eligible, failed = literal_reading(live, arg)
            assert sorted(p.eligible) == eligible
            assert p.first_failed() == failed
            assert sorted(p.candidates) == sorted(live)
            assert p.bound == bool(eligible)
            if p.bound:
                assert p.agent in eligible
                assert set(p.scheduling["scores"]) == set(eligible)


@given(st.lists(declarations(), max_size=10), st.lists(requirements(), min_size=1, max_size=5))
def test_both_engines_give_the_same_records(fleet_docs, tasks):
    from a3fast.engines import NATIVE_AVAILABLE

    if not NATIVE_AVAILABLE:
        return
    fleets = {name: Fleet(engine=name) for name in ("native", "pure")}
    for f in fleets.values():
        for doc in fleet_docs:
            f.add(doc)
    for task in tasks:
        native, pure = (fleets[name].place(task) for name in ("native", "pure"))
        assert native.agent == pure.agent
        if native.bound:
            a, b = dict(native.scheduling), dict(pure.scheduling)
            a.pop("timings"), b.pop("timings")
            assert a == b
        else:
            a, b = dict(native.rejection), dict(pure.rejection)
            a.pop("timings"), b.pop("timings")
            assert a == b
