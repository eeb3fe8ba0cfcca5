"""Slices of the service's trace that can be read on their own.

A compact placement record names its agents through a fleet snapshot (docs/compact-format.md):
written once, inside the first record that needs it, and referenced by seq afterwards. A slice that
starts after that record — `GET /v1/trace?since=N`, or the records of one `?record=compact` answer —
would reference a table it does not hold. Here the first record of the slice that needs an earlier
snapshot carries it again, in full (`{"names": [...], "live": ...}` in place of the reference), and
the slice's later references to that snapshot point at this record instead. Decoded, every record
is exactly the spec record it was; only the compact form of those records differs from the file's.

The table is read back from the trace file: the record at the snapshot's seq, then its bases
(chains are bounded: the encoder writes a whole table again after a fixed number of based ones).
"""
from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import msgspec
import orjson

from ..record.compact import KEY
from .trace_reader import SEQ_AT, offset_after

__all__ = ["Slice", "self_contained", "TableSource", "readable_answer", "readable_since"]

# a task.bound line as TraceWriter writes it, its content's first member the compact one, and its
# snapshot: a reference, a based snapshot or a whole table
_BOUND = re.compile(rb'\{"seq":(\d+),"kind":"task\.bound","content":\{"a3fast\.compact":\{"format":\d+,"fleet":'
                    rb'(?:(\d+)|\{"base":(\d+)|(\{"names"))')
_REJECTED = re.compile(rb'\{"seq":(\d+),"kind":"task\.rejected",')
#: what every line holding a compact member holds (and a few others: a task naming it)
_MARK = b'"a3fast.compact"'
#: a compact member's reference to its snapshot, read where the mark was found

_REFERENCE = re.compile(rb'"a3fast\.compact":\{"format":\d+,"fleet":(\d+)[,}]')


class _Member(msgspec.Struct):
    fleet: Any = None


class _TypedRejected(msgspec.Struct):
    content: "_TypedContent"


class _TypedContent(msgspec.Struct, rename={"member": KEY}):
    member: _Member | None = None


#: a task.rejected line's compact member's `fleet`, the rest of the line skipped unbuilt (the
#: record's own members only: one named like it inside the requirements is not this one)
_read_rejected = msgspec.json.Decoder(_TypedRejected).decode


class TableSource:
    """Snapshots of a trace file up to byte `end`: seq -> (names, live as base64)."""

    def __init__(self, path: Path, end: int, current: tuple[int, list[str], str] | None = None):
        self.path = path
        self.end = end
        self.current = current        # the encoder's current snapshot, known without reading

    def _content(self, fh, seq: int) -> dict:
        fh.seek(offset_after(fh, seq - 1, self.end))
        line = fh.readline()
        record = orjson.loads(line)
        if record.get("seq") != seq:
            raise KeyError(f"no record {seq} in the trace")
        return record["content"]

    def live(self, seq: int) -> str | None:
        """Snapshot `seq`'s live set (base64), when it is known without reading the trace (the
        encoder's current snapshot); None otherwise."""
        current = self.current
        return current[2] if current is not None and current[0] == seq else None

    def table(self, seq: int) -> tuple[list[str], str]:
        if self.current is not None and self.current[0] == seq:
            return self.current[1], self.current[2]
        added: list[list[str]] = []
        live = None
        with open(self.path, "rb") as fh:
            at = seq
            while True:
                fleet = self._content(fh, at)[KEY]["fleet"]
                if live is None:
                    live = fleet["live"]
                if "names" in fleet:
                    names = list(fleet["names"])
                    break
                added.append(fleet["names_added"])
                at = fleet["base"]
        for more in reversed(added):
            names.extend(more)
        return names, live


#: (trace path, snapshot seq, live) -> the snapshot as the JSON a slice carries inline. A snapshot
#: of a trace never changes once written; consecutive compact answers mostly need the same one, so
#: its 1,000s of names are written as JSON once rather than once per answer.
_TABLE_JSON: dict[tuple[str, int, str], bytes] = {}
_TABLE_JSON_KEPT = 4


