"""The compact codec on hostile input: it answers with a value or a CompactError, never another
exception, and whatever it encodes decodes to exactly what it was — extra record members included."""
import base64
import copy
import math
import struct

import msgspec
import orjson
import pytest
from hypothesis import assume, given, strategies as st
from pyroaring import BitMap

from a3fast.record.compact import KEY, CompactError, Decoder, Encoder, decode_trace, encode_trace, serialize_ids
from a3fast.errors import json_path
from a3fast.explain import ExplainError, explain_record
from a3fast.workload import generate_fleet, generate_tasks

from factories import compact_records, fleet_of, spec_records
from strategies import declarations, requirements


def json_bytes(value):
    """JSON text of a value, integers over 64 bits included (orjson refuses those)."""
    return msgspec.json.encode(value)


def small_fleet_placements():
    """Placements, bound and rejected, on a small fleet that changes once between them (so the
    compact trace has a snapshot of its own and one based on it)."""
    decls = generate_fleet(8, 5)
    fleet = fleet_of(None, decls[:6], batch=True)
    tasks = generate_tasks(decls, 4, 5)
    placements = [fleet.place(t) for t in tasks[:2]] + [fleet.place({"clearances": ["no.such"]})]
    fleet.extend(decls[6:])
    fleet.remove(decls[0]["agent"]["name"])
    return placements + [fleet.place(t) for t in tasks[2:]]


# What the mutations start from: the same placements in both forms.
_PLACEMENTS = small_fleet_placements()
SPEC = spec_records(_PLACEMENTS)
COMPACT = compact_records(_PLACEMENTS)
assert {r["kind"] for r in SPEC} >= {"task.bound", "task.rejected"}
assert sum(KEY in r["content"] for r in COMPACT) == sum(r["kind"] in ("task.bound", "task.rejected") for r in SPEC)
assert any("base" in r["content"][KEY]["fleet"] for r in COMPACT if KEY in r["content"]
           and isinstance(r["content"][KEY]["fleet"], dict))


