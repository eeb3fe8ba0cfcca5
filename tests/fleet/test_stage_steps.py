"""The native engine's compiled stage steps (`_core.prepare`, `_core.prepare_each`, `_core.gather`,
`_core.decide_one`, `_core.decide_wave`, `_core.build_placement`,
`_core.build_decided`, `_core.build_wave`, `_core.place_one`) hold to the
pipeline's Python ones field for field: the same values in every slot they set (the clock
readings aside), the same errors, and each fleet takes the steps of its own engine."""
from __future__ import annotations

import copy

import pytest

from a3fast import Fleet, Route, parse_requirements
from a3fast.engines import NATIVE_AVAILABLE
from a3fast.errors import SchemaError
from a3fast.fleet import pipeline
from a3fast.fleet.placement import CustomScores, Placement, RouteError, check_reason_limit
from a3fast.schema import Requirements, task_kind

pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the a3fast._core extension is not built")

#: slots holding a clock reading: both steps read the same clocks (time.perf_counter_ns's and
#: time.time_ns's), at moments apart
CLOCKS = {"started", "gathered", "decided_at_ns"}


def _core():
    from a3fast import _core
    return _core


def agent(name, residency="eu", clearances=("orders.read",)):
    return {"v": "1.0", "agent": {"name": name, "namespace": "support"}, "capabilities": [],
            "clearances": list(clearances), "residency": [residency]}


def slots_of(p: Placement) -> dict:
    """Every slot that is set, by name (an unset one is left out)."""
    out = {}
    for name in Placement.__slots__:
        try:
            out[name] = getattr(p, name)
        except AttributeError:
            pass
    return out


def same_slots(a: Placement, b: Placement, ignore: frozenset = frozenset()) -> None:
    sa, sb = slots_of(a), slots_of(b)
    assert sa.keys() == sb.keys()
    for name in sa.keys() - CLOCKS - ignore:
        assert sa[name] == sb[name], name
    for name in CLOCKS & sa.keys():
        assert type(sa[name]) is int and type(sb[name]) is int
        assert abs(sa[name] - sb[name]) < 10**9, f"{name}: not the same clock"


def keeps_its_fleet(p: Placement, fleet: Fleet) -> None:
    """A built placement's fleet for its declaration's JSON: the one that placed it when it chose
    an agent (not by resuming) whose JSON is not made yet, else none."""
    assert p._fleet is (fleet if p.agent is not None and not p.resumed and p._declaration_json is None else None)


#: what two twin fleets' placements hold of their own fleet (each its own object)
OWN_FLEET = frozenset({"index", "_fleet"})


TASK = {"v": "1.0", "clearances": ["orders.read"], "session": "s-1"}
PREPARED = parse_requirements({"v": "1.0", "clearances": ["orders.read"]})
EU = Route("eu-only", {"residency": "eu"})


@pytest.mark.parametrize("args", [
    (TASK, None, None),
    (TASK, "caller-session", None),
    (PREPARED, None, None),
    (PREPARED, None, EU),
    (TASK, None, EU, 3, "kind-a", len),
    (PREPARED, "s", None, None, None, None),
], ids=["dict", "session-given", "prepared", "routed", "every-argument", "explicit-nones"])
def test_prepare_compiled_sets_every_slot_as_the_python_step_does(args):
    compiled, python = _core().prepare(*args), pipeline.prepare(*args)
    assert type(compiled) is Placement
    same_slots(compiled, python)
    assert compiled.prepared is (args[0] is PREPARED and args[2] is None)
    # what the step takes from its arguments is that very object, not a copy
    if args[0] is PREPARED:
        assert compiled.submitted is PREPARED
    if args[2] is None:
        assert compiled.requirements is compiled.submitted
    assert compiled.scorer is args[5] if len(args) > 5 else compiled.scorer is None


def test_prepare_compiled_raises_what_the_python_step_raises():
    core = _core()
    for bad, error in [((TASK, None, None, 0), ValueError), ((TASK, None, None, True), ValueError),
                       (({"v": "1.0", "clearances": "x"}, None, None), SchemaError),
                       (({"v": "1.0", "residency": "us"}, None, EU), RouteError)]:
        with pytest.raises(error) as from_python:
            pipeline.prepare(*bad)
        with pytest.raises(error) as from_compiled:
            core.prepare(*bad)
        assert str(from_compiled.value) == str(from_python.value)


