"""Compact traces (docs/compact-format.md) verify as the spec traces they stand for."""
from __future__ import annotations

import base64
import copy

import numpy as np

import orjson
import pytest

from a3fast.record.compact import KEY, encode_trace
from a3fast.verify import verify, verify_bytes

from factories import declaration, fleet_of, spec_records


REQ = {"v": "1.0", "capabilities": [{"name": "order.investigate", "version": 2}], "clearances": ["orders.read"]}


@pytest.fixture
def spec_trace(engine):
    fleet = fleet_of(engine, [declaration(f"agent-{i:02d}", namespace="support",
                                          capabilities=[("order.investigate", 2 if i % 3 else 1)],
                                          clearances=["orders.read"], residency=["eu"]) for i in range(40)])
    records = spec_records([fleet.place(REQ) for _ in range(3)])
    seq = len(records) + 1
    records.append({"seq": seq, "kind": "task.submitted", "content": {"requirements": dict(REQ, tools=["x"])}})
    rejected = fleet.place(dict(REQ, tools=["x"]))
    assert not rejected.bound
    records.append({"seq": seq + 1, "kind": "task.rejected", "content": rejected.rejection})
    return records


def test_a_compact_trace_verifies_like_its_spec_form(spec_trace):
    compact = list(encode_trace(spec_trace))
    assert any(KEY in r["content"] for r in compact)
    assert verify(spec_trace) == []
    assert verify(compact) == []
    assert verify_bytes(b"".join(orjson.dumps(r) + b"\n" for r in compact)) == []


def test_a_compact_record_that_cannot_be_decoded_is_E_STRUCTURE(spec_trace):
    compact = copy.deepcopy(list(encode_trace(spec_trace)))
    bound = next(r for r in compact if r["kind"] == "task.bound")
    bound["content"][KEY]["failed"] = "not bitmaps"
    findings = verify(compact)
    assert ("E_STRUCTURE", bound["seq"]) in {(f.code, f.seq) for f in findings}
    assert KEY in findings[0].message


def test_compact_placements_are_checked_on_their_bitmaps_without_decoding(spec_trace, monkeypatch):
    from a3fast.record import compact as compact_module

    compact = list(encode_trace(spec_trace))

    def refuse(self, seq, kind, content):
        if kind == "task.bound" and KEY in content:
            raise AssertionError("a compact task.bound was expanded to its spec lists")
        return original(self, seq, kind, content)

    original = compact_module.Decoder.decode_content
    monkeypatch.setattr(compact_module.Decoder, "decode_content", refuse)
    assert verify(compact) == []


def compact_with(records, change):
    """The compact trace with one change to the bitmaps of its first task.bound, and the spec trace
    that change decodes to: the verifier must say the same of both."""
    from pyroaring import BitMap

    from a3fast.record.compact import _bitmap, _ids_text, decode_trace

    compact = copy.deepcopy(list(encode_trace(records)))
    bound = next(r for r in compact if r["kind"] == "task.bound")
    member = bound["content"][KEY]
    names = member["fleet"]["names"]
    chosen = names.index(member["declaration"]["agent"]["name"])
    change(member, chosen, lambda text: _bitmap(text, "test"), lambda ids: _ids_text(list(BitMap(ids))))
    return compact, list(decode_trace(compact))


def codes(findings):
    return sorted((f.code, f.seq, f.severity) for f in findings)


def fail_chosen(member, chosen, read, write):
    member["failed"][0] = write(list(read(member["failed"][0])) + [chosen])


def unscore_chosen(member, chosen, read, write):
    ids = list(read(member["scores"]["ids"]))
    keep = [j for j, aid in enumerate(ids) if aid != chosen]
    member["scores"]["ids"] = write([ids[j] for j in keep])
    for column in member["scores"]["columns"]:  # the default scorer's columns are all f64
        data = np.frombuffer(base64.b64decode(column[2]), dtype="<f8")[keep]
        column[2] = base64.b64encode(data.tobytes()).decode()


def drop_a_passed_predicate(member, chosen, read, write):
    member["filters_passed"].pop()
    member["failed"].pop()


def fail_a_scored_agent_on_an_unmatched_predicate(member, chosen, read, write):
    member["filters_passed"].append("tool:never-matched")
    member["failed"].append(write([chosen]))


@pytest.mark.parametrize("change", [fail_chosen, unscore_chosen, drop_a_passed_predicate,
                                    fail_a_scored_agent_on_an_unmatched_predicate])
def test_compact_findings_equal_the_findings_on_the_decoded_trace(spec_trace, change):
    compact, decoded = compact_with(spec_trace, change)
    assert codes(verify(compact)) == codes(verify(decoded)) != []


