"""The native engine's own contract: the pure engine's interface, rows that change form without
changing content, explanations that outlive the fleet, and §6 JSON that parses to the dict form."""
from __future__ import annotations

import gc
import inspect
import os

import orjson
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from pyroaring import BitMap

from a3fast import _pure
from a3fast.engines import NATIVE_AVAILABLE

from factories import declaration, fleet_of

if NATIVE_AVAILABLE:
    from a3fast import _core
elif os.environ.get("A3FAST_REQUIRE_NATIVE") == "1":
    pytest.fail("A3FAST_REQUIRE_NATIVE=1 but the a3fast._core extension is not built", pytrace=False)
else:
    pytest.skip("the a3fast._core extension is not built", allow_module_level=True)

WEIGHTS = (0.4, 0.3, 0.2, 0.1)


#: The pure Explanation's own storage (Python ints), not part of the interface.
PURE_STORAGE = {"candidates", "eligible", "failed"}


def public(cls) -> set[str]:
    names = {name for name in dir(cls) if not name.startswith("_")} - PURE_STORAGE
    return names | ({"__len__"} if hasattr(cls, "__len__") else set())


@pytest.mark.parametrize("name", ["Index", "Explanation", "Scores"])
def test_both_engines_expose_the_same_classes_and_methods(name):
    native, pure = getattr(_core, name), getattr(_pure, name)
    assert public(native) == public(pure)
    for attr in public(pure):
        pure_member = getattr(pure, attr)
        if inspect.isfunction(pure_member) and attr != "__len__":
            expected = list(inspect.signature(pure_member).parameters)
            assert list(inspect.signature(getattr(native, attr)).parameters) == expected, attr


def test_both_engines_share_the_module_constants():
    for name in ("NO_AGENT_REF", "UNKNOWN"):
        assert getattr(_core, name) == getattr(_pure, name)


# -- rows against Python sets, through the sizes where a row changes form ---------------------------------

class IndexAgainstSets(RuleBasedStateMachine):
    """Native and pure Index next to plain sets (as pyroaring's own tests pair a bitmap with a set).

    Up to 600 agent ids: rows fill past one member per 64 ids (dense) and empty again (sparse),
    and the live words are reallocated several times on the way.
    """

    @initialize()
    def start(self):
        self.native, self.pure = _core.Index(), _pure.Index()
        self.rows: list[set[int]] = []
        self.live: set[int] = set()
        self.members: dict[int, set[int]] = {}   # agent id -> rows given at put

    @rule()
    def add_row(self):
        assert self.native.add_row() == self.pure.add_row() == len(self.rows)
        self.rows.append(set())

    @precondition(lambda self: self.rows)
    @rule(count=st.integers(1, 120), data=st.data())
    def join_many(self, count, data):
        first = len(self.members)
        picks = [data.draw(st.sets(st.integers(0, len(self.rows) - 1), max_size=3)) for _ in range(count)]
        aids = list(range(first, first + count))
        args = (aids, [f"agent-{a}" for a in aids], [sorted(p) for p in picks], [a / 7 for a in aids])
        self.native.put_many(*args)
        self.pure.put_many(*args)
        for aid, rows in zip(aids, picks):
            self.members[aid] = rows
            self.live.add(aid)
            for r in rows:
                self.rows[r].add(aid)

    @precondition(lambda self: self.members)
    @rule(data=st.data())
    def leave_or_return(self, data):
        aid = data.draw(st.sampled_from(sorted(self.members)))
        rows = sorted(self.members[aid])
        if aid in self.live:
            self.native.drop(aid, rows)
            self.pure.drop(aid, rows)
            self.live.discard(aid)
            for r in rows:
                self.rows[r].discard(aid)
        else:
            self.native.put(aid, f"agent-{aid}", rows, 0.5)
            self.pure.put(aid, f"agent-{aid}", rows, 0.5)
            self.live.add(aid)
            for r in rows:
                self.rows[r].add(aid)

    @precondition(lambda self: self.members and self.rows)
    @rule(data=st.data(), on=st.booleans())
    def flip_bit(self, data, on):
        aid = data.draw(st.sampled_from(sorted(self.members)))
        r = data.draw(st.integers(0, len(self.rows) - 1))
        for index in (self.native, self.pure):
            (index.set_bit if on else index.clear_bit)(r, aid)
        (self.rows[r].add if on else self.rows[r].discard)(aid)

    @precondition(lambda self: self.rows)
    @rule(data=st.data())
    def explain(self, data):
        order = data.draw(st.lists(st.integers(-1, len(self.rows) - 1), max_size=4))
        ids = sorted(self.members) + [-1, 10**6]
        only = data.draw(st.sampled_from([_core.NO_AGENT_REF] + ids))
        excluded = data.draw(st.lists(st.sampled_from(ids), max_size=2))
        a = self.native.explain(order, only, excluded)
        b = self.pure.explain(order, only, excluded)
        remaining, failed = set(self.live), []
        for r in order:
            row = self.rows[r] if r >= 0 else set()
            failed.append(remaining - row)
            remaining &= row
        if only != _core.NO_AGENT_REF:
            failed.append(remaining - {only})
            remaining &= {only}
        for aid in excluded:
            failed.append(remaining & {aid})
            remaining -= {aid}
        for e in (a, b):
            assert e.candidate_ids() == sorted(self.live)
            assert e.eligible_ids() == sorted(remaining)
            assert [e.failed_ids(k) for k in range(len(failed))] == [sorted(f) for f in failed]
            assert e.failed_counts() == [len(f) for f in failed]
            assert list(BitMap.deserialize(e.eligible_roaring())) == sorted(remaining)

    @invariant()
    def rows_hold_their_members(self):
        if not hasattr(self, "native"):
            return
        for r, members in enumerate(self.rows):
            assert self.native.row_ids(r) == self.pure.row_ids(r) == sorted(members)
        assert self.native.live_ids() == sorted(self.live)
        assert self.pure.live_ids() == sorted(self.live)


