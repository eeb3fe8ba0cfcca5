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
from pathlib import Path
from typing import Iterable, Iterator

import orjson

from ..record.compact import KEY
from .trace_reader import offset_after

__all__ = ["self_contained", "TableSource"]

# where the encoder writes a compact record's snapshot reference: an int, a based snapshot, or a
# whole table (a quote cannot appear unescaped inside a JSON string, so this is the member itself)
_REFERENCE = re.compile(rb'"a3fast\.compact":\{"format":\d+,"fleet":(?:(\d+)|\{"base":(\d+)|(\{"names"))')
_SEQ = re.compile(rb'\{"seq":(\d+),')


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
    names, live = source.table(seq)
    key = (str(source.path), seq, live)
    text = _TABLE_JSON.get(key)
    if text is None:
        if len(_TABLE_JSON) >= _TABLE_JSON_KEPT:
            _TABLE_JSON.pop(next(iter(_TABLE_JSON)))
        text = _TABLE_JSON[key] = orjson.dumps({"names": names, "live": live})
    return text


def _rewrite(line: bytes, seq: int, remap: dict[int, int], source: TableSource,
             found: re.Match | None = None) -> bytes:
    if found is not None and found.group(1) is not None and int(found.group(1)) not in remap:
        # a plain reference: the table goes in its place, the rest of the line byte for byte
        referenced = int(found.group(1))
        table = _table_json(source, referenced)
        remap[referenced] = seq
        return line[:found.start(1)] + table + line[found.end(1):].rstrip(b"\n") + b"\n"
    record = orjson.loads(line)
    member = record["content"][KEY]
    fleet = member["fleet"]
    if isinstance(fleet, int):
        if fleet in remap:
            member["fleet"] = remap[fleet]
        else:
            names, live = source.table(fleet)
            member["fleet"] = {"names": names, "live": live}
            remap[fleet] = seq
    else:
        base = fleet["base"]
        if base in remap:
            fleet["base"] = remap[base]
        else:
            names, _ = source.table(base)
            member["fleet"] = {"names": names + list(fleet["names_added"]), "live": fleet["live"]}
    return orjson.dumps(record) + b"\n"


def self_contained(lines: Iterable[bytes], start: int, source: TableSource) -> Iterator[bytes]:
    """The trace lines (each ending in a newline) of a slice whose first seq is `start` or later,
    with every snapshot they need before `start` carried inside the slice."""
    remap: dict[int, int] = {}
    for line in lines:
        if b'"a3fast.compact"' not in line:
            yield line
            continue
        found = _REFERENCE.search(line)
        if found is None or found.group(3) is not None:
            yield line
            continue
        referenced = int(found.group(1) or found.group(2))
        if referenced >= start:
            yield line
            continue
        seq = int(_SEQ.match(line).group(1))  # type: ignore[union-attr]  # TraceWriter's lines
        try:
            yield _rewrite(line, seq, remap, source, found)
        except (KeyError, TypeError, ValueError, OSError):
            # a table that cannot be read back: the record goes as it is, and a reader names the
            # snapshot it lacks
            yield line


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
    source = TableSource(state.trace_path, end, state.encoder.current_snapshot())
    return self_contained(split_lines(chunks), since + 1, source)


def readable_answer(state, lines: bytes) -> bytes:
    """The trace lines of one answer, readable on its own."""
    if b'"a3fast.compact"' not in lines:
        return lines
    first = _SEQ.match(lines)
    if first is None:
        return lines
    source = TableSource(state.trace_path, state.trace_size, state.encoder.current_snapshot())
    return b"".join(self_contained(lines.splitlines(keepends=True), int(first.group(1)), source))
