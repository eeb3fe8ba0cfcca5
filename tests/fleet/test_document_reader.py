"""a3fast.document_reader over a3fast.framing: a JSON array or JSON Lines of documents, from a path,
bytes or a stream, every problem at its line (or index) and JSON path; declarations through the
fleet's bulk reader. Then each command and service route that reads such input, through it."""
from __future__ import annotations

import io
import subprocess
import sys

import orjson
import pytest
from click.testing import CliRunner

import a3fast.fleet
import a3fast.fleet.bulk_load
from a3fast import Fleet
from a3fast import document_reader as reader
from a3fast import framing
from a3fast.cli import main
from a3fast.errors import Problem, SchemaError
from a3fast.workload import generate_fleet

ANALYST = {"v": "1.0", "agent": {"name": "order-analyst", "namespace": "support"},
           "capabilities": [{"name": "order.investigate", "version": 2}],
           "clearances": ["orders.read", "customers.read"], "residency": ["eu"]}
SUMMARISER = {"v": "1.0", "agent": {"name": "summariser", "namespace": "support"},
              "capabilities": [{"name": "case.summarise", "version": 1}],
              "clearances": ["orders.read"], "residency": ["eu"]}
TASK = {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 2}],
        "clearances": ["orders.read"], "residency": "eu"}
BAD_CLEARANCE = {**SUMMARISER, "agent": {"name": "careless", "namespace": "support"}, "clearances": ["Orders"]}
OTHER_NAMESPACE = {**SUMMARISER, "agent": {"name": "summariser", "namespace": "billing"}}


def lines(*docs: object) -> bytes:
    return b"".join(orjson.dumps(d) + b"\n" for d in docs)


def sources(data: bytes, tmp_path):
    """The same input as a path, a str path, bytes, a bytearray and a stream."""
    path = tmp_path / "input"
    path.write_bytes(data)
    return [path, str(path), data, bytearray(data), io.BytesIO(data)]


# -- the reader ---------------------------------------------------------------------------------------

def test_json_lines_and_a_json_array_give_the_same_documents_from_a_path_bytes_or_a_stream(tmp_path):
    as_lines = lines(ANALYST, {"x": [1, 2]}) + b"\n  \n" + lines(SUMMARISER)
    as_array = orjson.dumps([ANALYST, {"x": [1, 2]}, SUMMARISER], option=orjson.OPT_INDENT_2)
    for source in sources(as_lines, tmp_path):
        assert framing.read_documents(source) == (
            [("line 1: $", ANALYST), ("line 2: $", {"x": [1, 2]}), ("line 5: $", SUMMARISER)], [])
    for source in sources(as_array, tmp_path):
        assert framing.read_documents(source) == (
            [("$[0]", ANALYST), ("$[1]", {"x": [1, 2]}), ("$[2]", SUMMARISER)], [])


def test_every_problem_is_named_by_its_line_and_json_path():
    data = lines(ANALYST) + b'{"v": \n' + lines(BAD_CLEARANCE) + b"[1, 2]\n"
    declarations, problems = reader.read_declarations(data)
    assert [where for where, _ in declarations] == ["line 1: $"]
    assert [p.path for p in problems] == ["line 2: $", "line 3: $.clearances[0]", "line 4: $"]
    assert problems[0].expected == "valid JSON"
    assert problems[2] == Problem("line 4: $", "an object", "array of 2")


def test_a_problem_in_an_array_is_named_by_its_index():
    declarations, problems = reader.read_declarations(orjson.dumps([ANALYST, BAD_CLEARANCE]))
    assert [where for where, _ in declarations] == ["$[0]"]
    assert [p.path for p in problems] == ["$[1].clearances[0]"]


def test_an_array_element_is_held_to_the_document_rule_alone_as_a_line_is():
    # a declaration 128 levels deep is within the rule as a line, and so as an element: the
    # array's own bracket is not counted against it; an element the rule refuses is refused alone
    deep = {**ANALYST, "x": orjson.loads(b"[" * 127 + b"]" * 127)}
    big = orjson.dumps(SUMMARISER)[:-1] + b',"x":99999999999999999999}'
    infinite = orjson.dumps(SUMMARISER)[:-1] + b',"x":1e400}'
    for first in (orjson.dumps(deep), big, infinite):
        as_lines = first + b"\n" + orjson.dumps(SUMMARISER) + b"\n"
        as_array = b"[" + first + b"," + orjson.dumps(SUMMARISER) + b"]"
        for data in (as_lines, as_array):
            declarations, problems = reader.read_declarations(data)
            fleet = Fleet()
            assert reader.extend_fleet(fleet, data) == problems
            assert [d.agent.name for _, d in declarations] == fleet.names()
            assert "summariser" in fleet.names()
            assert ("order-analyst" in fleet.names()) == (first is not big and first is not infinite)
        lined, arrayed = reader.read_declarations(as_lines)[1], reader.read_declarations(as_array)[1]
        assert [(p.path.replace("line 1: $", "$[0]"), p.expected, p.found) for p in lined] == [
            (p.path, p.expected, p.found) for p in arrayed]


