"""What every subcommand shares: bad-input messages, atomic output, exit codes, common options.
(The files a command reads are `a3fast.files`'.)"""
from __future__ import annotations

import errno
import io
import math
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import click

from ..errors import A3Error, Problem, SchemaError, capped, printable
from ..files import is_special, remove_stale_temps, replace_into, shown_text, temp_beside
from ..streams import silenced

EXIT_OK = 0
EXIT_NEGATIVE = 1
EXIT_BAD_INPUT = 2
#: An unexpected exception: a3fast's fault, never an answer (see `a3fast.cli.main`).
EXIT_INTERNAL = 3
#: Standard output closed by its reader before everything was written (`| head`): 128 + SIGPIPE,
#: as a shell reports a command a closed pipe stopped; never 1, which is a negative answer.
EXIT_CLOSED_OUTPUT = 141
#: What a failed write of standard output raises, by its errno: the disk or device is full or
#: failing, not a fault of a3fast's (a write to a file has no file name in the error)
WRITE_FAILURES = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


class BadInput(click.ClickException):
    """Bad input: one line per problem on standard error (the first 20, then a count of the rest:
    `a3fast.errors.capped`), exit code 2, never a traceback."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, lines: list[str] | str):
        self.lines = [lines] if isinstance(lines, str) else list(lines)
        super().__init__("\n".join(self.lines))

    def show(self, file=None) -> None:
        out = file or sys.stderr
        if out is None:     # started without standard error (2>&-): never onto standard output
            return
        try:
            for line in capped(self.lines):    # what a message quotes, shown escaped (`errors.printable`)
                click.echo(f"a3fast: {printable(line)}", file=out)
        except OSError:     # its reader is gone, or its disk full: the exit code (2) still says bad input
            silenced(out)

    @classmethod
    def from_error(cls, exc: A3Error, source: str | None = None) -> "BadInput":
        if isinstance(exc, SchemaError):
            if source and not exc.source:
                exc = exc.with_source(source)
            return cls(exc.lines())
        return cls(f"{source}: {exc}" if source else str(exc))


#: what reading or writing a standard stream the process was started without says
CLOSED_INPUT = "standard input is closed (</dev/null gives an empty one)"
CLOSED_OUTPUT = "standard output is closed (>/dev/null discards what a3fast prints)"


class _Closed(io.RawIOBase):
    """A standard stream of a process started with its descriptor closed: every use says so."""

    def __init__(self, why: str, readable: bool):
        super().__init__()
        self._why, self._readable = why, readable

    def readable(self) -> bool:
        return self._readable

    def writable(self) -> bool:
        return not self._readable

    def readinto(self, buffer) -> int:
        raise OSError(errno.EBADF, self._why)

    def write(self, data) -> int:
        raise OSError(errno.EBADF, self._why)

    def fileno(self) -> int:
        raise OSError(errno.EBADF, self._why)


def closed_stream(which: str) -> io.TextIOWrapper:
    """A stand-in for `sys.stdin` ("input") or `sys.stdout` ("output") when there is none, so a
    command using it fails naming why (exit 2), instead of meeting None or losing what it prints."""
    if which == "input":
        return io.TextIOWrapper(io.BufferedReader(_Closed(CLOSED_INPUT, True)), encoding="utf-8")
    return io.TextIOWrapper(io.BufferedWriter(_Closed(CLOSED_OUTPUT, False)), encoding="utf-8")


def closed_output() -> None:
    """Standard output was closed by its reader: end quietly with EXIT_CLOSED_OUTPUT."""
    silenced(sys.stdout)
    sys.exit(EXIT_CLOSED_OUTPUT)


def say(message: str) -> None:
    """A line on standard error. When its reader has closed it (`2>&1 | head`), the line is lost and
    the command goes on to its own exit code: the code, not the line, is what a caller reads."""
    try:
        click.echo(message, err=True)       # (nothing, when started without standard error)
    except OSError:         # its reader is gone, or its disk full
        silenced(sys.stderr)


def shown(text: str) -> str:
    """A file name or argument as a message or a JSON document can carry it (`files.shown_text`)."""
    return shown_text(text)


def rooted(problem: Problem, prefix: str) -> str:
    """A problem's path under a document's place in its file (`$[3]` or `line 4: $`)."""
    return f"{prefix}{problem.path[1:]}: expected {problem.expected}, found {problem.found}"


def _is_stdout(path: str | None) -> bool:
    return path is None or path == "-"


def _check_target(path: str) -> None:
    target = Path(path)
    if target.is_dir():
        raise BadInput(f"{path}: cannot write: {os.strerror(errno.EISDIR)}")
    parent = target.parent
    if not parent.is_dir():
        why = errno.ENOENT if not parent.exists() else errno.ENOTDIR
        raise BadInput(f"{path}: cannot write: {os.strerror(why)}")


def _prepare(path: str) -> tuple[int, str]:
    """A temporary file beside `path`, made only if `path` can be replaced by a file."""
    _check_target(path)
    try:
        return temp_beside(path)
    except OSError as exc:
        raise BadInput(f"{path}: cannot write: {exc.strerror or exc}") from None


def check_outputs(paths: Sequence[str | None]) -> None:
    """BadInput unless every output path names a distinct file that can be written (its directory
    exists, it is not a directory); standard output ('-' or None) may appear once. Commands that
    work long before they write call this first, so that a bad output path fails fast."""
    seen: dict[str, str] = {}
    stdout = 0
    for path in paths:
        if path is None or _is_stdout(path):
            stdout += 1
            if stdout > 1:
                raise BadInput("two outputs would both go to standard output; give one of them a file")
            continue
        _check_target(path)
        key = os.path.realpath(path)
        if key in seen:
            raise BadInput(f"{path}: named for two outputs; give each output its own file")
        seen[key] = path


def check_not_inputs(outputs: Sequence[str | None], inputs: Mapping[str, str | None]) -> None:
    """BadInput when an output file is one of the files the command reads (`inputs`: option ->
    path): written whole and renamed into place, it would replace what it was made from."""
    for output in outputs:
        if output is None or _is_stdout(output) or not os.path.exists(output):
            continue
        for option, path in inputs.items():
            if path is None or path == "-":
                continue
            try:
                same = os.path.samefile(output, path)
            except OSError:
                continue
            if same:
                what = f"the file of {option}" if option != path else path
                raise BadInput(f"{output}: an output must not replace {what}, which this command reads")


@contextmanager
def atomic_outputs(paths: Sequence[str | None], mode: str = "wb") -> Iterator[list[Any]]:
    """Write several outputs all or nothing: every target is checked and its temporary file made
    before anything is written, and every file is renamed into place only after all were written
    without error. A failure before the renames leaves every target untouched. A path of None or
    '-' is standard output; when other outputs go to files, what goes to standard output is held
    back until they are written, so that a run that fails writing them prints nothing. A target that
    is not a regular file (/dev/null, a FIFO) is written in place, never replaced. Those writes, and
    standard output's, come after the files are written and before they are renamed into place:
    they are what is most likely to fail (a full device, a closed pipe), and a failure there leaves
    the files untouched too."""
    check_outputs(paths)
    binary = "b" in mode
    specials = {p for p in paths if p is not None and not _is_stdout(p) and is_special(p)}
    for directory in dict.fromkeys(Path(p).parent for p in paths
                                   if p is not None and not _is_stdout(p) and p not in specials):
        remove_stale_temps(directory)
    in_place: list[tuple[str, io.BytesIO | io.StringIO]] = []
    prepared: list[tuple[str, str] | None] = []
    handles: list[Any] = []
    held: io.BytesIO | io.StringIO | None = None
    writing_stdout = False
    writing: str | None = None       # a device being written, named should its write fail
    try:
        for path in paths:
            if path is None or _is_stdout(path) or path in specials:
                prepared.append(None)
                continue
            fd, tmp = _prepare(path)
            prepared.append((path, tmp))
            handles.append(os.fdopen(fd, mode))
        files = iter(handles)
        streams = []
        for path, entry in zip(paths, prepared):
            if entry is not None:
                streams.append(next(files))
            elif path in specials:
                buffer = io.BytesIO() if binary else io.StringIO()
                in_place.append((path, buffer))
                streams.append(buffer)
            elif len(paths) == 1:
                streams.append(sys.stdout.buffer if binary else sys.stdout)
            else:
                held = io.BytesIO() if binary else io.StringIO()
                streams.append(held)
        yield streams
        for fh in handles:
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
        for path, buffer in in_place:
            writing = path
            with open(path, mode) as special:
                special.write(buffer.getvalue())
        writing = None
        if held is not None:
            writing_stdout = True
            if isinstance(held, io.BytesIO):
                sys.stdout.buffer.write(held.getvalue())
                sys.stdout.buffer.flush()
            else:
                sys.stdout.write(held.getvalue())
                sys.stdout.flush()
            writing_stdout = False
        for entry in prepared:
            if entry is not None:
                replace_into(entry[1], entry[0])
    except BaseException as exc:
        for fh in handles:
            try:
                fh.close()
            except OSError:
                pass
        for entry in prepared:
            if entry is not None:
                try:
                    os.unlink(entry[1])
                except OSError:
                    pass
        if isinstance(exc, OSError) and not isinstance(exc, BrokenPipeError):
            failed = None if writing_stdout else writing or next(
                (p for p in paths if not _is_stdout(p) and exc.filename in (None, p)), None)
            raise BadInput(f"{failed or 'output'}: cannot write: {exc.strerror or exc}") from None
        raise


@contextmanager
def atomic_output(path: str | None, mode: str = "wb") -> Iterator[Any]:
    """One output written all or nothing (see `atomic_outputs`); None or '-' is standard output."""
    with atomic_outputs([path], mode) as (stream,):
        yield stream


def stderr_is_terminal() -> bool:
    """Whether standard error is a terminal (false when the process was started without one)."""
    return sys.stderr is not None and sys.stderr.isatty()


@contextmanager
def progress(items: Iterable[Any], length: int | None, label: str) -> Iterator[Iterable[Any]]:
    """`items`, drawing a progress bar on standard error while it is consumed — only when standard
    error is a terminal, so pipes, files and logs never see one."""
    if not stderr_is_terminal():
        yield items
        return
    with click.progressbar(items, length=length, label=label, file=sys.stderr) as bar:
        yield bar


#: The most seconds any option takes: a week.
MAX_SECONDS = 7 * 24 * 3600.0


class Seconds(click.FloatRange):
    """A number of seconds within click's range, and finite: click's FloatRange lets NaN through (every
    comparison with it is false) and, with no upper bound, infinity, which the waits it sets would
    take as never or fail on (an internal error)."""

    name = "seconds"

    def __init__(self, min: float | None = None, max: float = MAX_SECONDS, **kwargs: Any) -> None:
        # a week at most unless the option says less: the waits a huge finite number sets overflow
        # the event loop's clock as infinity does
        super().__init__(min=min, max=max, **kwargs)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


class AliasedOption(click.Option):
    """An option with older spellings that still work but no longer appear in --help."""

    def __init__(self, *args: Any, aliases: Sequence[str] = (), **kwargs: Any):
        self.aliases = tuple(aliases)
        super().__init__(*args, **kwargs)

    def get_help_record(self, ctx: click.Context):
        shown = self.opts
        self.opts = [o for o in shown if o not in self.aliases]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = shown


def output_option(help: str, *, aliases: Sequence[str] = ("--out",), default: str | None = None):
    """`-o/--output FILE`, the one spelling of an output file; `aliases` are older spellings."""
    return click.option("-o", "--output", *aliases, "output", cls=AliasedOption, aliases=aliases,
                        default=default, show_default=default is not None, metavar="FILE", help=help)


def json_option(help: str):
    """`--json`: machine-readable results on standard output."""
    return click.option("--json", "as_json", is_flag=True, help=help)


@contextmanager
def progress_bar(length: int, label: str) -> Iterator[Any]:
    """An `update(n)` callable that advances a progress bar on standard error — drawn only when
    standard error is a terminal; elsewhere it does nothing."""
    if not stderr_is_terminal() or length <= 0:
        yield lambda n: None
        return
    with click.progressbar(length=length, label=label, file=sys.stderr) as bar:
        yield bar.update