def paths(value, path=()):
    """Every path into a JSON value (the value itself first)."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from paths(item, path + (i,))


def at(value, path):
    for step in path:
        value = value[step]
    return value


def json_type(value):
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


_bitmap_text = st.lists(st.integers(0, 40), max_size=6).map(
    lambda ids: base64.b64encode(serialize_ids(sorted(set(ids)))).decode())
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.sampled_from([1e308, -0.0, 2**64, 1.5, 0, 1])
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6) | _bitmap_text
    | st.sampled_from(["", "f64", "i64", "json", "AAAA", "a3fast.compact", "task.bound"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6)


@st.composite
def mutated_traces(draw, base):
    """A trace with one record changed: a value replaced by one of another JSON type, a member or
    element deleted, or a member added."""
    trace = copy.deepcopy(base)
    index = draw(st.integers(0, len(trace) - 1))
    record = trace[index]
    targets = list(paths(record))
    path = draw(st.sampled_from(targets))
    how = draw(st.sampled_from(["replace", "delete", "add"]))
    if how == "replace" or not path:
        new = draw(json_values)
        assume(json_type(new) != json_type(at(record, path)))
        if path:
            at(record, path[:-1])[path[-1]] = new
        else:
            trace[index] = new
    elif how == "delete":
        del at(record, path[:-1])[path[-1]]
    else:
        holder = at(record, path)
        assume(isinstance(holder, (dict, list)))
        if isinstance(holder, dict):
            holder[draw(st.text(max_size=8))] = draw(json_values)
        else:
            holder.insert(draw(st.integers(0, len(holder))), draw(json_values))
    return trace


def outcome(fn):
    """('value', result) or ('refused', message): CompactError is the only refusal allowed."""
    try:
        return "value", fn()
    except CompactError as exc:
        assert str(exc)
        return "refused", str(exc)


def explain_all(records):
    for record in records:
        if isinstance(record, dict):
            try:
                explain_record(record.get("seq"), record.get("kind"), record.get("content"))
            except ExplainError as exc:
                assert str(exc).startswith(f"seq {record.get('seq')}: $.content")


def check_codec(trace, spec_form):
    encoded = outcome(lambda: list(encode_trace(trace)))
    decoded = outcome(lambda: list(decode_trace(trace)))
    if encoded[0] == "value":
        round_trip = outcome(lambda: list(decode_trace(encoded[1])))
        if spec_form:
            assert round_trip[0] == "value"
            assert json_bytes(round_trip[1]) == json_bytes(trace)
        elif decoded[0] == "value":
            assert json_bytes(round_trip[1]) == json_bytes(decoded[1])
    explain_all(decoded[1] if decoded[0] == "value" else trace)


@given(mutated_traces(SPEC))
def test_mutated_spec_records_encode_losslessly_or_are_refused_with_a_compact_error(trace):
    check_codec(trace, spec_form=not any(isinstance(r, dict) and isinstance(r.get("content"), dict)
                                         and KEY in r["content"] for r in trace))


@given(mutated_traces(COMPACT))
def test_mutated_compact_records_decode_or_are_refused_with_a_compact_error(trace):
    check_codec(trace, spec_form=False)


# -- the round trip of whole records ----------------------------------------------------------------------
def with_extras(seq):
    return {"trace_id": f"t{seq}", "at": seq * 1.5} if seq % 2 else {"note": None}


@given(st.lists(declarations(), min_size=1, max_size=8), st.lists(requirements(), min_size=1, max_size=4))
def test_decode_of_encode_is_the_trace_byte_for_byte_extra_members_included(engine, fleet_docs, tasks):
    fleet = fleet_of(engine, fleet_docs)
    trace = [{**with_extras(r["seq"]), **r} for r in spec_records([fleet.place(t) for t in tasks])]
    trace.append({"seq": len(trace) + 1, "kind": "task.submitted", "content": {"big": 2**64}, "z": [1]})
    encoded = list(encode_trace(trace))
    placements = [r for r in encoded if r["kind"] in ("task.bound", "task.rejected")]
    assert placements and all(KEY in r["content"] for r in placements)
    assert json_bytes(list(decode_trace(encoded))) == json_bytes(trace)
    assert [list(r) for r in encoded] == [list(r) for r in trace]


def test_compact_placements_decode_to_the_spec_records_byte_for_byte(engine):
    decls = generate_fleet(60, 2)
    fleet = fleet_of(engine, decls, batch=True)
    placements = [fleet.place(t) for t in generate_tasks(decls, 12, 2)]
    assert orjson.dumps(list(decode_trace(compact_records(placements)))) == orjson.dumps(spec_records(placements))


# -- the encoder keeps what it cannot encode exactly ------------------------------------------------------
def bound_record():
    return copy.deepcopy(next(r for r in SPEC if r["kind"] == "task.bound"))


def rejected_record():
    return copy.deepcopy(next(r for r in SPEC if r["kind"] == "task.rejected" and r["content"]["filters_failed"]))


def test_a_rejection_with_a_predicate_that_is_not_a_string_stays_in_spec_form():
    record = rejected_record()
    record["content"]["filters_failed"][0]["predicate"] = ["not", "a", "string"]
    assert Encoder().encode(record["seq"], record["kind"], record["content"]) is record["content"]


@pytest.mark.parametrize("change", [
    lambda s: s["filters_passed"].append(7),
    lambda s: s["filters_failed"].append({"predicate": s["filters_passed"][0], "candidate": s["candidates"][0]}),
    lambda s: s["scores"].update({s["candidates"][0]: 1.5}),
    lambda s: s.pop("declaration"),
    lambda s: s.update({"candidates": s.pop("candidates")}),  # the scheduling members in another order
], ids=["predicate-number", "pair-members-reordered", "score-entry-number", "no-declaration", "members-reordered"])
def test_a_bound_record_the_format_cannot_say_exactly_stays_in_spec_form(change):
    record = bound_record()
    change(record["content"]["scheduling"])
    before = orjson.dumps(record)
    encoded = Encoder().encode(record["seq"], record["kind"], record["content"])
    assert KEY not in encoded and orjson.dumps(record) == before


def test_a_record_already_in_compact_form_is_encoded_as_it_is():
    trace = copy.deepcopy(COMPACT)
    assert list(encode_trace(trace)) == trace


def test_the_compact_member_means_the_compact_form_only_in_placement_records():
    content = {KEY: "anything", "x": 1}
    assert Decoder().decode_content(1, "task.submitted", content) is content
    assert Encoder().encode(1, "task.submitted", content) is content


def test_integers_beyond_64_bits_pass_through_the_encoder():
    record = bound_record()
    record["content"]["scheduling"]["timings"] = {"huge": 2**80}
    encoded = list(encode_trace([record]))
    assert KEY in encoded[0]["content"]
    assert json_bytes(list(decode_trace(encoded))) == json_bytes([record])
    content = {"x": 18446744073709551616}
    assert Encoder().encode(1, "task.submitted", content) == content


def test_a_score_column_of_nan_or_infinity_is_written_as_json_values():
    record = bound_record()
    scores = record["content"]["scheduling"]["scores"]
    for entry in scores.values():
        entry["total"] = math.inf
    encoded = Encoder().encode(record["seq"], record["kind"], record["content"])
    column = dict((c[0], c[1]) for c in encoded[KEY]["scores"]["columns"])
    assert column["total"] == "json"


# -- the public entry points raise only CompactError -------------------------------------------------------
@pytest.mark.parametrize("seq, kind", [("1", "task.bound"), (None, "task.bound"), (True, "task.bound"),
                                       (1.0, "task.bound"), (1, None), (1, 5), (1, b"task.bound")])
def test_wrong_argument_types_are_a_compact_error(seq, kind):
    content = bound_record()["content"]
    with pytest.raises(CompactError):
        Encoder().encode(seq, kind, content)
    with pytest.raises(CompactError):
        Decoder().decode_content(seq, kind, next(r for r in COMPACT if KEY in r["content"])["content"])


@pytest.mark.parametrize("record", [5, None, "x", [], {"seq": 1, "kind": "task.bound"}, {"kind": "a", "content": {}}])
def test_a_trace_entry_that_is_not_a_record_is_a_compact_error(record):
    with pytest.raises(CompactError, match="record 1"):
        list(encode_trace([record]))
    with pytest.raises(CompactError, match="record 1"):
        list(decode_trace([record]))


# -- every member the decoder reads: a wrong type is a CompactError naming the seq and the path ----------------
OTHER_TYPES = [None, True, 1.5, 1e308, 2**64, "x", [], {}]


def compact_member_paths():
    """(record index, path inside the compact member) for every member and element of every compact
    record of the fixture trace."""
    for index, record in enumerate(COMPACT):
        if KEY in record["content"]:
            for path in paths(record["content"][KEY]):
                yield index, path


def path_text(path):
    text = json_path("$.content", KEY)
    for step in path:
        text = json_path(text, step)
    return text


@pytest.mark.parametrize("index, path", list(compact_member_paths()),
                         ids=lambda v: str(v) if isinstance(v, int) else "/".join(map(str, v)) or "root")
def test_every_member_the_decoder_reads_refuses_a_wrong_type_by_seq_and_path(index, path):
    base = COMPACT[index]
    for value in OTHER_TYPES:
        if path and json_type(value) == json_type(at(base["content"][KEY], path)):
            continue
        trace = copy.deepcopy(COMPACT)
        member = trace[index]["content"][KEY]
        if path:
            at(member, path[:-1])[path[-1]] = value
        else:
            trace[index]["content"][KEY] = value
        try:
            decoded = list(decode_trace(trace))
        except CompactError as exc:
            message = str(exc)
            assert message.startswith(f"seq {base['seq']}: ") or "could not be read" in message, message
            where = message.split(": ")[1]
            mutated = path_text(path)
            assert where.startswith(mutated) or mutated.startswith(where), (message, mutated)
            continue
        # accepted only where the format takes any JSON value, and then that value comes back in its place
        assert path[:1] in (("requirements",), ("declaration",)) or path[:1] == ("rest",) and len(path) > 1, \
            f"{path_text(path)} = {value!r} decoded without complaint"
        assert at(decoded[index]["content"]["scheduling"], path if path[0] != "rest" else path[1:]) == value


# -- values of the right type that the format still refuses ---------------------------------------------------
def b64(data):
    return base64.b64encode(data).decode()


def first_snapshot_record(trace):
    return next(r for r in trace if KEY in r["content"] and isinstance(r["content"][KEY]["fleet"], dict)
                and "names" in r["content"][KEY]["fleet"])


OUT_OF_RANGE = {
    "id beyond the name table": (lambda r: r["content"][KEY]["failed"].__setitem__(0, b64(serialize_ids([10**6]))),
                                 ".failed[0]", "agent id 1000000 is not in the fleet snapshot"),
    "live id beyond the name table": (lambda r: r["content"][KEY]["fleet"].update(live=b64(serialize_ids([99]))),
                                      ".fleet.live", "agent id 99 is not in the fleet snapshot"),
    "a name twice": (lambda r: r["content"][KEY]["fleet"]["names"].__setitem__(1, r["content"][KEY]["fleet"]["names"][0]),
                     ".fleet.names", "has two agent ids"),
    "format 3": (lambda r: r["content"][KEY].update(format=3), ".format", "unknown compact format 3"),
    "snapshot seq not earlier": (lambda r: r["content"][KEY].update(fleet=10**30), ".fleet", "is not earlier in the trace"),
    "one failed bitmap too many": (lambda r: r["content"][KEY]["failed"].append(""), ".failed", "bitmaps, one per predicate"),
}


@pytest.mark.parametrize("case", sorted(OUT_OF_RANGE))
def test_values_outside_the_format_are_a_compact_error_naming_seq_and_path(case):
    change, member, what = OUT_OF_RANGE[case]
    trace = copy.deepcopy(COMPACT)
    record = first_snapshot_record(trace)
    change(record)
    with pytest.raises(CompactError) as caught:
        list(decode_trace(trace))
    assert str(caught.value).startswith(f"seq {record['seq']}: {json_path('$.content', KEY)}{member}: ")
    assert what in str(caught.value)


def bound_compact():
    trace = copy.deepcopy(COMPACT)
    index = next(i for i, r in enumerate(trace) if r["kind"] == "task.bound" and KEY in r["content"])
    return trace, index


def test_a_score_column_of_nan_is_refused():
    trace, index = bound_compact()
    scores = trace[index]["content"][KEY]["scores"]
    n = len(BitMap.deserialize(base64.b64decode(scores["ids"])))
    scores["columns"][0][2] = b64(struct_doubles([math.nan] * n))
    with pytest.raises(CompactError, match=r"columns\[0\]\[2\]: expected finite doubles"):
        list(decode_trace(trace))


def test_format_2_on_a_bound_record_is_refused():
    # format 2 is a rejection's with a derived reason; compact-format.md: any other value is refused
    trace, index = bound_compact()
    trace[index]["content"][KEY]["format"] = 2
    with pytest.raises(CompactError, match=r"\.format: compact format 2 is a task\.rejected record's"):
        list(decode_trace(trace))


def struct_doubles(values):
    return struct.pack(f"<{len(values)}d", *values)


@pytest.mark.parametrize("member", ["candidates", "scores", "requirements"])
def test_rest_may_not_hold_what_the_compact_member_builds(member):
    trace, index = bound_compact()
    trace[index]["content"][KEY]["rest"] = {member: []}
    with pytest.raises(CompactError, match=rf"\.rest\.{member}: the compact member carries"):
        list(decode_trace(trace))


def test_a_compact_record_may_not_carry_its_spec_lists_beside():
    trace, index = bound_compact()
    trace[index]["content"]["scheduling"] = {}
    with pytest.raises(CompactError, match=r"\$\.content\.scheduling: a compact task.bound record carries"):
        list(decode_trace(trace))


def test_a_record_that_fails_registers_no_snapshot_and_its_referrers_say_so():
    trace = copy.deepcopy(COMPACT)
    record = first_snapshot_record(trace)
    record["content"][KEY]["filters_passed"] = 5
    decoder = Decoder()
    referrers = [r for r in trace if KEY in r["content"] and r["content"][KEY]["fleet"] == record["seq"]]
    assert referrers
    outcomes = [outcome(lambda r=r: decoder.decode_content(r["seq"], r["kind"], r["content"])) for r in trace]
    assert outcomes[trace.index(record)][0] == "refused"
    for referrer in referrers:
        assert outcomes[trace.index(referrer)] == (
            "refused", f"seq {referrer['seq']}: {json_path('$.content', KEY)}.fleet: "
                       f"fleet snapshot {record['seq']} is in a record that could not be read")


# -- small records that would make a reader hold what they do not carry ---------------------------
def _based_on_one_table(names: int, based: int) -> bytes:
    """A snapshot of `names` names, then `based` small rejections each basing a snapshot of one
    more name on it: the first extends the table's list, each after it is a table of its own."""
    requirements = {"v": "1.0", "capabilities": [{"name": "data.translate", "version": 1}]}
    lines = [{"seq": 1, "kind": "task.submitted", "content": {"requirements": requirements}},
             {"seq": 2, "kind": "task.rejected", "content": {"code": "unschedulable", "reason": "x", KEY: {
                 "format": 1, "fleet": {"names": [f"a{i}" for i in range(names)], "live": ""},
                 "filters_passed": [], "failed": []}}}]
    for k in range(based):
        lines.append({"seq": 3 + k, "kind": "task.rejected", "content": {"code": "unschedulable", "reason": "x", KEY: {
            "format": 1, "fleet": {"base": 2, "names_added": [f"x{k}"], "live": ""},
            "filters_passed": [], "failed": []}}})
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


