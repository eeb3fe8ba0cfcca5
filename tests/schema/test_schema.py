"""One test per rule of §2–§4 as a3fast reads them: what parses, what is refused, and the message."""
import copy

import pytest
from hypothesis import given, strategies as st

from a3fast import Declaration, Requirements, SchemaError, parse_declaration, parse_requirements
from a3fast.distributed.sharded import ShardError
from a3fast.schema import is_identifier, loads, task_kind

DECL = {
    "v": "1.0",
    "agent": {"name": "order-analyst", "namespace": "support"},
    "capabilities": [{"name": "order.investigate", "version": 2}, {"name": "case.summarise", "version": 1}],
    "clearances": ["orders.read", "customers.read"],
    "residency": ["eu"],
    "model": {"latency_class": "interactive", "cost_ceiling_usd": "0.75"},
}
REQ = {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 2}],
       "clearances": ["orders.read"], "residency": "eu", "model": {"latency_class": "interactive"}}


def with_(doc, path, value):
    """A copy of `doc` with the field at `path` (a tuple of keys) set, or deleted for ...."""
    out = copy.deepcopy(doc)
    target = out
    for key in path[:-1]:
        target = target[key]
    if value is ...:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


def problems(fn, doc):
    with pytest.raises(SchemaError) as info:
        fn(doc)
    return [str(p) for p in info.value.problems]


# -- §2 identifiers -------------------------------------------------------------------------------
@pytest.mark.parametrize("ident", ["order.investigate", "data.pii-read", "a.b.c", "x1.y2", "orders.read"])
def test_identifier_grammar_accepts_dotted_lowercase(ident):
    assert is_identifier(ident)


@pytest.mark.parametrize("ident", ["order", "Order.read", "order..read", ".read", "order.", "order.read ",
                                   "-a.b", "a.b_c", "ä.b", "", 7, None])
def test_identifier_grammar_refuses_everything_else(ident):
    assert not is_identifier(ident)


def test_capability_name_must_fit_the_grammar():
    assert problems(parse_declaration, with_(DECL, ("capabilities", 0, "name"), "Order.Investigate")) == [
        "$.capabilities[0].name: expected a capability identifier matching [a-z0-9]+(\\.[a-z0-9-]+)+, "
        "found string 'Order.Investigate'"]


def test_clearance_must_fit_the_grammar():
    assert problems(parse_declaration, with_(DECL, ("clearances", 1), "customers")) == [
        "$.clearances[1]: expected a clearance identifier matching [a-z0-9]+(\\.[a-z0-9-]+)+, "
        "found string 'customers'"]


def test_major_version_is_an_integer_not_a_boolean():
    assert problems(parse_declaration, with_(DECL, ("capabilities", 0, "version"), True)) == [
        "$.capabilities[0].version: expected a major version (an integer from 0 to 2^63-1), found true"]


@pytest.mark.parametrize("version", [2.0, "2", -1, 2**63, None])
def test_major_version_refuses_floats_strings_negatives_and_overflow(version):
    assert "$.capabilities[0].version" in problems(parse_requirements, with_(REQ, ("capabilities", 0, "version"), version))[0]


def test_residency_labels_are_opaque_strings():
    decl = parse_declaration(with_(DECL, ("residency",), ["us-gov", "EU:west/1"]))
    assert decl.residency == ("us-gov", "EU:west/1")


# -- §3 declarations ------------------------------------------------------------------------------
def test_declaration_parses_the_spec_example():
    decl = parse_declaration(DECL)
    assert isinstance(decl, Declaration)
    assert decl.agent.name == "order-analyst" and decl.agent.namespace == "support"
    assert [(c.name, c.version) for c in decl.capabilities] == [("order.investigate", 2), ("case.summarise", 1)]
    assert decl.clearances == ("orders.read", "customers.read")
    assert decl.model.latency_class == "interactive" and decl.model.cost_ceiling_usd == "0.75"


