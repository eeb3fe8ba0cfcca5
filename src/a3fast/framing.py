"""Where each JSON document of an input begins and ends: the one framing of a3fast's inputs.

An input is a JSON array of documents or JSON Lines, given as a path, bytes or a binary stream
(standard input, a socket's file, a request body). Its form is told by its first non-blank byte:
`[` is an array, anything else is JSON Lines, and an input with no non-blank byte is empty.

JSON Lines are never held whole: the input's own line reader hands out one line at a time, so
memory stays flat however long the input, a pipe included. A JSON array is one JSON
value, so it is read whole and cut into its elements by msgspec without decoding them.

This module knows bytes and JSON syntax only. What a document means (a declaration, a trace
record, requirements) is for the readers above it: `a3fast.document_reader` (documents under the
document rule, declarations into a fleet), `a3fast.trace` (trace records), `a3fast.kinds` (what
kind of file an input is). It imports nothing of a3fast beyond the document rule and the errors,
so every reader, the fleet's included, can stand on it.
"""
from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import IO, Any, Callable, Iterator, Union

import msgspec

from .document import MAX_DEPTH, cut_deeper_than, loads, within_line
from .errors import Problem, SchemaError

__all__ = ["Source", "AUTO", "LINES", "ARRAY", "EMPTY", "NOT_DOCUMENTS", "JSON_SPACE", "blank", "Item",
           "Framed", "Pushback", "framed", "source_name", "is_bytes", "form_of", "iter_lines", "split_array",
           "iter_documents", "read_documents"]

#: A path, the bytes themselves, or a binary stream (standard input, a socket's file, a body).
Source = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, IO[bytes]]

AUTO, LINES, ARRAY, EMPTY = "auto", "lines", "array", "empty"

#: JSON's whitespace (RFC 8259, section 2): a line of these alone is blank and skipped. Python's
#: `bytes.isspace` and `strip` also take the vertical tab and the form feed, which JSON does not:
#: a line of those is no JSON, and its reader says so rather than skip it.
JSON_SPACE = b" \t\r\n"


def blank(line: bytes) -> bool:
    """Whether `line` holds JSON whitespace alone (nothing at all included)."""
    # `isspace` answers a usual line at its first byte; only a line of spaces is looked at again
    return not line or (line.isspace() and b"\x0b" not in line and b"\x0c" not in line)

#: What an input that is neither form is expected to be.
NOT_DOCUMENTS = "an array or JSON Lines of objects"

_RAW_ARRAY = msgspec.json.Decoder(list[msgspec.Raw])


def source_name(source: Source) -> str | None:
    """The name problems are reported under: a path as given, a stream's `name`, else None."""
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    name = getattr(source, "name", None)
    return name if isinstance(name, str) else None


def is_bytes(source: Any) -> bool:
    return isinstance(source, (bytes, bytearray, memoryview))


def form_of(head: bytes) -> str:
    """ARRAY when the first non-blank byte is `[`, EMPTY when there is none, else LINES."""
    first = head.lstrip(JSON_SPACE)[:1]
    return ARRAY if first == b"[" else EMPTY if not first else LINES


class Pushback:
    """A binary stream that can be given back bytes it has read: they are read again first.

    Standard input can be read only once; a command that looks at the first documents of `-` to
    tell what kind of file it is gives them back here, and the reader then streams the whole input
    as if nothing had been read."""

    __slots__ = ("stream", "_head", "name")

    def __init__(self, stream: IO[bytes], name: str | None = None):
        self.stream = stream
        self._head = b""
        self.name = name if name is not None else getattr(stream, "name", None)

    def unread(self, data: bytes) -> None:
        self._head = bytes(data) + self._head

    def read(self, size: int = -1) -> bytes:
        head = self._head
        if head:
            if size is None or size < 0:
                self._head = b""
                return head + self.stream.read()
            self._head = head[size:]
            return head[:size]
        return self.stream.read(size)

    def readline(self) -> bytes:
        head = self._head
        if head:
            cut = head.find(b"\n")
            if cut >= 0:
                self._head = head[cut + 1:]
                return head[:cut + 1]
            self._head = b""
            return head + self.stream.readline()
        return self.stream.readline()

    def fileno(self) -> int:
        return self.stream.fileno()

    def __iter__(self) -> "Pushback":
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line


def _numbered(stream: IO[bytes], lineno: int, progress: Callable[[int], None] | None
              ) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of the stream's non-blank lines from line `lineno` + 1, line ends left
    out; the stream's own line reader cuts them, so one line at a time is held."""
    for line in stream:
        lineno += 1
        if progress is not None:
            progress(len(line))
        if blank(line):
            continue
        yield lineno, (line[:-1] if line[-1:] == b"\n" else line)


