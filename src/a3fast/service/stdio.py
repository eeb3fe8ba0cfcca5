"""`a3fast serve --stdio`: one JSON request per line in, one JSON response per line out.

`{"op": ..., "id"?: any, ...fields}` -> `{"id", "ok": true, ...result}` or
`{"id", "ok": false, "status": 4xx, "problems": [...]}`. The operations are the HTTP API's
(`operations.Operations`); requests are answered in order, each after its change is durable.
"""
from __future__ import annotations

import asyncio
import fcntl
import io
import os
import stat
import logging
import sys
import threading
from typing import Any, Awaitable, BinaryIO

import msgspec
import orjson

from ..durable.journal import JournalFailed
from ..errors import describe
from ..files import write_pieces
from ..fleet.bulk_load import collector_paused
from ..framing import blank
from .operations import OPS, Operations, PlaceAnswer, PreparedPlace, decode_place_request
from .problems import ServiceError, check_bounds, parse_json, problem
from .refusals import INTERNAL, refusal

__all__ = ["serve_stdio", "serve_stdio_sync", "answer", "widen_pipes", "StopRequest", "Stopped"]

log = logging.getLogger("a3fast.serve")


def _refused(rid: Any, exc: BaseException) -> bytes:
    """The answer to a refused request, by the table the HTTP shell uses (`refusals`), so the same
    error has the same status and problems."""
    error = refusal(exc)
    if error is None:
        log.exception("unexpected error answering a stdio request", exc_info=exc)
        error = INTERNAL
    return orjson.dumps({"id": rid, "ok": False, "status": error.status, "problems": error.problems})


#: A place answer's line up to its records, around the request's id as JSON.
_PLACED_HEAD = b'{"id":%b,"ok":true,"records":'


def _ok(rid: Any, result: dict | PlaceAnswer) -> bytes:
    """The answer to a request an operation answered with `result`."""
    if isinstance(result, PlaceAnswer):  # its records framed into the line as they are, one copy
        return result.framed(_PLACED_HEAD % orjson.dumps(rid), b"}")
    return orjson.dumps({"id": rid, "ok": True, **result})


def _request(ops: Operations, line: bytes) -> tuple[Any, Any, Exception | None]:
    """(id, request, None) of one request line, or (id if known, None, the error refusing it).
    A place request is decoded straight into its typed fields where it can be, its requirements
    prepared from their text (PreparedPlace)."""
    place = decode_place_request(line)
    if place is not None and place.op is not None:      # a line without op goes the general way
        prepared = ops.prepared_place(place)
        if prepared is not None:
            return place.id, prepared, None
    rid: Any = None
    try:
        request = parse_json(line)
        if not isinstance(request, dict):
            raise ServiceError(400, [problem("$", 'an object {"op", ...}', "another value")])
        rid = request.get("id")
        op = request.get("op")
        if not isinstance(op, str) or op not in OPS:
            raise ServiceError(400, [problem("$.op", "one of " + ", ".join(OPS),
                                             "nothing" if "op" not in request else describe(op))])
        return rid, request, None
    except Exception as exc:
        return (rid if rid is not None else _id_of(line)), None, exc


class _IdOnly(msgspec.Struct):
    id: Any = None


#: a request line's `id` member alone, the rest of the line skipped unbuilt
_decode_id = msgspec.json.Decoder(_IdOnly).decode


def _id_of(line: bytes) -> Any:
    """The `id` of a line refused before its id was read: a JSON object with a member past the
    service's bounds (a string too long, nesting too deep) still says which request its answer
    answers, when the id itself is within them and can be written back. None otherwise."""
    try:
        rid = _decode_id(line).id
        check_bounds(rid, "$.id")
        orjson.dumps(rid)
    except Exception:
        return None
    return rid


async def answer(ops: Operations, line: bytes) -> bytes:
    """The response line (without newline) to one request line."""
    rid, request, error = _request(ops, line)
    try:
        if request is None:
            raise error  # type: ignore[misc]
        if ops.state.failed is not None:
            raise JournalFailed(ops.state.failed)
        op = "place" if type(request) is PreparedPlace else request["op"]
        return _ok(rid, await getattr(ops, OPS[op])(request))
    except Exception as exc:
        return _refused(rid, exc)


