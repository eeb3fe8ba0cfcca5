"""The files a command is given to read: a path as given, or `-` for standard input.

Every reader of a3fast takes what `input_source` returns: the path itself (read a block at a time
by `a3fast.framing`), or standard input as one `framing.Pushback` stream for the whole process, so
that a command can look at the first documents of `-` to tell its kind and the reader still
streams all of it — standard input is never held whole, unless it is a JSON array (one value).

Whatever goes wrong is an `InputError`: one line per problem, each naming the file, which the
command line prints as `a3fast: ...` with exit code 2. `require_kind` is the one check of what
kind of file a command was given (`a3fast.kinds`).
"""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

from .errors import A3Error, SchemaError
from .framing import Pushback, Source, read_documents
from .kinds import Kind, sniff, wrong_kind

__all__ = ["STDIN", "InputError", "input_source", "display_name", "cannot_read", "read_bytes", "read_json",
           "read_json_documents", "require_kind"]

#: The path that names standard input.
STDIN = "-"
_stdin: Pushback | None = None
#: the streams of the pipes and devices given by name (`<(...)`, a FIFO), opened once
_read_once_streams: dict[str, Pushback] = {}


class InputError(A3Error):
    """An input a command cannot read as it must: `lines`, one per problem, each naming the file."""

    def __init__(self, lines: list[str] | str):
        self.lines = [lines] if isinstance(lines, str) else list(lines)
        super().__init__("\n".join(self.lines))


def _standard_input() -> Pushback:
    global _stdin
    if _stdin is None or _stdin.stream is not sys.stdin.buffer:
        _stdin = Pushback(sys.stdin.buffer, "standard input")
    return _stdin


def input_source(path: str) -> Source:
    """What a3fast's readers read for a command-line input: the path, or one stream for the whole
    process for `-` (standard input) and for a pipe or device given by name (`<(...)`, a FIFO),
    which can be read only once (see the module's docstring). OSError when it cannot be opened."""
    if path == STDIN:
        return _standard_input()  # type: ignore[return-value]  # a binary stream
    if _read_once(path):
        stream = _read_once_streams.get(path)
        if stream is None:
            stream = _read_once_streams[path] = Pushback(open(path, "rb"), path)
        return stream  # type: ignore[return-value]  # a binary stream
    return path


def display_name(path: str) -> str:
    return "standard input" if path == STDIN else path


def cannot_read(path: str, exc: OSError) -> InputError:
    return InputError(f"{display_name(path)}: cannot read: {exc.strerror or exc}")


def read_bytes(path: str) -> bytes:
    """The whole input (a file that is one JSON document, a key); InputError when unreadable."""
    try:
        source = input_source(path)
        if isinstance(source, Pushback):
            return source.read()
        return Path(path).read_bytes()
    except OSError as exc:
        raise cannot_read(path, exc) from None


def read_json(path: str) -> Any:
    """One JSON document under the document rule (a3fast.document); InputError names its problems."""
    from .schema import loads

    try:
        return loads(read_bytes(path), source=path)
    except SchemaError as exc:
        raise InputError(exc.lines()) from None


def read_json_documents(path: str, *, strict: bool = True) -> Any:
    """A JSON array or JSON Lines file -> [(where, document)], `where` being `$[3]` or `line 4: $`
    (a3fast.framing). With strict (the default) any problem is an InputError; otherwise the
    problems come back as lines beside the documents that were read, so a caller can report both."""
    try:
        documents, found = read_documents(input_source(path))
    except OSError as exc:
        raise cannot_read(path, exc) from None
    problems = [f"{path}: {p}" for p in found]
    if strict:
        if problems:
            raise InputError(problems)
        return documents
    return documents, problems


def _read_once(path: str) -> bool:
    """Whether `path` names a file that can be read only once (a FIFO, `<(...)`, a device)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False  # the check itself says why it cannot be read
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def require_kind(path: str, *expected: str, allow_empty: bool = True, data: bytes | None = None) -> Kind:
    """The kind of the file `path` (a3fast.kinds), or InputError in one line when it is a file of
    another kind a3fast writes ("t.jsonl looks like a trace (spec records), not declarations"),
    or empty when `allow_empty` is False. `expected` are kind names (`declarations`, `trace`...);
    the first is the one the message names. A file of no kind a3fast writes passes, for its
    reader to say what is wrong with it; one that cannot be read is InputError too. `data`: the
    file's bytes, when the command has read them already."""
    try:
        kind = sniff(input_source(path) if data is None else data)
    except OSError as exc:
        raise cannot_read(path, exc) from None
    line = wrong_kind(kind, expected, display_name(path), allow_empty=allow_empty)
    if line is not None:
        raise InputError(line)
    return kind
