"""A usual placement's compact trace lines with their arguments gathered by the engine
(`Index.write_placement_lines_of`, taken by `Encoder.encode_placement_lines`): the same bytes as
the arguments gathered in Python (`Encoder._line_arguments`, then `Index.write_placement_lines`),
placement after placement of one trace, whatever mix of usual and unusual placements, timings and
fleet changes it holds, one at a time or as one batch (`Index.write_placements_lines_of`); the same
bytes on both engines; and each unusual case left to Python."""
from __future__ import annotations

from functools import cache
from itertools import groupby
from typing import Any

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from a3fast.engines import NATIVE_AVAILABLE
from a3fast.fleet import Fleet
from a3fast.fleet.placement import Route
from a3fast.record.compact import KEY, Encoder, _lines
from a3fast.schema import parse_requirements
from a3fast.workload import generate_fleet, generate_tasks

from factories import declaration

AGENTS = generate_fleet(40, 31)
TASKS = generate_tasks(AGENTS, 24, 31)
ROUTE = Route("route-1", {"clearances": ["org.internal"]})
#: 2000-02-29T23:59:59.999999Z, 2100-03-01T00:00:00Z, the last ns the engine writes (2116), one past it
MOMENTS = [951_868_799_999_999_999, 4_107_542_400_000_000_000, 2**62 - 1, 2**62, 0, 999]
#: 1e-4 ms and just under, the last ns the engine writes and one past it, whole and fractional
#: milliseconds, 1e16 ms, a ns, zero, negative, the ends of int64
PHASES = [100, 99, 10**15 - 1, 10**15, 1_000_000, 1_000_001, 999_999, 10**14 + 10**6, 10**22, 1, 0, -5_000,
          -100, -99, 123_456_789, -2**63, 2**63 - 1]


def _reference(encoder: Encoder, seq: int, p, task, restricted: bool) -> tuple[bytes, int]:
    """The lines as the encoder wrote them before the engine gathered anything: every argument
    gathered in Python."""
    args = encoder._line_arguments(seq, p, task, restricted)
    if args is None:
        records = encoder._records(seq, p, task, restricted)
        return _lines(records, seq), len(records)
    return p.index.write_placement_lines(*args), 3 if args[5] is not None else 2


def _scorer(task, agents):
    return [{"total": 1.0 / (i + 2), "rank": i} for i, _ in enumerate(agents)]


def _now_and_then(unusual: st.SearchStrategy, usual: Any = None) -> st.SearchStrategy:
    """`usual` seven times in eight, else a value of `unusual`: most steps are usual placements (what
    the engine gathers), and each unusual part turns up alone often enough."""
    return st.integers(0, 7).flatmap(lambda k: unusual if k == 7 else st.just(usual))


_odd_phase = st.one_of(st.sampled_from(PHASES), st.integers(-2**63, 2**63))
steps = st.lists(st.fixed_dictionaries({
    "task": st.integers(0, len(TASKS) - 1),
    "prepared": st.booleans(),
    "fleet": _now_and_then(st.just(1), 0),            # 1: a fleet with a custom scorer
    "session": _now_and_then(st.sampled_from(["own", "other"])),
    "unheld": _now_and_then(st.just(True), False),
    "route": _now_and_then(st.just(True), False),
    "reason_limit": _now_and_then(st.just(1)),
    "members": _now_and_then(st.sampled_from([{}, {"goal": 'say "hi"\n'}, {"requirements": 1, "inputs": [1.5]}])),
    "restricted": _now_and_then(st.just(True), False),
    # a phase as measured (≥ 1e-4 ms), else unmeasured, a boundary or any integer
    "gather_ns": st.integers(100, 10**10) | _now_and_then(st.none() | _odd_phase, 100),
    "select_ns": st.integers(100, 10**10) | _now_and_then(_odd_phase, 100),
    # a moment the engine writes (1970 to 2116), else a boundary, one past 2116, or before 1970
    "decided_at_ns": st.integers(0, 2**62 - 1) | _now_and_then(
        st.sampled_from(MOMENTS) | st.integers(0, 2**63) | st.integers(-10**18, 0), 1_700_000_000_123_456_789),
    "change": _now_and_then(st.sampled_from(["add", "remove"])),
}), min_size=1, max_size=16)


