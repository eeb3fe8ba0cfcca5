"""Readable explanations and the encode/decode/explain commands."""
import orjson
import pytest
from click.testing import CliRunner

from a3fast.cli import main
from a3fast.explain import all_failed, explain_record, predicate_counts
from a3fast.record.write import placement_records

from factories import declaration, fleet_of, section_3_declaration, section_10_requirements, section_10_summariser

ORDER_ANALYST = section_3_declaration()
SUMMARISER = section_10_summariser()
SECTION_10_REQ = section_10_requirements()


@pytest.fixture
def fleet(engine):
    return fleet_of(engine, [
        declaration(f"a{i}", capabilities=[("x.y", 1 + i % 2)], clearances=["r.read"] if i < 4 else [],
                    residency=["eu"] if i % 3 else ["us"])
        for i in range(6)])


def test_summary_counts_each_predicate_in_derivation_order(fleet):
    p = fleet.place({"capabilities": [{"name": "x.y", "version": 1}], "clearances": ["r.read"], "residency": "eu"})
    assert p.summary() == "1/6 agents eligible: 3 lack capability:x.y/1, 1 lack clearance:r.read, 1 lack residency:eu; chose a2"


def test_counts_say_how_many_reached_and_how_many_were_removed():
    counts = predicate_counts(1000, ["p", "q", "r"], [612, 301, 84])
    assert [(c.reached, c.removed) for c in counts] == [(1000, 612), (388, 301), (87, 84)]


def test_summary_of_an_unschedulable_task(fleet):
    p = fleet.place({"clearances": ["s.admin"], "exclude": ["a0"]})
    assert p.summary() == "0/6 agents eligible: 6 lack clearance:s.admin; unschedulable"


def test_record_read_back_explains_the_same_as_the_placement(fleet):
    p = fleet.place({"capabilities": [{"name": "x.y", "version": 2}], "agentRef": "a3"})
    kind, content = list(placement_records(p))[-1]
    explained = explain_record(3, kind, orjson.loads(content))
    assert explained.summary() == p.summary()
    assert explained.chosen == "a3"


def test_all_failed_lists_every_predicate_not_only_the_first(fleet):
    req = {"capabilities": [{"name": "x.y", "version": 1}], "clearances": ["r.read"], "residency": "eu"}
    failures = all_failed(fleet, req)
    assert failures["a5"] == ["capability:x.y/1", "clearance:r.read"]  # x.y/2, no clearance, eu
    assert failures["a4"] == ["clearance:r.read"]
    assert failures["a3"] == ["capability:x.y/1", "residency:eu"]
    assert "a2" not in failures
    first = fleet.place(req).first_failed()
    assert {name: preds[0] for name, preds in failures.items()} == first


def trace_file(tmp_path, engine):
    f = fleet_of(engine, [ORDER_ANALYST, SUMMARISER])
    lines, seq = [], 1
    for req in (SECTION_10_REQ, {"residency": "us"}):
        for kind, content in placement_records(f.place(req)):
            lines.append(b'{"seq":%d,"kind":"%s","content":%s}' % (seq, kind.encode(), content))
            seq += 1
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    fleet_path = tmp_path / "fleet.jsonl"
    fleet_path.write_bytes(orjson.dumps(ORDER_ANALYST) + b"\n" + orjson.dumps(SUMMARISER) + b"\n")
    return path, fleet_path


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_explain_command_prints_a_verdict_per_placement(tmp_path, engine):
    trace, _ = trace_file(tmp_path, engine)
    result = run("explain", trace)
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "seq 3 task.bound: 1/2 agents eligible: 1 lack capability:order.investigate/2; chose order-analyst",
        "seq 5 task.rejected: 0/2 agents eligible: 2 lack residency:us; unschedulable"]


def test_explain_command_in_detail_with_every_failure(tmp_path, engine):
    trace, fleet = trace_file(tmp_path, engine)
    out = run("explain", trace, "--seq", 3, "--all-failed", "--fleet", fleet).stdout
    assert "capability:order.investigate/2         2         1" in out
    assert "summariser fails capability:order.investigate/2" in out


