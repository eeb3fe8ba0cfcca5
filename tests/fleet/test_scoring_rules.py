"""The default scorer and custom scorers, against the default score (docs/design.md, reading 15;
see tests/oracle.py).

Every placement's `scores` (each component, to the bit) and its winner are compared with a literal
computation from the declarations and a plain record of outcomes and held sessions, on both engines.
"""
from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import given, settings, strategies as st

import a3fast
from a3fast import Fleet

from a3fast.record.write import placement_records
from factories import declaration, fleet_of
from oracle import FleetModel, bits
from strategies import NAMES, SESSIONS, declarations, requirements


def scores_of(p) -> dict:
    return p.scheduling["scores"] if p.bound else {}


def test_affinity_drops_after_the_session_is_released(engine):
    fleet = fleet_of(engine, [declaration(name) for name in ("a", "b")])
    fleet.hold_session("b", "s1")
    held = fleet.place({}, session="s1", remember_session=False)
    assert held.agent == "b" and scores_of(held)["b"]["affinity"] == 1.0
    fleet.release_session("b", "s1")
    assert not fleet.holds_session("b", "s1")
    released = fleet.place({}, session="s1", remember_session=False)
    assert scores_of(released)["b"]["affinity"] == 0.0
    assert released.agent == "a"  # equal totals again: the smaller name wins


def test_releasing_one_agents_session_leaves_the_others_affinity(engine):
    fleet = Fleet(engine=engine)
    for name in ("a", "b", "c"):
        fleet.add(declaration(name))
        fleet.hold_session(name, "s1")
    fleet.release_session("a", "s1")
    scores = scores_of(fleet.place({}, session="s1", remember_session=False))
    assert {name: s["affinity"] for name, s in scores.items()} == {"a": 0.0, "b": 1.0, "c": 1.0}


def test_a_bound_placement_with_a_session_makes_the_winner_hold_it(engine):
    fleet = fleet_of(engine, [declaration("a", cost="1"), declaration("b", cost="0")])
    first = fleet.place({"session": "s1"})
    assert first.agent == "b" and scores_of(first)["b"]["affinity"] == 0.0
    assert fleet.holds_session("b", "s1") and not fleet.holds_session("a", "s1")
    assert scores_of(fleet.place({}, session="s1"))["b"]["affinity"] == 1.0


def test_a_removed_agent_takes_its_sessions_and_a_replaced_one_keeps_them(engine):
    fleet = fleet_of(engine, [declaration("a"), declaration("b")])
    fleet.hold_session("a", "s1")
    fleet.hold_session("b", "s1")
    fleet.add(declaration("a", cost="2"))    # replaced
    fleet.remove("b")
    fleet.add(declaration("b"))              # a new agent under the old name
    scores = scores_of(fleet.place({}, session="s1", remember_session=False))
    assert scores["a"]["affinity"] == 1.0 and scores["b"]["affinity"] == 0.0


def test_a_session_no_agent_holds_gives_its_row_to_the_next_new_session(engine, tmp_path):
    # one session per conversation, each let go (released, or its agent removed): the fleet keeps
    # as many session rows as were ever held at once, in memory and in its snapshot
    fleet = fleet_of(engine, [declaration(name) for name in ("a", "b", "c")])
    rows = fleet.index.row_count()
    for k in range(500):
        fleet.hold_session("a", f"talk-{k}")
        fleet.hold_session("b", f"talk-{k}")
        fleet.release_session("a", f"talk-{k}")
        if k % 2:
            fleet.remove("b")
            fleet.add(declaration("b"))
        else:
            fleet.release_session("b", f"talk-{k}")
    assert fleet.index.row_count() == rows + 1
    path = tmp_path / "fleet.snapshot"
    fleet.save(path)
    assert Fleet.load(path, engine=engine).index.row_count() == rows + 1
    # a session held again before its row is taken keeps it; one let go meanwhile holds nobody
    fleet.hold_session("c", "talk-499")
    fleet.hold_session("a", "fresh")
    assert fleet.holds_session("c", "talk-499") and fleet.holds_session("a", "fresh")
    assert not fleet.holds_session("a", "talk-499") and not fleet.holds_session("b", "talk-0")
    assert fleet.index.row_count() == rows + 2
    scores = scores_of(fleet.place({}, session="talk-499", remember_session=False))
    assert [scores[n]["affinity"] for n in ("a", "b", "c")] == [0.0, 0.0, 1.0]


