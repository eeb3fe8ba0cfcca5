"""A batch of placements written at once (`TraceWriter.write_many`, and under it
`Encoder.encode_placements_lines` with the engine's `Index.write_placements_lines_of`): the bytes,
seqs and `placement.seq` of `write` one at a time, in both forms, on both engines, whatever mix of
usual and unusual placements the batch holds; every argument checked before anything is written,
and a batch that cannot be written leaves the writer as it was."""
from __future__ import annotations

import io

import orjson
import pytest

import a3fast
from a3fast.engines import NATIVE_AVAILABLE
from a3fast.fleet import Fleet
from a3fast.fleet.placement import Route
from a3fast.record.compact import Encoder
from a3fast.schema import parse_requirements
from a3fast.workload import generate_fleet, generate_tasks

AGENTS = generate_fleet(120, seed=8)
TASKS = generate_tasks(AGENTS, 40, seed=8)


def _one_at_a_time(placements, tasks, form: str, **writer):
    out = io.BytesIO()
    trace = a3fast.TraceWriter(out, form=form, **writer)
    seqs = [trace.write(p, task) for p, task in zip(placements, tasks)]
    return out.getvalue(), seqs, [p.seq for p in placements], trace.next_seq


def _at_once(placements, tasks, form: str, **writer):
    out = io.BytesIO()
    trace = a3fast.TraceWriter(out, form=form, **writer)
    seqs = trace.write_many(placements, tasks)
    return out.getvalue(), seqs, [p.seq for p in placements], trace.next_seq


def _mixed(engine: str) -> tuple[list, list]:
    """Usual placements with, here and there, each unusual kind: a route, a custom scorer's, a
    resumption, a rejection with a shortened reason, a session left unheld, task members, a
    placement over some agents, one on a fleet that changed, and one of another fleet."""
    fleet = Fleet(engine=engine)
    fleet.extend(AGENTS)
    scored = Fleet(engine=engine, scorer=lambda task, agents: [{"total": 1.0 / (i + 1)} for i, _ in enumerate(agents)])
    scored.extend(AGENTS[:40])
    prepared = [parse_requirements(t) for t in TASKS]
    placements = fleet.place_many(prepared[:12], remember_session=False)
    tasks: list = [None] * len(placements)
    bound = next(p for p in placements if p.bound)
    extra = [
        (fleet.place(TASKS[12], route=Route("r", {"clearances": ["org.internal"]})), None),
        (scored.place(TASKS[13]), None),
        (fleet.resume(bound), None),
        (fleet.place(TASKS[14], reason_limit=1), {"goal": "a reason cut short"}),
        (fleet.place(TASKS[15], session="s-1", remember_session=False), {"inputs": [1.5, "x"]}),
        (fleet.place(TASKS[16], candidates=fleet.names()[::3]), None),
    ]
    fleet.remove(fleet.names()[0])
    extra += [(fleet.place(t), None) for t in prepared[17:23]]
    extra += [(p, {"attempt": k}) for k, p in enumerate(fleet.place_many(prepared[23:30]))]
    for p, task in extra:
        placements.append(p)
        tasks.append(task)
    return placements, tasks


@pytest.mark.parametrize("form", ["spec", "compact"])
def test_a_batch_is_written_as_one_at_a_time_would_write_it(engine, form):
    placements, tasks = _mixed(engine)
    assert _at_once(placements, tasks, form) == _one_at_a_time(placements, tasks, form)


@pytest.mark.parametrize("start", [1, -5, 2**63 - 7, 2**64 - 60])
def test_a_batch_numbered_across_the_engines_64_bits_is_written_as_one_at_a_time(engine, start):
    # the engine's writer counts in a signed 64-bit integer: the placements from there on go
    # Python's way within the same batch, the same bytes
    placements, tasks = _mixed(engine)
    placements, tasks = placements[:18], tasks[:18]
    batch = _at_once(placements, tasks, "compact", start_seq=start)
    assert batch == _one_at_a_time(placements, tasks, "compact", start_seq=start)
    assert batch[1][0][0] == start