async def _answer_places(ops: Operations, places: list[tuple[Any, Any]]) -> list[bytes]:
    rids, requests = zip(*places)
    results = await ops.place_batch(list(requests))
    dumps = orjson.dumps
    out = []
    for rid, result in zip(rids, results):
        if isinstance(result, Exception):
            out.append(_refused(rid, result))
        else:                                # `_ok`'s framing of a PlaceAnswer, without its call
            out.append(result.framed(_PLACED_HEAD % dumps(rid), b"}"))
    return out


async def _answer_one(ops: Operations, line: bytes) -> list[bytes]:
    return [await answer(ops, line)]


async def answer_batch(ops: Operations, lines: list[bytes], together: bool = False) -> list[bytes]:
    """The response lines to request lines that arrived together, in order. Each run of consecutive
    `place` requests is answered by `Operations.place_batch` (the fleet's batch path; the same
    answers, records and trace as one at a time); any other request is answered alone, in its turn.
    `together` (on an event loop): every step is started in order before any is awaited, so each
    applies its change before the next starts and all share the journal's next group commit."""
    steps: list[Awaitable[list[bytes]]] = []
    places: list[tuple[Any, Any]] = []
    for line in lines:
        rid, request, _ = _request(ops, line)
        if type(request) is PreparedPlace or request is not None and request["op"] == "place":
            places.append((rid, request))
            continue
        if places:
            steps.append(_answer_places(ops, places))
            places = []
        steps.append(_answer_one(ops, line))
    if places:
        steps.append(_answer_places(ops, places))
    if together:
        steps = [asyncio.ensure_future(step) for step in steps]
    out: list[bytes] = []
    for step in steps:
        out.extend(await step)
    return out


#: Bytes asked of standard input at a time: every complete line of what arrives is answered, and
#: the answers are written together (one gathered write, a few for more than 512 answers) and flushed.
READ_SIZE = 1 << 16


