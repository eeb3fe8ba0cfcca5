"""The HTTP server under the app (`service.server`): each answer leaves in one write — its head held
until the first write of its body — while interim answers, later chunks and answers without a body
are written as they come. And the app of `a3fast serve` (`create_app(settle=True)`) keeps what it
loads out of the collector's full passes; an app embedded elsewhere does not."""
from __future__ import annotations

import socket
import threading

import orjson
import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("httptools")

from starlette.testclient import TestClient  # noqa: E402
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # noqa: E402

from a3fast.service.app import create_app  # noqa: E402
from a3fast.service.config import ServiceConfig  # noqa: E402
from a3fast.service.server import OneWriteAnswers, listening_socket, uvicorn_server  # noqa: E402


class Recording:
    """A transport that keeps what is written to it (and passes it on when it wraps a real one)."""

    def __init__(self, transport=None):
        self.inner = transport
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        if self.inner is not None:
            self.inner.write(data)

    def close(self) -> None:
        self.closed = True
        if self.inner is not None:
            self.inner.close()

    def is_closing(self) -> bool:
        return self.inner.is_closing() if self.inner is not None else self.closed

    def __getattr__(self, name):
        return getattr(self.inner, name)


class Cycle:
    """What OneWriteAnswers reads of uvicorn's response cycle."""

    def __init__(self):
        self.transport = Recording()
        self.response_started = False
        self.ended = 0

    def on_response(self) -> None:
        self.ended += 1


def test_a_head_and_its_body_leave_in_one_write():
    cycle = Cycle()
    written = cycle.transport
    OneWriteAnswers.install(cycle)
    cycle.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")      # before the answer: straight through
    cycle.response_started = True
    cycle.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n")
    assert written.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    cycle.transport.write(b"ab")
    cycle.transport.write(b"cd")                                   # a later chunk: straight through
    cycle.on_response()
    assert written.writes == [b"HTTP/1.1 100 Continue\r\n\r\n",
                              b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nab", b"cd"]
    assert cycle.ended == 1


def test_a_large_first_body_write_is_not_joined_to_the_head():
    cycle = Cycle()
    written = cycle.transport
    OneWriteAnswers.install(cycle)
    cycle.response_started = True
    body = b"x" * (OneWriteAnswers.JOIN_AT_MOST + 1)
    cycle.transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    cycle.transport.write(body)
    assert written.writes == [b"HTTP/1.1 200 OK\r\n\r\n", body]


def test_an_answer_that_ends_without_a_body_write_has_its_head_written_when_it_ends():
    cycle = Cycle()
    written = cycle.transport
    OneWriteAnswers.install(cycle)
    cycle.response_started = True
    cycle.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n")    # a HEAD request's answer
    cycle.on_response()
    assert written.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n"] and cycle.ended == 1


def test_closing_a_connection_writes_the_held_head_first():
    cycle = Cycle()
    written = cycle.transport
    OneWriteAnswers.install(cycle)
    cycle.response_started = True
    cycle.transport.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n")
    cycle.transport.close()
    assert written.writes == [b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n"] and written.closed


async def _echo(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    chunks = [body] if scope["path"] == "/one" else [body[:3], body[3:]]
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"%d" % len(body))]})
    for k, chunk in enumerate(chunks):
        await send({"type": "http.response.body", "body": chunk, "more_body": k < len(chunks) - 1})


@pytest.fixture()
def served():
    """A real uvicorn server from `uvicorn_server` on 127.0.0.1, its connections' writes recorded."""
    connections: list[Recording] = []

    class Recorded(HttpToolsProtocol):
        def connection_made(self, transport):
            recording = Recording(transport)
            connections.append(recording)
            super().connection_made(recording)

    sock = listening_socket("127.0.0.1", 0)
    server = uvicorn_server(_echo, ServiceConfig(), http=Recorded)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        while not server.started:
            thread.join(0.01)
            assert thread.is_alive()
        yield sock.getsockname()[1], connections
    finally:
        server.should_exit = True
        thread.join(30)


def _exchange(port: int, request: bytes, answers: int = 1) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(request)
        got = b""
        while got.count(b"HTTP/1.1 200") < answers or not got.endswith(b"hello world"):
            data = client.recv(65536)
            assert data, got
            got += data
        return got


def _post(path: str, body: bytes, method: str = "POST") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


def test_the_served_answer_is_one_write_of_head_and_body(served):
    port, connections = served
    got = _exchange(port, _post("/one", b"hello world"))
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and got.endswith(b"\r\n\r\nhello world")
    assert connections[0].writes == [got]


def test_a_served_answer_in_two_chunks_is_two_writes_the_head_with_the_first(served):
    port, connections = served
    got = _exchange(port, _post("/two", b"hello world"))
    assert len(connections[0].writes) == 2 and connections[0].writes[0].endswith(b"\r\n\r\nhel")
    assert b"".join(connections[0].writes) == got


def test_pipelined_requests_are_answered_in_order_each_in_one_write(served):
    port, connections = served
    got = _exchange(port, _post("/one", b"first") + _post("/one", b"hello world"), answers=2)
    assert got.count(b"HTTP/1.1 200 OK") == 2 and got.index(b"first") < got.index(b"hello world")
    assert len(connections[0].writes) == 2


def _frozen_after_start(tmp_path, **options) -> int:
    """Objects frozen out of the collector once the app has loaded a 1,000-agent fleet."""
    import gc

    from a3fast.workload import generate_fleet

    fleet = tmp_path / "fleet.json"
    fleet.write_bytes(orjson.dumps(generate_fleet(1000, seed=3)))
    gc.unfreeze()
    try:
        with TestClient(create_app(ServiceConfig(fleet=fleet), **options)) as client:
            while client.get("/readyz").status_code != 200:
                pass
            return gc.get_freeze_count()
    finally:
        gc.unfreeze()


def test_an_app_that_owns_its_process_freezes_what_it_loads_out_of_the_collector(tmp_path):
    assert _frozen_after_start(tmp_path, settle=True) > 0


def test_an_app_embedded_in_another_program_leaves_its_collector_alone(tmp_path):
    assert _frozen_after_start(tmp_path) == 0