def _placements(engine: str, plan: list[dict[str, Any]]) -> list[tuple[Any, Any, bool]]:
    """(placement, task members, restricted) of each step, timings as the step sets them."""
    fleets = [Fleet(engine=engine), Fleet(engine=engine, scorer=_scorer)]
    for fleet in fleets:
        fleet.extend(AGENTS)
    prepared = [parse_requirements(t) for t in TASKS]
    out = []
    for k, step in enumerate(plan):
        fleet = fleets[step["fleet"]]
        if step["change"] == "add":
            fleet.add(declaration(f"joined-{k}", capabilities=[("a.b", 1)]))
        elif step["change"] == "remove" and len(fleet.names()) > 1:
            fleet.remove(fleet.names()[k % len(fleet.names())])
        doc = TASKS[step["task"]]
        task = prepared[step["task"]] if step["prepared"] else doc
        session = {"own": doc.get("session"), "other": f"s-{k}"}.get(step["session"] or "", None)
        candidates = fleet.names()[::2] if step["restricted"] else None
        p = fleet.place(task, session=session, route=ROUTE if step["route"] else None,
                        reason_limit=step["reason_limit"], candidates=candidates, remember_session=False)
        if p.bound and session is not None and step["unheld"]:
            p.session_held = False
        p.gather_ns, p.select_ns, p.decided_at_ns = step["gather_ns"], step["select_ns"], step["decided_at_ns"]
        out.append((p, step["members"], step["restricted"]))
    return out


def _plainly_referring(lines: bytes, snapshot: int) -> bool:
    """Whether every record of `lines` that has a compact member of its own refers by seq to
    fleet snapshot `snapshot` (and at least one has one)."""
    members = [r["content"][KEY] for r in map(orjson.loads, lines.splitlines())
               if r["kind"] in ("task.bound", "task.rejected")]
    return bool(members) and all(type(m["fleet"]) is int and m["fleet"] == snapshot for m in members)


def _written(placements) -> list[tuple[bytes, int]]:
    """Each placement's lines through `encode_placement_lines`, checked against the reference, and
    its plain reference, when it gives one, against the lines."""
    encoder, reference, seq, out = Encoder(), Encoder(), 1, []
    for p, task, restricted in placements:
        written = encoder.encode_placement_lines(seq, p, task, restricted=restricted)
        assert written == _reference(reference, seq, p, task, restricted), seq
        if encoder.plain_reference is not None:
            assert _plainly_referring(written[0], encoder.plain_reference), seq
        out.append(written)
        seq += written[1]
    # the same placements in batches, one a stretch of steps alike in `restricted` (a batch's own
    # argument), through one encoder: the engine's runs of usual ones, the encoder's own way for the
    # rest, the same bytes
    batches, seq, parts, counts = Encoder(), 1, [], []
    for restricted, stretch in groupby(placements, key=lambda step: step[2]):
        steps = list(stretch)
        lines, each = batches.encode_placements_lines(seq, [p for p, _, _ in steps], [t for _, t, _ in steps],
                                                      restricted=restricted)
        parts.append(lines)
        counts += each
        seq += sum(each)
    assert (b"".join(parts), counts) == (b"".join(lines for lines, _ in out), [count for _, count in out])
    return out


@given(plan=steps)
def test_the_engines_gathered_lines_are_the_pythons_byte_for_byte(engine, plan):
    _written(_placements(engine, plan))


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the a3fast._core extension is not built")
@given(plan=steps)
def test_both_engines_gather_the_same_lines(plan):
    assert _written(_placements("native", plan)) == _written(_placements("pure", plan))


@cache
def _two_placements(engine: str):
    fleet = Fleet(engine=engine)
    fleet.extend(AGENTS)
    usual = [fleet.place(t, remember_session=False) for t in TASKS]
    bound, rejected = [p for p in usual if p.bound], [p for p in usual if not p.bound]
    return [bound[0], rejected[0], bound[1]]


@settings(max_examples=3 * settings.default.max_examples)   # cheap examples: three times the profile's
@given(gather_ns=st.sampled_from(PHASES) | st.integers(-10**16, 10**16),
       select_ns=st.sampled_from(PHASES) | st.integers(0, 10**16),
       decided_at_ns=st.sampled_from(MOMENTS) | st.integers(0, 2**62 - 1))
def test_the_timings_are_orjsons_text_for_any_phase_and_moment(engine, gather_ns, select_ns, decided_at_ns):
    placements = _two_placements(engine)
    encoder, reference, seq = Encoder(), Encoder(), 1
    for p in placements:    # the first takes the snapshot; a rejection and a bound one follow
        p.gather_ns, p.select_ns, p.decided_at_ns = gather_ns, select_ns, decided_at_ns
        written = encoder.encode_placement_lines(seq, p)
        assert written == _reference(reference, seq, p, None, False)
        seq += written[1]


def _usual(engine: str, n: int = 30):
    fleet = Fleet(engine=engine)
    fleet.extend(AGENTS)
    return fleet, [fleet.place(t, remember_session=False) for t in generate_tasks(AGENTS, n, 37)]


