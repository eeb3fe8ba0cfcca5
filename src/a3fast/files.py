"""The files a command reads and the files a3fast writes whole.

Reading. Every reader of a3fast takes what `input_source` returns: the path itself (read a block at a time
by `a3fast.framing`), or standard input as one `framing.Pushback` stream for the whole process, so
that a command can look at the first documents of `-` to tell its kind and the reader still
streams all of it — standard input is never held whole, unless it is a JSON array (one value).

Whatever goes wrong is an `InputError`: one line per problem, each naming the file, which the
command line prints as `a3fast: ...` with exit code 2. `require_kind` is the one check of what
kind of file a command was given (`a3fast.kinds`).

Writing. Every file a3fast writes as a whole — an output of a subcommand, a fleet snapshot, a checkpoint, a
report, a cache — is written the same way: a temporary file beside its target, written, fsynced,
renamed over the target, then the directory fsynced, so that a stop at any point leaves either the
old file or the new one, never part of one, and a rename that returned survives a power loss. A
target that is not a regular file (/dev/null, a FIFO, a socket) is written in place: renaming a
file over it would destroy it.

Temporary files are named `.NAME.a3fast-tmp.<pid>.<random>`, so that one left behind by a killed
process can be recognised and removed once that process is gone (`remove_stale_temps`).

`step`, where a caller passes one, is called with a step's name and the target's path just before
each filesystem step ("write", "fsync", "rename", "fsync-dir"): a3fast.durable.statedir names its
steps so, for the crash-point tests.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from .errors import A3Error, SchemaError
from .framing import Pushback, Source, read_documents
from .kinds import Kind, sniff, wrong_kind

__all__ = ["STDIN", "InputError", "input_source", "display_name", "shown_text", "cannot_read", "read_bytes", "read_json",
           "read_json_documents", "json_of", "require_kind", "sniff_kind",
           "TEMP_MARK", "atomic_file", "write_atomic", "temp_beside", "replace_into", "fsync_directory",
           "is_special", "remove_stale_temps", "write_pieces"]

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
    if is_special(path):   # a FIFO, `<(...)`, a device: it can be read only once
        stream = _read_once_streams.get(path)
        if stream is None:
            stream = _read_once_streams[path] = Pushback(open(path, "rb"), path)
        return stream  # type: ignore[return-value]  # a binary stream
    return path


def shown_text(text: str) -> str:
    """A file name or argument as a message, a page or a JSON document can carry it: the bytes of a
    name that is not UTF-8 (which Python holds as lone surrogates) written as `\\xNN` escapes."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:        # a lone surrogate no file name decoded to
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def display_name(path: str) -> str:
    """A command-line input as messages name it: `standard input` for '-', else the path, escaped
    where it is not UTF-8 (`shown_text`)."""
    return "standard input" if path == STDIN else shown_text(path)


def cannot_read(path: str, exc: OSError) -> InputError:
    return InputError(f"{display_name(path)}: cannot read: {exc.strerror or exc}")


def why_not_a_file(path: str | Path) -> str:
    """Why `path`, which is no regular file, cannot be read as one, in the system's words where it
    has them (no such file, not a directory on the way, a directory), as opening it would say."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return exc.strerror or str(exc)
    return os.strerror(errno.EISDIR) if stat.S_ISDIR(mode) else "not a file"


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
    return json_of(read_bytes(path), path)


def json_of(data: bytes, path: str) -> Any:
    """`read_json` of the bytes of `path`, read already."""
    from .schema import loads

    try:
        return loads(data, source=path)
    except SchemaError as exc:
        raise InputError(exc.lines()) from None


def read_json_documents(path: str, *, strict: bool = True,
                        decode: Callable[[bytes], Any] | None = None) -> Any:
    """A JSON array or JSON Lines file -> [(where, document)], `where` being `$[3]` or `line 4: $`
    (a3fast.framing). With strict (the default) any problem is an InputError; otherwise the
    problems come back as lines beside the documents that were read, so a caller can report both.
    `decode`: one document's bytes to its value, as `framing.iter_documents` takes it."""
    try:
        documents, found = read_documents(input_source(path), decode=decode)
    except OSError as exc:
        raise cannot_read(path, exc) from None
    problems = [f"{path}: {p}" for p in found]
    if strict:
        if problems:
            raise InputError(problems)
        return documents
    return documents, problems


def require_kind(path: str, *expected: str, allow_empty: bool = True, data: bytes | None = None) -> Kind:
    """The kind of the file `path` (a3fast.kinds), or InputError in one line when it is a file of
    another kind a3fast writes ("t.jsonl looks like a trace (spec records), not declarations"),
    or empty when `allow_empty` is False. `expected` are kind names (`declarations`, `trace`...);
    the first is the one the message names. A file of no kind a3fast writes passes, for its
    reader to say what is wrong with it; one that cannot be read is InputError too. `data`: the
    file's bytes, when the command has read them already."""
    kind = sniff_kind(path) if data is None else sniff(data)
    line = wrong_kind(kind, expected, display_name(path), allow_empty=allow_empty)
    if line is not None:
        raise InputError(line)
    return kind


