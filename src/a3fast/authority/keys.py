"""Ed25519 public keys and base64url text: the trust anchors engagement signatures are checked with.

A key is written either as the unpadded base64url of its 32 raw bytes (RFC 8037's `x`) or as a
PEM SubjectPublicKeyInfo block. Anything else is refused with a reason, never an exception, and so
is a point of small order (one of the eight whose multiple by 8 is the identity): no private key
makes one, and a signature checks against it for a share of all messages without any (the
identity verifies every message), so trusting it would let anyone sign.
"""
from __future__ import annotations

import base64
import binascii
import re

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = ["ALGORITHM", "b64url_encode", "b64url_decode", "load_public_key", "public_key_text",
           "generate_private_key"]

#: The one signature algorithm a3fast accepts (RFC 8032 Ed25519; JOSE name "EdDSA").
ALGORITHM = "Ed25519"
_B64URL = re.compile(r"[A-Za-z0-9_-]*")
_RAW_KEY_BYTES = 32


def b64url_encode(data: bytes) -> str:
    """Unpadded base64url (RFC 4648 §5, as JOSE writes it)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: object) -> bytes | None:
    """Unpadded base64url -> bytes; None for anything else (padding, other alphabets, stray bits)."""
    if not isinstance(text, str) or len(text) % 4 == 1 or not _B64URL.fullmatch(text):
        return None
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    # Only the canonical encoding: two texts must not name the same bytes.
    return data if b64url_encode(data) == text else None


def load_public_key(text: str | bytes) -> Ed25519PublicKey:
    """An Ed25519 public key from base64url raw bytes or PEM; ValueError says what is wrong
    (TypeError for a value that is neither text nor bytes)."""
    if not isinstance(text, (str, bytes)):
        raise TypeError(f"a public key: expected base64url or PEM text (str or bytes), found {type(text).__name__}")
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            raise ValueError("a key file holds ASCII text (base64url or PEM)") from None
    text = text.strip()
    if text.startswith("-----BEGIN"):
        if "PRIVATE KEY-----" in text.partition("\n")[0]:
            raise ValueError("a public key, not a private key (give its public half; keep the private one "
                             "secret)")
        # one block and nothing after it: the PEM reader takes the first block and ignores the
        # rest, so a second key (or anything) there would read as trusted while it is not
        if text.count("-----BEGIN") != 1 or not text.endswith("-----"):
            raise ValueError("one PEM public key block and nothing after it")
        try:
            key = serialization.load_pem_public_key(text.encode("ascii"))
        except (ValueError, TypeError, UnsupportedAlgorithm, UnicodeEncodeError):
            raise ValueError("a PEM public key block that parses (this one does not)") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError(f"an Ed25519 key, not {type(key).__name__.lstrip('_')}")
        raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    else:
        decoded = b64url_decode(text)
        if decoded is None or len(decoded) != _RAW_KEY_BYTES:
            raise ValueError("32 raw key bytes as unpadded base64url, or a PEM public key")
        raw = decoded
        try:
            key = Ed25519PublicKey.from_public_bytes(raw)
        except ValueError:
            raise ValueError("32 bytes that encode an Ed25519 public key") from None
    if _decoded(raw) is None:       # OpenSSL reads such bytes leniently, as a point of small order too
        raise ValueError("32 bytes that encode an Ed25519 point as RFC 8032 writes one (y below p, no sign "
                         "bit for x = 0)")
    if small_order(raw):
        raise ValueError("an Ed25519 public key a private key has, not a point of small order (signatures "
                         "for it can be forged without any key)")
    return key


# Ed25519's curve, -x² + y² = 1 + d·x²·y² over the integers modulo P (RFC 8032 §5.1)
_P = 2**255 - 19
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_MINUS_ONE = pow(2, (_P - 1) // 4, _P)


def _decoded(raw: bytes) -> tuple[int, int] | None:
    """The point 32 bytes encode (RFC 8032 §5.1.3), or None for bytes that encode none."""
    y = int.from_bytes(raw, "little") & ((1 << 255) - 1)
    sign = raw[31] >> 7
    if y >= _P:
        return None
    u, v = (y * y - 1) % _P, (_D * y * y + 1) % _P
    x = u * pow(v, 3, _P) * pow(u * pow(v, 7, _P), (_P - 5) // 8, _P) % _P
    if v * x * x % _P == (-u) % _P:
        x = x * _SQRT_MINUS_ONE % _P
    elif v * x * x % _P != u:
        return None
    if x == 0 and sign:
        return None
    return (_P - x if x & 1 != sign else x), y


def _doubled(point: tuple[int, int]) -> tuple[int, int]:
    x, y = point
    t = _D * x * x * y * y % _P
    return (2 * x * y * pow(1 + t, _P - 2, _P) % _P, (y * y + x * x) * pow(1 - t, _P - 2, _P) % _P)


def small_order(raw: bytes) -> bool:
    """Whether 32 bytes encode a point of small order: eight times it is the identity (0, 1)."""
    point = _decoded(raw)
    if point is None:
        return False
    for _ in range(3):
        point = _doubled(point)
    return point == (0, 1)


def public_key_text(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """The base64url raw form of a public key (of a private key's public half)."""
    if isinstance(key, Ed25519PrivateKey):
        key = key.public_key()
    return b64url_encode(key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def generate_private_key() -> Ed25519PrivateKey:
    """A fresh Ed25519 signing key (for experiences that sign engagement descriptors)."""
    return Ed25519PrivateKey.generate()
