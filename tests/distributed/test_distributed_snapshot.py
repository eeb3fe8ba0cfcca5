"""ShardedFleet.save / ShardedFleet.load: each shard writes and reads its own part in its own
process, the coordinator's order and state go beside them, and the fleet read back places exactly
as one Fleet holding the same agents — before and after further changes, and after a shard actor
restarts from the checkpoint it took at load."""
from __future__ import annotations

import os
import random
import time

import pytest

from a3fast import Fleet
from a3fast.errors import SnapshotError
from distributed_worlds import WORLD_NAMES, declaration, requirements, records


def world(tmp_path, seed, shards=3):
    """One Fleet and a ShardedFleet with the same history: batches, single adds, a removal and a
    re-add (join order), outcomes and sessions."""
    from a3fast.distributed import ShardedFleet

    rng = random.Random(seed)
    one = Fleet()
    many = ShardedFleet(shards=shards, state_dir=str(tmp_path / "run"), checkpoint_every=5)
    docs = [declaration(rng, name) for name in WORLD_NAMES]
    for fleet in (one, many):
        fleet.extend(docs[:15])
        for doc in docs[15:]:
            fleet.add(doc)
        fleet.remove(WORLD_NAMES[2])
        fleet.remove(WORLD_NAMES[7])
        fleet.add(docs[2])
    for name in WORLD_NAMES[8:14]:
        for fleet in (one, many):
            fleet.record_outcome(name, "review", name != WORLD_NAMES[9])
            fleet.hold_session(name, "s1")
    return rng, one, many


def same_placements(rng, one, many, n=15):
    for _ in range(n):
        task = dict(requirements(rng, one.names()), kind="review")
        assert records(many.place(task, remember_session=False)) == records(one.place(task, remember_session=False)), task


@pytest.mark.parametrize("seed", [3, 8])
def test_a_sharded_fleet_read_back_from_its_snapshot_places_as_one_fleet(ray, tmp_path, seed):
    from a3fast.distributed import ShardedFleet

    rng, one, many = world(tmp_path, seed)
    try:
        many.save(tmp_path / "saved")
    finally:
        many.close()
    again = ShardedFleet.load(tmp_path / "saved", state_dir=str(tmp_path / "again"))
    try:
        assert again.shards == 3 and again.names() == one.names()
        assert again.outcomes(WORLD_NAMES[9], "review") == one.outcomes(WORLD_NAMES[9], "review")
        same_placements(rng, one, again)
        # and it goes on changing as the one fleet does
        extra = declaration(rng, "late-comer")
        for fleet in (one, again):
            fleet.add(extra)
            fleet.remove(WORLD_NAMES[10])
            fleet.record_outcome(WORLD_NAMES[11], "review", False)
            fleet.release_session(WORLD_NAMES[12], "s1")
        same_placements(rng, one, again)
    finally:
        again.close()


def test_each_shard_reads_its_own_part_in_its_own_process(ray, tmp_path):
    from a3fast.distributed import ShardedFleet

    _, one, many = world(tmp_path, 5)
    try:
        many.save(tmp_path / "saved")
    finally:
        many.close()
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == \
        ["shard-0.a3snap", "shard-1.a3snap", "shard-2.a3snap", "sharded.json"]
    again = ShardedFleet.load(tmp_path / "saved", state_dir=str(tmp_path / "again"))
    try:
        states = again.shard_states()
        assert [s["recovered"]["loaded_from"] for s in states] == \
            [str(tmp_path / "saved" / f"shard-{i}.a3snap") for i in range(3)]
        assert all(s["pid"] != os.getpid() for s in states)
        assert sum(s["live"] for s in states) == len(one)
    finally:
        again.close()


def test_a_shard_actor_restarted_after_a_load_recovers_from_its_own_checkpoint(ray, tmp_path):
    from a3fast.distributed import ShardedFleet

    rng, one, many = world(tmp_path, 6)
    try:
        many.save(tmp_path / "saved")
    finally:
        many.close()
    again = ShardedFleet.load(tmp_path / "saved", state_dir=str(tmp_path / "again"))
    try:
        before = again.shard_states()[1]
        ray.kill(again.shard_actor(1), no_restart=False)
        deadline = time.monotonic() + 30
        while True:
            try:
                after = again.shard_states()[1]
                if after["pid"] != before["pid"]:
                    break
            except Exception:
                pass
            assert time.monotonic() < deadline, "the shard did not restart"
            time.sleep(0.2)
        assert after["recovered"]["loaded_from"] is None        # its own checkpoint, not the snapshot
        assert (after["live"], after["ids_given"]) == (before["live"], before["ids_given"])
        same_placements(rng, one, again, n=8)
    finally:
        again.close()


