"""Turning a foreign name (an A2A skill id, an MCP tool name) into a §2 identifier, on request only.

A3 §2 identifiers are lowercase, dot-separated, `[a-z0-9]+(\\.[a-z0-9-]+)+`: `<domain>.<competence>`.
Names from other schemas rarely fit (`book_air_tickets`, `currency_conversion`). Normalisation is a
suggestion the caller opts into, never a silent rewrite: an importer that uses it says so in its
report, and a name that cannot be normalised is reported rather than guessed at.
"""
from __future__ import annotations

import re
import unicodedata

from ..schema import is_identifier

__all__ = ["normalise_identifier", "is_domain", "server_domain"]

#: A domain to prepend: one or more dot-separated segments, the first without hyphens (§2).
DOMAIN = re.compile(r"[a-z0-9]+(?:\.[a-z0-9-]+)*")
# camelCase and PascalCase boundaries: "bookAirTickets" reads as book-air-tickets.
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NOT_ALLOWED = re.compile(r"[^a-z0-9.]+")


def is_domain(text: object) -> bool:
    """True when `text` can be prepended to a normalised name (a §2 identifier prefix)."""
    return isinstance(text, str) and DOMAIN.fullmatch(text) is not None


def normalise_identifier(text: str, domain: str | None = None) -> str | None:
    """A §2 identifier suggested for `text`, or None when none can be made without guessing.

    Lowercases (splitting camelCase), folds accents to ASCII, turns every other run of characters
    into one hyphen, and drops empty segments. With `domain`, the result is `<domain>.<name>`;
    without one, a name that is a single segment (most skill ids) has no domain and gets None.
    """
    if domain is not None and not is_domain(domain):
        raise ValueError(f"not a domain for §2 identifiers: {domain!r}")
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    lowered = _CAMEL.sub("-", ascii_text).lower()
    segments = [seg.strip("-") for seg in _NOT_ALLOWED.sub("-", lowered).split(".")]
    segments = [seg for seg in segments if seg]
    if not segments:
        return None
    if domain is not None:
        segments = domain.split(".") + segments
    candidate = ".".join(segments)
    return candidate if is_identifier(candidate) else None


#: Words that say "this is an MCP server" and nothing about which one: dropped from server names.
_SERVER_AFFIXES = ("mcp", "server")


def server_domain(name: str) -> str | None:
    """A §2 domain for an MCP server's name, or None when none can be made.

    Real servers are named like packages (`github-mcp-server`, `mcp-server-filesystem`,
    `@modelcontextprotocol/server-everything`): the affixes that say "MCP server" are dropped
    (`github`, `filesystem`, `everything`); what remains is lowercased, and a first segment's
    hyphens become dots, since §2 allows none there (`acme-crm` -> `acme.crm`).
    """
    if is_domain(name):
        return name
    ascii_text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    base = ascii_text.rsplit("/", 1)[-1]
    words = [w for w in re.split(r"[^a-z0-9]+", _CAMEL.sub("-", base).lower()) if w]
    kept = [w for w in words if w not in _SERVER_AFFIXES] or words
    if not kept:
        return None
    candidate = ".".join(kept[:1] + (["-".join(kept[1:])] if len(kept) > 1 else []))
    return candidate if is_domain(candidate) else None
