"""A synthetic host, boundaries and skill catalogue of any size, and the timing `a3fast bench` reports.

The workload is seeded and built from real documents (contracts, mappings, a signed engagement, a
policy with rules over operation, data classes and reversibility), so the timed path is the one a
caller takes: verify the descriptor, intersect the boundaries, resolve every skill.
"""
from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..authority.documents import (Connection, Contract, HostMapping, RuntimePolicy, Skill,
                                   parse_connection, parse_policy)
from ..authority.engagement import sign_engagement
from ..authority.keys import public_key_text
from ..authority.resolution import Resolver
from ..authority.vocabulary import OPERATIONS

__all__ = ["Workload", "synthetic_workload", "bench_resolve", "TARGET_SECONDS", "BENCH_NOW"]

#: What a scheduler can afford to resolve 10,000 skills of about 10 capabilities against 2,000
#: capabilities on every engagement change; the report compares the median with it.
TARGET_SECONDS = 0.020
#: The instant the workload's engagement is checked at (it is valid for the hour after).
BENCH_NOW = "2026-01-01T12:00:00Z"
_EFFECTS = ("changes_shared_state", "sends_message", "moves_money", "publishes", "changes_own_state")
_DATA_CLASSES = ("public", "personal", "payment", "health", "credentials")


@dataclass(frozen=True)
class Workload:
    contracts: tuple[Contract, ...]
    mappings: tuple[HostMapping, ...]
    skills: tuple[Skill, ...]
    connection: Connection
    engagement: dict[str, Any]
    policy: RuntimePolicy


def synthetic_workload(n_skills: int = 10_000, caps_per_skill: int = 10, vocabulary: int = 2_000,
                       seed: int = 0, optional_per_skill: int = 2) -> Workload:
    """Contracts for `vocabulary` capabilities; the host maps 97 % of them; the connection allows
    all, the engagement 95 %; the policy denies payments and administration and confirms
    irreversible deletes; each skill requires `caps_per_skill` capabilities and may use a few more."""
    rng = random.Random(seed)
    keys = [f"bench.cap-{i}/1" for i in range(vocabulary)]
    contracts = tuple(
        Contract(f"bench.cap-{i}", 1, rng.choice(OPERATIONS), f"resource-{i % 50}",
                 tuple(rng.sample(_EFFECTS, rng.randint(0, 2))), tuple(rng.sample(_DATA_CLASSES, rng.randint(0, 2))),
                 rng.random() < 0.5, rng.choice(("never", "always", "policy_driven", "policy_driven")))
        for i in range(vocabulary))
    mappings = tuple(HostMapping(f"tool_{i}", key, "mcp") for i, key in enumerate(keys) if rng.random() < 0.97)
    per_skill = min(caps_per_skill + optional_per_skill, vocabulary)
    skills = []
    for i in range(n_skills):
        chosen = rng.sample(keys, per_skill)
        skills.append(Skill(f"bench.skill-{i}", tuple(chosen[:caps_per_skill]), tuple(chosen[caps_per_skill:])))
    signing_key = Ed25519PrivateKey.generate()
    connection = parse_connection({
        "id": "bench-connection", "experience": "bench.experience", "capabilities": keys,
        "keys": [{"kid": "bench-key", "public_key": public_key_text(signing_key)}]})
    engagement = sign_engagement({
        "experience": "bench.experience", "context": "bench-context", "connection": "bench-connection",
        "capabilities": [k for k in keys if rng.random() < 0.95],
        "issued_at": "2026-01-01T11:59:00Z", "expires": "2026-01-01T13:00:00Z"}, signing_key, "bench-key")
    policy = parse_policy({"default": "allow", "rules": [
        {"id": "no-payments", "decision": "deny", "when": {"data_classes": ["payment"], "operation": ["transact"]}},
        {"id": "no-admin", "decision": "deny", "when": {"operation": ["administer"]}},
        {"id": "confirm-irreversible-delete", "decision": "confirm",
         "when": {"operation": ["delete"], "reversible": False}},
    ]})
    return Workload(contracts, mappings, tuple(skills), connection, engagement, policy)


def _timed(fn, repeat: int) -> tuple[list[float], Any]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times, result


def bench_resolve(n_skills: int = 10_000, caps_per_skill: int = 10, vocabulary: int = 2_000,
                  repeat: int = 7, seed: int = 0, quick: bool = False) -> dict[str, Any]:
    """Time resolving every skill of a synthetic workload (engagement signature check, boundary
    intersection and runtime policy included), `repeat` times; returns the median and the sizes.
    `quick` (the smoke run of `a3fast bench --quick`) keeps the sizes and repeats 3 times.

    `build_s` is the one-off cost of interning the host's contracts, mappings and skills;
    `details_s` is the cost of then building every skill's bindings and reasons, which a caller
    pays only for the skills it looks at.
    """
    repeat = min(repeat, 3) if quick else repeat
    w = synthetic_workload(n_skills, caps_per_skill, vocabulary, seed)
    build_times, resolver = _timed(lambda: Resolver(w.contracts, w.mappings, w.skills), 1)
    times, resolution = _timed(lambda: resolver.resolve(w.connection, w.engagement, w.policy, now=BENCH_NOW),
                               repeat)
    if not resolution.authority.engagement.valid:
        raise RuntimeError(f"benchmark engagement rejected: {resolution.authority.engagement.summary()}")
    detail_times, details = _timed(lambda: list(resolution), 1)
    return {
        "name": "authority: resolve skills",
        "n_skills": n_skills, "caps_per_skill": caps_per_skill, "vocabulary": vocabulary,
        "available": sum(1 for d in details if d.available),
        "effective": resolution.authority.effective.bit_count(),
        "repeat": repeat, "median_s": statistics.median(times), "min_s": min(times),
        "build_s": build_times[0], "details_s": detail_times[0], "target_s": TARGET_SECONDS,
        "target_met": statistics.median(times) <= TARGET_SECONDS,
    }
