"""Effective authority = connection ∩ engagement ∩ runtime (portable-authority "Authority is an
intersection"; A3 §8's envelope, on the *may* side), with a reason for every capability.

Everything is computed as bitsets over the catalogue's vocabulary (seen through each authority's
own view, which interns after it what the connection and engagement bring): the connection's capabilities,
the engagement's (nothing unless it verified), the contracted capabilities, and the runtime
policy's deny and confirm sets. The effective set is their AND, so it can never hold a capability
that one boundary lacks. Reasons are worked out only for the capabilities someone asks about.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterator, Mapping

from . import reasons as R
from .catalog import Catalog
from ..errors import describe
from .documents import Connection, Rule, RuntimePolicy, parse_connection, parse_policy
from .engagement import EngagementCheck, check_context, verify_engagement
from .times import DEFAULT_SKEW_SECONDS, check_skew, current_instant, format_instant, to_micros
from .vocabulary import VocabularyView, parse_capability_ref

__all__ = ["GRANTED", "CONFIRM", "DENIED", "Grant", "RuntimeOutcome", "apply_policy", "Authority",
           "is_revoked", "effective_authority"]

GRANTED = "granted"
CONFIRM = "confirm"
DENIED = "denied"


@dataclass(frozen=True, slots=True)
class Grant:
    """One capability's standing: granted, granted if a person confirms each use, or denied."""

    capability: str
    status: str
    reasons: tuple[R.Reason, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"capability": self.capability, "status": self.status,
                "reasons": [r.to_dict() for r in self.reasons]}


@dataclass(frozen=True, slots=True)
class RuntimeOutcome:
    """A runtime policy applied to a catalogue: what it denies, what it makes confirm, and each
    rule's matches (kept to name the rules behind a decision)."""

    deny: int
    confirm: int
    unmatched: int
    matches: tuple[tuple[Rule, int], ...]
    default: str


def apply_policy(catalog: Catalog, policy: RuntimePolicy | Mapping[str, Any]) -> RuntimeOutcome:
    """Every matching rule applies and the strictest decision wins; `default` takes the rest.
    `policy` is parsed here when given as a document (SchemaError when it does not parse);
    TypeError for a catalog that is not one."""
    if not isinstance(catalog, Catalog):
        raise TypeError(f"catalog: expected a Catalog of parsed contracts, found {describe(catalog)}")
    if not isinstance(policy, RuntimePolicy):
        policy = parse_policy(policy)
    matches = tuple((rule, catalog.matches(rule)) for rule in policy.rules)
    by_decision = {"allow": 0, "confirm": 0, "deny": 0}
    for rule, bits in matches:
        by_decision[rule.decision] |= bits
    matched = by_decision["allow"] | by_decision["confirm"] | by_decision["deny"]
    unmatched = catalog.known & ~matched
    by_decision[policy.default] |= unmatched
    deny = by_decision["deny"]
    return RuntimeOutcome(deny, by_decision["confirm"] & ~deny, unmatched, matches, policy.default)


