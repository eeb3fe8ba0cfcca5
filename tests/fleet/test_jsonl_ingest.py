"""Fleet.load_jsonl / extend_jsonl: JSON Lines declarations in bulk, all or nothing, or skipping."""
from __future__ import annotations

import orjson
import pytest

from a3fast import SchemaError
from a3fast.fleet import Fleet
from a3fast.schema import parse_declaration
from a3fast.workload import generate_fleet, generate_tasks


def jsonl(docs) -> bytes:
    return b"".join(orjson.dumps(d) + b"\n" for d in docs)


def record(p) -> dict:
    content = dict(p.scheduling if p.bound else p.rejection)
    content.pop("timings")
    return content


def test_a_fleet_from_json_lines_places_as_one_built_by_extend(engine, tmp_path):
    decls = generate_fleet(300, seed=11)
    path = tmp_path / "fleet.jsonl"
    path.write_bytes(jsonl(decls))
    built, ingested = Fleet(engine), Fleet.load_jsonl(path, engine)
    built.extend(decls)
    assert ingested.names() == built.names() and len(ingested) == 300
    for task in generate_tasks(decls, 40, seed=12):
        assert record(ingested.place(task)) == record(built.place(task))


def test_a_bad_line_refuses_the_whole_batch_and_changes_nothing(engine):
    fleet = Fleet(engine)
    fleet.extend(generate_fleet(5, seed=13))
    rows, names = fleet.index.row_count(), fleet.names()
    fresh = dict(generate_fleet(1, seed=14)[0], agent={"name": "fresh", "namespace": "ops"},
                 tools=["a-tool-no-one-has"])
    data = jsonl([fresh]) + b'{"v": "1.0", "agent": {"name": "half"}, "capabilities": [], "clearances": []}\n'
    with pytest.raises(SchemaError) as caught:
        fleet.extend_jsonl(data)
    assert [p.path for p in caught.value.problems] == ["line 2: $.agent.namespace"]
    assert fleet.names() == names and fleet.index.row_count() == rows
    assert fleet.place({"tools": ["a-tool-no-one-has"]}).bound is False


def test_skip_leaves_out_bad_lines_and_returns_their_problems(engine):
    good = generate_fleet(3, seed=15)
    data = jsonl(good[:1]) + b"{not json\n\n" + jsonl(good[1:]) + b'{"v": 2}\n'
    fleet = Fleet(engine)
    problems = fleet.extend_jsonl(data, on_error="skip")
    assert len(fleet) == 3
    assert problems[0].path == "line 2: $" and problems[0].expected == "valid JSON"
    assert {p.path.split(":")[0] for p in problems} == {"line 2", "line 6"}


def test_a_bad_line_gets_the_problems_parse_declaration_reports(engine):
    bad = {"v": "9", "agent": {"name": "", "namespace": "x"}, "capabilities": [{"name": "NO", "version": -1}],
           "clearances": ["ok.one", 3], "model": {"latency_class": "slow"}}
    with pytest.raises(SchemaError) as expected:
        parse_declaration(bad)
    with pytest.raises(SchemaError) as caught:
        Fleet(engine).extend_jsonl(b"\n" + orjson.dumps(bad))
    assert caught.value.problems == [
        type(p)("line 2: " + p.path, p.expected, p.found) for p in expected.value.problems]


def test_a_name_held_by_another_namespace_is_a_problem_of_its_line(engine):
    first = dict(generate_fleet(1, seed=16)[0], agent={"name": "same", "namespace": "a"})
    other = dict(first, agent={"name": "same", "namespace": "b"})
    fleet = Fleet(engine)
    with pytest.raises(SchemaError, match="line 2: \\$.agent.namespace"):
        fleet.extend_jsonl(jsonl([first, other]))
    assert len(fleet) == 0
    fleet.add(first)
    assert fleet.extend_jsonl(jsonl([other]), on_error="skip")[0].path == "line 1: $.agent.namespace"


def test_a_repeated_name_replaces_the_earlier_line_in_line_order(engine):
    a, b = generate_fleet(2, seed=17)
    again = dict(b, agent=a["agent"])
    fleet = Fleet(engine)
    fleet.extend_jsonl(jsonl([a, b, again]))
    assert fleet.names() == [a["agent"]["name"], b["agent"]["name"]]
    assert fleet.get(a["agent"]["name"]).doc == again
    fleet.remove(a["agent"]["name"])      # the replaced agent's rows are derived again on removal
    assert fleet.place({"agentRef": a["agent"]["name"]}).bound is False


def test_on_error_must_be_refuse_or_skip():
    with pytest.raises(ValueError, match="on_error"):
        Fleet().extend_jsonl(b"", on_error="ignore")
