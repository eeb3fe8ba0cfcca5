"""The `a3fast` command: place, gen-fleet, gen-tasks, demo — results, exit codes and bad input.

Every bad-input path is checked for its exit code (2), its one-line message naming the file and
JSON path, the absence of a traceback, and that no output file is left half-written.
"""
import json

import orjson
import pytest
from click.testing import CliRunner

from a3fast.cli import main

from factories import section_10_order_analyst, section_10_requirements, section_10_summariser

ORDER_ANALYST = section_10_order_analyst()
SUMMARISER = section_10_summariser()
REQ = section_10_requirements()


@pytest.fixture
def files(tmp_path):
    fleet = tmp_path / "fleet.jsonl"
    fleet.write_bytes(b"\n".join(orjson.dumps(d) for d in (ORDER_ANALYST, SUMMARISER)) + b"\n")
    req = tmp_path / "req.json"
    req.write_bytes(orjson.dumps(REQ))
    return tmp_path, str(fleet), str(req)


def run(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def records(output: str):
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def test_place_writes_the_section_10_trace(files, engine):
    _, fleet, req = files
    result = run("place", "--fleet", fleet, "--requirements", req, "--engine", engine)
    assert result.exit_code == 0
    trace = records(result.stdout)
    assert [r["kind"] for r in trace] == ["task.submitted", "task.admitted", "task.bound"]
    assert [r["seq"] for r in trace] == [1, 2, 3]
    assert trace[0]["content"]["requirements"] == REQ
    assert trace[1]["content"]["agent"] == {"name": "order-analyst", "namespace": "support"}
    s = trace[2]["content"]["scheduling"]
    assert s["filters_passed"] == ["capability:order.investigate/2", "clearance:orders.read", "residency:eu"]
    assert s["filters_failed"] == [{"candidate": "summariser", "predicate": "capability:order.investigate/2"}]


def test_place_accepts_a_json_array_fleet(files):
    tmp, _, req = files
    fleet = tmp / "fleet.json"
    fleet.write_bytes(orjson.dumps([ORDER_ANALYST, SUMMARISER]))
    assert run("place", "--fleet", str(fleet), "--requirements", req).exit_code == 0


def test_place_exits_1_when_unschedulable(files):
    tmp, fleet, _ = files
    req = tmp / "r.json"
    req.write_text('{"capabilities": [{"name": "x.y", "version": 1}]}')
    result = run("place", "--fleet", fleet, "--requirements", str(req))
    assert result.exit_code == 1
    assert records(result.stdout)[-1]["kind"] == "task.rejected"
    assert "capability:x.y/1 failed by order-analyst, summariser" in result.stderr


def test_place_output_file_is_written_whole(files):
    tmp, fleet, req = files
    out = tmp / "trace.jsonl"
    assert run("place", "--fleet", fleet, "--requirements", req, "--out", str(out)).exit_code == 0
    assert len(records(out.read_text())) == 3


def bad(result, *expected_lines):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert lines == list(expected_lines)


def test_unreadable_fleet_file(files):
    tmp, _, req = files
    bad(run("place", "--fleet", str(tmp / "missing.jsonl"), "--requirements", req),
        f"a3fast: {tmp / 'missing.jsonl'}: cannot read: No such file or directory")


@pytest.mark.parametrize("args", [("report", "{m}"), ("verify", "{m}"), ("replay", "{m}", "--fleet", "{f}"),
                                  ("serve", "--port", "0", "--fleet", "{m}"), ("explain", "{m}")])
@pytest.mark.parametrize("where, words", [("missing.jsonl", "No such file or directory"),
                                          ("fleet.jsonl/x", "Not a directory")])
def test_a_missing_file_is_said_in_one_way_by_every_command(files, args, where, words):
    # report, replay and serve said "no such file" where the others give the system's words
    tmp, fleet, _ = files
    missing = tmp / where
    result = run(*(a.format(m=missing, f=fleet) for a in args))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{missing}: cannot read: {words}" in result.stderr


def test_invalid_json_in_fleet_names_the_line(files):
    tmp, _, req = files
    fleet = tmp / "broken.jsonl"
    fleet.write_bytes(orjson.dumps(ORDER_ANALYST) + b"\n{\"v\": \n")
    result = run("place", "--fleet", str(fleet), "--requirements", req)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"a3fast: {fleet}: line 2: $: expected valid JSON, found ")


def test_schema_errors_in_fleet_name_line_and_path(files):
    tmp, _, req = files
    fleet = tmp / "bad.jsonl"
    fleet.write_bytes(orjson.dumps(ORDER_ANALYST) + b"\n" + orjson.dumps({**SUMMARISER, "clearances": ["Orders"]}) + b"\n")
    bad(run("place", "--fleet", str(fleet), "--requirements", req),
        f"a3fast: {fleet}: line 2: $.clearances[0]: expected a clearance identifier matching "
        "[a-z0-9]+(\\.[a-z0-9-]+)+, found string 'Orders'")


def test_schema_errors_in_a_json_array_fleet_name_the_index(files):
    tmp, _, req = files
    fleet = tmp / "bad.json"
    fleet.write_bytes(orjson.dumps([ORDER_ANALYST, {**SUMMARISER, "v": "2.0"}]))
    bad(run("place", "--fleet", str(fleet), "--requirements", req),
        f"a3fast: {fleet}: $[1].v: expected schema version 1.x (a3fast reads A3 Capability Schema 1), "
        "found unsupported version '2.0'")


