"""What kind of file an input is, among the kinds a3fast writes, told by parsing its first documents.

A command given the wrong file says so in one line ("t.jsonl looks like a trace (spec records),
not declarations") instead of reporting every document as a broken one of the kind it expected.
`sniff` reads the start of the input only (at most `SNIFF_BYTES`, and the first `SNIFF_DOCUMENTS`
documents in it), parses each document it found whole, and names the kind from their members:

- a binary fleet snapshot or service journal, by its magic bytes (`a3fast.snapshot`,
  `a3fast.durable.journal`);
- a trace: objects with `content` and `seq` or `kind` (docs/design.md, reading 7) — compact when
  one of the records read carries the compact member (docs/compact-format.md), spec when a
  placement among them does not;
- declarations: objects with an `agent` object and `v`, or with §3 members only;
- requirements: objects whose members are all §4 requirements members, their lists of names
  lists of strings;
- conformance vectors: an array of cases with `trace` and `expected` (verifier vectors), or
  `fleet` and `expected` (matching vectors);
- empty: no document at all (no non-blank byte, or `[]`).

Anything else is UNKNOWN: a file of no kind a3fast writes (an A2A card, a manifest) or one too
broken to tell, which the command's own reader then reports problem by problem. A kind is never
taken from a glance at the bytes: a document that does not parse tells nothing.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Iterable

import orjson

from .framing import JSON_SPACE, Pushback, Source, blank, is_bytes

__all__ = ["Kind", "DECLARATIONS", "REQUIREMENTS", "TRACE", "SPEC_TRACE", "COMPACT_TRACE", "SNAPSHOT",
           "JOURNAL", "VECTORS", "MATCHING_VECTORS", "EMPTY", "UNKNOWN", "sniff", "wrong_kind",
           "SNIFF_BYTES", "SNIFF_DOCUMENTS"]

#: How much of the input is read to tell its kind, at most.
SNIFF_BYTES = 1 << 20
#: How many of its first documents are parsed to tell its kind, at most.
SNIFF_DOCUMENTS = 4

# What marks a3fast's files, spelled here so that telling a file's kind loads neither the codec
# (and numpy) nor the journal (and asyncio): a test holds each equal to its owner's.
#: a3fast.snapshot.MAGIC
_SNAPSHOT_MAGIC = b"\x89A3FLEET"
#: a3fast.durable.journal.MAGIC
_JOURNAL_MAGIC = b"A3J1"
#: a3fast.record.compact.KEY: the member a compact placement record carries
_COMPACT_KEY = "a3fast.compact"
_PLACEMENT_KINDS = ("task.bound", "task.rejected")

_DECLARATION_MEMBERS = frozenset({"v", "agent", "capabilities", "clearances", "residency", "tools", "model"})
_REQUIREMENTS_MEMBERS = frozenset({"v", "capabilities", "clearances", "tools", "residency", "model", "session",
                                   "agentRef", "kind", "exclude"})


@dataclass(frozen=True)
class Kind:
    """A kind of file: `name` is what a command expects (`trace`), `text` how a file of it is
    described ("a trace (spec records)")."""

    name: str
    text: str

    def __str__(self) -> str:
        return self.text


DECLARATIONS = Kind("declarations", "declarations")
REQUIREMENTS = Kind("requirements", "requirements")
TRACE = Kind("trace", "a trace")
SPEC_TRACE = Kind("trace", "a trace (spec records)")
COMPACT_TRACE = Kind("trace", "a trace (compact records)")
SNAPSHOT = Kind("snapshot", "a fleet snapshot")
JOURNAL = Kind("journal", "a service journal")
VECTORS = Kind("vectors", "conformance vectors")
MATCHING_VECTORS = Kind("matching vectors", "matching vectors")
EMPTY = Kind("empty", "empty")
UNKNOWN = Kind("unknown", "of no kind a3fast writes")

#: How a command names what it expected, by kind name.
EXPECTED = {"declarations": "declarations", "requirements": "requirements", "trace": "a trace",
            "snapshot": "a fleet snapshot", "journal": "a service journal", "vectors": "conformance vectors",
            "matching vectors": "matching vectors"}


def sniff(source: Source) -> Kind:
    """The kind of `source` (a path, bytes, or a `framing.Pushback` stream, which gets back what
    was read); OSError when a path cannot be read. See the module's docstring."""
    head, complete = _head(source)
    if head.startswith(_SNAPSHOT_MAGIC):
        return SNAPSHOT
    if head.startswith(_JOURNAL_MAGIC):
        return JOURNAL
    text = head.strip(JSON_SPACE)
    if not text:
        return EMPTY if complete else UNKNOWN
    documents = _first_documents(text, complete)
    if documents is None:
        return UNKNOWN
    if not documents:
        return EMPTY
    return _kind_of(documents)


