"""Engagement descriptors: canonical bytes, Ed25519 signing, and verification that never raises.

The signature covers the descriptor without its `signature` member, serialised canonically (see
`canonical_bytes`). A descriptor that does not parse, is signed with a key the connection does not
trust, does not verify, names another connection or experience (or another operating context than
the one the host says it is in), is not yet valid or has expired grants nothing; `verify_engagement` says which, as values (portable-authority "2 · Engagement").
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Mapping

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ..errors import SchemaError
from . import reasons as R
from .documents import Connection, Engagement, parse_connection, parse_engagement
from .keys import ALGORITHM, b64url_encode
from .times import DEFAULT_SKEW_SECONDS, check_skew, format_instant, now_micros, to_micros

__all__ = ["SIGNATURE_FIELD", "canonical_bytes", "sign_engagement", "trusted_keys", "EngagementCheck", "verify_engagement"]

SIGNATURE_FIELD = "signature"
#: How many of a malformed descriptor's problems a reason quotes (a hostile one may have thousands).
_QUOTED_PROBLEMS = 3


def canonical_bytes(descriptor: Mapping[str, Any]) -> bytes:
    """The bytes a signature covers: the descriptor minus `signature`, as compact UTF-8 JSON with
    object members sorted by key at every depth (orjson OPT_SORT_KEYS; for strings and integers
    this is byte-for-byte Python's `json.dumps(d, sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)`). TypeError for what JSON cannot carry (non-string keys, huge integers,
    NaN and the infinities, which orjson would write as null: a descriptor holding NaN would verify
    against a signature made over null)."""
    unsigned = {k: v for k, v in descriptor.items() if k != SIGNATURE_FIELD}
    _check_finite(unsigned)
    return orjson.dumps(unsigned, option=orjson.OPT_SORT_KEYS)


def _check_finite(value: Any) -> None:
    """TypeError for a float that is not finite anywhere in `value` (walked without recursion:
    a caller's document may be nested deeper than the interpreter's stack)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is float or isinstance(item, float):
            if not math.isfinite(item):
                raise TypeError(f"{item!r} is not a JSON number")
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def trusted_keys(connection: Connection) -> dict[str, bytes]:
    """The keys `connection` trusts, each kid with its raw public bytes (what two connections must
    share for one's check of a signature to answer for the other)."""
    return {kid: key.public_bytes(Encoding.Raw, PublicFormat.Raw) for kid, key in connection.keys.items()}


def sign_engagement(descriptor: Mapping[str, Any], private_key: Ed25519PrivateKey, kid: str) -> dict[str, Any]:
    """A copy of `descriptor` with `signature: {alg: "Ed25519", kid, value}` (any old one replaced)."""
    value = private_key.sign(canonical_bytes(descriptor))
    signed = {k: v for k, v in descriptor.items() if k != SIGNATURE_FIELD}
    signed[SIGNATURE_FIELD] = {"alg": ALGORITHM, "kid": kid, "value": b64url_encode(value)}
    return signed


@dataclass(frozen=True, slots=True)
class EngagementCheck:
    """The outcome of checking one descriptor against a connection at one instant.

    `engagement` is the parsed descriptor when it parsed (even if it grants nothing); `reasons` is
    empty exactly when it is valid.
    """

    engagement: Engagement | None
    reasons: tuple[R.Reason, ...]
    #: what it was checked against: the connection, the instant (epoch microseconds) and the clock
    #: skew allowed, so that a check reused for another of them is made again (`effective_authority`)
    against: Connection | None = field(default=None, compare=False, repr=False)
    at: int | None = field(default=None, compare=False, repr=False)
    skew_seconds: int | None = field(default=None, compare=False, repr=False)
    #: the operating context the host said it is in (None: not checked)
    context: str | None = field(default=None, compare=False, repr=False)
    #: the keys `against` trusted when the check was made (`trusted_keys`): a connection's keys are
    #: a mapping its holder may change, so they are compared as they were, not as they are now
    keys: Mapping[str, bytes] | None = field(default=None, compare=False, repr=False)

    def made_for(self, connection: Connection, at: int, skew_seconds: int, context: str | None = None) -> bool:
        """Whether this check answers for `connection` at instant `at` with this skew, in `context`
        (the host's operating context, None when it names none). A connection
        equal in its fields but trusting other keys (one dropped, or a kid given a new key) is
        another connection here: its keys decide the signature."""
        against = self.against
        if self.at != at or self.skew_seconds != skew_seconds or self.context != context or against is None \
                or self.keys is None:
            return False
        return (against is connection or against == connection) and self.keys == trusted_keys(connection)

    @property
    def valid(self) -> bool:
        return not self.reasons

    @property
    def capabilities(self) -> tuple[str, ...]:
        """What the descriptor grants: its capabilities when valid, nothing otherwise."""
        return self.engagement.capabilities if self.valid and self.engagement is not None else ()

    def summary(self) -> str:
        return "; ".join(r.message for r in self.reasons) if self.reasons else "valid"


