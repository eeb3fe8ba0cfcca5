"""A ShardedFleet places and explains exactly as one Fleet holding the same agents, added in the
same order, with the same outcomes and sessions: every record byte-identical, timings aside.

Random worlds come from a seeded generator (reproducible from the seed): adds, replaces, batch
extends, removes, outcomes, held and released sessions, placements with routes and sessions, and
resumed placements, interleaved. A local Ray is started for the module.
"""
from __future__ import annotations

import random

import orjson
import pytest

from a3fast import Fleet
from a3fast.errors import FleetError, SchemaError
from a3fast.fleet.placement import Route
from a3fast.record.compact import Encoder
from distributed_worlds import WORLD_NAMES, declaration, requirements, records, without_timings


def sharded(shards, tmp_path, **options):
    from a3fast.distributed import ShardedFleet

    return ShardedFleet(shards=shards, state_dir=str(tmp_path / "state"), **options)


def assert_same_placement(one, many, what):
    assert many.agent == one.agent, what
    assert records(many) == records(one), what
    assert many.candidates == one.candidates, what
    assert many.eligible == one.eligible, what
    assert many.failed_counts() == one.failed_counts(), what
    assert many.summary() == one.summary(), what


def run_world(seed, shards, tmp_path, steps=160):
    """Apply the same random operations to a Fleet and a ShardedFleet, comparing every answer."""
    rng = random.Random(seed)
    one = Fleet()
    many = sharded(shards, tmp_path, checkpoint_every=7)
    placed: list = []
    placements = 0
    routes = [None, Route("eu-only", {"residency": "eu"}), Route("reviewers", {"clearances": ["r.read"]})]
    encoders = (Encoder(), Encoder())
    seq = 1
    try:
        for step in range(steps):
            live = one.names()
            op = rng.random()
            what = f"seed {seed}, step {step}"
            if op < 0.25 or not live:
                doc = declaration(rng, rng.choice(WORLD_NAMES))
                for fleet in (one, many):
                    fleet.add(doc)
            elif op < 0.32:
                docs = [declaration(rng, rng.choice(WORLD_NAMES)) for _ in range(rng.randint(1, 6))]
                for fleet in (one, many):
                    fleet.extend(docs)
            elif op < 0.38:
                name = rng.choice(live)
                assert many.remove(name) == one.remove(name), what
            elif op < 0.48:
                name, success = rng.choice(live), rng.random() < 0.6
                kind = rng.choice(["review", "summarise", requirements(rng, live)])
                for fleet in (one, many):
                    fleet.record_outcome(name, kind, success)
            elif op < 0.55:
                name, session = rng.choice(live), rng.choice(["s1", "s2"])
                hold = rng.random() < 0.6
                for fleet in (one, many):
                    (fleet.hold_session if hold else fleet.release_session)(name, session)
                assert many.holds_session(name, session) == one.holds_session(name, session), what
            elif op < 0.62 and placed:
                earlier_one, earlier_many = placed[rng.randrange(len(placed))]
                try:
                    expected = one.resume(earlier_one, seq=7)
                except FleetError as exc:
                    with pytest.raises(FleetError, match=str(exc).split(":")[0]):
                        many.resume(earlier_many, seq=7)
                else:
                    assert records(many.resume(earlier_many, seq=7)) == records(expected), what
            else:
                task = requirements(rng, live)
                route = rng.choice(routes)
                session = rng.choice([None, None, "s1"])
                try:
                    expected = one.place(task, session, route)
                except Exception as exc:   # a route that would change a stated value
                    with pytest.raises(type(exc)):
                        many.place(task, session, route)
                    continue
                got = many.place(task, session, route)
                assert_same_placement(expected, got, what)
                # the compact trace form, written from the merged explanation
                compact = [[(k, without_timings(c)) for k, c in enc.encode_placement(seq, p)]
                           for enc, p in zip(encoders, (expected, got))]
                assert compact[0] == compact[1], what
                seq += len(compact[0])
                placements += 1
                if expected.bound:
                    placed.append((expected, got))
            assert len(many) == len(one) and many.names() == one.names(), what
        assert placements >= steps // 4
    finally:
        many.close()