def test_a_fleet_restored_from_its_snapshot_gives_session_rows_as_the_saved_one_would(engine, tmp_path):
    fleet = fleet_of(engine, [declaration(name) for name in ("a", "b", "c")])
    for k in range(6):
        fleet.hold_session("abc"[k % 3], f"s{k}")
    for k in (4, 1, 3):                      # let go out of order: the smallest row is taken first
        fleet.release_session("abc"[k % 3], f"s{k}")
    fleet.hold_session("b", "s1")           # held again: its row is no longer free
    fleet.save(tmp_path / "saved")
    restored = Fleet.load(tmp_path / "saved", engine=engine)
    for f in (fleet, restored):
        for k in range(6, 10):
            f.hold_session("abc"[k % 3], f"s{k}")
        f.release_session("a", "s0")
        f.remove("c")
    fleet.save(tmp_path / "continued")
    restored.save(tmp_path / "restored")
    assert (tmp_path / "continued").read_bytes() == (tmp_path / "restored").read_bytes()


def test_success_rate_is_laplace_smoothed_per_task_kind(engine):
    fleet = fleet_of(engine, [declaration("a", capabilities=[("x.y", 1)])])
    task = {"capabilities": [{"name": "x.y", "version": 1}]}
    for success in (True, True, False):
        fleet.record_outcome("a", task, success)
    fleet.record_outcome("a", "other-kind", False)
    assert scores_of(fleet.place(task))["a"]["success_rate"] == (2 + 1) / (3 + 2)
    assert scores_of(fleet.place({"kind": "other-kind"}))["a"]["success_rate"] == (0 + 1) / (1 + 2)
    assert scores_of(fleet.place({}))["a"]["success_rate"] == 0.5


def test_cost_and_substantiated_components(engine):
    fleet = fleet_of(engine, [
        declaration("a", capabilities=[("x.y", 1), ("x.z", 1)], cost="0.25", evaluated=["x.y"]),
    ])
    task = {"capabilities": [{"name": "x.y", "version": 1}, {"name": "x.z", "version": 1}]}
    entry = scores_of(fleet.place(task))["a"]
    assert entry["cost"] == 1 / 1.25 and entry["substantiated"] == 0.5
    assert entry["total"] == ((0.4 * 0.0 + 0.3 * 0.5) + 0.2 * (1 / 1.25)) + 0.1 * 0.5
    fleet.add(declaration("b"))
    assert scores_of(fleet.place({}))["b"] == {"total": 0.3 * 0.5 + 0.1, "affinity": 0.0,
                                               "success_rate": 0.5, "cost": 0.0, "substantiated": 1.0}


def test_ties_go_to_the_smaller_name(engine):
    # joined out of name order
    fleet = fleet_of(engine, [declaration(name) for name in ("b", "\U0001F600", "a", "\uff5a")])
    assert fleet.place({}).agent == "a"
    fleet.remove("a")
    assert fleet.place({}).agent == "b"
    # code-point order: U+FF5A sorts before U+1F600 here, though not in UTF-16
    fleet.remove("b")
    assert fleet.place({}).agent == "\uff5a"


# -- the whole scorer against the literal reading ------------------------------------------------------

@st.composite
def fleets_and_events(draw):
    """A fleet and a script of outcomes, session holds and releases, and placements; the events
    name the fleet's own agents, and some tasks ask for nothing, so that most steps bear on a score."""
    docs = draw(st.lists(declarations(), max_size=8))
    names = sorted({d["agent"]["name"] for d in docs}) or NAMES[:1]
    task = st.one_of(st.just({}), requirements())
    session = st.sampled_from(SESSIONS)
    script = draw(st.lists(st.one_of(
        st.tuples(st.just("outcome"), st.sampled_from(names), task, st.booleans()),
        st.tuples(st.just("hold"), st.sampled_from(names), session),
        st.tuples(st.just("release"), st.sampled_from(names), session),
        st.tuples(st.just("place"), task, st.none() | session, st.booleans())),
        min_size=1, max_size=16))
    return docs, script


def apply_and_compare(fleet: Fleet, model: FleetModel, event) -> None:
    action, *args = event
    if action == "place":
        task, session, remember = args
        p = fleet.place(task, session=session, remember_session=remember)
        winner, expected = model.place(task, session, remember)
        assert p.agent == winner
        assert bits(scores_of(p)) == bits(expected)
        if p.bound:
            assert bits(orjson.loads(p.scheduling_json())["scores"]) == bits(expected)
        return
    name = args[0]
    if name not in model.docs:
        return
    if action == "outcome":
        fleet.record_outcome(name, args[1], args[2])
        model.record_outcome(name, args[1], args[2])
    elif action == "hold":
        fleet.hold_session(name, args[1])
        model.hold(name, args[1])
    else:
        fleet.release_session(name, args[1])
        model.release(name, args[1])


@settings(max_examples=60)
@given(case=fleets_and_events())
def test_scores_and_winner_match_the_literal_scorer(engine, case):
    docs, script = case
    fleet, model = Fleet(engine=engine), FleetModel()
    for doc in docs:
        fleet.add(doc)
        model.add(doc)
    for event in script:
        apply_and_compare(fleet, model, event)
    for name in model.docs:
        for session in SESSIONS:
            assert fleet.holds_session(name, session) == model.holds(name, session)