class Framed:
    """One input opened for reading: its `form` and, once, its documents' bytes.

    `lines()` gives the numbered non-blank lines of JSON Lines, streamed; `whole()` the input's
    bytes (an array is one value); `stream()` a binary stream from the input's first non-blank
    line, for a reader that cuts lines itself (the fleet's compiled bulk reader). Use one of the
    three, then `close()` (which closes a file the framing opened, never a stream it was given)."""

    __slots__ = ("form", "first_line", "_head", "_stream", "_owned", "_progress")

    def __init__(self, source: Source, form: str, progress: Callable[[int], None] | None):
        if is_bytes(source):
            self._stream: Any = io.BytesIO(bytes(source))  # type: ignore[arg-type]  # bytes-like
            self._owned = True
        elif isinstance(source, (str, os.PathLike)):
            self._stream = open(source, "rb")
            self._owned = True
        else:
            self._stream, self._owned = source, False
        self._progress = progress
        lineno, head = 0, b""
        try:
            while line := self._stream.readline():
                lineno += 1
                if progress is not None:
                    progress(len(line))
                if not blank(line):
                    head = line
                    break
        except BaseException:
            self.close()
            raise
        self._head = head
        #: the line of the input's first non-blank byte (where an array starts)
        self.first_line = max(lineno, 1)
        found = form_of(head)
        self.form = found if form == AUTO or found == EMPTY else form

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """(line number, line) of every non-blank line, the line end left out; a last line
        without its line end (a stream cut short) is a line like any other."""
        head, self._head = self._head, b""
        if head:
            yield self.first_line, (head[:-1] if head[-1:] == b"\n" else head)
            yield from _numbered(self._stream, self.first_line, self._progress)

    def whole(self) -> bytes:
        head, self._head = self._head, b""
        rest = self._stream.read()
        if self._progress is not None:
            self._progress(len(rest))
        return head + rest

    def stream(self) -> IO[bytes]:
        head, self._head = self._head, b""
        pushed = Pushback(self._stream)
        pushed.unread(head)
        return pushed  # type: ignore[return-value]  # read() and readline(), as a bulk reader asks

    def close(self) -> None:
        if self._owned:
            self._stream.close()


def framed(source: Source, *, form: str = AUTO, progress: Callable[[int], None] | None = None) -> Framed:
    """Open `source` for reading and tell its form (see the module's docstring). `form` forces
    LINES or ARRAY (an empty input stays EMPTY). OSError when a path cannot be opened or read."""
    return Framed(source, form, progress)


def iter_lines(source: Source) -> Iterator[tuple[int, bytes]]:
    """(line number, line) for every non-blank line of `source`, one line at a time."""
    framing = framed(source, form=LINES)
    try:
        yield from framing.lines()
    finally:
        framing.close()


def split_array(data: bytes) -> list[bytes] | list[Problem]:
    """The elements of a JSON array, each as its own bytes (not decoded); or, for bytes that are
    not an array of JSON values, the problems `a3fast.document` names (one at `$` at least)."""
    try:
        elements = _RAW_ARRAY.decode(data)
    except msgspec.ValidationError:
        return [Problem("$", NOT_DOCUMENTS, "another value")]
    except (msgspec.DecodeError, RecursionError):  # the document rule names what is wrong
        # an element nested past what msgspec splits (about a thousand levels) is still refused
        # alone, as its line would be: cut to one level past the rule's bound, it splits, and the
        # rule refuses that element for its depth (the cut leaves it one level too deep)
        cut = cut_deeper_than(data, MAX_DEPTH + 2)
        if cut != data:
            try:
                return [bytes(raw) for raw in _RAW_ARRAY.decode(cut)]
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                pass
        try:
            loads(data)
        except SchemaError as exc:
            return list(exc.problems)
        return [Problem("$", "valid JSON", "JSON msgspec cannot split into elements")]
    return [bytes(raw) for raw in elements]


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


def _decode_under_rule(data: bytes) -> Any:
    return loads(data, limit=MAX_DEPTH)


def iter_documents(source: Source, *, form: str = AUTO,
                   decode: Callable[[bytes], Any] | None = None) -> Iterator[Item]:
    """Every document of the input, in order, as `Item`s. `decode` turns one document's bytes into
    its value and raises SchemaError naming its problems (default: `a3fast.document.loads`).
    `form`: AUTO, LINES or ARRAY. Raises OSError for an input that cannot be read; never
    SchemaError (problems come as items)."""
    decode = decode or _decode_under_rule
    framing = framed(source, form=form)
    try:
        if framing.form == ARRAY:
            # each element decoded on its own, as JSON Lines decodes each line: the rule's depth
            # counts from the document, not from the array around it, and an element the rule
            # refuses is refused alone
            elements = split_array(framing.whole())
            if elements and isinstance(elements[0], Problem):
                yield Item("$", None, None, tuple(elements))
                return
            for index, raw in enumerate(elements):
                try:
                    yield Item(f"$[{index}]", None, decode(raw))  # type: ignore[arg-type]  # bytes
                except SchemaError as exc:   # the decoder counted within the element alone
                    yield Item(f"$[{index}]", None, None, tuple(Problem(p.path, p.expected, within_line(p.found))
                                                                for p in exc.problems))
                elements[index] = b""  # type: ignore[call-overload]  # each element's bytes let go once read
            return
        for lineno, line in framing.lines():
            where = f"line {lineno}: $"
            try:
                yield Item(where, lineno, decode(line))
            except SchemaError as exc:
                yield Item(where, lineno, None, tuple(Problem(p.path, p.expected, within_line(p.found))
                                                      for p in exc.problems))
    finally:
        framing.close()


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
