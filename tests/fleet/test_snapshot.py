"""Fleet snapshots (docs/snapshot.md): what a loaded fleet places, which files are refused and how."""
from __future__ import annotations

import os
import random
import struct

import orjson
import pytest

from a3fast import SnapshotError
from a3fast.engines import available_engines
from a3fast.fleet import Fleet
from a3fast.snapshot import FORMAT_VERSION, MAGIC, decode
from a3fast.workload import generate_fleet, generate_tasks

ENGINES = available_engines()


def without_timings(placement) -> dict:
    """A placement's record minus what is measured on the clock (§6 timings)."""
    content = dict(placement.scheduling if placement.bound else placement.rejection)
    content.pop("timings", None)
    return {"bound": placement.bound, "agent": placement.agent, "content": content}


def random_world(engine: str, seed: int, n: int = 120) -> tuple[Fleet, list[dict], list[dict]]:
    """A fleet after a random mix of adds, replaces, removes, outcomes and sessions."""
    rng = random.Random(seed)
    decls = generate_fleet(n, seed=seed)
    tasks = generate_tasks(decls, 40, seed=seed + 1)
    fleet = Fleet(engine, weights=(0.5, 0.25, 0.125, 0.125 + seed % 3 / 8))
    fleet.extend(decls[: n // 2])
    for decl in decls[n // 2:]:
        fleet.add(decl)
    names = [d["agent"]["name"] for d in decls]
    for step in range(200):
        name = rng.choice(names)
        live = name in fleet
        op = rng.random()
        if op < 0.15 and live:
            fleet.remove(name)
        elif op < 0.3:
            donor = dict(rng.choice(decls))
            donor["agent"] = fleet.get(name).agent.to_dict() if live else {"name": name, "namespace": "support"}
            fleet.add(donor)           # a replace, or a removed name coming back
        elif op < 0.6 and live:
            fleet.record_outcome(name, rng.choice(["triage", "refund", "audit"]), rng.random() < 0.6)
        elif op < 0.8 and live:
            fleet.hold_session(name, f"session-{rng.randrange(6)}")
        elif op < 0.85 and live:
            fleet.release_session(name, f"session-{rng.randrange(6)}")
        else:
            task = dict(rng.choice(tasks), session=f"session-{rng.randrange(6)}")
            fleet.place(task)          # binds hold sessions
    return fleet, decls, tasks


def placements(fleet: Fleet, tasks: list[dict], seed: int) -> list[dict]:
    """Placements in a fixed order, with sessions (which bound placements then hold), then updates
    after which the same tasks are placed again: a loaded fleet must follow the same path."""
    rng = random.Random(seed)
    out = []
    for task in tasks:
        out.append(without_timings(fleet.place(dict(task, session=f"session-{rng.randrange(6)}"))))
    names = list(fleet.names())
    fleet.remove(names[3])
    fleet.add(dict(fleet.get(names[4]).doc, agent={"name": "newcomer", "namespace": "ops"}))
    for task in tasks[:10]:
        out.append(without_timings(fleet.place(task, kind="triage")))
    return out


@pytest.mark.parametrize("loader", ENGINES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_loaded_fleet_places_exactly_as_the_saved_one(engine, loader, seed, tmp_path):
    fleet, _, tasks = random_world(engine, seed)
    path = tmp_path / "fleet.a3snap"
    fleet.save(path)
    loaded = Fleet.load(path, engine=loader)
    assert loaded.engine == loader
    assert len(loaded) == len(fleet) and loaded.names() == fleet.names()
    assert loaded.weights == fleet.weights
    assert [d.doc for d in loaded] == [d.doc for d in fleet]
    loaded.save(tmp_path / "again.a3snap")      # declarations still in the loaded file's bytes
    assert [d.doc for d in Fleet.load(tmp_path / "again.a3snap", engine)] == [d.doc for d in fleet]
    assert placements(loaded, tasks, seed) == placements(fleet, tasks, seed)


def test_outcomes_sessions_and_removed_names_survive_a_load(engine, tmp_path):
    decls = generate_fleet(10, seed=4)
    fleet = Fleet(engine)
    fleet.extend(decls)
    a, b, c = (d["agent"]["name"] for d in decls[:3])
    fleet.record_outcomes(a, "triage", 3, 5)
    fleet.hold_session(b, "s-1")
    fleet.remove(c)
    fleet.save(tmp_path / "f")
    loaded = Fleet.load(tmp_path / "f", engine=engine)
    assert loaded.outcomes(a, "triage") == (3, 5)
    assert loaded.holds_session(b, "s-1") and not loaded.holds_session(a, "s-1")
    assert c not in loaded and len(loaded) == 9
    # the removed name's id stays bound to it: re-added, it takes its first place back
    loaded.add(decls[2])
    assert loaded.names() == [d["agent"]["name"] for d in decls]


def test_both_engines_write_the_same_sections(tmp_path):
    if len(ENGINES) < 2:
        pytest.skip("the native engine is not built")
    written = []
    for engine in ENGINES:
        fleet, _, _ = random_world(engine, 7)
        fleet.save(tmp_path / engine)
        header, sections = decode((tmp_path / engine).read_bytes())
        header.pop("written_by"), header.pop("section_starts")
        written.append((header, {k: bytes(v) for k, v in sections.items()}))
    assert written[0] == written[1]


def test_a_custom_scorer_is_not_saved_and_is_passed_to_load(engine, tmp_path):
    def prefer_last(task, agents):
        return [{"total": float(i)} for i, _ in enumerate(agents)]

    decls = generate_fleet(20, seed=5)
    fleet = Fleet(engine, scorer=prefer_last)
    fleet.extend(decls)
    fleet.save(tmp_path / "f")
    task = {"capabilities": []}
    assert Fleet.load(tmp_path / "f", engine).scorer is None
    again = Fleet.load(tmp_path / "f", engine, scorer=prefer_last)
    assert again.place(task).agent == fleet.place(task).agent


def small_snapshot(tmp_path, engine="pure") -> bytes:
    fleet = Fleet(engine)
    fleet.extend(generate_fleet(3, seed=6))
    fleet.hold_session(fleet.names()[0], "s")
    fleet.record_outcome(fleet.names()[1], "k", True)
    fleet.save(tmp_path / "small")
    return (tmp_path / "small").read_bytes()


def refused(tmp_path, data: bytes) -> str:
    path = tmp_path / "bad"
    path.write_bytes(data)
    with pytest.raises(SnapshotError) as caught:
        Fleet.load(path)
    return str(caught.value)


def test_every_flipped_byte_is_refused(tmp_path):
    data = small_snapshot(tmp_path)
    for at in range(len(data)):
        damaged = bytearray(data)
        damaged[at] ^= 0x20
        message = refused(tmp_path, bytes(damaged))
        assert str(tmp_path / "bad") in message


def test_a_cut_snapshot_is_refused_as_cut_short(tmp_path):
    data = small_snapshot(tmp_path)
    for keep in range(len(MAGIC) + 8, len(data), 7):
        assert "cut short" in refused(tmp_path, data[:keep])


def test_a_snapshot_of_another_version_is_refused_naming_both_versions(tmp_path):
    data = bytearray(small_snapshot(tmp_path))
    struct.pack_into("<I", data, len(MAGIC), FORMAT_VERSION + 1)
    message = refused(tmp_path, bytes(data))
    assert f"version {FORMAT_VERSION + 1}" in message and f"reads versions 1 to {FORMAT_VERSION}" in message


@pytest.mark.parametrize("data", [b"", b"{}", orjson.dumps([{"v": "1.0"}]), b"\x89PNG\r\n\x1a\n" + bytes(64)])
def test_a_file_that_is_not_a_snapshot_is_refused(tmp_path, data):
    assert "not an a3fast fleet snapshot" in refused(tmp_path, data)


def test_a_missing_file_is_a_snapshot_error(tmp_path):
    with pytest.raises(SnapshotError, match="cannot read"):
        Fleet.load(tmp_path / "absent")


def test_save_replaces_a_snapshot_whole_or_not_at_all(engine, tmp_path, monkeypatch):
    fleet = Fleet(engine)
    fleet.extend(generate_fleet(5, seed=8))
    path = tmp_path / "f"
    fleet.save(path)
    before = path.read_bytes()
    fleet.remove(fleet.names()[0])

    def failing_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        fleet.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
    assert len(Fleet.load(path, engine)) == 5


def service_state_with_agents(directory, n=30):
    from a3fast.schema import parse_declaration
    from a3fast.service.state import ServiceState

    state = ServiceState(directory, log=lambda message: None)
    state.open()
    state.put_agents([parse_declaration(d) for d in generate_fleet(n, seed=9)])
    return state


def test_the_service_snapshot_keeps_its_fleet_in_a_fleet_snapshot(tmp_path):
    from a3fast.service.state import ServiceState

    state = service_state_with_agents(tmp_path)
    names = state.fleet.names()
    first = state.fleet.get(names[0])
    state.delete_agent(names[0])
    before = state.fleet.names()
    state.close()
    fleet_files = sorted(tmp_path.glob("fleet.*.a3snap"))
    assert len(fleet_files) == 1
    again = ServiceState(tmp_path, log=lambda message: None)
    again.open()
    assert again.fleet.names() == before
    again.put_agents([first])                 # a removed name takes back its place in the join order
    assert again.fleet.names() == names
    again.close()
    assert len(sorted(tmp_path.glob("fleet.*.a3snap"))) == 1   # the previous fleet file is gone


def test_a_damaged_fleet_file_stops_the_service_from_starting(tmp_path):
    from a3fast.service.state import ServiceState, StateError

    service_state_with_agents(tmp_path).close()
    (fleet_file,) = tmp_path.glob("fleet.*.a3snap")
    data = bytearray(fleet_file.read_bytes())
    data[len(data) // 2] ^= 0x01
    fleet_file.write_bytes(bytes(data))
    with pytest.raises(StateError, match="damaged"):
        ServiceState(tmp_path, log=lambda message: None).open()


@pytest.mark.parametrize("live, offsets, ids, what", [
    (b"\x02\x00\x00\x00\x01\x00\x00\x00", struct.pack("<Q", 0), b"", "the live set"),      # out of order
    (b"\x05\x00\x00\x00", struct.pack("<Q", 0), b"", "the live set"),                      # unknown id
    (b"", struct.pack("<QQ", 0, 2), struct.pack("<II", 1, 1), "row 0"),                   # repeated id
    (b"", struct.pack("<QQ", 0, 3), struct.pack("<II", 0, 1), "cover"),                   # past the ids
])
def test_an_index_restore_checks_every_array_before_building(engine, live, offsets, ids, what):
    from a3fast.engines import engine_module

    index = engine_module(engine).Index()
    with pytest.raises(ValueError, match=what):
        index.restore(["a", "b", "c"], bytes(24), live, offsets, ids)
    assert index.row_count() == 0 and index.live_ids() == []


def test_a_flipped_byte_past_the_frame_is_named_as_damaged_while_the_restore_reads_it(tmp_path, engine,
                                                                                    monkeypatch):
    """The checksum runs beside the restore (on its thread, as a large snapshot's does); whatever
    the restore makes of a damaged header or section, the file is refused as damaged. Every third
    byte (a thread per load made every byte 35 s of the suite); test_every_flipped_byte_is_refused
    flips every one with the checksum taken at once."""
    from a3fast import snapshot
    from a3fast.snapshot import _HEAD, _TRAILER
    monkeypatch.setattr(snapshot, "_THREAD_FROM", 0)
    data = small_snapshot(tmp_path, engine)
    for at in range(_HEAD.size, len(data) - _TRAILER.size, 3):
        damaged = bytearray(data)
        damaged[at] ^= 0x20
        assert "damaged (its checksum does not match)" in refused(tmp_path, bytes(damaged)), at


@pytest.mark.parametrize("thread_from", [0, 1 << 20], ids=["on its thread", "at once"])
def test_a_checksum_under_way_names_a_damaged_snapshot_only_when_waited_for(tmp_path, monkeypatch, thread_from):
    from a3fast import snapshot
    from a3fast.snapshot import Checksum
    monkeypatch.setattr(snapshot, "_THREAD_FROM", thread_from)
    data = bytearray(small_snapshot(tmp_path))
    Checksum(bytes(data), "good").wait()
    data[len(data) // 2] ^= 1
    pending = Checksum(bytes(data), "bad")
    with pytest.raises(SnapshotError, match="bad: the snapshot is damaged"):
        pending.wait()
