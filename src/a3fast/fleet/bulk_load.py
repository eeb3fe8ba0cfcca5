"""Bulk ingest: JSON Lines of §3 declarations into a fleet's table and rows, in line order.

Each line is validated as `parse_declaration` does (the same problems, under `line N: $...`) and
kept as its rows, cost and canonical JSON — no Declaration stays alive — then new rows and agents
are interned in one batch per run of new names. On the native engine the compiled reader
(`a3fast._ingest`) reads the lines it can vouch for in one pass over the bytes and hands every other
one to the document decoder (`a3fast.document.decode_problem`) and `parse_declaration`, which
read every line on the pure engine.
"""
from __future__ import annotations

import gc
import os
from contextlib import contextmanager
from typing import Any, Iterator, Protocol, Union

import orjson

from ..declaration_codec import BatchPacker
from ..document import decode_problem, within_line
from ..engines import ingest_module
from ..errors import Problem, SchemaError, describe
from ..framing import blank
from ..schema import parse_declaration
from .scoring import cost_score
from .domain import namespace_problem
from .rows import INGEST_KINDS, PredicateRows
from .table import AgentTable

__all__ = ["JSONL_CHUNK", "JsonlSource", "BinaryStream", "read_jsonl", "chunks_of", "size_of", "collector_paused"]

#: How much of a JSON Lines file or stream is read at a time (then on to the line's end): small
#: enough that the bytes in flight add little to the peak, large enough that a call of the
#: compiled reader per chunk costs nothing to speak of.
JSONL_CHUNK = 2 << 20

class BinaryStream(Protocol):
    """What the bulk reader reads of a stream: a block, then on to the end of its line."""

    def read(self, size: int, /) -> bytes: ...

    def readline(self) -> bytes: ...


#: What a JSON Lines source may be: a path, the bytes themselves, or a binary stream.
JsonlSource = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, BinaryStream]


def chunks_of(source: JsonlSource) -> Iterator[bytes]:
    """JSON Lines bytes in chunks of whole lines: the bytes themselves, or a file or binary stream
    read a chunk at a time (the whole input is never held). A chunk is a block and the rest of its
    last line, read on from the stream: one join per chunk, where cutting the block at its last line
    end and carrying the rest over to the next took a slice and a join (the last chunk may end
    mid-line: an input cut short)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        yield bytes(source)
        return
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as fh:
            yield from _whole_line_chunks(fh)
    else:
        yield from _whole_line_chunks(source)


def _whole_line_chunks(stream: BinaryStream) -> Iterator[bytes]:
    if not callable(getattr(stream, "read", None)) or not callable(getattr(stream, "readline", None)):
        raise TypeError(f"declarations: expected a path, bytes or a binary stream, found {describe(stream)}")
    readline = stream.readline
    first = stream.read(JSONL_CHUNK)
    if isinstance(first, str):
        raise TypeError("declarations: expected a binary stream (open the file with 'rb'), found a text stream")
    block = first
    while block:
        if not block.endswith(b"\n"):
            block += readline()
        yield block
        block = stream.read(JSONL_CHUNK)


def size_of(source: JsonlSource) -> int | None:
    """How many bytes a JSON Lines source holds, if that is known before reading it."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return len(source)
    if not isinstance(source, (str, os.PathLike)):
        return None
    try:
        return os.stat(source).st_size if os.path.isfile(source) else None
    except OSError:
        return None


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a bulk load (or a replay). Parsing and interning a
    batch makes many long-lived, acyclic objects, and every full collection they trigger would
    rescan the whole growing heap for cycles that cannot be there."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


#: The largest first line number: the compiled reader counts lines in a signed 64-bit integer,
#: which then holds any count of lines after it.
MAX_FIRST_LINE = 2**62


