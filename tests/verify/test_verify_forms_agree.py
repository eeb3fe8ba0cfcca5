"""Every vector's trace verifies to the same findings in spec form and in a3fast's compact form
(§7 on the bitmaps must read the records exactly as §7 on the lists)."""
from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from a3fast.record.compact import encode_trace
from a3fast.conformance import load_vectors, trace_bytes
from a3fast.verify import verify_bytes

VECTORS = Path(__file__).resolve().parents[2] / "vectors"

def _is_record(value) -> bool:
    """A trace record as the codec takes one ({seq: int, kind: str, content}); anything that breaks
    the trace format has no compact form and is kept as it is, as `a3fast encode` refuses to guess."""
    return (isinstance(value, dict) and type(value.get("seq")) is int and isinstance(value.get("kind"), str)
            and "content" in value)


def _encoded(values: list) -> list:
    """The values with every record through one encode_trace, in place; the rest as they are."""
    records = [v for v in values if _is_record(v)]
    encoded = iter(list(encode_trace(records)))
    return [next(encoded) if _is_record(v) else v for v in values]


def _changed(original, encoded) -> bool:
    return isinstance(original, dict) and encoded["content"] is not original.get("content")


def compact_form(trace) -> bytes:
    """A vector's trace (a list of elements, or its text) in compact form: every element or line
    the encoder rewrites is written anew, everything else is kept byte for byte (json.loads keeps
    what orjson would change, such as integers beyond 64 bits)."""
    if not isinstance(trace, str):
        return b"".join(orjson.dumps(v) + b"\n" for v in _encoded(trace))
    text = trace.encode()
    if text.lstrip().startswith(b"["):
        try:
            values = json.loads(text)
        except ValueError:
            return text
        if not isinstance(values, list):
            return text
        encoded = _encoded(values)
        if not any(_changed(v, e) for v, e in zip(values, encoded)):
            return text
        return orjson.dumps(encoded)
    lines = text.split(b"\n")
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except (ValueError, RecursionError):
            parsed.append(None)
    encoded = _encoded(parsed)
    return b"\n".join(orjson.dumps(e) if _changed(p, e) else line
                      for e, p, line in zip(encoded, parsed, lines))


def _params():
    for vector in load_vectors(VECTORS):
        yield pytest.param(vector, id=vector.id)


def _pairs(findings):
    return sorted(((f.code, f.seq) for f in findings), key=repr)


@pytest.mark.parametrize("vector", list(_params()))
def test_spec_and_compact_forms_give_the_same_findings(vector):
    spec = verify_bytes(trace_bytes(vector.trace))
    compact = compact_form(vector.trace)
    assert _pairs(verify_bytes(compact)) == _pairs(spec)


def test_the_compact_form_of_a_placement_is_compact_indeed():
    # guards the comparison above against an encoder that leaves everything in spec form
    [vector] = [v for v in load_vectors(VECTORS) if v.id == "initial.json:a valid placement"]
    assert b"a3fast.compact" in compact_form(vector.trace)