@pytest.mark.parametrize("field", ["v", "agent", "capabilities", "clearances"])
def test_declaration_required_fields(field):
    assert problems(parse_declaration, with_(DECL, (field,), ...)) == [
        f"$.{field}: expected the required field {field!r}, found nothing"]


def test_declaration_capabilities_and_clearances_may_be_empty():
    decl = parse_declaration({"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": [], "clearances": []})
    assert decl.capabilities == () and decl.clearances == ()


def test_declaration_optional_fields_absent_mean_absent():
    decl = parse_declaration({"v": "1.0", "agent": {"name": "a", "namespace": "n"}, "capabilities": [], "clearances": []})
    assert decl.residency is None and decl.tools is None and decl.model is None


def test_agent_needs_name_and_namespace():
    assert problems(parse_declaration, with_(DECL, ("agent",), {"name": ""})) == [
        "$.agent.name: expected the agent's name (a non-empty string), found string ''",
        "$.agent.namespace: expected the agent's namespace (a non-empty string), found null"]


def test_latency_class_is_interactive_or_batch():
    assert problems(parse_declaration, with_(DECL, ("model", "latency_class"), "realtime")) == [
        "$.model.latency_class: expected \"interactive\" or \"batch\", found string 'realtime'"]


@pytest.mark.parametrize("cost", [0.75, "0,75", "-1", "1e3", ".5", ""])
def test_cost_ceiling_is_a_decimal_string(cost):
    assert problems(parse_declaration, with_(DECL, ("model", "cost_ceiling_usd"), cost))[0].startswith(
        "$.model.cost_ceiling_usd: expected a decimal string")


def test_capability_evaluation_is_kept():
    decl = parse_declaration(with_(DECL, ("capabilities", 0, "evaluation"), {"suite": "probe-7"}))
    assert decl.capabilities[0].substantiated and not decl.capabilities[1].substantiated


def test_tools_are_names_that_may_hold_colons_and_slashes():
    decl = parse_declaration(with_(DECL, ("tools",), ["mcp:github/create_issue", "arena_submit_move"]))
    assert decl.tools == ("mcp:github/create_issue", "arena_submit_move")


def test_schema_version_of_another_major_is_refused_clearly():
    assert problems(parse_declaration, with_(DECL, ("v",), "2.0")) == [
        "$.v: expected schema version 1.x (a3fast reads A3 Capability Schema 1), found unsupported version '2.0'"]


@pytest.mark.parametrize("v", ["1.0", "1.1", "1.0.3"])
def test_schema_version_1x_is_accepted(v):
    assert parse_declaration(with_(DECL, ("v",), v)).v == v


@pytest.mark.parametrize("v", [1.0, 1, None, "one"])
def test_schema_version_must_be_a_string(v):
    assert problems(parse_declaration, with_(DECL, ("v",), v))[0].startswith("$.v: expected a schema version string")


def test_unknown_fields_are_kept_out_of_the_way():
    doc = with_(DECL, ("x-vendor",), {"anything": [1, 2]})
    decl = parse_declaration(doc)
    assert decl.doc["x-vendor"] == {"anything": [1, 2]}
    assert parse_declaration(DECL).capabilities == decl.capabilities


def test_every_problem_is_reported_not_just_the_first():
    bad = {"v": "3", "agent": [], "capabilities": [{"name": "X"}], "clearances": [1, "ok.ok", "bad"]}
    found = problems(parse_declaration, bad)
    assert len(found) == 5
    assert found[0].startswith("$.v:") and found[1].startswith("$.agent:")
    assert found[2] == "$.capabilities[0].version: expected the capability's version, found nothing"


def test_declaration_must_be_an_object():
    assert problems(parse_declaration, ["v"]) == ["$: expected an object, found array of 1"]


def test_hostile_values_are_bounded():
    found = problems(parse_declaration, with_(DECL, ("agent", "name"), "x" * 5000))
    assert found == ["$.agent.name: expected at most 1024 characters, found 5000 characters"]
    found = problems(parse_declaration, with_(DECL, ("agent", "name"), "bad\nname"))
    assert found[0].startswith("$.agent.name: expected no control characters")


