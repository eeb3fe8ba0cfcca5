"""Kubernetes manifests -> declarations (A3 §1), and the AgentDeclaration CRD generated from the
parser's own rules."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from a3fast.errors import SchemaError
from a3fast.interop.crd import agent_declaration_crd, declaration_schema, json_schema, render_crd
from a3fast.interop.kubernetes import (ANNOTATION, GROUP, KIND, VERSIONS, declarations_from_manifests,
                                       fill_agent)
from a3fast.interop.report import ImportReport
from a3fast.interop.sources import Document, to_json, yaml_documents
from a3fast.interop.supply import Supplied
from a3fast.schema import MAX_TEXT, MAX_VERSION, parse_declaration

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parents[1] / "data" / "interop" / "manifests"
DECL = {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 2}], "clearances": []}


def manifests(text: str, supplied: Supplied | None = None):
    docs, problems = yaml_documents(text.encode(), "m.yaml")
    assert problems == []
    return declarations_from_manifests(docs, supplied)


def annotated(kind="Deployment", name="order-analyst", namespace="support", decl=DECL):
    meta = {"name": name, "annotations": {ANNOTATION: json.dumps(decl)}}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta}


def resource(spec, name="summariser", namespace="support", api=f"{GROUP}/{VERSIONS[0]}"):
    return {"apiVersion": api, "kind": KIND, "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def run(*objects, supplied=None):
    docs = [Document("m.yaml", f"document {i + 1}: $", obj) for i, obj in enumerate(objects)]
    return declarations_from_manifests(docs, supplied)


# -- where a declaration is carried ----------------------------------------------------------------
def test_multi_document_yaml_with_an_annotation_and_a_resource():
    result = declarations_from_manifests(yaml_documents((DATA / "fleet.yaml").read_bytes(), "fleet.yaml")[0])
    assert [d["agent"] for d in result.declarations] == [
        {"name": "order-analyst", "namespace": "support"}, {"name": "summariser", "namespace": "support"}]
    assert result.declarations[0]["residency"] == ["eu"]
    assert result.declarations[1]["model"] == {"latency_class": "batch"}
    assert result.report.counts["objects without a declaration"] == 1  # the ConfigMap
    assert result.report.skipped == []


@pytest.mark.parametrize("kind", ["Deployment", "Service", "Agent", "ConfigMap"])
def test_the_annotation_is_read_on_any_object_with_metadata(kind):
    [decl] = run(annotated(kind=kind)).declarations
    assert decl["agent"] == {"name": "order-analyst", "namespace": "support"}
    assert list(decl)[:2] == ["v", "agent"]


def test_list_kinds_are_read_item_by_item_with_paths_into_the_items():
    docs, _ = yaml_documents((DATA / "list.json").read_bytes(), "list.json")
    result = declarations_from_manifests(docs, Supplied(namespace="fallback"))
    assert [d["agent"] for d in result.declarations] == [{"name": "triager", "namespace": "fallback"}]
    assert result.report.supplied["namespace"] == ["triager"]
    [skip] = result.report.skipped
    assert skip.path == ("document 1: $.items[1].items[0].metadata.annotations['a3.dev/declaration'] "
                         "(JSON) $.capabilities[0].name")


def test_a_list_that_contains_itself_stops():
    docs, problems = yaml_documents(b"&l {kind: List, items: [*l]}", "self.yaml")
    assert problems == []
    result = declarations_from_manifests(docs)
    assert "contains itself" in result.report.skipped[0].reason


# -- filling the agent from metadata -------------------------------------------------------------
def test_metadata_fills_only_what_the_declaration_leaves_out():
    decl, derived, given = fill_agent({**DECL, "agent": {"name": "own"}}, {"name": "pod", "namespace": "ns"}, None)
    assert decl["agent"] == {"name": "own", "namespace": "ns"} and derived == ["agent.namespace"]
    decl, derived, given = fill_agent(dict(DECL), {"name": "pod"}, "cli")
    assert decl["agent"] == {"name": "pod", "namespace": "cli"} and given == ["namespace"]
    decl, derived, given = fill_agent({**DECL, "agent": "x"}, {"name": "pod"}, "cli")
    assert decl["agent"] == "x"  # left for the parser to report


def test_an_empty_metadata_namespace_is_none_and_the_supplied_one_is_taken():
    # Kubernetes reads namespace "" as unset (a cluster-scoped object's), as the kagent path does
    [decl] = run(annotated(namespace=""), supplied=Supplied(namespace="sup")).declarations
    assert decl["agent"] == {"name": "order-analyst", "namespace": "sup"}
    decl, derived, given = fill_agent(dict(DECL), {"name": "pod", "namespace": ""}, "cli")
    assert decl["agent"]["namespace"] == "cli" and given == ["namespace"] and derived == ["agent.name"]


@pytest.mark.parametrize("obj", [
    {"apiVersion": f"{GROUP}/{VERSIONS[0]}", "kind": KIND, "spec": {**DECL, "agent": {"name": "a", "namespace": "n"}}},
    {"apiVersion": f"{GROUP}/{VERSIONS[0]}", "kind": KIND, "metadata": "x", "spec": DECL},
    {"apiVersion": "kagent.dev/v1alpha2", "kind": "Agent", "spec": {"description": "x"}}])
def test_an_object_that_declares_an_agent_by_its_kind_without_metadata_is_skipped_with_the_reason(obj):
    result = run({"apiVersion": "v1", "kind": "ConfigMap"}, obj)
    assert result.declarations == []
    [skip] = result.report.skipped
    assert skip.path == "document 2: $.metadata" and "metadata (an object)" in skip.reason
    assert result.report.counts["objects without metadata (ignored)"] == 1      # the ConfigMap


def test_without_any_namespace_the_object_is_skipped_with_the_reason():
    result = run(annotated(namespace=None))
    assert result.declarations == []
    [skip] = result.report.skipped
    assert skip.path.endswith("(JSON) $.agent.namespace") and "no namespace" in skip.reason


def test_resource_spec_is_the_declaration():
    [decl] = run(resource({**DECL, "agent": {"name": "declared"}})).declarations
    assert decl["agent"] == {"name": "declared", "namespace": "support"}
    assert parse_declaration(decl).capabilities[0].version == 2


@pytest.mark.parametrize("obj, path, reason", [
    (resource(DECL, api=f"{GROUP}/v9"), "document 1: $.apiVersion", "v1alpha1"),
    ({**resource(DECL), "spec": None}, "document 1: $.spec", "an object"),
    ({k: v for k, v in resource(DECL).items() if k != "spec"}, "document 1: $.spec", "found nothing"),
    (resource({**DECL, "clearances": ["Bad"]}), "document 1: $.spec.clearances[0]", "clearance"),
    (annotated(decl=None) | {"metadata": {"name": "x", "namespace": "y", "annotations": {ANNOTATION: "{"}}},
     "document 1: $.metadata.annotations['a3.dev/declaration']", "as JSON"),
    ({"kind": "Service", "metadata": {"name": "x", "annotations": {ANNOTATION: {"v": "1.0"}}}},
     "document 1: $.metadata.annotations['a3.dev/declaration']", "a JSON string"),
    ("just text", "document 1: $", "a Kubernetes object"),
])
def test_bad_declarations_are_skipped_at_their_path(obj, path, reason):
    result = run(obj)
    assert result.declarations == []
    assert any(s.path == path and reason in s.reason for s in result.report.skipped), result.report.skipped


def test_an_agent_declaration_of_another_group_is_not_read_as_ours():
    result = run(resource(DECL, api="example.com/v1"))
    assert result.declarations == []
    assert [n.topic for n in result.report.notes] == ["not ours"]


def test_a_name_in_two_namespaces_keeps_the_first_and_says_why():
    result = run(annotated(namespace="support"), annotated(namespace="billing"))
    assert [d["agent"]["namespace"] for d in result.declarations] == ["support"]
    assert "already used in namespace 'support'" in result.report.skipped[0].reason


# -- hostile YAML --------------------------------------------------------------------------------
def test_an_alias_bomb_is_refused_and_the_next_document_still_read():
    docs, problems = yaml_documents((DATA / "alias_bomb.yaml").read_bytes(), "bomb.yaml")
    assert problems == []
    result = declarations_from_manifests(docs)
    assert [d["agent"]["name"] for d in result.declarations] == ["survivor"]
    assert "YAML aliases" in result.report.skipped[0].reason


def test_python_tags_are_refused_by_the_safe_loader():
    docs, problems = yaml_documents((DATA / "python_tag.yaml").read_bytes(), "evil.yaml")
    assert docs == []
    [problem] = problems
    assert problem.path == "line 6, column 25" and "python/object/apply" in problem.found


def test_documents_before_a_syntax_error_are_kept():
    docs, problems = yaml_documents((DATA / "syntax_error.yaml").read_bytes(), "s.yaml")
    assert len(docs) == 1 and problems[0].path.startswith("line 9")
    assert [d["agent"]["name"] for d in declarations_from_manifests(docs).declarations] == ["first"]


@pytest.mark.parametrize("text, path, found", [
    ("a: 2024-01-01", "$.a", "YAML date"),
    ("a: !!binary aGVsbG8=", "$.a", "YAML bytes"),
    ("a: .nan", "$.a", "nan"),
    ("{1: x}", "$", "key 1"),
    ("a: !!set {x}", "$.a", "YAML set"),
])
def test_values_that_are_not_json_are_errors_at_their_path(text, path, found):
    value = yaml.safe_load(text)
    with pytest.raises(SchemaError) as err:
        to_json(value)
    assert err.value.problems[0].path == path and found in err.value.problems[0].found


@pytest.mark.parametrize("depth, reason", [(5000, "nesting too deep"), (400, "at most 128 nested")])
def test_deep_nesting_is_an_error_not_a_crash(depth, reason):
    deep = ("[" * depth + "]" * depth).encode()
    text = b"apiVersion: a3.dev/v1alpha1\nkind: AgentDeclaration\nmetadata: {name: d, namespace: n}\n" \
           b"spec: {v: '1.0', capabilities: [], clearances: [], extra: " + deep + b"}\n"
    docs, problems = yaml_documents(text, "deep.yaml")
    if problems:  # the loader may give up first (PyYAML >= 6.0.4 has its own depth limit); no crash
        assert "too deep" in problems[0].found or "nesting depth" in problems[0].found
        return
    result = declarations_from_manifests(docs)
    assert result.declarations == []
    assert reason in result.report.skipped[0].reason


# -- the CRD -------------------------------------------------------------------------------------
def test_deploy_crd_is_the_generated_one():
    assert (REPO / "deploy" / "agentdeclaration-crd.yaml").read_text() == render_crd()


def test_crd_names_and_versions_match_what_the_reader_accepts():
    crd = yaml.safe_load(render_crd())
    assert crd["metadata"]["name"] == f"agentdeclarations.{GROUP}"
    assert crd["spec"]["group"] == GROUP and crd["spec"]["names"]["kind"] == KIND
    assert [v["name"] for v in crd["spec"]["versions"]] == list(VERSIONS)


def _structural_problems(node, path="$"):
    """Kubernetes' structural-schema rule: every node states a type unless it preserves unknown fields."""
    problems = []
    if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        problems.append(path)
    for key, child in (node.get("properties") or {}).items():
        problems += _structural_problems(child, f"{path}.{key}")
    if "items" in node:
        problems += _structural_problems(node["items"], f"{path}[]")
    return problems


