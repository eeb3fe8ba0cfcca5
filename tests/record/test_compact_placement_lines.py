"""A placement's compact trace lines written by the engine in one call (`Index.write_placement_lines`,
through `Encoder.encode_placement`, `encode_placement_lines` and `encode_placements_lines`): the same
bytes, record for record, as the encoder's writer that joins the compact member in Python (kept for
an index without the line writer), the same lines as `trace.record_lines` frames, and the spec
records once decoded; on both engines."""
from __future__ import annotations

import orjson
import pytest

from a3fast.engines import NATIVE_AVAILABLE
from a3fast.fleet import Fleet
from a3fast.fleet.placement import Route
from a3fast.record.compact import KEY, CompactError, Encoder, decode_trace
from a3fast.record.write import placement_records
from a3fast.schema import parse_requirements
from a3fast.trace import record_lines
from a3fast.workload import generate_fleet, generate_tasks

from factories import declaration, fleet_of, requirements

#: names JSON must escape (a quote, a backslash) and names beyond ASCII
AWKWARD_NAMES = ['quote"d', "back\\slash", "ünïcode-名前", "plain-1", "plain-2"]


def _python_joined(encoder: Encoder, seq: int, p, task=None, restricted: bool = False):
    """The records as the encoder writes them for an index without the engine's line writer."""
    return encoder._records(seq, p, task, restricted)


def _spec_lines(placements_and_tasks, seq: int = 1) -> list[dict]:
    out = []
    for p, task in placements_and_tasks:
        records = list(placement_records(p, task))
        out += [orjson.loads(line) for line in record_lines(records, seq).splitlines()]
        seq += len(records)
    return out


def _check(placements, tasks=None, restricted: bool = False) -> None:
    """Every way of writing the placements' compact lines gives the same bytes, and they decode
    to the spec records."""
    tasks = tasks or [None] * len(placements)
    fast, joined, lines_encoder = Encoder(), Encoder(), Encoder()
    seq, expected_lines, counts = 1, [], []
    for p, task in zip(placements, tasks):
        records = fast.encode_placement(seq, p, task, restricted=restricted)
        assert records == _python_joined(joined, seq, p, task, restricted), seq
        lines, count = lines_encoder.encode_placement_lines(seq, p, task, restricted=restricted)
        assert count == len(records)
        assert lines == record_lines(records, seq)
        expected_lines.append(lines)
        counts.append(count)
        seq += count
    batch, batch_counts = Encoder().encode_placements_lines(1, placements, tasks, restricted=restricted)
    assert batch == b"".join(expected_lines)
    assert batch_counts == counts
    decoded = list(decode_trace(orjson.loads(line) for line in batch.splitlines()))
    assert decoded == _spec_lines(zip(placements, tasks))


def test_the_standard_workloads_bound_and_rejected_placements_are_written_byte_for_byte(engine):
    declarations = generate_fleet(300, 3)
    fleet = fleet_of(engine, declarations, batch=True)
    placements = [fleet.place(parse_requirements(doc), remember_session=False)
                  for doc in generate_tasks(declarations, 150, 3)]
    assert any(p.bound for p in placements) and not all(p.bound for p in placements)
    _check(placements)


def test_a_placement_from_a_dict_and_a_prepared_requirements_placed_again(engine):
    declarations = generate_fleet(100, 5)
    fleet = fleet_of(engine, declarations, batch=True)
    docs = generate_tasks(declarations, 20, 5)
    prepared = [parse_requirements(doc) for doc in docs]
    placements = [fleet.place(doc, remember_session=False) for doc in docs]
    placements += [fleet.place(req, remember_session=False) for req in prepared * 3]
    _check(placements)


def test_a_reason_shortened_by_reason_limit_is_written_as_it_is(engine):
    declarations = generate_fleet(200, 7)
    fleet = fleet_of(engine, declarations, batch=True)
    placements = [fleet.place(doc, remember_session=False, reason_limit=2)
                  for doc in generate_tasks(declarations, 60, 7)]
    assert any(not p.bound for p in placements)
    _check(placements)