@pytest.mark.parametrize("seed,shards", [(1, 3), (2, 2), (3, 1)])
def test_sharded_fleet_writes_the_records_one_fleet_writes(ray, tmp_path, seed, shards):
    run_world(seed, shards, tmp_path)


def test_ties_go_to_the_smallest_name_across_shards(ray, tmp_path):
    """Agents with equal totals on different shards: the smallest name wins, as in one fleet."""
    from a3fast.distributed import shard_of

    names = [f"twin-{i}" for i in range(12)]
    assert len({shard_of(n, 3) for n in names}) == 3
    docs = [{"v": "1.0", "agent": {"name": n, "namespace": "ns"}, "capabilities": [], "clearances": []}
            for n in reversed(names)]
    one, many = Fleet(), sharded(3, tmp_path)
    try:
        for fleet in (one, many):
            fleet.extend(docs)
        expected, got = one.place({}), many.place({})
        assert got.agent == expected.agent == "twin-0"
        assert records(got) == records(expected)
    finally:
        many.close()


def test_candidates_follow_global_join_order_not_shard_order(ray, tmp_path):
    names = [f"n{i}" for i in (5, 1, 9, 3, 7, 0)]
    docs = [{"v": "1.0", "agent": {"name": n, "namespace": "ns"}, "capabilities": [], "clearances": []}
            for n in names]
    many = sharded(3, tmp_path)
    try:
        many.extend(docs[:3])
        many.add(docs[3])
        many.extend(docs[4:])
        many.remove("n9")
        many.add(docs[2])            # back with its first id
        assert many.place({}).candidates == names
    finally:
        many.close()


def test_a_restricted_placement_writes_the_records_one_fleet_writes(ray, tmp_path):
    """`candidates=`: each shard places over the named agents it holds; the merged records are one
    Fleet's restricted records (strangers and removed agents left out), and nothing is held."""
    rng = random.Random(11)
    docs = [declaration(rng, name) for name in WORLD_NAMES]
    one, many = Fleet(), sharded(3, tmp_path)
    try:
        for fleet in (one, many):
            fleet.extend(docs)
            fleet.remove(WORLD_NAMES[1])
        generation = many.generation
        for step in range(30):
            offered = rng.sample(WORLD_NAMES + ["stranger"], rng.randint(0, len(WORLD_NAMES)))
            task = requirements(rng, WORLD_NAMES)
            expected = one.place(task, remember_session=False, candidates=offered)
            got = many.place(task, remember_session=False, candidates=offered)
            assert_same_placement(expected, got, f"step {step}")
            assert set(got.candidates) <= set(offered) - {WORLD_NAMES[1]}
        assert many.generation == generation
    finally:
        many.close()


def test_place_many_explain_and_all_failed_answer_as_one_fleet(ray, tmp_path):
    """The rest of the Fleet API on the sharded fleet: a batch places as one Fleet's batch (the
    same records, sessions held in order, generations numbered as if one at a time), and the
    explanation and every failed predicate are one Fleet's, in join order."""
    rng = random.Random(12)
    docs = [declaration(rng, name) for name in WORLD_NAMES]
    one, many = Fleet(), sharded(3, tmp_path)
    try:
        for fleet in (one, many):
            fleet.extend(docs)
            fleet.record_outcome(WORLD_NAMES[0], "review", True)
        tasks = [requirements(rng, WORLD_NAMES) for _ in range(40)]
        sessions = [rng.choice([None, "s1", "s2"]) for _ in tasks]
        expected = one.place_many(tasks, sessions=sessions, workers=1)
        got = many.place_many(tasks, sessions=sessions)
        for j, (e, g) in enumerate(zip(expected, got)):
            assert_same_placement(e, g, f"task {j}")
            assert g.generation == e.generation - one.generation + many.generation, f"task {j}"
        assert [many.holds_session(n, "s1") for n in WORLD_NAMES] == [one.holds_session(n, "s1") for n in WORLD_NAMES]
        for task in tasks[:10]:
            e, g = one.explain(task), many.explain(task)
            assert g.candidate_ids() == e.candidate_ids() and g.eligible_ids() == e.eligible_ids()
            assert g.failed_counts() == e.failed_counts()
            assert list(many.all_failed(task).items()) == list(one.all_failed(task).items())
    finally:
        many.close()


