"""`Index.write_placement_lines` (a placement's compact trace lines in one call; a batch's,
`write_placements_lines_of`, in test_placement_lines_of.py) gives the same bytes on the native and the pure engine, and refuses the same arguments with
the same errors: across Roaring chunks and both container kinds, empty and full sets, bound,
rejected with a derived or a written reason, a custom scorer's scores, and JSON pieces with escapes."""
from __future__ import annotations

import base64
import os

import orjson
import pytest
from hypothesis import given, settings, strategies as st

from a3fast import _pure
from a3fast.engines import NATIVE_AVAILABLE

if NATIVE_AVAILABLE:
    from a3fast import _core
pytestmark = pytest.mark.skipif(not NATIVE_AVAILABLE and os.environ.get("A3FAST_REQUIRE_NATIVE") != "1",
                                reason="the a3fast._core extension is not built")

WEIGHTS = (0.4, 0.3, 0.2, 0.1)


def _index(module, n: int):
    """`n` agents over four rows: dense (two in three), sparse (one in 1,000), every agent, none."""
    index = module.Index()
    for _ in range(4):
        index.add_row()
    rows = [[r for r, member in ((0, i % 3 != 0), (1, i % 1000 == 0), (2, True)) if member] for i in range(n)]
    names = [f'agent-{i}' if i % 5 else f'a"gent\\{i}-ü' for i in range(n)]
    index.put_many(list(range(n)), names, rows, [(i % 7) / 7 for i in range(n)])
    return index


def _pieces(seq: int, expl, scores, *, bound: bool, derived: bool = False, custom: bool = False):
    tail = orjson.dumps({"route": 'r"1', "timings": {"gather_ms": 0.012, "decided_at": "2026-01-01T00:00:00.000001Z"}})
    return (seq, expl, None if custom or not bound else scores,
            orjson.dumps({"ids": "", "columns": [["x", "json", [1, "\u2028"]]]}) if custom and bound else None,
            orjson.dumps({"goal": 'quote " and \\', "requirements": {"v": "1.0"}}),
            orjson.dumps({"agent": {"name": 'a"1', "namespace": "ns"}}) if bound else None,
            b"12" if seq % 2 else orjson.dumps({"names": ["a", 'b"'], "live": ""}),
            orjson.dumps(["capability:a.b@1", 'x"y']), orjson.dumps({"v": "1.0", "note": "ü\n"}),
            orjson.dumps({"v": "1.0", "agent": {"name": 'a"1'}}) if bound else None,
            None if bound or derived else orjson.dumps("no eligible agent among 3 candidates: x failed by a, b"),
            derived, tail)


def _both(n: int, rows: list[int], excluded: list[int] = ()):
    out = []
    for module in (_core, _pure):
        index = _index(module, n)
        expl = index.explain(rows, module.NO_AGENT_REF, list(excluded))
        out.append((index, expl, index.score(expl, [], -1, -1, WEIGHTS)))
    return out


@pytest.mark.parametrize("n, rows, excluded", [(10, [0, 1], []), (10, [3], []), (10, [2], [4]), (0, [0], []),
                                                (3000, [0, 1], [7]), (70_000, [1, 0], []), (70_000, [2, 0], [])])
def test_one_placements_lines_are_the_same_bytes_on_both_engines(n, rows, excluded):
    (native, n_expl, n_scores), (pure, p_expl, p_scores) = _both(n, rows, excluded)
    cases = [dict(bound=True), dict(bound=True, custom=True), dict(bound=False, derived=True), dict(bound=False)]
    for seq, case in enumerate(cases, 7):
        written = native.write_placement_lines(*_pieces(seq, n_expl, n_scores, **case))
        assert written == pure.write_placement_lines(*_pieces(seq, p_expl, p_scores, **case)), case
        lines = [orjson.loads(line) for line in written.splitlines()]
        assert [line["seq"] for line in lines] == list(range(seq, seq + len(lines)))
        assert len(lines) == (3 if case["bound"] else 2)


def test_every_base64_length_is_written_alike_on_both_engines():
    # The native writer's base64 takes six bytes a step while eight can be read, then three, then
    # the padded tail: fleets of 1 to 60 agents give id sets and score columns of every length
    # class around those steps (a set's Roaring bytes are 16 + 2 per id; a column 8 per agent).
    for n in range(1, 61):
        (native, n_expl, n_scores), (pure, p_expl, p_scores) = _both(n, [2])
        for case in (dict(bound=True), dict(bound=False, derived=True)):
            written = native.write_placement_lines(*_pieces(1, n_expl, n_scores, **case))
            assert written == pure.write_placement_lines(*_pieces(1, p_expl, p_scores, **case)), (n, case)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_the_native_writers_base64_is_the_standards(data):
    # twelve bytes a step with SSSE3 while sixteen can be read, then six, three and the padded
    # tail: any length, any bytes, equal to RFC 4648 §4's
    assert _core.base64_of(data) == base64.b64encode(data)


def test_the_native_writers_base64_at_every_length_around_its_steps():
    data = bytes(range(256)) * 2
    for n in range(len(data)):
        assert _core.base64_of(data[n // 3:n // 3 + n]) == base64.b64encode(data[n // 3:n // 3 + n]), n


def _error(call):
    try:
        call()
    except (TypeError, ValueError) as exc:
        return type(exc), str(exc)
    return None


@pytest.mark.parametrize("change", [
    {2: None, 3: None},                     # bound without scores
    {3: b"{}"},                             # bound with both kinds of scores
    {4: "text"},                            # a piece that is not bytes
    {12: b""},                              # a tail that is no object
    {10: b'"why"'},                         # a bound placement with a reason
    {1: None},                              # no explanation
])
def test_both_engines_refuse_the_same_arguments_of_a_bound_placement(change):
    (native, n_expl, n_scores), (pure, p_expl, p_scores) = _both(10, [0])
    found = []
    for index, expl, scores in ((native, n_expl, n_scores), (pure, p_expl, p_scores)):
        args = list(_pieces(3, expl, scores, bound=True))
        for k, value in change.items():
            args[k] = value
        found.append(_error(lambda: index.write_placement_lines(*args)))
    assert found[0] is not None and found[0] == found[1]


@pytest.mark.parametrize("change", [
    {10: None},                             # neither a reason nor a derived one
    {11: True},                             # a reason and a derived one
    {2: "scores"},                          # scores for a rejection
    {9: b"{}"},                             # a declaration for a rejection
])
def test_both_engines_refuse_the_same_arguments_of_a_rejection(change):
    (native, n_expl, n_scores), (pure, p_expl, p_scores) = _both(10, [0])
    found = []
    for index, expl, scores in ((native, n_expl, n_scores), (pure, p_expl, p_scores)):
        args = list(_pieces(3, expl, scores, bound=False))
        for k, value in change.items():
            args[k] = scores if value == "scores" else value
        found.append(_error(lambda: index.write_placement_lines(*args)))
    assert found[0] is not None and found[0] == found[1]


def test_the_native_writer_refuses_an_explanation_of_another_index():
    a, b = _index(_core, 10), _index(_core, 10)
    expl = a.explain([0], _core.NO_AGENT_REF, [])
    with pytest.raises(ValueError, match="another Index"):
        b.write_placement_lines(*_pieces(1, expl, None, bound=False, derived=True))
