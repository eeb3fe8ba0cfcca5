"""Traces from Python: a TraceWriter writes placements in spec or compact form with seq numbers,
`read_records` reads either back as spec records, and the verifier checks a path or records."""
from __future__ import annotations

import io

import orjson
import pytest

import a3fast
from a3fast.record.compact import KEY
from a3fast.workload import generate_fleet, generate_tasks


@pytest.fixture(scope="module")
def placed():
    declarations = generate_fleet(200, seed=4)
    fleet = a3fast.Fleet()
    fleet.extend(declarations)
    return fleet, fleet.place_many(generate_tasks(declarations, 60, seed=4))


def written(placements, form, **writer):
    out = io.BytesIO()
    with a3fast.TraceWriter(out, form=form, **writer) as trace:
        seqs = [trace.write(p) for p in placements]
    return out.getvalue(), seqs


def test_each_placement_gets_its_records_seqs_in_order(placed):
    _, placements = placed
    data, seqs = written(placements, "spec")
    assert [s for ss in seqs for s in ss] == list(range(1, len(data.splitlines()) + 1))
    assert [len(ss) for ss in seqs] == [3 if p.bound else 2 for p in placements]
    records = [orjson.loads(line) for line in data.splitlines()]
    assert {r["kind"] for r in records} == {"task.submitted", "task.admitted", "task.bound", "task.rejected"}


def test_a_compact_trace_reads_back_as_exactly_the_spec_trace(placed):
    _, placements = placed
    spec, spec_seqs = written(placements, "spec")
    compact, compact_seqs = written(placements, "compact")
    assert spec_seqs == compact_seqs and len(compact) < len(spec) / 5
    assert any(KEY in orjson.loads(line)["content"] for line in compact.splitlines())
    assert list(a3fast.read_records(compact)) == [orjson.loads(line) for line in spec.splitlines()]
    assert list(a3fast.read_records(spec)) == list(a3fast.read_records(compact))


def test_the_name_table_is_written_once_per_fleet_generation(placed):
    _, placements = placed
    compact, _ = written(placements, "compact")
    tables = [line for line in compact.splitlines() if b'"names":' in line]
    assert len(tables) == 1


def test_both_forms_verify_from_a_path_and_from_records(placed, tmp_path):
    _, placements = placed
    for form in a3fast.trace.FORMS:
        path = tmp_path / f"{form}.jsonl"
        with a3fast.TraceWriter(path, form=form) as trace:
            for p in placements:
                trace.write(p)
        assert a3fast.verify_file(path) == []
        assert a3fast.verify(list(a3fast.read_records(path, spec=False))) == []


def test_a_writer_appends_to_an_existing_trace_from_start_seq(placed, tmp_path):
    _, placements = placed
    path = tmp_path / "t.jsonl"
    with a3fast.TraceWriter(path) as trace:
        first = trace.write(placements[0])
    with a3fast.TraceWriter(path, start_seq=first[-1] + 1) as trace:
        second = trace.write(placements[1])
    assert second[0] == first[-1] + 1
    assert [r["seq"] for r in a3fast.read_records(path)] == first + second


def test_task_members_go_into_task_submitted_in_both_forms(placed):
    _, placements = placed
    for form in a3fast.trace.FORMS:
        data, _ = written(placements[:1], form)
        out = io.BytesIO()
        a3fast.TraceWriter(out, form=form).write(placements[0], task={"goal": "triage"})
        submitted = orjson.loads(out.getvalue().splitlines()[0])["content"]
        assert submitted == {"goal": "triage", "requirements": placements[0].submitted.doc}


def test_a_resumed_placement_cites_the_seq_the_writer_gave(placed):
    fleet, placements = placed
    first = next(p for p in placements if p.bound)
    for form in a3fast.trace.FORMS:
        out = io.BytesIO()
        trace = a3fast.TraceWriter(out, form=form)
        seqs = trace.write(first)
        trace.write(fleet.resume(first, seq=seqs[-1]))
        assert a3fast.verify(out.getvalue()) == []
        last = list(a3fast.read_records(out.getvalue()))[-1]
        assert last["content"]["scheduling"]["recorded_in"] == {"kind": "task.bound", "seq": seqs[-1]}


def test_a_written_placement_knows_its_seq_and_resuming_it_cites_that_record(placed):
    """`Placement.seq` is the seq of the placement's last record in the trace it was written to,
    so a resumption made without `seq=` cites it (§6: `recorded_in.seq` may be left out only when
    the implementation cannot tell which)."""
    fleet, placements = placed
    first = next(p for p in placements if p.bound)
    rejected = next(p for p in placements if not p.bound)
    for form in a3fast.trace.FORMS:
        out = io.BytesIO()
        trace = a3fast.TraceWriter(out, form=form)
        trace.append("task.note", {"text": "before"})
        seqs = trace.write(first)
        assert first.seq == seqs[-1] == 4
        assert trace.write(rejected)[-1] == rejected.seq == 6
        resumed = fleet.resume(first)
        assert trace.write(resumed) == [7] and resumed.seq == 7
        again = fleet.resume(resumed)       # a resumption's own record holds no explanation
        trace.write(again)
        assert a3fast.verify(out.getvalue()) == []
        cited = [r["content"]["scheduling"]["recorded_in"] for r in a3fast.read_records(out.getvalue())
                 if r["kind"] == "task.bound" and r["content"]["scheduling"].get("resumed")]
        assert cited == [{"kind": "task.bound", "seq": 4}] * 2


