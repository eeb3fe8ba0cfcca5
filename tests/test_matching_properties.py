"""The index against a literal per-candidate reading of §5, on random fleets and requirements.

The oracle walks every live declaration through the derived predicates with `satisfies`; the fleet
must give the same eligible set and the same first-failed predicate for every candidate, through
random updates and removals between placements, on both engines.
"""
from hypothesis import given, strategies as st

from a3fast import Fleet
from a3fast.predicates import first_failed
from a3fast.schema import parse_declaration, parse_requirements

NAMES = [f"agent-{i}" for i in range(8)]
CAPS = ["a.x", "a.y", "b.x"]
CLEARANCES = ["r.read", "r.write", "s.read"]
TOOLS = ["plain", "mcp:github/create_issue", "a/b:c"]
LABELS = ["eu", "us", "eu:west"]

capability = st.builds(lambda n, v: {"name": n, "version": v}, st.sampled_from(CAPS), st.integers(1, 2))


@st.composite
def declarations(draw, name=None):
    doc = {"v": "1.0",
           "agent": {"name": name or draw(st.sampled_from(NAMES)), "namespace": "ns"},
           "capabilities": draw(st.lists(capability, max_size=3)),
           "clearances": draw(st.lists(st.sampled_from(CLEARANCES), max_size=3))}
    if draw(st.booleans()):
        doc["tools"] = draw(st.lists(st.sampled_from(TOOLS), max_size=3))
    if draw(st.booleans()):
        doc["residency"] = draw(st.lists(st.sampled_from(LABELS), max_size=2))
    if draw(st.booleans()):
        doc["model"] = {"latency_class": draw(st.sampled_from(["interactive", "batch"]))}
    return doc


@st.composite
def requirements(draw):
    doc = {"capabilities": draw(st.lists(capability, max_size=2)),
           "clearances": draw(st.lists(st.sampled_from(CLEARANCES), max_size=2)),
           "tools": draw(st.lists(st.sampled_from(TOOLS), max_size=1))}
    if draw(st.booleans()):
        doc["residency"] = draw(st.sampled_from(LABELS))
    if draw(st.integers(0, 2)) == 0:
        doc["model"] = {"latency_class": draw(st.sampled_from(["interactive", "batch"]))}
    if draw(st.integers(0, 3)) == 0:
        doc["agentRef"] = draw(st.sampled_from(NAMES + ["stranger"]))
    if draw(st.integers(0, 2)) == 0:
        doc["exclude"] = draw(st.lists(st.sampled_from(NAMES + ["stranger"]), max_size=2))
    return doc


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
