"""Arguments of the library that were taken and failed later, or raised an error of a3fast's
insides: each is refused when given, naming it, and nothing changes (both engines). And a trace
writer whose write fails is all or nothing."""
from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

import a3fast

DECL = {"v": "1.0", "agent": {"name": "a", "namespace": "s"}, "capabilities": [{"name": "x.y", "version": 1}],
        "clearances": []}
REQ = {"v": "1.0", "capabilities": [{"name": "x.y", "version": 1}]}


@pytest.fixture
def fleet(engine):
    f = a3fast.Fleet(engine=engine)
    f.add(DECL)
    return f


def test_a_route_named_with_a_lone_surrogate_is_refused_when_made():
    # its placement changed the fleet (a session held) and then could never be written
    from a3fast.fleet.placement import RouteError

    with pytest.raises(RouteError, match="lone surrogate"):
        a3fast.Route("\udc80", {"exclude": ["b"]})


@pytest.mark.parametrize("weights, named", [
    ((10**400, 0, 0, 0), r"weights\[0\]: expected a finite number, found an integer of about 401 digits"),
    ((0, 0, "x", 0), r"weights\[2\]: expected a finite number, found string 'x'"),
    ("1234", r"weights: expected 4 finite numbers \(affinity, success rate, cost, exploration\), found string '1234'"),
    ((1, 2, 3), r"weights: expected 4 finite numbers \(.*\), found 3 of them"),
    # a mapping was read by its keys, as four weights
    ({1: 1, 2: 2, 3: 3, 4: 4}, r"weights: expected 4 finite numbers \(.*\), found object with 4 fields"),
])
def test_weights_past_a_float_or_given_as_text_are_refused_naming_them(engine, weights, named):
    # 10**400 raised OverflowError, then was named with the others as "a tuple of 4"; "1234" was
    # read as four weights, one a character
    with pytest.raises(ValueError, match=named):
        a3fast.Fleet(engine=engine, weights=weights)


def test_a_scorer_total_past_a_float_is_no_finite_total(fleet):
    before = fleet.generation
    with pytest.raises(a3fast.A3Error, match="no finite numeric 'total'"):
        fleet.place(REQ, scorer=lambda task, agents: [{"total": 10**400} for _ in agents])
    assert fleet.generation == before


@pytest.mark.parametrize("source, said", [(None, "expected a path, bytes or a binary stream"),
                                          (5, "expected a path, bytes or a binary stream"),
                                          (io.StringIO('{"v": "1.0"}\n'), "expected a binary stream")])
def test_declarations_from_what_is_no_path_bytes_or_binary_stream_are_refused(engine, source, said):
    fleet = a3fast.Fleet(engine=engine)
    with pytest.raises(TypeError, match=said):
        fleet.extend_jsonl(source)
    assert len(fleet) == 0


@pytest.mark.parametrize("start_seq, error", [(2**64, ValueError), (-2**63 - 1, ValueError), (1.5, TypeError),
                                               ("1", TypeError), (None, TypeError), (True, TypeError)])
def test_a_trace_writers_start_seq_is_a_seq(start_seq, error):
    with pytest.raises(error, match="start_seq: expected an integer"):
        a3fast.TraceWriter(io.BytesIO(), start_seq=start_seq)


def test_a_trace_writer_takes_any_integer_and_any_content_orjson_writes(fleet):
    # numpy's integers, and the types orjson writes (dates, ordered dicts), as before the checks
    import datetime
    from collections import OrderedDict

    import numpy

    out = io.BytesIO()
    writer = a3fast.TraceWriter(out, start_seq=numpy.int64(5))
    assert writer.write(fleet.place(REQ), task={"meta": OrderedDict(a=1), "nullable": None}) == [5, 6, 7]
    assert writer.append("note", {"at": datetime.datetime(2025, 1, 1)}) == 8
    assert a3fast.verify(out.getvalue()) == []


def test_a_trace_writer_is_given_a_file_and_placements(fleet):
    with pytest.raises(TypeError, match="target: expected a path or a binary file"):
        a3fast.TraceWriter(None)
    with pytest.raises(TypeError, match="placement: expected a Placement"):
        a3fast.TraceWriter(io.BytesIO()).write("x")


@pytest.mark.parametrize("form", ["spec", "compact"])
def test_nan_in_what_a_writer_writes_is_refused_not_written_as_null(fleet, form):
    out = io.BytesIO()
    writer = a3fast.TraceWriter(out, form=form)
    with pytest.raises(ValueError, match="task: "):
        writer.write(fleet.place(REQ), task={"goal": float("nan")})
    with pytest.raises(ValueError, match="content: "):
        writer.append("note", {"x": float("nan")})
    assert out.getvalue() == b"" and writer.next_seq == 1
    assert writer.write(fleet.place(REQ)) == [1, 2, 3]
    assert a3fast.verify(out.getvalue()) == []