def test_names_that_json_escapes_in_snapshots_reasons_and_declarations(engine):
    fleet = fleet_of(engine, [declaration(name, capabilities=[("a.b", 1)], clearances=["data.pii"] if i % 2 else [])
                              for i, name in enumerate(AWKWARD_NAMES)])
    tasks = [{"goal": 'say "hi"\n\tback\\slash \u2028 ünï', "inputs": ["\x01"]}, None, {}, {"requirements": "kept first"}]
    placements = [fleet.place(requirements(capabilities=[("a.b", 1)], clearances=["data.pii"]), remember_session=False),
                  fleet.place(requirements(capabilities=[("a.b", 1)], clearances=["data.secret"]), remember_session=False),
                  fleet.place(requirements(exclude=['quote"d', "back\\slash"], agentRef="plain-1"),
                              session='sess"ion\\1', remember_session=False),
                  fleet.place(requirements(agentRef="ünïcode-名前", clearances=["data.pii"]), remember_session=False)]
    assert [p.bound for p in placements] == [True, False, True, False]
    _check(placements, tasks)


def test_a_route_a_session_and_an_unheld_session_are_in_the_tail(engine):
    declarations = generate_fleet(60, 11)
    fleet = fleet_of(engine, declarations, batch=True)
    route = Route('route "one"', {"clearances": ["org.internal"]})
    placements = []
    for i, doc in enumerate(generate_tasks(declarations, 30, 11)):
        p = fleet.place(doc, session=f"s-{i % 4}", route=route if i % 3 == 0 else None, remember_session=False)
        if p.bound and i % 2:
            p.session_held = False
        placements.append(p)
    assert any(p.route for p in placements) and any(p.session_held is False for p in placements)
    _check(placements)


def test_a_custom_scorers_columns_are_written_byte_for_byte(engine):
    def scorer(task, agents):
        return [{"total": 1.0 / (i + 3), "rank": i, "tiny": 5e-324} for i, _ in enumerate(agents)]

    declarations = generate_fleet(80, 13)
    fleet = fleet_of(engine, declarations, batch=True, scorer=scorer)
    placements = [fleet.place(doc, remember_session=False) for doc in generate_tasks(declarations, 40, 13)]
    assert any(p.bound and p.custom_scores for p in placements)
    _check(placements)


def test_custom_scores_without_a_compact_form_are_refused_and_leave_the_snapshot_as_it_was(engine):
    def scorer(task, agents):
        return [{"total": 1.0} if i % 2 else {"total": 1.0, "x": 2} for i, _ in enumerate(agents)]

    fleet = fleet_of(engine, [declaration(f"a{i}") for i in range(4)], scorer=scorer)
    p = fleet.place({}, remember_session=False)
    encoder = Encoder()
    with pytest.raises(CompactError, match="differing components"):
        encoder.encode_placement(1, p)
    assert encoder.current_snapshot() is None and encoder.current_live() is None


def test_a_compact_trace_writes_custom_scores_without_a_compact_form_in_spec_form(engine):
    # as `encode_trace` leaves such a record: the writer raised, so a scorer whose entries differ
    # could never be traced compact
    import io

    from a3fast import TraceWriter, verify

    def scorer(task, agents):
        return [{"total": 1.0} if i % 2 else {"total": 1.0, "x": 2} for i, _ in enumerate(agents)]

    fleet = fleet_of(engine, [declaration(f"a{i}") for i in range(4)])
    placements = [fleet.place({}, remember_session=False, scorer=scorer), fleet.place({}, remember_session=False),
                  fleet.place({}, remember_session=False, scorer=scorer)]
    out = io.BytesIO()
    writer = TraceWriter(out, form="compact")
    assert [writer.write(p) for p in placements] == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    lines = out.getvalue().splitlines()
    assert [KEY in line.decode() for line in lines[2::3]] == [False, True, False]
    assert verify(out.getvalue()) == []
    spec = io.BytesIO()
    plain = TraceWriter(spec)
    for p in placements:
        plain.write(p)
    compact = [orjson.loads(line) for line in lines]
    assert [orjson.dumps(r) for r in decode_trace(compact)] == [orjson.dumps(orjson.loads(line))
                                                                for line in spec.getvalue().splitlines()]