def sniff_kind(path: str) -> Kind:
    """The kind of the file `path` (a3fast.kinds.sniff: from its first bytes; standard input for
    "-", which is given back to its reader); InputError in one line when it cannot be read."""
    try:
        return sniff(input_source(path))
    except OSError as exc:
        raise cannot_read(path, exc) from None


# -- writing a file whole ---------------------------------------------------------------------

#: Marks a temporary file: `.NAME` + TEMP_MARK + `<pid>.<random>`.
TEMP_MARK = ".a3fast-tmp."
_TEMP_NAME = re.compile(r"\..+" + re.escape(TEMP_MARK) + r"([0-9]+)\.[A-Za-z0-9_]+")

Step = Callable[[str, Path], None]


def _no_step(name: str, path: Path) -> None:
    pass


def is_special(path: str | os.PathLike) -> bool:
    """Whether `path` exists and is neither a regular file nor a directory (a device such as
    /dev/null, a FIFO, a socket): it is written in place, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def temp_beside(path: str | os.PathLike) -> tuple[int, str]:
    """A new temporary file in the directory of `path` (so the rename never crosses a filesystem),
    open for writing, with the permissions of an ordinary new file: (fd, its path)."""
    target = Path(path)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}{TEMP_MARK}{os.getpid()}.", dir=str(target.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temp, 0o666 & ~umask)   # mkstemp makes it private
    return fd, temp


def fsync_directory(directory: str | os.PathLike) -> None:
    """Make the directory's entries (a rename, a new or removed file) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_into(temp: str | os.PathLike, target: str | os.PathLike, step: Step = _no_step) -> None:
    """Rename a written and fsynced temporary file over its target, then fsync the directory."""
    target = Path(target)
    step("rename", target)
    os.replace(temp, target)
    step("fsync-dir", target.parent)
    fsync_directory(target.parent)


@contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb", *, step: Step = _no_step) -> Iterator[IO[Any]]:
    """A file to write `path` with, whole or not at all: what the block writes lands in `path` only
    if the block ends without an exception (fsynced, renamed into place, the directory fsynced);
    otherwise the temporary file is removed and `path` is untouched. A special file is written in
    place. `mode` is "wb" or "w" (text in UTF-8)."""
    if mode not in ("wb", "w"):
        raise ValueError(f"mode must be 'wb' or 'w', not {mode!r}")
    target = Path(path)
    encoding = None if "b" in mode else "utf-8"
    if is_special(target):
        with open(target, mode, encoding=encoding) as special:
            yield special
        return
    step("write", target)
    fd, temp = temp_beside(target)
    try:
        with os.fdopen(fd, mode, encoding=encoding) as fh:
            yield fh
            fh.flush()
            step("fsync", target)
            os.fsync(fh.fileno())
        replace_into(temp, target, step)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise


def write_atomic(path: str | os.PathLike, data: bytes | str, *, step: Step = _no_step) -> None:
    """Write `data` to `path` whole or not at all (see `atomic_file`)."""
    with atomic_file(path, "wb" if isinstance(data, bytes) else "w", step=step) as fh:
        fh.write(data)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0  # another user's live process (or a pid we cannot ask about): keep its file
    return True


def remove_stale_temps(directory: str | Path) -> list[Path]:
    """Remove the temporary files in `directory` whose writing process no longer runs (a process
    killed mid-write leaves one behind); returns what was removed. Never raises."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(str(directory)))
    except OSError:
        return removed
    for entry in entries:
        match = _TEMP_NAME.fullmatch(entry.name)
        if match is None or _pid_alive(int(match.group(1))):
            continue
        try:
            if entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            pass
    return removed


def _iov_max() -> int:
    """Pieces a single `os.writev` is given, at most: the system's IOV_MAX (1,024 on Linux), at
    most 1,024; 1,024 where it sets no limit (-1), 16 (the least POSIX allows) where it is unknown."""
    try:
        limit = os.sysconf("SC_IOV_MAX")
    except (AttributeError, ValueError, OSError):
        return 16
    return 1024 if limit <= 0 else min(limit, 1024)


_IOV_MAX = _iov_max()


def write_pieces(fd: int, pieces: list[bytes]) -> int:
    """Write `pieces` to `fd` in order, all of each, without joining them into one copy first:
    gathered writes of up to IOV_MAX pieces (where `os.writev` exists), each written piece skipped,
    a piece written in part finished by plain writes. Returns the bytes written."""
    writev = getattr(os, "writev", None)
    total, at = 0, 0
    while at < len(pieces):
        taken = 0
        if writev is not None and len(pieces) - at > 1:
            batch = pieces[at:at + _IOV_MAX]
            taken = writev(fd, batch)
            total += taken
            if taken == sum(map(len, batch)):       # all of them: the usual case
                at += len(batch)
                continue
            start = at
            while at < len(pieces) and taken >= len(pieces[at]):    # the pieces written whole
                taken -= len(pieces[at])
                at += 1
            if at >= len(pieces) or (taken == 0 and at > start):
                continue
        # the piece at `at`, from `taken` on, by plain writes
        view = memoryview(pieces[at])[taken:]
        while view:
            written = os.write(fd, view)
            total += written
            view = view[written:]
        at += 1
    return total