def test_a_line_that_is_no_json_is_named_at_its_line_and_its_column_by_every_reader(engine):
    data = lines(ANALYST) + b'{"v": "1.0",\n' + lines(SUMMARISER) + b'{"v": "1.0", "agent": "\xff"}\n'
    problems = Fleet(engine).extend_jsonl(data, on_error="skip")
    assert problems == reader.read_declarations(data)[1]
    assert [p.path for p in problems] == ["line 2: $", "line 4: $"]
    # the decoder counted within the line: its "line 1" is the line the path names
    assert [p.found.split(": ")[-1] for p in problems] == ["column 13 (char 12)", "the byte 0xff at column 24 (byte 23)"]


def test_empty_input_holds_no_document_and_no_problem(tmp_path):
    for data in (b"", b"\n\n", b"  \r\n", b"[]"):
        for source in sources(data, tmp_path):
            assert framing.read_documents(source) == ([], [])
        assert len(reader.load_fleet(data)) == 0


def test_hostile_values_are_problems_at_their_path_under_the_document_rule():
    deep = b'{"a": ' + b"[" * 200 + b"]" * 200 + b"}"
    big = b'{"a": {"b": 18446744073709551616}}'
    surrogate = b'{"a": "\\ud800"}'
    documents, problems = framing.read_documents(b"\n".join([deep, big, surrogate, b"NaN"]))
    assert documents == []
    assert problems[0].expected == "at most 128 nested arrays and objects"
    assert problems[0].path.startswith("line 1: $.a[0][0]")
    assert [(p.path, p.expected) for p in problems[1:]] == [
        ("line 2: $.a.b", "an integer from -2^63 to 2^64-1"),
        ("line 3: $", "valid JSON"),
        ("line 4: $", "valid JSON")]


def test_a_stream_that_ends_mid_line_names_the_cut_line():
    data = lines(ANALYST) + orjson.dumps(SUMMARISER)[:30]
    documents, problems = framing.read_documents(io.BytesIO(data))
    assert [where for where, _ in documents] == ["line 1: $"]
    assert [(p.path, p.expected) for p in problems] == [("line 2: $", "valid JSON")]
    with pytest.raises(SchemaError) as caught:
        reader.load_fleet(io.BytesIO(data))
    assert [(p.path, p.expected) for p in caught.value.problems] == [("line 2: $", "valid JSON")]


def test_an_input_that_is_neither_form_is_one_problem_at_the_root():
    assert framing.read_documents(b"[1, 2")[1][0].path == "$"
    with pytest.raises(SchemaError) as caught:
        reader.load_fleet(b"[1, 2")
    assert [p.path for p in caught.value.problems] == ["$"]
    assert framing.read_documents(b"[1]", form=framing.LINES)[0] == [("line 1: $", [1])]


def test_lines_are_numbered_across_blank_lines():
    assert list(framing.iter_lines(io.BytesIO(b"1\n\n22\n333333333333\n\n4"))) == [
        (1, b"1"), (3, b"22"), (4, b"333333333333"), (6, b"4")]


# -- declarations into a fleet: the fleet's bulk reader -----------------------------------------------

def test_a_fleet_has_the_same_problems_as_fleet_load_jsonl_from_every_kind_of_source(tmp_path, engine):
    data = lines(ANALYST, SUMMARISER, BAD_CLEARANCE) + b"{oops\n" + lines(OTHER_NAMESPACE)
    with pytest.raises(SchemaError) as expected:
        Fleet.load_jsonl(data, engine)
    assert [p.path for p in expected.value.problems] == ["line 3: $.clearances[0]", "line 4: $",
                                                         "line 5: $.agent.namespace"]
    for source in sources(data, tmp_path):
        with pytest.raises(SchemaError) as caught:
            reader.load_fleet(source, engine)
        assert caught.value.problems == expected.value.problems