def test_the_current_snapshot_s_live_set_is_read_without_its_names(engine):
    declarations = generate_fleet(30, 23)
    fleet = fleet_of(engine, declarations)
    encoder, seq = Encoder(), 1
    for doc in generate_tasks(declarations, 6, 23):
        if seq > 6:
            fleet.remove(fleet.names()[0])          # the live set changes: a new snapshot
        seq += encoder.encode_placement_lines(seq, fleet.place(doc, remember_session=False))[1]
        current = encoder.current_snapshot()
        assert current is not None and encoder.current_live() == (current[0], current[2])


def test_placements_over_some_of_the_fleets_agents_carry_their_own_live_set(engine):
    declarations = generate_fleet(120, 17)
    fleet = fleet_of(engine, declarations, batch=True)
    names = fleet.names()
    placements = [fleet.place(doc, remember_session=False, candidates=names[i % 7::3] + ["not-an-agent"])
                  for i, doc in enumerate(generate_tasks(declarations, 30, 17))]
    _check(placements, restricted=True)


def test_a_resumed_placement_is_written_between_the_others(engine):
    declarations = generate_fleet(50, 19)
    fleet = fleet_of(engine, declarations, batch=True)
    first = [fleet.place(doc, remember_session=False) for doc in generate_tasks(declarations, 10, 19)]
    bound = next(p for p in first if p.bound)
    placements = first[:3] + [fleet.resume(bound, seq=1)] + first[3:] + [fleet.resume(bound)]
    _check(placements)


def test_an_empty_fleet_and_a_fleet_whose_agents_left(engine):
    fleet = fleet_of(engine)
    placements = [fleet.place({}, remember_session=False),
                  fleet.place(requirements(capabilities=[("a.b", 1)]), remember_session=False)]
    fleet.add(declaration("only", capabilities=[("a.b", 1)]))
    placements.append(fleet.place(requirements(capabilities=[("a.b", 1)]), remember_session=False))
    fleet.remove("only")
    placements.append(fleet.place({}, remember_session=False))
    assert [p.bound for p in placements] == [False, False, True, False]
    _check(placements)


def test_placements_on_two_fleets_in_one_batch(engine):
    a = fleet_of(engine, generate_fleet(40, 23), batch=True)
    b = fleet_of(engine, [declaration(name) for name in AWKWARD_NAMES])
    placements = [a.place({}, remember_session=False), b.place({}, remember_session=False),
                  b.place(requirements(agentRef="nobody"), remember_session=False), a.place({}, remember_session=False)]
    _check(placements)


def test_the_batch_needs_one_task_per_placement(engine):
    fleet = fleet_of(engine, [declaration("a")])
    p = fleet.place({}, remember_session=False)
    with pytest.raises(ValueError, match="2 tasks for 1 placements"):
        Encoder().encode_placements_lines(1, [p], [None, None])


def test_a_mark_taken_before_the_lines_rewinds_their_snapshot(engine):
    fleet = fleet_of(engine, [declaration(f"a{i}") for i in range(3)])
    encoder = Encoder()
    mark = encoder.mark()
    lines, count = encoder.encode_placement_lines(1, fleet.place({}, remember_session=False))
    assert b'"names":' in lines and count == 3
    encoder.rewind(mark)
    again, _ = encoder.encode_placement_lines(1, fleet.place({}, remember_session=False))
    assert b'"names":' in again


