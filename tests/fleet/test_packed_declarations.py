"""Declarations kept packed (a3fast.declaration_codec): a fleet that keeps its declarations as zstd
frames with a dictionary trained on them places, records and saves exactly as one that keeps JSON."""
from __future__ import annotations

import os
import struct
import threading

import numpy as np
import orjson
import pytest

from a3fast import SchemaError, SnapshotError, snapshot
from a3fast import declaration_codec
from a3fast.declaration_codec import DeclarationCodec, is_packed
from a3fast.fleet import Fleet
from a3fast.workload import generate_fleet, generate_tasks

DECLS = generate_fleet(400, seed=21)
DATA = b"".join(orjson.dumps(d) + b"\n" for d in DECLS)
TASKS = generate_tasks(DECLS, 40, seed=22)


def record(p) -> dict:
    content = dict(p.scheduling if p.bound else p.rejection)
    content.pop("timings")
    return content


def records(fleet: Fleet) -> list[dict]:
    return [record(fleet.place(task, remember_session=False)) for task in TASKS]


def header_and_version(path) -> tuple[dict, int]:
    data = snapshot.read(path)
    return snapshot.decode(data)[0], struct.unpack_from("<I", data, len(snapshot.MAGIC))[0]


def test_a_packed_declaration_is_told_from_json_by_its_first_byte():
    codec = DeclarationCodec.train([orjson.dumps(d) for d in DECLS])
    text = orjson.dumps(DECLS[0])
    packed = codec.pack(text)
    assert not is_packed(text) and is_packed(packed)
    assert len(packed) < len(text) / 3
    assert codec.unpack(packed) == text
    assert codec.pack_many([text, text]) == [packed, packed]


def test_a_packed_fleet_places_and_records_as_one_that_keeps_json(engine):
    packed, plain = Fleet.load_jsonl(DATA, engine, pack=True), Fleet.load_jsonl(DATA, engine, pack=False)
    assert records(packed) == records(plain)
    name = DECLS[7]["agent"]["name"]
    assert packed.get(name) == plain.get(name)
    assert [d.doc for d in packed] == [d.doc for d in plain]


def test_a_packed_fleet_saves_a_version_2_snapshot_that_either_engine_loads(engine, tmp_path):
    fleet = Fleet.load_jsonl(DATA, engine, pack=True)
    expected = records(Fleet.load_jsonl(DATA, engine, pack=False))
    fleet.save(tmp_path / "packed.snap")
    fleet.__class__(engine).save(tmp_path / "empty.snap")
    header, version = header_and_version(tmp_path / "packed.snap")
    assert version == 2 and header["declaration_codec"] == declaration_codec.CODEC_NAME
    assert header_and_version(tmp_path / "empty.snap")[1] == 1   # nothing packed: readable by version-1 readers
    Fleet.load_jsonl(DATA, engine, pack=False).save(tmp_path / "plain.snap")
    assert (tmp_path / "packed.snap").stat().st_size < (tmp_path / "plain.snap").stat().st_size / 2
    for other in ("native", "pure"):
        loaded = Fleet.load(tmp_path / "packed.snap", other)
        assert records(loaded) == expected
        loaded.save(tmp_path / f"again-{other}.snap")
        sections = snapshot.decode(snapshot.read(tmp_path / f"again-{other}.snap"))[1]
        first = snapshot.decode(snapshot.read(tmp_path / "packed.snap"))[1]
        assert bytes(sections["declarations"]) == bytes(first["declarations"])


def test_a_fleet_that_packs_keeps_packing_what_joins_it_later(engine, tmp_path):
    fleet = Fleet.load_jsonl(DATA, engine, pack=True)
    extra = generate_fleet(430, seed=21)[400:]
    fleet.add(extra[0])                                               # a Declaration entry
    fleet.extend_jsonl(b"".join(orjson.dumps(d) + b"\n" for d in extra[1:]), pack=False)
    plain = Fleet.load_jsonl(DATA, engine, pack=False)
    plain.add(extra[0])
    plain.extend(extra[1:])
    assert records(fleet) == records(plain)
    fleet.save(tmp_path / "packed.snap")
    loaded = Fleet.load(tmp_path / "packed.snap", engine)
    assert records(loaded) == records(plain)
    assert loaded.get(extra[-1]["agent"]["name"]).doc == extra[-1]


