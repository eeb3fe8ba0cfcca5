"""A JSON Lines file the shards cannot all reach is read by the coordinator and sent to them through
Ray's object store: the fleet is the one the shared way makes (and one Fleet reading the file), bad
lines are reported alike, the automatic choice takes the object store when a shard does not find the
coordinator's file at the path, and a shard restarted after such a load recovers without the file.
The journal entry of such a load (`T`: the lines' bytes and their CRC-32) is read back exactly or
refused naming the journal and the entry, never half-loaded; a torn one at the tail is cut.

A local Ray is started for the module.
"""
from __future__ import annotations

import os
import random
import re
from pathlib import Path

import orjson
import pytest

from a3fast import Fleet
from a3fast.errors import SchemaError
from a3fast.durable.journal import frame, read_entries
from a3fast.durable.statedir import StateError
from distributed_worlds import WORLD_NAMES, commit_lines, committed_shard, declaration, records, requirements, write_world


@pytest.mark.parametrize("seed,shards", [(21, 1), (22, 3)])
def test_an_object_store_load_makes_the_fleet_a_shared_load_makes(ray, tmp_path, seed, shards):
    from a3fast.distributed import ShardedFleet

    rng = random.Random(seed)
    path = write_world(tmp_path / "fleet.jsonl", rng, rng.randint(80, 200))
    one = Fleet.load_jsonl(path)
    by_path = ShardedFleet.load_jsonl(path, shards=shards, state_dir=str(tmp_path / "a"), shared=True)
    by_bytes = ShardedFleet.load_jsonl(path, shards=shards, state_dir=str(tmp_path / "b"), shared=False)
    try:
        assert (by_path.last_load_shared, by_bytes.last_load_shared) == (True, False)
        assert by_bytes.names() == by_path.names() == one.names()
        assert [s["live"] for s in by_bytes.shard_states()] == [s["live"] for s in by_path.shard_states()]
        for step in range(30):
            task = requirements(rng, one.names())
            expected = records(one.place(task))
            assert records(by_path.place(task)) == expected, (seed, step)
            assert records(by_bytes.place(task)) == expected, (seed, step)
        more = write_world(tmp_path / "more.jsonl", rng, 50)
        one.extend_jsonl(more)
        by_bytes.extend_jsonl(more, shared=False)
        assert by_bytes.names() == one.names()
        for step in range(10):
            task = requirements(rng, one.names())
            assert records(by_bytes.place(task)) == records(one.place(task)), (seed, "extend", step)
    finally:
        by_path.close()
        by_bytes.close()


def test_a_bad_line_is_reported_the_same_either_way(ray, tmp_path):
    from a3fast.distributed import ShardedFleet

    rng = random.Random(23)
    lines = [orjson.dumps(declaration(rng, f"agent-{i}")) for i in range(50)]
    lines[33] = b'{"v": "1.0", "agent": {"name": "broken"'
    lines[9] = orjson.dumps({"v": "1.0", "agent": {"name": "x", "namespace": "ns"}, "capabilities": 3})
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(SchemaError) as one_error:
        Fleet.load_jsonl(path)
    errors = {}
    for shared in (True, False):
        with pytest.raises(SchemaError) as error:
            ShardedFleet.load_jsonl(path, shards=3, state_dir=str(tmp_path / f"s{shared}"), shared=shared)
        errors[shared] = error.value
    assert str(errors[False]) == str(errors[True])
    assert [str(p) for p in errors[False].problems] == [str(p) for p in one_error.value.problems]
    assert "line 10: " in str(errors[False]) and "line 34: " in str(errors[False])


def test_shared_must_be_a_bool_or_none(ray, tmp_path):
    from a3fast.distributed import ShardedFleet

    path = tmp_path / "one.jsonl"
    path.write_bytes(orjson.dumps(declaration(random.Random(1), "solo")) + b"\n")
    many = ShardedFleet(2, state_dir=str(tmp_path / "state"))
    try:
        with pytest.raises(ValueError, match="shared: expected None, True or False"):
            many.extend_jsonl(path, shared="yes")
        assert many.names() == []
    finally:
        many.close()