def _rejected(code: str, message: str, engagement: Engagement | None = None) -> EngagementCheck:
    return EngagementCheck(engagement, (R.Reason(code, R.ENGAGEMENT, message),))


def _malformed(exc: SchemaError) -> EngagementCheck:
    quoted = [str(p) for p in exc.problems[:_QUOTED_PROBLEMS]]
    more = len(exc.problems) - len(quoted)
    text = "; ".join(quoted) + (f"; and {more} more" if more > 0 else "")
    return _rejected(R.MALFORMED, f"malformed descriptor: {text}")


def verify_engagement(descriptor: Any, connection: Connection | Mapping[str, Any], *, now: datetime | str | None = None,
                      skew_seconds: int = DEFAULT_SKEW_SECONDS, context: str | None = None) -> EngagementCheck:
    """Check a descriptor (any JSON value, or an Engagement parsed from one) against the connection
    it claims to narrow, at `now`, in the host's operating `context` (portable-authority: a
    descriptor narrows authority for one experience and one operating context; None: the host
    names none, and the descriptor's context is reported, not checked).

    Authenticity comes first: until the signature verifies, every other field is the sender's word,
    so a descriptor that fails it is reported for that alone. After it: the connection and the
    experience must be this connection's, the context the host's when it names one, and
    `issued_at - skew <= now < expires` (the skew only
    forgives an issuer's clock running ahead; it never extends an expiry).

    Whatever the descriptor holds, the answer is an EngagementCheck; only a caller's own mistake
    raises: a `now` that is not an aware datetime, RFC 3339 text or None, a `skew_seconds` that
    is not a non-negative integer, or a `context` that is neither a string nor None (ValueError), or a `connection` that is neither a Connection nor
    a document that parses as one (SchemaError, which is a ValueError too, as `Resolver` parses it).
    """
    at = now_micros(now)
    check_skew(skew_seconds)
    check_context(context)
    if not isinstance(connection, Connection):
        connection = parse_connection(connection)
    return replace(_verified(descriptor, connection, at, skew_seconds, context), against=connection, at=at,
                   skew_seconds=skew_seconds, context=context, keys=trusted_keys(connection))


def check_context(context: object) -> str | None:
    """`context` if it is a string or None; ValueError otherwise (a caller's mistake)."""
    if context is not None and not isinstance(context, str):
        raise ValueError(f"context must be a string or None, not {context!r}")
    return context


def _verified(descriptor: Any, connection: Connection, at: int, skew_seconds: int,
              context: str | None) -> EngagementCheck:
    if isinstance(descriptor, Engagement):      # parsed already: its document is what was signed
        descriptor = descriptor.doc
    try:
        engagement = parse_engagement(descriptor)
    except SchemaError as exc:
        return _malformed(exc)
    sig = engagement.signature
    key = connection.keys.get(sig.kid)
    if key is None:
        return _rejected(R.UNKNOWN_KEY, f"signed with key {sig.kid!r}, which connection {connection.id} "
                         "does not trust", engagement)
    try:
        key.verify(sig.value, canonical_bytes(engagement.doc))
    except TypeError as exc:
        return _rejected(R.MALFORMED, f"descriptor cannot be made canonical: {exc}", engagement)
    except InvalidSignature:
        return _rejected(R.BAD_SIGNATURE, f"signature does not verify with key {sig.kid!r} "
                         "(the descriptor was altered, or signed with another key)", engagement)
    found = []
    if engagement.connection != connection.id:
        found.append(R.Reason(R.WRONG_CONNECTION, R.ENGAGEMENT, f"for connection {engagement.connection!r}, "
                              f"not {connection.id!r}"))
    if engagement.experience != connection.experience:
        found.append(R.Reason(R.WRONG_EXPERIENCE, R.ENGAGEMENT, f"from experience {engagement.experience!r}, "
                              f"but the connection is paired with {connection.experience!r}"))
    if context is not None and engagement.context != context:
        found.append(R.Reason(R.WRONG_CONTEXT, R.ENGAGEMENT, f"for operating context {engagement.context!r}, "
                              f"not this one, {context!r}"))
    if engagement.issued_at is not None and to_micros(engagement.issued_at) - skew_seconds * 1_000_000 > at:
        found.append(R.Reason(R.NOT_YET_VALID, R.ENGAGEMENT, f"not valid before "
                              f"{format_instant(engagement.issued_at)} (clock skew allowed: {skew_seconds} s)"))
    if at >= to_micros(engagement.expires):
        found.append(R.Reason(R.EXPIRED, R.ENGAGEMENT, f"expired at {format_instant(engagement.expires)}"))
    return EngagementCheck(engagement, tuple(found))