class Tagged(Requirements):
    """Requirements whose session and predicates are its own: read by name, never by position."""
    __slots__ = ()

    @property
    def session(self):
        return "tagged-session"

    @property
    def predicates(self):
        return ("clearance:orders.write",)


def test_prepare_compiled_reads_a_requirements_subclass_by_its_attribute():
    tagged = Tagged(*PREPARED)
    compiled = _core().prepare(tagged, None, None)
    same_slots(compiled, pipeline.prepare(tagged, None, None))
    assert compiled.session == "tagged-session"


def test_gather_compiled_reads_a_requirements_subclass_by_its_attribute():
    fleet = Fleet("native")
    fleet.add(agent("a"))
    out = same_gathered(fleet, Tagged(*PREPARED))
    assert out[1] == [-1]           # the subclass's one predicate, which no agent satisfies


def decided(bound: bool):
    fleet = Fleet("native")
    fleet.add(agent("a", "eu" if bound else "us"))
    fleet.add(agent("b", "us"))
    states, _ = pipeline.drive(fleet._stages, ({"v": "1.0", "clearances": ["orders.read"], "residency": "eu"},),
                               None, 7, build=False)
    return fleet, states[0]


@pytest.mark.parametrize("bound", [True, False], ids=["bound", "unschedulable"])
def test_build_placement_compiled_sets_every_slot_as_the_python_step_does(bound):
    fleet, state = decided(bound)
    twin = copy.copy(state)
    table, best = fleet._table, state.best
    decl = table.declaration(best) if best >= 0 else None
    text = table.declaration_json(best) if best >= 0 else None
    compiled = _core().build_placement(state, "native", fleet._index, decl, text, 9)
    python = pipeline.build_placement(twin, "native", fleet._index, decl, text, 9)
    assert compiled is state and python is twin
    same_slots(compiled, python)
    assert compiled.agent == ("a" if bound else None) and compiled.generation == 9
    assert compiled.gather_ns >= 0 and compiled.select_ns >= 0


def test_build_placement_compiled_times_a_resumption_by_its_one_phase():
    fleet = Fleet("native")
    fleet.add(agent("a"))
    first = fleet.place({"v": "1.0", "clearances": ["orders.read"]})
    decl, text = fleet._table.declaration(0), fleet._table.declaration_json(0)
    built = []
    for build in (_core().build_placement, pipeline.build_placement):
        state = pipeline.prepare_resumption(pipeline.Resumption(first), decl, text)
        built.append(build(state, "native", first.index, decl, text, 4))
    # each Placement was prepared at its own moment: its one phase is its own clock's
    same_slots(*built, ignore=frozenset({"select_ns", "selected"}))
    for p in built:
        assert p.select_ns == p.selected - p.started
    compiled = built[0]
    assert compiled.resumed and compiled.gather_ns is None and compiled.select_ns >= 0
    assert compiled.agent == "a" and compiled.generation == 4


def bulk_loaded(tmp_path) -> Fleet:
    """A fleet read from JSON Lines: its agent table keeps declarations as JSON until asked."""
    import json
    path = tmp_path / "fleet.jsonl"
    path.write_text("".join(json.dumps(agent(n, r)) + "\n" for n, r in (("a", "eu"), ("b", "us"))))
    fleet = Fleet("native")
    fleet.extend_jsonl(path)
    return fleet


@pytest.mark.parametrize("case", ["bound, its JSON not made yet", "bound, its JSON made", "unschedulable",
                                  "bound, its declaration still JSON", "resumed"])
