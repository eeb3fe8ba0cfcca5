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
to tools), `envelope` (admit, and the verifier's envelope warnings). Its benchmark is
`a3fast.bench.authority`.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Each public name and the module that defines it; modules load on first use, so that the verifier
# can import `a3fast.authority.envelope` without loading cryptography and the resolver.
_MODULES = {
    "catalog": ("Catalog",),
    "documents": ("CONDITIONS", "DECISIONS", "Connection", "Contract", "Engagement", "HostMapping", "Rule",
                  "RuntimePolicy", "Signature", "Skill", "parse_connection", "parse_contract", "parse_contracts",
                  "parse_engagement", "parse_mapping", "parse_mappings", "parse_policy", "parse_skill",
                  "parse_skills"),
    "effective": ("CONFIRM", "DENIED", "GRANTED", "Authority", "Grant", "apply_policy", "effective_authority"),
    "engagement": ("EngagementCheck", "canonical_bytes", "sign_engagement", "verify_engagement"),
    "envelope": ("W_ENVELOPE_EXCEEDS_CLEARANCES", "W_ENVELOPE_MALFORMED", "EnvelopeFinding", "admit",
                 "check_envelope", "envelope_findings"),
    "keys": ("generate_private_key", "load_public_key", "public_key_text"),
    "reasons": ("Reason",),
    "resolution": ("Binding", "HostTools", "Resolution", "Resolver", "SkillIndex", "SkillResolution", "Unmet",
                   "resolve"),
    "times": ("DEFAULT_SKEW_SECONDS",),
    "vocabulary": ("CONFIRMATIONS", "OPERATIONS", "Vocabulary", "capability_key", "parse_capability_ref"),
}

if TYPE_CHECKING:  # what the lazy names are, for type checkers (tests/project/test_typing.py keeps both in step)
    from .catalog import Catalog
    from .documents import (CONDITIONS, DECISIONS, Connection, Contract, Engagement, HostMapping, Rule,
                            RuntimePolicy, Signature, Skill, parse_connection, parse_contract,
                            parse_contracts, parse_engagement, parse_mapping, parse_mappings, parse_policy,
                            parse_skill, parse_skills)
    from .effective import CONFIRM, DENIED, GRANTED, Authority, Grant, apply_policy, effective_authority
    from .engagement import EngagementCheck, canonical_bytes, sign_engagement, verify_engagement
    from .envelope import (W_ENVELOPE_EXCEEDS_CLEARANCES, W_ENVELOPE_MALFORMED, EnvelopeFinding, admit,
                           check_envelope, envelope_findings)
    from .keys import generate_private_key, load_public_key, public_key_text
    from .reasons import Reason
    from .resolution import (Binding, HostTools, Resolution, Resolver, SkillIndex, SkillResolution, Unmet,
                             resolve)
    from .times import DEFAULT_SKEW_SECONDS
    from .vocabulary import CONFIRMATIONS, OPERATIONS, Vocabulary, capability_key, parse_capability_ref

_HOME = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