def test_blank_lines_before_the_first_declaration_are_counted_from_every_kind_of_source(tmp_path, engine):
    data = b"\n \n" + lines(ANALYST, BAD_CLEARANCE)
    for source in sources(data, tmp_path):
        with pytest.raises(SchemaError) as caught:
            reader.load_fleet(source, engine)
        assert [p.path for p in caught.value.problems] == ["line 4: $.clearances[0]"]


def test_a_line_of_vertical_tabs_or_form_feeds_is_no_declaration_not_a_blank_line(tmp_path, engine):
    # JSON's whitespace is space, tab, CR and LF: the compiled reader and Python's `strip` took \v
    # and \f for blank too, and skipped the line
    for space in (b"\x0b", b"\x0c", b" \x0b\t"):
        data = lines(ANALYST) + space + b"\n" + lines(SUMMARISER)
        with pytest.raises(SchemaError) as expected:
            Fleet.load_jsonl(data, engine)
        assert [p.path for p in expected.value.problems] == ["line 2: $"]
        for source in sources(data, tmp_path):
            with pytest.raises(SchemaError) as caught:
                reader.load_fleet(source, engine)
            assert caught.value.problems == expected.value.problems


def test_a_stream_read_in_small_chunks_numbers_each_problem_by_its_line_in_the_stream(monkeypatch, engine):
    monkeypatch.setattr(a3fast.fleet.bulk_load, "JSONL_CHUNK", 300)
    data = lines(*[{**ANALYST, "agent": {"name": f"a{k}", "namespace": "support"}} for k in range(20)],
                 BAD_CLEARANCE, ANALYST, OTHER_NAMESPACE, SUMMARISER)
    with pytest.raises(SchemaError) as expected:
        Fleet.load_jsonl(data, engine)
    with pytest.raises(SchemaError) as caught:
        reader.load_fleet(io.BytesIO(data), engine)
    assert caught.value.problems == expected.value.problems
    assert [p.path.split(":")[0] for p in caught.value.problems] == ["line 21", "line 24"]
    good = data.replace(lines(BAD_CLEARANCE), b"").replace(lines(OTHER_NAMESPACE), b"")
    streamed, whole = reader.load_fleet(io.BytesIO(good), engine), Fleet.load_jsonl(good, engine)
    assert streamed.names() == whole.names() and len(streamed) == 22


def test_a_json_array_fleet_is_read_by_the_bulk_reader_with_problems_at_their_index(engine):
    with pytest.raises(SchemaError) as expected:
        Fleet.load_jsonl(lines(SUMMARISER, BAD_CLEARANCE, OTHER_NAMESPACE), engine)
    with pytest.raises(SchemaError) as caught:
        reader.load_fleet(orjson.dumps([SUMMARISER, BAD_CLEARANCE, OTHER_NAMESPACE], option=orjson.OPT_INDENT_2),
                          engine)
    assert [p.path for p in caught.value.problems] == ["$[1].clearances[0]", "$[2].agent.namespace"]
    assert [(p.expected, p.found) for p in caught.value.problems] == [
        (p.expected, p.found) for p in expected.value.problems]
    fleet = reader.load_fleet(orjson.dumps([ANALYST, SUMMARISER]), engine)
    assert fleet.names() == ["order-analyst", "summariser"] and fleet.place(TASK).bound


def test_a_fleet_that_is_not_an_array_of_documents_is_refused_at_the_root():
    with pytest.raises(SchemaError) as caught:
        reader.load_fleet(b'["x", {"a": }]')
    assert [(p.path, p.expected) for p in caught.value.problems] == [("$", "valid JSON")]
    with pytest.raises(SchemaError) as caught:
        reader.load_fleet(b"[[[" + b"[" * 5000)
    assert [p.path for p in caught.value.problems] == ["$"]


class Calls:
    """Counts the calls of a function while passing every one through to it."""

    def __init__(self, monkeypatch, owner, name):
        self.count = 0
        real = getattr(owner, name)

        def counted(*args, **kwargs):
            self.count += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(owner, name, counted)


def test_place_reads_json_lines_through_the_compiled_reader(tmp_path, monkeypatch, engine):
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_bytes(lines(*generate_fleet(3000, 0)))
    requirements = tmp_path / "task.json"
    requirements.write_bytes(orjson.dumps(TASK))
    bulk = Calls(monkeypatch, a3fast.fleet.Fleet, "extend_jsonl")
    # the careful reading of a line (bulk_load) and the lazy parse of a kept declaration (table)
    careful = [Calls(monkeypatch, module, "parse_declaration")
               for module in (a3fast.fleet.bulk_load, a3fast.fleet.table)]
    result = CliRunner().invoke(main, ["place", "--fleet", str(fleet), "--requirements", str(requirements),
                                       "--engine", engine, "-o", str(tmp_path / "trace.jsonl")])
    assert result.exit_code in (0, 1), result.output
    assert bulk.count >= 1
    # the compiled reader vouches for every line of the standard workload (the one declaration
    # parsed is the chosen agent's, for its record); the pure stand-in vouches for none
    parsed = sum(c.count for c in careful)
    if engine == "native":
        assert parsed <= 1
    else:
        assert parsed >= 3000