def _gathered(encoder: Encoder, seq: int, p, task=None):
    return p.index.write_placement_lines_of(seq, p, task, encoder._membership, encoder._snapshot_seq,
                                            encoder._line_caches)


def test_the_usual_placements_are_gathered_by_the_engine(engine):
    fleet, placements = _usual(engine)
    assert any(p.bound for p in placements) and not all(p.bound for p in placements)
    encoder, reference = Encoder(), Encoder()
    encoder.encode_placement_lines(1, placements[0])
    _reference(reference, 1, placements[0], None, False)
    seq = 4 if placements[0].bound else 3
    for p in placements[1:]:
        gathered = _gathered(encoder, seq, p)
        assert gathered is not None and gathered == _reference(reference, seq, p, None, False)
        seq += gathered[1]
    snapshot = encoder._snapshot_seq
    lines, _ = encoder.encode_placement_lines(seq, placements[1])
    assert encoder.plain_reference == snapshot and _plainly_referring(lines, snapshot)


def test_a_placement_that_left_its_session_unheld_is_gathered_and_says_so(engine):
    # `remember_session=False` with the task's own session: the usual case still, its tail starting
    # with "a3fast.session_held": false, as the encoder's own writer puts it
    fleet, placements = _usual(engine, 4)
    encoder, reference = Encoder(), Encoder()
    encoder.encode_placement_lines(1, placements[0])
    _reference(reference, 1, placements[0], None, False)
    seq = 4 if placements[0].bound else 3
    with_session = [t for t in generate_tasks(AGENTS, 60, 41) if t.get("session")]
    unheld = [fleet.place(t, remember_session=False) for t in with_session]
    assert any(p.bound for p in unheld) and not all(p.bound for p in unheld)
    for p in unheld:
        assert p.session_held is False
        gathered = _gathered(encoder, seq, p)
        assert gathered is not None and gathered == _reference(reference, seq, p, None, False)
        assert b'"a3fast.session_held":false,"timings":' in gathered[0]
        seq += gathered[1]


def test_lines_written_otherwise_give_no_plain_reference(engine):
    fleet, placements = _usual(engine, 4)
    encoder = Encoder()
    lines, _ = encoder.encode_placement_lines(1, placements[0])     # the first: it writes the snapshot
    assert encoder.plain_reference is None and b'"fleet":{"names"' in lines
    encoder.encode_placement_lines(5, placements[1])
    assert encoder.plain_reference is not None
    encoder.encode_placement_lines(9, fleet.place(TASKS[0], route=ROUTE, remember_session=False))
    assert encoder.plain_reference is None


def test_each_unusual_placement_is_left_to_the_encoder(engine):
    fleet, placements = _usual(engine, 4)
    encoder = Encoder()
    encoder.encode_placement_lines(1, placements[0])
    doc = TASKS[0]
    unusual = {
        "resumed": fleet.resume(next(p for p in placements if p.bound)),
        "route": fleet.place(doc, route=ROUTE, remember_session=False),
        "session member": fleet.place(doc, session="not-the-tasks", remember_session=False),
        "reason limit": fleet.place({"capabilities": [{"name": "no.such", "version": 1}]}, reason_limit=1,
                                    remember_session=False),
    }
    slow = fleet.place(doc, remember_session=False)
    slow.gather_ns = 99                               # 9.9e-05 ms: orjson's text is not repr's
    unusual["phase under 1e-4 ms"] = slow
    unmeasured = fleet.place(doc, remember_session=False)
    unmeasured.gather_ns = None
    unusual["unmeasured phase"] = unmeasured
    late = fleet.place(doc, remember_session=False)
    late.decided_at_ns = 2**62
    unusual["decided from 2116"] = late
    for what, p in unusual.items():
        assert _gathered(encoder, 10, p) is None, what
    usual = fleet.place(doc, remember_session=False)
    assert _gathered(encoder, 10, usual, ["not", "a", "dict"]) is None
    assert usual.index.write_placement_lines_of(10, usual, None, encoder._membership + 1, encoder._snapshot_seq,
                                                encoder._line_caches) is None
    assert usual.index.write_placement_lines_of(10, usual, None, encoder._membership, None,
                                                encoder._line_caches) is None
    with pytest.raises(ValueError, match="line caches are 8, found 2"):
        usual.index.write_placement_lines_of(10, usual, None, encoder._membership, encoder._snapshot_seq, ({}, set()))


