"""`a3fast import a2a|mcp|k8s`: JSON Lines out, the report on standard error, exit codes, and
nothing half-written."""
from __future__ import annotations

import json
import os
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from a3fast.authority import parse_contracts, parse_mappings
from a3fast.cli import main
from a3fast.schema import parse_declaration

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "interop"
EXAMPLES = REPO / "examples" / "interop"
CARD = {"name": "order-analyst", "url": "https://o.example/", "version": "7",
        "skills": [{"id": "order.investigate"}, {"id": "case.summarise"}]}


def invoke(*args, stdin=None):
    return CliRunner().invoke(main, ["import", *map(str, args)], input=stdin)


def lines(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


@pytest.fixture
def card(tmp_path):
    path = tmp_path / "card.json"
    path.write_text(json.dumps(CARD))
    return path


# -- a2a -----------------------------------------------------------------------------------------
def test_a2a_writes_json_lines_and_reports_on_standard_error(card, tmp_path):
    out = tmp_path / "fleet.jsonl"
    result = invoke("a2a", card, "--namespace", "support", "--capability-version", "2",
                    "--capability-version", "case.summarise=1", "--clearance", "orders.read",
                    "--residency", "eu", "--latency-class", "interactive", "-o", out)
    assert result.exit_code == 0, result.stderr
    [decl] = lines(out)
    parsed = parse_declaration(decl)
    assert [(c.name, c.version) for c in parsed.capabilities] == [("order.investigate", 2), ("case.summarise", 1)]
    assert parsed.clearances == ("orders.read",) and parsed.residency == ("eu",)
    assert result.stdout == ""
    assert result.stderr.startswith("import a2a: 1 agent made from 1 file, 0 items skipped")
    assert "supplied by the caller:" in result.stderr and "model.latency_class" in result.stderr
    assert "model.cost_ceiling_usd" not in result.stderr


def test_a2a_to_standard_output_from_standard_input():
    result = invoke("a2a", "-", "--namespace", "s", "--capability-version", "1", stdin=json.dumps(CARD))
    assert result.exit_code == 0
    assert [orjson.loads(line)["agent"]["name"] for line in result.stdout.splitlines()] == ["order-analyst"]


def test_a2a_reads_a_directory_and_lists_each_skipped_item(tmp_path):
    out = tmp_path / "fleet.jsonl"
    result = invoke("a2a", DATA / "cards", "--namespace", "t", "--capability-version", "1", "-o", out)
    assert result.exit_code == 0
    assert len(lines(out)) == 5
    assert "truncated.json: $: expected valid JSON" in result.stderr
    assert "cards_array.json: $[1].skills: expected an array of skills" in result.stderr


def test_a2a_full_report_as_json(card, tmp_path):
    report = tmp_path / "report.json"
    result = invoke("a2a", card, "--namespace", "s", "--report", report, "-o", tmp_path / "f.jsonl")
    assert result.exit_code == 0
    doc = orjson.loads(report.read_bytes())
    assert doc["kind"] == "a2a" and doc["agents"][0]["shape"] == "v0.2"
    assert doc["supplied"]["capability versions (default 1: a card gives none)"] == ["order-analyst"]
    assert lines(tmp_path / "f.jsonl")[0]["endpoint"] == {"url": "https://o.example/"}
    assert set(doc) == {"kind", "sources", "agents", "counts", "supplied", "not_derived", "notes", "skipped"}


def test_versions_given_skill_by_skill_are_not_reported_as_the_default(card, tmp_path):
    report = tmp_path / "report.json"
    versions = ["--capability-version", "order.investigate=3", "--capability-version", "case.summarise=7"]
    result = invoke("a2a", card, "--namespace", "s", *versions, "--report", report, "-o", tmp_path / "f.jsonl")
    assert result.exit_code == 0, result.stderr
    assert [c["version"] for c in lines(tmp_path / "f.jsonl")[0]["capabilities"]] == [3, 7]
    assert orjson.loads(report.read_bytes())["supplied"] == {"namespace": ["order-analyst"],
                                                               "capability versions": ["order-analyst"]}
    # one skill left to the default: the default is said
    result = invoke("a2a", card, "--namespace", "s", *versions[:2], "--report", report, "-o", tmp_path / "f.jsonl")
    assert "capability versions (default 1: a card gives none)" in orjson.loads(report.read_bytes())["supplied"]


def test_nothing_usable_exits_2_and_leaves_the_output_untouched(tmp_path):
    card = tmp_path / "partial.json"  # no URL: no host to take a namespace from
    card.write_text(json.dumps({k: v for k, v in CARD.items() if k != "url"}))
    out = tmp_path / "fleet.jsonl"
    out.write_text("previous\n")
    result = invoke("a2a", card, "--capability-version", "1", "-o", out)
    assert result.exit_code == 2
    assert "no namespace" in result.stderr and "nothing usable was read" in result.stderr
    assert out.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".fleet")] == []