@pytest.mark.parametrize("form", ["spec", "compact"])
def test_a_writer_whose_callers_file_failed_writes_no_more_to_it(fleet, form):
    class FailsOnce(io.BytesIO):
        failed = False

        def write(self, data):
            if not FailsOnce.failed:
                FailsOnce.failed = True
                raise OSError(28, "No space left on device")
            return super().write(data)

    writer = a3fast.TraceWriter(FailsOnce(), form=form)
    with pytest.raises(OSError):
        writer.write(fleet.place(REQ))
    # what such a file holds after it is not known: writing on would repeat seqs or cite a table
    # never written
    with pytest.raises(ValueError, match="an earlier write to its file failed"):
        writer.write(fleet.place(REQ))


_FULL_FOR_A_MOMENT = r'''
import json, resource, sys, os
import a3fast
form, path = sys.argv[1], sys.argv[2]
fleet = a3fast.Fleet(engine=sys.argv[3])
fleet.add(json.loads(sys.argv[4]))
requirements = json.loads(sys.argv[5])
writer = a3fast.TraceWriter(path, form=form)
writer.write(fleet.place(requirements))
size = os.path.getsize(path)
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, resource.RLIM_INFINITY))     # a disk full for a moment
try:
    writer.write(fleet.place(requirements))
    print("no failure")
except OSError:
    pass
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
print(json.dumps(writer.write(fleet.place(requirements))))
writer.close()
'''