def wrong_kind(kind: Kind, expected: Iterable[str], name: str, *, allow_empty: bool = True) -> str | None:
    """The one line telling that the file `name` of kind `kind` is not of the `expected` kind names
    (the first is what is named as expected), or None when it may be read: it is of an expected
    kind, of no kind a3fast writes (its reader says what is wrong), or empty and `allow_empty`."""
    wanted = list(expected)
    noun = EXPECTED.get(wanted[0], wanted[0])
    if kind is EMPTY:
        return None if allow_empty else f"{name} is empty: expected {noun}"
    if kind is UNKNOWN or kind.name in wanted:
        return None
    return f"{name} looks like {kind.text}, not {noun}"


def _head(source: Source) -> tuple[bytes, bool]:
    """(the first SNIFF_BYTES of the input, whether that is all of it)."""
    if is_bytes(source):
        data = bytes(source[:SNIFF_BYTES + 1])  # type: ignore[index, arg-type]  # bytes, bytearray or memoryview
        return data[:SNIFF_BYTES], len(data) <= SNIFF_BYTES
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as fh:
            data = fh.read(SNIFF_BYTES + 1)
        return data[:SNIFF_BYTES], len(data) <= SNIFF_BYTES
    if isinstance(source, Pushback):
        data = b""
        while len(data) <= SNIFF_BYTES:
            block = source.read(SNIFF_BYTES + 1 - len(data))
            if not block:
                break
            data += block
            if data.count(b"\n") > SNIFF_DOCUMENTS and not data.lstrip(JSON_SPACE).startswith(b"["):
                break  # enough whole lines; a pipe is not waited on for more than it needs
        complete = len(data) <= SNIFF_BYTES and not _more(source)
        source.unread(data)
        return data[:SNIFF_BYTES], complete
    return b"", False  # a stream that cannot be given its bytes back is not looked at


def _more(source: Pushback) -> bool:
    block = source.read(1)
    source.unread(block)
    return bool(block)


def _first_documents(text: bytes, complete: bool) -> list[Any] | None:
    """The first documents of the input (at most SNIFF_DOCUMENTS), parsed; None when the first
    cannot be parsed."""
    if complete:
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
        else:
            if isinstance(value, list):
                return value[:SNIFF_DOCUMENTS]
            return [value]
    if text[:1] == b"[":
        return _parsed(_array_elements(text))
    lines = text.split(b"\n")
    if not complete:
        lines.pop()  # the last line may be cut short
    return _parsed(line for line in lines if not blank(line))


def _parsed(pieces: Iterable[bytes]) -> list[Any] | None:
    documents: list[Any] = []
    for piece in pieces:
        try:
            documents.append(orjson.loads(piece))
        except orjson.JSONDecodeError:
            break
        if len(documents) == SNIFF_DOCUMENTS:
            break
    return documents or None


_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{},]', re.S)


def _array_elements(text: bytes) -> Iterable[bytes]:
    """The bytes of the first whole elements of an array whose end may not be in `text`."""
    depth, start = 0, None
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth == 1:
                start = match.end()
        elif token in (b"]", b"}"):
            depth -= 1
            if depth == 0:
                if start is not None and text[start:match.start()].strip(JSON_SPACE):
                    yield text[start:match.start()]
                return
        elif token == b"," and depth == 1 and start is not None:
            yield text[start:match.start()]
            start = match.end()


def _kind_of(documents: list[Any]) -> Kind:
    first = documents[0]
    if not isinstance(first, dict):
        return UNKNOWN
    if "content" in first and ("seq" in first or "kind" in first):
        records = [d for d in documents if isinstance(d, dict) and isinstance(d.get("content"), dict)]
        if any(_COMPACT_KEY in d["content"] for d in records):
            return COMPACT_TRACE
        if any(d.get("kind") in _PLACEMENT_KINDS for d in records):
            return SPEC_TRACE
        return TRACE  # no placement among the records read: its form is not known yet
    if "expected" in first and "trace" in first:
        return VECTORS
    if "expected" in first and "fleet" in first:
        return MATCHING_VECTORS
    if isinstance(first.get("agent"), dict) and ("v" in first or first.keys() <= _DECLARATION_MEMBERS):
        return DECLARATIONS
    if first and first.keys() <= _REQUIREMENTS_MEMBERS and _listed_as_requirements(first):
        return REQUIREMENTS
    return UNKNOWN


def _listed_as_requirements(document: dict[str, Any]) -> bool:
    """Whether the lists of a document whose members are all requirements members hold what §4's
    lists hold: capabilities as objects or `name/version` strings, names as strings (an MCP tool
    listing `{"tools": [{...}]}` has the member's name and not its shape). `{"tools": []}` alone is
    both an empty listing (a server with no tools, a last page) and requirements that ask for
    nothing: it is not told apart, so each reader reads it as its own."""
    if document == {"tools": []}:
        return False
    for member in ("clearances", "tools", "exclude"):
        value = document.get(member)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return False
    # a declaration's residency is a list of labels, a task's one label: a declaration that lacks
    # its `agent` (the likeliest slip) is read by the declarations' reader, which names what is missing
    residency = document.get("residency")
    if residency is not None and not isinstance(residency, str):
        return False
    capabilities = document.get("capabilities")
    return capabilities is None or isinstance(capabilities, list)
