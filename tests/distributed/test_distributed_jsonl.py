"""A ShardedFleet read from JSON Lines by its shards (each one byte range, dealt out to the owners of
its names) places exactly as one Fleet reading the same file: same join order, same records, the
same problems under the same line numbers, and nothing added anywhere when a line is bad.

A local Ray is started for the module.
"""
from __future__ import annotations

import random

import orjson
import pytest

from a3fast import Fleet
from a3fast.errors import SchemaError
from distributed_worlds import declaration, requirements, restarted, records, write_world


@pytest.mark.parametrize("seed,shards", [(11, 1), (12, 2), (13, 3), (14, 4)])
def test_sharded_load_jsonl_places_as_one_fleet_loading_the_same_file(ray, tmp_path, seed, shards):
    from a3fast.distributed import ShardedFleet

    rng = random.Random(seed)
    path = write_world(tmp_path / "fleet.jsonl", rng, rng.randint(40, 220))
    one = Fleet.load_jsonl(path)
    many = ShardedFleet.load_jsonl(path, shards=shards, state_dir=str(tmp_path / "state"))
    try:
        assert many.names() == one.names() and len(many) == len(one)
        assert sum(s["live"] for s in many.shard_states()) == len(one)
        for step in range(40):
            task = requirements(rng, one.names())
            expected, got = one.place(task), many.place(task)
            assert got.agent == expected.agent, (seed, step)
            assert records(got) == records(expected), (seed, step)
        # more lines from a second file: replaced and new names, after the first file's
        more = write_world(tmp_path / "more.jsonl", rng, 60)
        one.extend_jsonl(more)
        many.extend_jsonl(more)
        assert many.names() == one.names()
        for step in range(20):
            task = requirements(rng, one.names())
            assert records(many.place(task)) == records(one.place(task)), (seed, "extend", step)
    finally:
        many.close()


def test_a_bad_line_is_reported_with_its_line_number_and_nothing_is_added(ray, tmp_path):
    from a3fast.distributed import ShardedFleet

    rng = random.Random(5)
    lines = [orjson.dumps(declaration(rng, f"agent-{i}")) for i in range(60)]
    lines[41] = b'{"v": "1.0", "agent": {"name": "broken"'                       # not JSON
    lines[17] = orjson.dumps({"v": "1.0", "agent": {"name": "x", "namespace": "ns"}, "capabilities": 3})
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(SchemaError) as one_error:
        Fleet.load_jsonl(path)
    with pytest.raises(SchemaError) as many_error:
        ShardedFleet.load_jsonl(path, shards=3, state_dir=str(tmp_path / "a"))
    assert [str(p) for p in many_error.value.problems] == [str(p) for p in one_error.value.problems]
    assert str(many_error.value).startswith(f"{path}: line 18: ")
    assert "line 42: $" in str(many_error.value)

    many = ShardedFleet(3, state_dir=str(tmp_path / "b"))
    try:
        many.add(declaration(rng, "kept"))
        before = many.shard_states()
        with pytest.raises(SchemaError, match="line 42: "):
            many.extend_jsonl(path)
        assert many.names() == ["kept"]
        assert [(s["ids_given"], s["live"], s["changes"]) for s in many.shard_states()] == \
            [(s["ids_given"], s["live"], s["changes"]) for s in before]
    finally:
        many.close()


def test_a_namespace_conflict_with_the_fleet_is_a_problem_of_its_line(ray, tmp_path):
    from a3fast.distributed import ShardedFleet

    rng = random.Random(6)
    path = tmp_path / "conflict.jsonl"
    path.write_bytes(orjson.dumps(declaration(rng, "fresh")) + b"\n"
                     + orjson.dumps(declaration(rng, "taken", namespace="elsewhere")) + b"\n")
    one = Fleet()
    one.add(declaration(rng, "taken"))
    many = ShardedFleet(2, state_dir=str(tmp_path / "state"))
    try:
        many.add(declaration(rng, "taken"))
        with pytest.raises(SchemaError) as one_error:
            one.extend_jsonl(path)
        with pytest.raises(SchemaError) as many_error:
            many.extend_jsonl(path)
        assert str(many_error.value) == str(one_error.value)
        assert "line 2: $.agent.namespace" in str(many_error.value)
        assert many.names() == ["taken"]
    finally:
        many.close()


