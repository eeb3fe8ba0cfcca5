"""Reading many JSON documents from one input — a JSON array or JSON Lines, given as a path, bytes
or a binary stream — with every problem a `Problem` named by where it is: `line 4: $.agent.name`
in JSON Lines, `$[3].agent.name` in an array, `$` for an input that is neither.

Two readers share that form:

- `load_fleet` reads §3 declarations into a `Fleet` through the fleet's bulk reader
  (`Fleet.extend_jsonl`, compiled in `a3fast._ingest`): one pass over the bytes, no dict and no
  `Declaration` kept per agent, and exactly the problems `Fleet.load_jsonl` names. A JSON array is
  cut into its elements by msgspec without decoding them and handed to the same reader as lines.
- `iter_documents` / `read_documents` decode any other documents (requirements, tasks, trace
  records, cards) one line at a time as they arrive, each under the rule of `a3fast.document`
  (or the caller's own decoder).

`a3fast.document` says what one document may contain and is imported by the schema and the fleet;
this module says where each document of an input begins and ends and builds on the fleet, so it
sits beside that module rather than in it (in it, the rule would import the fleet it is a rule for).

A JSON array is one document, so it is read whole; JSON Lines are never held whole when they come
from a path or a stream. The input is a JSON array when its first non-blank byte is `[`.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import IO, Any, Callable, Iterator, Union

import msgspec

from .declaration_codec import PACK_FROM_BYTES
from .document import MAX_DEPTH, loads
from .errors import Problem, SchemaError
from .fleet import Fleet
from .schema import Declaration, parse_declaration

__all__ = ["Source", "Item", "ARRAY", "LINES", "AUTO", "source_name", "form_of", "iter_lines",
           "iter_documents", "read_documents", "read_declarations", "load_fleet", "extend_fleet",
           "NOT_DOCUMENTS"]

#: A path, the bytes themselves, or a binary stream (standard input, a socket's file, a body).
Source = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, IO[bytes]]

AUTO, LINES, ARRAY = "auto", "lines", "array"

#: How much of a stream or file is read at a time when its lines are walked.
CHUNK = 1 << 20
#: What an input that is neither form is expected to be.
NOT_DOCUMENTS = "an array or JSON Lines of objects"

_RAW_ARRAY = msgspec.json.Decoder(list[msgspec.Raw])


@dataclass(frozen=True, slots=True)
class Item:
    """One document of an input: where it is and its value, or the problems that stopped it.

    `where` is the root of the document's paths (`line 4: $`, `$[3]`, or `$` for the whole input);
    `line` its line in JSON Lines (None in an array); `problems` have paths within the document
    (`$...`), `rooted()` gives them under `where`."""

    where: str
    line: int | None
    value: Any
    problems: tuple[Problem, ...] = ()

    def rooted(self) -> list[Problem]:
        return [Problem(self.where + p.path[1:], p.expected, p.found) for p in self.problems]


def source_name(source: Source) -> str | None:
    """The name problems are reported under: a path as given, a stream's `name`, else None."""
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    name = getattr(source, "name", None)
    return name if isinstance(name, str) else None


def _is_bytes(source: Source) -> bool:
    return isinstance(source, (bytes, bytearray, memoryview))


def _open(source: Source) -> IO[bytes]:
    if isinstance(source, (str, os.PathLike)):
        return open(source, "rb")
    return source  # type: ignore[return-value]  # a stream is read as it is


def _blocks(source: Source, size: int) -> Iterator[bytes]:
    """The input a block at a time (bytes: themselves, once)."""
    if _is_bytes(source):
        yield bytes(source)  # type: ignore[arg-type]  # bytes, bytearray or memoryview
        return
    stream = _open(source)
    try:
        while block := stream.read(size):
            yield block
    finally:
        if stream is not source:
            stream.close()


def _whole_lines(blocks: Iterator[bytes], head: bytes = b"") -> Iterator[bytes]:
    """Blocks regrouped to end at a line end (the last may end mid-line: a stream cut short)."""
    rest = head
    for block in blocks:
        cut = block.rfind(b"\n")
        if cut < 0:
            rest += block
            continue
        yield rest + block[:cut + 1]
        rest = block[cut + 1:]
    if rest:
        yield rest