def test_a_bulk_load_packs_from_pack_from_bytes_on_whatever_its_source(engine, tmp_path, monkeypatch):
    monkeypatch.setattr(declaration_codec, "PACK_FROM_BYTES", len(DATA) * 2 // 3)
    small = DATA[:len(DATA) // 3].rsplit(b"\n", 1)[0] + b"\n"
    (tmp_path / "big.jsonl").write_bytes(DATA)
    os.mkfifo(tmp_path / "pipe")      # a source whose size is known only once it is read
    writer = threading.Thread(target=(tmp_path / "pipe").write_bytes, args=(DATA,))
    writer.start()
    loads = {"bytes": Fleet.load_jsonl(DATA, engine), "file": Fleet.load_jsonl(tmp_path / "big.jsonl", engine),
             "pipe": Fleet.load_jsonl(tmp_path / "pipe", engine), "small": Fleet.load_jsonl(small, engine)}
    writer.join()
    for what, fleet in loads.items():
        fleet.save(tmp_path / f"{what}.snap")
    assert {what: header_and_version(tmp_path / f"{what}.snap")[1] for what in loads} == \
        {"bytes": 2, "file": 2, "pipe": 2, "small": 1}


def test_a_refused_batch_leaves_a_fleet_unpacked(engine, tmp_path):
    fleet = Fleet(engine)
    with pytest.raises(SchemaError):
        fleet.extend_jsonl(DATA + b"{broken\n", pack=True)
    fleet.extend_jsonl(DATA[:2000].rsplit(b"\n", 1)[0] + b"\n", pack=False)
    fleet.save(tmp_path / "after.snap")
    assert header_and_version(tmp_path / "after.snap")[1] == 1


def test_a_snapshot_packed_by_an_unknown_codec_is_refused(tmp_path):
    Fleet.load_jsonl(DATA, "pure", pack=True).save(tmp_path / "packed.snap")
    header, sections = snapshot.decode(snapshot.read(tmp_path / "packed.snap"))
    header["declaration_codec"] = "brotli"
    del header["section_starts"]
    (tmp_path / "foreign.snap").write_bytes(snapshot.encode(header, dict(sections)))
    with pytest.raises(SnapshotError, match="brotli"):
        Fleet.load(tmp_path / "foreign.snap")


def test_a_file_read_in_many_chunks_is_packed_chunk_by_chunk_alike(engine, tmp_path, monkeypatch):
    import a3fast.fleet.bulk_load as fleet_module

    (tmp_path / "fleet.jsonl").write_bytes(DATA)
    monkeypatch.setattr(fleet_module, "JSONL_CHUNK", 5000)     # dozens of chunks, packed on the side
    packed = Fleet.load_jsonl(tmp_path / "fleet.jsonl", engine, pack=True)
    assert records(packed) == records(Fleet.load_jsonl(DATA, engine, pack=False))
    packed.save(tmp_path / "packed.snap")
    sections = snapshot.decode(snapshot.read(tmp_path / "packed.snap"))[1]
    offsets = np.frombuffer(sections["decl_offsets"], dtype="<u8")
    declarations = bytes(sections["declarations"])
    assert all(is_packed(declarations[a:b]) for a, b in zip(offsets[:-1], offsets[1:]))


def test_too_few_declarations_to_train_on_serve_as_the_dictionary_themselves(engine):
    few = [orjson.dumps(d) for d in DECLS[:3]]
    codec = DeclarationCodec.train(few)            # zstd refuses to train on three documents
    assert codec.dictionary == b"".join(few)
    assert [codec.unpack(p) for p in codec.pack_many(few)] == few
    small = b"".join(line + b"\n" for line in few)
    assert records(Fleet.load_jsonl(small, engine, pack=True)) == records(Fleet.load_jsonl(small, engine, pack=False))


def test_lines_the_compiled_reader_vouches_for_are_packed_from_their_spans_of_the_chunk(tmp_path, monkeypatch):
    """Once the codec is trained, a chunk's vouched-for lines are packed straight from the chunk
    (no copy of each line first), the careful reader's lines among them from their bytes: the
    declarations kept are those of a load that packs nothing, each in its line's place."""
    import json

    import a3fast.fleet.bulk_load as fleet_module

    decls = generate_fleet(1500, seed=23)       # more than the codec trains on, so chunks follow it
    lines = [json.dumps(d).encode() if i % 37 == 0 else orjson.dumps(d) for i, d in enumerate(decls)]
    data = b"\n".join(lines) + b"\n"
    (tmp_path / "fleet.jsonl").write_bytes(data)
    monkeypatch.setattr(fleet_module, "JSONL_CHUNK", 20000)
    spans = []
    pack_spans = DeclarationCodec.pack_spans
    monkeypatch.setattr(DeclarationCodec, "pack_spans",
                        lambda self, chunk, segments: spans.append(len(segments) // 16) or pack_spans(self, chunk, segments))
    packed = Fleet.load_jsonl(tmp_path / "fleet.jsonl", "native", pack=True)
    plain = Fleet.load_jsonl(data, "native", pack=False)
    assert sum(spans) > 400 and len(spans) > 10      # the lines after the first 1,024, less the careful
    assert [packed.declaration_json(aid) for aid in range(len(decls))] == \
        [plain.declaration_json(aid) for aid in range(len(decls))]
    assert records(packed) == records(plain)