@pytest.mark.parametrize("form", ["spec", "compact"])
def test_a_write_that_fails_on_a_path_is_cut_back_and_the_writer_goes_on(engine, form, tmp_path):
    # the failed write's bytes stayed in the file's buffer and reached it at the next flush, and
    # the next write repeated their seqs; the compact name table it sent was never written
    path = tmp_path / "trace.jsonl"
    done = subprocess.run([sys.executable, "-c", _FULL_FOR_A_MOMENT, form, str(path), engine, json.dumps(DECL),
                           json.dumps(REQ)], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [4, 5, 6]
    assert a3fast.verify_file(str(path)) == []
    assert [json.loads(line)["seq"] for line in path.read_bytes().splitlines()] == [1, 2, 3, 4, 5, 6]


def test_outcomes_are_read_by_requirements_as_they_are_recorded(fleet):
    # record_outcome took the task's requirements; outcomes raised "unhashable type: 'dict'"
    fleet.record_outcome("a", REQ, True)
    assert fleet.outcomes("a", REQ) == fleet.outcomes("a", a3fast.parse_requirements(REQ)) == (1, 1)
    from a3fast.schema import task_kind

    assert fleet.outcomes("a", task_kind(a3fast.parse_requirements(REQ))) == (1, 1)


def test_a_route_named_by_a_string_enum_is_still_a_route():
    import enum

    from a3fast.fleet.placement import Route

    class Rule(enum.StrEnum):
        ESCALATE = "escalate"

    assert Route(Rule.ESCALATE, {"exclude": ["b"]}).name == "escalate"


@pytest.mark.parametrize("weights, named", [
    (("1", "2", "3", "4"), r"weights\[0\]: expected a finite number, found string '1'"),
    ((0.4, True, 0.2, 0.1), r"weights\[1\]: expected a finite number, found true"),
])
def test_weights_that_float_would_make_numbers_of_are_refused(engine, weights, named):
    with pytest.raises(ValueError, match=named):
        a3fast.Fleet(engine=engine, weights=weights)


@pytest.mark.parametrize("pack", ["yes", 1, 0])
def test_a_pack_that_is_no_true_false_or_none_is_refused_and_nothing_added(engine, pack):
    fleet = a3fast.Fleet(engine=engine)
    with pytest.raises(ValueError, match=r"pack: expected True, False or None, found "):
        fleet.extend_jsonl(json.dumps(DECL).encode() + b"\n", pack=pack)
    assert len(fleet) == 0


def test_a_snapshot_is_loaded_from_a_file_name_never_from_an_open_descriptor(engine, tmp_path):
    with open(tmp_path / "held.txt", "wb") as held:
        with pytest.raises(TypeError, match=r"path: expected a file name \(str or os.PathLike\), found "):
            a3fast.Fleet.load(held.fileno(), engine=engine)
        held.write(b"still open")          # the caller's descriptor was neither read nor closed


def test_one_string_is_no_sequence_of_sessions(fleet):
    before = fleet.generation
    with pytest.raises(TypeError, match="sessions: expected a sequence of sessions"):
        fleet.place_many([REQ, REQ, REQ], sessions="abc")
    assert fleet.generation == before and not fleet.holds_session("a", "a")


def test_a_session_that_is_no_string_is_named_by_its_place_among_the_tasks(fleet):
    with pytest.raises(ValueError, match=r"^sessions\[1\]: expected a string"):
        fleet.place_many([REQ, REQ, REQ], sessions=["p1", 5, "p3"])
    assert not fleet.holds_session("a", "p1")


def test_a_session_of_a_str_subclass_is_refused_in_words_that_say_so(fleet):
    class Named(str):
        pass

    with pytest.raises(ValueError, match="session: expected a string of type str itself, found an instance of "
                                         "Named, a subclass of str"):
        fleet.place(REQ, session=Named("s"))


def test_weights_of_every_kind_of_real_number_are_taken(engine):
    from decimal import Decimal
    from fractions import Fraction

    import numpy as np

    fleet = a3fast.Fleet(engine=engine, weights=(Decimal("0.4"), Fraction(3, 10), np.float32(0.25), np.int64(0)))
    assert fleet.weights == (0.4, 0.3, 0.25, 0.0)


def test_a_resumption_goes_back_to_the_agent_it_chose_not_to_its_name_in_another_namespace(fleet):
    placement = fleet.place(REQ)
    assert placement.bound and placement.agent == "a"
    fleet.remove("a")
    fleet.add({**DECL, "agent": {"name": "a", "namespace": "elsewhere"}})
    generation = fleet.generation
    with pytest.raises(a3fast.FleetError, match="now in namespace 'elsewhere', not 's'"):
        fleet.resume(placement)
    assert fleet.generation == generation


def test_a_placement_decided_but_not_built_is_named_where_it_cannot_go(fleet):
    decided = fleet.scored(REQ)
    with pytest.raises(ValueError, match="decided, not built"):
        fleet.resume(decided)
    writer = a3fast.TraceWriter(io.BytesIO())
    with pytest.raises(ValueError, match="decided, not built"):
        writer.write(decided)
    assert writer.next_seq == 1


@pytest.mark.parametrize("form", ["spec", "compact"])
@pytest.mark.parametrize("task, error", [([1], TypeError), ("abc", TypeError), ({1: 2}, TypeError),
                                         ({"n": 2**70}, ValueError)])
def test_a_task_no_record_can_carry_is_named_before_anything_is_written(fleet, form, task, error):
    out = io.BytesIO()
    writer = a3fast.TraceWriter(out, form=form)
    with pytest.raises(error, match="^task: "):
        writer.write(fleet.place(REQ), task=task)
    assert out.getvalue() == b"" and writer.next_seq == 1


@pytest.mark.parametrize("kind, content, content_json, error", [
    (5, {}, None, TypeError), ("", {}, None, TypeError), ("\ud800", {}, None, TypeError),
    ("note", None, None, TypeError), ("note", [1], None, TypeError), ("note", None, b"oops", ValueError),
    ("note", {"n": 2**70}, None, ValueError)])
def test_an_appended_record_no_reader_would_take_is_refused(kind, content, content_json, error):
    out = io.BytesIO()
    writer = a3fast.TraceWriter(out)
    with pytest.raises(error):
        writer.append(kind, content, content_json=content_json)
    assert out.getvalue() == b"" and writer.next_seq == 1


def test_verify_file_takes_a_file_name_never_a_descriptor():
    import os

    read, write = os.pipe()
    try:
        for given in (read, True):
            with pytest.raises(TypeError, match="expected a file name"):
                a3fast.verify_file(given)
        os.fstat(read)          # still open: it was never taken
    finally:
        os.close(read)
        os.close(write)


def test_truth_arguments_are_true_or_false_not_anything_truthy(fleet):
    for value in ("false", float("nan"), 2, None):
        with pytest.raises(ValueError, match="^success: expected true or false"):
            fleet.record_outcome("a", "k", value)
        with pytest.raises(ValueError, match="^remember_session: expected true or false"):
            fleet.place({**REQ, "session": "s1"}, remember_session=value)
        with pytest.raises(ValueError, match="^remember_session: expected true or false"):
            fleet.place_many([REQ], remember_session=value)
    assert not fleet.holds_session("a", "s1")
    import numpy as np

    fleet.record_outcome("a", "k", np.bool_(True))
    fleet.record_outcome("a", "k", 0)           # a column of outcomes from an array
    assert fleet.outcomes("a", "k") == (1, 2)
    assert fleet.place({**REQ, "session": "s2"}, remember_session=np.bool_(False)).session_held is False


def test_sessions_given_as_an_iterator_are_read_once(fleet):
    placements = fleet.place_many([REQ, REQ], sessions=(s for s in ["s1", None]))
    assert [p.session for p in placements] == ["s1", None]


def test_scored_checks_its_arguments_as_place_does(fleet):
    with pytest.raises(ValueError, match="session"):
        fleet.scored(REQ, session=5)
    with pytest.raises(ValueError, match="kind"):
        fleet.scored(REQ, kind=5)
    with pytest.raises(TypeError, match="scorer"):
        fleet.scored(REQ, scorer=5)


def test_an_agent_id_is_never_counted_from_the_end(fleet):
    for aid in (-1, 99):
        with pytest.raises(IndexError, match="does not exist"):
            fleet.declaration_json(aid)
        with pytest.raises(IndexError, match=f"agent id {aid} does not exist"):
            fleet.index.name(aid)


@pytest.mark.parametrize("fields", [
    {"capabilities": None},                                   # iterated: TypeError inside the fleet
    {"capabilities": ("x.y",)},                               # a name where a Capability goes
    {"clearances": "orders.read"},                            # read as its characters
    {"clearances": (1,)},
    {"agent": a3fast.schema.AgentName(None, "s")},            # the engines disagreed on it
    {"agent": None},
    {"v": 2},
])
def test_a_declaration_built_by_hand_with_fields_of_other_types_is_refused_and_nothing_changes(engine, fields):
    fleet = a3fast.Fleet(engine=engine)
    made = a3fast.schema.parse_declaration({**DECL, "agent": {"name": "hb", "namespace": "s"}})
    generation = fleet.generation
    for call in (lambda: fleet.add(made._replace(**fields)), lambda: fleet.extend([DECL, made._replace(**fields)])):
        with pytest.raises(TypeError, match=r"^\$: a Declaration whose fields are not of the types parse_declaration"):
            call()
        assert (len(fleet), fleet.names(), fleet.generation) == (0, [], generation)
    fleet.add(made)                              # as parse_declaration made it: taken as it is
    assert fleet.names() == ["hb"]


def test_a_scorer_component_named_with_a_lone_surrogate_is_refused_and_holds_nothing(fleet):
    for entry in ({"total": 1.0, "\ud800": 1}, {"total": 1.0, "x": {"\ud800": 1}}):
        with pytest.raises(a3fast.A3Error, match="a string UTF-8 cannot write"):
            fleet.place(REQ, session="zz", scorer=lambda task, agents, entry=entry: [entry for _ in agents])
    assert not fleet.holds_session("a", "zz")


def test_a_decided_placement_names_the_field_it_does_not_have_yet(fleet):
    scored = fleet.scored(REQ)
    for read in (lambda: scored.bound, lambda: scored.scheduling, lambda: scored.summary()):
        with pytest.raises(AttributeError, match="'agent' is not set on this Placement: the stage that sets it has not run .one Fleet.scored gives is decided, not built"):
            read()
    with pytest.raises(AttributeError, match="'index' is not set"):
        scored.candidates
    with pytest.raises(AttributeError, match="'Placement' object has no attribute 'nope'"):
        scored.nope


def test_outcomes_counted_at_once_take_a_task_kind_by_name(fleet):
    for kind in (REQ, a3fast.parse_requirements(REQ), 5):
        with pytest.raises(ValueError, match="^kind: expected a string"):
            fleet.record_outcomes("a", kind, 1, 2)
    assert fleet.outcomes("a", REQ) == (0, 0)


def test_a_bad_document_in_a_batch_is_named_by_its_place_and_nothing_changes(engine):
    fleet = a3fast.Fleet(engine=engine)
    fleet.add(DECL)
    many = [{**DECL, "agent": {"name": f"n{i}", "namespace": "s"}} for i in range(600)]
    many[499] = {**many[499], "clearances": "x"}
    with pytest.raises(a3fast.SchemaError, match=r"^\$\[499\]\.clearances: expected an array"):
        fleet.extend(many)
    assert fleet.names() == ["a"]
    with pytest.raises(a3fast.SchemaError, match=r"^\$\[2\]\.capabilities: expected an array"):
        fleet.place_many([REQ, REQ, {"capabilities": "x"}, REQ], sessions=["s1", "s2", "s3", "s4"])
    assert not fleet.holds_session("a", "s1")
    with pytest.raises(a3fast.SchemaError, match=r"^\$\.capabilities: expected an array"):
        fleet.place({"capabilities": "x"})          # one task: its own document's path