def test_build_decided_compiled_builds_as_the_python_step_does(case, tmp_path):
    if case == "bound, its declaration still JSON":
        fleet = bulk_loaded(tmp_path)
        states, _ = pipeline.drive(fleet._stages, ({"v": "1.0", "residency": "eu"},), None, 7, build=False)
        state = states[0]
        assert type(fleet._table.entries[state.best]) is bytes
    elif case == "resumed":
        fleet = Fleet("native")
        fleet.add(agent("a"))
        first = fleet.place({"v": "1.0", "clearances": ["orders.read"]})
        state = pipeline.prepare_resumption(pipeline.Resumption(first), fleet._table.declaration(0),
                                            fleet._table.declaration_json(0))
    else:
        fleet, state = decided(case != "unschedulable")
        if case == "bound, its JSON made":
            fleet._table.declaration_json(state.best)
    table = fleet._table
    twin = copy.copy(state)
    before = (list(table.entries), list(table.decl_json))
    python = pipeline.LocalStages._build_decided(fleet._stages, twin, 9)
    # what the Python step made the table keep (a parsed declaration, its JSON), the compiled one
    # makes it keep from the same table
    kept = (list(table.entries), list(table.decl_json))
    table.entries[:], table.decl_json[:] = before
    compiled = _core().build_decided(fleet._stages, state, 9)
    assert compiled is state and python is twin
    same_slots(compiled, python, ignore=frozenset({"select_ns", "selected"} if case == "resumed" else ()))
    assert (list(table.entries), list(table.decl_json)) == kept
    assert compiled.agent == (None if case == "unschedulable" else "a") and compiled.generation == 9
    if compiled.agent is not None:
        assert compiled.declaration_json == table.declaration_json(table.ids["a"])
        assert compiled.declaration is table.declaration(table.ids["a"])
    with pytest.raises(TypeError, match="expected a Placement, found dict"):
        _core().build_decided(fleet._stages, {}, 1)


def test_build_decided_compiled_refuses_a_winner_past_the_table_as_the_python_step_does():
    # the compiled step reads the agent table's lists by index: checked, never past their end
    fleet = Fleet("native")
    fleet.add(agent("a"))
    for build in (_core().build_decided, pipeline.LocalStages._build_decided):
        state = fleet._stages.prepare([{"v": "1.0"}], [None], None, None, None, None, None)[0]
        fleet._stages.decide([state])
        state.best = 10**6
        with pytest.raises(IndexError):
            build(fleet._stages, state, 1)


def two_twins() -> tuple[Fleet, Fleet]:
    """Two native fleets alike: a holds orders.read in the EU, b in the US; b's outcome is better."""
    twins = []
    for _ in range(2):
        fleet = Fleet("native")
        fleet.add(agent("a"))
        fleet.add(agent("b", "us"))
        twins.append(fleet)
    return twins[0], twins[1]


class Frozen(dict):
    """A requirements mapping that is not a plain dict: the driver parses it the careful way."""


@pytest.mark.parametrize("case", ["dict", "prepared", "session held", "session not remembered", "routed",
                                  "unschedulable", "reason_limit and kind", "a caller's scorer",
                                  "the fleet's scorer", "candidates", "another mapping"])
def test_place_one_compiled_places_as_the_driver_does(case):
    compiled_fleet, python_fleet = two_twins()
    task, kwargs, session = dict(TASK), {}, None
    if case == "session held":     # the caller's session, the task stating none
        task, session = {"v": "1.0", "clearances": ["orders.read"]}, "s-1"
    elif case == "prepared":
        task = PREPARED
    elif case == "session not remembered":
        kwargs["remember_session"] = False
    elif case == "routed":
        kwargs["route"] = EU
    elif case == "unschedulable":
        task = {"v": "1.0", "clearances": ["orders.write"]}
    elif case == "reason_limit and kind":
        task, kwargs = {"v": "1.0", "clearances": ["orders.write"]}, {"reason_limit": 1, "kind": "k"}
    elif case == "a caller's scorer":
        kwargs["scorer"] = lambda t, agents: [{"total": float(a.agent.name == "b")} for a in agents]
    elif case == "the fleet's scorer":
        for fleet in (compiled_fleet, python_fleet):
            fleet.scorer = lambda t, agents: [{"total": float(a.agent.name == "b")} for a in agents]
    elif case == "candidates":
        kwargs["candidates"] = ["b"]
    elif case == "another mapping":
        task = Frozen(TASK)
    placed = []
    for fleet, place_one in ((compiled_fleet, _core().place_one), (python_fleet, pipeline.place_one)):
        assert fleet._stages.place_one is _core().place_one
        options = {"route": None, "reason_limit": None, "kind": None, "scorer": None, "candidates": None,
                   "remember_session": True, **kwargs}
        p, generation = place_one(fleet._stages, task, session, fleet.generation, *options.values())
        placed.append((p, generation, fleet))
    (c, c_generation, c_fleet), (p, p_generation, p_fleet) = placed
    same_slots(c, p, ignore=OWN_FLEET | {"gather_ns", "select_ns", "selected", "explanation", "scores"})
    keeps_its_fleet(c, c_fleet)
    keeps_its_fleet(p, p_fleet)
    assert c_generation == p_generation and c.agent == p.agent
    assert c.explanation.eligible_ids() == p.explanation.eligible_ids()
    assert c_fleet.holds_session("a", "s-1") is p_fleet.holds_session("a", "s-1")
    assert c.agent == {"unschedulable": None, "reason_limit and kind": None, "a caller's scorer": "b",
                       "the fleet's scorer": "b", "candidates": "b", "routed": "a"}.get(case, "a")
    # a bound placement of a session it remembers makes its agent hold it: the generation moves on
    assert c_generation == 2 + (c.agent is not None and case not in ("session not remembered", "prepared"))