def read_jsonl(table: AgentTable, rows: PredicateRows, engine: str, source: JsonlSource, *,
               on_error: str, pack: bool | None, first_line: int = 1) -> tuple[list[Problem], bool]:
    """Add (or replace) the agents of JSON Lines declarations (Fleet.extend_jsonl): the problems
    found, and whether any agent was added. With `on_error="refuse"` any problem raises
    SchemaError listing every one and nothing is added. The input's first line is numbered
    `first_line` in problems. One vocabulary of declared values and one batch serve the whole
    input, however many chunks it is read in."""
    if on_error not in ("refuse", "skip"):
        raise ValueError(f"on_error: expected 'refuse' or 'skip', found {on_error!r}")
    if pack is not None and type(pack) is not bool:
        raise ValueError(f"pack: expected True, False or None, found {pack!r}")
    if isinstance(first_line, bool) or not isinstance(first_line, int) or not 1 <= first_line <= MAX_FIRST_LINE:
        raise ValueError(f"first_line: expected a line number from 1 to 2^62, found {first_line!r}")
    source_name = os.fspath(source) if isinstance(source, (str, os.PathLike)) else None
    reader = ingest_module(engine)
    batch = reader.Batch()
    problems: list[Problem] = []
    pending: list[tuple[str, Any, int]] = []             # rows to intern: (kind, value, row)
    pending_rows: dict[str, dict] = {kind: {} for kind in rows.field_rows}
    first_row = rows.index.row_count()
    field_rows = rows.field_rows
    ids, entries = table.ids, table.entries

    def new_row(kind: str, value: Any) -> int:
        row = pending_rows[kind].get(value)
        if row is None:
            row = pending_rows[kind][value] = first_row + len(pending)
            pending.append((kind, value, row))
        return row

    def intern(code: int, value: Any) -> int:  # the compiled reader's row for a value
        kind = INGEST_KINDS[code]
        row = field_rows[kind].get(value)
        return row if row is not None else new_row(kind, value)

    vocab = reader.Vocabulary()                          # the compiled reader's rows by value

    def read_carefully(line: bytes, lineno: int) -> None:
        if blank(line):
            return
        # decoded under the document rule (a3fast.document): what orjson would read loosely — an
        # integer beyond 64 bits as a float — is refused here as everywhere else
        doc, refused = decode_problem(line)
        if refused:
            # the decoder counted within this line alone: its "line 1" is this line
            problems.extend(Problem(f"line {lineno}: {p.path}", p.expected, within_line(p.found)) for p in refused)
            return
        try:
            decl = parse_declaration(doc)
        except SchemaError as exc:
            problems.extend(Problem(f"line {lineno}: {p.path}", p.expected, p.found) for p in exc.problems)
            return
        name, namespace = decl.agent.name, decl.agent.namespace
        held = batch.namespace_of(name)
        if held is None and name in ids and entries[ids[name]] is not None:
            held = table.declaration(ids[name]).agent.namespace
        conflict = namespace_problem(f"line {lineno}: $.agent.namespace", name, held, namespace)
        if conflict is not None:
            problems.append(conflict)
            return
        canonical = orjson.dumps(doc)
        # keep an exact-size copy: orjson's result carries several times its length in spare
        # capacity, which a million kept declarations would multiply into gigabytes
        text = line.rstrip(b"\r\n")
        if text != canonical:
            text = bytes(memoryview(canonical))
        batch.append(name, namespace, rows.rows_for(decl, new_row), cost_score(decl), text)

    lineno = first_line
    with collector_paused(), BatchPacker(table.codec, pack, size_of(source)) as packer:
        for chunk in chunks_of(source):
            # once packing, the lines the compiled reader vouches for are packed from the chunk
            batch.defer_texts = packer.packs_from_spans
            pos, end = 0, len(chunk)
            while pos < end:
                pos, lineno = reader.scan(chunk, pos, lineno, batch, vocab, intern, ids)
                if pos >= end:
                    break
                eol = chunk.find(b"\n", pos)
                eol = end if eol < 0 else eol
                read_carefully(chunk[pos:eol], lineno)
                pos, lineno = eol + 1, lineno + 1
            packer.after_chunk(batch.texts, chunk, batch.take_spans() if batch.defer_texts else None)
        packer.finish(batch.texts)
    if problems and on_error == "refuse":
        raise SchemaError(problems, source_name)
    table.codec = packer.codec
    if not len(batch):
        return problems, False
    with collector_paused():    # a million names, ids and index entries: nothing for it to find
        rows.intern_pending(pending)
        _put_batch(table, rows, batch)
    return problems, True


def _put_batch(table: AgentTable, rows: PredicateRows, batch: Any) -> None:
    """Apply a checked JSON Lines batch in line order: runs of new names in one engine call
    each, a known name (or one seen earlier in the batch) as a replace."""
    entries, index = table.entries, rows.index
    names, texts = batch.names, batch.texts
    if not batch.repeated and (not table.ids or table.ids.keys().isdisjoint(names)):
        # the usual bulk load: every name new and none repeated — one run, no check per name here
        _put_run(table, rows, batch, 0, len(names))
        return
    costs = batch.columns()[2]
    run_start = 0
    run_names: set[str] = set()
    for j, name in enumerate(names):
        if name in table.ids or name in run_names:
            _put_run(table, rows, batch, run_start, j)    # (may give the table a new ids dict)
            run_start, run_names = j + 1, set()
            aid = table.ids[name]
            if entries[aid] is not None:
                index.drop(aid, rows.rows_of(aid))
            else:
                table.count += 1
            index.put(aid, name, batch.rows_of(j), float(costs[j]))
            entries[aid] = texts[j]
            table.decl_json[aid] = None
            table.member_rows[aid] = None
        else:
            run_names.add(name)
    _put_run(table, rows, batch, run_start, len(names))


def _put_run(table: AgentTable, rows: PredicateRows, batch: Any, lo: int, hi: int) -> None:
    """Agents `lo:hi` of a batch, all new names, in one engine call."""
    if lo >= hi:
        return
    row_ids, offsets, costs = batch.columns()
    whole = lo == 0 and hi == len(batch.names)      # the usual case: no copies of the lists
    names = batch.names if whole else batch.names[lo:hi]
    first = len(table.entries)
    rows.index.put_flat(names, row_ids, offsets[lo:hi + 1], costs[lo:hi])
    if table.ids:
        table.ids.update(zip(names, range(first, first + len(names))))
    else:   # a fresh fleet's ids in one dict made at its size (a third faster than growing one)
        table.ids = batch.name_ids(lo, hi, first)
    table.entries.extend(batch.texts if whole else batch.texts[lo:hi])
    table.decl_json.extend([None] * len(names))
    table.member_rows.extend([None] * len(names))
    table.count += len(names)
