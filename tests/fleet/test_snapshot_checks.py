"""A snapshot is checked before it is trusted (docs/snapshot.md, "Bounds"): files altered and
written again with a correct checksum are refused with SnapshotError naming the header field or
the section, alike on both engines, and a cost that is not a finite number of 0 or more is refused
at load and at add."""
from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from a3fast import FleetError, SnapshotError
from a3fast.engines import engine_module
from a3fast.fleet import Fleet
import crafted_snapshots
from factories import declaration, requirements

CRAFTED = Path(crafted_snapshots.__file__)


@pytest.fixture
def base(tmp_path) -> tuple:
    return crafted_snapshots.split(crafted_snapshots.base_snapshot(tmp_path))


def refusal(tmp_path, engine: str, data: bytes) -> str:
    path = tmp_path / "crafted"
    path.write_bytes(data)
    with pytest.raises(SnapshotError) as caught:
        Fleet.load(path, engine)
    text = str(caught.value)
    assert text.startswith(f"{path}: ") and "\n" not in text
    return text[len(str(path)) + 2:]


def with_header(base, **fields) -> bytes:
    version, header, sections = base
    return crafted_snapshots.encoded(version, {**header, **fields}, sections)


def with_section(base, name: str, data: bytes) -> bytes:
    version, header, sections = base
    return crafted_snapshots.encoded(version, header, {**sections, name: data})


@pytest.mark.parametrize("rows", [2**63, 2**63 - 1, 10**9, 2**32, -1])
def test_a_header_rows_past_its_section_is_refused_before_anything_is_allocated(tmp_path, engine, base, rows):
    # 2^63 used to raise OverflowError; 10^9 to allocate a list of a billion rows first
    message = refusal(tmp_path, engine, with_header(base, rows=rows))
    assert message.startswith(("header.rows: expected an integer from 0 to 4294967295",
                               "section row_offsets: 1376 bytes; header.rows = ")), message


def test_a_header_rows_that_disagrees_with_its_section_names_both(tmp_path, engine, base):
    _, header, _ = base
    message = refusal(tmp_path, engine, with_header(base, rows=header["rows"] + 1))
    assert message.startswith("section row_offsets:") and "header.rows" in message


@pytest.mark.parametrize("value", [0.0, 1.0, True, "0", None])
def test_a_field_rows_row_must_be_an_integer_not_a_number_equal_to_one(tmp_path, engine, base, value):
    # 0.0 used to pass the load and make every placement raise TypeError
    _, header, _ = base
    field_rows = orjson.loads(orjson.dumps(header["field_rows"]))
    field_rows["clearance"][0][-1] = value
    message = refusal(tmp_path, engine, with_header(base, field_rows=field_rows))
    assert message.startswith("header.field_rows.clearance[0]: expected [value, row]")


@pytest.mark.parametrize("value", [[], None, "x", 0])
def test_field_rows_must_be_a_mapping(tmp_path, engine, base, value):
    # [] used to raise AttributeError
    assert refusal(tmp_path, engine, with_header(base, field_rows=value)).startswith(
        "header.field_rows: expected an object of lists by predicate kind")


@pytest.mark.parametrize("field, value, named", [
    ("agents", 1.0, "header.agents: expected an integer"),
    ("live", -1, "header.live: expected an integer from 0"),
    ("generation", 2**63, "header.generation: expected an integer"),
    ("membership", "3", "header.membership: expected an integer"),
    ("weights", [0.4, 0.3, 0.2], "header.weights: expected a list of 4 finite floats"),
    ("weights", [0.4, 0.3, 0.2, 1], "header.weights: expected a list of 4 finite floats"),
    # finite each, but a total of them would not be: Fleet(weights=...) refuses them too
    ("weights", [0.0, 1.7e308, 0.0, 1.7e308], "header.weights: expected 4 floats whose magnitudes add up"),
    ("session_rows", {}, "header.session_rows: expected a list of [session, row]"),
    ("kinds", [["triage", 2.0]], "header.kinds[0]: expected [kind, number of outcome records]"),
    ("content", "a3fast.other", "header.content: expected \"a3fast.fleet\""),
    ("declaration_codec", "zlib", "header.declaration_codec: expected \"zstd-dictionary\""),
    ("extra", 1, "header.extra: not a field of a fleet snapshot's header"),
])
def test_every_header_field_is_of_its_exact_type(tmp_path, engine, base, field, value, named):
    assert refusal(tmp_path, engine, with_header(base, **{field: value})).startswith(named)