def _table_json(source: TableSource, seq: int) -> bytes:
    # the current snapshot's text is found by its live set alone: its 1,000s of names are not
    # copied out of the encoder for an answer that splices the text already made
    live = source.live(seq)
    if live is not None:
        text = _TABLE_JSON.get((str(source.path), seq, live))
        if text is not None:
            return text
    names, live = source.table(seq)
    key = (str(source.path), seq, live)
    text = _TABLE_JSON.get(key)
    if text is None:
        if len(_TABLE_JSON) >= _TABLE_JSON_KEPT:
            _TABLE_JSON.pop(next(iter(_TABLE_JSON)))
        text = _TABLE_JSON[key] = orjson.dumps({"names": names, "live": live})
    return text


class Slice:
    """Records of the trace given to one reader, in order, that decode and verify without the rest
    of the trace: the first record of the slice that refers to a snapshot the slice does not carry
    carries it instead, in full, and the slice's later references to that snapshot name that record.

    One Slice per reader: a `GET /v1/trace?since=N` answer, one compact place answer, or every
    `compact-stream` answer of one stdio stream or of one HTTP response (a batch's: the reader reads
    them in order, so a snapshot goes down once).

    A task.bound record's compact member comes first in its content, where the encoder writes it,
    so it is found and rewritten in the line's bytes. A task.rejected record's follows the task's
    requirements, which may hold a member of the same name: it is decoded to find the true one."""

    def __init__(self, carried: dict[int, int] | None = None) -> None:
        #: snapshot seq -> seq of the record of this slice that carries it; given, what the slice's
        #: reader holds already (a table it was sent before: `Operations.holding`)
        self.carried: dict[int, int] = dict(carried) if carried else {}
        #: (snapshot seq, record seq) of the last table a record of this slice carried, or None
        self.last_table: tuple[int, int] | None = None

    def lines(self, lines: Iterable[bytes], source: TableSource) -> Iterator[bytes]:
        """The trace lines (each ending in a newline), made part of this slice."""
        for line in lines:
            yield self._line(line, source) if _MARK in line else line

    def block(self, data: bytes, source: TableSource | Callable[[], TableSource],
              found: int | None = None) -> bytes:
        """Consecutive trace lines in one block, made part of this slice: only the lines that
        hold a compact member are looked at, and the block is returned as it is when none of
        them changes (the usual case in a stream once its snapshot went down). `source` may be
        given as a function that makes it, called only when a line needs a snapshot; `found`,
        where the first compact member's name is in `data`, when the caller has looked already."""
        parts: list[bytes] = []
        done = 0
        if found is None:
            found = data.find(_MARK)
        while found >= 0:
            start = data.rfind(b"\n", 0, found) + 1
            end = data.find(b"\n", found) + 1 or len(data)
            if self._carried_as_is(data, start, end, found):
                found = data.find(_MARK, end)
                continue
            line = data[start:end]
            if not isinstance(source, TableSource):
                source = source()
            rewritten = self._line(line, source)
            if rewritten is not line:
                parts += (data[done:start], rewritten)
                done = end
            found = data.find(_MARK, end)
        if not parts:
            return data
        parts.append(data[done:])
        return b"".join(parts)

    def _carried_as_is(self, data: bytes, start: int, end: int, first: int) -> bool:
        """Whether the line at data[start:end], whose first compact member's name is at `first`,
        refers by seq to a snapshot the slice carries under that seq (nothing to rewrite), found
        without copying or re-encoding the line."""
        bound = _BOUND.match(data, start, end)
        if bound is not None:
            referenced = bound.group(2)
            return referenced is not None and self.carried.get(int(referenced)) == int(referenced)
        if _REJECTED.match(data, start, end) is None:
            return False
        if data.find(_MARK, first + len(_MARK), end) < 0:
            # the only member of that name: the record's own (a task's requirements holding one
            # too would make two), or one inside requirements of a record without its own, which
            # no slice rewrites either way. Read in place: decoding a long line costs microseconds.
            reference = _REFERENCE.match(data, first, end)
            if reference is not None:
                referenced = int(reference.group(1))
                return self.carried.get(referenced) == referenced
        try:
            member = _read_rejected(memoryview(data)[start:end]).content.member
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return False
        fleet = member.fleet if member is not None else None
        return type(fleet) is int and self.carried.get(fleet) == fleet

    def _line(self, line: bytes, source: TableSource) -> bytes:
        if (bound := _BOUND.match(line)) is not None:
            return self._bound(line, bound, source)
        if (rejected := _REJECTED.match(line)) is not None:
            return self._rejected(line, int(rejected.group(1)), source)
        return line

    def _rejected(self, line: bytes, seq: int, source: TableSource) -> bytes:
        """A task.rejected line, its snapshot reference rewritten in place when the line holds one
        compact member's name only, and that is the record's own member, referring to a snapshot
        by seq (the usual rejection): the bytes `_decoded` gives for a line as a3fast writes it
        (orjson's bytes, a newline at the end), without decoding the line and encoding it again (a
        rejection's line is 5 KB, the table 20 KB). Any other line is `_decoded`'s to rewrite."""
        first = line.find(_MARK)
        reference = (_REFERENCE.match(line, first) if first >= 0 and line.endswith(b"\n")
                     and line.find(_MARK, first + len(_MARK)) < 0 else None)
        if reference is None:
            return self._decoded(line, seq, source)
        referenced = int(reference.group(1))
        try:
            member = _read_rejected(line).content.member
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return self._decoded(line, seq, source)
        if member is None or type(member.fleet) is not int or member.fleet != referenced:
            # the one name found is not the record's own member (it has none: the name is inside
            # the task's requirements; or its own is spelled with an escape)
            return self._decoded(line, seq, source)
        at = self.carried.get(referenced)
        try:
            if at != referenced:
                line = _pointed(line, reference.start(1), reference.end(1), at, referenced, source)
        except (KeyError, TypeError, ValueError, OSError):
            return line
        self._carries(seq, referenced, False, at)
        return line

    def _bound(self, line: bytes, found: re.Match, source: TableSource) -> bytes:
        seq = int(found.group(1))
        if found.group(4) is not None:          # a whole table: the slice carries it from here on
            self.carried[seq] = seq
            self.last_table = (seq, seq)
            return line
        based = found.group(2) is None
        group = 3 if based else 2
        referenced = int(found.group(group))
        at = self.carried.get(referenced)
        try:
            if at is None and based:
                return self._decoded(line, seq, source)
            if at != referenced:
                line = _pointed(line, found.start(group), found.end(group), at, referenced, source)
        except (KeyError, TypeError, ValueError, OSError):
            return line       # a table that cannot be read back: a reader names the snapshot it lacks
        self._carries(seq, referenced, based, at)
        return line

    def _decoded(self, line: bytes, seq: int, source: TableSource) -> bytes:
        try:
            record = orjson.loads(line)
            member = record["content"][KEY]
            fleet = member["fleet"]
            if isinstance(fleet, dict) and "names" in fleet:
                self.carried[seq] = seq
                self.last_table = (seq, seq)
                return line
        except (KeyError, TypeError, ValueError):
            return line
        based = isinstance(fleet, dict)
        referenced = fleet["base"] if based else fleet
        at = self.carried.get(referenced)
        try:
            if at == referenced:
                self._carries(seq, referenced, based, at)
                return line
            if at is not None and based:
                fleet["base"] = at
            elif at is not None:
                member["fleet"] = at
            elif based:
                names, _ = source.table(referenced)
                member["fleet"] = {"names": names + list(fleet["names_added"]), "live": fleet["live"]}
            else:
                names, live = source.table(referenced)
                member["fleet"] = {"names": names, "live": live}
        except (KeyError, TypeError, ValueError, OSError):
            return line
        self._carries(seq, referenced, based, at)
        return orjson.dumps(record) + b"\n"

    def _carries(self, seq: int, referenced: int, based: bool, at: int | None) -> None:
        """Record `seq` of the slice refers to snapshot `referenced` (a reference, or the base of
        a based snapshot), which the slice carried at `at` or, if None, now carries in `seq`."""
        if at is None and not based:
            self.carried[referenced] = seq
        if based or at is None:
            self.carried[seq] = seq
            # a based table is registered as itself; a reference's, as the snapshot it names
            self.last_table = (seq, seq) if based else (referenced, seq)


