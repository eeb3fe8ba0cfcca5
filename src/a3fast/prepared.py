"""Requirements documents from their JSON text, parsed at most twice per distinct text while they repeat.

A place request's `requirements` member arrives as bytes (a stdio line, an HTTP body). Services
place the same task types again and again, so the member's exact text is looked up in a bounded
cache of prepared `Requirements` (kept from a text's second sighting on, `PreparedRequirements`):
a repeated task is placed as the same prepared object (the fleet
keeps its row resolution per prepared object) without building a dict of it or checking it again.
Two spellings of one document (another key order, other whitespace) are two entries; each parses
to equal requirements.

The text given must already be held to the service's bounds and the document rule (the caller
checks the whole request: `operations.decode_place_request`); errors are never kept, so a bad
document is refused with the same problems every time.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

import msgspec

from .engines import ENGINE, ingest_module
from .schema import Requirements, parse_requirements, requirements_reader

__all__ = ["PreparedRequirements", "MAX_ENTRIES", "MAX_TEXT_BYTES", "MAX_SEEN"]

#: Distinct requirements texts kept, at most (least recently used first out).
MAX_ENTRIES = 4096
#: Texts seen once and not (yet) kept, remembered by their hash, at most (then forgotten at once):
#: 256 KiB of C integers at most (a3fast._ingest.Notes; the pure engine's set of ints about 1 MiB).
MAX_SEEN = 16384
#: A longer text is parsed every time and not kept, so the cache holds at most
#: MAX_ENTRIES × MAX_TEXT_BYTES bytes of keys (16 MiB), and their parsed documents beside them.
MAX_TEXT_BYTES = 4096

_decode = msgspec.json.Decoder().decode
#: the default engine's reader of a plain dict (what `parse_requirements` tries first), called
#: here without that function's frame around it
_read = requirements_reader()


class PreparedRequirements:
    """A least-recently-used map from a requirements document's JSON text to its `Requirements`.

    A text is kept from its second sighting on: the first is parsed and only its hash remembered.
    A task met once (most of a workload of distinct tasks) then leaves nothing behind, where
    keeping it cost more than it could save — its objects outlived a young collection and were
    walked again by the collector's older passes until evicted — while a task type that repeats is
    parsed twice and then never again."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_text_bytes: int = MAX_TEXT_BYTES,
                 max_seen: int = MAX_SEEN):
        self.max_entries = max_entries
        self.max_text_bytes = max_text_bytes
        self.max_seen = max_seen
        self._seen = ingest_module(ENGINE).Notes()     # a3fast.seen's rule, compiled where built
        self._entries: OrderedDict[bytes | str, Requirements] = OrderedDict()
        # HTTP may parse on worker threads beside the loop: an insertion and its eviction go
        # together. A compiled note holds the GIL throughout; two notes of the pure engine's may
        # interleave, which at worst keeps a text a sighting early or late, never a wrong answer
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, text: bytes) -> Requirements:
        """The prepared requirements of a JSON object's text; SchemaError as `parse_requirements`
        raises it for the decoded document (msgspec's DecodeError for text that is not JSON)."""
        found = self._entries.get(text)
        if found is not None:
            return self._used(text, found)
        doc = _decode(text)
        parsed = _read(doc, True) if type(doc) is dict else None
        if parsed is None:           # the careful reader: the same Requirements, or the problems named
            parsed = parse_requirements(doc, decoded=True)
        # `_seen_or_kept`, its test written out: a text met once (most are) is only noted
        if len(text) <= self.max_text_bytes and self._seen.seen_before(hash(text), self.max_seen):
            self._keep(text, parsed)
        return parsed

    def lookup(self, text: bytes | str, parse: Callable[[], Requirements]) -> Requirements:
        """The requirements kept for `text`, or `parse()` of it, kept when it succeeds (whatever
        it raises is raised, and nothing is kept). `parse` must depend on the text alone."""
        found = self._entries.get(text)
        if found is not None:
            return self._used(text, found)
        parsed = parse()
        self._seen_or_kept(text, parsed)
        return parsed

    def _used(self, text: bytes | str, found: Requirements) -> Requirements:
        try:
            self._entries.move_to_end(text)
        except KeyError:              # evicted by another thread meanwhile: still the right answer
            pass
        return found

    def _seen_or_kept(self, text: bytes | str, parsed: Requirements) -> None:
        if len(text) <= self.max_text_bytes and self._seen.seen_before(hash(text), self.max_seen):
            self._keep(text, parsed)   # else too long, or the first sighting: remembered only

    def _keep(self, text: bytes | str, parsed: Requirements) -> None:
        """Keep a text seen before (or whose hash a seen text shares)."""
        entries = self._entries
        with self._lock:
            entries[text] = parsed
            if len(entries) > self.max_entries:
                entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._seen.clear()