def test_explain_all_failed_lists_the_placements_candidates_only(tmp_path, engine):
    # a fleet that has grown since (or a Kubernetes filter offered some nodes only): an agent the
    # placement never considered is not among its ineligible candidates
    trace, fleet = trace_file(tmp_path, engine)
    newcomer = declaration("newcomer", capabilities=[], clearances=[])
    grown = tmp_path / "grown.jsonl"
    grown.write_bytes(fleet.read_bytes() + orjson.dumps(newcomer) + b"\n")
    result = run("explain", trace, "--seq", 3, "--all-failed", "--fleet", grown, "--json")
    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout)["all_failed"] == {"summariser": ["capability:order.investigate/2"]}
    # a fleet without one of the placement's candidates is not the fleet it was placed on
    shrunk = tmp_path / "shrunk.jsonl"
    shrunk.write_bytes(orjson.dumps(ORDER_ANALYST) + b"\n")
    result = run("explain", trace, "--seq", 3, "--all-failed", "--fleet", shrunk)
    assert result.exit_code == 2 and "holds no agent 'summariser', 1 of the 2 candidates of seq 3" in result.stderr


def test_explain_counts_each_candidate_once_whatever_filters_failed_repeats(tmp_path, engine):
    # §7 lets a trace list a failure of no candidate, or one candidate twice: no count goes negative
    trace, _ = trace_file(tmp_path, engine)
    records = [orjson.loads(line) for line in trace.read_bytes().splitlines()]
    failed = records[2]["content"]["scheduling"]["filters_failed"]
    failed += [{"candidate": "ghost", "predicate": failed[0]["predicate"]}, dict(failed[0])]
    trace.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    result = run("explain", trace, "--seq", 3)
    assert result.exit_code == 0 and "-" not in result.stdout.splitlines()[0].split(":")[1].split("/")[0]
    assert result.stdout.startswith("seq 3 task.bound: 1/2 agents eligible")


def test_explain_all_failed_needs_the_fleet(tmp_path, engine):
    trace, _ = trace_file(tmp_path, engine)
    result = run("explain", trace, "--all-failed", "--seq", 3)
    assert result.exit_code == 2 and "needs --fleet" in result.stderr


def test_explain_refuses_a_fleet_it_would_not_read(tmp_path, engine):
    # --fleet is read only with --all-failed: taken silently, it seemed to have been used
    trace, fleet = trace_file(tmp_path, engine)
    for args in (["--seq", 3], []):
        result = run("explain", trace, *args, "--fleet", fleet)
        assert result.exit_code == 2 and "--fleet is read only with --all-failed" in result.stderr
        assert result.stdout == ""


def test_explain_names_a_seq_that_is_not_a_placement(tmp_path, engine):
    trace, _ = trace_file(tmp_path, engine)
    result = run("explain", trace, "--seq", 1)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"a3fast: {trace}: seq 1 is a task.submitted record, not a placement with an explanation"


def test_encode_then_decode_gives_back_the_trace(tmp_path, engine):
    trace, _ = trace_file(tmp_path, engine)
    compact, decoded = tmp_path / "c.jsonl", tmp_path / "d.jsonl"
    assert run("encode", trace, "--out", compact).exit_code == 0
    assert run("decode", compact, "--out", decoded).exit_code == 0
    original = [orjson.loads(x) for x in trace.read_bytes().splitlines()]
    assert [orjson.loads(x) for x in decoded.read_bytes().splitlines()] == original
    assert b"a3fast.compact" in compact.read_bytes()
    assert run("explain", compact).stdout == run("explain", trace).stdout


def test_decode_refuses_a_broken_trace_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"seq": 1, "kind": "task.bound", "content": {"a3fast.compact": {"format": 7}}}\nnot json\n')
    out = tmp_path / "out.jsonl"
    result = run("decode", bad, "--out", out)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "line 2" in result.stderr and "format" in result.stderr
    assert not out.exists()