def test_crd_schema_is_structural():
    schema = agent_declaration_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _structural_problems(schema) == []


BASE = {"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": [], "clearances": []}
CASES = [
    ("minimal", BASE, True),
    ("full", {**BASE, "capabilities": [{"name": "order.investigate", "version": 2, "description": "d",
                                        "inputs": {"type": "object"}, "evaluation": "suite-7"}],
              "clearances": ["orders.read", "data.pii-read"], "residency": ["eu"], "tools": ["x:y/z"],
              "model": {"latency_class": "batch", "cost_ceiling_usd": "0.75"}, "extra": [1]}, True),
    ("nulls where the parser takes absent", {**BASE, "residency": None, "tools": None, "model": None}, True),
    ("null model fields", {**BASE, "model": {"latency_class": None, "cost_ceiling_usd": None}}, True),
    ("v 1.2.3", {**BASE, "v": "1.2.3"}, True),
    ("v 2.0", {**BASE, "v": "2.0"}, False),
    ("v number", {**BASE, "v": 1.0}, False),
    ("no v", {k: v for k, v in BASE.items() if k != "v"}, False),
    ("no agent", {k: v for k, v in BASE.items() if k != "agent"}, False),
    ("no namespace", {**BASE, "agent": {"name": "a"}}, False),
    ("empty name", {**BASE, "agent": {"name": "", "namespace": "n"}}, False),
    ("control character in name", {**BASE, "agent": {"name": "a\u0007", "namespace": "n"}}, False),
    ("name too long", {**BASE, "agent": {"name": "a" * (MAX_TEXT + 1), "namespace": "n"}}, False),
    ("name at the limit", {**BASE, "agent": {"name": "a" * MAX_TEXT, "namespace": "n"}}, True),
    ("no capabilities", {k: v for k, v in BASE.items() if k != "capabilities"}, False),
    ("capability without version", {**BASE, "capabilities": [{"name": "a.b"}]}, False),
    ("capability name outside §2", {**BASE, "capabilities": [{"name": "Order", "version": 1}]}, False),
    ("single-segment capability", {**BASE, "capabilities": [{"name": "order", "version": 1}]}, False),
    ("negative version", {**BASE, "capabilities": [{"name": "a.b", "version": -1}]}, False),
    ("boolean version", {**BASE, "capabilities": [{"name": "a.b", "version": True}]}, False),
    ("largest version", {**BASE, "capabilities": [{"name": "a.b", "version": MAX_VERSION}]}, True),
    ("version too large", {**BASE, "capabilities": [{"name": "a.b", "version": MAX_VERSION + 1}]}, False),
    ("clearance outside §2", {**BASE, "clearances": ["orders read"]}, False),
    ("empty residency label", {**BASE, "residency": [""]}, False),
    ("residency as a string", {**BASE, "residency": "eu"}, False),
    ("tool with a tab", {**BASE, "tools": ["a\tb"]}, False),
    ("latency class unknown", {**BASE, "model": {"latency_class": "fast"}}, False),
    ("cost as a number", {**BASE, "model": {"cost_ceiling_usd": 0.75}}, False),
    ("cost with a comma", {**BASE, "model": {"cost_ceiling_usd": "0,75"}}, False),
    ("model as a string", {**BASE, "model": "fast"}, False),
]