@pytest.mark.skipif(not NATIVE_AVAILABLE, reason="the a3fast._core extension is not built")
def test_both_engines_write_a_batch_byte_for_byte():
    native, pure = _mixed("native"), _mixed("pure")
    for placements, _ in (native, pure):    # the same timings, which the clock gives each apart
        for k, p in enumerate(placements):
            p.gather_ns, p.select_ns, p.decided_at_ns = 1_000 + k, 2_000_000 + k, 1_700_000_000_123_456_789 + k
    assert _at_once(*native, "compact") == _at_once(*pure, "compact")


def _record_count(p) -> int:
    """How many records a placement that is not a resumption writes."""
    return 3 if p.bound else 2


def test_the_engine_writes_a_run_of_usual_placements_and_stops_at_the_first_other(engine):
    fleet = Fleet(engine=engine)
    fleet.extend(AGENTS)
    placements = fleet.place_many([parse_requirements(t) for t in TASKS[:10]], remember_session=False)
    placements[6] = fleet.place(TASKS[6], route=Route("r", {"clearances": ["org.internal"]}))
    encoder, reference = Encoder(), Encoder()
    lines, count = encoder.encode_placement_lines(1, placements[0])      # the fleet's snapshot
    assert reference.encode_placement_lines(1, placements[0]) == (lines, count)
    seq = 1 + count
    index = placements[0].index
    batch, counts = index.write_placements_lines_of(seq, placements, None, 1, encoder._membership,
                                                    encoder._snapshot_seq, encoder._line_caches)
    assert len(counts) == 5        # placements 1 to 5; the routed one is left to the encoder
    expected = []
    for p in placements[1:6]:
        written, count = reference.encode_placement_lines(seq, p)
        expected.append(written)
        assert counts[len(expected) - 1] == count
        seq += count
    assert batch == b"".join(expected)
    # the lines written before a run go ahead of it in its buffer, as they are
    head = b'{"seq":0,"kind":"note","content":{}}\n'
    again = Encoder()
    again.encode_placement_lines(1, placements[0])
    assert index.write_placements_lines_of(1 + _record_count(placements[0]), placements, None, 1, again._membership,
                                           again._snapshot_seq, again._line_caches, head) == (head + batch, counts)
    assert index.write_placements_lines_of(seq, placements, None, 6, encoder._membership, encoder._snapshot_seq,
                                           encoder._line_caches, head) == (head, [])
    with pytest.raises(TypeError):
        index.write_placements_lines_of(seq, placements, None, 6, encoder._membership, encoder._snapshot_seq,
                                        encoder._line_caches, None)
    assert index.write_placements_lines_of(seq, placements, None, 6, encoder._membership, encoder._snapshot_seq,
                                           encoder._line_caches) == (b"", [])
    assert index.write_placements_lines_of(seq, placements, None, 10, encoder._membership, encoder._snapshot_seq,
                                           encoder._line_caches) == (b"", [])
    assert index.write_placements_lines_of(seq, placements, None, 1, None, encoder._snapshot_seq,
                                           encoder._line_caches) == (b"", [])
    with pytest.raises(ValueError, match="tasks: expected None or a list beside the placements"):
        index.write_placements_lines_of(seq, placements, [None], 1, encoder._membership, encoder._snapshot_seq,
                                        encoder._line_caches)
    with pytest.raises(ValueError, match="start: expected a position in the placements, found -1"):
        index.write_placements_lines_of(seq, placements, None, -1, encoder._membership, encoder._snapshot_seq,
                                        encoder._line_caches)
    with pytest.raises(ValueError, match="line caches are 8, found 1"):
        index.write_placements_lines_of(seq, placements, None, 1, encoder._membership, encoder._snapshot_seq, ({},))


