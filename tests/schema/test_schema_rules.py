"""§2–§4 rule by rule, down to the words: each problem a document has is named by its JSON path,
what the rule expected and what was found (a3fast.schema), whichever of the two readers took it."""
from __future__ import annotations

from types import MappingProxyType

import pytest

from a3fast import Declaration, Requirements, SchemaError, parse_declaration, parse_requirements
from a3fast.engines import NATIVE_AVAILABLE
from a3fast.schema import requirements_reader
from a3fast.schema import AgentName, ProblemReader, task_kind

DECL = {"v": "1.0", "agent": {"name": "order-analyst", "namespace": "support"},
        "capabilities": [{"name": "order.investigate", "version": 2}], "clearances": ["orders.read"]}


def problems(parse, doc, *path):
    """Every problem named, as text; the document is read as a dict (the fast reader first) and as a
    read-only Mapping (the careful reader only), and both must name the same problems."""
    named = []
    for form in (doc, MappingProxyType(doc)):
        with pytest.raises(SchemaError) as caught:
            parse(form, *path)
        named.append([str(p) for p in caught.value.problems])
    assert named[0] == named[1]
    return named[0]


# -- §3 declarations ----------------------------------------------------------------------------------

def test_a_tool_that_is_not_a_string_is_named_as_a_tool_name():
    assert problems(parse_declaration, {**DECL, "tools": ["mcp:x", 5]}) == [
        "$.tools[1]: expected a tool name, found 5"]


def test_a_residency_label_that_is_empty_is_named_as_a_residency_label():
    assert problems(parse_declaration, {**DECL, "residency": ["eu", ""]}) == [
        "$.residency[1]: expected a residency label, found string ''"]


def test_a_name_with_a_control_character_is_refused_showing_the_name():
    assert problems(parse_declaration, {**DECL, "agent": {"name": "a\x00b", "namespace": "support"}}) == [
        "$.agent.name: expected no control characters, found string 'a\\x00b'"]


@pytest.mark.parametrize("c1", ["\x85", "\x80", "\x9f"])
def test_a_c1_character_is_text_as_in_every_trace_and_snapshot_written_before(c1):
    # reading 10: the control characters refused are C0 and DEL; C1 was always read as text, and
    # the names, journals and traces written with it must still load and verify
    import io

    from a3fast import Fleet
    from a3fast.engines import available_engines

    assert parse_declaration({**DECL, "residency": ["eu" + c1]}).residency == ("eu" + c1,)
    assert parse_requirements({"tools": ["mcp:" + c1]}).tools == ("mcp:" + c1,)
    for engine in available_engines():
        for name in ("a" + c1, "a\\u00" + f"{ord(c1):02x}"):
            line = ('{"v":"1.0","agent":{"name":"%s","namespace":"n"},"capabilities":[],"clearances":[]}\n' % name)
            fleet = Fleet(engine=engine)
            fleet.extend_jsonl(io.BytesIO(line.encode()))
            assert fleet.names() == ["a" + c1]


def test_an_exclude_that_is_a_string_is_named():
    # a false exclude is no exclusion (reading 11, as every trace written with one was read); a
    # true one must be a list of names
    found = problems(parse_requirements, {"exclude": "a"})
    assert found == ["$.exclude: expected an array, found string 'a'"]
    assert parse_requirements({"exclude": ""}).exclude == () == parse_requirements({"exclude": False}).exclude


def test_a_name_too_long_is_refused_by_its_length():
    assert problems(parse_declaration, {**DECL, "agent": {"name": "x" * 1025, "namespace": "support"}}) == [
        "$.agent.name: expected at most 1024 characters, found 1025 characters"]


def test_a_schema_version_that_is_not_a_string_is_named_with_what_it_is():
    assert problems(parse_declaration, {**DECL, "v": 1.0}) == [
        '$.v: expected a schema version string such as "1.0", found 1.0']
    assert problems(parse_declaration, {**DECL, "v": "2.0"}) == [
        "$.v: expected schema version 1.x (a3fast reads A3 Capability Schema 1), found unsupported version '2.0'"]


def test_a_cost_ceiling_that_is_not_a_decimal_string_is_named_with_what_it_is():
    assert problems(parse_declaration, {**DECL, "model": {"cost_ceiling_usd": "0,75"}}) == [
        "$.model.cost_ceiling_usd: expected a decimal string such as \"0.75\", found string '0,75'"]


def test_every_capability_entry_is_read_after_one_that_is_not_an_object_or_lacks_a_field():
    doc = {**DECL, "capabilities": [5, {"name": "order.investigate"}, {"name": "X", "version": 1}]}
    assert problems(parse_declaration, doc) == [
        "$.capabilities[0]: expected an object, found 5",
        "$.capabilities[1].version: expected the capability's version, found nothing",
        "$.capabilities[2].name: expected a capability identifier matching [a-z0-9]+(\\.[a-z0-9-]+)+, "
        "found string 'X'"]