def _first_byte(blocks: Iterator[bytes]) -> tuple[bytes, bytes]:
    """(the first non-blank byte or b"", the blocks read to find it, joined)."""
    seen = b""
    for block in blocks:
        seen += block
        text = seen.lstrip()
        if text:
            return text[:1], seen
    return b"", seen


def form_of(head: bytes) -> str:
    """ARRAY when the first non-blank byte is `[`, else LINES."""
    return ARRAY if head.lstrip()[:1] == b"[" else LINES


def iter_lines(source: Source) -> Iterator[tuple[int, bytes]]:
    """(line number, line) for every non-blank line, read a block at a time; a last line without
    its line end (a stream cut short) is a line like any other."""
    return _numbered(_whole_lines(_blocks(source, CHUNK)))


def _numbered(chunks: Iterator[bytes]) -> Iterator[tuple[int, bytes]]:
    lineno = 1
    for chunk in chunks:
        pieces = chunk.split(b"\n")
        if chunk.endswith(b"\n"):
            pieces.pop()  # the empty piece after the chunk's last line end is not a line
        for line in pieces:
            if line.strip():
                yield lineno, line
            lineno += 1


def _decode_under_rule(data: bytes) -> Any:
    return loads(data, limit=MAX_DEPTH)


def iter_documents(source: Source, *, form: str = AUTO,
                   decode: Callable[[bytes], Any] | None = None) -> Iterator[Item]:
    """Every document of the input, in order, as `Item`s. `decode` turns one document's bytes into
    its value and raises SchemaError naming its problems (default: `a3fast.document.loads`).
    `form`: AUTO (an array when the input starts with `[`), LINES or ARRAY. Raises OSError for an
    input that cannot be read; never SchemaError (problems come as items)."""
    decode = decode or _decode_under_rule
    blocks = _blocks(source, CHUNK)
    first, head = _first_byte(blocks)
    if form == ARRAY or (form == AUTO and first == b"["):
        data = head + b"".join(blocks)
        try:
            value = decode(data)
        except SchemaError as exc:
            yield Item("$", None, None, tuple(exc.problems))
            return
        if not isinstance(value, list):
            yield Item("$", None, None, (Problem("$", NOT_DOCUMENTS, "another value"),))
            return
        for index, element in enumerate(value):
            yield Item(f"$[{index}]", None, element)
        return
    for lineno, line in _numbered(_whole_lines(blocks, head)):
        where = f"line {lineno}: $"
        try:
            yield Item(where, lineno, decode(line))
        except SchemaError as exc:
            yield Item(where, lineno, None, tuple(exc.problems))


def read_documents(source: Source, *, form: str = AUTO, decode: Callable[[bytes], Any] | None = None
                   ) -> tuple[list[tuple[str, Any]], list[Problem]]:
    """([(where, value)], problems): every document that was read, and every problem rooted at its
    place (`line 4: $...`, `$[3]...`), in input order."""
    documents: list[tuple[str, Any]] = []
    problems: list[Problem] = []
    for item in iter_documents(source, form=form, decode=decode):
        if item.problems:
            problems += item.rooted()
        else:
            documents.append((item.where, item.value))
    return documents, problems


def read_declarations(source: Source, *, form: str = AUTO
                      ) -> tuple[list[tuple[str, Declaration]], list[Problem]]:
    """([(where, declaration)], problems): the §3 declarations of the input, parsed one by one
    (for a caller that needs each `Declaration`; `load_fleet` builds a fleet without them)."""
    declarations: list[tuple[str, Declaration]] = []
    problems: list[Problem] = []
    for item in iter_documents(source, form=form):
        if item.problems:
            problems += item.rooted()
            continue
        try:
            declarations.append((item.where, parse_declaration(item.value)))
        except SchemaError as exc:
            problems += Item(item.where, item.line, None, tuple(exc.problems)).rooted()
    return declarations, problems


# -- declarations into a fleet, through its bulk reader -------------------------------------------------

