"""A2A Agent Card signatures, checked against keys the caller trusts.

A card may carry `signatures`: each an `AgentCardSignature` `{protected, signature, header?}`, a
JWS (RFC 7515) with a detached payload. The payload is the card itself with `signatures` removed
and empty strings, arrays and objects dropped, canonicalised by RFC 8785 (JCS); this is what the
official a2a-sdk signs. Verification uses joserfc, with keys the caller supplies (a JWK, a JWKS or
a PEM public key): a key named by the card (`jku`) is never fetched, since whoever forged the card
could serve that key too.

The a2a-sdk serves a v1.0 card beside a 0.3 interface with 0.3's connection fields copied to its
top level (`agent_card_to_dict`'s compatibility fields, `COMPATIBILITY_FIELDS`), which the v1.0 card
model does not define and so the SDK's signature does not cover. A v1.0 card (one naming its
`supportedInterfaces`) that does not verify as it is is checked once more without them; a card is
then read as its verifying signature covers it (`CardSignatures.covered`: empty values dropped,
those fields too when the signature left them out), so what the signature does not cover is never
read from a verified card.

Each card gets one status, and only `verified` means verified:

- `unsigned`     the card carries no signatures;
- `verified`     at least one signature verifies with a supplied key;
- `invalid`      a supplied key was tried and no signature verifies: the card is not what was signed;
- `unverifiable` no signature could be checked (no key supplied or none for its `kid`, an
                 algorithm outside the asymmetric ones accepted, a malformed signature).
"""
from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ALGORITHMS", "COMPATIBILITY_FIELDS", "STATUSES", "CardKeyError", "CardKeys", "SignatureCheck", "CardSignatures", "canonical_card",
           "jcs", "read_keys", "verify_card"]

#: Asymmetric JWS algorithms accepted. A shared-secret (HS*) or `none` signature proves nothing to a
#: third party holding only public keys, so such a signature is unverifiable, never verified.
ALGORITHMS = ("ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "EdDSA")
STATUSES = ("unsigned", "verified", "invalid", "unverifiable")
#: The 0.3 fields the a2a-sdk adds to the top level of a v1.0 card it serves (module doc).
COMPATIBILITY_FIELDS = ("url", "protocolVersion", "preferredTransport", "additionalInterfaces",
                        "supportsAuthenticatedExtendedCard")


class CardKeyError(ValueError):
    """A key file that holds no usable public key."""


@dataclass
class CardKeys:
    """Public keys the caller trusts, by `kid` (keys without one are tried for any signature)."""

    by_kid: dict[str, Any] = field(default_factory=dict)
    unnamed: list[Any] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.by_kid or self.unnamed)

    def for_kid(self, kid: Any) -> list[Any]:
        if isinstance(kid, str) and kid in self.by_kid:
            return [self.by_kid[kid]]
        return list(self.unnamed)


def read_keys(data: bytes, source: str, keys: CardKeys | None = None) -> CardKeys:
    """Add the public keys of one file (a JWK, a JWKS `{"keys": [...]}`, or PEM) to `keys`.
    Raises CardKeyError naming the file when it holds none, or holds a private or secret key."""
    from joserfc.jwk import ECKey, JWKRegistry, OKPKey, RSAKey

    keys = keys if keys is not None else CardKeys()
    text = data.strip()
    if text.startswith(b"{"):
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise CardKeyError(f"{source}: expected a JWK or JWKS (JSON), found invalid JSON ({exc})") from None
        except RecursionError:
            raise CardKeyError(f"{source}: expected a JWK or JWKS, found JSON nested too deep to read") from None
        items = obj.get("keys") if isinstance(obj, dict) and "keys" in obj else [obj]
        if not isinstance(items, list) or not items:
            raise CardKeyError(f"{source}: expected a JWKS with keys, found none")
        for i, item in enumerate(items):
            where = f"{source}: $.keys[{i}]" if "keys" in obj else f"{source}: $"
            if not isinstance(item, dict):
                raise CardKeyError(f"{where}: expected a JWK (an object)")
            if item.get("kty") == "oct":
                raise CardKeyError(f"{where}: a shared secret (kty oct) cannot verify a published card; "
                                f"give the signer's public key")
            try:
                key = JWKRegistry.import_key(item)
            except Exception as exc:  # joserfc raises several kinds for a bad JWK
                raise CardKeyError(f"{where}: not a usable JWK ({exc})") from None
            _add(keys, key, item.get("kid"), where)
        return keys
    for kind in (ECKey, RSAKey, OKPKey):
        try:
            key = kind.import_key(data)
        except Exception:
            continue
        _add(keys, key, None, source)
        return keys
    raise CardKeyError(f"{source}: expected a public key as JWK, JWKS or PEM, found none of these")