def test_place_one_compiled_hands_a_resumption_to_the_driver():
    fleet = Fleet("native")
    fleet.add(agent("a"))
    first = fleet.place(TASK)
    again, generation = _core().place_one(fleet._stages, pipeline.Resumption(first, 5), None, fleet.generation,
                                          None, None, None, None, None, True)
    assert again.resumed and again.recorded_in == 5 and again.agent == "a"
    assert generation == fleet.generation        # a resumption holds nothing


def test_the_compiled_steps_take_only_a_placement_and_name_a_slot_never_set():
    core = _core()
    with pytest.raises(TypeError, match="expected a Placement, found dict"):
        core.build_placement({}, "native", None, None, None, 1)
    with pytest.raises(TypeError, match="expected a Placement, found dict"):
        core.gather(Fleet("native")._stages, {}, 0)
    with pytest.raises(TypeError, match="expected a Placement, found dict"):
        core.decide_one(Fleet("native")._stages, {})
    with pytest.raises(TypeError, match="expected a Placement, found dict"):
        core.decide_wave(Fleet("native")._stages, [{}], 0, Fleet("native").weights, None, 1)
    empty = object.__new__(Placement)
    for build in (core.build_placement, pipeline.build_placement):
        # (the compiled step reads the slot itself; Python's read goes through Placement.__getattr__)
        with pytest.raises(AttributeError, match="no attribute 'scores'|'scores' is not set on this Placement"):
            build(copy.copy(empty), "native", None, None, None, 1)
    # the clock phases are read when asked for, so a placement built without its clock readings
    # names the first one missing then, as the property does
    scored = object.__new__(Placement)
    scored.scores, scored.resumed, scored.started = None, False, 1
    for build in (core.build_placement, pipeline.build_placement):
        built = build(copy.copy(scored), "native", None, None, None, 1)
        with pytest.raises(AttributeError, match="no attribute 'gathered'|'gathered' is not set on this Placement"):
            built.gather_ns


def test_decide_wave_compiled_never_reads_past_a_list_changed_under_it():
    fleet = Fleet("native")
    fleet.add(agent("a"))
    explanation = fleet.place(TASK).explanation
    states = [pipeline.prepare(TASK, None, None) for _ in range(3)]

    class Emptying(str):
        """A session whose hash, once armed, empties the list of Placements being decided: the
        first task's session row is looked up by it."""
        armed = False

        def __hash__(self):
            if Emptying.armed:
                states.clear()
            return str.__hash__(self)

    fleet._rows.explained[states[0].requirements.predicates] = (fleet.membership, explanation, [])
    states[0].session = Emptying("s")
    Emptying.armed = True
    with pytest.raises(IndexError):
        _core().decide_wave(fleet._stages, states, fleet.membership, fleet.weights, None, 1)


def gathered_twice(fleet: Fleet, task, *, within=None, scorer=None):
    """The compiled and the Python explain stage up to the engine, each on its own Placement of
    `task` prepared alike, against the fleet as it is."""
    out = []
    for gather in (_core().gather, pipeline.LocalStages._gather):
        state = pipeline.prepare(task, None, None, None, None, scorer)
        state.within = within
        out.append((state, gather(fleet._stages, state, fleet.membership)))
    return out


