"""Failure is loud, never partial: a shard that is down or late makes the operation raise ShardError
naming it, never a decision on a subset of the fleet; a restarted shard recovers its agents from
its snapshot and journal and the fleet continues with the same answers as one Fleet."""
from __future__ import annotations

import random
import time

import pytest

from a3fast import Fleet
from distributed_worlds import WORLD_NAMES, declaration, gone, requirements, restarted, records


def populated(tmp_path, seed=5, shards=3, **options):
    """The same world in one Fleet and a ShardedFleet: agents, outcomes and sessions."""
    from a3fast.distributed import ShardedFleet

    rng = random.Random(seed)
    one = Fleet()
    many = ShardedFleet(shards=shards, state_dir=str(tmp_path / "state"), **options)
    docs = [declaration(rng, name) for name in WORLD_NAMES]
    for fleet in (one, many):
        fleet.extend(docs[:20])
        for doc in docs[20:]:
            fleet.add(doc)
        fleet.remove(WORLD_NAMES[3])
    for name in WORLD_NAMES[10:16]:
        for fleet in (one, many):
            fleet.record_outcome(name, "review", True)
            fleet.hold_session(name, "s1")
    return rng, one, many


def tasks(rng, names, n=12):
    return [dict(requirements(rng, names), kind="review") for _ in range(n)]


def test_a_killed_shard_restarts_from_its_snapshot_and_journal_with_the_same_answers(ray, tmp_path):
    rng, one, many = populated(tmp_path, checkpoint_every=4)
    try:
        # a shard with both a snapshot and a journal of changes after it
        before = next(s for s in many.shard_states() if s["changes"] > s["checkpoint_seq"] > 0)
        victim = before["shard"]
        ray.kill(many.shard_actor(victim), no_restart=False)
        after = restarted(many, victim, before["pid"])
        assert after["recovered"]["checkpoint_seq"] == before["checkpoint_seq"]
        assert after["recovered"]["journal_changes"] == before["changes"] - before["checkpoint_seq"]
        assert (after["live"], after["ids_given"]) == (before["live"], before["ids_given"])
        for task in tasks(rng, one.names()):
            assert records(many.place(task)) == records(one.place(task))
        # and the fleet goes on changing
        doc = declaration(rng, "late-joiner")
        for fleet in (one, many):
            fleet.add(doc)
        task = {"session": "s1", "kind": "review"}
        assert records(many.place(task)) == records(one.place(task))
    finally:
        many.close()


def test_a_shard_that_is_down_makes_the_placement_raise_naming_it(ray, tmp_path):
    from a3fast.distributed import ShardError

    _, one, many = populated(tmp_path, max_restarts=0)
    try:
        ray.kill(many.shard_actor(2), no_restart=True)
        gone(ray, many.shard_actor(2))
        with pytest.raises(ShardError, match=r"^shard 2: down during place") as caught:
            many.place({})
        assert caught.value.shard == 2
        with pytest.raises(ShardError, match=r"^shard 2: "):
            many.shard_states()
    finally:
        many.close()


def test_a_batch_whose_later_wave_fails_lets_go_of_the_sessions_its_earlier_waves_held(ray, tmp_path):
    # the second task of s1 goes in the second wave, after the first made its agent hold s1; a
    # shard then takes longer than the timeout to score it: the batch raises, and the fleet holds
    # no more than it did, so a retry decides as the failed batch would have
    from a3fast.distributed import ShardedFleet, ShardError

    # the shards start and load with the default timeout (an actor's start takes more than a
    # second on a loaded machine); only the batch is held to one second
    many = ShardedFleet(shards=2, state_dir=str(tmp_path / "state"))
    try:
        many.extend([declaration(random.Random(k), f"agent-{k}") for k in range(6)])
        many.scorer = "distributed_worlds:slow_once_held_scorer"
        many.timeout = 1.0
        holders = lambda: [n for n in many.names() if many.holds_session(n, "s1")]     # noqa: E731
        before = holders()
        with pytest.raises(ShardError, match="no answer to place_many within 1 s"):
            many.place_many([{}, {}], sessions=["s1", "s1"])
        time.sleep(2.5)         # the slow call ends before the shard answers the next
        assert holders() == before == []
        many.timeout = 30.0
        assert [p.agent is not None for p in many.place_many([{}, {}], sessions=["s1", "s1"])] == [True, True]
    finally:
        many.close()


def test_outcome_counts_are_held_to_one_fleets_rule(ray, tmp_path):
    from a3fast.distributed import ShardedFleet

    one = Fleet()
    many = ShardedFleet(shards=2, state_dir=str(tmp_path / "state"))
    try:
        doc = declaration(random.Random(1), "agent-1")
        for fleet in (one, many):
            fleet.add(doc)
            for successes, attempts in ((True, 2), (1, 2.9), (3, 2)):
                with pytest.raises(ValueError, match="successes|attempts"):
                    fleet.record_outcomes("agent-1", "review", successes, attempts)
            fleet.record_outcomes("agent-1", "review", 1, 2)
        assert many.outcomes("agent-1", "review") == one.outcomes("agent-1", "review") == (1, 2)
    finally:
        many.close()