def test_place_names_a_bad_line_as_fleet_load_jsonl_does(tmp_path):
    fleet = tmp_path / "fleet.jsonl"
    data = lines(ANALYST, SUMMARISER, BAD_CLEARANCE) + b'{"v": \n' + lines(OTHER_NAMESPACE)
    fleet.write_bytes(data)
    requirements = tmp_path / "task.json"
    requirements.write_bytes(orjson.dumps(TASK))
    with pytest.raises(SchemaError) as expected:
        Fleet.load_jsonl(data)
    result = CliRunner().invoke(main, ["place", "--fleet", str(fleet), "--requirements", str(requirements)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"a3fast: {fleet}: {p}" for p in expected.value.problems]


@pytest.mark.slow  # real processes: 2 s or more here
def test_place_reads_a_fleet_from_standard_input(tmp_path):
    requirements = tmp_path / "task.json"
    requirements.write_bytes(orjson.dumps(TASK))
    result = subprocess.run([sys.executable, "-m", "a3fast", "place", "--fleet", "-", "--requirements",
                             str(requirements)], input=lines(SUMMARISER, ANALYST), capture_output=True)
    assert result.returncode == 0, result.stderr
    bound = orjson.loads(result.stdout.splitlines()[-1])
    assert bound["kind"] == "task.bound"
    assert bound["content"]["scheduling"]["declaration"]["agent"]["name"] == "order-analyst"
    cut = subprocess.run([sys.executable, "-m", "a3fast", "place", "--fleet", "-", "--requirements",
                          str(requirements)], input=lines(SUMMARISER) + b'{"v": "1.0", "ag', capture_output=True)
    assert cut.returncode == 2
    assert cut.stderr.decode().startswith("a3fast: -: line 2: $: expected valid JSON, found ")


def test_explain_all_failed_reads_its_fleet_through_the_bulk_reader(tmp_path, monkeypatch):
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_bytes(lines(ANALYST, SUMMARISER))
    requirements = tmp_path / "task.json"
    requirements.write_bytes(orjson.dumps(TASK))
    trace = tmp_path / "trace.jsonl"
    runner = CliRunner()
    assert runner.invoke(main, ["place", "--fleet", str(fleet), "--requirements", str(requirements),
                                "-o", str(trace)]).exit_code == 0
    bulk = Calls(monkeypatch, a3fast.fleet.Fleet, "extend_jsonl")
    result = runner.invoke(main, ["explain", str(trace), "--seq", "3", "--all-failed", "--fleet", str(fleet)])
    assert result.exit_code == 0, result.output
    assert "summariser fails capability:order.investigate/2" in result.stdout
    assert bulk.count == 1


def test_gen_tasks_names_a_bad_line_of_its_fleet(tmp_path):
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_bytes(lines(ANALYST, BAD_CLEARANCE))
    result = CliRunner().invoke(main, ["gen-tasks", "--fleet", str(fleet), "--tasks", "2"])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"a3fast: {fleet}: line 2: $.clearances[0]: expected a clearance")


def test_encode_reads_a_trace_cut_mid_line_from_standard_input_and_names_the_line():
    record = {"seq": 1, "kind": "task.submitted", "ts": "2026-01-01T00:00:00Z", "content": {}}
    result = subprocess.run([sys.executable, "-m", "a3fast", "encode", "-"],
                            input=orjson.dumps(record) + b"\n" + orjson.dumps(record)[:20], capture_output=True)
    assert result.returncode == 2
    assert result.stderr.decode().startswith("a3fast: -: line 2: not JSON: ")


def test_the_importers_read_json_lines_with_every_problem_at_its_line():
    from a3fast.interop.sources import json_documents

    docs = json_documents(lines({"name": "a"}, {"name": "b"}), "cards.jsonl")
    assert [d.path for d in docs] == ["line 1: $", "line 2: $"]
    with pytest.raises(SchemaError) as caught:
        json_documents(lines({"name": "a"}) + b'{"name": 18446744073709551616}\n', "cards.jsonl")
    assert [p.path for p in caught.value.problems] == ["line 2: $.name"]