@pytest.mark.parametrize("form", ["spec", "compact"])
def test_every_placement_and_task_is_checked_before_anything_is_written(engine, form):
    fleet = Fleet(engine=engine)
    fleet.extend(AGENTS)
    placements = fleet.place_many(TASKS[:4])
    out = io.BytesIO()
    trace = a3fast.TraceWriter(out, form=form)
    with pytest.raises(TypeError, match=r"placements\[2\]: expected a Placement, found"):
        trace.write_many(placements[:2] + ["not one"] + placements[3:])
    with pytest.raises(ValueError, match=r"tasks\[3\]: .*expected a finite number, found NaN"):
        trace.write_many(placements, [None, {}, None, {"goal": float("nan")}])
    with pytest.raises(TypeError, match=r"tasks\[1\]: expected a JSON object of members"):
        trace.write_many(placements, [None, ["a", "list"], None, None])
    with pytest.raises(ValueError, match="tasks: 3 for 4 placements"):
        trace.write_many(placements, [None] * 3)
    assert out.getvalue() == b"" and trace.next_seq == 1
    assert trace.write_many([]) == [] and out.getvalue() == b""
    assert trace.write_many(iter(placements)) == _one_at_a_time(placements, [None] * 4, form)[1]
    assert a3fast.verify(out.getvalue()) == []


@pytest.mark.parametrize("form", ["spec", "compact"])
def test_a_batch_numbered_past_2_to_the_64_writes_nothing_and_the_writer_goes_on(engine, form):
    fleet = Fleet(engine=engine)
    fleet.extend(AGENTS)
    bound = [p for p in fleet.place_many(TASKS[:10]) if p.bound][:2]
    out = io.BytesIO()
    trace = a3fast.TraceWriter(out, form=form, start_seq=2**64 - 3)
    with pytest.raises(ValueError, match="numbered to 2\\^64-1 at most; this write would number one 18446744073709551618"):
        trace.write_many(bound)
    assert out.getvalue() == b"" and trace.next_seq == 2**64 - 3 and all(p.seq is None for p in bound)
    # the compact name table the failed batch would have carried goes with the next one
    assert trace.write_many(bound[:1]) == [[2**64 - 3, 2**64 - 2, 2**64 - 1]]
    assert a3fast.verify(out.getvalue()) == []
    assert [orjson.loads(line)["seq"] for line in out.getvalue().splitlines()] == [2**64 - 3, 2**64 - 2, 2**64 - 1]


def test_lists_a_placements_own_code_shortens_while_gathered_end_the_run(engine):
    # a subclass's property runs the caller's code in the middle of the engine's gathering: a list
    # it empties ends the run there (the engine holds what it gathered), never a read past its end
    from a3fast.fleet.placement import Placement

    fleet = Fleet(engine=engine)
    fleet.extend(AGENTS)
    usual = fleet.place_many([parse_requirements(t) for t in TASKS[:8]], remember_session=False)
    placements: list = list(usual)
    tasks: list = [None] * len(placements)

    class Emptying(Placement):
        __slots__ = ()

        @property
        def decided_at_ns(self):
            placements.clear()
            tasks.clear()
            return Placement.__dict__["decided_at_ns"].__get__(self)

    sneaky = object.__new__(Emptying)
    for name in Placement.__slots__:       # each slot through its own descriptor, under the property
        slot = Placement.__dict__[name]
        try:
            slot.__set__(sneaky, slot.__get__(usual[3]))
        except AttributeError:              # a slot never set
            pass
    placements[3] = sneaky
    encoder, reference = Encoder(), Encoder()
    seq = 1 + encoder.encode_placement_lines(1, usual[0])[1]
    reference.encode_placement_lines(1, usual[0])
    lines, counts = usual[0].index.write_placements_lines_of(seq, placements, tasks, 1, encoder._membership,
                                                             encoder._snapshot_seq, encoder._line_caches)
    assert placements == [] and len(counts) == 3      # placements 1, 2 and the one that emptied the list
    expected = []
    for p in (usual[1], usual[2], sneaky):
        written, count = reference.encode_placement_lines(seq, p)
        expected.append(written)
        seq += count
    assert lines == b"".join(expected)