def same_gathered(fleet: Fleet, task, **given) -> tuple:
    (compiled, c_out), (python, p_out) = gathered_twice(fleet, task, **given)
    same_slots(compiled, python)
    assert type(c_out) is tuple and len(c_out) == 4
    if c_out[0] is None or p_out[0] is None:
        assert c_out == p_out
    else:       # an explanation: kept (the same object) or made for `within` (equal sets)
        assert c_out[1:] == p_out[1:]
        assert c_out[0].eligible_ids() == p_out[0].eligible_ids()
        assert c_out[0].failed_counts() == p_out[0].failed_counts()
    return c_out


def test_gather_compiled_returns_and_sets_what_the_python_step_does():
    fleet = Fleet("native")
    for name, where in (("a", "eu"), ("b", "us"), ("c", "eu")):
        fleet.add(agent(name, where))
    task = {"v": "1.0", "clearances": ["orders.read"], "residency": "eu"}
    fresh = same_gathered(fleet, task)                       # never explained: the engine's arguments
    assert fresh[0] is None
    same_gathered(fleet, PREPARED)                           # a prepared task: resolved by its object
    fleet.place(task)                                        # explained, and its set noted
    fleet.place(task)                                        # explained again, and kept
    kept = same_gathered(fleet, task)
    assert kept[0] is not None and kept[1:] == ((), 0, ())
    restricted = same_gathered(fleet, task, within=[0, 1])   # within some agents: made, never kept
    assert restricted[0].eligible_ids() == [0]
    same_gathered(fleet, task, scorer=lambda t, agents: [])  # a scorer: the task's kind is derived
    fleet.record_outcome("a", "k", True)                     # outcomes: the kind is derived
    same_gathered(fleet, task)
    fleet.add(agent("d", "eu"))                              # membership changed: explained again
    assert same_gathered(fleet, task)[0] is None


def test_decide_one_compiled_explains_scores_and_chooses_as_the_python_step_does():
    fleet = Fleet("native")
    for name, where in (("a", "eu"), ("b", "us"), ("c", "eu")):
        fleet.add(agent(name, where))
    fleet.hold_session("c", "s-1")                           # the session's affinity is scored
    fleet.record_outcome("a", "clearance-only", False)      # and the kind's history
    task = {"v": "1.0", "clearances": ["orders.read"], "residency": "eu", "session": "s-1",
            "kind": "clearance-only"}
    for _ in range(2):                                       # explained afresh, then kept
        states = []
        for decide_one in (_core().decide_one, pipeline.LocalStages._decide_one):
            state = pipeline.prepare(task, None, None)
            decide_one(fleet._stages, state)
            states.append(state)
        compiled, python = states
        c, p = slots_of(compiled), slots_of(python)
        assert c.keys() == p.keys() and {"explanation", "scores", "best", "selected"} <= c.keys()
        for name in c.keys() - CLOCKS - {"explanation", "scores", "selected"}:
            assert c[name] == p[name], name
        assert compiled.explanation.eligible_ids() == python.explanation.eligible_ids() == [0, 2]
        assert compiled.explanation.failed_counts() == python.explanation.failed_counts()
        assert compiled.best == python.best == 2 and compiled.scores.best == 2
        for column in ("ids", "total", "affinity", "success_rate", "cost", "substantiated"):
            assert getattr(compiled.scores, column) == getattr(python.scores, column), column
        assert abs(compiled.selected - python.selected) < 10**9


def wave_fleet() -> Fleet:
    fleet = Fleet("native")
    for name, where in (("a", "eu"), ("b", "us"), ("c", "eu")):
        fleet.add(agent(name, where))
    fleet.hold_session("c", "s-1")
    fleet.record_outcome("a", "k", True)
    return fleet


WAVE = [{"v": "1.0", "clearances": ["orders.read"], "residency": "eu", "session": "s-1", "kind": "k"},
        {"v": "1.0", "clearances": ["orders.read"], "residency": "us"},
        {"v": "1.0", "clearances": ["orders.write"]}]