def _pointed(line: bytes, start: int, end: int, at: int | None, referenced: int, source: TableSource) -> bytes:
    """`line` with the snapshot reference at line[start:end] (to `referenced`) pointing where the
    slice carries that snapshot: the seq of the record `at` that carries it, or, when none does yet,
    the snapshot's table itself (its JSON made once per snapshot), spliced in one copy."""
    spliced = b"%d" % at if at is not None else _table_json(source, referenced)
    whole = memoryview(line)
    return b"".join((whole[:start], spliced, whole[end:]))


def self_contained(lines: Iterable[bytes], source: TableSource) -> Iterator[bytes]:
    """The trace lines (each ending in a newline) of a slice that stands alone."""
    return Slice().lines(lines, source)


def split_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Whole lines (newline included) out of chunks of a JSON Lines file."""
    rest = b""
    for chunk in chunks:
        data = rest + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            rest = data
            continue
        rest = data[cut + 1:]
        yield from data[:cut + 1].splitlines(keepends=True)
    if rest:
        yield rest


def readable_since(state, since: int, end: int) -> Iterator[bytes]:
    """The trace after seq `since` up to byte `end`, readable on its own (read_since's chunks as
    they are when the slice is the whole trace)."""
    from .trace_reader import read_since

    chunks = read_since(state.trace_path, since, end)
    if since <= 0:
        return chunks
    return self_contained(split_lines(chunks), table_source(state, end))


def table_source(state, end: int | None = None) -> TableSource:
    """The snapshots of the service's trace, up to byte `end` (default: all that may be read)."""
    if end is None:
        return _ServiceTables(state)
    return TableSource(state.trace_path, end, state.encoder.current_snapshot())


