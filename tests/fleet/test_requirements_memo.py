"""Requirements parsing remembers what tasks repeat (required capabilities, derived predicate sets):
what it remembers never changes what a document parses to, nor what it refuses."""
from __future__ import annotations

import pytest

from a3fast import SchemaError, parse_requirements
from a3fast.predicates import derive_predicates


def test_a_remembered_capability_never_admits_a_boolean_or_float_version():
    ok = parse_requirements({"v": "1.0", "capabilities": [{"name": "memo.check", "version": 1}]})
    assert ok.predicates == ("capability:memo.check/1",)
    for version in (True, 1.0, -1, 2**63):
        with pytest.raises(SchemaError) as caught:
            parse_requirements({"v": "1.0", "capabilities": [{"name": "memo.check", "version": version}]})
        assert [p.path for p in caught.value.problems] == ["$.capabilities[0].version"]


def test_a_remembered_predicate_set_is_the_one_derived_afresh():
    doc = {"v": "1.0", "capabilities": [{"name": "memo.a", "version": 2}, {"name": "memo.b", "version": 1}],
           "clearances": ["memo.read", "memo.read"], "tools": ["t"], "residency": "eu",
           "model": {"latency_class": "batch"}, "agentRef": "x", "exclude": ["y", "x"]}
    first, again = parse_requirements(doc), parse_requirements({**doc})
    expected = ("capability:memo.a/2", "capability:memo.b/1", "clearance:memo.read", "tool:t",
                "residency:eu", "model.latency_class:batch", "agentRef:x", "anti-affinity:y", "anti-affinity:x")
    assert first.predicates == again.predicates == derive_predicates(first) == expected
    # a set that differs in one field only is derived, not taken for the remembered one
    other = parse_requirements({**doc, "residency": "us"})
    assert "residency:us" in other.predicates and "residency:eu" not in other.predicates
    swapped = parse_requirements({**doc, "capabilities": doc["capabilities"][::-1]})
    assert swapped.predicates[:2] == ("capability:memo.b/1", "capability:memo.a/2")