TestIndexAgainstSets = IndexAgainstSets.TestCase
TestIndexAgainstSets.settings = settings(max_examples=30, stateful_step_count=25, deadline=None)


def grown_index(n: int, rows: int = 2) -> _core.Index:
    index = _core.Index()
    for _ in range(rows):
        index.add_row()
    index.put_many(list(range(n)), [f"agent-{i}" for i in range(n)], [[i % rows] for i in range(n)],
                   [0.0] * n)
    return index


def test_a_sparse_row_costs_bytes_per_member_not_per_agent():
    index = grown_index(100_000)
    before = index.nbytes()
    rare = [index.add_row() for _ in range(100)]
    for r in rare:
        for aid in range(r, 100_000, 20_000):   # 5 members each
            index.set_bit(r, aid)
    # 100 dense rows would take 100 * 12,500 bytes; sorted 32-bit ids take a few bytes per member
    assert index.nbytes() - before < 100 * 200
    assert index.row_ids(rare[0]) == list(range(rare[0], 100_000, 20_000))


def test_a_row_turns_dense_at_one_member_per_128_ids_and_sparse_under_one_per_256():
    index = grown_index(1000)            # 1,000 ids: 16 words (1,024 ids) of capacity per dense set
    row = index.add_row()
    sparse = index.nbytes()
    members = list(range(0, 1000, 50))   # 20 members
    for count, aid in enumerate(members, 1):
        index.set_bit(row, aid)
        if count == 7:
            assert index.nbytes() - sparse <= 8 * 4       # 7 ids in a sorted array
    dense = index.nbytes()
    assert dense - sparse == 16 * 8                       # 16 words
    for aid in members[:16]:                              # 4 members left: still dense
        index.clear_bit(row, aid)
    assert index.nbytes() == dense
    index.clear_bit(row, members[16])                     # 3 < 1,024 / 256: sparse again
    assert index.nbytes() < dense
    assert index.row_ids(row) == members[17:]
    assert index.explain([row], _core.NO_AGENT_REF, []).eligible_ids() == members[17:]