@pytest.mark.parametrize("total", ["high", None, True, [1], "missing"])
def test_a_score_total_that_is_no_number_is_found_in_both_forms(spec_trace, total):
    # the compact member's `total` column in JSON (or none at all) decodes to a spec record whose
    # §7 structure is wrong: the verifier says so of the compact record too, in the same words
    spec = copy.deepcopy(spec_trace)
    bound = next(r for r in spec if r["kind"] == "task.bound")
    for entry in bound["content"]["scheduling"]["scores"].values():
        if total == "missing":
            del entry["total"]
        else:
            entry["total"] = total
    compact = list(encode_trace(spec))
    assert KEY in next(r for r in compact if r["seq"] == bound["seq"])["content"]
    in_spec = [(f.code, f.seq, f.message) for f in verify(spec)]
    assert in_spec and all(code == "E_STRUCTURE" for code, _, _ in in_spec)
    assert [(f.code, f.seq, f.message) for f in verify(compact)] == in_spec
    assert [(f.code, f.seq, f.message) for f in verify_bytes(b"".join(orjson.dumps(r) + b"\n" for r in compact))] \
        == in_spec


def test_an_empty_agent_name_is_found_where_a_record_lists_it_in_both_forms(spec_trace):
    # another implementation's record lists a candidate named "": the shared name table then holds
    # it, and only the records that list it are held to it, in the words of the spec reader
    spec = copy.deepcopy(spec_trace)
    bounds = [r for r in spec if r["kind"] == "task.bound"]
    scheduling = bounds[0]["content"]["scheduling"]
    scheduling["candidates"].append("")
    scheduling["filters_failed"].append({"candidate": "", "predicate": scheduling["filters_passed"][0]})
    compact = list(encode_trace(spec))
    assert all(KEY in r["content"] for r in compact if r["kind"] == "task.bound")
    in_spec = [(f.code, f.seq, f.message) for f in verify(spec)]
    assert [(code, seq) for code, seq, _ in in_spec] == [("E_STRUCTURE", bounds[0]["seq"])] * 2
    assert [(f.code, f.seq, f.message) for f in verify(compact)] == in_spec


@pytest.mark.parametrize("candidates, failed, scored, totals", [
    ([0, 1], [1, 3], [0], [0.5]),                 # the empty name failed, not a candidate
    ([0, 1], [1], [0, 3], [0.5, 0.25]),           # scored, not a candidate
    ([0, 1, 3], [1], [0, 3], ["x", "y"]),         # a candidate and scored, with totals no number
    ([0, 1, 3], [1, 3], [0], ["x"]),
])
def test_a_record_holding_the_empty_name_anywhere_has_the_findings_of_its_spec_form(
        spec_trace, candidates, failed, scored, totals):
    from a3fast.record.compact import decode_trace
    from a3fast.roaring import serialize_ids

    def ids(values):
        return base64.b64encode(serialize_ids(values)).decode() if values else ""

    compact = copy.deepcopy(list(encode_trace(spec_trace)))
    bound = next(r for r in compact if r["kind"] == "task.bound")
    member = bound["content"][KEY]
    names = member["fleet"]["names"][:3] + [""]
    member["fleet"] = {"names": names, "live": ids([0, 1, 2, 3])}
    member["candidates"] = ids(candidates)
    member["failed"] = [ids(failed)] + [""] * (len(member["filters_passed"]) - 1)
    member["scores"] = {"ids": ids(scored), "columns": [["total", "json", totals]]}
    trace = compact[:compact.index(bound) + 1]
    in_spec = [(f.code, f.seq, f.message) for f in verify(list(decode_trace(trace)))]
    assert ("E_STRUCTURE", bound["seq"]) in {(code, seq) for code, seq, _ in in_spec}
    assert [(f.code, f.seq, f.message) for f in verify(trace)] == in_spec


@pytest.mark.parametrize("total", ["missing", "high"])
def test_a_resumed_reference_carrying_lists_is_checked_as_a_reference_in_both_forms(spec_trace, total):
    # a resumed task.bound with recorded_in is checked as a reference (its cited record explains
    # it): lists it carries as well are not held to anything, in the spec form or the compact one
    spec = copy.deepcopy(spec_trace)
    bound = next(r for r in spec if r["kind"] == "task.bound")
    scheduling = copy.deepcopy(bound["content"]["scheduling"])
    for entry in scheduling["scores"].values():
        if total == "missing":
            del entry["total"]
        else:
            entry["total"] = total
    scheduling.update(resumed=True, recorded_in={"kind": "task.bound", "seq": bound["seq"]})
    seq = spec[-1]["seq"] + 1
    spec.append({"seq": seq, "kind": "task.bound", "content": {"resumed": True, "scheduling": scheduling}})
    compact = list(encode_trace(spec))
    assert KEY in compact[-1]["content"]
    assert verify(spec) == []
    assert verify(compact) == []
    assert verify_bytes(b"".join(orjson.dumps(r) + b"\n" for r in compact)) == []
