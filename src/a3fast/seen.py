"""The rule of the caches that keep an entry from the second time it is made: the first time, only
a hash of the entry's key is noted, holding nothing. A stream of one-off tasks then leaves nothing
behind for the collector's older passes to walk, and what repeats is kept from its second sighting
(docs/performance.md, "One-off tasks let go"). Two keys of one hash only keep the second a sighting
early.

A cache keeps its notes in a `Notes`: this set of ints on the pure engine, `a3fast._ingest.Notes`
(a table of C integers, the same rule and the same set operations) where the extension is built;
`engines.ingest_module(engine).Notes` is the one for an engine."""
from __future__ import annotations

__all__ = ["seen_before", "Notes"]


def seen_before(notes: set[int], key: int, limit: int) -> bool:
    """Whether `key` (a hash) was noted in `notes`: then its note is taken back and the caller keeps
    the entry. Otherwise it is noted, `notes` emptied first once it holds `limit`."""
    if key in notes:
        notes.discard(key)
        return True
    if len(notes) >= limit:
        notes.clear()
    notes.add(key)
    return False


class Notes(set):
    """A cache's notes: the hashes of the keys it met once, under `seen_before`'s rule."""

    __slots__ = ()

    def seen_before(self, key: int, limit: int) -> bool:
        return seen_before(self, key, limit)