def test_an_explanation_outlives_the_rows_it_was_computed_from():
    index = grown_index(200)
    expl = index.explain([0], _core.NO_AGENT_REF, [])
    eligible, failed = expl.eligible_ids(), expl.failed_ids(0)
    # empty row 0, then grow the fleet far past the words the explanation copied
    index.drop(0, [0])
    for aid in range(2, 200, 2):
        index.clear_bit(0, aid)
    index.put_many(list(range(200, 5000)), [f"agent-{i}" for i in range(200, 5000)], [[0]] * 4800, [0.0] * 4800)
    assert expl.eligible_ids() == eligible == list(range(0, 200, 2))
    assert expl.failed_ids(0) == failed == list(range(1, 200, 2))
    assert expl.candidates_count == 200


def test_explanations_and_scores_belong_to_the_index_that_made_them():
    a, b = grown_index(10), grown_index(10)
    expl = a.explain([0], _core.NO_AGENT_REF, [])
    with pytest.raises(ValueError, match="another Index"):
        b.score(expl, [], -1, -1, WEIGHTS)
    with pytest.raises(ValueError, match="another Index"):
        b.candidate_names(expl)
    with pytest.raises(TypeError):
        _core.Explanation()


def test_explanations_and_scores_are_left_out_of_the_cyclic_collector():
    # They hold only their Index, which is final and holds only strings and bytes, so no cycle can
    # pass through them; untracked, a placement kept by its caller costs the collector's passes two
    # objects fewer.
    index = grown_index(10)
    expl = index.explain([0], _core.NO_AGENT_REF, [])
    [(batch_expl, batch_scores)] = index.place_batch([(None, [0], _core.NO_AGENT_REF, [], [], -1, -1)], WEIGHTS)
    for made in (expl, index.score(expl, [], -1, -1, WEIGHTS), batch_expl, batch_scores):
        assert not gc.is_tracked(made)
    for cls in (_core.Explanation, _core.Scores, _core.Index):
        with pytest.raises(TypeError):
            type("Sub", (cls,), {})     # final: a subclass could hold a cycle the collector misses


def test_a_batch_whose_tasks_copy_no_arguments_gives_what_explain_then_score_give():
    # every task given its explanation and no eval rows: the batch's argument arrays stay empty
    index = grown_index(10)
    explanations = [index.explain([0], _core.NO_AGENT_REF, []), index.explain([], _core.NO_AGENT_REF, [3])]
    batch = index.place_batch([(expl, [], _core.NO_AGENT_REF, [], [], -1, -1) for expl in explanations], WEIGHTS)
    for expl, (batch_expl, scores) in zip(explanations, batch, strict=True):
        alone = index.score(expl, [], -1, -1, WEIGHTS)
        assert batch_expl is expl
        assert (scores.ids, scores.total, scores.best) == (alone.ids, alone.total, alone.best)


def test_a_wave_runs_only_once_each_of_its_tasks_is_set_up():
    index = grown_index(10)
    with pytest.raises(TypeError, match="made by Index.place_batch"):
        _core.Wave(index, 2, WEIGHTS)
    wave = _core.Wave.__new__(_core.Wave, index, 2, WEIGHTS)
    with pytest.raises(ValueError, match="a wave of 2 tasks was given 0"):
        wave.run(0, 2)      # its jobs are not set up: running them would read nothing valid


def test_bad_arguments_change_nothing():
    index = grown_index(10)
    with pytest.raises(IndexError):
        index.put(10, "new", [0, 7], 0.0)          # row 7 does not exist
    assert len(index.live_ids()) == 10 and index.row_ids(0) == list(range(0, 10, 2))
    with pytest.raises(ValueError, match="next free id"):
        index.put(12, "skips-an-id", [0], 0.0)
    with pytest.raises(ValueError, match="consecutive"):
        index.put_many([11, 12], ["x", "y"], [[0], [0]], [0.0, 0.0])
    with pytest.raises(IndexError):
        index.explain([5], _core.NO_AGENT_REF, [])
    assert len(index.live_ids()) == 10


# -- scores: same operations, same order, same bits ------------------------------------------------------