def test_snapshots_based_again_and_again_on_one_table_are_refused_past_their_copies_allowance(monkeypatch):
    # each such snapshot copied its base's names, and every copy was kept: 100 records of 194 bytes
    # over a table of 200,000 names held 1.6 GB
    from a3fast.record import compact

    monkeypatch.setattr(compact, "COPY_ALLOWANCE", 1_000)
    monkeypatch.setattr(compact, "COPY_FACTOR", 4)
    trace = _based_on_one_table(500, 30)
    decoder = Decoder()
    read, refused = [], None
    for line in trace.splitlines():
        record = orjson.loads(line)
        try:
            read.append(decoder.decode_content(record["seq"], record["kind"], record["content"]))
        except CompactError as exc:
            refused = str(exc)
            break
    # the record of seq s ≥ 4 copies 500 names, on top of (s - 4) × 500 copied before, against
    # 4 × (500 + s - 2) names listed so far, plus 1,000: seq 10 is the first past it
    assert refused is not None and refused.startswith("seq 10: $.content['a3fast.compact'].fleet.base: snapshot 2 "
                                                     "is extended by another already, so this one would copy its "
                                                     "500 names")
    assert len(read) == 9 and len(decoder._snapshots.tables) == 8


def test_a_trace_read_by_a_writer_of_many_snapshots_makes_no_copy():
    # a3fast's writers base each snapshot on the one before: no record is refused however many
    placements = small_fleet_placements()
    decoder = Decoder()
    records = compact_records(placements * 50)
    for record in records:
        decoder.decode_content(record["seq"], record["kind"], record["content"])
    assert len(records) > 400 and decoder._snapshots._copied == 0


def test_running_out_of_memory_is_never_a_finding_about_the_trace(monkeypatch):
    # `verify` reported its own MemoryError as E_STRUCTURE, a valid trace called invalid (exit 1)
    from a3fast import verify

    trace = compact_records(small_fleet_placements())
    assert verify(trace) == []

    def exhausted(*args, **kwargs):
        raise MemoryError

    from a3fast.record import compact_read
    monkeypatch.setattr(compact_read.CompactReader, "note", exhausted)
    monkeypatch.setattr(compact_read.CompactReader, "read", exhausted)
    with pytest.raises(MemoryError):
        verify(trace)
