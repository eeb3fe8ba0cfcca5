"""A batch across shards: `ShardedFleet.place_many` sends each shard one call per wave (per part of
a long wave), each shard answers in columns (a WaveAnswer), and the placements and records are one
Fleet's, with every session's tasks placed in order. Also the merged Roaring writers, and a shard's
journal entry of lines read from a file (their place and CRC-32, not their bytes).
"""
from __future__ import annotations

import random

import numpy as np
import orjson
import pytest

from a3fast import Fleet
from a3fast.durable.statedir import StateError
from distributed_worlds import WORLD_NAMES, committed_shard, declaration, records, requirements


def test_place_many_in_parts_of_waves_writes_one_fleets_records_with_sessions_in_order(ray, tmp_path, monkeypatch):
    """Sessions repeat across the batch (so it runs in several waves, their holds sent ahead of the
    next wave) and each wave is cut into parts of 3 tasks: every record, every generation and every
    held session is one Fleet's placing the batch one task at a time."""
    from a3fast.distributed import ShardedFleet, sharded

    monkeypatch.setattr(sharded, "WAVE_PART", 3)
    rng = random.Random(21)
    docs = [declaration(rng, name) for name in WORLD_NAMES]
    one = Fleet()
    many = ShardedFleet(shards=3, state_dir=str(tmp_path / "state"))
    try:
        for fleet in (one, many):
            fleet.extend(docs)
            fleet.record_outcome(WORLD_NAMES[1], "review", True)
        tasks = [requirements(rng, WORLD_NAMES) for _ in range(60)]
        sessions = [rng.choice([None, "s1", "s2", "s3"]) for _ in tasks]
        before_one, before_many = one.generation, many.generation
        expected = [one.place(t, session=s) for t, s in zip(tasks, sessions)]
        got = many.place_many(tasks, sessions=sessions)
        assert sum(1 for s in sessions if s == "s1") > 3      # several waves
        for j, (e, g) in enumerate(zip(expected, got)):
            assert g.agent == e.agent, f"task {j}"
            assert records(g) == records(e), f"task {j}"
            assert g.generation - before_many == e.generation - before_one, f"task {j}"
        assert many.generation - before_many == one.generation - before_one
        for session in ("s1", "s2", "s3"):
            assert [many.holds_session(n, session) for n in WORLD_NAMES] == \
                [one.holds_session(n, session) for n in WORLD_NAMES], session
        # the shards acknowledged every hold: the next placement passes the change-count check
        task = requirements(rng, WORLD_NAMES)
        assert records(many.place(task, session="s1")) == records(one.place(task, session="s1"))
    finally:
        many.close()


def test_place_many_without_remembering_sessions_is_one_wave_and_holds_nothing(ray, tmp_path):
    from a3fast.distributed import ShardedFleet

    rng = random.Random(22)
    docs = [declaration(rng, name) for name in WORLD_NAMES]
    one = Fleet()
    many = ShardedFleet(shards=2, state_dir=str(tmp_path / "state"))
    try:
        for fleet in (one, many):
            fleet.extend(docs)
        tasks = [requirements(rng, WORLD_NAMES) for _ in range(30)]
        sessions = ["s1"] * len(tasks)
        generation = many.generation
        expected = one.place_many(tasks, sessions=sessions, remember_session=False, workers=1)
        got = many.place_many(tasks, sessions=sessions, remember_session=False)
        assert [records(g) for g in got] == [records(e) for e in expected]
        assert many.generation == generation
        assert not any(many.holds_session(n, "s1") for n in WORLD_NAMES)
    finally:
        many.close()


def _shard_of_world(tmp_path, seed):
    from a3fast.distributed.shard import FleetShard

    rng = random.Random(seed)
    shard = FleetShard(0, state_dir=str(tmp_path / "state"))
    shard.extend([declaration(rng, name) for name in WORLD_NAMES])
    shard.hold_session(WORLD_NAMES[3], "s1")
    shard.record_outcome(WORLD_NAMES[4], "review", True)
    return rng, shard