def investigator(name: str, cost: str | None = None, evaluated: bool = False) -> dict:
    """An agent that declares order.investigate/2 (substantiated when `evaluated`) at `cost`."""
    return declaration(name, capabilities=[("order.investigate", 2)], evaluation="probe:1",
                       evaluated=["order.investigate"] if evaluated else [], cost=cost)


TASK = {"capabilities": [{"name": "order.investigate", "version": 2}], "session": "s"}


def test_totals_repeat_the_pure_engines_operation_order():
    # ((0.4*1 + 0.3*sr) + 0.2*c) + 0.1*e differs in its last bit from 0.4*1 + (0.3*sr + 0.2*c) + ...
    # for these components (0.8818181818181817 against ...818): a kernel that reassociated the sum would be caught here.
    agents = [investigator("x", "0.1", True), investigator("y", "2.5"), investigator("w", "0.333", True)]
    fleets = {engine: fleet_of(engine, agents, batch=True) for engine in ("native", "pure")}
    for fleet in fleets.values():
        for name in ("x", "y", "w"):
            fleet.hold_session(name, "s")
        fleet.record_outcome("x", TASK, True)
    totals = {engine: [t.hex() for t in fleet.place(TASK).scores.total] for engine, fleet in fleets.items()}
    assert totals["native"] == totals["pure"]
    c, sr = 1 / (1 + 0.1), (1 + 1) / (1 + 2)
    assert totals["native"][0] == (((0.4 * 1.0 + 0.3 * sr) + 0.2 * c) + 0.1 * 1.0).hex()
    assert (((0.4 * 1.0 + 0.3 * sr) + 0.2 * c) + 0.1 * 1.0) != (0.4 * 1.0 + (0.3 * sr + 0.2 * c)) + 0.1 * 1.0


def test_ties_go_to_the_smallest_name_in_code_point_order():
    # U+FF5A sorts before U+1F600 by code point (and in UTF-8), after it in UTF-16
    names = ["\U0001F600", "\uff5a", "\uff5a\U0001F600", "zz"]
    for engine in ("native", "pure"):
        fleet = fleet_of(engine, [investigator(n, "1") for n in names], batch=True)
        assert fleet.place(TASK).agent == "zz"
        fleet.remove("zz")
        assert fleet.place(TASK).agent == "\uff5a"


# -- the §6 JSON writer ------------------------------------------------------------------------------------

def test_json_bytes_escape_names_as_json_requires():
    names = ['quote"d', "back\\slash", "tab\there", "nl\nline", "\x00nul", "é", "\U0001F600"]
    indexes = {"native": _core.Index(), "pure": _pure.Index()}
    out = {}
    for engine, index in indexes.items():
        r = index.add_row()
        for aid, name in enumerate(names):
            index.put(aid, name, [r] if aid % 2 else [], 0.25)
        expl = index.explain([r], _core.NO_AGENT_REF, [])
        scores = index.score(expl, [], -1, -1, WEIGHTS)
        text = index.write_scheduling(expl, scores, ['tool:"odd"\\tool'], b"{}", b"{}", b'"route":"r"')
        out[engine] = orjson.loads(text)
    assert out["native"] == out["pure"]
    assert out["native"]["candidates"] == names
    assert out["native"]["filters_failed"][0] == {"candidate": 'quote"d', "predicate": 'tool:"odd"\\tool'}
    assert list(out["native"]) == ["requirements", "declaration", "candidates", "filters_passed",
                                   "filters_failed", "scores", "route"]


# the last: totals near the largest float (weights whose magnitudes add up past it are refused)
@pytest.mark.parametrize("w", [(0.1, 0.2, 0.3, 1e-300), (1 / 3, 1 / 7, 1e17, 2.0**-1074), (1e308, 5e307, 1e307, 1e307)])
def test_json_floats_are_written_in_shortest_round_trip_form(w):
    fleet = fleet_of("native", [investigator(f"a{i}", cost, i % 2 == 0)
                                for i, cost in enumerate(["0.1", "0.7", "3", "0.333", None])], batch=True, weights=w)
    p = fleet.place(TASK)
    text = p.scheduling_json()
    parsed = orjson.loads(text)
    assert parsed == orjson.loads(orjson.dumps(p.scheduling))
    for name, components in p.index.score_map(p.scores).items():
        for key, value in components.items():
            if value == value and abs(value) != float("inf"):
                assert parsed["scores"][name][key].hex() == value.hex()
                assert f'"{key}":'.encode() + orjson.dumps(value) in text
            else:   # overflowed to infinity: null, as orjson writes it
                assert parsed["scores"][name][key] is None


