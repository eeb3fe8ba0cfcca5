"""The one-scheduling-domain rule (docs/design.md, reading 3): a name held by another namespace is
refused, by every door a declaration comes in, in the one wording of `a3fast.fleet.domain`. The
compiled JSON Lines reader keeps its own fast check; it must hand every such line to the rule."""
from __future__ import annotations

import orjson
import pytest

from a3fast import Fleet, FleetError, SchemaError
from a3fast.fleet.domain import check_namespace, namespace_conflict, namespace_problem
from a3fast.interop.collect import DeclarationSet
from a3fast.interop.report import ImportReport


def agent(name, namespace):
    return {"v": "1.0", "agent": {"name": name, "namespace": namespace}, "capabilities": [],
            "clearances": ["orders.read"]}


REFUSAL = namespace_conflict("a", "support", "other")


def test_the_rule_allows_a_free_name_and_a_replace_in_the_same_namespace():
    assert namespace_conflict("a", None, "other") is None
    assert namespace_conflict("a", "other", "other") is None
    check_namespace("a", "other", "other")
    assert namespace_problem("$", "a", None, "x") is None
    assert REFUSAL is not None and "'a'" in REFUSAL and "'support'" in REFUSAL and "'other'" in REFUSAL
    with pytest.raises(FleetError) as caught:
        check_namespace("a", "support", "other")
    assert str(caught.value) == REFUSAL


def test_a_name_held_by_another_namespace_is_refused_by_add_and_extend_in_the_rules_words(engine):
    fleet = Fleet(engine)
    fleet.add(agent("a", "support"))
    with pytest.raises(FleetError) as caught:
        fleet.add(agent("a", "other"))
    assert str(caught.value) == REFUSAL
    with pytest.raises(FleetError) as caught:
        fleet.extend([agent("b", "support"), agent("a", "other")])
    assert str(caught.value) == REFUSAL
    assert fleet.get("a").agent.namespace == "support"


def test_extend_refuses_a_namespace_conflict_before_adding_any_of_the_batch(engine):
    """All or nothing, as for a declaration that does not parse: the conflict may be with the
    fleet or with an earlier declaration of the same batch."""
    fleet = Fleet(engine)
    fleet.add(agent("held", "support"))
    for batch in ([agent("b", "support"), agent("held", "other")],
                  [agent("b", "support"), agent("twice", "support"), agent("twice", "other")]):
        with pytest.raises(FleetError) as caught:
            fleet.extend(batch)
        assert "cannot add it from namespace 'other'" in str(caught.value)
        assert fleet.names() == ["held"]


@pytest.mark.parametrize("on_error", ["refuse", "skip"])
def test_the_compiled_reader_hands_a_namespace_conflict_to_the_rule(engine, on_error):
    # line 2 conflicts with line 1 of the same batch, line 4 with an agent already in the fleet;
    # every line is one the compiled reader reads itself when nothing conflicts
    fleet = Fleet(engine)
    fleet.add(agent("held", "support"))
    lines = [agent("a", "support"), agent("a", "other"), agent("c", "other"), agent("held", "other")]
    data = b"".join(orjson.dumps(d) + b"\n" for d in lines)
    expected = [namespace_problem("line 2: $.agent.namespace", "a", "support", "other"),
                namespace_problem("line 4: $.agent.namespace", "held", "support", "other")]
    if on_error == "refuse":
        with pytest.raises(SchemaError) as caught:
            fleet.extend_jsonl(data)
        assert caught.value.problems == expected
        assert fleet.names() == ["held"]
    else:
        assert fleet.extend_jsonl(data, on_error="skip") == expected
        assert fleet.names() == ["held", "a", "c"]
        assert fleet.get("a").agent.namespace == "support"


def test_the_importers_refuse_in_the_rules_words():
    found = DeclarationSet(ImportReport("k8s"))
    assert found.offer(agent("a", "support"), "cluster", "pods/a")
    assert not found.offer(agent("a", "other"), "cluster", "pods/b")
    reason = found.report.skipped[0].reason
    assert reason.startswith(REFUSAL) and "cluster pods/a" in reason