def test_same_file_compares_size_and_modification_time(tmp_path):
    from a3fast.distributed.jsonl_split import same_file

    path = tmp_path / "fleet.jsonl"
    path.write_bytes(b"{}\n")
    found = os.stat(path)
    assert same_file(str(path), found.st_size, found.st_mtime_ns)
    assert not same_file(str(path), found.st_size + 1, found.st_mtime_ns)
    os.utime(path, ns=(found.st_atime_ns, found.st_mtime_ns + 1_000_000_000))
    assert not same_file(str(path), found.st_size, found.st_mtime_ns)
    assert not same_file(str(tmp_path / "absent.jsonl"), found.st_size, found.st_mtime_ns)


def test_the_automatic_choice_sends_bytes_when_a_shard_does_not_see_the_file(ray, tmp_path, monkeypatch):
    """A relative path names the coordinator's file from its working directory; the shards, started
    elsewhere, find no such file there, so the load goes through the object store."""
    from a3fast.distributed import ShardedFleet

    rng = random.Random(24)
    write_world(tmp_path / "fleet.jsonl", rng, 70)
    one = Fleet.load_jsonl(tmp_path / "fleet.jsonl")
    many = ShardedFleet(2, state_dir=str(tmp_path / "state"))
    try:
        many.extend_jsonl(tmp_path / "fleet.jsonl")            # an absolute path every shard sees
        assert many.last_load_shared is True
        monkeypatch.chdir(tmp_path)
        found = os.stat("fleet.jsonl")
        assert ray.get([many.shard_actor(i).sees_file.remote("fleet.jsonl", found.st_size, found.st_mtime_ns)
                        for i in range(2)]) == [False, False]
        many.extend_jsonl("fleet.jsonl")
        assert many.last_load_shared is False
        assert many.names() == one.names()
    finally:
        many.close()


def test_a_shard_restarted_after_an_object_store_load_recovers_without_the_file(ray, tmp_path):
    from a3fast.distributed import ShardedFleet

    rng = random.Random(25)
    path = write_world(tmp_path / "fleet.jsonl", rng, 150)
    one = Fleet.load_jsonl(path)
    many = ShardedFleet.load_jsonl(path, shards=2, state_dir=str(tmp_path / "state"), shared=False)
    try:
        tasks = [requirements(rng, one.names()) for _ in range(15)]
        for task in tasks:
            assert records(many.place(task)) == records(one.place(task))
        counts = [(s["live"], s["ids_given"], s["changes"]) for s in many.shard_states()]
        path.unlink()
        many.restart_shards([0, 1])
        states = many.shard_states()
        # recovered by replaying the journal (no checkpoint yet): the lines' bytes it holds
        assert all(s["recovered"]["checkpoint_seq"] == 0 and s["recovered"]["journal_changes"] >= 1
                   for s in states)
        assert [(s["live"], s["ids_given"], s["changes"]) for s in states] == counts
        # the same placements (and sessions held) as the one fleet that never restarted
        for task in tasks + [requirements(rng, one.names()) for _ in range(10)]:
            assert records(many.place(task)) == records(one.place(task))
    finally:
        many.close()


# -- the journal entry of lines sent as bytes (`T`) ------------------------------------------------

def rewrite_entry(journal: Path, number: int, change) -> None:
    """Entry `number` (from 1) of `journal` replaced by `change(payload)` and framed anew, so that
    its frame checks out and only the entry's own length and CRC-32 can tell."""
    read = read_entries(journal.read_bytes())
    assert read.cut_bytes == 0 and len(read.entries) >= number
    payloads = list(read.entries)
    payloads[number - 1] = change(payloads[number - 1])
    journal.write_bytes(b"".join(frame(p) for p in payloads))


def lines_entry(payload: bytes) -> tuple[dict, bytes]:
    """A `T` entry's header and the lines' bytes after it."""
    assert payload[:1] == b"T"
    cut = payload.index(b"\n")
    return orjson.loads(payload[1:cut]), payload[cut + 1:]