@settings(max_examples=60, deadline=None)
@given(weights=st.tuples(*[st.floats(1e-12, 1e6)] * 4), successes=st.integers(0, 3),
       attempts=st.sampled_from([0, 9, 20_000, 10**6, 10**9]), cost=st.sampled_from([None, "0.5", "40000", "1000000000"]))
def test_json_floats_are_written_as_orjson_writes_them(weights, successes, attempts, cost):
    # positionally from 1e-5 on, exponents without a leading zero ("1e-7"), where Python's repr
    # goes to exponents below 1e-4 and pads them ("1.5e-05", "1e-07"): a success rate of 0 in
    # 20,000 attempts, a cost ceiling of 40,000, or a small weight all score below 1e-4
    from a3fast.schema import parse_requirements, task_kind

    scores = []
    for engine in ("native", "pure"):
        fleet = fleet_of(engine, [investigator("a", cost, True), investigator("b", "0.1")], batch=True,
                         weights=weights)
        fleet.record_outcomes("a", task_kind(parse_requirements(TASK)), successes, max(attempts, successes))
        p = fleet.place(TASK, remember_session=False)
        assert p.scheduling_json() == orjson.dumps(p.scheduling)
        scores.append(p.scheduling["scores"])
    assert scores[0] == scores[1]


def test_the_type_stub_lists_what_the_extension_defines():
    import ast
    from pathlib import Path

    stub = ast.parse(Path(_core.__file__).with_name("_core.pyi").read_text())
    classes = {node.name: node for node in stub.body if isinstance(node, ast.ClassDef)}
    assert set(classes) == {"Index", "Explanation", "Scores", "Wave"}
    for name, node in classes.items():
        stubbed = {item.name for item in node.body if isinstance(item, ast.FunctionDef)} - {"__init__"}
        assert stubbed == public(getattr(_core, name)), name


def test_put_flat_builds_rows_row_by_row_exactly_as_agent_by_agent():
    """put_flat sorts each block of agents' memberships by row and gives each row its members
    together; the index it builds — members, dense or sparse form (so its bytes), live set, costs —
    is the one put_many builds agent by agent, across more than one block of a million memberships,
    with rows that turn dense, rows that stay sparse, an agent listing a row twice, and agents with
    no rows."""
    import numpy as np

    n, n_rows = 45_000, 3_000
    rng = np.random.default_rng(7)
    agent_rows = []
    for j in range(n):
        if j % 997 == 0:
            agent_rows.append([])
            continue
        rows = [0, 1 + j % 7] + rng.choice(np.arange(8, n_rows), size=22, replace=False).tolist()
        if j % 101 == 0:
            rows.append(rows[3])            # listed twice: one membership
        agent_rows.append(rows)
    assert sum(map(len, agent_rows)) > (1 << 20)    # more than one block
    names = [f"agent-{j}" for j in range(n)]
    costs = [float(j % 13) for j in range(n)]
    flat, one_by_one = _core.Index(), _core.Index()
    for index in (flat, one_by_one):
        for _ in range(n_rows):
            index.add_row()
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in agent_rows])
    flat.put_flat(names, np.array([r for rows in agent_rows for r in rows], dtype=np.int32), offsets,
                  np.array(costs))
    one_by_one.put_many(list(range(n)), names, agent_rows, costs)
    assert flat.export_rows() == one_by_one.export_rows()
    assert flat.nbytes() == one_by_one.nbytes()
    assert (flat.export_live(), flat.export_costs()) == (one_by_one.export_live(), one_by_one.export_costs())
    members = flat.row_ids(0)
    assert len(members) == n - len(range(0, n, 997)) and len(flat.row_ids(n_rows - 1)) < n // 128