class _ServiceTables(TableSource):
    """The snapshots of the service's trace as far as it may be read, looked up when a slice first
    needs one (most answers of a stream need none)."""

    def __init__(self, state) -> None:  # noqa: super().__init__ would compute what is deferred here
        self.path = state.trace_path
        self._state = state

    @cached_property
    def end(self) -> int:  # type: ignore[override]
        return self._state.trace_size

    @cached_property
    def current(self) -> tuple[int, list[str], str] | None:  # type: ignore[override]
        return self._state.encoder.current_snapshot()

    def live(self, seq: int) -> str | None:
        head = self._state.encoder.current_live()
        return head[1] if head is not None and head[0] == seq else None


def readable_answer(state, lines: bytes, slice_: Slice | None = None, reference: int | None = None) -> bytes:
    """The trace lines of one answer, readable on their own — or, given the `slice_` of a stream
    of answers, readable with the answers before them. The service's snapshots are looked up only
    for a line that needs one (in a stream, once its snapshot went down, none does). `reference`:
    the snapshot the lines' own compact members refer to by seq, when the encoder wrote them so
    (`Encoder.plain_reference`), else None."""
    found = lines.find(_MARK)
    if found < 0:
        return lines
    if reference is not None:
        # the slice's own rewrite of the one reference, made without reading the lines for what the
        # encoder already said: to the record that carries the snapshot (a reader holding it by
        # its fleet token), or the table itself where none does
        at = slice_.carried.get(reference) if slice_ is not None else None
        if at == reference:
            return lines
        pointed = _one_reference_pointed(state, lines, found, reference, at)
        if pointed is not None:
            if slice_ is None or at is not None:     # a pointer to a record carried: nothing to note
                return pointed
            # what `Slice.block` would have noted of that line, given the line's seq
            line_seq = SEQ_AT.match(lines, lines.rfind(b"\n", 0, found) + 1)
            if line_seq is not None:
                slice_._carries(int(line_seq.group(1)), reference, False, None)
                return pointed
    return (slice_ or Slice()).block(lines, lambda: table_source(state), found)


def _one_reference_pointed(state, lines: bytes, found: int, reference: int, at: int | None) -> bytes | None:
    """A placement's lines, readable in a slice that carries snapshot `reference` in record `at`
    (None: it carries it nowhere yet), when the member's name found at `found` is the only one in
    them: the encoder wrote one compact member of the placement's own, which holds that name,
    referring to snapshot `reference` by seq, so that one is it. Its reference is replaced by `at`,
    or by the snapshot's table: the bytes the slice gives (`Slice.block`), in one copy, without
    reading the lines for what the encoder already said. None for any other lines, or when the
    table cannot be read back (the Slice then leaves the reference as it is)."""
    if lines.find(_MARK, found + len(_MARK)) >= 0:
        return None
    pointer = _REFERENCE.match(lines, found)
    if pointer is None or int(pointer.group(1)) != reference or lines.find(b"\n", found) < 0:
        return None
    if at is not None:
        spliced = b"%d" % at
    else:
        try:
            spliced = _table_json(table_source(state), reference)
        except (KeyError, TypeError, ValueError, OSError):
            return None
    whole = memoryview(lines)
    return b"".join((whole[:pointer.start(1)], spliced, whole[pointer.end(1):]))