@pytest.mark.parametrize("kind", ["a2a", "k8s"])
def test_a_path_that_does_not_exist_is_given_not_read(tmp_path, kind):
    result = invoke(kind, tmp_path / "nowhere")
    assert result.exit_code == 2
    # the headline counts what was given; the skipped item says it could not be read
    assert f"import {kind}: nothing usable read; no output written (1 file given, 1 item skipped)" in result.stderr
    assert "nowhere: $: cannot read: No such file or directory" in result.stderr


def test_bad_flags_are_one_line_each_and_exit_2(card):
    result = invoke("a2a", card, "--namespace", "", "--clearance", "Bad", "--capability-version", "x")
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("a3fast: ")]
    assert [e.split(":")[1].strip() for e in errors] == ["--capability-version", "--namespace", "--clearance"]
    assert "Traceback" not in result.stderr and isinstance(result.exception, SystemExit)


def test_a_bad_grants_file_names_the_file_and_the_path(card, tmp_path):
    grants = tmp_path / "grants.yaml"
    grants.write_text("order-analyst: [orders.read, Bad]\n")
    result = invoke("a2a", card, "--namespace", "s", "--grants", grants)
    assert result.exit_code == 2
    assert f"{grants}: $['order-analyst'][1]: expected a clearance identifier" in result.stderr


def test_a_yaml_grants_file_is_read_safely(card, tmp_path):
    grants = tmp_path / "grants.yml"
    grants.write_text("order-analyst:\n  - orders.read\n")
    out = tmp_path / "f.jsonl"
    assert invoke("a2a", card, "--namespace", "s", "--grants", grants, "-o", out).exit_code == 0
    assert lines(out)[0]["clearances"] == ["orders.read"]


def test_a_missing_file_is_a_skipped_item(tmp_path, card):
    out = tmp_path / "f.jsonl"
    result = invoke("a2a", card, tmp_path / "absent.json", "--namespace", "s", "-o", out)
    assert result.exit_code == 0 and "absent.json: $: cannot read" in result.stderr


# -- mcp -----------------------------------------------------------------------------------------
def test_mcp_binds_into_a_fleet_in_place_and_writes_drafts_for_resolve(card, tmp_path):
    fleet = tmp_path / "fleet.jsonl"
    assert invoke("a2a", card, "--namespace", "s", "--capability-version", "1", "-o", fleet).exit_code == 0
    contracts, mappings = tmp_path / "contracts.jsonl", tmp_path / "mappings.jsonl"
    result = invoke("mcp", DATA / "listings" / "page1.json", DATA / "listings" / "page2.json",
                    "--fleet", fleet, "--bind", "order-analyst", "--server", "orders",
                    "--contracts", contracts, "--mappings", mappings, "-o", fleet)
    assert result.exit_code == 0, result.stderr
    [decl] = lines(fleet)
    assert decl["tools"] == ["orders_lookup", "orders_delete", "orders_note", "orders_refresh"]
    drafts = parse_contracts(lines(contracts))
    assert {c.id: c.operation for c in drafts} == {
        "orders.orders-lookup": "read", "orders.orders-delete": "delete",
        "orders.orders-note": "create", "orders.orders-refresh": "modify"}
    assert len(parse_mappings(lines(mappings))) == 4
    assert "annotations ignored (1)" in result.stderr