# -- the service ----------------------------------------------------------------------------------------

service_process = pytest.importorskip("service_process")
pytest.importorskip("starlette")


@pytest.mark.slow  # real processes: 2 s or more here
def test_serve_fleet_loads_through_the_bulk_reader_and_a_restart_keeps_it(tmp_path):
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_bytes(lines(*generate_fleet(500, 0)))
    state = tmp_path / "state"
    server = service_process.Server("--fleet", str(fleet), "--state", str(state))
    try:
        assert len(server.client.get("/v1/agents?limit=10000").json()["names"]) == 500
        assert server.client.delete("/v1/agents/agent-000007").status_code == 200
    finally:
        assert server.stop() == 0
    # the seeded fleet went into a snapshot, the deletion into the journal: a restart (still given
    # --fleet) holds both and does not read the file again
    fleet.write_bytes(b"")
    again = service_process.Server("--fleet", str(fleet), "--state", str(state))
    try:
        names = again.client.get("/v1/agents?limit=10000").json()["names"]
        assert len(names) == 499 and "agent-000007" not in names
    finally:
        assert again.stop() == 0


@pytest.mark.slow  # real processes: 2 s or more here
def test_serve_fleet_names_every_bad_line_and_exits_2(tmp_path):
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_bytes(lines(ANALYST, BAD_CLEARANCE) + b"{oops\n")
    result = subprocess.run([sys.executable, "-m", "a3fast", "serve", "--port", "0", "--fleet", str(fleet)],
                            capture_output=True, timeout=60)
    assert result.returncode == 2
    stderr = result.stderr.decode()
    assert f"{fleet}: line 2: $.clearances[0]: expected a clearance identifier" in stderr
    assert f"{fleet}: line 3: $: expected valid JSON" in stderr


@pytest.mark.slow  # real processes: 2 s or more here
def test_bulk_post_names_a_body_cut_mid_line_by_its_line(tmp_path):
    server = service_process.Server()
    try:
        r = server.client.post("/v1/agents", content=lines(ANALYST) + orjson.dumps(SUMMARISER)[:25])
        assert r.status_code == 400
        assert [(p["line"], p["path"], p["expected"]) for p in r.json()["problems"]] == [(2, "$", "valid JSON")]
        assert server.client.get("/v1/agents/order-analyst").status_code == 404
    finally:
        assert server.stop() == 0


def test_a_stream_goes_to_the_bulk_reader_in_one_pass_with_one_vocabulary(monkeypatch, engine):
    """The stream is read by one `extend_jsonl` call (one vocabulary of declared values, one
    batch), however many chunks it takes."""
    monkeypatch.setattr(a3fast.fleet.bulk_load, "JSONL_CHUNK", 200)
    calls = []
    real = Fleet.extend_jsonl

    def counted(self, source, **kwargs):
        calls.append(type(source).__name__)
        return real(self, source, **kwargs)

    monkeypatch.setattr(Fleet, "extend_jsonl", counted)
    data = b"\n  \n" + lines(*[{**ANALYST, "agent": {"name": f"a{k}", "namespace": "support"}} for k in range(30)])
    fleet = reader.load_fleet(io.BytesIO(data), engine)
    assert len(calls) == 1 and len(fleet) == 30
    assert fleet.names() == Fleet.load_jsonl(data, engine).names()


def test_a_pipe_that_hands_over_short_reads_is_read_whole_lines_at_a_time(monkeypatch, engine):
    """A pipe's read gives what has arrived, cutting lines anywhere; each chunk is read on to the end
    of its last line, so every line reaches the reader whole and in order."""
    import os
    import threading
    monkeypatch.setattr(a3fast.fleet.bulk_load, "JSONL_CHUNK", 97)
    data = lines(*[{**ANALYST, "agent": {"name": f"p{k}", "namespace": "support"}} for k in range(40)],
                 BAD_CLEARANCE)
    read_end, write_end = os.pipe()

    def feed():
        with os.fdopen(write_end, "wb", buffering=0) as out:
            for at in range(0, len(data), 61):
                out.write(data[at:at + 61])

    writer = threading.Thread(target=feed)
    writer.start()
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        fleet = Fleet(engine)
        problems = fleet.extend_jsonl(pipe, on_error="skip")
    writer.join()
    assert [p.path for p in problems] == ["line 41: $.clearances[0]"]
    assert fleet.names() == Fleet.load_jsonl(data, engine, on_error="skip").names()
    assert len(fleet) == 40