def test_a_placement_of_another_class_is_read_by_its_names(engine):
    # the engine reads a Placement's slots by offset; an instance of a subclass (which may define
    # a field otherwise) is read by name, with the same lines for the same fields
    from a3fast.fleet.placement import Placement

    class Annotated(Placement):
        __slots__ = ("note",)

    fleet, placements = _usual(engine, 8)
    encoder, other = Encoder(), Encoder()
    encoder.encode_placement_lines(1, placements[0])
    other.encode_placement_lines(1, placements[0])
    seq = 4 if placements[0].bound else 3
    for p in placements[1:]:
        copy = object.__new__(Annotated)
        for name in Placement.__slots__:
            if hasattr(p, name):
                setattr(copy, name, getattr(p, name))
        gathered = _gathered(encoder, seq, p)
        assert gathered is not None and _gathered(other, seq, copy) == gathered
        seq += gathered[1]


def test_a_requirements_is_noted_when_first_written_and_kept_from_its_second_placement(engine):
    # as `Encoder._requirements_json` keeps it: a task parsed for one placement is not held
    fleet, placements = _usual(engine, 1)
    encoder = Encoder()
    encoder.encode_placement_lines(1, placements[0])  # the first snapshot: the encoder's own path
    prepared = parse_requirements(TASKS[1])
    p = fleet.place(prepared, remember_session=False)
    written = _gathered(encoder, 5, p)
    assert written is not None
    assert id(prepared) in encoder._requirements_seen and id(prepared) not in encoder._requirements_cache
    assert _gathered(encoder, 5, p) == written        # seen before: now kept
    assert encoder._requirements_cache[id(prepared)][0] is prepared
    assert _gathered(encoder, 5, p) == written        # kept: read from the cache


@pytest.mark.parametrize("gathered_by", ["engine", "encoder"])
def test_a_task_placed_once_is_neither_kept_nor_held_past_the_window(engine, gathered_by):
    # A freed object's id goes at once to the next one made, so a loop that parses, places and
    # drops a task met the same few ids again and again: noted by id alone, half the one-off
    # tasks of such a loop were taken for prepared ones placed again and kept.
    fleet, placements = _usual(engine, 1)
    encoder = Encoder()
    encoder.encode_placement_lines(1, placements[0])
    tasks = generate_tasks(AGENTS, 300, 41)
    seq = 5
    for doc in tasks:                                 # from a dict: parsed by the placement itself
        p = fleet.place(doc, remember_session=False)
        seq += encoder.encode_placement_lines(seq, p, restricted=gathered_by == "encoder")[1]
        del p
    assert not encoder._requirements_cache and not encoder._requirements_seen
    for doc in tasks:                                 # prepared, each placed once, then dropped
        p = fleet.place(parse_requirements(doc), remember_session=False)
        seq += encoder.encode_placement_lines(seq, p, restricted=gathered_by == "encoder")[1]
        del p
    assert not encoder._requirements_cache
    assert 0 < len(encoder._requirements_seen) <= 256    # the window, each entry its own object
    assert all(id(r) == key for key, r in encoder._requirements_seen.items())


@pytest.mark.parametrize("snapshot_seq", [1, 9, 10, 99, 100, 123_456, 10**18, 2**63 - 1])
def test_the_fleet_snapshots_seq_is_written_in_its_own_digits(engine, snapshot_seq):
    # the engine writes the seq's digits itself: every width, up to int64's last
    fleet, placements = _usual(engine, 6)
    encoder = Encoder()
    encoder.encode_placement_lines(1, placements[0])
    for p in placements[1:]:
        gathered = p.index.write_placement_lines_of(10, p, None, encoder._membership, snapshot_seq,
                                                    encoder._line_caches)
        fleet_member = [orjson.loads(line) for line in gathered[0].splitlines()][-1]["content"]["a3fast.compact"]["fleet"]
        assert fleet_member == snapshot_seq
        assert b'"fleet":%d,' % snapshot_seq in gathered[0]
    # beyond int64, or below zero, the caller writes the lines itself
    for odd in (2**63, -1):
        assert placements[1].index.write_placement_lines_of(10, placements[1], None, encoder._membership, odd,
                                                            encoder._line_caches) is None


def test_a_prepared_task_placed_again_under_a_route_is_kept(engine):
    # the routed Requirements is new each time; the submitted one is the caller's, placed again
    fleet, placements = _usual(engine, 1)
    encoder = Encoder()
    encoder.encode_placement_lines(1, placements[0])
    prepared = parse_requirements(TASKS[1])
    seq = 5
    for _ in range(2):
        p = fleet.place(prepared, route=ROUTE, remember_session=False)
        assert p.submitted is prepared and p.requirements is not prepared
        seq += encoder.encode_placement_lines(seq, p)[1]
    assert encoder._requirements_cache[id(prepared)][0] is prepared