def with_header(payload: bytes, **fields) -> bytes:
    header, text = lines_entry(payload)
    return b"T" + orjson.dumps({**header, **fields}) + b"\n" + text


def with_text(payload: bytes, text: bytes) -> bytes:
    return payload[:payload.index(b"\n") + 1] + text


#: Each way the bytes of a `T` entry can differ from what was committed. Each result still reads
#: as JSON Lines, so only the entry's length and CRC-32 stand between it and a silently other fleet.
DAMAGE = {
    "a byte of the lines": lambda p: with_text(p, lines_entry(p)[1].replace(b'"namespace":"ns"', b'"namespace":"nt"', 1)),
    "the recorded CRC-32": lambda p: with_header(p, crc32=(lines_entry(p)[0]["crc32"] + 1) % 2**32),
    "the last line gone": lambda p: with_text(p, lines_entry(p)[1][:lines_entry(p)[1].rindex(b"\n", 0, -1) + 1]),
}


def state_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_shard_refuses_a_lines_entry_whose_bytes_do_not_match_their_length_or_crc(tmp_path, damage):
    from a3fast.distributed.shard import FleetShard

    rng = random.Random(26)
    docs = [declaration(rng, name) for name in WORLD_NAMES]
    _, shard = committed_shard(tmp_path, docs, by_place=False)
    shard.hold_session(WORLD_NAMES[1], "s1")            # a change after the load, never reached
    state = tmp_path / "state"
    journal = state / "shard-0.journal.00000001"
    whole = journal.read_bytes()
    rewrite_entry(journal, 1, DAMAGE[damage])
    damaged = read_entries(journal.read_bytes())
    assert damaged.cut_bytes == 0 and len(damaged.entries) == 2 and journal.read_bytes() != whole
    Fleet().extend_jsonl(lines_entry(damaged.entries[0])[1])   # still lines a fleet reads
    files = state_files(state)
    with pytest.raises(StateError, match=rf"^{re.escape(str(journal))}: entry 1 \(generation 1, byte 0\): its "
                                         rf"lines' bytes do not match their recorded length or CRC-32; restore "
                                         rf"the state directory from a copy$"):
        FleetShard(0, state_dir=str(state))
    # nothing written, cut or checkpointed: the directory is as the refusal found it
    assert state_files(state) == files
    # and with the entry as it was, the shard comes back whole
    journal.write_bytes(whole)
    again = FleetShard(0, state_dir=str(state))
    assert again.declarations_json() == shard.declarations_json()
    assert again.state()["changes"] == shard.state()["changes"] == 2
    assert again.holds_session(WORLD_NAMES[1], "s1")


def test_a_lines_entry_damaged_before_the_last_is_refused_naming_it(tmp_path):
    """Damage to the entry's bytes as they lie on disk (its frame no longer checks out) with an
    acknowledged change after it: acknowledged history, refused rather than skipped."""
    from a3fast.distributed.shard import FleetShard

    rng = random.Random(27)
    _, shard = committed_shard(tmp_path, [declaration(rng, name) for name in WORLD_NAMES], by_place=False)
    shard.hold_session(WORLD_NAMES[1], "s1")
    state = tmp_path / "state"
    journal = state / "shard-0.journal.00000001"
    data = journal.read_bytes()
    at = data.index(b'"namespace":"ns"')
    journal.write_bytes(data[:at] + b'"namespace":"nt"' + data[at + 16:])
    files = state_files(state)
    with pytest.raises(StateError, match=rf"^{re.escape(str(journal))}: entry 1 at byte 0 is damaged \(bad "
                                         rf"length or checksum\) and a valid entry follows at byte \d+: "):
        FleetShard(0, state_dir=str(state))
    assert state_files(state) == files