def decided_both_ways(fleet: Fleet, tasks, pool=None, parts=1):
    """The compiled and the Python decide_wave, each on its own Placements of `tasks` prepared
    alike, against the fleet's caches as they were: each way's Placements and the caches after it."""
    rows = fleet._rows
    kept = dict(rows.explained), set(rows.explained_once)
    out = []
    for decide_wave in (_core().decide_wave, pipeline.LocalStages._decide_wave):
        rows.explained.clear()                              # each step meets the fleet as it was
        rows.explained.update(kept[0])
        rows.explained_once.clear()
        rows.explained_once.update(kept[1])
        states = [pipeline.prepare(task, None, None) for task in tasks]
        decide_wave(fleet._stages, states, fleet.membership, fleet.weights, pool, parts)
        out.append((states, dict(rows.explained), set(rows.explained_once)))
    return out


def assert_decided_alike(compiled: list[Placement], python: list[Placement]) -> None:
    for c, p in zip(compiled, python, strict=True):
        cs, ps = slots_of(c), slots_of(p)
        assert cs.keys() == ps.keys()
        for name in cs.keys() - CLOCKS - {"explanation", "scores", "selected"}:
            assert cs[name] == ps[name], name
        assert c.explanation.eligible_ids() == p.explanation.eligible_ids()
        assert c.explanation.failed_counts() == p.explanation.failed_counts()
        assert c.scores.total == p.scores.total and c.best == p.best == c.scores.best


def test_a_waves_decisions_compiled_are_the_python_steps():
    fleet = wave_fleet()
    for _ in range(2):                                      # one of them explained twice: kept
        fleet.place(WAVE[1])
    (compiled, c_kept, c_noted), (python, p_kept, p_noted) = decided_both_ways(fleet, WAVE)
    assert_decided_alike(compiled, python)
    assert [c.best for c in compiled] == [2, 1, -1]
    # the same explanations kept and noted: the one met again kept as it was, the others noted
    assert c_kept.keys() == p_kept.keys() and c_noted == p_noted
    assert parse_requirements(WAVE[1]).predicates in c_kept and len(c_noted) == 2


def test_a_wave_cut_into_runs_on_threads_decides_as_one_run():
    from concurrent.futures import ThreadPoolExecutor

    fleet = wave_fleet()
    tasks = [dict(WAVE[i % 3], kind=f"k{i % 5}") for i in range(3 * pipeline.MIN_RUN + 7)]
    (one_run, _, _), _ = decided_both_ways(fleet, tasks)
    with ThreadPoolExecutor(2) as pool:
        for parts in (2, 3):
            (compiled, _, _), (python, _, _) = decided_both_ways(fleet, tasks, pool, parts)
            assert_decided_alike(compiled, python)
            assert_decided_alike(compiled, one_run)


def test_prepare_each_compiled_prepares_a_batch_as_the_python_step_does():
    fleet = Fleet("native")
    fleet.add(agent("a"))
    earlier = fleet.place(TASK)
    tasks = [TASK, PREPARED, Frozen(TASK), pipeline.Resumption(earlier, 7), {"v": "1.0", "clearances": ["orders.write"]}]
    sessions = [None, "given", None, None, "s-2"]
    for args in [(EU, 2, "k", len), (None, None, None, None)]:
        compiled = _core().prepare_each(fleet._stages, tasks, sessions, *args)
        python = pipeline.LocalStages._prepare_each(fleet._stages, tasks, sessions, *args)
        assert len(compiled) == len(python) == 5
        for c, p in zip(compiled, python):
            assert type(c) is Placement
            same_slots(c, p, ignore=frozenset({"selected"}))     # a resumption's prepare reads the clock
        assert compiled[3].resumed and compiled[3].recorded_in == 7
        assert [c.session for c in compiled] == ["s-1", "given", "s-1", "s-1", "s-2"]
    # as `zip` pairs them: as far as the shorter goes; any iterables, not only lists
    assert len(_core().prepare_each(fleet._stages, iter(tasks), ("s",), None, None, None, None)) == 1
    assert _core().prepare_each(fleet._stages, [], sessions, None, None, None, None) == []


def test_prepare_each_compiled_raises_what_the_python_step_raises():
    fleet = Fleet("native")
    fleet.add(agent("a"))
    never_bound = fleet.place({"v": "1.0", "clearances": ["orders.write"]})
    for tasks in ([TASK, {"v": "1.0", "clearances": "x"}], [pipeline.Resumption(never_bound)]):
        raised = []
        for prepare_each in (_core().prepare_each, pipeline.LocalStages._prepare_each):
            with pytest.raises(Exception) as caught:
                prepare_each(fleet._stages, tasks, [None] * len(tasks), None, None, None, None)
            raised.append((type(caught.value), str(caught.value)))
        assert raised[0] == raised[1]