@pytest.mark.parametrize("second, message", [
    ({"v": "1.0", "agent": {"name": "b", "namespace": "s"}, "capabilities": [{"name": "BAD", "version": 1}],
      "clearances": []},
     "fleet.jsonl: line 2: $.capabilities[0].name: expected a capability identifier"),
    ({"v": "1.0", "agent": {"name": "a", "namespace": "other"}, "capabilities": [], "clearances": []},
     "fleet.jsonl: line 2: $: expected an agent name no other namespace holds"),
])
def test_mcp_refuses_a_fleet_it_would_drop_a_declaration_of(second, message, tmp_path):
    # the caller's fleet passes through: a declaration a fleet would refuse is bad input, not a
    # line silently missing from the fleet written back over it
    fleet = tmp_path / "fleet.jsonl"
    first = {"v": "1.0", "agent": {"name": "a", "namespace": "s"}, "capabilities": [{"name": "x.y", "version": 1}],
             "clearances": []}
    third = {"v": "1.0", "agent": {"name": "c", "namespace": "s"}, "capabilities": [], "clearances": []}
    fleet.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in (first, second, third)))
    before = fleet.read_bytes()
    result = invoke("mcp", DATA / "listings" / "page1.json", "--fleet", fleet, "--bind", "a", "-o", fleet)
    assert result.exit_code == 2
    assert message in result.stderr
    assert fleet.read_bytes() == before


@pytest.mark.parametrize("args, message", [
    ((), "nothing to do"),
    (("--bind-all",), "--bind-all"),
    (("--contracts", "{tmp}/c.jsonl"), "--server"),
    (("--contracts", "{tmp}/c.jsonl", "--server", "x", "-o", "{tmp}/f.jsonl"), "--output"),
    (("--bind", "a", "--capability", "nope"), "--capability"),
])
def test_mcp_usage_errors_exit_2_and_write_nothing(args, message, tmp_path):
    result = invoke("mcp", DATA / "listings" / "page1.json", *(a.format(tmp=tmp_path) for a in args))
    assert result.exit_code == 2 and message in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_mcp_with_only_an_error_response_exits_2():
    result = invoke("mcp", DATA / "listings" / "rpc_error.json", "--bind", "a", "--namespace", "n")
    assert result.exit_code == 2 and "JSON-RPC error response" in result.stderr


# -- k8s -----------------------------------------------------------------------------------------
def test_k8s_reads_a_directory_of_manifests(tmp_path):
    out = tmp_path / "fleet.jsonl"
    result = invoke("k8s", DATA / "manifests", "--namespace", "fallback", "-o", out)
    assert result.exit_code == 0
    names = [d["agent"]["name"] for d in lines(out)]
    assert set(names) == {"survivor", "order-analyst", "summariser", "triager", "first"}
    assert "python/object/apply" in result.stderr and "YAML aliases" in result.stderr


def test_k8s_without_a_declaration_exits_2(tmp_path):
    manifest = tmp_path / "plain.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    result = invoke("k8s", manifest)
    assert result.exit_code == 2 and "objects without a declaration: 1" in result.stderr