@pytest.mark.parametrize("doc, valid", [(doc, valid) for _, doc, valid in CASES],
                         ids=[name for name, _, _ in CASES])
def test_crd_schema_and_parser_accept_the_same_declarations(doc, valid):
    # Python's `$` also matches before a final newline, unlike ECMA-262 and RE2 (what an API server
    # runs), so no case here ends in one: that difference is Python's, not the schema's.
    validator = jsonschema.Draft202012Validator(json_schema(declaration_schema()))
    schema_says = validator.is_valid(doc)
    try:
        parse_declaration(doc)
        parser_says = True
    except SchemaError:
        parser_says = False
    assert (schema_says, parser_says) == (valid, valid)


def test_spec_schema_lets_metadata_supply_the_agent():
    validator = jsonschema.Draft202012Validator(json_schema(declaration_schema(agent_required=False)))
    assert validator.is_valid(DECL)
    assert validator.is_valid({**DECL, "agent": {"name": "x"}})
    assert not validator.is_valid({**DECL, "agent": {"name": ""}})


def test_lists_named_again_through_yaml_aliases_are_read_once():
    # a few hundred bytes of Lists of aliases of Lists would otherwise stand for 10^9 objects
    text = "kind: List\nitems:\n- &l0\n  kind: List\n  items:\n"
    text += "  - {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n" * 10
    for level in range(1, 9):
        text += f"- &l{level}\n  kind: List\n  items:\n" + f"  - *l{level - 1}\n" * 10
    docs, problems = yaml_documents(text.encode(), "bomb.yaml")
    assert not problems and len(text) < 2000
    report = ImportReport("k8s")
    declarations_from_manifests(docs, report=report)
    counts = report.to_dict()["counts"]
    assert counts["Lists named again through a YAML alias (read once)"] == 8 * 10
    assert counts["objects without a declaration"] == 10


def test_an_object_named_again_through_a_yaml_alias_is_read_once():
    decl = json.dumps({**DECL, "agent": {"name": "a", "namespace": "n"}})
    text = ("kind: List\nitems:\n- &o {apiVersion: a3.dev/v1, kind: ConfigMap, metadata: {name: a, annotations: "
            "{%s: '%s'}}}\n" % (ANNOTATION, decl)) + "- *o\n" * 2000
    docs, problems = yaml_documents(text.encode(), "aliases.yaml")
    assert not problems
    report = ImportReport("k8s")
    result = declarations_from_manifests(docs, report=report)
    assert [d["agent"]["name"] for d in result.declarations] == ["a"]
    assert report.to_dict()["counts"]["objects named again through a YAML alias (read once)"] == 2000
