"""Errors a caller can act on: each problem names the JSON path, what was expected and what was found."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable

__all__ = ["A3Error", "Problem", "SchemaError", "FleetError", "SnapshotError", "SnapshotUnreadable",
           "describe", "quoted", "printable", "json_path", "PROBLEMS_SHOWN", "capped", "os_error_line"]


class A3Error(ValueError):
    """Base class of every error a3fast raises on purpose."""

    def __reduce__(self) -> Any:
        # pickled as what it holds, not by calling its class with its message: a subclass made
        # from problems or a shard number (a shard's refusal crosses a process pickled) would be
        # made again from the message's characters, or not at all
        return (_rebuilt, (type(self), self.args, self.__dict__))


def _rebuilt(cls: type[BaseException], args: tuple, state: dict) -> Any:
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc


def describe(value: Any, limit: int = 60) -> str:
    """A short description of a JSON value for error messages (hostile values stay short)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and value.bit_length() > 256:
        # repr of an int of more than 4,300 digits raises ValueError (CPython's int_max_str_digits)
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    if isinstance(value, (int, float)):
        text = repr(value)
        return text if len(text) <= limit else text[:limit] + "…"
    if isinstance(value, str):
        text = value if len(value) <= limit else value[:limit] + "…"
        return "string " + repr(text)
    if isinstance(value, dict):
        return f"object with {len(value)} field{'s' if len(value) != 1 else ''}"
    if isinstance(value, tuple):  # only a Python caller passes one: JSON's arrays are lists here
        return f"a tuple of {len(value)} (give an array as a list)"
    if isinstance(value, list):
        return f"array of {len(value)}"
    return type(value).__name__


def quoted(text: str, limit: int = 60) -> str:
    """`text` quoted as `repr` quotes it, cut past `limit` characters: a name from the input named
    in a message (a hostile one stays short)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "…"


def printable(text: str) -> str:
    """`text` with every character that is not printable (control characters, line and paragraph
    separators, bidirectional and other format characters) written as its Python escape, so that a
    line quoting hostile input stays one line that shows what it holds. A byte of a file name that
    is not UTF-8 (held as a lone surrogate, U+DC80 to U+DCFF) is written as the byte, `\xff`."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else
                   f"\\x{ord(ch) - 0xDC00:02x}" if "\udc80" <= ch <= "\udcff" else repr(ch)[1:-1]
                   for ch in text)


def json_path(base: str, key: str | int) -> str:
    """Extend a JSON path: `$.a` + 0 -> `$.a[0]`; keys that are not identifiers are quoted."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    if key.isidentifier():
        return f"{base}.{key}"
    return f"{base}[{key!r}]"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a document."""

    path: str
    expected: str
    found: str

    def __str__(self) -> str:
        return f"{self.path}: expected {self.expected}, found {self.found}"


class SchemaError(A3Error):
    """A document that does not parse; carries every problem found, not just the first."""

    def __init__(self, problems: list[Problem], source: str | None = None):
        self.problems = list(problems)
        self.source = source
        super().__init__(self._text())


    def _text(self) -> str:
        return "\n".join(self.lines())

    def lines(self) -> list[str]:
        """A line per problem, whatever its source or texts hold (a file name with a newline in it
        is one problem's, not the start of another)."""
        prefix = f"{self.source}: " if self.source else ""
        return [prefix + str(p) for p in self.problems]

    def with_source(self, source: str | None, path_prefix: str = "") -> "SchemaError":
        """The same problems, attributed to a file (and re-rooted under `path_prefix`)."""
        problems = self.problems
        if path_prefix:
            problems = [Problem(path_prefix + p.path[1:], p.expected, p.found) for p in problems]
        return SchemaError(problems, source)


class FleetError(A3Error):
    """A fleet operation that cannot be done (unknown agent, a name taken in another namespace)."""


class SnapshotError(A3Error):
    """A fleet snapshot that cannot be read back exactly: not a snapshot, another format version,
    cut short, or damaged (docs/snapshot.md)."""


class SnapshotUnreadable(SnapshotError):
    """A snapshot file the system does not read (its permissions, a directory in its place): what
    to mend is the file's place, not what it holds. `reason` is the system's word for it."""

    def __init__(self, path: Any, reason: str):
        super().__init__(f"{path}: cannot read the snapshot ({reason})")
        self.reason = reason


#: How many problems a list of them shows before it counts the rest.
PROBLEMS_SHOWN = 20


def capped(lines: Iterable[str], shown: int = PROBLEMS_SHOWN) -> list[str]:
    """The first `shown` lines of a list of problems, then one line counting the rest
    ("… and 5,352 more problems"): a file of the wrong kind or a thousand broken documents is told
    in a screenful, and the count says how far it goes."""
    out: list[str] = []
    more = 0
    for line in lines:
        if len(out) < shown:
            out.append(line)
        else:
            more += 1
    if more:
        out.append(f"… and {more:,} more problem{'s' if more != 1 else ''}")
    return out


def os_error_line(exc: OSError) -> str:
    """An OSError in the system's words, after the file it names (`state/lock: Permission
    denied`), where `str` gives Python's form (`[Errno 13] Permission denied: 'state/lock'`)."""
    if exc.filename is None:
        return exc.strerror or str(exc)
    return f"{printable(os.fsdecode(exc.filename))}: {exc.strerror or exc}"


def cannot_start_lines(failure: str) -> list[str]:
    """Why a service cannot start, as the lines it prints: each carries the `a3fast:` prefix, so a log
    that interleaves other programs' lines still says whose they are, and the problems are capped."""
    first, *more = capped(failure.splitlines()) or [""]
    return [f"a3fast: cannot start: {first}", *(f"a3fast: {line}" for line in more)]
