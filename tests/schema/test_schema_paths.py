"""The parser's two readings agree on every document, valid or not (README "Validation without a
library on the hot path").

A plain dict is first checked by set lookups against strings already found valid; a document that
check refuses, and any Mapping that is not a dict, is walked by the careful reader that names every
problem. Whatever path a document takes, the decision (accept or refuse), the parsed values and the
problems named must be the same: a dict and a read-only view of it are one document. Each document
is read three times: by the careful reader, then as a dict with its strings perhaps never seen
before, then as a dict again once they are remembered.
"""
from __future__ import annotations

import copy
from types import MappingProxyType

import pytest
from hypothesis import given, settings, strategies as st

from a3fast import SchemaError, parse_declaration, parse_requirements
from a3fast.schema import _fast_declaration, _fast_requirements

from edge_documents import FULL_DECLARATION, FULL_REQUIREMENTS, damaged, variants
from strategies import declarations, requirements


def outcome(parse, doc) -> tuple:
    """("ok", the parsed fields without `doc`) or ("refused", every problem named)."""
    try:
        parsed = parse(doc)
    except SchemaError as exc:
        return "refused", [(p.path, p.expected, p.found) for p in exc.problems]
    return "ok", parsed._replace(doc=None)


def assert_both_readings_agree(parse, doc) -> tuple:
    careful = outcome(parse, MappingProxyType(doc))
    first = outcome(parse, doc)
    again = outcome(parse, doc)
    assert first == careful
    assert again == careful
    return careful


@pytest.mark.parametrize("parse, doc", [(parse_requirements, FULL_REQUIREMENTS), (parse_declaration, FULL_DECLARATION)],
                         ids=["requirements", "declaration"])
def test_fast_and_careful_readings_agree_on_every_field_at_every_edge(parse, doc):
    disagreements = []
    for label, variant in variants(doc):
        try:
            assert_both_readings_agree(parse, variant)
        except AssertionError:
            disagreements.append(label)
    assert disagreements == []


@settings(max_examples=150)
@given(damaged(requirements()))
def test_fast_and_careful_readings_agree_on_damaged_requirements(doc):
    assert_both_readings_agree(parse_requirements, doc)


@settings(max_examples=150)
@given(damaged(declarations()))
def test_fast_and_careful_readings_agree_on_damaged_declarations(doc):
    assert_both_readings_agree(parse_declaration, doc)


@given(st.one_of(requirements(), declarations()))
def test_fast_and_careful_readings_agree_on_valid_documents(doc):
    parse = parse_declaration if "agent" in doc else parse_requirements
    assert assert_both_readings_agree(parse, doc)[0] == "ok"


def test_requirements_v_null_is_read_alike_by_both_readings():
    # null counts as absent for every optional field of requirements, `v` included
    assert assert_both_readings_agree(parse_requirements, {"v": None, "clearances": ["orders.read"]})[0] == "ok"


# -- the latency class on the fast path --------------------------------------------------------

LATENCY_PROBLEM = ("$.model.latency_class", '"interactive" or "batch"')


@pytest.mark.parametrize("value", ["realtime", "", "Interactive", "batch ", 1, True, ["batch"], {"c": "batch"}])
def test_requirements_latency_class_is_interactive_or_batch(value):
    doc = {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 2}],
           "model": {"latency_class": value}}
    with pytest.raises(SchemaError) as info:
        parse_requirements(doc)
    assert [(p.path, p.expected) for p in info.value.problems] == [LATENCY_PROBLEM]


def test_a_latency_class_is_refused_even_when_the_string_was_seen_valid_elsewhere():
    # "fast" is a valid residency label, tool name, session and kind: remembering it as a valid
    # text must not let it through where only "interactive" or "batch" may stand
    parse_requirements({"residency": "fast", "tools": ["fast"], "session": "fast", "kind": "fast"})
    parse_declaration({"v": "1.0", "agent": {"name": "fast", "namespace": "fast"}, "capabilities": [],
                       "clearances": [], "tools": ["fast"], "residency": ["fast"]})
    for parse, doc in ((parse_requirements, {"model": {"latency_class": "fast"}}),
                       (parse_declaration, {"v": "1.0", "agent": {"name": "a", "namespace": "n"},
                                            "capabilities": [], "clearances": [],
                                            "model": {"latency_class": "fast"}})):
        with pytest.raises(SchemaError) as info:
            parse(doc)
        assert [(p.path, p.expected) for p in info.value.problems] == [LATENCY_PROBLEM]


@pytest.mark.parametrize("value", ["interactive", "batch"])
def test_requirements_latency_class_becomes_its_predicate(value):
    req = parse_requirements({"model": {"latency_class": value}})
    assert req.latency_class == value and req.predicates == (f"model.latency_class:{value}",)


# -- the fast reader takes every valid plain document ------------------------------------------
# Refusing one would cost only time (the careful reader parses it alike), but time is why the fast
# reader exists: a valid dict must not be walked twice.

FAST = {parse_requirements: _fast_requirements, parse_declaration: _fast_declaration}


def assert_fast_reader_takes(parse, doc) -> bool:
    """Whether the document is valid; when it is, the fast reader must parse it as the careful one."""
    careful = outcome(parse, MappingProxyType(doc))
    if careful[0] == "ok":
        fast = FAST[parse](copy.deepcopy(doc))
        assert fast is not None and fast._replace(doc=None) == careful[1], doc
    return careful[0] == "ok"


@pytest.mark.parametrize("parse, doc", [(parse_requirements, FULL_REQUIREMENTS), (parse_declaration, FULL_DECLARATION)],
                         ids=["requirements", "declaration"])
def test_the_fast_reader_takes_every_valid_variant_of_a_full_document(parse, doc):
    valid = sum(assert_fast_reader_takes(parse, variant) for variant in [doc, *(v for _, v in variants(doc))])
    assert valid > 50


@given(st.one_of(requirements(), declarations()))
def test_the_fast_reader_takes_every_valid_generated_document(doc):
    assert_fast_reader_takes(parse_declaration if "agent" in doc else parse_requirements, doc)