def test_fleet_that_is_not_an_array_or_lines(files):
    tmp, _, req = files
    fleet = tmp / "scalar.json"
    fleet.write_text("[1")
    result = run("place", "--fleet", str(fleet), "--requirements", req)
    assert result.exit_code == 2 and f"a3fast: {fleet}: $: expected valid JSON" in result.stderr


def test_name_conflict_across_namespaces(files):
    tmp, _, req = files
    fleet = tmp / "conflict.jsonl"
    other = {**SUMMARISER, "agent": {"name": "summariser", "namespace": "billing"}}
    fleet.write_bytes(b"\n".join(orjson.dumps(d) for d in (SUMMARISER, other)))
    result = run("place", "--fleet", str(fleet), "--requirements", req)
    assert result.exit_code == 2
    # named as the fleet's bulk reader names it (Fleet.load_jsonl): the line, the path, both
    # namespaces, in the one wording of the scheduling-domain rule
    from a3fast.fleet import namespace_problem

    problem = namespace_problem("line 2: $.agent.namespace", "summariser", "support", "billing")
    assert result.stderr == f"a3fast: {fleet}: {problem}\n"
    assert "'support'" in result.stderr and "'billing'" in result.stderr


def test_invalid_requirements(files):
    tmp, fleet, _ = files
    req = tmp / "req.json"
    req.write_text('{"capabilities": [{"name": "order.investigate", "version": true}], "residency": ["eu"]}')
    bad(run("place", "--fleet", fleet, "--requirements", str(req)),
        f"a3fast: {req}: $.capabilities[0].version: expected a major version (an integer from 0 to 2^63-1), found true",
        f"a3fast: {req}: $.residency: expected a residency label (a string), found array of 1")


def test_requirements_that_are_not_json(files):
    tmp, fleet, _ = files
    req = tmp / "req.json"
    req.write_text("capabilities: x")
    result = run("place", "--fleet", fleet, "--requirements", str(req))
    assert result.exit_code == 2 and result.stderr.startswith(f"a3fast: {req}: $: expected valid JSON, found ")


def test_bad_input_leaves_no_output_file(files):
    tmp, fleet, _ = files
    req = tmp / "req.json"
    req.write_text("[]")
    out = tmp / "trace.jsonl"
    result = run("place", "--fleet", fleet, "--requirements", str(req), "--out", str(out))
    assert result.exit_code == 2
    assert not out.exists() and not list(tmp.glob(".trace.jsonl.*"))


def test_unwritable_output(files):
    tmp, fleet, req = files
    out = tmp / "no-such-dir" / "trace.jsonl"
    bad(run("place", "--fleet", fleet, "--requirements", req, "--out", str(out)),
        f"a3fast: {out}: cannot write: No such file or directory")


def test_fleet_from_standard_input(files):
    _, _, req = files
    fleet = b"\n".join(orjson.dumps(d) for d in (ORDER_ANALYST, SUMMARISER)).decode()
    assert run("place", "--fleet", "-", "--requirements", req, input=fleet).exit_code == 0


def test_gen_fleet_is_deterministic_and_valid(tmp_path):
    a = run("gen-fleet", "--agents", "20", "--seed", "7").stdout
    b = run("gen-fleet", "--agents", "20", "--seed", "7").stdout
    assert a == b and len(a.splitlines()) == 20
    fleet = tmp_path / "f.jsonl"
    fleet.write_text(a)
    tasks = run("gen-tasks", "--fleet", str(fleet), "--tasks", "5").stdout
    assert len(tasks.splitlines()) == 5


def test_gen_fleet_refuses_a_negative_size():
    result = CliRunner().invoke(main, ["gen-fleet", "--agents", "-1"])
    assert result.exit_code == 2 and "Traceback" not in result.output


@pytest.mark.slow
def test_demo_reports_explains_and_verifies(tmp_path, engine):
    trace = tmp_path / "demo.jsonl"
    result = run("demo", "--agents", "200", "--tasks", "40", "--engine", engine, "--trace", str(trace))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "placements/s" in out and "unschedulable" in out
    assert "one decision, explained:" in out and "agents eligible" in out
    assert out.strip().splitlines()[-1].startswith("valid")
    kinds = [r["kind"] for r in records(trace.read_text())]
    assert kinds.count("task.submitted") == 40


def test_explain_json_gives_exactly_the_fields_docs_explain_md_describes(tmp_path):
    """docs/explain.md's table of --json fields, and its example line, are what the command prints."""
    import json
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "explain.md").read_text()
    documented = re.findall(r"^\| `(\w+)` \|", doc, re.M)
    quickstart = Path(__file__).resolve().parents[2] / "examples" / "quickstart"
    trace = tmp_path / "q.jsonl"
    assert run("place", "--fleet", str(quickstart / "fleet.jsonl"), "--requirements", str(quickstart / "req.json"),
               "-o", str(trace)).exit_code == 0
    result = run("explain", str(trace), "--seq", "3", "--all-failed", "--fleet", str(quickstart / "fleet.jsonl"),
                 "--json")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert list(printed) == documented
    shown = json.loads(re.search(r"```json\n(.*?)\n```", doc, re.S).group(1))
    assert {k: v for k, v in printed.items() if k != "scores"} == {k: v for k, v in shown.items() if k != "scores"}
    assert set(printed["scores"]) == set(shown["scores"])
