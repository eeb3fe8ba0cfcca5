"""A keep-alive HTTP/1.1 load client on asyncio, for benchmarks against a server on 127.0.0.1.

Two ways to drive a server, each bounded in requests and in time (a request still open at the
deadline is counted as missed, never awaited):

- `closed_loop`: saturation; each of `connections` connections sends its next request as soon as
  the previous one is answered;
- `fixed_rate`: open loop at a given rate; a request's latency counts from when it was due, so a
  server that falls behind shows it in the latency rather than in a lower rate.

Each connection is an `asyncio.Protocol` that finds the end of an answer by its Content-Length in
the bytes as they arrive: no stream reader or task per request, so the client costs the server
less of a shared machine than a stream client would (its own CPU time is reported beside its
figures). Requests are whole HTTP/1.1 messages made once by `request_bytes`. Run it on its own
event loop (`run`), in a process or thread apart from the server's.
"""
from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Coroutine, Sequence

__all__ = ["request_bytes", "percentile", "run", "ClosedLoop", "FixedRate", "closed_loop", "fixed_rate",
           "NotOk", "HOST"]

HOST = "127.0.0.1"
_LENGTH = re.compile(rb"(?i)\r\ncontent-length: *(\d+)")


def request_bytes(path: str, body: bytes | None, host: str = HOST) -> bytes:
    """One whole HTTP/1.1 request: a GET without a body, else a POST of JSON."""
    if body is None:
        return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    return (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """The coroutine on a new event loop of its own (uvloop's when installed, as the server's)."""
    loop: asyncio.AbstractEventLoop
    try:
        import uvloop
        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


class NotOk(RuntimeError):
    """An answer other than 200 under load (the benchmarks measure answered requests only)."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; `answered(connection, head)` is called at the end of each answer."""

    def __init__(self, answered: Callable[["_Connection", bytes], None]):
        self.answered = answered
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.need = -1          # bytes of the answer in flight (head and body), once its head is read
        self.began = 0.0        # when the request in flight was due (fixed rate) or sent
        self.sent = 0.0         # when it was written
        self.lost: asyncio.Future | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.lost = asyncio.get_running_loop().create_future()

    def send(self, request: bytes, began: float, sent: float) -> None:
        self.began, self.sent = began, sent
        assert self.transport is not None
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        while True:
            if self.need < 0:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    break
                found = _LENGTH.search(buffer, 0, end + 2)
                self.need = end + 4 + (int(found.group(1)) if found else 0)
            if len(buffer) < self.need:
                break
            head, buffer, self.need = buffer[:12], buffer[self.need:], -1
            self.buffer = buffer
            self.answered(self, head)
            buffer = self.buffer
        self.buffer = buffer

    def connection_lost(self, exc) -> None:
        if self.lost is not None and not self.lost.done():
            self.lost.set_result(exc)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def _open(port: int, n: int, answered, host: str = HOST) -> list[_Connection]:
    loop = asyncio.get_running_loop()
    conns: list[_Connection] = []
    try:
        for _ in range(n):
            _, conn = await loop.create_connection(lambda: _Connection(answered), host, port)
            conns.append(conn)
    except BaseException:        # the connections already open are closed, not left to the loop
        for conn in conns:
            conn.close()
        raise
    return conns


@dataclass
class ClosedLoop:
    """What a saturation phase measured."""
    answered: int
    wall_s: float
    client_cpu_s: float
    latencies_s: list[float] = field(repr=False, default_factory=list)
    connections: int = 0

    @property
    def per_s(self) -> float:
        return self.answered / self.wall_s if self.wall_s > 0 else 0.0


async def closed_loop(port: int, requests: Sequence[bytes], count: int, seconds: float,
                      connections: int = 16) -> ClosedLoop:
    """Up to `count` requests (cycling through `requests`) over `connections` keep-alive connections,
    for at most `seconds`; raises NotOk on an answer other than 200."""
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    finished = loop.create_future()
    sent = 0
    failure: list[bytes] = []
    stop = 0.0
    clock = time.perf_counter

    def next_request(conn: _Connection) -> None:
        nonlocal sent
        now = clock()
        if sent < count and now < stop:
            conn.send(requests[sent % len(requests)], now, now)
            sent += 1
        elif len(latencies) == sent and not finished.done():
            finished.set_result(None)

    def answered(conn: _Connection, head: bytes) -> None:
        latencies.append(clock() - conn.began)
        if head[9:12] != b"200":
            failure.append(head)
            if not finished.done():
                finished.set_result(None)
            return
        next_request(conn)

    conns = await _open(port, connections, answered)
    cpu, started = time.process_time(), clock()
    stop = started + seconds
    try:
        for conn in conns:
            next_request(conn)
        # requests still open after the deadline are not counted; asyncio.wait leaves `finished`
        # alone at the deadline and, unlike wait_for on Python 3.11, never drops a cancellation of
        # this coroutine that comes in the turn `finished` is set (a3fast.cancellation)
        await asyncio.wait((finished,), timeout=seconds + 10)
        wall = clock() - started
    finally:
        for conn in conns:
            conn.close()
    if failure:
        raise NotOk(f"an answer {failure[0][9:12].decode('latin-1')} under load")
    return ClosedLoop(len(latencies), wall, time.process_time() - cpu, latencies, connections)


@dataclass
class FixedRate:
    """What a fixed-rate phase measured: latencies from each request's due time, and from when it
    was written (the difference is time spent waiting for an idle connection or for the client's
    own timer)."""
    rate: float
    due: int
    latencies_s: list[float] = field(repr=False, default_factory=list)
    service_latencies_s: list[float] = field(repr=False, default_factory=list)
    client_cpu_s: float = 0.0
    wall_s: float = 0.0

    @property
    def missed(self) -> int:
        return self.due - len(self.latencies_s)


async def fixed_rate(port: int, requests: Sequence[bytes], rate: float, seconds: float,
                     connections: int = 64, grace_s: float = 5.0) -> FixedRate:
    """Open loop at `rate` requests/s for `seconds`: at each wake-up every request then due is
    sent on an idle connection (waiting for one if all are busy: that wait is latency too);
    requests not answered within `grace_s` of the last one's due time are missed. Raises NotOk on
    an answer other than 200."""
    loop = asyncio.get_running_loop()
    clock = time.perf_counter
    count = int(rate * seconds)
    latencies: list[float] = []
    service: list[float] = []
    waiting: list[tuple[int, float]] = []    # (request, due) of those that found every connection busy
    idle: list[_Connection] = []
    failure: list[bytes] = []
    finished = loop.create_future()

    def answered(conn: _Connection, head: bytes) -> None:
        now = clock()
        latencies.append(now - conn.began)
        service.append(now - conn.sent)
        if head[9:12] != b"200":
            failure.append(head)
        if waiting:
            k, due = waiting.pop(0)
            conn.send(requests[k % len(requests)], due, now)
        else:
            idle.append(conn)
        if len(latencies) >= count and not finished.done():
            finished.set_result(None)

    conns = await _open(port, connections, answered)
    idle.extend(conns)
    cpu, start = time.process_time(), clock()
    try:
        k = 0
        while k < count:
            now = clock()
            while k < count and start + k / rate <= now:
                if idle:
                    idle.pop().send(requests[k % len(requests)], start + k / rate, now)
                else:
                    waiting.append((k, start + k / rate))
                k += 1
            if k < count:
                await asyncio.sleep(start + k / rate - clock())
        if count:
            await asyncio.wait((finished,), timeout=grace_s)    # as in the closed loop above
        wall = clock() - start
    finally:
        for conn in conns:
            conn.close()
    if failure:
        raise NotOk(f"an answer {failure[0][9:12].decode('latin-1')} under load")
    return FixedRate(rate, count, latencies, service, time.process_time() - cpu, wall)