def test_any_other_record_goes_between_placements_with_the_next_seq(placed):
    _, placements = placed
    out = io.BytesIO()
    trace = a3fast.TraceWriter(out, form="compact")
    trace.write(placements[0])
    note = trace.append("task.note", {"text": "operator paused"})
    after = trace.write(placements[1])
    assert after[0] == note + 1
    assert a3fast.verify(out.getvalue()) == []


def test_an_unknown_form_is_refused():
    with pytest.raises(ValueError, match="form: expected one of spec, compact"):
        a3fast.TraceWriter(io.BytesIO(), form="binary")


@pytest.mark.parametrize("trace, where", [
    (b'{"seq":1,"kind":"task.submitted","content":{}}\nnot json\n', "line 2"),
    (b'{"seq":2,"kind":"a","content":{}}\n{"seq":1,"kind":"b","content":{}}\n', "line 2"),
    (b'{"seq":1,"kind":"a"}\n', "line 1"),
])
def test_a_trace_that_breaks_its_format_is_a_trace_error_naming_the_line(trace, where):
    with pytest.raises(a3fast.TraceError, match=f"^{where}"):
        list(a3fast.read_records(trace))


def test_a_compact_member_outside_its_format_is_a_compact_error(placed):
    from a3fast.record.compact import CompactError

    _, placements = placed
    compact, _ = written(placements[:3], "compact")
    records = [orjson.loads(line) for line in compact.splitlines()]
    member = next(r for r in records if KEY in r["content"])
    member["content"][KEY]["format"] = 7
    with pytest.raises(CompactError, match="unknown compact format 7"):
        list(a3fast.read_records(records))
    assert list(a3fast.read_records(records, spec=False)) == records


@pytest.mark.parametrize("hold", [False, True])
def test_a_compact_trace_with_placements_over_some_agents_reads_back_as_the_spec_trace(engine, hold):
    # a placement over some agents only is followed by placements over every live agent: the
    # compact form must not take the few candidates for the fleet's live set, whether or not a
    # held session changed the fleet in between
    task = {"v": "1.0", "clearances": ["orders.read"], "residency": "eu"}
    fleet = a3fast.Fleet(engine=engine)
    for name in "abcde":
        fleet.add({"v": "1.0", "agent": {"name": name, "namespace": "support"}, "capabilities": [],
                   "clearances": ["orders.read"], "residency": ["us" if name == "b" else "eu"]})
    placements = [fleet.place(dict(task, session="s1") if hold else task, candidates=["a", "e"]),
                  fleet.place(task, remember_session=False),
                  fleet.place(task, candidates=["c"]),
                  fleet.place(task)]
    assert placements[1].candidates == ["a", "b", "c", "d", "e"]
    compact, _ = written(placements, "compact")
    spec, _ = written(placements, "spec")
    assert list(a3fast.read_records(compact)) == list(a3fast.read_records(spec))


@pytest.mark.parametrize("start", [2**63 - 5, 2**64 - 40])
def test_seqs_past_the_engines_signed_64_bits_are_written_in_both_forms(engine, start):
    # the document rule numbers records to 2^64-1; the engine's line writer counts in a signed
    # 64-bit integer, so placements numbered past it go the records' Python way, the same bytes
    declarations = generate_fleet(30, seed=5)
    fleet = a3fast.Fleet(engine=engine)
    fleet.extend(declarations)
    placements = [fleet.place(task) for task in generate_tasks(declarations, 8, seed=5)]
    spec, spec_seqs = written(placements, "spec", start_seq=start)
    compact, compact_seqs = written(placements, "compact", start_seq=start)
    assert spec_seqs == compact_seqs and spec_seqs[0][0] == start
    assert list(a3fast.read_records(compact)) == [orjson.loads(line) for line in spec.splitlines()]
    assert a3fast.verify(compact) == [] and a3fast.verify(spec) == []


@pytest.mark.parametrize("form", ["spec", "compact"])
def test_a_write_numbered_past_2_to_the_64_is_refused_and_writes_nothing(placed, form):
    _, placements = placed
    bound = next(p for p in placements if p.bound)
    out = io.BytesIO()
    trace = a3fast.TraceWriter(out, form=form, start_seq=2**64 - 3)
    assert trace.write(bound) == [2**64 - 3, 2**64 - 2, 2**64 - 1]
    before = out.getvalue()
    with pytest.raises(ValueError, match=r"numbered to 2\^64-1 at most; this write would number one 18446744073709551618"):
        trace.write(bound)
    with pytest.raises(ValueError, match="at most; this write would number one 18446744073709551616"):
        trace.append("note", {})
    assert out.getvalue() == before and trace.next_seq == 2**64
    assert a3fast.verify(before) == []