def _now(coro):
    """Run a coroutine that never suspends (an operation without a journal) to its result."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError("a stdio operation waited although the service keeps no journal")


class _Lines:
    """Complete request lines from chunks of input; a line longer than `max_line` becomes None
    (answered 413) and the rest of it is dropped as it arrives. A carriage return that ends a line
    (a CRLF line end) is not counted against `max_line`: it is read as the JSON whitespace it is.

    Linear in the input: each chunk is searched once for newlines (twice when one of its lines is
    too long: split in one call first, then walked), and the pieces of a line that spans chunks
    are kept in a list and joined once, when its newline arrives. A chunk that ends a line carried
    into it is searched for that line's newline, and the rest of it split in one call: a stream of
    requests read in fixed-size chunks carries a line into nearly every chunk."""

    def __init__(self, max_line: int):
        self.max_line = max_line
        self.pending: list[bytes] = []
        self.pending_size = 0
        self.dropping = False

    def feed(self, chunk: bytes) -> list[bytes | None]:
        lines: list[bytes | None] = []
        if self.pending or self.dropping:
            # the line carried in ends at the chunk's first newline; the rest is read as a chunk
            # with nothing carried into it
            end = chunk.find(b"\n")
            if end < 0:
                if not self.dropping:
                    self._carry(chunk, lines)
                return lines
            if self.dropping:
                self.dropping = False
            elif not self._fits(self.pending_size + end, chunk[end - 1:end] if end else self.pending[-1][-1:]):
                lines.append(None)
            else:
                self.pending.append(chunk[:end])
                lines.append(b"".join(self.pending))
            self.pending, self.pending_size = [], 0
            chunk = chunk[end + 1:]
        # the usual chunk: split in one call, kept when no line is long
        parts: list[bytes | None] = chunk.split(b"\n")    # type: ignore[assignment]
        rest: bytes = parts.pop()                           # type: ignore[assignment]
        if not parts or max(map(len, parts)) <= self.max_line:     # type: ignore[arg-type]
            if lines:
                lines += parts
            else:
                lines = parts
            if rest:
                self._carry(rest, lines)
            return lines
        # a line too long among them: walked newline by newline
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            lines.append(chunk[start:end] if self._fits(end - start, chunk[end - 1:end]) else None)
            start = end + 1
        if rest:
            self._carry(rest, lines)
        return lines

    def _fits(self, size: int, last: bytes) -> bool:
        """Whether a line of `size` bytes whose last is `last` is within `max_line`, a final
        carriage return not counted."""
        return size <= self.max_line or (size == self.max_line + 1 and last == b"\r")

    def _carry(self, piece: bytes, lines: list[bytes | None]) -> None:
        """Keep `piece`, part of a line whose newline has not arrived; once the line is too long
        (a byte past `max_line` may still be the carriage return before its newline), None goes
        into `lines` (answered 413) and the rest of it is dropped as it arrives."""
        self.pending.append(piece)
        self.pending_size += len(piece)
        if self.pending_size > self.max_line + 1:
            lines.append(None)
            self.dropping = True
            self.pending, self.pending_size = [], 0

    def end(self) -> list[bytes | None]:
        """The last line, when the input ends without a newline."""
        rest = b"".join(self.pending)
        self.pending, self.pending_size = [], 0
        if not rest or self.dropping:
            return []
        return [rest if self._fits(len(rest), rest[-1:]) else None]


def _too_long(max_line: int) -> bytes:
    return orjson.dumps({"id": None, "ok": False, "status": 413, "problems": [
        problem("$", f"a request line of at most {max_line} bytes", "more")]})


async def _answers(ops: Operations, batch: list[bytes | None], max_line: int,
                   together: bool = False) -> list[bytes]:
    """The answers to a batch of lines (None: a line too long), in order; blank lines are skipped."""
    out: list[bytes] = []
    requests: list[bytes] = []
    for line in batch:
        if line is None:
            out.extend(await answer_batch(ops, requests, together))
            requests = []
            out.append(_too_long(max_line))
        elif not blank(line):
            requests.append(line)
    out.extend(await answer_batch(ops, requests, together))
    return out


class _InputReader:
    """Standard input read on a daemon thread, one chunk when asked (`read`, a future of the loop):
    a stop need not wait for a read a client may never complete, where a worker of the loop's
    executor is joined when the loop closes, and the process with it."""

    def __init__(self, stdin: BinaryIO, loop: asyncio.AbstractEventLoop):
        self._stdin = stdin
        # the descriptor itself where there is one: a daemon thread left in a buffered file's read
        # holds its lock, which the interpreter's shutdown then cannot take (a fatal error)
        try:
            self._fd: int | None = stdin.fileno()
        except (AttributeError, OSError, ValueError):
            self._fd = None
        self._loop = loop
        self._asked = threading.Semaphore(0)
        self._future: asyncio.Future | None = None
        threading.Thread(target=self._run, name="a3fast-stdin", daemon=True).start()

    def read(self) -> asyncio.Future:
        self._future = self._loop.create_future()
        self._asked.release()
        return self._future

    def _run(self) -> None:
        while True:
            self._asked.acquire()
            future = self._future
            assert future is not None       # `read` sets it before it lets the thread read
            failure: BaseException | None = None
            try:
                chunk = os.read(self._fd, READ_SIZE) if self._fd is not None else _read(self._stdin)
            except Exception as exc:       # handed to the loop, raised where the read is awaited
                chunk, failure = b"", exc
            try:
                self._loop.call_soon_threadsafe(_settle, future, chunk, failure)
            except RuntimeError:           # the loop is closed: the service has stopped
                return
            if not chunk:
                return


def _settle(future: asyncio.Future, chunk: bytes, failure: BaseException | None) -> None:
    if future.done():      # a read given up on (a stop)
        return
    if failure is not None:
        future.set_exception(failure)
    else:
        future.set_result(chunk)


def _read(stdin: BinaryIO) -> bytes:
    read1 = getattr(stdin, "read1", None)
    return read1(READ_SIZE) if read1 is not None else stdin.read(READ_SIZE)


#: The pipe buffer asked for on standard input and output when they are pipes (Linux; at most
#: /proc/sys/fs/pipe-max-size): a batch's answers go down in a few writes instead of one 64 KiB
#: pipe's worth at a time, each waiting for the reader.
PIPE_SIZE = 1 << 20


def widen_pipes(*files: BinaryIO) -> None:
    """Ask for PIPE_SIZE buffers on those of `files` that are pipes; a system that refuses keeps
    its own size (the answers are the same, only written in more pieces)."""
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if set_size is None:
        return
    for f in files:
        try:
            fd = f.fileno()
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                fcntl.fcntl(fd, set_size, PIPE_SIZE)
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            pass


def _descriptor(stdout: BinaryIO) -> int | None:
    """The file descriptor under `stdout` when it has one (then answers are written to it in
    gathered writes, not joined into one more copy first), else None."""
    try:
        return stdout.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None


def _write_answers(stdout: BinaryIO, out: list[bytes], fd: int | None = None) -> None:
    """A batch's answers, each on its line, then flushed: with `fd` (`stdout`'s own descriptor),
    written from the answers themselves in gathered writes, after whatever `stdout` still buffers."""
    if fd is None:
        stdout.write(b"\n".join(out))
        stdout.write(b"\n")
        stdout.flush()
        return
    stdout.flush()
    pieces: list[bytes] = [b"\n"] * (2 * len(out))
    pieces[::2] = out
    write_pieces(fd, pieces)


class Stopped(BaseException):
    """A stop asked while the service waited for input (`StopRequest.ask` in a signal handler)."""


class StopRequest:
    """A stop (SIGTERM, SIGINT) asked of a stdio service: the batch being answered is finished, its
    changes applied and its answers written; only a wait for more input is broken off, since a
    client may never send any. `ask` is the signal handler's work: in the plain loop it raises
    Stopped if the loop is reading (the read is given up), in the event loop's it cancels the read
    awaited."""

    def __init__(self) -> None:
        self.asked = False
        self.reading = False                          # the plain loop is in its read
        self.waiting: asyncio.Future | None = None    # the read the event loop's service awaits

    def ask(self, *_: Any) -> None:
        self.asked = True
        if self.waiting is not None:
            self.waiting.cancel()
        elif self.reading:
            raise Stopped


def serve_stdio_sync(ops: Operations, stdin: BinaryIO, stdout: BinaryIO, max_line: int,
                     stop: StopRequest | None = None) -> None:
    """Answer request lines until end of input (or a `stop`), without an event loop: for a service
    that keeps no journal, where no operation waits for anything. Each batch of input that has
    arrived is answered at once, its answers written together and flushed, so a client that sends
    one request and waits is never stalled, and one that sends many gets them answered together."""
    lines = _Lines(max_line)
    fd = _descriptor(stdout)
    stop = stop or StopRequest()
    while True:
        stop.reading = True
        try:
            if stop.asked:      # asked while the last batch was answered
                return
            chunk = _read(stdin)
        except Stopped:
            return
        finally:
            stop.reading = False
        batch = lines.feed(chunk) if chunk else lines.end()
        # a batch's requests, placements and answers all live until its answers are written: the
        # cyclic collector, paused meanwhile, would scan them again and again for nothing
        with collector_paused():
            out = _now(_answers(ops, batch, max_line))
            if out:
                ops.state.flush_trace()
                _write_answers(stdout, out, fd)
        if not chunk:
            return


async def serve_stdio(ops: Operations, stdin: BinaryIO, stdout: BinaryIO, max_line: int,
                      stop: StopRequest | None = None) -> None:
    """Answer request lines until end of input (or a `stop`). Lines longer than `max_line` are
    answered 413.

    Each batch of input that has arrived is read with one call on the reader's thread; its requests
    are started in order (each applies its change before the next starts) and share the journal's
    next group commit; their answers are written together once all are durable."""
    loop = asyncio.get_running_loop()
    lines = _Lines(max_line)
    fd = _descriptor(stdout)
    reader = _InputReader(stdin, loop)
    stop = stop or StopRequest()
    while True:
        if stop.asked:          # asked while the last batch was answered
            return
        stop.waiting = waiting = reader.read()
        try:
            chunk = await waiting
        except asyncio.CancelledError:
            if stop.asked and waiting.cancelled():
                return
            raise
        finally:
            stop.waiting = None
        batch = lines.feed(chunk) if chunk else lines.end()
        out = await _answers(ops, batch, max_line, together=True)
        if out:
            _write_answers(stdout, out, fd)
        if not chunk:
            return