class BuiltByName(pipeline.LocalStages):
    """LocalStages of another class: the compiled wave builder calls its `build`, as the Python one does."""

    __slots__ = ("built",)

    def build(self, state, generation):
        self.built.append(state.submitted.doc)
        return super().build(state, generation)


@pytest.mark.parametrize("case", ["sessions remembered", "sessions not remembered", "a resumption",
                                  "stages of another class"])
def test_build_wave_compiled_builds_and_holds_as_the_python_step_does(case):
    compiled_fleet, python_fleet = two_twins()
    earlier = {}
    for fleet in (compiled_fleet, python_fleet):
        earlier[fleet] = fleet.place({"v": "1.0", "clearances": ["orders.read"], "residency": "us", "session": "s-9"})
    tasks = [{"v": "1.0", "clearances": ["orders.read"], "session": "s-1"},
             {"v": "1.0", "clearances": ["orders.write"], "session": "s-2"},
             {"v": "1.0", "clearances": ["orders.read"]},
             {"v": "1.0", "clearances": ["orders.read"], "residency": "us", "session": "s-3"}]
    remember = case != "sessions not remembered"
    built = []
    for fleet, build_wave in ((compiled_fleet, _core().build_wave), (python_fleet, pipeline.build_wave)):
        stages = fleet._stages
        if case == "stages of another class":
            stages = BuiltByName(fleet, fleet._table, fleet._rows)
            stages.built = []
        batch = tasks + [pipeline.Resumption(earlier[fleet])] if case == "a resumption" else tasks
        states = stages.prepare(batch, [None] * len(batch), None, None, None, None, None)
        stages.decide(states)
        placements, held = [None] * len(states), [False] * len(states)
        wave = list(range(len(states)))[::-1] if case == "a resumption" else list(range(len(states)))
        build_wave(stages, states, wave, placements, held, 5, remember)
        built.append((placements, held, fleet, stages))
    (c_placed, c_held, c_fleet, c_stages), (p_placed, p_held, p_fleet, p_stages) = built
    for c, p in zip(c_placed, p_placed):
        same_slots(c, p, ignore=OWN_FLEET | {"gather_ns", "select_ns", "selected", "explanation", "scores"})
        keeps_its_fleet(c, c_fleet)
        keeps_its_fleet(p, p_fleet)
        assert c.generation == 5
    assert c_held == p_held == ([True, False, False, True] + [False] * (case == "a resumption") if remember
                                else [False] * 4)
    for session, holder in (("s-1", "a"), ("s-3", "b"), ("s-9", "b")):
        assert c_fleet.holds_session(holder, session) is p_fleet.holds_session(holder, session)
    if case == "stages of another class":
        assert c_stages.built == p_stages.built == tasks


def test_bind_placement_refuses_what_it_cannot_write_and_keeps_what_it_had():
    core = _core()

    class NoSlots:
        pass

    class Borrowed:     # Placement's own member descriptors, which write Placement's layout
        pass

    for name in core.STEP_SLOTS:
        setattr(Borrowed, name, Placement.__dict__[name])

    class Larger:       # the slots, but more of them: a refused binding must not keep its offsets
        __slots__ = ("padding", *core.STEP_SLOTS)

    class NoFields(tuple):
        pass

    refusals = [((NoSlots, CustomScores, Requirements), "is not a writable slot"),
                ((Borrowed, CustomScores, Requirements), "is not a writable slot of its own"),
                ((Larger, CustomScores, NoFields), "'session', 'predicates' and 'doc'"),
                ((Larger, CustomScores, dict), "expected a named tuple class"),
                (("Placement", CustomScores, Requirements), "expected a class")]
    for (placement, custom, requirements), why in refusals:
        with pytest.raises(TypeError, match=why):
            core.bind_placement(placement, custom, requirements, parse_requirements, check_reason_limit,
                                task_kind)
    for keyword, why in [({"declaration": "Declaration"}, "declaration: expected a class"),
                         ({"resumption": "Resumption"}, "resumption: expected a class"),
                         ({"rows_namespace": ["NOTED_ONCE_LIMIT"]}, "rows_namespace: expected a module's globals")]:
        with pytest.raises(TypeError, match=why):
            core.bind_placement(Larger, CustomScores, Requirements, parse_requirements, check_reason_limit,
                                task_kind, **keyword)
    # still bound to Placement, every slot where Placement keeps it
    same_slots(core.prepare(TASK, None, None, 2, "k", len), pipeline.prepare(TASK, None, None, 2, "k", len))


