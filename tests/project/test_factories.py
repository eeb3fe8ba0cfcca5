"""The shared builders write the documents the spec writes: tests built on them place on exactly
the §3 and §10 examples, member order included (records carry documents as they are)."""
from __future__ import annotations

import orjson

from a3fast import parse_declaration, parse_requirements

from factories import (declaration, fleet_of, requirements, section_3_declaration, section_10_fleet,
                       section_10_order_analyst, section_10_requirements, spec_records)

# The spec's own text (§3, §10), as bytes, so that member order is compared too.
SECTION_3 = (b'{"v":"1.0","agent":{"name":"order-analyst","namespace":"support"},"capabilities":['
             b'{"name":"order.investigate","version":2},{"name":"case.summarise","version":1}],'
             b'"clearances":["orders.read","customers.read"],"residency":["eu"],'
             b'"model":{"latency_class":"interactive","cost_ceiling_usd":"0.75"}}')
SECTION_10_REQUIREMENTS = (b'{"v":"1.0","capabilities":[{"name":"order.investigate","version":2}],'
                           b'"clearances":["orders.read"],"residency":"eu"}')
SECTION_10_DECLARATION = (b'{"v":"1.0","agent":{"name":"order-analyst","namespace":"support"},'
                          b'"capabilities":[{"name":"order.investigate","version":2}],'
                          b'"clearances":["orders.read","customers.read"],"residency":["eu"]}')


def test_the_spec_examples_are_written_as_the_spec_writes_them():
    assert orjson.dumps(section_3_declaration()) == SECTION_3
    assert orjson.dumps(section_10_requirements()) == SECTION_10_REQUIREMENTS
    assert orjson.dumps(section_10_order_analyst()) == SECTION_10_DECLARATION


def test_replaced_members_keep_their_place_and_new_ones_go_last():
    doc = section_10_order_analyst("b", clearances=[], tools=["t"])
    assert list(doc) == ["v", "agent", "capabilities", "clearances", "residency", "tools"]
    assert doc["agent"] == {"name": "b", "namespace": "support"} and doc["clearances"] == []


def test_capabilities_may_be_written_as_pairs_strings_or_objects():
    doc = declaration("a", capabilities=[("x.y", 1), "x.z/2", {"name": "x.w", "version": 3}],
                      evaluated=["x.z"], cost="0.5", latency="batch")
    assert doc["capabilities"] == [{"name": "x.y", "version": 1},
                                   {"name": "x.z", "version": 2, "evaluation": "probe"},
                                   {"name": "x.w", "version": 3}]
    assert doc["model"] == {"latency_class": "batch", "cost_ceiling_usd": "0.5"}
    assert parse_declaration(doc).capabilities[1].substantiated


def test_requirements_leave_out_what_is_not_asked():
    assert requirements() == {"v": "1.0"} and requirements(v=None) == {}
    assert parse_requirements(requirements(capabilities=["x.y/1"], exclude=["b"])).predicates == (
        "capability:x.y/1", "anti-affinity:b")


def test_a_fleet_adds_one_by_one_or_in_one_batch_with_the_same_join_order(engine):
    docs = [declaration(name) for name in ("c", "a", "b")]
    assert fleet_of(engine, docs).names() == fleet_of(engine, docs, batch=True).names() == ["c", "a", "b"]


def test_the_section_10_fleet_gives_the_section_10_record(engine):
    records = spec_records([section_10_fleet(engine).place(section_10_requirements())])
    scheduling = records[-1]["content"]["scheduling"]
    assert [r["kind"] for r in records] == ["task.submitted", "task.admitted", "task.bound"]
    assert scheduling["candidates"] == ["order-analyst", "summariser"]
    assert scheduling["filters_failed"] == [{"candidate": "summariser", "predicate": "capability:order.investigate/2"}]