# -- custom scorers --------------------------------------------------------------------------------

def constant_scorer(total):
    return lambda task, agents: [{"total": total, "why": "constant"} for _ in agents]


@pytest.mark.parametrize("total", [float("nan"), None, "0.5", True], ids=["nan", "null", "string", "bool"])
def test_a_custom_scorer_without_a_numeric_total_is_refused(engine, total):
    fleet = fleet_of(engine, [declaration("a")], scorer=constant_scorer(total))
    with pytest.raises(a3fast.A3Error, match="'a'.*total"):
        fleet.place({})


def test_a_custom_scorer_with_a_nan_total_is_refused_when_passed_to_place(engine):
    fleet = fleet_of(engine, [declaration("a"), declaration("b")])
    with pytest.raises(a3fast.A3Error):
        fleet.place({}, scorer=lambda task, agents: [{"total": 1.0}, {"total": math.nan}][:len(agents)])


def test_a_custom_scorers_entries_are_recorded_as_given(engine):
    fleet = Fleet(engine=engine, scorer=lambda task, agents: [
        {"total": 2.0 if d.agent.name == "b" else 1.0, "why": d.agent.name} for d in agents])
    fleet.add(declaration("a"))
    fleet.add(declaration("b"))
    p = fleet.place({})
    assert p.agent == "b"
    assert p.scheduling["scores"] == {"a": {"total": 1.0, "why": "a"}, "b": {"total": 2.0, "why": "b"}}


@pytest.mark.parametrize("component, why", [
    ({"why": object()}, "component 'why': a object, not a JSON value"),
    ({3: 1.0}, "a component named 3 [(]names are strings[)]"),
    ({"cost": math.nan}, "component 'cost': nan is no JSON number"),
    ({"cost": [1.0, {"x": -math.inf}]}, "component 'cost': -inf is no JSON number"),
    ({"note": {1: "x"}}, "component 'note': an object key 1"),
    ({"note": "\udc80"}, "component 'note': a string UTF-8 cannot write"),
    ({"big": 2**64}, "component 'big': 18446744073709551616 is past 64 bits"),
], ids=["object", "key", "nan", "nested-inf", "object-key", "surrogate", "big-int"])
def test_a_custom_scorers_entry_a_record_cannot_state_as_given_is_refused_when_placed(engine, component, why):
    # refused by the placement, naming the agent and the component, not by the first record written
    # of it (nor written as null, as JSON writers do with NaN)
    fleet = fleet_of(engine, [declaration("a")], scorer=lambda task, agents: [{"total": 1.0, **component}])
    with pytest.raises(a3fast.A3Error, match=f"scorer gave agent 'a' {why}"):
        fleet.place({})


def test_a_custom_scorers_entry_of_json_values_is_taken(engine):
    entry = {"total": 1, "why": "ok", "parts": [0, 1.5, None, True, {"k": "v"}], "count": -(2**63)}
    fleet = fleet_of(engine, [declaration("a")], scorer=lambda task, agents: [dict(entry)])
    assert orjson.loads(fleet.place({}).scheduling_json())["scores"]["a"] == dict(entry, total=1.0)


def test_a_custom_scorers_numbers_of_other_types_are_recorded_as_the_numbers_they_are(engine):
    # what numeric libraries hand back (a numpy float64 or int64, a float or str subclass)
    import enum

    import numpy

    class Level(enum.IntEnum):
        HIGH = 3

    class Note(str):
        pass

    entry = {"total": numpy.int64(1), "cost": numpy.float64(0.25), "count": numpy.int64(7),
             "level": Level.HIGH, "note": Note("x"), "parts": (numpy.float32(0.5),)}
    fleet = fleet_of(engine, [declaration("a")], scorer=lambda task, agents: [dict(entry)])
    p = fleet.place({})
    assert orjson.loads(p.scheduling_json())["scores"]["a"] == {
        "total": 1.0, "cost": 0.25, "count": 7, "level": 3, "note": "x", "parts": [0.5]}
    assert a3fast.verify(b"".join(orjson.dumps({"seq": k + 1, "kind": kind, "content": orjson.loads(content)})
                                  + b"\n" for k, (kind, content) in enumerate(placement_records(p)))) == []


@pytest.mark.parametrize("total", [math.inf, -math.inf], ids=["inf", "-inf"])
def test_a_custom_scorer_with_an_infinite_total_is_refused(engine, total):
    fleet = fleet_of(engine, [declaration("a")], scorer=constant_scorer(total))
    with pytest.raises(a3fast.A3Error):
        fleet.place({})


def test_a_custom_scorer_must_score_every_eligible_agent_once(engine):
    fleet = fleet_of(engine, [declaration("a"), declaration("b")], scorer=lambda task, agents: [{"total": 1.0}])
    with pytest.raises(a3fast.A3Error, match="1 scores for 2 eligible agents"):
        fleet.place({})
