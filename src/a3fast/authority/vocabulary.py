"""The portable vocabulary (portable-authority "Portable vocabulary"; A3 §2) and capability interning.

A capability is named by a §2 identifier and a major version; `game.move.submit/2` and
`game.move.submit/1` are different capabilities, as in matching (§2, "a new major version is a
different capability"). Documents refer to one as `"<id>"` (major version 1, the version of a
contract that states none) or `"<id>/<major>"`. Every capability a resolution touches is interned
to a dense integer, so that a boundary or a skill is an int used as a bitset over those integers.
"""
from __future__ import annotations

import re
from typing import Iterable

from ..bitset import bits_to_ids
from ..schema import IDENTIFIER, MAX_VERSION

__all__ = [
    "OPERATIONS", "CONFIRMATIONS", "DEFAULT_VERSION", "capability_key", "parse_capability_ref",
    "Vocabulary", "VocabularyView", "bits_to_ids",
]

#: The portable operations: what a capability means, whatever the concrete tool is called.
OPERATIONS = ("read", "reveal", "create", "modify", "delete", "execute", "transact", "communicate",
              "delegate", "administer")
#: Where a contract requires confirmation: never, always, or when the runtime policy says so.
CONFIRMATIONS = ("never", "always", "policy_driven")
#: The major version of a contract that states none, and of a reference that names none.
DEFAULT_VERSION = 1

_REF = re.compile(rf"({IDENTIFIER.pattern})(?:/(0|[1-9][0-9]*))?")
_DEFAULT_SUFFIX = f"/{DEFAULT_VERSION}"


def capability_key(identifier: str, version: int) -> str:
    """The canonical name of a capability at one major version: `<id>/<major>`."""
    return f"{identifier}/{version}"


def parse_capability_ref(text: object) -> str | None:
    """`"<id>"` or `"<id>/<major>"` -> the canonical key, or None if `text` is not a reference."""
    if not isinstance(text, str):
        return None
    m = _REF.fullmatch(text)
    if m is None:
        return None
    digits = m.group(2)
    if digits is None:
        return text + _DEFAULT_SUFFIX  # the common case, kept cheap: engagements list thousands
    # Checked by length first: int() of a hostile 5,000-digit string raises in Python >= 3.11.
    if len(digits) > len(str(MAX_VERSION)) or int(digits) > MAX_VERSION:
        return None
    return text


class Vocabulary:
    """Capability keys interned to dense ids, append-only so that bitsets built earlier stay valid."""

    __slots__ = ("_ids", "_keys")

    def __init__(self, keys: Iterable[str] = ()) -> None:
        self._ids: dict[str, int] = {}
        self._keys: list[str] = []
        for key in keys:
            self.intern(key)

    def intern(self, key: str) -> int:
        cid = self._ids.get(key)
        if cid is None:
            cid = self._ids[key] = len(self._keys)
            self._keys.append(key)
        return cid

    def get(self, key: str) -> int | None:
        return self._ids.get(key)

    def key(self, cid: int) -> str:
        return self._keys[cid]

    def bits(self, keys: Iterable[str]) -> int:
        """The bitset of `keys`, interning any not seen before."""
        out = 0
        ids, intern = self._ids, self.intern
        for key in keys:
            cid = ids.get(key)
            out |= 1 << (intern(key) if cid is None else cid)
        return out

    def keys(self, bits: int) -> list[str]:
        """The keys of a bitset, in id order."""
        return [self._keys[i] for i in bits_to_ids(bits)]

    def __contains__(self, key: object) -> bool:
        return key in self._ids

    def __len__(self) -> int:
        return len(self._keys)


class VocabularyView:
    """A vocabulary as it stood, extended for one use: the base's first `len(base)` keys keep their
    ids, and keys new to it are interned here, after them, never in the base. An authority counts
    and lists over its own view, so that what one connection brings never joins the vocabulary a
    host's later resolutions (or one made earlier and still held) count over."""

    __slots__ = ("_base", "_size", "_ids", "_keys")

    def __init__(self, base: Vocabulary) -> None:
        self._base = base
        self._size = len(base)
        self._ids: dict[str, int] = {}
        self._keys: list[str] = []

    def get(self, key: str) -> int | None:
        cid = self._base.get(key)
        if cid is not None and cid < self._size:
            return cid
        return self._ids.get(key)

    def key(self, cid: int) -> str:
        return self._base.key(cid) if cid < self._size else self._keys[cid - self._size]

    def bits(self, keys: Iterable[str]) -> int:
        """The bitset of `keys`, interning here, after the base's, any the view does not hold."""
        out = 0
        base, size, ids, added = self._base._ids, self._size, self._ids, self._keys
        for key in keys:
            cid = base.get(key)
            if cid is None or cid >= size:
                cid = ids.get(key)
                if cid is None:
                    cid = ids[key] = size + len(added)
                    added.append(key)
            out |= 1 << cid
        return out

    def keys(self, bits: int) -> list[str]:
        return [self.key(i) for i in bits_to_ids(bits)]

    def __len__(self) -> int:
        return self._size + len(self._keys)