class Authority:
    """What a connection may do here, now: `granted` and `confirm` (needing confirmation) bitsets
    over `vocabulary` (the catalogue's, extended for this authority alone); `grant(key)` explains
    any one capability."""

    def __init__(self, catalog: Catalog, connection: Connection, engagement: EngagementCheck,
                 runtime: RuntimeOutcome, revoked: bool) -> None:
        # its own view of the catalogue's vocabulary: the connection's and engagement's keys new
        # to it are interned in the view, so this authority's counts and lists, and every other
        # authority's over the same catalogue, stay what they were when made
        vocabulary = self.vocabulary = VocabularyView(catalog.vocabulary)
        self.catalog = catalog
        self.connection = connection
        self.engagement = engagement
        self.runtime = runtime
        self.revoked = revoked
        self.connection_bits = vocabulary.bits(connection.capabilities)
        self.engagement_bits = vocabulary.bits(engagement.capabilities)
        if revoked:
            effective = 0
        else:
            effective = self.connection_bits & self.engagement_bits & catalog.known & ~runtime.deny
        self.confirm = effective & (runtime.confirm | catalog.always_confirm)
        self.granted = effective & ~self.confirm

    @property
    def effective(self) -> int:
        """Every capability that may be used, with or without confirmation."""
        return self.granted | self.confirm

    def _id_of(self, key: object) -> tuple[str | None, int | None]:
        """A capability reference's canonical key (None: no reference) and its id here (None:
        unknown). The vocabulary's keys are canonical, so a key it holds is looked up once."""
        cid = self.vocabulary.get(key) if type(key) is str else None
        if cid is not None:
            return key, cid       # type: ignore[return-value]
        ref = parse_capability_ref(key)
        return ref, (self.vocabulary.get(ref) if ref is not None else None)

    def __contains__(self, key: object) -> bool:
        cid = self._id_of(key)[1]
        return cid is not None and (self.effective >> cid) & 1 == 1

    def keys(self, status: str = GRANTED) -> list[str]:
        bits = {GRANTED: self.granted, CONFIRM: self.confirm}.get(status)
        if bits is None:
            raise ValueError(f"status {status!r}: expected {GRANTED!r} or {CONFIRM!r}")
        return self.vocabulary.keys(bits)

    def counts(self) -> dict[str, int]:
        granted, confirm = self.granted.bit_count(), self.confirm.bit_count()
        return {GRANTED: granted, CONFIRM: confirm,
                DENIED: len(self.vocabulary) - granted - confirm}

    def grant(self, key: str) -> Grant:
        """The standing of one capability and every reason for it, boundary by boundary. `key` is
        a capability reference, `"<id>"` (major version 1) or `"<id>/<major>"`; the Grant names it
        by its canonical key (ValueError for one that is no reference)."""
        ref, cid = self._id_of(key)
        if ref is None:
            raise ValueError(f"capability: expected a reference '<id>' or '<id>/<major>', found {key!r}")
        key = ref
        bit = 0 if cid is None else 1 << cid
        denied = self._denials(bit)
        if denied:
            return Grant(key, DENIED, tuple(denied))
        confirmations = self._confirmations(bit)
        return Grant(key, CONFIRM if confirmations else GRANTED, tuple(confirmations))

    def grants(self) -> Iterator[Grant]:
        """Every capability the vocabulary knows, in the order it was first seen."""
        vocabulary = self.vocabulary
        for cid in range(len(vocabulary)):
            yield self.grant(vocabulary.key(cid))

    def _denials(self, bit: int) -> list[R.Reason]:
        out = []
        connection = self.connection
        if self.revoked and connection.revoked_at is not None:  # revoked: it has a revoked_at
            out.append(R.Reason(R.CONNECTION_REVOKED, R.CONNECTION, f"connection {connection.id} was revoked "
                                f"at {format_instant(connection.revoked_at)}"))
        if not self.connection_bits & bit:
            out.append(R.Reason(R.NOT_IN_CONNECTION, R.CONNECTION, "not granted by the connection"))
        if not self.engagement.valid:
            out.append(R.Reason(R.ENGAGEMENT_REJECTED, R.ENGAGEMENT,
                                f"engagement rejected: {self.engagement.summary()}"))
        elif not self.engagement_bits & bit:
            out.append(R.Reason(R.NOT_IN_ENGAGEMENT, R.ENGAGEMENT, "not granted by the engagement"))
        if not self.catalog.known & bit:
            out.append(R.Reason(R.NO_CONTRACT, R.CONTRACT, "no capability contract says what it means"))
        elif self.runtime.deny & bit:
            out += self._runtime_reasons(bit, "deny", R.RUNTIME_DENIED, "denied by {}")
        return out

    def _confirmations(self, bit: int) -> list[R.Reason]:
        out = []
        if self.catalog.untrusted & bit:
            origin = self.catalog.contract_of(bit).doc.get("inferred_from", "untrusted hints")
            out.append(R.Reason(R.UNTRUSTED_CONTRACT, R.CONTRACT,
                                f"the contract is a draft inferred from {origin}, which are not trusted"))
        elif self.catalog.always_confirm & bit:
            out.append(R.Reason(R.CONTRACT_CONFIRMATION, R.CONTRACT, "the contract requires confirmation"))
        if self.runtime.confirm & bit:
            out += self._runtime_reasons(bit, "confirm", R.RUNTIME_CONFIRMATION, "{} requires confirmation")
        return out

    def _runtime_reasons(self, bit: int, decision: str, code: str, sentence: str) -> list[R.Reason]:
        """One reason per rule behind a runtime decision (or the default's); `sentence` has a `{}`
        for who decided."""
        out = []
        for rule, matched in self.runtime.matches:
            if rule.decision == decision and matched & bit:
                because = f" ({rule.reason})" if rule.reason else ""
                out.append(R.Reason(code, R.RUNTIME, sentence.format(f"runtime policy rule {rule.id}") + because,
                                    rule.id))
        if not out and self.runtime.unmatched & bit:
            out.append(R.Reason(code, R.RUNTIME, sentence.format("the runtime policy default") + " (no rule matches)"))
        return out

    def to_dict(self) -> list[dict[str, Any]]:
        return [g.to_dict() for g in self.grants()]


def is_revoked(connection: Connection, at_micros: int) -> bool:
    """Revocation takes effect at `revoked_at` exactly; no clock skew is forgiven for it."""
    return connection.revoked_at is not None and to_micros(connection.revoked_at) <= at_micros


def effective_authority(catalog: Catalog, connection: Connection | Mapping[str, Any], engagement: Any,
                        policy: RuntimePolicy | Mapping[str, Any], *,
                        now: datetime | str | None = None,
                        skew_seconds: int = DEFAULT_SKEW_SECONDS, context: str | None = None) -> Authority:
    """connection ∩ engagement ∩ runtime at `now`. `engagement` is a descriptor as received (any
    JSON value, or a parsed Engagement; it is verified here) or an `EngagementCheck`, which is made
    again unless it was made for this connection at this instant with this skew, in this context.
    `context`: the operating context the host is in (`verify_engagement`; None checks none). `connection` and
    `policy` are parsed documents, or documents parsed here as `Resolver` parses them.
    ValueError for a bad `now` or `skew_seconds` (see `verify_engagement`); SchemaError (a
    ValueError) for a connection or policy that does not parse; TypeError for a catalog that is
    not one."""
    now = current_instant(now)  # one instant for the descriptor and the revocation alike
    check_skew(skew_seconds)
    check_context(context)
    if not isinstance(catalog, Catalog):
        raise TypeError(f"catalog: expected a Catalog of parsed contracts, found {describe(catalog)}")
    if not isinstance(connection, Connection):
        connection = parse_connection(connection)
    if isinstance(engagement, EngagementCheck):
        checked = engagement.engagement
        if checked is not None and not engagement.made_for(connection, to_micros(now), skew_seconds, context):
            # a check answers for one connection at one instant: reused at another, or for another
            # connection (another id, other keys, another experience), it is made again, so that an
            # engagement expired since, or for someone else, grants nothing and says why
            engagement = verify_engagement(checked.doc, connection, now=now, skew_seconds=skew_seconds,
                                           context=context)
    else:
        engagement = verify_engagement(engagement, connection, now=now, skew_seconds=skew_seconds, context=context)
    return Authority(catalog, connection, engagement, apply_policy(catalog, policy),
                     is_revoked(connection, to_micros(now)))