def test_a_custom_scorer_by_importable_name_writes_the_records_one_fleet_writes(ray, tmp_path):
    from distributed_worlds import name_length_scorer

    rng = random.Random(13)
    docs = [declaration(rng, name) for name in WORLD_NAMES]
    one, many = Fleet(scorer=name_length_scorer), sharded(3, tmp_path)
    many.scorer = "distributed_worlds:name_length_scorer"
    try:
        for fleet in (one, many):
            fleet.extend(docs)
            fleet.record_outcome(WORLD_NAMES[2], "review", True)
        tasks = [requirements(rng, WORLD_NAMES) for _ in range(20)]
        for j, task in enumerate(tasks):
            assert_same_placement(one.place(task), many.place(task), f"task {j}")
        for j, (e, g) in enumerate(zip(one.place_many(tasks, workers=1), many.place_many(tasks))):
            assert g.custom_scores and e.custom_scores
            assert_same_placement(e, g, f"batch task {j}")
        with pytest.raises(ValueError, match="importable name"):
            many.place({}, scorer="no colon here")
    finally:
        many.close()


def test_a_sharded_resume_is_held_to_the_routed_requirements(ray, tmp_path):
    many = sharded(2, tmp_path)
    try:
        doc = {"v": "1.0", "agent": {"name": "a", "namespace": "ns"}, "capabilities": [], "clearances": [],
               "residency": ["eu"]}
        many.add(doc)
        first = many.place({}, route=Route("eu-only", {"residency": "eu"}))
        assert first.agent == "a"
        many.add(dict(doc, residency=["us"]))
        with pytest.raises(FleetError, match="no longer satisfies residency:eu"):
            many.resume(first)
    finally:
        many.close()


def test_invalid_input_changes_nothing_on_any_shard(ray, tmp_path):
    many = sharded(2, tmp_path)
    try:
        ok = {"v": "1.0", "agent": {"name": "a", "namespace": "ns"}, "capabilities": [], "clearances": []}
        with pytest.raises(SchemaError):
            many.extend([ok, {"v": "1.0"}])
        other = dict(ok, agent={"name": "a", "namespace": "elsewhere"})
        many.add(ok)
        with pytest.raises(FleetError, match="already used in namespace 'ns'"):
            many.extend([dict(ok, agent={"name": "b", "namespace": "ns"}), other])
        with pytest.raises(FleetError, match="no agent named 'ghost'"):
            many.remove("ghost")
        with pytest.raises(SchemaError):
            many.place({"capabilities": "everything"})
        assert many.names() == ["a"]
        assert sum(s["ids_given"] for s in many.shard_states()) == 1
    finally:
        many.close()