def test_a_rewind_past_a_placement_on_another_fleet_gives_back_the_first_fleets_names(engine):
    # lines of another fleet's placement not written after all (a full disk, say): the names the
    # trace goes on with are the first fleet's, through the next whole table and every record
    first = fleet_of(engine, [declaration(f"a{i}") for i in range(3)])
    other = fleet_of(engine, [declaration(f"b{i}") for i in range(5)])
    encoder, seq, written = Encoder(), 1, []

    def write(p):
        nonlocal seq
        lines, count = encoder.encode_placement_lines(seq, p)
        written.append((p, lines))
        seq += count

    write(first.place({}, remember_session=False))
    mark = encoder.mark()
    encoder.encode_placement_lines(seq, other.place({}, remember_session=False))
    encoder.rewind(mark)
    for i in range(70):          # past MAX_BASED_CHAIN: a whole table is written again
        first.add(declaration(f"x{i}"))
        write(first.place({}, remember_session=False))
    assert encoder.current_snapshot()[1][:3] == ["a0", "a1", "a2"]
    decoded = list(decode_trace(orjson.loads(line) for _, lines in written for line in lines.splitlines()))
    assert decoded == _spec_lines([(p, None) for p, _ in written])


def test_a_fleet_of_the_other_engine_in_the_same_trace():
    # an Encoder follows whichever index a placement names; the engines' bytes are the same
    other = Fleet(engine="pure")
    other.extend(generate_fleet(30, 29))
    placements = [other.place({}, remember_session=False)]
    if NATIVE_AVAILABLE:
        native = Fleet(engine="native")
        native.extend(generate_fleet(30, 29))
        placements += [native.place({}, remember_session=False), other.place({}, remember_session=False)]
    _check(placements)


class _Timed:
    """The members of a Placement that `tail_members` reads."""

    def __init__(self, gather_ns, select_ns, decided_at_ns, route=None, session=None):
        self.gather_ns, self.select_ns, self.decided_at_ns = gather_ns, select_ns, decided_at_ns
        self.route, self.session, self.session_held, self.agent = route, session, None, None
        self.requirements = parse_requirements({})


@pytest.mark.parametrize("gather_ns", [None, 0, 1, 50, 99, 100, 123_456, 10**20])
@pytest.mark.parametrize("decided_at_ns", [0, 999, 1_700_000_000_000_000_000, 1_700_000_000_999_999_999,
                                           1_700_000_001_000_000_000, 1_700_000_000_123_456_789])
def test_tail_json_is_orjsons_text_of_the_tail_members_across_seconds_and_float_forms(gather_ns, decided_at_ns):
    from a3fast.record.write import tail_json, tail_members

    for p in (_Timed(gather_ns, 7, decided_at_ns), _Timed(gather_ns, 3 * (gather_ns or 0) + 1, decided_at_ns),
              _Timed(gather_ns, 7, decided_at_ns, route='r"1'), _Timed(gather_ns, None, decided_at_ns, session="s")):
        assert tail_json(p) == orjson.dumps(tail_members(p))


def test_a_requirements_placed_once_is_not_kept_by_the_encoder_and_a_prepared_one_is(engine):
    fleet = Fleet(engine=engine)
    fleet.extend([declaration("a", capabilities=[("x.y", 1)])])
    encoder = Encoder()
    once = fleet.place(requirements(capabilities=[("x.y", 1)]), remember_session=False)
    lines_once, count = encoder.encode_placement_lines(1, once)
    kept = lambda: [entry[0] for entry in encoder._requirements_cache.values()]  # noqa: E731
    assert once.requirements not in kept()        # written once: the encoder holds nothing of it
    prepared = parse_requirements(requirements(capabilities=[("x.y", 1)]))
    first = fleet.place(prepared, remember_session=False)
    again = fleet.place(prepared, remember_session=False)
    seq = 1 + count
    a, n = encoder.encode_placement_lines(seq, first)
    b, m = encoder.encode_placement_lines(seq + n, again)
    c, _ = encoder.encode_placement_lines(seq + n + m, again)
    assert any(r is prepared for r in kept())      # placed again: its JSON is kept
    # kept or not, the lines are the same records
    records = [orjson.loads(line) for line in (lines_once + a + b + c).splitlines()]
    assert [r["content"]["requirements"] for r in decode_trace(records) if r["kind"] == "task.submitted"] == [
        {"v": "1.0", "capabilities": [{"name": "x.y", "version": 1}]}] * 4