def _add(keys: CardKeys, key: Any, kid: Any, where: str) -> None:
    if key.is_private:
        raise CardKeyError(f"{where}: a private key; give the public key (a verifier needs no secret)")
    if isinstance(kid, str) and kid:
        keys.by_kid[kid] = key
    else:
        keys.unnamed.append(key)


@dataclass(frozen=True)
class SignatureCheck:
    index: int
    status: str  # "verified", "invalid" or "unverifiable"
    reason: str
    kid: str | None = None
    alg: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"index": self.index, "status": self.status, "reason": self.reason}
        if self.kid is not None:
            out["kid"] = self.kid
        if self.alg is not None:
            out["alg"] = self.alg
        return out


@dataclass(frozen=True)
class CardSignatures:
    status: str
    checks: tuple[SignatureCheck, ...] = ()
    #: a verified card as its verifying signature covers it (without `signatures`, empty values
    #: dropped): what a reader of the card reads. None unless `verified`.
    covered: Mapping[str, Any] | None = None

    def summary(self) -> str:
        if self.status == "unsigned":
            return "unsigned"
        return f"{self.status}: " + "; ".join(f"signature {c.index}: {c.reason}" for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "signatures": [c.to_dict() for c in self.checks]}


def verify_card(card: Mapping[str, Any], keys: CardKeys) -> CardSignatures:
    """The signature status of `card` (module doc), one check per signature."""
    signatures = card.get("signatures")
    if signatures is None or signatures == []:
        return CardSignatures("unsigned")
    if not isinstance(signatures, list):
        return CardSignatures("unverifiable", (SignatureCheck(0, "unverifiable",
                                                              "signatures is not an array"),))
    try:
        bodies = signed_bodies(card)
        payloads = [jcs(body).encode("utf-8") for body in bodies]
    except ValueError as exc:
        return CardSignatures("unverifiable", tuple(
            SignatureCheck(i, "unverifiable", f"the card has no canonical form ({exc})")
            for i in range(len(signatures))))
    checks = []
    covered = None
    for i, sig in enumerate(signatures):
        for body, payload in zip(bodies, payloads):
            check = _check(i, sig, payload, keys)
            if check.status != "invalid":
                break
        checks.append(check)
        if check.status == "verified" and covered is None:
            covered = body
    statuses = {c.status for c in checks}
    status = "verified" if "verified" in statuses else "invalid" if "invalid" in statuses else "unverifiable"
    return CardSignatures(status, tuple(checks), covered)


