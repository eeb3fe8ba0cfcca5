"""Offered names resolved in one call (the engines' `split_members`, `live_ids_of`,
`first_failed_into`), as the Kubernetes extender's NodeNames mode and `place(candidates=...)` use
them, and the Roaring writer the compact records of such placements go through: each gives what the
plain Python it replaces gives, on both engines."""
from __future__ import annotations

import random
import struct

import pytest
from pyroaring import BitMap

from a3fast.engines import engine_module
from a3fast.roaring import deserialize_ids, serialize_ids
from factories import declaration, fleet_of, requirements


def test_split_members_keeps_offer_order_and_repeats(engine):
    split = engine_module(engine).split_members
    names = ["c", "x", "a", "c", "y", "b"]
    for members in ({"a", "b", "c"}, frozenset({"a", "b", "c"}), {"a": 0, "b": 1, "c": 2}):
        assert split(names, members) == (["c", "a", "c", "b"], ["x", "y"])
    assert split([], {"a"}) == ([], [])
    assert split(["a"], set()) == ([], ["a"])


def test_live_ids_of_leaves_out_removed_unknown_and_non_string_names(engine):
    live_ids_of = engine_module(engine).live_ids_of
    ids = {"a": 0, "b": 1, "c": 2, "d": 3}
    entries = [object(), None, object(), object()]   # "b" was removed
    assert live_ids_of(ids, entries, ["d", "b", "zz", 7, None, "a", "d"]) == [0, 3]
    assert live_ids_of(ids, entries, iter(["c"])) == [2]
    assert live_ids_of({}, [], ["a"]) == []


def test_live_ids_of_equals_the_python_rule_on_random_offers(engine):
    live_ids_of = engine_module(engine).live_ids_of
    rng = random.Random(7)
    names = [f"agent-{i}" for i in range(300)]
    ids = {n: i for i, n in enumerate(names)}
    entries = [None if rng.random() < 0.2 else object() for _ in names]
    for _ in range(50):
        offered = rng.sample(names + ["stranger-1", "stranger-2"], rng.randrange(0, 302))
        expected = sorted({ids[n] for n in offered if n in ids and entries[ids[n]] is not None})
        assert live_ids_of(ids, entries, offered) == expected


def test_first_failed_into_names_each_failure_as_filters_failed_does(engine):
    docs = [declaration(f"a{i}", capabilities=[("x.y", 1)] if i % 3 else [],
                        clearances=["r.read"] if i % 2 else [], residency=["eu"]) for i in range(40)]
    fleet = fleet_of(engine, docs)
    offered = [f"a{i}" for i in range(0, 40, 2)] + [f"a{i}" for i in range(1, 40, 4)]
    p = fleet.place(requirements(capabilities=["x.y/1"], clearances=["r.read"]), candidates=offered,
                    remember_session=False)
    assert p.filters_failed, "the world must have failures for the test to mean anything"
    out: dict[str, str] = {"not-an-agent": "kept"}
    engine_module(engine).first_failed_into(p.index, p.explanation, p.predicates, out)
    expected = {"not-an-agent": "kept", **{pair["candidate"]: pair["predicate"] for pair in p.filters_failed}}
    assert list(out.items()) == list(expected.items())


def test_first_failed_into_refuses_predicates_that_do_not_match_the_explanation(engine):
    fleet = fleet_of(engine, [declaration("a", clearances=["r.read"])])
    p = fleet.place(requirements(clearances=["r.write"]), remember_session=False)
    with pytest.raises(ValueError, match="predicates"):
        engine_module(engine).first_failed_into(p.index, p.explanation, [], {})


@pytest.mark.parametrize("ids", [
    [], [5], list(range(4096)), list(range(4097)), list(range(0, 200_000, 3)),
    sorted(random.Random(3).sample(range(1 << 20), 20_000)),
    [i for i in range(1000) if i % 97], list(range(10, 70_000)), [0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 5, 6, 7],
    [k * 4 + j for k in range(2047) for j in range(3)], [k * 4 + j for k in range(2048) for j in range(3)],
], ids=["empty", "one", "array-full", "bitmap", "many-keys", "random", "dense-with-gaps", "long-run",
        "runs-as-large-as-the-array", "runs-smaller", "two-runs-smaller", "bitmap-of-2047-runs",
        "bitmap-of-2048-runs"])
def test_serialize_ids_writes_portable_roaring_with_runs_where_they_are_smaller(ids):
    """Each chunk in the smallest of its array, bitmap and run forms, as CRoaring's run_optimize
    chooses (a tie keeps the array): pyroaring's bytes for a BitMap made from the ids."""
    data = serialize_ids(ids)
    cookie = struct.unpack_from("<H", data)[0]
    assert list(deserialize_ids(data)) == ids
    assert data == BitMap(ids).serialize()
    runs = sum(1 for k, i in enumerate(ids) if k == 0 or ids[k - 1] != i - 1)
    chunks = {i >> 16 for i in ids}
    # a single chunk is written as runs exactly when they are strictly smaller
    if len(chunks) == 1:
        smaller = 2 + 4 * runs < (2 * len(ids) if len(ids) <= 4096 else 8192)
        assert cookie == (12347 if smaller else 12346), (runs, len(ids))
