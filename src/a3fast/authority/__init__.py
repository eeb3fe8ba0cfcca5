"""Portable authority: what an agent *may* do here, now, described by meaning (portable-authority;
A3 §8's Authority Envelope).

    from a3fast.authority import Resolver
    resolver = Resolver(contracts, mappings, skills)        # dicts or parsed documents
    resolution = resolver.resolve(connection, engagement, policy, now="2026-03-01T12:30:00Z")
    resolution.is_available("chess.play"); resolution.skill("chess.play").bindings

    a3fast.admit(declaration, principal_grants)             # task.admitted authority_envelope

Modules: `vocabulary` (operations, capability keys, interning), `documents` (contracts, mappings,
skills, connection, engagement, runtime policy), `keys` and `engagement` (Ed25519 signatures),
`catalog` and `effective` (connection ∩ engagement ∩ runtime, with reasons), `resolution` (skills
to tools), `envelope` (admit, and the verifier's envelope warnings), `bench`.
"""
from __future__ import annotations

from .bench import bench_resolve, synthetic_workload
from .catalog import Catalog
from .documents import (CONDITIONS, DECISIONS, Connection, Contract, Engagement, HostMapping, Rule,
                        RuntimePolicy, Signature, Skill, parse_connection, parse_contract, parse_contracts,
                        parse_engagement, parse_mapping, parse_mappings, parse_policy, parse_skill,
                        parse_skills)
from .effective import CONFIRM, DENIED, GRANTED, Authority, Grant, apply_policy, effective_authority
from .engagement import EngagementCheck, canonical_bytes, sign_engagement, verify_engagement
from .envelope import (W_ENVELOPE_EXCEEDS_CLEARANCES, W_ENVELOPE_MALFORMED, EnvelopeFinding, admit,
                       check_envelope, envelope_findings)
from .keys import generate_private_key, load_public_key, public_key_text
from .reasons import Reason
from .resolution import Binding, HostTools, Resolution, Resolver, SkillIndex, SkillResolution, Unmet, resolve
from .times import DEFAULT_SKEW_SECONDS
from .vocabulary import CONFIRMATIONS, OPERATIONS, Vocabulary, capability_key, parse_capability_ref

__all__ = [
    "OPERATIONS", "CONFIRMATIONS", "DECISIONS", "CONDITIONS", "DEFAULT_SKEW_SECONDS",
    "GRANTED", "CONFIRM", "DENIED", "W_ENVELOPE_EXCEEDS_CLEARANCES", "W_ENVELOPE_MALFORMED",
    "Contract", "HostMapping", "Skill", "Connection", "Engagement", "Signature", "Rule", "RuntimePolicy",
    "parse_contract", "parse_contracts", "parse_mapping", "parse_mappings", "parse_skill", "parse_skills",
    "parse_connection", "parse_engagement", "parse_policy",
    "canonical_bytes", "sign_engagement", "verify_engagement", "EngagementCheck",
    "generate_private_key", "load_public_key", "public_key_text",
    "Vocabulary", "capability_key", "parse_capability_ref", "Catalog", "apply_policy",
    "effective_authority", "Authority", "Grant", "Reason",
    "HostTools", "SkillIndex", "Resolver", "Resolution", "SkillResolution", "Binding", "Unmet", "resolve",
    "admit", "check_envelope", "envelope_findings", "EnvelopeFinding",
    "bench_resolve", "synthetic_workload",
]
