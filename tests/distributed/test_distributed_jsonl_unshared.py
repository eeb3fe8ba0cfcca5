"""A JSON Lines file the shards cannot all reach is read by the coordinator and sent to them through
Ray's object store: the fleet is the one the shared way makes (and one Fleet reading the file), bad
lines are reported alike, the automatic choice takes the object store when a shard does not find the
coordinator's file at the path, and a shard restarted after such a load recovers without the file.

A local Ray is started for the module.
"""
from __future__ import annotations

import os
import random

import orjson
import pytest

from a3fast import Fleet
from a3fast.errors import SchemaError
from distributed_worlds import declaration, records, requirements, write_world


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
