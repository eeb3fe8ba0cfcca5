"""Skill resolution at the issue's size: 10,000 skills of 10 required capabilities (plus 2
optional) against a 2,000-capability vocabulary — a3fast beside the baselines a caller would
otherwise write.

    python -m pytest benchmarks/bench_authority.py --benchmark-columns=median,min,max

`resolve` is the whole call (engagement signature, boundary intersection, runtime policy, every
skill's availability). The `skills:` rows time only the last step, given the usable set, so that
the representations compare like with like: a3fast's transposed int bitsets, the same transposed
with pyroaring, per-skill subset tests with pyroaring, and per-skill Python sets.
"""
from __future__ import annotations

import pytest
from pyroaring import BitMap

from a3fast.authority import Resolver
from a3fast.bench.authority import BENCH_NOW, synthetic_workload
from a3fast.authority.vocabulary import bits_to_ids

N_SKILLS, CAPS_PER_SKILL, VOCABULARY = 10_000, 10, 2_000


@pytest.fixture(scope="module")
def world():
    w = synthetic_workload(N_SKILLS, CAPS_PER_SKILL, VOCABULARY, seed=0)
    resolver = Resolver(w.contracts, w.mappings, w.skills)
    resolution = resolver.resolve(w.connection, w.engagement, w.policy, now=BENCH_NOW)
    assert resolution.authority.engagement.valid
    return w, resolver, resolution


def test_resolve(benchmark, world):
    w, resolver, resolution = world
    result = benchmark(resolver.resolve, w.connection, w.engagement, w.policy, now=BENCH_NOW)
    assert result.available == resolution.available


def test_skills_int_bitsets_transposed(benchmark, world):
    _, resolver, resolution = world
    assert benchmark(resolver.index.available, resolution.usable) == resolution.available


def test_skills_pyroaring_transposed(benchmark, world):
    _, resolver, resolution = world
    index = resolver.index
    requiring = [BitMap(bits_to_ids(row)) for row in index.requiring]
    everyone = BitMap(range(len(index.skills)))

    def available():
        missing = bits_to_ids(index.needed & ~resolution.usable)
        return everyone - BitMap.union(*(requiring[c] for c in missing)) if missing else everyone

    assert sorted(benchmark(available)) == bits_to_ids(resolution.available)


def test_skills_pyroaring_per_skill(benchmark, world):
    _, resolver, resolution = world
    vocabulary = resolver.vocabulary
    required = [BitMap(vocabulary.get(k) for k in s.required) for s in resolver.index.skills]
    usable = BitMap(bits_to_ids(resolution.usable))

    def available():
        return [i for i, r in enumerate(required) if r.issubset(usable)]

    assert benchmark(available) == bits_to_ids(resolution.available)


def test_skills_python_sets_per_skill(benchmark, world):
    _, resolver, resolution = world
    usable = set(resolver.vocabulary.keys(resolution.usable))
    skills = resolver.index.skills

    def available():
        return [i for i, s in enumerate(skills) if all(k in usable for k in s.required)]

    assert benchmark(available) == bits_to_ids(resolution.available)


def test_details_of_every_skill(benchmark, world):
    w, resolver, _ = world

    def details():
        return sum(1 for d in resolver.resolve(w.connection, w.engagement, w.policy, now=BENCH_NOW) if d.available)

    assert benchmark.pedantic(details, rounds=3, iterations=1) == len(bits_to_ids(world[2].available))