def test_a_field_the_schema_does_not_define_is_still_held_to_the_document_rule():
    # kept in `doc`, and so in records: an integer beyond 64 bits there is a problem like any other
    assert problems(parse_declaration, {**DECL, "note": {"n": 2**64}}) == [
        "$.note.n: expected an integer from -2^63 to 2^64-1, found 18446744073709551616"]


def test_a_value_the_fields_and_the_document_rule_both_refuse_is_named_once():
    assert problems(parse_declaration, {**DECL, "tools": [2**64]}) == [
        "$.tools[0]: expected a tool name, found 18446744073709551616"]


def test_the_document_rule_names_paths_from_where_the_document_sits():
    assert problems(parse_requirements, {"tools": [5], "note": 2**64}, "requirements") == [
        "requirements.tools[0]: expected a tool name, found 5",
        "requirements.note: expected an integer from -2^63 to 2^64-1, found 18446744073709551616"]


def test_parse_on_the_types_reads_the_document():
    declaration = Declaration.parse(DECL)
    assert declaration.agent == AgentName("order-analyst", "support")
    assert declaration.to_dict() == DECL and declaration.to_dict() is not DECL
    requirements = Requirements.parse({"v": "1.0", "clearances": ["orders.read"]})
    assert requirements.predicates == ("clearance:orders.read",)
    assert requirements.to_dict() == {"v": "1.0", "clearances": ["orders.read"]}



def test_a_document_read_from_any_mapping_is_kept_as_given():
    # a Mapping that is not a dict is read by the careful reader alone, which keeps the document too
    assert parse_declaration(MappingProxyType(DECL)).to_dict() == DECL
    requirements = {"v": "1.0", "clearances": ["orders.read"], "kind": "triage"}
    assert parse_requirements(MappingProxyType(requirements)).to_dict() == requirements


def test_an_agent_name_is_written_as_the_spec_writes_it():
    assert AgentName("order-analyst", "support").to_dict() == {"name": "order-analyst", "namespace": "support"}


# -- §4 requirements ----------------------------------------------------------------------------------

@pytest.mark.parametrize("form", [dict, MappingProxyType])
def test_requirements_keep_their_schema_version(form):
    assert parse_requirements(form({"v": "1.2"})).v == "1.2"
    assert parse_requirements(form({})).v is None



def test_an_empty_kind_is_named_as_a_task_kind():
    assert problems(parse_requirements, {"kind": ""}) == ["$.kind: expected a task kind (a string), found string ''"]


def test_the_kind_of_a_task_needing_several_capabilities_joins_them_with_a_plus():
    requirements = parse_requirements({"capabilities": [{"name": "text.summarise", "version": 1},
                                                        {"name": "order.investigate", "version": 2}]})
    assert task_kind(requirements) == "order.investigate/2+text.summarise/1"


# -- the reader every document reader shares -----------------------------------------------------------

def test_a_reader_told_nothing_else_expects_non_empty_strings():
    reader = ProblemReader()
    assert reader.text("", "$.a") is None
    assert reader.texts(["ok", 5], "$.b") == ("ok",)
    assert [str(p) for p in reader.problems] == ["$.a: expected a non-empty string, found string ''",
                                                 "$.b[1]: expected a non-empty string, found 5"]


# -- every problem of a document at once, by the careful reader's words --------------------------------

def test_every_problem_of_a_requirements_document_is_named_at_once():
    doc = {"v": 1, "capabilities": [5, {"version": 1}, {"name": "A", "version": -1},
                                    {"name": "a.b", "version": True, "evaluation": 5}],
           "clearances": ["orders.read", "X"], "tools": ["", 5], "residency": 5,
           "model": {"latency_class": "fast", "cost_ceiling_usd": "x"}, "session": "", "agentRef": 5,
           "kind": "a\x01", "exclude": ["x", 5]}
    identifier = "identifier matching [a-z0-9]+(\\.[a-z0-9-]+)+"
    version = "a major version (an integer from 0 to 2^63-1)"
    assert problems(parse_requirements, doc) == [
        '$.v: expected a schema version string such as "1.0", found 1',
        "$.capabilities[0]: expected an object, found 5",
        "$.capabilities[1].name: expected the capability's name, found nothing",
        f"$.capabilities[2].name: expected a capability {identifier}, found string 'A'",
        f"$.capabilities[2].version: expected {version}, found -1",
        f"$.capabilities[3].version: expected {version}, found true",
        f"$.clearances[1]: expected a clearance {identifier}, found string 'X'",
        "$.tools[0]: expected a tool name, found string ''",
        "$.tools[1]: expected a tool name, found 5",
        "$.residency: expected a residency label (a string), found 5",
        "$.model.latency_class: expected \"interactive\" or \"batch\", found string 'fast'",
        "$.session: expected a session identifier (a string), found string ''",
        "$.agentRef: expected an agent name (a string), found 5",
        "$.kind: expected no control characters, found string 'a\\x01'",
        "$.exclude[1]: expected an agent name, found 5"]