def test_arguments_one_fleet_refuses_are_refused_alike_before_any_shard_is_asked(ray, tmp_path):
    many, one = sharded(2, tmp_path), Fleet()
    try:
        ok = {"v": "1.0", "agent": {"name": "a", "namespace": "ns"}, "capabilities": [], "clearances": []}
        many.add(ok)
        one.add(ok)
        calls = [
            lambda fleet: fleet.place({"v": "1.0"}, session=5, remember_session=False),
            lambda fleet: fleet.place({"v": "1.0"}, session="\ud800"),
            lambda fleet: fleet.place({"v": "1.0"}, route="eu"),
            lambda fleet: fleet.place_many([{"v": "1.0"}] * 2, sessions="xy"),
            lambda fleet: fleet.place_many([{"v": "1.0"}] * 2, sessions=[1, 2]),
            lambda fleet: fleet.hold_session("a", 5),
            # refused by the shard itself: its own exception and words, not Ray's traceback
            lambda fleet: fleet.record_outcomes("a", "k", 0, 10**16),
            # a SchemaError raised on a shard, its one line carried across the process as it is
            lambda fleet: fleet.outcomes("a", {"v": "9"}),
            lambda fleet: fleet.resume("x"),
            lambda fleet: fleet.resume(fleet.place({}), seq=-1),
            lambda fleet: fleet.resume(fleet.place({}), seq="3"),
            lambda fleet: fleet.resume(fleet.place({}), seq=True),
            lambda fleet: fleet.resume(fleet.place({}), seq=2**63),
            lambda fleet: fleet.place_many([{}, {}, {"capabilities": "x"}]),    # named $[2]
            lambda fleet: fleet.extend([ok, ok, {**ok, "clearances": "x"}]),
        ]
        for n, call in enumerate(calls):
            with pytest.raises(Exception) as on_one:
                call(one)
            with pytest.raises(Exception) as on_many:
                call(many)
            assert (type(on_many.value), str(on_many.value)) == (type(on_one.value), str(on_one.value)), n
        assert not any(many.holds_session("a", s) for s in ("x", "y", 5))
        assert many.generation == one.generation
        # what only a name can be in: anything else is not, as for one Fleet
        assert ([] in many, {} in many, 5 in many) == ([] in one, {} in one, 5 in one) == (False, False, False)
        # sessions read from an iterator, once
        assert [p.agent for p in many.place_many([{}, {}], sessions=iter(["x", "y"]))] == \
            [p.agent for p in one.place_many([{}, {}], sessions=iter(["x", "y"]))] == ["a", "a"]
    finally:
        many.close()


def test_a_sharded_placement_and_batch_cross_the_one_driver(ray, tmp_path, monkeypatch):
    # the coordinator runs pipeline.drive over the sharded fleet's stages (the shards run it too,
    # in their own processes, through Fleet.scored and place_many)
    from a3fast.fleet import pipeline

    calls = []
    real = pipeline.drive

    def counted(stages, tasks, *args, **kwargs):
        calls.append((type(stages).__name__, len(tasks)))
        return real(stages, tasks, *args, **kwargs)

    many = sharded(2, tmp_path)
    try:
        many.extend([{"v": "1.0", "agent": {"name": f"a{i}", "namespace": "ns"}, "capabilities": [],
                      "clearances": []} for i in range(6)])
        monkeypatch.setattr(pipeline, "drive", counted)
        many.place({"v": "1.0"}, session="s")
        many.place_many([{"v": "1.0"}] * 3, sessions=["s", "s", None])
        assert calls == [("_ShardedStages", 1), ("_ShardedStages", 3)]
    finally:
        many.close()


def test_a_bound_placement_holds_its_session_on_the_owning_shard(ray, tmp_path):
    from a3fast.distributed import shard_of

    many = sharded(3, tmp_path)
    try:
        many.add({"v": "1.0", "agent": {"name": "solo", "namespace": "ns"}, "capabilities": [], "clearances": []})
        p = many.place({"session": "s9"})
        assert p.agent == "solo" and many.holds_session("solo", "s9")
        owner = shard_of("solo", 3)
        import ray as ray_module
        held = [ray_module.get(many.shard_actor(i).holds_session.remote("solo", "s9")) for i in range(3)]
        assert held == [i == owner for i in range(3)]
        again = many.place({"session": "s9"})
        assert orjson.loads(again.scheduling_json())["scores"]["solo"]["affinity"] == 1.0
    finally:
        many.close()


def test_shard_of_is_a_stable_hash_of_the_name():
    from a3fast.distributed import shard_of

    # BLAKE2b, not Python's salted hash: the same shard in every process and on every machine
    assert [shard_of(n, 4) for n in ("a", "b", "agent-1", "é")] == [shard_of(n, 4) for n in ("a", "b", "agent-1", "é")]
    import hashlib
    digest = hashlib.blake2b(b"agent-1", digest_size=8).digest()
    assert shard_of("agent-1", 7) == int.from_bytes(digest, "little") % 7