# -- the worked example of docs/interop.md ---------------------------------------------------------
def test_worked_example_builds_a_fleet_and_places_tasks(tmp_path):
    shared = REPO / "examples" / "interop" / "public"     # the copies the repository ships
    fleet = tmp_path / "fleet.jsonl"
    result = invoke("a2a", shared / "agent-cards", "--namespace", "demo", "--capability-version", "1",
                    "--normalise", "--skill-domain", "demo", "--grants", EXAMPLES / "grants.json", "-o", fleet)
    assert result.exit_code == 0, result.stderr
    result = invoke("mcp", shared / "mcp-tools" / "github-mcp-server__tools_list.json",
                    "--fleet", fleet, "--bind", "basic", "-o", fleet)
    assert result.exit_code == 0, result.stderr

    runner = CliRunner()
    placed = runner.invoke(main, ["place", "--fleet", str(fleet), "--requirements", str(EXAMPLES / "task.json")])
    assert placed.exit_code == 0, placed.stderr
    records = [orjson.loads(line) for line in placed.stdout.splitlines()]
    assert [r["kind"] for r in records] == ["task.submitted", "task.admitted", "task.bound"]
    assert records[2]["content"]["scheduling"]["declaration"]["agent"] == {"name": "basic", "namespace": "demo"}

    rejected = runner.invoke(main, ["place", "--fleet", str(fleet), "--requirements",
                                    str(EXAMPLES / "task-unschedulable.json")])
    assert rejected.exit_code == 1
    assert "tool:create_pull_request failed by Currency Conversion Agent" in rejected.stderr


def test_a2a_json_lines_with_a_broken_line_imports_the_other_lines(tmp_path):
    # one card cut short among three is one skipped item, not the loss of the file's other cards
    cards = [json.dumps({**CARD, "name": f"agent{i}"}) for i in range(3)]
    for broken in (1, 0):   # the first line broken too: the next one says the file is JSON Lines
        lines_of = list(cards)
        lines_of[broken] = lines_of[broken][:40]
        path = tmp_path / "cards.jsonl"
        path.write_text("\n".join(lines_of) + "\n")
        out = tmp_path / "fleet.jsonl"
        result = invoke("a2a", path, "--namespace", "s", "--capability-version", "1", "-o", out)
        assert result.exit_code == 0, result.stderr
        assert [d["agent"]["name"] for d in lines(out)] == [f"agent{i}" for i in range(3) if i != broken]
        assert "2 agents made from 1 file, 1 item skipped" in result.stderr
        assert f"cards.jsonl: line {broken + 1}: $: expected valid JSON" in result.stderr