def test_a_line_that_reads_differently_than_it_looks_is_read_as_one_fleet_reads_it(ray, tmp_path):
    """A repeated name member: the pattern that deals lines out saw the first, a JSON reader keeps
    the last. Such a line was refused, and lines that swapped two names of one shard passed the
    check and were numbered by the wrong line (another join order, other records): the pattern now
    vouches for an agent object of a name and a namespace alone, and any other line is read by
    orjson, as one Fleet reads it."""
    from a3fast.distributed import ShardedFleet, shard_of

    names = [f"n{i}" for i in range(50)]
    x = names[0]
    y = next(n for n in names[1:] if shard_of(n, 2) == shard_of(x, 2))
    z = next(n for n in names[1:] if shard_of(n, 2) != shard_of(x, 2))

    def line(seen: str, kept: str | None = None) -> bytes:
        again = f',"name":"{kept}"' if kept else ""
        return (f'{{"v":"1.0","agent":{{"name":"{seen}","namespace":"ns"{again}}},'
                f'"capabilities":[],"clearances":[]}}\n').encode()

    path = tmp_path / "twice.jsonl"
    path.write_bytes(line(x) + line(y, x) + line(z) + line(x, y))
    one = Fleet.load_jsonl(path)
    assert one.names() == [x, z, y]
    for shared in (True, False):
        many = ShardedFleet(2, state_dir=str(tmp_path / f"state-{shared}"))
        try:
            many.extend_jsonl(path, shared=shared)
            assert many.names() == one.names()
            assert records(many.place({})) == records(one.place({}))
        finally:
            many.close()


def test_every_namespace_conflict_is_listed_with_the_other_problems_as_one_fleet_lists_them(ray, tmp_path):
    # a bad line hid the conflicts, and a name given again in the conflicting namespace was named
    # at its first line only; a line taking the held namespace after one that did not is no problem
    from a3fast.distributed import ShardedFleet

    rng = random.Random(7)
    lines = [declaration(rng, "taken", namespace="elsewhere"), declaration(rng, "fresh"),
             declaration(rng, "taken", namespace="elsewhere"), declaration(rng, "held"),
             declaration(rng, "held", namespace="other"), declaration(rng, "fresh", namespace="third")]
    path = tmp_path / "conflicts.jsonl"
    path.write_bytes(b"".join(orjson.dumps(d) + b"\n" for d in lines) + b'{"v": "1.0", "agent"\n')
    one = Fleet()
    one.extend([declaration(rng, "taken"), declaration(rng, "held", namespace="other")])
    with pytest.raises(SchemaError) as one_error:
        one.extend_jsonl(path)
    lines_named = [str(p).split(":")[0] for p in one_error.value.problems]
    assert lines_named == ["line 1", "line 3", "line 4", "line 6", "line 7"]
    for shards in (1, 2, 3):
        many = ShardedFleet(shards, state_dir=str(tmp_path / f"state-{shards}"))
        try:
            many.extend([declaration(rng, "taken"), declaration(rng, "held", namespace="other")])
            with pytest.raises(SchemaError) as many_error:
                many.extend_jsonl(path)
            assert [str(p) for p in many_error.value.problems] == [str(p) for p in one_error.value.problems]
            assert many.names() == ["taken", "held"]
        finally:
            many.close()


def test_byte_ranges_cut_at_line_starts_cover_every_line_once(tmp_path):
    from a3fast.distributed.jsonl_split import read_share

    rng = random.Random(8)
    path = write_world(tmp_path / "fleet.jsonl", rng, 90)
    text = path.read_bytes()
    for parts in (1, 2, 3, 5, 8):
        counts, lines = 0, []
        for part in range(parts):
            count, shares = read_share(str(path), part, parts, 3)
            for share in shares:
                lines.extend(counts + n for n in share.lines.tolist())
            counts += count
        raw = text.split(b"\n")[:-1]
        assert counts == len(raw), parts
        assert sorted(lines) == [n for n, line in enumerate(raw) if line.strip()], parts


def test_a_sharded_load_journals_its_lines_and_a_restarted_shard_recovers_them(ray, tmp_path):
    from a3fast.distributed import ShardedFleet

    rng = random.Random(9)
    path = write_world(tmp_path / "fleet.jsonl", rng, 120, odd_shapes=False)
    one = Fleet.load_jsonl(path)
    many = ShardedFleet.load_jsonl(path, shards=2, state_dir=str(tmp_path / "state"))
    try:
        before = many.shard_states()[1]
        ray.kill(many.shard_actor(1), no_restart=False)
        after = restarted(many, 1, before["pid"])
        assert after["recovered"]["journal_changes"] == 1 and after["recovered"]["checkpoint_seq"] == 0
        assert (after["live"], after["ids_given"]) == (before["live"], before["ids_given"])
        deadline_tasks = [requirements(rng, one.names()) for _ in range(15)]
        for task in deadline_tasks:
            assert records(many.place(task)) == records(one.place(task))
    finally:
        many.close()
