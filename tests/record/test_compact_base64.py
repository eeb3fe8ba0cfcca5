"""Base64 in the compact form is read strictly (docs/compact-format.md): text with whitespace, with
its padding missing, with data after the padding or with characters outside the alphabet is refused
(CompactError; E_STRUCTURE from the verifier), never decoded to what it might have meant."""
from __future__ import annotations

import copy
import sys

import orjson
import pytest

from a3fast.record.compact import KEY, CompactError, decode_trace, encode_trace
from a3fast.verify import verify

from factories import declaration, fleet_of

REQ = {"v": "1.0", "capabilities": [{"name": "x.y", "version": 1}], "clearances": ["r.read"]}


@pytest.fixture
def compact_trace(engine):
    """Two bound placements, compact; the second is the one spoiled. Its six agents: two fail the
    capability, two the clearance, two are eligible — so that every base64 text (2 or 6 ids, 2
    doubles) ends in padding. An agent placed over by the first and gone by the second leaves a gap
    in the second's live set, whose two runs end in padding too (one run, the whole set, would not)."""
    agents = [declaration(f"agent-{i}", capabilities=[("x.y", 1 if i < 4 else 2)],
                          clearances=["r.read"] if i < 2 else []) for i in range(6)]
    fleet = fleet_of(engine, [*agents[:3], declaration("agent-2-gone"), *agents[3:]])
    trace = []
    for seq in (1, 4):
        p = fleet.place(REQ)
        assert p.agent == "agent-0"
        trace += [{"seq": seq, "kind": "task.submitted", "content": {"requirements": REQ}},
                  {"seq": seq + 1, "kind": "task.admitted",
                   "content": {"agent": {"name": "agent-0", "namespace": "ns"}}},
                  {"seq": seq + 2, "kind": "task.bound", "content": {"scheduling": orjson.loads(p.scheduling_json())}}]
        if seq == 1:
            fleet.remove("agent-2-gone")
    compact = list(encode_trace(trace))
    assert list(decode_trace(compact)) == trace and verify(compact) == []
    return compact


# Where the compact task.bound holds base64: (what, path from the compact member to the text).
FIELDS = {"fleet live set": ("fleet", "live"), "first failed bitmap": ("failed", 0),
          "second failed bitmap": ("failed", 1), "scores ids": ("scores", "ids"),
          "total column": ("scores", "columns", 0, 2)}
# Fields the verifier reads without expanding the record (docs/verify.md): it checks the bitmaps.
READ_BY_THE_VERIFIER = ["fleet live set", "first failed bitmap", "second failed bitmap", "scores ids"]


def spoil(text: str, how: str) -> str:
    middle = len(text) // 2
    if how == "space":
        return text[:middle] + " " + text[middle:]
    if how == "newline":
        return text[:middle] + "\n" + text[middle:]
    if how == "outside the alphabet":
        return text[:middle] + "!" + text[middle:]
    if how == "url-safe alphabet":
        return text[:middle] + "_" + text[middle:]
    assert text.endswith("="), f"{text!r} has no padding to spoil"
    if how == "padding missing":
        return text.rstrip("=")
    if how == "data after the padding":
        return text + "AAAA"
    # what a decoder takes and reads as the same bytes, so two texts would stand for one set
    if how == "padding past a whole group":
        return text + "===="
    if how == "bits past the last byte":
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        at = len(text.rstrip("=")) - 1
        return text[:at] + alphabet[alphabet.index(text[at]) ^ 1] + text[at + 1:]
    raise AssertionError(how)


SPOILS = ["space", "newline", "outside the alphabet", "url-safe alphabet", "padding missing",
          "data after the padding", "padding past a whole group", "bits past the last byte"]


def spoiled(compact_trace, field, how):
    trace = copy.deepcopy(compact_trace)
    holder = trace[5]["content"][KEY]
    *steps, last = FIELDS[field]
    for step in steps:
        holder = holder[step]
    holder[last] = spoil(holder[last], how)
    return trace


@pytest.mark.parametrize("how", SPOILS)
@pytest.mark.parametrize("field", list(FIELDS))
def test_compact_base64_is_decoded_strictly(compact_trace, field, how):
    with pytest.raises(CompactError, match="base64"):
        list(decode_trace(spoiled(compact_trace, field, how)))


@pytest.mark.parametrize("how", SPOILS)
@pytest.mark.parametrize("field", READ_BY_THE_VERIFIER)
def test_the_verifier_reads_compact_base64_strictly(compact_trace, field, how):
    findings = verify(spoiled(compact_trace, field, how))
    assert [(f.code, f.seq) for f in findings] == [("E_STRUCTURE", 6)]
    assert "base64" in findings[0].message


def test_a_compact_record_whose_score_column_cannot_be_read_does_not_verify_clean(compact_trace):
    trace = spoiled(compact_trace, "total column", "outside the alphabet")
    with pytest.raises(CompactError):
        list(decode_trace(trace))
    assert ("E_STRUCTURE", 6) in [(f.code, f.seq) for f in verify(trace)]


@pytest.mark.parametrize("how", SPOILS)
def test_before_python_3_11_base64_is_decoded_as_strictly(compact_trace, monkeypatch, how):
    # requires-python admits 3.10, whose binascii has no strict mode: the reader there is
    # base64.b64decode(validate=True), held here to the same refusals and the same decoding
    decoded = list(decode_trace(compact_trace))
    monkeypatch.setattr(sys, "version_info", (3, 10, 0))
    assert list(decode_trace(compact_trace)) == decoded
    with pytest.raises(CompactError, match="base64"):
        list(decode_trace(spoiled(compact_trace, "first failed bitmap", how)))


@pytest.mark.parametrize("text", ["AAAA=", "AAAA==", "AAAA====", "AAAAAA==AA==", "AB==", "AAB="])
def test_base64_has_one_text_for_its_bytes(text):
    # a lenient decoder reads each as the canonical text's bytes ("AAAA" and "AA==", "AAA="): a
    # whole group padded again, padding inside, bits set past the last byte
    from a3fast.record.compact import _unb64

    with pytest.raises(CompactError, match="base64"):
        _unb64(text, "$.x")


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, 255, 4096, 65_537])
def test_what_a3fast_writes_is_read_back_at_every_length(size):
    import base64
    import os

    from a3fast.record.compact import _unb64

    data = os.urandom(size)
    assert _unb64(base64.b64encode(data).decode(), "$.x") == data
