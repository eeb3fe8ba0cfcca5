"""Predicate strings (§5, docs/design.md, readings 1, 4 and 5): derivation, parsing back, satisfaction.

Each test names the rule it holds; together they leave no surviving mutant in a3fast.predicates
(docs/testing.md).
"""
import pytest

from a3fast.predicates import Predicate, derive_predicates, parse_predicate, satisfies
from a3fast.schema import parse_declaration, parse_requirements

EVERY_FIELD = {"capabilities": [{"name": "c.d", "version": 1}], "clearances": ["a.b"], "tools": ["t"],
               "residency": "eu", "model": {"latency_class": "batch"}, "agentRef": "x", "exclude": ["y"]}
AGENT = {"v": "1.0", "agent": {"name": "a1", "namespace": "ns"},
         "capabilities": [{"name": "c.d", "version": 1}], "clearances": ["a.b"],
         "tools": ["t"], "residency": ["eu"],
         "model": {"latency_class": "batch"}}


def test_every_requirement_field_derives_its_predicate_in_derivation_order():
    assert derive_predicates(parse_requirements(EVERY_FIELD)) == (
        "capability:c.d/1", "clearance:a.b", "tool:t", "residency:eu", "model.latency_class:batch",
        "agentRef:x", "anti-affinity:y")


def test_a_capability_version_follows_the_last_slash():
    assert parse_predicate("capability:a/b/2") == Predicate("capability", "a/b", 2)


@pytest.mark.parametrize("text", ["capability:/2", "capability:x.y/", "capability:x.y/v2",
                                  "capability:x.y/²", "capability:x.y/-1"])
def test_a_capability_predicate_needs_a_name_and_a_decimal_version(text):
    assert parse_predicate(text) is None


def test_version_zero_is_canonical_but_leading_zeros_are_not():
    assert parse_predicate("capability:x.y/0") == Predicate("capability", "x.y", 0)
    assert parse_predicate("capability:x.y/00") is None


@pytest.mark.parametrize("text", ["clearance:", "tool:", "residency:", "agentRef:", "clearance", ":x", 7, None])
def test_a_predicate_needs_a_known_kind_a_colon_and_an_argument(text):
    assert parse_predicate(text) is None


@pytest.mark.parametrize("text", ["capability:x.y/0", "capability:a.b/12", "tool:mcp:gh/issue",
                                  "residency:eu", "anti-affinity:n"])
def test_a_parsed_predicate_writes_back_as_its_canonical_string(text):
    assert str(parse_predicate(text)) == text


def test_satisfaction_accepts_a_parsed_predicate_as_well_as_its_string():
    decl = parse_declaration(AGENT)
    for text in derive_predicates(parse_requirements({k: v for k, v in EVERY_FIELD.items()
                                                      if k not in ("agentRef", "exclude")})):
        assert satisfies(decl, parse_predicate(text)) and satisfies(decl, text)
    assert not satisfies(decl, parse_predicate("capability:c.d/2"))


def test_tool_and_latency_predicates_need_the_declared_value_itself():
    decl = parse_declaration(AGENT)
    assert satisfies(decl, "tool:t") and not satisfies(decl, "tool:u")
    assert satisfies(decl, "model.latency_class:batch") and not satisfies(decl, "model.latency_class:interactive")
