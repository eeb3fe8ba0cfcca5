"""`a3fast serve --stdio`: one JSON request per line in, one JSON response per line out.

`{"op": ..., "id"?: any, ...fields}` -> `{"id", "ok": true, ...result}` or
`{"id", "ok": false, "status": 4xx, "problems": [...]}`. The operations are the HTTP API's
(`operations.Operations`); requests are answered in order, each after its change is durable.
"""
from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any, BinaryIO

import orjson

from ..journal import JournalFailed
from .operations import OPS, Operations
from .problems import ServiceError, parse_json, problem
from .refusals import INTERNAL, refusal

__all__ = ["serve_stdio", "serve_stdio_sync", "answer"]

log = logging.getLogger("a3fast.serve")


async def answer(ops: Operations, line: bytes) -> bytes:
    """The response line (without newline) to one request line. Errors are answered by the table
    the HTTP shell uses (`refusals`), so the same error has the same status and problems."""
    rid: Any = None
    try:
        request = parse_json(line)
        if not isinstance(request, dict):
            raise ServiceError(400, [problem("$", 'an object {"op", ...}', "another value")])
        rid = request.get("id")
        op = request.get("op")
        method = OPS.get(op) if isinstance(op, str) else None
        if method is None:
            raise ServiceError(400, [problem("$.op", "one of " + ", ".join(OPS), repr(op)[:60])])
        if ops.state.failed is not None:
            raise JournalFailed(ops.state.failed)
        result = await getattr(ops, method)(request)
        return orjson.dumps({"id": rid, "ok": True, **result})
    except Exception as exc:
        error = refusal(exc)
        if error is None:
            log.exception("unexpected error answering a stdio request")
            error = INTERNAL
        return orjson.dumps({"id": rid, "ok": False, "status": error.status, "problems": error.problems})


#: Bytes asked of standard input at a time: every complete line of what arrives is answered, and
#: the answers are written with one write and one flush.
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
    (answered 413) and the rest of it is dropped as it arrives.

    Linear in the input: each chunk is searched once for newlines, and the pieces of a line that
    spans chunks are kept in a list and joined once, when its newline arrives."""

    def __init__(self, max_line: int):
        self.max_line = max_line
        self.pending: list[bytes] = []
        self.pending_size = 0
        self.dropping = False

    def feed(self, chunk: bytes) -> list[bytes | None]:
        lines: list[bytes | None] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                break
            if self.dropping:
                self.dropping = False
            elif self.pending_size + end - start > self.max_line:
                lines.append(None)
            elif self.pending:
                self.pending.append(chunk[start:end])
                lines.append(b"".join(self.pending))
            else:
                lines.append(chunk[start:end])
            self.pending, self.pending_size = [], 0
            start = end + 1
        if start < len(chunk) and not self.dropping:
            self.pending.append(chunk[start:])
            self.pending_size += len(chunk) - start
            if self.pending_size > self.max_line:
                lines.append(None)
                self.dropping = True
                self.pending, self.pending_size = [], 0
        return lines

    def end(self) -> list[bytes | None]:
        """The last line, when the input ends without a newline."""
        rest = b"".join(self.pending)
        self.pending, self.pending_size = [], 0
        return [rest] if rest and not self.dropping else []


def _too_long(max_line: int) -> bytes:
    return orjson.dumps({"id": None, "ok": False, "status": 413, "problems": [
        problem("$", f"a request line of at most {max_line} bytes", "more")]})


def _read(stdin: BinaryIO) -> bytes:
    read1 = getattr(stdin, "read1", None)
    return read1(READ_SIZE) if read1 is not None else stdin.read(READ_SIZE)


def serve_stdio_sync(ops: Operations, stdin: BinaryIO, stdout: BinaryIO, max_line: int) -> None:
    """Answer request lines until end of input, without an event loop: for a service that keeps no
    journal, where no operation waits for anything. Each batch of input that has arrived is answered
    with one write and one flush, so a client that sends one request and waits is never stalled,
    and one that sends many gets them answered together."""
    lines = _Lines(max_line)
    while True:
        chunk = _read(stdin)
        batch = lines.feed(chunk) if chunk else lines.end()
        out = [_too_long(max_line) if line is None else _now(answer(ops, line))
               for line in batch if line is None or line.strip()]
        if out:
            ops.state.flush_trace()
            stdout.write(b"\n".join(out) + b"\n")
            stdout.flush()
        if not chunk:
            return


async def serve_stdio(ops: Operations, stdin: BinaryIO, stdout: BinaryIO, max_line: int) -> None:
    """Answer request lines until end of input. Lines longer than `max_line` are answered 413.

    Each batch of input that has arrived is read with one call on a worker thread; its requests are
    started in order (each applies its change before the next starts) and share the journal's next
    group commit; their answers are written together once all are durable."""
    loop = asyncio.get_running_loop()
    lines = _Lines(max_line)
    while True:
        chunk = await loop.run_in_executor(None, _read, stdin)
        batch = lines.feed(chunk) if chunk else lines.end()
        tasks = [None if line is None else asyncio.ensure_future(answer(ops, line))
                 for line in batch if line is None or line.strip()]
        out = [_too_long(max_line) if task is None else await task for task in tasks]
        if out:
            stdout.write(b"\n".join(out) + b"\n")
            stdout.flush()
        if not chunk:
            return