def test_a_wave_answer_is_columns_that_read_as_each_tasks_own_answer(tmp_path):
    """score_wave's WaveAnswer holds numpy arrays and byte strings only (no object per task or
    set), and each task's part reads back as exactly what score_task answers for that task."""
    rng, shard = _shard_of_world(tmp_path, 23)
    tasks = [requirements(rng, WORLD_NAMES) for _ in range(25)]
    sessions = [rng.choice([None, "s1"]) for _ in tasks]
    wave = shard.score_wave(orjson.dumps(tasks), sessions)
    for field in ("predicates", "failed_counts", "sets", "set_ends", "eligible", "columns", "best",
                  "best_total", "best_holds_session", "declarations", "declaration_ends"):
        assert isinstance(getattr(wave, field), np.ndarray), field
    assert isinstance(wave.best_names, bytes) and wave.custom_entries is None
    assert len(wave) == len(tasks)
    for j, (part, task, session) in enumerate(zip(wave.answers(), tasks, sessions)):
        alone = shard.score_task(task, session)
        assert part.failed == alone.failed and part.failed_counts == alone.failed_counts, j
        assert part.eligible == alone.eligible and np.array_equal(part.columns, alone.columns), j
        assert (part.best, part.best_total, part.best_name, part.best_json, part.best_holds_session) == \
            (alone.best, alone.best_total, alone.best_name, alone.best_json, alone.best_holds_session), j
        assert (part.ids_given, part.changes) == (alone.ids_given, alone.changes), j
    one_task = shard.score_wave(orjson.dumps(tasks[:1]), sessions[:1]).answers()[0]
    assert one_task.failed == shard.score_task(tasks[0], sessions[0]).failed


def test_merged_roaring_sets_are_written_byte_for_byte_as_pyroaring_writes_them(tmp_path):
    from pyroaring import BitMap

    from a3fast.distributed.merge import roaring_of_mask

    rng = np.random.default_rng(5)
    for count in (0, 1, 4096, 4097, 9000, 70_000, 150_000):
        for top in (65_536, 65_537, 200_000):
            if count > top:
                continue
            ids = np.unique(rng.integers(0, top, count)).astype(np.uint32)
            mask = np.zeros(top, dtype=bool)
            mask[ids] = True
            expected = BitMap(ids.tolist()).serialize()
            assert roaring_of_mask(mask) == expected, (count, top)


def test_a_shard_journals_lines_by_place_and_recovers_them_from_the_file(tmp_path):
    from a3fast.distributed.shard import FleetShard

    rng = random.Random(24)
    path, shard = committed_shard(tmp_path, [declaration(rng, name) for name in WORLD_NAMES])
    journals = sorted((tmp_path / "state").glob("shard-0.journal*"))
    assert journals
    journal = b"".join(p.read_bytes() for p in journals)
    assert b'"put_lines"' in journal and path.read_bytes()[:200] not in journal   # the lines' place, not their bytes
    again = FleetShard(0, state_dir=str(tmp_path / "state"))
    assert again.local_names() == shard.local_names()
    assert again.state()["changes"] == shard.state()["changes"] == 1
    task = requirements(rng, WORLD_NAMES)
    assert again.score_task(task, None).failed == shard.score_task(task, None).failed


def test_a_shard_refuses_to_recover_lines_from_a_file_that_changed(tmp_path):
    from a3fast.distributed.shard import FleetShard

    rng = random.Random(25)
    path, _ = committed_shard(tmp_path, [declaration(rng, name) for name in WORLD_NAMES])
    path.write_bytes(path.read_bytes().replace(b'"clearances":[', b'"clearances":[ ', 1))
    with pytest.raises(StateError, match="changed since its lines were committed"):
        FleetShard(0, state_dir=str(tmp_path / "state"))
    path.unlink()
    with pytest.raises(StateError, match="cannot read the lines it committed"):
        FleetShard(0, state_dir=str(tmp_path / "state"))