@pytest.mark.parametrize("tear", ["cut short", "whole length, damaged"])
def test_a_torn_lines_entry_at_the_tail_is_cut_and_the_load_before_it_recovered(tmp_path, tear):
    """A crash while a second load's entry was being written: the entry is the journal's last and
    does not check out, which docs/design.md ("The durable fleet", 6) cuts and reports, since a
    write cut short was never acknowledged. None of the second load's lines comes back."""
    from a3fast.distributed.shard import FleetShard

    rng = random.Random(28)
    _, shard = committed_shard(tmp_path, [declaration(rng, name) for name in WORLD_NAMES[:20]], by_place=False)
    first = shard.declarations_json()
    state = tmp_path / "state"
    journal = state / "shard-0.journal.00000001"
    whole = journal.read_bytes()
    more = tmp_path / "more.jsonl"
    more.write_bytes(b"".join(orjson.dumps(declaration(rng, name)) + b"\n" for name in WORLD_NAMES[15:]))
    commit_lines(shard, more, by_place=False)
    data = journal.read_bytes()
    assert data.startswith(whole) and len(shard.local_names()) == len(WORLD_NAMES)
    second = data[len(whole):]
    if tear == "cut short":
        journal.write_bytes(data[:len(whole) + len(second) // 2])
    else:
        at = data.index(b'"namespace":"ns"', len(whole))
        journal.write_bytes(data[:at] + b'"namespace":"nt"' + data[at + 16:])
    torn = len(journal.read_bytes()) - len(whole)
    again = FleetShard(0, state_dir=str(state))
    assert again.recovered["torn_bytes"] == torn > 0 and again.recovered["journal_changes"] == 1
    assert again.declarations_json() == first and again.local_names() == WORLD_NAMES[:20]
    assert again.state()["changes"] == 1
    assert journal.read_bytes() == whole


def test_a_restarted_shard_refuses_a_damaged_lines_entry_naming_the_journal_and_the_entry(ray, tmp_path):
    """Through the coordinator: the restart raises ShardError with the shard's own reason (the
    journal and the entry), and the fleet decides nothing on the shards that are left."""
    from a3fast.distributed import ShardedFleet, ShardError

    rng = random.Random(29)
    path = write_world(tmp_path / "fleet.jsonl", rng, 120)
    many = ShardedFleet.load_jsonl(path, shards=2, state_dir=str(tmp_path / "state"), shared=False)
    try:
        journal = tmp_path / "state" / "shard-0.journal.00000001"
        rewrite_entry(journal, 1, DAMAGE["a byte of the lines"])
        with pytest.raises(ShardError, match=rf"^shard 0: down during restart \(its start failed: StateError: "
                                             rf"{re.escape(str(journal))}: entry 1 \(generation 1, byte 0\): its "
                                             rf"lines' bytes do not match their recorded length or CRC-32; "
                                             rf"restore the state directory from a copy\); nothing was decided$"):
            many.restart_shards([0])
        with pytest.raises(ShardError, match=r"^shard 0: down during place \(its start failed: StateError: "):
            many.place(requirements(rng, many.names()))
    finally:
        many.close()


def test_a_restarted_shard_that_cut_an_acknowledged_lines_entry_is_refused(ray, tmp_path):
    """A last entry that does not check out is cut at a restart (a write cut short looks the same),
    but the coordinator knows the load was acknowledged: the shard holds a change fewer, and the
    restart raises rather than place without the load's agents."""
    from a3fast.distributed import ShardedFleet, ShardError

    rng = random.Random(30)
    path = write_world(tmp_path / "fleet.jsonl", rng, 120)
    many = ShardedFleet.load_jsonl(path, shards=2, state_dir=str(tmp_path / "state"), shared=False)
    try:
        journal = tmp_path / "state" / "shard-1.journal.00000001"
        data = journal.read_bytes()
        journal.write_bytes(data[:len(data) - 5])
        with pytest.raises(ShardError, match=r"^shard 1: has applied 0 changes where the coordinator knows of 1: "
                                             r"it restarted without changes it had acknowledged"):
            many.restart_shards([1])
    finally:
        many.close()