@pytest.mark.parametrize("form", ["spec", "compact"])
def test_an_empty_batch_to_a_file_that_failed_is_refused_as_any_write(engine, form):
    class FailsOnce(io.BytesIO):
        def write(self, data):
            raise OSError(28, "No space left on device")

    fleet = Fleet(engine=engine)
    fleet.extend(AGENTS)
    trace = a3fast.TraceWriter(FailsOnce(), form=form)
    with pytest.raises(OSError):
        trace.write_many(fleet.place_many(TASKS[:2]))
    with pytest.raises(ValueError, match="an earlier write to its file failed"):
        trace.write_many([])


@pytest.mark.parametrize("start", [2**63 - 13, 2**63 - 12, 2**63 - 11, 2**63 - 10])
def test_the_engine_numbers_a_run_up_to_the_last_seq_of_its_64_bits(engine, start):
    # a run goes on while a placement's last line is numbered 2^63-1 at most, as one at a time does
    fleet = Fleet(engine=engine)
    fleet.extend(AGENTS)
    placements = fleet.place_many([parse_requirements(t) for t in TASKS[:12]], remember_session=False)
    encoder = Encoder()
    seq = start + encoder.encode_placement_lines(start, placements[0])[1]
    lines, counts = placements[0].index.write_placements_lines_of(
        seq, placements, None, 1, encoder._membership, encoder._snapshot_seq, encoder._line_caches)
    last = seq + sum(counts) - 1
    assert last <= 2**63 - 1 and counts
    # the run stopped only where the next placement's lines would pass 2^63-1
    following = 1 + len(counts)
    assert following == len(placements) or last + 3 > 2**63 - 1



@pytest.mark.parametrize("seq", [2**63 - 2, 2**63 - 1])
def test_one_placements_lines_are_never_numbered_past_the_engines_64_bits(engine, seq):
    # called directly, the single writers took any seq: the native one numbered the lines after
    # 2^63-1 as -2^63 (a signed overflow), where the pure one wrote 2^63; both now leave such a seq
    # to the caller's way (`_native_seq` sends the encoder's there already)
    fleet = Fleet(engine=engine)
    fleet.extend(AGENTS)
    placements = fleet.place_many([parse_requirements(t) for t in TASKS[:6]], remember_session=False)
    bound = next(p for p in placements[1:] if p.bound)
    encoder = Encoder()
    encoder.encode_placement_lines(1, placements[0])
    index = bound.index
    assert index.write_placement_lines_of(seq, bound, None, encoder._membership, encoder._snapshot_seq,
                                          encoder._line_caches) is None
    arguments = list(encoder._line_arguments(10, bound, None, False))
    assert index.write_placement_lines(*arguments)      # at seq 10
    arguments[0] = seq
    with pytest.raises(OverflowError, match="numbered past 2\\^63-1"):
        index.write_placement_lines(*arguments)
    arguments[0] = 2**63 - 3
    assert b'"seq":9223372036854775807' in index.write_placement_lines(*arguments)


def test_a_placement_that_ends_a_run_is_read_once_by_the_engine(engine):
    # the engine ended its run at it, so the encoder writes it its own way without asking again:
    # a caller's placement class then sees its fields read as often as one at a time reads them
    from a3fast.fleet.placement import Placement

    reads = []

    class Counted(Placement):
        __slots__ = ()

        @property
        def route(self):
            reads.append(1)
            return Placement.__dict__["route"].__get__(self)

    fleet = Fleet(engine=engine)
    fleet.extend(AGENTS)
    placements = fleet.place_many([parse_requirements(t) for t in TASKS[:6]], remember_session=False)
    routed = fleet.place(TASKS[6], route=Route("r", {"clearances": ["org.internal"]}))
    counted = object.__new__(Counted)
    for name in Placement.__slots__:
        slot = Placement.__dict__[name]
        try:
            slot.__set__(counted, slot.__get__(routed))
        except AttributeError:
            pass
    batch = placements + [counted] + placements[:2]
    one = Encoder()
    seq, expected = 1, []
    for p in batch:
        lines, count = one.encode_placement_lines(seq, p)
        expected.append(lines)
        seq += count
    one_at_a_time = len(reads)
    reads.clear()
    assert Encoder().encode_placements_lines(1, batch)[0] == b"".join(expected)
    assert len(reads) == one_at_a_time