def signed_bodies(card: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What a signature of `card` may cover, in the order tried: the card without `signatures`,
    empty values dropped; for a v1.0 card carrying the SDK's compatibility fields, the same without
    them (module doc). ValueError for a card nested too deep to canonicalise."""
    body = _drop_empty({key: value for key, value in card.items() if key != "signatures"}) or {}
    bodies = [body]
    if "supportedInterfaces" in body and any(key in body for key in COMPATIBILITY_FIELDS):
        bodies.append({key: value for key, value in body.items() if key not in COMPATIBILITY_FIELDS})
    return bodies


def _check(index: int, sig: Any, payload: bytes, keys: CardKeys) -> SignatureCheck:
    if not isinstance(sig, Mapping) or not isinstance(sig.get("protected"), str) \
            or not isinstance(sig.get("signature"), str):
        return SignatureCheck(index, "unverifiable", "not a signature {protected, signature}")
    try:
        header = json.loads(_b64url(sig["protected"]))
    except (ValueError, binascii.Error, RecursionError):
        return SignatureCheck(index, "unverifiable", "the protected header is not base64url JSON")
    if not isinstance(header, dict):
        return SignatureCheck(index, "unverifiable", "the protected header is not a JSON object")
    kid = header.get("kid") if isinstance(header.get("kid"), str) else None
    alg = header.get("alg") if isinstance(header.get("alg"), str) else None
    if alg not in ALGORITHMS:
        return SignatureCheck(index, "unverifiable", f"algorithm {alg!r} is not one accepted "
                                                     f"({', '.join(ALGORITHMS)})", kid, alg)
    if header.get("crit"):
        return SignatureCheck(index, "unverifiable", f"critical header parameters {header['crit']!r} "
                                                     f"are not understood", kid, alg)
    candidates = keys.for_kid(kid)
    if not candidates:
        why = "no key was supplied (--card-key)" if not keys else f"no supplied key has kid {kid!r}"
        return SignatureCheck(index, "unverifiable", why, kid, alg)
    # imported only with keys to check against: a signed card imports on the base install
    from joserfc import jws
    from joserfc.errors import BadSignatureError, JoseError

    token = f"{sig['protected']}..{sig['signature']}"
    for key in candidates:
        try:
            jws.deserialize_compact(token, key, algorithms=[alg], payload=payload)
        except BadSignatureError:
            continue
        except (JoseError, ValueError, TypeError) as exc:
            # Not a failed check but one that could not be made (a header the library refuses,
            # a key of the wrong type for the algorithm): never counted as verified or invalid.
            return SignatureCheck(index, "unverifiable", f"cannot be checked ({exc})", kid, alg)
        return SignatureCheck(index, "verified", f"verified with key {kid or '(no kid)'} ({alg})", kid, alg)
    return SignatureCheck(index, "invalid", f"does not verify with the supplied key"
                                            f"{'s' if len(candidates) > 1 else ''} for kid {kid!r}: "
                                            f"the card is not what was signed", kid, alg)


def _b64url(text: str) -> bytes:
    if any(c in text for c in "+/="):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def canonical_card(card: Mapping[str, Any]) -> bytes:
    """The bytes an Agent Card's signatures cover: the card without `signatures`, empty values
    dropped, in RFC 8785 form."""
    return jcs(signed_bodies(card)[0]).encode("utf-8")


MAX_DEPTH = 64


def _drop_empty(value: Any, depth: int = 1) -> Any:
    if isinstance(value, (dict, list)) and depth > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH}")
    if isinstance(value, dict):
        kept = {k: v for k, item in value.items() if (v := _drop_empty(item, depth + 1)) is not None}
        return kept or None
    if isinstance(value, list):
        kept_list = [v for item in value if (v := _drop_empty(item, depth + 1)) is not None]
        return kept_list or None
    if value == "":
        return None
    return value


def jcs(value: Any) -> str:
    """RFC 8785 JSON Canonicalization: keys sorted by UTF-16 code units, no whitespace, numbers
    in ECMAScript form, strings with JSON's minimal escapes."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        items = sorted(value.items(), key=lambda kv: kv[0].encode("utf-16-be"))
        return "{" + ",".join(f"{jcs(k)}:{jcs(v)}" for k, v in items) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(jcs(item) for item in value) + "]"
    raise ValueError(f"not a JSON value: {type(value).__name__}")


def _number(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError("a non-finite number")
    if value == 0:
        return "0"
    text = repr(value)  # the shortest round-tripping digits, as ECMAScript chooses them
    if "e" in text and 1e-6 <= abs(value) < 1e21:  # ECMAScript writes these without an exponent,
        from decimal import Decimal                 # padding the digits with zeros: 1.2e+20 is 120000000000000000000

        return format(Decimal(text), "f")
    if value.is_integer() and abs(value) < 1e21:
        return text.removesuffix(".0")
    if "e" in text:
        mantissa, exponent = text.split("e")
        sign = "-" if exponent.startswith("-") else "+"
        return f"{mantissa.removesuffix('.0')}e{sign}{exponent.lstrip('+-').lstrip('0') or '0'}"
    return text
