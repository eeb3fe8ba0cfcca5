"""Why a capability is granted with conditions, or not at all: one value per cause, naming its boundary.

A result never says just "denied": it says which boundary (connection, engagement, runtime policy,
contract catalogue, host) and why, so that the person who can fix it knows it is theirs to fix.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Reason", "CONNECTION", "ENGAGEMENT", "RUNTIME", "CONTRACT", "HOST",
    "CONNECTION_REVOKED", "NOT_IN_CONNECTION", "ENGAGEMENT_REJECTED", "NOT_IN_ENGAGEMENT",
    "NO_CONTRACT", "RUNTIME_DENIED", "NO_MAPPING", "CONTRACT_CONFIRMATION", "UNTRUSTED_CONTRACT", "RUNTIME_CONFIRMATION",
    "MALFORMED", "UNKNOWN_KEY", "BAD_SIGNATURE", "WRONG_CONNECTION", "WRONG_EXPERIENCE", "WRONG_CONTEXT",
    "NOT_YET_VALID", "EXPIRED",
]

# Boundaries (portable-authority "Authority is an intersection"), plus the two things a capability
# also needs before it can be used on this host: a contract saying what it means, and a tool.
CONNECTION = "connection"
ENGAGEMENT = "engagement"
RUNTIME = "runtime"
CONTRACT = "contract"
HOST = "host"

# Why a capability is not in the effective authority, or cannot be bound.
CONNECTION_REVOKED = "connection_revoked"
NOT_IN_CONNECTION = "not_in_connection"
ENGAGEMENT_REJECTED = "engagement_rejected"
NOT_IN_ENGAGEMENT = "not_in_engagement"
NO_CONTRACT = "no_contract"
RUNTIME_DENIED = "runtime_denied"
NO_MAPPING = "no_mapping"
# Why a granted capability needs a person to confirm each use.
CONTRACT_CONFIRMATION = "contract_requires_confirmation"
UNTRUSTED_CONTRACT = "contract_inferred_from_untrusted_hints"
RUNTIME_CONFIRMATION = "runtime_requires_confirmation"
# Why an engagement descriptor grants nothing.
MALFORMED = "malformed"
UNKNOWN_KEY = "unknown_key"
BAD_SIGNATURE = "bad_signature"
WRONG_CONNECTION = "wrong_connection"
WRONG_EXPERIENCE = "wrong_experience"
WRONG_CONTEXT = "wrong_context"
NOT_YET_VALID = "not_yet_valid"
EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class Reason:
    """One cause: a stable `code`, the `boundary` it comes from, a sentence, and the rule if any."""

    code: str
    boundary: str
    message: str
    rule: str | None = None

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, str]:
        out = {"code": self.code, "boundary": self.boundary, "message": self.message}
        if self.rule is not None:
            out["rule"] = self.rule
        return out
