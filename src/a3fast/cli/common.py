"""What every subcommand shares: reading JSON input with precise errors, atomic output, exit codes."""
from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import click

from ..errors import A3Error, Problem, SchemaError
from ..schema import loads

EXIT_OK = 0
EXIT_NEGATIVE = 1
EXIT_BAD_INPUT = 2


class BadInput(click.ClickException):
    """Bad input: one line per problem on standard error, exit code 2, never a traceback."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, lines: list[str] | str):
        self.lines = [lines] if isinstance(lines, str) else list(lines)
        super().__init__("\n".join(self.lines))

    def show(self, file=None) -> None:
        out = file or sys.stderr
        for line in self.lines:
            click.echo(f"a3fast: {line}", file=out)

    @classmethod
    def from_error(cls, exc: A3Error, source: str | None = None) -> "BadInput":
        if isinstance(exc, SchemaError):
            if source and not exc.source:
                exc = exc.with_source(source)
            return cls(exc.lines())
        return cls(f"{source}: {exc}" if source else str(exc))


def read_bytes(path: str) -> bytes:
    """Read a file (or standard input for '-'); an unreadable file is BadInput."""
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_json(path: str) -> Any:
    try:
        return loads(read_bytes(path), source=path)
    except SchemaError as exc:
        raise BadInput.from_error(exc) from None


def read_json_documents(path: str, *, strict: bool = True) -> list[tuple[str, Any]] | tuple[list, list[str]]:
    """A JSON array or JSON Lines file -> [(where, document)], `where` being `$[3]` or `line 4: $`.

    With strict (the default) any line that is not JSON is BadInput; otherwise the lines that are
    not JSON come back as problems beside the documents that parsed, so a caller can report both.
    """
    data = read_bytes(path)
    if data.lstrip().startswith(b"["):
        docs = read_json_path_array(data, path)
        out = [(f"$[{i}]", d) for i, d in enumerate(docs)]
        return out if strict else (out, [])
    out, problems = [], []
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((f"line {lineno}: $", loads(line)))
        except SchemaError as exc:
            problems += [f"{path}: line {lineno}: $: expected valid JSON, found {p.found}" for p in exc.problems]
    if strict:
        if problems:
            raise BadInput(problems)
        return out
    return out, problems


def read_json_path_array(data: bytes, path: str) -> list[Any]:
    try:
        docs = loads(data, source=path)
    except SchemaError as exc:
        raise BadInput.from_error(exc) from None
    if not isinstance(docs, list):
        raise BadInput(f"{path}: $: expected an array or JSON Lines of objects")
    return docs


def rooted(problem: Problem, prefix: str) -> str:
    """A problem's path under a document's place in its file (`$[3]` or `line 4: $`)."""
    return f"{prefix}{problem.path[1:]}: expected {problem.expected}, found {problem.found}"


@contextmanager
def atomic_output(path: str | None, mode: str = "wb") -> Iterator[Any]:
    """Write to a temporary file beside `path` and rename it into place only on success, so that a
    failure never leaves a half-written file; None or '-' writes to standard output."""
    if path is None or path == "-":
        yield sys.stdout.buffer if "b" in mode else sys.stdout
        return
    target = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=str(target.parent))
    except OSError as exc:
        raise BadInput(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as an ordinary new file; mkstemp makes it private
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise BadInput(f"{path}: cannot write: {exc.strerror or exc}") from None
        raise
