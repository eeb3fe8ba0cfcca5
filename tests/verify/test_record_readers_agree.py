"""The record readers agree on every record whatever its member order, its whitespace or the
extension members it carries: `a3fast verify`, `read_records`, the report and replay read one
framing (a3fast.framing) and take a record's kind from parsing it, so they see the same records,
the same placements and the same findings."""
from __future__ import annotations

import json
import random

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a3fast import read_records
from a3fast.replay import replay
from a3fast.report.model import summarise_trace
from a3fast.verify import Verifier, verify_bytes
from a3fast.trace import read_trace

from factories import compact_records, declaration, fleet_of, requirements, spec_records

DECLARATIONS = [declaration("a", capabilities=[("x.y", 1)], clearances=["r.read"], cost="0.5"),
                declaration("b", capabilities=[("x.y", 1), ("z.w", 2)], cost="0.2"),
                declaration("c", capabilities=[("z.w", 2)], clearances=["r.read"])]
TASKS = [requirements(capabilities=["x.y/1"]), requirements(capabilities=["z.w/2"], clearances=["r.read"]),
         requirements(capabilities=["q.q/1"]), requirements(capabilities=["x.y/1"], exclude=["b"])]


def _placements():
    fleet = fleet_of(None, DECLARATIONS)
    return [fleet.place(task) for task in TASKS]


PLACEMENTS = _placements()
FORMS = {"spec": spec_records(PLACEMENTS), "compact": compact_records(PLACEMENTS)}


def _reordered(value, rng: random.Random):
    if isinstance(value, dict):
        items = [(k, _reordered(v, rng)) for k, v in value.items()]
        rng.shuffle(items)
        return dict(items)
    if isinstance(value, list):
        return [_reordered(v, rng) for v in value]
    return value


def _written(record: dict, rng: random.Random, spaced: bool, extended: bool) -> bytes:
    record = _reordered(record, rng)
    if extended:
        record = {**record, "x-note": {"kind": "task.submitted", "seq": 0}}
        items = list(record.items())
        rng.shuffle(items)
        record = dict(items)
    if spaced:
        return json.dumps(record, separators=(" , ", " : ")).encode()
    return orjson.dumps(record)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(form=st.sampled_from(sorted(FORMS)), seed=st.integers(0, 2**32 - 1), spaced=st.lists(st.booleans(), min_size=12,
       max_size=12), extended=st.lists(st.booleans(), min_size=12, max_size=12), array=st.booleans())
def test_verify_read_records_report_and_replay_see_the_same_records(form, seed, spaced, extended, array):
    records = FORMS[form]
    rng = random.Random(seed)
    written = [_written(r, rng, spaced[i % 12], extended[i % 12]) for i, r in enumerate(records)]
    canonical = b"".join(orjson.dumps(r) + b"\n" for r in records)
    data = (b"[" + b",\n".join(written) + b"]") if array else b"\n".join(written) + b"\n"

    expected = list(read_records(canonical))
    seen = list(read_records(data))
    assert [(r["seq"], r["kind"]) for r in seen] == [(r["seq"], r["kind"]) for r in expected]
    assert [r["content"] for r in seen] == [r["content"] for r in expected]

    verifier = Verifier().feed_all(read_trace(data))
    assert verifier.records == len(records)
    findings = [(f.code, f.seq) for f in verify_bytes(data)]
    assert findings == [(f.code, f.seq) for f in verify_bytes(canonical)]

    report = summarise_trace(data)
    baseline = summarise_trace(canonical)
    assert (report.records, report.placements, report.bound, report.unschedulable) == \
        (baseline.records, baseline.placements, baseline.bound, baseline.unschedulable)
    assert [(f.code, f.seq) for f in report.findings] == findings


@pytest.mark.slow  # 40 replays of a small trace: 2-3 s on the shared machine
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(form=st.sampled_from(sorted(FORMS)), seed=st.integers(0, 2**32 - 1), spaced=st.lists(st.booleans(), min_size=12,
       max_size=12), extended=st.lists(st.booleans(), min_size=12, max_size=12), array=st.booleans())
def test_replay_sees_every_placement_verify_sees(form, seed, spaced, extended, array):
    records = FORMS[form]
    rng = random.Random(seed)
    written = [_written(r, rng, spaced[i % 12], extended[i % 12]) for i, r in enumerate(records)]
    data = (b"[" + b",\n".join(written) + b"]") if array else b"\n".join(written) + b"\n"
    placed = [r["seq"] for r in records if r["kind"] in ("task.bound", "task.rejected")]
    assert [v.seq for v in replay(data, fleet_of(None, DECLARATIONS))] == placed