def test_bind_holders_refuses_a_class_without_the_slots_and_keeps_what_it_had():
    from a3fast.fleet.rows import PredicateRows
    from a3fast.fleet.table import AgentTable

    core = _core()

    class NoSlots:
        pass

    for classes, why in [((NoSlots, PredicateRows, AgentTable), "NoSlots.fleet is not a writable slot"),
                         ((pipeline.LocalStages, AgentTable, AgentTable), "AgentTable.rows is not a writable slot"),
                         ((pipeline.LocalStages, PredicateRows, "AgentTable"), "expected a class")]:
        with pytest.raises(TypeError, match=why):
            core.bind_holders(*classes)
    fleet = Fleet("native")
    fleet.add(agent("a"))
    assert fleet.place(TASK).agent == "a" and fleet.place(TASK).agent == "a"


def test_the_steps_read_a_holder_of_another_class_by_name():
    from a3fast.fleet.rows import PredicateRows

    reads = []

    class WatchedRows(PredicateRows):
        """The fleet's rows, its explanation cache read through a property."""
        __slots__ = ()

        @property
        def explained(self):
            reads.append("explained")
            return PredicateRows.explained.__get__(self)

    fleet = Fleet("native")
    fleet.add(agent("a"))
    fleet._rows.__class__ = WatchedRows
    assert fleet.place(TASK).agent == "a"
    assert reads          # the compiled gather asked the property, not the slot beneath it
    # a holder whose slot is unset is named as an attribute read by name would name it
    bare = object.__new__(pipeline.LocalStages)
    with pytest.raises(AttributeError, match="rows"):
        _core().gather(bare, _core().prepare(TASK, None, None), 0)


def test_a_native_build_without_the_steps_runs_the_python_ones(monkeypatch):
    # an extension built before the compiled steps has no bind_placement: the package still
    # imports, and its fleets take the Python steps
    monkeypatch.setattr(pipeline, "NATIVE_STEPS", False)
    assert pipeline.stage_steps("native") == pipeline.stage_steps("pure")
    fleet = Fleet("native")
    fleet.add(agent("a"))
    assert fleet._stages.prepare_one is pipeline.prepare
    assert fleet.place({"v": "1.0", "clearances": ["orders.read"]}).agent == "a"


def test_each_fleet_takes_the_steps_of_its_engine():
    assert Fleet("native")._stages.prepare_one is _core().prepare
    assert Fleet("native")._stages.build_one is _core().build_placement
    assert Fleet("native")._stages.gather_one is _core().gather
    assert Fleet("native")._stages.decide_one is _core().decide_one
    assert Fleet("pure")._stages.decide_one is pipeline.LocalStages._decide_one
    assert Fleet("native")._stages.decide_wave is _core().decide_wave
    assert Fleet("pure")._stages.decide_wave is pipeline.LocalStages._decide_wave
    assert Fleet("pure")._stages.prepare_one is pipeline.prepare
    assert Fleet("pure")._stages.gather_one is pipeline.LocalStages._gather
    assert Fleet("pure")._stages.build_one is pipeline.build_placement
    assert Fleet("native")._stages.build_decided is _core().build_decided
    assert Fleet("pure")._stages.build_decided is pipeline.LocalStages._build_decided
    assert Fleet("native")._stages.place_one is _core().place_one
    assert Fleet("pure")._stages.place_one is pipeline.place_one
    assert Fleet("native")._stages.prepare_each is _core().prepare_each
    assert Fleet("pure")._stages.prepare_each is pipeline.LocalStages._prepare_each
    assert Fleet("native")._stages.build_each is _core().build_wave
    assert Fleet("pure")._stages.build_each is pipeline.build_wave