def test_mcp_reads_an_empty_last_page_of_a_listing(tmp_path):
    # `{"tools": []}` is a listing too (a server with no tools, an empty last page), never refused
    # as requirements
    page1 = tmp_path / "p1.json"
    page1.write_text(json.dumps({"tools": [{"name": "t", "inputSchema": {"type": "object"}}], "nextCursor": "2"}))
    page2 = tmp_path / "p2.json"
    page2.write_text(json.dumps({"tools": []}))
    out = tmp_path / "fleet.jsonl"
    result = invoke("mcp", page1, page2, "--bind", "ag", "--namespace", "ns", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert [d["tools"] for d in lines(out)] == [["t"]]


def test_a_broken_array_of_cards_a_line_each_stays_one_broken_document(tmp_path):
    # a comma forgotten after the first card: never read as JSON Lines, which would drop a card
    cards = [json.dumps({**CARD, "name": f"agent{i}"}) for i in range(3)]
    path = tmp_path / "cards.json"
    path.write_text("[\n" + cards[0] + "\n" + cards[1] + ",\n" + cards[2] + "\n]\n")
    out = tmp_path / "fleet.jsonl"
    result = invoke("a2a", path, "--namespace", "s", "--capability-version", "1", "-o", out)
    assert result.exit_code == 2 and not out.exists()
    assert "cards.json: $: expected valid JSON" in result.stderr



def test_the_report_shows_a_file_name_with_control_characters_escaped(tmp_path):
    # a name that is not UTF-8, or holds an escape sequence, never reaches the terminal raw
    path = os.fsdecode(bytes(tmp_path) + b"/card\xff\x1b[31m.json")
    Path(path).write_text(json.dumps({**CARD, "skills": [{"id": "book_air_tickets"}]}))   # a note names the file
    result = invoke("a2a", path, "--namespace", "s", "--capability-version", "1", "-o", tmp_path / "fleet.jsonl")
    assert result.exit_code == 0, result.stderr
    assert "card\\xff\\x1b[31m.json" in result.stderr and "\x1b" not in result.stderr


@pytest.mark.parametrize("flag, value", [
    ("--capability-version", "1" * 5000), ("--capability-version", "case.summarise=" + "7" * 5000),
    ("--capability-version", "9" * 25)])
def test_a_version_of_thousands_of_digits_is_a_flag_problem_not_an_internal_error(card, tmp_path, flag, value):
    result = invoke("a2a", card, "--namespace", "support", flag, value, "-o", tmp_path / "f.jsonl")
    assert result.exit_code == 2, result.output
    assert "--capability-version" in result.stderr and "internal error" not in result.stderr
    assert len(result.stderr) < 400


def test_an_mcp_capability_version_of_thousands_of_digits_is_a_flag_problem(tmp_path):
    listing = tmp_path / "tools.json"
    listing.write_text(json.dumps({"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}))
    result = invoke("mcp", listing, "--namespace", "n", "--bind", "agent-a", "--capability", "a.b/" + "1" * 5000)
    assert result.exit_code == 2 and "--capability: expected NAME/VERSION" in result.stderr
    assert "internal error" not in result.stderr and len(result.stderr) < 400


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a device that is always full")
def test_an_output_that_cannot_be_written_leaves_every_other_unwritten_and_no_headline_of_success(card, tmp_path):
    import subprocess
    import sys

    report = tmp_path / "report.json"
    with open("/dev/full", "wb") as full:
        done = subprocess.run([sys.executable, "-m", "a3fast", "import", "a2a", str(card), "--report", str(report)],
                              stdout=full, stderr=subprocess.PIPE, timeout=120)
    assert done.returncode == 2
    assert done.stderr.decode() == "a3fast: output: cannot write: No space left on device\n"
    assert not report.exists()
    done = subprocess.run([sys.executable, "-m", "a3fast", "import", "a2a", str(card), "-o", "/dev/full"],
                          capture_output=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.decode() == "a3fast: /dev/full: cannot write: No space left on device\n"


def test_members_of_the_wrong_type_are_skipped_items_named_at_their_paths(tmp_path):
    kagent = tmp_path / "agent.yaml"
    kagent.write_text("apiVersion: kagent.dev/v1alpha2\nkind: Agent\nmetadata: {name: kag2, namespace: kn}\n"
                      "spec: {declarative: {a2aConfig: {skills: {id: foo.bar}}, tools: github}}\n")
    result = invoke("k8s", kagent)
    assert "$.spec.declarative.a2aConfig.skills: expected the skills (an array), found " in result.stderr
    assert "$.spec.declarative.tools: expected the tools (an array), found string 'github'" in result.stderr
    record = tmp_path / "record.json"
    record.write_bytes(orjson.dumps({"schema_version": "v0.5.0", "name": "rec", "locators": [],
                                     "skills": {"name": "natural_language_processing/summarization"}}))
    result = invoke("oasf", record, "--namespace", "n")
    assert "$.skills: expected the record's skills (an array), found " in result.stderr


def test_a_tool_name_that_breaks_the_text_rule_is_skipped_alone_at_its_manifest_path(tmp_path):
    kagent = tmp_path / "agent.yaml"
    kagent.write_text('apiVersion: kagent.dev/v1alpha2\nkind: Agent\nmetadata: {name: kag, namespace: kn}\n'
                      'spec: {declarative: {a2aConfig: {skills: [{id: foo.bar}]}, '
                      'tools: [{mcpServer: {name: s, toolNames: [good, "bad\\e[31m"]}}]}}\n')
    result = invoke("k8s", kagent, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.output
    assert ("$.spec.declarative.tools[0].mcpServer.toolNames[1]: expected a tool name (no control characters)"
            in result.stderr)
    [declaration] = lines(tmp_path / "out.jsonl")
    assert declaration["tools"] == ["good"]


def test_a_json_rpc_error_written_as_a_string_is_told_as_the_error_it_is(tmp_path):
    listing = tmp_path / "listing.json"
    listing.write_bytes(orjson.dumps({"jsonrpc": "2.0", "id": 1, "error": "rate limited"}))
    result = invoke("mcp", listing, "--server", "srv", "--contracts", tmp_path / "contracts.jsonl")
    assert result.exit_code == 2
    assert "$.error: expected a tools/list result, found a JSON-RPC error response (error string 'rate limited')" \
        in result.stderr


def test_a_link_to_nowhere_in_an_input_directory_is_a_file_that_cannot_be_read(card, tmp_path):
    folder = tmp_path / "cards"
    folder.mkdir()
    (folder / "good.json").write_bytes(Path(card).read_bytes())
    (folder / "broken.json").symlink_to(tmp_path / "nowhere.json")
    result = invoke("a2a", folder, "-o", tmp_path / "out.jsonl")
    assert "1 agent made from 2 files, 1 item skipped" in result.stderr
    assert "broken.json: $: cannot read: No such file or directory" in result.stderr


def test_a_transport_or_version_of_the_wrong_type_is_a_skipped_item_and_no_transport_is_made_up(tmp_path):
    path = tmp_path / "card.json"
    path.write_bytes(orjson.dumps({**CARD, "url": "https://t.example/a2a", "preferredTransport": 5,
                                   "protocolVersion": 3}))
    result = invoke("a2a", path, "-o", tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.output
    assert "$.preferredTransport: expected a name (a string), found 5" in result.stderr
    assert "$.protocolVersion: expected a name (a string), found 3" in result.stderr
    [declaration] = lines(tmp_path / "out.jsonl")
    assert declaration["endpoint"] == {"url": "https://t.example/a2a"}


def test_an_agent_declarations_name_of_the_wrong_type_is_named_where_it_is(tmp_path):
    manifest = tmp_path / "decl.yaml"
    manifest.write_text('apiVersion: a3.dev/v1alpha1\nkind: AgentDeclaration\nmetadata: {name: 5, namespace: n}\n'
                        'spec: {v: "1.0", capabilities: [], clearances: []}\n')
    result = invoke("k8s", manifest)
    assert result.exit_code == 2
    assert "$.metadata.name: expected the object's name (a string), found 5" in result.stderr
    assert "spec.agent.name" not in result.stderr


def test_an_import_run_again_into_its_cards_directory_skips_the_fleet_it_wrote(tmp_path):
    # "an unreadable or invalid input file among many is a skipped item": the declarations an
    # earlier run wrote beside the cards are one such file; given alone, it is the one line, exit 2
    cards = tmp_path / "cards"
    cards.mkdir()
    for i in range(2):
        (cards / f"card{i}.json").write_text(json.dumps({"name": f"agent-{i}", "url": f"https://a{i}.example/",
                                                         "skills": [{"id": "case.review"}]}))
    out = cards / "fleet.jsonl"
    runner = CliRunner()
    first = runner.invoke(main, ["import", "a2a", str(cards), "--namespace", "n", "-o", str(out)])
    assert first.exit_code == 0, first.stderr
    written = out.read_bytes()
    again = runner.invoke(main, ["import", "a2a", str(cards), "--namespace", "n", "-o", str(out)])
    assert again.exit_code == 0, again.stderr
    assert f"{out}: $: looks like declarations, not A2A agent cards" in again.stderr
    assert out.read_bytes() == written
    alone = runner.invoke(main, ["import", "a2a", str(out), "--namespace", "n"])
    assert alone.exit_code == 2 and alone.stderr.endswith("looks like declarations, not A2A agent cards\n")


def test_an_import_output_that_is_one_of_its_input_files_is_refused_and_the_input_kept(tmp_path):
    card = tmp_path / "card.json"
    card.write_text(json.dumps({"name": "a", "url": "https://a.example/", "skills": [{"id": "case.review"}]}))
    before = card.read_bytes()
    for output in (["-o", str(card)], ["--report", str(card)]):
        result = CliRunner().invoke(main, ["import", "a2a", str(card), "--namespace", "n", *output])
        assert result.exit_code == 2
        assert result.stderr == f"a3fast: {card}: an output must not replace {card}, which this command reads\n"
        assert card.read_bytes() == before
