"""The index against a literal per-candidate reading of §5, on random fleets and requirements.

The oracle walks every live declaration through the derived predicates with `satisfies`; the fleet
must give the same eligible set and the same first-failed predicate for every candidate, through
random updates and removals between placements, on both engines. (That the two engines give the
same records, bit for bit, is tests/engines/test_engine_parity.py's subject.)
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