def test_an_incomplete_sharded_snapshot_is_refused_naming_what_is_missing(ray, tmp_path):
    from a3fast.distributed import ShardedFleet

    _, _, many = world(tmp_path, 4, shards=2)
    try:
        many.save(tmp_path / "saved")
    finally:
        many.close()
    (tmp_path / "saved" / "shard-1.a3snap").unlink()
    with pytest.raises(SnapshotError, match=r"shard-1\.a3snap: missing: shard 1's part of the snapshot"):
        ShardedFleet.load(tmp_path / "saved")
    (tmp_path / "saved" / "sharded.json").unlink()
    with pytest.raises(SnapshotError, match=r"sharded\.json: missing: .* is not a complete sharded fleet snapshot"):
        ShardedFleet.load(tmp_path / "saved")


def test_a_coordinators_part_that_does_not_match_its_shards_parts_is_refused(ray, tmp_path):
    # sharded.json changed by hand (or damaged into valid JSON): each shard holds its part to the
    # coordinator's names, live set and local ids, so none loads as another fleet
    import orjson

    from a3fast.distributed import ShardedFleet, ShardError, shard_of

    _, _, many = world(tmp_path, 4, shards=2)
    try:
        many.save(tmp_path / "saved")
    finally:
        many.close()
    path = tmp_path / "saved" / "sharded.json"
    saved = orjson.loads(path.read_bytes())
    first = [n for n in saved["names"] if shard_of(n, 2) == 0 and n in saved["namespaces"]]

    def swapped(d):
        i, j = d["names"].index(first[0]), d["names"].index(first[1])
        d["names"][i], d["names"][j] = d["names"][j], d["names"][i]

    edits = [(swapped, "holds its live agents in another order|at another local id"),
             (lambda d: d["namespaces"].pop(first[0]), f"holds '{first[0]}', removed in the coordinator's part"),
             (lambda d: d.__setitem__("shards", 1), "lacks"),
             (lambda d: d.__setitem__("generation", "12"), "generation string '12' is not a count")]
    for edit, why in edits:
        document = orjson.loads(orjson.dumps(saved))
        edit(document)
        path.write_bytes(orjson.dumps(document))
        with pytest.raises((SnapshotError, ShardError), match=why):
            ShardedFleet.load(tmp_path / "saved", state_dir=str(tmp_path / f"state-{edits.index((edit, why))}"))
    path.write_bytes(orjson.dumps(saved))
    ShardedFleet.load(tmp_path / "saved", state_dir=str(tmp_path / "state-saved")).close()


def test_a_sharded_fleet_loads_only_into_a_new_state_directory(ray, tmp_path):
    from a3fast.distributed import ShardedFleet, ShardError

    _, _, many = world(tmp_path, 2, shards=2)
    try:
        many.save(tmp_path / "saved")
    finally:
        many.close()
    with pytest.raises(ShardError, match="already holds agents"):
        ShardedFleet.load(tmp_path / "saved", state_dir=str(tmp_path / "run"))   # the first fleet's


def test_a_closed_sharded_fleet_has_let_its_state_directory_go_when_close_returns(ray, tmp_path):
    # close killed the shard actors, whose processes end some time after: a fleet opened on the same
    # directory at once found it held by one of them ("in use by another a3fast process")
    import fcntl

    from a3fast.distributed import ShardedFleet, ShardError

    _, _, many = world(tmp_path, 3, shards=2)
    many.close()
    for lock in sorted((tmp_path / "run").glob("shard-*.lock")):
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)      # OSError if a shard's process holds it
        finally:
            os.close(fd)
    # the shards open their directories again (and refuse to start a fleet on agents they hold)
    with pytest.raises(ShardError, match="already holds agents"):
        ShardedFleet(shards=2, state_dir=str(tmp_path / "run"))
