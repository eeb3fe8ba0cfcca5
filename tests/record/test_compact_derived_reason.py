"""Derived reasons (docs/compact-format.md, format 2): a rejection whose reason is the text its lists
give leaves the reason out of the compact form; decoding and the verifier derive it, exactly."""
from __future__ import annotations

import copy

import orjson
import pytest

from a3fast import Fleet, verify
from a3fast.record.compact import KEY, CompactError, Decoder, Encoder, decode_trace, encode_trace

from factories import compact_records, declaration, fleet_of, requirements, spec_records

AGENTS = [declaration(name, capabilities=[("case.summarise", 1)], clearances=clearances, residency=residency)
          for name, clearances, residency in [("alpha", ["data.pii"], ["us"]), ("beta", [], ["eu"]),
                                              ("gamma", ["data.pii"], ["eu"]), ("delta", [], ["us"])]]
UNSCHEDULABLE = requirements(capabilities=[("case.summarise", 1)], clearances=["data.pii"], residency="eu",
                             exclude=["gamma"])


def spec_trace(engine, **place):
    p = fleet_of(engine, AGENTS, batch=True).place(UNSCHEDULABLE, **place)
    assert not p.bound
    return spec_records([p]), p


def compact_trace(engine, **place):
    p = fleet_of(engine, AGENTS, batch=True).place(UNSCHEDULABLE, **place)
    return compact_records([p]), p


def test_a_rejection_with_the_reason_its_lists_give_leaves_it_out_and_decodes_to_it(engine):
    records, p = compact_trace(engine)
    content = records[-1]["content"]
    assert "reason" not in content
    assert content[KEY]["format"] == 2 and content[KEY]["derived_reason"] is True
    decoded = list(decode_trace(records))[-1]["content"]
    assert decoded == p.rejection
    assert list(decoded)[:2] == ["code", "reason"]


def test_the_spec_encoder_derives_the_same_reason_and_round_trips_byte_for_byte(engine):
    records, p = spec_trace(engine)
    encoded = list(encode_trace(records))
    assert "reason" not in encoded[-1]["content"]
    assert encoded[-1]["content"][KEY]["derived_reason"] is True
    assert orjson.dumps(list(decode_trace(encoded))) == orjson.dumps(records)


def test_a_reason_that_is_not_the_derived_text_is_kept_in_format_1(engine):
    records, _ = spec_trace(engine)
    records[-1]["content"]["reason"] += " (edited)"
    encoded = list(encode_trace(records))[-1]["content"]
    assert encoded["reason"].endswith("(edited)")
    assert encoded[KEY]["format"] == 1 and "derived_reason" not in encoded[KEY]


def test_a_reason_in_another_place_is_kept(engine):
    records, _ = spec_trace(engine)
    content = records[-1]["content"]
    records[-1]["content"] = {"reason": content["reason"], **{k: v for k, v in content.items() if k != "reason"}}
    encoded = list(encode_trace(records))
    assert "reason" in encoded[-1]["content"]
    assert orjson.dumps(list(decode_trace(encoded))) == orjson.dumps(records)


def test_a_rejection_without_code_derives_its_reason_first(engine):
    records, _ = spec_trace(engine)
    del records[-1]["content"]["code"]
    encoded = list(encode_trace(records))
    assert encoded[-1]["content"][KEY].get("derived_reason") is True
    decoded = list(decode_trace(encoded))
    assert list(decoded[-1]["content"])[0] == "reason"
    assert orjson.dumps(decoded) == orjson.dumps(records)


def test_a_rejection_with_no_candidates_keeps_its_reason(engine):
    fleet = Fleet(engine=engine)
    p = fleet.place(UNSCHEDULABLE)
    kind, content = Encoder().encode_placement(1, p)[-1]
    written = orjson.loads(content)
    assert written["reason"] == p.rejection["reason"] and "derived_reason" not in written[KEY]


def test_the_verifier_reads_a_derived_reason_as_the_decoded_one(engine):
    records, _ = compact_trace(engine)
    assert verify(records) == verify(list(decode_trace(records))) == []


def test_a_derived_reason_naming_no_predicate_is_a_rejection_reason_error(engine):
    records, _ = compact_trace(engine)
    records[-1]["content"][KEY]["filters_passed"] = ["not a predicate"] * len(
        records[-1]["content"][KEY]["filters_passed"])
    codes = [f.code for f in verify(records)]
    assert codes == ["E_REJECTION_REASON"]


HOSTILE = {
    "derived_reason not true": (lambda c: c[KEY].update(derived_reason=1), "derived_reason: expected true"),
    "derived_reason in format 1": (lambda c: c[KEY].update(format=1), "not a member of the compact form"),
    "a reason beside a derived one": (lambda c: c.update(reason="no eligible agent"), "found it beside too"),
    "no candidates to derive from": (lambda c: c[KEY].update(candidates=""), "has none"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_derived_reason_outside_the_format_is_a_compact_error(engine, case):
    records, _ = compact_trace(engine)
    change, message = HOSTILE[case]
    bad = copy.deepcopy(records)
    change(bad[-1]["content"])
    with pytest.raises(CompactError, match=message):
        list(decode_trace(bad))
    assert any(f.code == "E_STRUCTURE" for f in verify(bad))


def test_a_bound_record_has_no_derived_reason(engine):
    p = fleet_of(engine, AGENTS, batch=True).place(requirements(capabilities=[("case.summarise", 1)]))
    records = compact_records([p])
    records[-1]["content"][KEY].update(format=2, derived_reason=True)
    with pytest.raises(CompactError, match="compact format 2 is a task.rejected record's"):
        Decoder().decode_content(3, "task.bound", records[-1]["content"])
    records[-1]["content"][KEY].update(format=1)
    with pytest.raises(CompactError, match="not a member"):
        Decoder().decode_content(3, "task.bound", records[-1]["content"])