def load_fleet(source: Source, engine: str | None = None, *, form: str = AUTO, name: str | None = None,
               **options: Any) -> Fleet:
    """A fleet of the input's §3 declarations, read by the fleet's bulk reader in one pass (see the
    module's docstring). SchemaError lists every problem, each named by line (or index) and JSON
    path, under `name` (default: `source_name`); OSError when the input cannot be read. `options`
    go to `Fleet`."""
    fleet = Fleet(engine, **options)
    problems = extend_fleet(fleet, source, form=form)
    if problems:
        raise SchemaError(problems, name if name is not None else source_name(source))
    _return_freed_memory()
    return fleet


def _return_freed_memory() -> None:
    """Hand the heap the load's passing buffers used (chunks, batch columns) back to the system.
    glibc keeps freed blocks for reuse, so without this they stay in the process's RSS under
    whatever it builds next (a placement's §6 record over every candidate is tens of MB at
    200,000 agents); about 10 MiB at that size. Elsewhere there is nothing to do."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def extend_fleet(fleet: Fleet, source: Source, *, form: str = AUTO) -> list[Problem]:
    """Add the input's declarations to `fleet` through `Fleet.extend_jsonl` and return the problems
    of the declarations left out (every one that parsed is added, so a caller that must add all or
    nothing builds a fresh fleet and drops it when problems come back, as `load_fleet` does)."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size if os.path.isfile(source) else None
            if size is not None and size >= PACK_FROM_BYTES and form != ARRAY:
                first, _ = _first_byte(iter(lambda: fh.read(CHUNK), b""))
                if first != b"[":
                    # large enough to be kept packed: the bulk reader sizes and reads the file itself
                    return fleet.extend_jsonl(source, on_error="skip")
                fh.seek(0)
            return extend_fleet(fleet, fh, form=form)
    if _is_bytes(source):
        data = bytes(source)  # type: ignore[arg-type]  # bytes, bytearray or memoryview
        if form == ARRAY or (form == AUTO and form_of(data[:CHUNK]) == ARRAY):
            return _extend_from_array(fleet, data)
        return fleet.extend_jsonl(data, on_error="skip")
    stream = _open(source)
    first, head = _first_byte(iter(lambda: stream.read(CHUNK), b""))
    if form == ARRAY or (form == AUTO and first == b"["):
        return _extend_from_array(fleet, head + stream.read())
    # the rest goes to the bulk reader as the stream it is: one pass, one vocabulary of declared
    # values and one batch for the whole input, read 2 MiB of whole lines at a time
    return fleet.extend_jsonl(_Resumed(head, stream), on_error="skip")


class _Resumed:
    """A stream whose first bytes were read already (to tell the form): those bytes, then the rest."""

    __slots__ = ("head", "stream")

    def __init__(self, head: bytes, stream: IO[bytes]):
        self.head, self.stream = head, stream

    def read(self, size: int = -1) -> bytes:
        if self.head:
            head, self.head = self.head, b""
            return head
        return self.stream.read(size)

    def readline(self) -> bytes:
        if self.head:
            return self.read()
        return self.stream.readline()


def _extend_from_array(fleet: Fleet, data: bytes) -> list[Problem]:
    """A JSON array of declarations: msgspec finds each element's bytes without decoding them, and
    the elements go to the bulk reader as lines; `line k+1` of its problems is `$[k]` here. An
    input that is not an array of JSON values is one problem at `$`, as `a3fast.document` names it."""
    try:
        elements = _RAW_ARRAY.decode(data)
    except msgspec.ValidationError:
        return [Problem("$", NOT_DOCUMENTS, "another value")]
    except (msgspec.DecodeError, RecursionError):  # document.loads names what is wrong
        try:
            loads(data)
        except SchemaError as exc:
            return list(exc.problems)
        return [Problem("$", "valid JSON", "JSON msgspec cannot split into elements")]
    # a raw line end can stand only between tokens, where a space means the same
    lines = b"\n".join(bytes(raw).replace(b"\r", b" ").replace(b"\n", b" ") for raw in elements)
    del elements
    return [_at_index(p) for p in fleet.extend_jsonl(lines, on_error="skip")]


_LINE_ROOT = re.compile(r"line (\d+): \$")


def _at_index(problem: Problem) -> Problem:
    """`line k+1: $...` of the lines an array was cut into is `$[k]...` of the array."""
    path = _LINE_ROOT.sub(lambda m: f"$[{int(m.group(1)) - 1}]", problem.path, count=1)
    return Problem(path, problem.expected, problem.found)
