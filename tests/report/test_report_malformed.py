"""`a3fast report` on any trace: a placement malformed in structure (a null declaration, candidates
that are not an array, scores that are not an object, predicates that are not strings) is shown on
the page as an E_STRUCTURE finding, as `a3fast verify` reports it; the report never fails as
a3fast's own error. A hypothesis fuzz replaces any member of a placement record with any JSON value."""
from __future__ import annotations

import copy
import subprocess
import sys

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a3fast.report.model import ReportInputError, summarise_trace
from a3fast.report.render import page_data

from report_traces import placed_trace


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    path = tmp_path_factory.mktemp("malformed") / "trace.jsonl"
    placed_trace(path, agents=40, tasks=6)
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _first(records, kind):
    return next(i for i, r in enumerate(records) if r["kind"] == kind)


def _with(records, kind, path, value):
    out = copy.deepcopy(records)
    at = _first(out, kind)
    target = out[at]["content"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out, out[at]["seq"]


MALFORMED = [
    ("task.bound", ("scheduling", "declaration"), None),
    ("task.bound", ("scheduling", "candidates"), {"not": "an array"}),
    ("task.bound", ("scheduling", "candidates"), [1, None]),
    ("task.bound", ("scheduling", "scores"), []),
    ("task.bound", ("scheduling", "scores"), {"agent-000001": 5}),
    ("task.bound", ("scheduling", "filters_passed"), [1, {"x": 1}]),
    ("task.bound", ("scheduling", "filters_failed"), [{"candidate": "a", "predicate": [1]}]),
    ("task.bound", ("scheduling",), None),
    ("task.rejected", ("candidates",), "agent-000001"),
    ("task.rejected", ("filters_failed",), {"a": 1}),
]


@pytest.mark.slow  # 2 s or more: a deadline waited out, a subprocess, or a page rendered
@pytest.mark.parametrize("kind, path, value", MALFORMED, ids=lambda v: repr(v)[:40])
def test_rule_a_malformed_placement_is_an_e_structure_finding_on_the_page(records, tmp_path, kind, path, value):
    bad, seq = _with(records, kind, path, value)
    trace = tmp_path / "bad.jsonl"
    trace.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in bad))
    page = tmp_path / "bad.html"
    done = subprocess.run([sys.executable, "-m", "a3fast", "report", str(trace), "-o", str(page)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = summarise_trace(bad)
    assert any(f.code == "E_STRUCTURE" and f.seq == seq for f in summary.findings), summary.findings
    html = page.read_text()
    assert "E_STRUCTURE" in html


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8)


def _paths(value, prefix=()):
    """Every member path inside a record's content."""
    yield prefix
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, prefix + (key,))
    elif isinstance(value, list):
        for i, inner in enumerate(value[:4]):
            yield from _paths(inner, prefix + (i,))


@pytest.mark.slow  # 2 s or more: a deadline waited out, a subprocess, or a page rendered
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data())
def test_rule_the_report_model_reads_any_malformed_placement(records, data):
    placements = [i for i, r in enumerate(records) if r["kind"] in ("task.bound", "task.rejected")]
    at = data.draw(st.sampled_from(placements))
    bad = copy.deepcopy(records)
    paths = [p for p in _paths(bad[at]["content"]) if p]
    path = data.draw(st.sampled_from(paths))
    value = data.draw(json_values)
    target = bad[at]["content"]
    for key in path[:-1]:
        target = target[key]
    if data.draw(st.booleans()) and isinstance(target, dict):
        del target[path[-1]]
    else:
        target[path[-1]] = value
    try:
        summary = summarise_trace(bad)
    except ReportInputError as exc:   # a break of the trace format: exit 2, each problem named
        assert exc.problems and all(isinstance(p, str) for p in exc.problems)
        return
    # the page's data (what the full page embeds; its charts are drawn by the parametrized test)
    assert len(page_data(summary)["placements"]) == len(summary.listed)
    for seq, _, _ in summary.malformed:
        assert any(f.code == "E_STRUCTURE" and f.seq == seq for f in summary.findings)
