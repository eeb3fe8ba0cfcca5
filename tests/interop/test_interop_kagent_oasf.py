"""kagent Agent resources and OASF records (AGNTCY directory records), including a record that
embeds an A2A card: imported with the same report as cards, and an OASF record is never read as a
card."""
from __future__ import annotations

import json

import orjson
from click.testing import CliRunner

from a3fast.cli import main
from a3fast.interop.a2a import import_cards, is_oasf_record
from a3fast.interop.oasf import import_records
from a3fast.interop.sources import Document
from a3fast.interop.supply import Supplied
from a3fast.schema import parse_declaration

SUPPLIED = Supplied(capability_version=1, normalise=True, skill_domain="a2a", derive_namespace=True)
RECORD = {
    "schema_version": "v0.7.0", "name": "email-agent", "version": "v1.0.0",
    "authors": ["Example Inc."], "description": "Sends and receives email.",
    "skills": [{"id": 10202, "name": "natural_language_processing/natural_language_generation/summarization"},
               {"id": 60103, "name": "retrieval_augmented_generation/retrieval_of_information/document_retrieval"}],
    "locators": [{"type": "source-code", "url": "https://example.com/email-agent"}],
}
CARD = {"name": "Mail Agent", "url": "https://mail.example.com/a2a", "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3.0", "version": "2", "skills": [{"id": "send_email", "name": "Send"}]}
EMBEDDING = {"name": "Mail Agent", "schema_version": "1.0.0", "version": "2", "authors": ["Mail Agent"],
             "skills": [{"id": 101}], "domains": [],
             "modules": [{"id": 203, "name": "integration/a2a",
                          "data": {"card_data": CARD, "card_schema_version": "v1.0.0"}}]}
KAGENT = """
apiVersion: kagent.dev/v1alpha2
kind: Agent
metadata: {name: k8s-agent, namespace: kagent}
spec:
  type: Declarative
  description: Kubernetes helper
  declarative:
    modelConfig: default-model-config
    systemMessage: You help with clusters.
    a2aConfig:
      skills:
        - {id: get-resources, name: Get resources, description: List resources, tags: [k8s]}
        - {id: Get_Resources, name: duplicate id after normalisation}
    tools:
      - type: McpServer
        mcpServer: {apiGroup: kagent.dev, kind: RemoteMCPServer, name: kagent-tool-server,
                    toolNames: [k8s_get_resources, k8s_describe_resource]}
---
apiVersion: kagent.dev/v1alpha1
kind: Agent
metadata: {name: old-agent, namespace: kagent}
spec:
  systemMessage: hi
  a2aConfig:
    skills: [{id: basic, name: Basic}]
---
apiVersion: kagent.dev/v1alpha2
kind: Agent
metadata: {name: no-skills, namespace: kagent}
spec: {type: Declarative, declarative: {systemMessage: hi}}
"""


def invoke(*args):
    return CliRunner().invoke(main, ["import", *map(str, args)])


def test_an_oasf_record_is_told_apart_from_a_card_by_its_own_fields():
    assert is_oasf_record(RECORD) and is_oasf_record(EMBEDDING) and not is_oasf_record(CARD)
    result = import_cards([Document("r.json", "$", RECORD)], SUPPLIED)
    assert result.declarations == []
    [skip] = result.report.skipped
    assert "OASF record" in skip.reason and "a3fast import oasf" in skip.reason


def test_oasf_taxonomy_skills_become_oasf_capabilities():
    result = import_records([Document("r.json", "$", RECORD)], Supplied(namespace="mail", capability_version=1))
    [decl] = result.declarations
    parse_declaration(decl)
    assert [c["name"] for c in decl["capabilities"]] == [
        "oasf.natural-language-processing.natural-language-generation.summarization",
        "oasf.retrieval-augmented-generation.retrieval-of-information.document-retrieval"]
    assert "endpoint" in result.report.not_derived


def test_an_oasf_record_without_a_namespace_says_what_to_give():
    result = import_records([Document("r.json", "$", RECORD)], SUPPLIED)
    assert result.declarations == [] and "give --namespace" in result.report.skipped[0].reason


def test_an_oasf_record_embedding_a_card_gives_the_cards_skills_and_endpoint():
    result = import_records([Document("r.json", "$", EMBEDDING)], SUPPLIED)
    [decl] = result.declarations
    assert decl["agent"] == {"name": "Mail Agent", "namespace": "mail.example.com"}
    assert [c["name"] for c in decl["capabilities"]] == ["a2a.send-email"]
    assert decl["endpoint"] == {"url": "https://mail.example.com/a2a", "transport": "JSONRPC",
                                "protocol_version": "0.3.0"}
    # The placeholder class id with no name is reported, not guessed at.
    assert any(s.path == "$.skills[0]" for s in result.report.skipped)


def test_import_oasf_cli_writes_declarations(tmp_path):
    path = tmp_path / "records.json"
    path.write_text(json.dumps([RECORD, EMBEDDING]))
    out = tmp_path / "fleet.jsonl"
    result = invoke("oasf", path, "--namespace", "dir", "-o", out)
    assert result.exit_code == 0, result.stderr
    names = [orjson.loads(line)["agent"]["name"] for line in out.read_bytes().splitlines()]
    assert names == ["email-agent", "Mail Agent"]