@pytest.mark.parametrize("cost", [float("nan"), float("inf"), float("-inf"), -1.0, -0.0])
def test_a_cost_that_is_not_a_finite_number_of_zero_or_more_is_refused_at_load(tmp_path, engine, base, cost):
    # these used to load, and an agent whose total was NaN (null in the record) won
    import numpy as np

    costs = np.frombuffer(base[2]["costs"], dtype="<f8").copy()
    costs[1] = cost
    message = refusal(tmp_path, engine, with_section(base, "costs", costs.tobytes()))
    assert message == f"section costs[1]: expected a finite number of 0 or more, found {cost!r}"


@pytest.mark.parametrize("cost", [float("nan"), float("inf"), -1.0, -0.0])
def test_a_cost_that_is_not_a_finite_number_of_zero_or_more_is_refused_at_add(engine, cost):
    index = engine_module(engine).Index()
    row = index.add_row()
    with pytest.raises(ValueError, match=r"agent 0: cost .* is not a finite number of 0 or more"):
        index.put(0, "a", [row], cost)
    with pytest.raises(ValueError, match=r"agent 1: cost .* is not a finite number of 0 or more"):
        index.put_many([0, 1], ["a", "b"], [[row], [row]], [0.5, cost])
    assert index.live_ids() == [] and index.row_ids(row) == []
    index.put(0, "a", [row], 0.25)
    with pytest.raises(ValueError, match="agent 0: cost"):
        index.put(0, "a", [row], cost)          # a replace is an add too
    assert index.export_costs() == struct.pack("<d", 0.25)


@pytest.mark.parametrize("weights, named", [((0.4, float("nan"), 0.2, 0.1), r"weights\[1\]: expected a finite number, found nan"),
                                            ((0.4, 0.3, 0.2, float("-inf")), r"weights\[3\]: expected a finite number, found -inf")])
def test_a_fleet_refuses_weights_a_snapshot_could_not_hold(engine, weights, named):
    # the weight that is no finite number is named, where the count was
    with pytest.raises(ValueError, match=named):
        Fleet(engine, weights=weights)


@pytest.mark.parametrize("name", ["names", "costs", "live", "row_offsets", "row_ids", "decl_offsets",
                                  "declarations", "outcomes"])
def test_a_missing_section_is_named(tmp_path, engine, base, name):
    version, header, sections = base
    data = crafted_snapshots.encoded(version, header, {k: v for k, v in sections.items() if k != name})
    assert refusal(tmp_path, engine, data).startswith(f"section {name}:")


def test_an_outcome_count_past_the_bound_is_refused_at_load(tmp_path, engine, base):
    import numpy as np

    from a3fast.fleet.scoring import MAX_OUTCOMES

    records = np.frombuffer(base[2]["outcomes"], dtype="<i8").reshape(-1, 3).copy()
    records[0, 2] = MAX_OUTCOMES + 1
    message = refusal(tmp_path, engine, with_section(base, "outcomes", records.tobytes()))
    assert message.startswith("section outcomes[0]:") and f"<= {MAX_OUTCOMES}" in message


def test_an_altered_declaration_is_named_when_it_is_first_asked_for(tmp_path, engine):
    """The load checks that each live agent has a declaration; each is parsed, and checked to be
    the named agent's canonical JSON, the first time a record or a caller needs it."""
    fleet = Fleet(engine)
    fleet.add(declaration("a", capabilities=[("x.y", 1)]))
    fleet.add(declaration("b", capabilities=[("x.y", 1)]))
    fleet.save(tmp_path / "f")
    version, header, sections = crafted_snapshots.split((tmp_path / "f").read_bytes())
    decls = sections["declarations"]
    swapped = decls.replace(b'"name":"a"', b'"name":"b"', 1)   # agent 0 now claims to be b
    assert swapped != decls and len(swapped) == len(decls)
    (tmp_path / "g").write_bytes(crafted_snapshots.encoded(version, header, {**sections, "declarations": swapped}))
    loaded = Fleet.load(tmp_path / "g", engine)
    with pytest.raises(SnapshotError, match=r"section declarations: agent id 0: the declaration of 'b'"):
        loaded.place(requirements(capabilities=["x.y/1"], agentRef="a"))
    assert loaded.get("b").agent.name == "b"


