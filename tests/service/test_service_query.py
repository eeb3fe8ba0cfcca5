"""The place route's query parameters (`?record=`, `?fleet=`) are read as Starlette reads a query:
`parse_qsl` of its text as Latin-1, blank values kept, the last value of a name winning. A query
with nothing escaped (no `%`, no `+`) is split without it."""
from __future__ import annotations

import pytest
from hypothesis import example, given, settings, strategies as st

pytest.importorskip("starlette")
from starlette.datastructures import QueryParams  # noqa: E402

from a3fast.service.app import query_values  # noqa: E402


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(["record", "fleet", "compact", "=", "&", "%", "%2", "%41", "+", ";", "",
                                           "\u00e9", "compact-stream", "x=y"]),
                          st.text(max_size=4)), max_size=8).map("".join))
@example("record=compact&fleet=3-0123456789abcdef&record=spec")
@example("&&record&=x&fleet=a=b")
@example("record=comp%61ct+x&fleet=%ZZ")
@example("record=compact")
def test_a_query_string_is_read_as_starlette_reads_it(text):
    query = text.encode("utf-8")
    read = query_values(query)
    expected = QueryParams(query.decode("latin-1"))
    assert read == {name: expected[name] for name in expected.keys()}