def test_kagent_agents_give_capabilities_tools_and_namespace(tmp_path):
    path = tmp_path / "agents.yaml"
    path.write_text(KAGENT)
    out = tmp_path / "fleet.jsonl"
    result = invoke("k8s", path, "--allow-empty", "-o", out)
    assert result.exit_code == 0, result.stderr
    fleet = {d["agent"]["name"]: d for d in map(orjson.loads, out.read_bytes().splitlines())}
    agent = fleet["k8s-agent"]
    assert agent["agent"]["namespace"] == "kagent"
    assert [c["name"] for c in agent["capabilities"]] == ["a2a.get-resources"]
    assert agent["tools"] == ["k8s_get_resources", "k8s_describe_resource"]
    assert agent["tool_servers"] == [{"name": "kagent-tool-server", "transport": "kagent",
                                      "kind": "RemoteMCPServer"}]
    assert [c["name"] for c in fleet["old-agent"]["capabilities"]] == ["a2a.basic"]
    # Two skills of one agent that normalise to one capability: a collision, in the report.
    assert "collision: skill id 'Get_Resources'" in result.stderr
    assert "spec.declarative.a2aConfig.skills[1].id" in result.stderr


def test_a_kagent_agents_own_namespace_is_kept_over_the_namespace_flag(tmp_path):
    # --namespace is for a resource that names none, as for an AgentDeclaration
    path = tmp_path / "agents.yaml"
    path.write_text(KAGENT)
    out = tmp_path / "fleet.jsonl"
    result = invoke("k8s", path, "--allow-empty", "--namespace", "staging", "-o", out)
    assert result.exit_code == 0, result.stderr
    fleet = {d["agent"]["name"]: d for d in map(orjson.loads, out.read_bytes().splitlines())}
    assert {d["agent"]["namespace"] for d in fleet.values()} == {"kagent"}
    assert "namespace 'kagent' from metadata.namespace" in result.stderr


def test_kagent_tool_names_that_are_not_an_array_of_names_are_skipped_where_they_are(tmp_path):
    path = tmp_path / "agent.yaml"
    path.write_text("""
apiVersion: kagent.dev/v1alpha2
kind: Agent
metadata: {name: k8s-agent, namespace: kagent}
spec:
  type: Declarative
  declarative:
    a2aConfig:
      skills: [{id: get-resources}, [not, a, skill], {id: 2024-01-01}]
    tools:
      - mcpServer: {name: one, toolNames: get_pods}
      - mcpServer: {name: two, toolNames: 5}
      - mcpServer: {name: three, toolNames: [k8s_logs, 7, ""]}
""")
    out = tmp_path / "fleet.jsonl"
    result = invoke("k8s", path, "-o", out)
    assert result.exit_code == 0, result.stderr
    [agent] = map(orjson.loads, out.read_bytes().splitlines())
    assert agent["tools"] == ["k8s_logs"]    # never a string split into one tool per character
    tools = "document 1: $.spec.declarative.tools"
    assert f"{tools}[0].mcpServer.toolNames: expected the tool names (an array of strings), found string" in result.stderr
    assert f"{tools}[1].mcpServer.toolNames: expected the tool names (an array of strings), found 5" in result.stderr
    assert f"{tools}[2].mcpServer.toolNames[1]: expected a tool name" in result.stderr
    assert f"{tools}[2].mcpServer.toolNames[2]: expected a tool name" in result.stderr
    # a skipped skill is named where it is in the resource, not in the card made from it
    assert "$.spec.declarative.a2aConfig.skills[1]: expected a skill" in result.stderr
    assert "$.spec.declarative.a2aConfig.skills[2].id: expected the skill's id" in result.stderr


def test_a_kagent_agent_with_no_skills_exits_1_and_writes_nothing(tmp_path):
    path = tmp_path / "agents.yaml"
    path.write_text(KAGENT)
    out = tmp_path / "fleet.jsonl"
    result = invoke("k8s", path, "-o", out)
    assert result.exit_code == 1 and not out.exists()
    assert result.stderr.startswith("import k8s: refused: 1 of 3 agents would have no capabilities")
    assert "'no-skills'" in result.stderr


def test_two_agents_whose_different_skill_ids_become_one_capability_are_reported(tmp_path):
    cards = [{"name": "a", "url": "http://a.example/", "skills": [{"id": "book_flight"}]},
             {"name": "b", "url": "http://a.example/", "skills": [{"id": "Book-Flight"}]}]
    result = import_cards([Document("c.json", f"$[{i}]", c) for i, c in enumerate(cards)], SUPPLIED)
    assert [d["capabilities"][0]["name"] for d in result.declarations] == ["a2a.book-flight"] * 2
    [note] = [n for n in result.report.notes if n.topic == "collisions"]
    assert "'Book-Flight' of agent 'b'" in note.message and "'book_flight' of agent 'a'" in note.message


def test_strict_ids_refuse_instead_of_normalising_and_an_empty_agent_exits_1(tmp_path):
    path = tmp_path / "card.json"
    path.write_text(json.dumps({"name": "x", "url": "http://x.example/", "skills": [{"id": "book_flight"}]}))
    out = tmp_path / "fleet.jsonl"
    result = invoke("a2a", path, "--strict-ids", "-o", out)
    assert result.exit_code == 1 and not out.exists()
    assert "--strict-ids" in result.stderr and "refused: 1 of 1 agent would have no capabilities" in result.stderr
    assert invoke("a2a", path, "--strict-ids", "--allow-empty", "-o", out).exit_code == 0


def test_real_server_names_map_to_section_2_domains():
    from a3fast.interop.naming import server_domain

    assert [server_domain(n) for n in ("github-mcp-server", "mcp-server-filesystem", "okta-mcp-server",
                                       "acme-crm", "github")] == ["github", "filesystem", "okta",
                                                                  "acme.crm", "github"]