@pytest.mark.slow
def test_crafted_snapshots_load_alike_or_are_refused_within_a_memory_cap():
    """Every header field and section of a real snapshot set to wrong types, huge values, NaN,
    negative values and empty lists (tests/crafted_snapshots.py), in a process whose address space
    is capped at 3 GiB: before the checks, `rows` = 10^9 failed there with MemoryError."""
    done = subprocess.run([sys.executable, str(CRAFTED)], capture_output=True, text=True, timeout=900)
    summary = orjson.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else None
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert summary["cases"] > 2000 and summary["failures"] == 0


@pytest.mark.parametrize("counter", ["generation", "membership"])
def test_a_fleet_whose_counter_went_past_a_snapshots_is_not_saved(tmp_path, engine, base, counter):
    # a snapshot holds counters up to 2^63 - 1; a fleet loaded at the bound and changed once more
    # is refused by `save` (writing nothing), rather than written as a file `load` then refuses
    path = tmp_path / "at-bound.a3snap"
    path.write_bytes(with_header(base, **{counter: 2**63 - 1}))
    fleet = Fleet.load(path, engine)
    if counter == "generation":
        fleet.record_outcome(fleet.names()[0], "x.y/1", True)
    else:
        fleet.add(declaration("one-more"))
    target = tmp_path / "past.a3snap"
    with pytest.raises(FleetError, match=f"{counter}: {2**63} is past {2**63 - 1}"):
        fleet.save(target)
    assert not target.exists()


@pytest.mark.parametrize("damage", ["halved", "empty", "another fleet's"])
def test_a_packed_snapshot_whose_dictionary_does_not_unpack_its_declarations_is_refused(tmp_path, engine, damage):
    # declarations are unpacked when first asked for and `save` copies packed ones as they are: a
    # dictionary that cannot unpack them is refused at load, not carried into the next snapshot
    from a3fast.workload import generate_fleet

    def packed(seed: int) -> Path:
        lines = tmp_path / f"d{seed}.jsonl"
        lines.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in generate_fleet(40, seed=seed)))
        path = tmp_path / f"packed{seed}.a3snap"
        Fleet.load_jsonl(lines, engine, pack=True).save(path)
        return path

    version, header, sections = crafted_snapshots.split(packed(11).read_bytes())
    dictionary = sections["declaration_dictionary"]
    sections["declaration_dictionary"] = {
        "halved": dictionary[:len(dictionary) // 2], "empty": b"",
        "another fleet's": crafted_snapshots.split(packed(12).read_bytes())[2]["declaration_dictionary"],
    }[damage]
    text = refusal(tmp_path, engine, crafted_snapshots.encoded(version, header, sections))
    assert text.startswith("section declaration_dictionary: ")


def test_a_packed_snapshot_whose_first_declaration_is_plain_json_still_has_its_dictionary_checked(tmp_path, engine):
    # canonical JSON needs no dictionary: the check reads the first packed declaration instead
    from a3fast.declaration_codec import DeclarationCodec
    from a3fast.workload import generate_fleet

    def packed(seed: int) -> tuple:
        lines = tmp_path / f"d{seed}.jsonl"
        lines.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in generate_fleet(40, seed=seed)))
        path = tmp_path / f"packed{seed}.a3snap"
        Fleet.load_jsonl(lines, engine, pack=True).save(path)
        return crafted_snapshots.split(path.read_bytes())

    version, header, sections = packed(11)
    codec = DeclarationCodec(sections["declaration_dictionary"])
    offsets = list(struct.unpack(f"<{len(sections['decl_offsets']) // 8}Q", sections["decl_offsets"]))
    entries = [sections["declarations"][a:b] for a, b in zip(offsets, offsets[1:])]
    entries[0] = codec.unpack(entries[0])           # agent 0 as canonical JSON
    offsets = [0]
    for entry in entries:
        offsets.append(offsets[-1] + len(entry))
    sections["declarations"] = b"".join(entries)
    sections["decl_offsets"] = struct.pack(f"<{len(offsets)}Q", *offsets)
    plain_first = crafted_snapshots.encoded(version, header, sections)
    (tmp_path / "plain-first.a3snap").write_bytes(plain_first)
    Fleet.load(tmp_path / "plain-first.a3snap", engine)            # a sound dictionary: it loads
    sections["declaration_dictionary"] = packed(12)[2]["declaration_dictionary"]
    text = refusal(tmp_path, engine, crafted_snapshots.encoded(version, header, sections))
    assert text.startswith("section declaration_dictionary: does not unpack agent id 1's")