def test_requirements_whose_fields_are_of_the_wrong_shape_name_each():
    assert problems(parse_requirements, {"v": "2.0", "capabilities": 5, "clearances": 5, "tools": 5, "model": 5,
                                         "exclude": 5}) == [
        "$.v: expected schema version 1.x (a3fast reads A3 Capability Schema 1), found unsupported version '2.0'",
        "$.capabilities: expected an array, found 5", "$.clearances: expected an array, found 5",
        "$.tools: expected an array, found 5", "$.model: expected an object, found 5",
        "$.exclude: expected an array, found 5"]


@pytest.mark.parametrize("parse", [parse_requirements, parse_declaration])
def test_a_document_that_is_not_an_object_is_named_where_it_sits(parse):
    for path, where in (((), "$"), (("requirements",), "requirements")):
        with pytest.raises(SchemaError) as caught:
            parse(5, *path)
        assert [str(p) for p in caught.value.problems] == [f"{where}: expected an object, found 5"]


def test_requirements_read_null_as_absent_and_a_cost_ceiling_not_at_all():
    # a cost ceiling is what an agent declares (§3); §4 has no such field, so it is not read
    assert parse_requirements({"v": None, "residency": None, "model": {"cost_ceiling_usd": "x"}, "session": None,
                               "agentRef": None, "kind": None, "exclude": None})[:10] == Requirements()[:10]
    # the lists too: null is absent, every other value that is no list is refused (each reader alike)
    nulls = {"capabilities": None, "clearances": None, "tools": None}
    assert parse_requirements(nulls)[:10] == Requirements()[:10]
    for engine in ("pure", "native") if NATIVE_AVAILABLE else ("pure",):
        assert requirements_reader(engine)(dict(nulls), True)[:10] == Requirements()[:10]
    for key in ("capabilities", "clearances", "tools"):
        with pytest.raises(SchemaError, match=rf"\$\.{key}: expected an array"):
            parse_requirements({key: 0})
    required = parse_requirements({"capabilities": [{"name": "a.b", "version": 1, "evaluation": "suite"}]})
    assert required.capabilities[0].evaluation is None


def test_every_problem_of_a_declaration_is_named_at_once():
    doc = {"v": "1.0", "agent": {"name": "", "namespace": 5}, "capabilities": [{"name": "a.b"}], "clearances": [5],
           "residency": [5], "tools": 5, "model": {"latency_class": "fast", "cost_ceiling_usd": 5}}
    assert problems(parse_declaration, doc) == [
        "$.agent.name: expected the agent's name (a non-empty string), found string ''",
        "$.agent.namespace: expected the agent's namespace (a non-empty string), found 5",
        "$.capabilities[0].version: expected the capability's version, found nothing",
        "$.clearances[0]: expected a clearance identifier matching [a-z0-9]+(\\.[a-z0-9-]+)+, found 5",
        "$.residency[0]: expected a residency label, found 5",
        "$.tools: expected an array, found 5",
        "$.model.latency_class: expected \"interactive\" or \"batch\", found string 'fast'",
        "$.model.cost_ceiling_usd: expected a decimal string such as \"0.75\", found 5"]


def test_a_declaration_without_its_required_fields_names_each():
    assert problems(parse_declaration, {"agent": 5}) == [
        "$.v: expected the required field 'v', found nothing",
        "$.capabilities: expected the required field 'capabilities', found nothing",
        "$.clearances: expected the required field 'clearances', found nothing",
        "$.agent: expected an object, found 5"]
    assert problems(parse_declaration, {"v": "1.0", "agent": {}, "capabilities": 5, "clearances": 5,
                                        "residency": 5, "model": 5}) == [
        "$.agent.name: expected the agent's name (a non-empty string), found null",
        "$.agent.namespace: expected the agent's namespace (a non-empty string), found null",
        "$.capabilities: expected an array, found 5", "$.clearances: expected an array, found 5",
        "$.residency: expected an array, found 5", "$.model: expected an object, found 5"]


# -- a valid plain document takes the fast reader ------------------------------------------------------
# The careful reader would parse it alike, only slower: these hold parse_* to taking the fast one.

def test_a_required_capability_read_twice_is_one_shared_object():
    doc = {"capabilities": [{"name": "shared.once", "version": 7}]}
    first, again = parse_requirements(doc), parse_requirements({**doc})
    assert first.capabilities[0] is again.capabilities[0]


def test_a_valid_plain_declaration_leaves_its_strings_remembered_as_valid():
    from a3fast import schema

    # the memo stops growing at its bound, which earlier tests in a run may have reached
    schema._valid_texts.clear()
    schema._valid_identifiers.clear()
    name = "remembered-by-the-fast-reader"
    parse_declaration({**DECL, "agent": {"name": name, "namespace": "support"},
                       "clearances": ["remembered.by-fast-reader"]})
    assert name in schema._valid_texts and "remembered.by-fast-reader" in schema._valid_identifiers