def test_a_shard_that_does_not_answer_in_time_makes_the_placement_raise_naming_it(ray, tmp_path):
    from a3fast.distributed import ShardError

    _, one, many = populated(tmp_path)
    try:
        # every shard busy for a while first (an actor runs its calls in order), so none can answer
        # within the timeout however quick the round trip: with a timeout alone, an answer could
        # come in while the coordinator was still asking
        busy = [many.shard_actor(k).__ray_call__.remote(lambda shard: time.sleep(0.5)) for k in range(many.shards)]
        many.timeout = 0.05
        with pytest.raises(ShardError, match=r"^shards? [0-9, ]+: no answer to place within 0.05 s; "
                                             r"nothing was decided") as caught:
            many.place({})
        # every late shard is named, the first as `shard`
        assert caught.value.shards == list(range(many.shards)) and caught.value.shard == 0
        assert str(caught.value).startswith(("shard " if len(caught.value.shards) == 1 else "shards ")
                                            + ", ".join(map(str, caught.value.shards)) + ":")
        many.timeout = 30.0
        ray.get(busy)
        assert records(many.place({})) == records(one.place({}))
    finally:
        many.close()


# -- the shard's durable state, without Ray -----------------------------------------------------------

def shard_world(tmp_path, checkpoint_every):
    from a3fast.distributed.shard import FleetShard

    rng = random.Random(11)
    shard = FleetShard(0, state_dir=str(tmp_path), checkpoint_every=checkpoint_every)
    shard.extend([declaration(rng, n) for n in WORLD_NAMES[:10]])
    for name in WORLD_NAMES[:4]:
        shard.record_outcome(name, "review", True)
        shard.hold_session(name, "s1")
    shard.remove(WORLD_NAMES[5])
    shard.add(declaration(rng, WORLD_NAMES[5]))
    return shard


def same_state(a, b):
    assert a.local_names() == b.local_names()
    assert a.fleet.names() == b.fleet.names()
    for task in ({}, {"session": "s1", "kind": "review"}, {"clearances": ["r.read"]}):
        assert _equal_answers(a.score_task(task, None), b.score_task(task, None))


def _equal_answers(x, y):
    import numpy as np
    return (x.failed == y.failed and x.eligible == y.eligible and np.array_equal(x.columns, y.columns)
            and (x.best, x.best_name, x.best_json) == (y.best, y.best_name, y.best_json))


@pytest.mark.parametrize("checkpoint_every", [1, 4, 1000])
def test_a_shard_recovers_from_snapshot_plus_journal(tmp_path, checkpoint_every):
    from a3fast.distributed.shard import FleetShard

    shard = shard_world(tmp_path, checkpoint_every)
    again = FleetShard(0, state_dir=str(tmp_path), checkpoint_every=checkpoint_every)
    same_state(shard, again)
    assert again.state()["changes"] == shard.state()["changes"]


def test_a_torn_journal_tail_is_cut_and_the_rest_recovered(tmp_path):
    from a3fast.distributed.shard import FleetShard
    from a3fast.durable.journal import encode_change, frame

    shard = shard_world(tmp_path, 1000)
    journal = tmp_path / "shard-0.journal.00000001"
    whole = journal.read_bytes()
    torn = frame(encode_change("delete", name=WORLD_NAMES[0]))[:-3]
    with open(journal, "ab") as fh:
        fh.write(torn)
    again = FleetShard(0, state_dir=str(tmp_path))
    assert again.recovered["torn_bytes"] == len(torn)
    same_state(shard, again)
    assert journal.read_bytes() == whole


def test_a_damaged_journal_entry_before_the_last_is_an_error_naming_it(tmp_path):
    from a3fast.distributed.shard import FleetShard
    from a3fast.durable.statedir import StateError

    shard_world(tmp_path, 1000)
    journal = tmp_path / "shard-0.journal.00000001"
    data = journal.read_bytes()
    at = data.index(b'"review"')
    journal.write_bytes(data[:at] + b'"reviex"' + data[at + 8:])
    with pytest.raises(StateError, match=rf"{journal}: entry 2 at byte \d+ is damaged"):
        FleetShard(0, state_dir=str(tmp_path))


def test_a_shard_journal_is_the_service_journal_format_and_replay(tmp_path):
    """One format and one replay: the shard's journal entries are the service's changes, read back
    by a3fast.durable.statedir and made by a3fast.durable.journal.apply_change."""
    from a3fast import Fleet
    from a3fast.durable.journal import CHANGE, apply_change, decode_change
    from a3fast.durable.statedir import StateDir

    shard = shard_world(tmp_path, 1000)
    recovered = StateDir(tmp_path, prefix="shard-0.").recover()
    ops = [decode_change(e.payload[1:])["op"] for e in recovered.entries]
    assert all(e.payload[:1] == CHANGE for e in recovered.entries)
    assert ops == ["put"] + ["outcome", "hold"] * 4 + ["delete", "put"]
    fleet = Fleet()
    for entry in recovered.entries:
        apply_change(fleet, decode_change(entry.payload[1:]))
    assert fleet.names() == shard.fleet.names()
    assert [fleet.get(n).doc for n in fleet.names()] == [shard.fleet.get(n).doc for n in fleet.names()]


def test_a_change_that_timed_out_and_landed_late_puts_the_shard_in_doubt(ray, tmp_path):
    from a3fast.distributed import ShardError, shard_of

    _, one, many = populated(tmp_path)
    try:
        name = one.names()[0]
        owner = shard_of(name, many.shards)
        # the shard busy for a while first (an actor runs its calls in order), so the change cannot
        # answer within the timeout however quick the round trip: with a timeout alone, an answer
        # could come in while the coordinator was still asking
        busy = many.shard_actor(owner).__ray_call__.remote(lambda shard: time.sleep(0.5))
        many.timeout = 0.05
        with pytest.raises(ShardError, match=rf"^shard {owner}: no answer to record_outcome"):
            many.record_outcome(name, "review", False)
        many.timeout = 30.0
        ray.get(busy)
        time.sleep(0.5)      # the change reaches the shard after the coordinator gave up on it
        with pytest.raises(ShardError, match=rf"^shard {owner}: has applied \d+ changes where the "
                                             rf"coordinator knows of \d+"):
            many.place({})
    finally:
        many.close()