# -- §4 requirements ------------------------------------------------------------------------------
def test_requirements_parse_the_spec_example():
    req = parse_requirements(REQ)
    assert isinstance(req, Requirements)
    assert req.predicates == ("capability:order.investigate/2", "clearance:orders.read", "residency:eu",
                              "model.latency_class:interactive")


def test_requirements_all_fields_absent_means_any_agent_is_eligible():
    assert parse_requirements({}).predicates == ()


def test_requirements_residency_is_one_label():
    assert problems(parse_requirements, with_(REQ, ("residency",), ["eu"])) == [
        "$.residency: expected a residency label (a string), found array of 1"]


def test_requirements_agent_ref_and_exclude():
    req = parse_requirements({"agentRef": "order-analyst", "exclude": ["proposer", "proposer-2"]})
    assert req.agent_ref == "order-analyst" and req.exclude == ("proposer", "proposer-2")
    assert problems(parse_requirements, {"exclude": "proposer"}) == ["$.exclude: expected an array, found string 'proposer'"]


def test_requirements_session_is_for_affinity_not_filtering():
    req = parse_requirements({"session": "conv-1"})
    assert req.session == "conv-1" and req.predicates == ()


def test_requirements_tools():
    assert parse_requirements({"tools": ["mcp:github/create_issue"]}).predicates == ("tool:mcp:github/create_issue",)


def test_task_kind_defaults_to_the_required_capabilities():
    assert task_kind(parse_requirements(REQ)) == "order.investigate/2"
    assert task_kind(parse_requirements({"kind": "triage", **REQ})) == "triage"
    assert task_kind(parse_requirements({})) == "*"


def test_invalid_json_names_the_source_and_position():
    with pytest.raises(SchemaError) as info:
        loads(b'{"v": "1.0",', source="fleet.json")
    assert str(info.value).startswith("fleet.json: $: expected valid JSON, found ")


def test_fast_and_careful_paths_agree_on_valid_documents():
    # The fast path handles plain dicts; a Mapping that is not a dict takes the careful reader.
    from types import MappingProxyType

    assert parse_declaration(DECL)[:7] == parse_declaration(MappingProxyType(DECL))[:7]
    assert parse_requirements(REQ)[:10] == parse_requirements(MappingProxyType(REQ))[:10]


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                           max_leaves=12)


@given(st.dictionaries(st.sampled_from(["v", "agent", "capabilities", "clearances", "residency", "tools", "model",
                                        "agentRef", "exclude", "session"]), json_values, max_size=7))
def test_any_json_gives_a_document_or_a_schema_error_never_a_crash(doc):
    for parse in (parse_declaration, parse_requirements):
        try:
            parse(doc)
        except SchemaError as exc:
            assert exc.problems and all(p.path.startswith("$") for p in exc.problems)


class _OneShard(ShardError):
    """A subclass made from other arguments than its base's (pickled by reference: at module level)."""

    def __init__(self, shard):
        super().__init__(shard, "gone")


def test_rule_an_error_crosses_a_process_whole_whatever_its_class_is_made_from():
    # a shard's refusal is pickled on its way to the coordinator: a SchemaError came back with
    # every character of its message on a line of its own, a subclass with another signature not at all
    import pickle

    from a3fast.errors import Problem
    from a3fast.service.state import FleetConflict

    schema = SchemaError([Problem("$.v", "a version", "nothing")], "fleet.jsonl")
    conflict = FleetConflict([Problem("$", "a free name", "a taken one")], [3])
    conflict.add_note("a note")

    for error in (schema, conflict, ShardError(1, "down", [1, 2]), _OneShard(5)):
        again = pickle.loads(pickle.dumps(error))
        assert (type(again), str(again), again.__dict__) == (type(error), str(error), error.__dict__)
