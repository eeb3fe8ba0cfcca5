"""The HTTP API: a Starlette application built by `create_app(config)`.

A thin shell over `operations` (the same handlers the stdio protocol uses) and the Kubernetes
extender. Every route is one row of the table `endpoints()` builds: its path and method, its handler, which body
limit it reads its body with, and whether it is open without the token. In front of the routes,
one ASGI layer (`Front`) applies, in order: security headers, timing, the answer to an error (the
table in `refusals`, shared with stdio), the bearer token, readiness. Bodies are read with a limit and a
deadline, and a large one is parsed on a worker thread, so no request holds the event loop for
long (docs/service.md, "Limits").
"""
from __future__ import annotations

import asyncio
import functools
import hmac
import itertools
import logging
import sys
import time
import weakref
from collections import OrderedDict
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping
from urllib.parse import parse_qsl, unquote_to_bytes

import anyio
import msgspec
import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.convertors import Convertor, register_url_convertor
from starlette.routing import Route

from ..cancellation import cancel_until_done
from ..framing import LINES, iter_documents
from ..streams import status_line
from ..errors import SchemaError, cannot_start_lines, describe, os_error_line
from . import metrics
from .access_log import AccessLog
from .config import ServiceConfig
from .k8s import Extender
from .openapi import openapi_document
from .operations import MAX_TRACE_RECORDS, Operations, PlaceAnswer, PreparedPlace, decode_place_request, verify_text
from .problems import (ServiceError, from_library, journal_failed, library_problems, parse_json, problem, query_int,
                       query_since, too_large)
from .refusals import INTERNAL, refusal
from .replay_route import replay_endpoint
from .seed import seed_fleet
from .sharded import fleet_factory
from .state import ServiceState, StateError
from .slices import Slice, readable_since, split_lines
from .tls import verified_client
from .ui import LiveReport

__all__ = ["create_app", "seed_fleet"]

log = logging.getLogger("a3fast.serve")
JSON = "application/json"
#: Bodies at least this long are parsed on a worker thread; shorter ones cost less than the handoff.
OFF_LOOP_BYTES = 256 * 1024


def _json(obj: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type=JSON, headers=headers)


def _refused(error: ServiceError, headers: Mapping[str, str] | None = None) -> Response:
    return _json(error.body(), error.status, headers)


# -- reading bodies -------------------------------------------------------------------------------
async def receive_body(scope, receive, limit: int, timeout: float) -> bytes:
    """The request body: 413 past `limit` bytes (by Content-Length, then by what arrives), 408 when
    it has not all arrived within `timeout` seconds."""
    length = _header(scope, b"content-length")
    if length is not None and (not length.isdigit() or int(length) > limit):
        raise too_large(limit, f"Content-Length {length.decode('latin-1')[:20]}")
    chunks, size, more = [], 0, True
    deadline = _Deadline(timeout)
    try:
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ServiceError(400, [problem("$", "a whole body", "the client went away")])
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            chunks.append(chunk)
            more = message.get("more_body", False)
    except asyncio.CancelledError:
        if not deadline.passed():
            raise
        raise ServiceError(408, [problem("$", f"a whole body within {timeout:g} s", f"{size} bytes")]) from None
    finally:
        deadline.cancel()
    if len(chunks) == 1:
        return chunks[0]
    if size < OFF_LOOP_BYTES:
        return b"".join(chunks)
    return await anyio.to_thread.run_sync(b"".join, chunks)   # copying 64 MiB takes tens of ms


class _Deadline:
    """Cancels the current task `timeout` seconds from now unless cancelled first. It is one entry
    in its loop's `_Deadlines`, not a timer of its own: a timer a request (`call_later`, a handle in
    the loop's heap, cancelled again) cost more than the rest of reading a small body, where
    anyio.fail_after's cancel scope had cost ~10 µs (asyncio.timeout, which does the same, needs
    Python 3.11)."""

    __slots__ = ("task", "fired", "cancelling", "queue")

    def __init__(self, timeout: float):
        task = asyncio.current_task()
        assert task is not None  # a body is read inside a task
        # held weakly: the loop's watch holds its deadlines, and must not hold the loop through them
        self.task = weakref.ref(task)
        self.fired = False
        # cancellations asked before this deadline existed are not this deadline's to absorb
        self.cancelling = task.cancelling() if hasattr(task, "cancelling") else 0    # Python 3.11
        self.queue = _Deadlines.of(asyncio.get_running_loop()).add(self, timeout)

    def fire(self) -> None:
        task = self.task()
        if task is not None:    # else nothing runs the read any more
            self.fired = True
            task.cancel()

    def passed(self) -> bool:
        """After a CancelledError: whether it was this deadline's, and the only one asked (then the
        task is no longer being cancelled)."""
        if not self.fired:
            return False
        uncancel = getattr(self.task(), "uncancel", None)
        return uncancel is None or uncancel() <= self.cancelling

    def cancel(self) -> None:
        self.queue.pop(self, None)


#: how early the deadline watch may fire a deadline: uvloop's clock counts whole milliseconds, so
#: its timer may run up to that much before the time it was set for
_EARLY = 1e-3


class _Deadlines:
    """The pending deadlines of one event loop, watched by one timer set for the earliest of them.

    A deadline is an entry in the queue of its timeout while its body is read. The timer is moved
    only when a new deadline falls before it, so under a steady stream of requests with one timeout
    it is set about once per timeout, not once per request. Each queue is in deadline order (one
    timeout, a monotonic clock), so a check takes the passed deadlines from the queues' fronts, each
    at its time as a timer of its own would fire, and stops at the first not yet due: a check costs
    what it fires, however many bodies are pending. The watch holds its loop weakly, so a loop and
    what its tasks hold are freed once nothing else holds them (a deadline holds its task weakly too:
the watch is the value of a weak-keyed map by loop, and a value must not hold its key)."""

    __slots__ = ("loop", "queues", "timers", "next_at", "__weakref__")
    #: the watch of the loop that used one last (most requests come on one loop), held weakly
    _last: "weakref.ref[_Deadlines] | None" = None
    _by_loop: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Deadlines]" = weakref.WeakKeyDictionary()

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = weakref.ref(loop)
        #: per timeout, its pending deadlines in the order they fall due
        self.queues: dict[float, OrderedDict[_Deadline, float]] = {}
        #: the times this watch's timers are set for, and the earliest of them. Only times are
        #: kept: a timer's handle holds its loop, which the watch must not hold. A timer is never
        #: cancelled; one set for a time with nothing due finds nothing to do.
        self.timers: list[float] = []
        self.next_at = float("inf")

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> "_Deadlines":
        last = cls._last() if cls._last is not None else None
        if last is not None and last.loop() is loop:
            return last
        watch = cls._by_loop.get(loop)
        if watch is None:
            watch = cls._by_loop[loop] = cls(loop)
        cls._last = weakref.ref(watch)
        return watch

    def add(self, deadline: _Deadline, timeout: float) -> "OrderedDict[_Deadline, float]":
        """Watch `deadline`, due `timeout` seconds from now; the queue it waits in."""
        loop = self.loop()
        assert loop is not None     # called on the running loop
        at = loop.time() + timeout
        queue = self.queues.get(timeout)
        if queue is None:
            queue = self.queues[timeout] = OrderedDict()
        queue[deadline] = at
        if at < self.next_at:
            self._set(loop, at)
        return queue

    def pending(self) -> int:
        return sum(map(len, self.queues.values()))

    def _set(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        self.timers.append(at)
        self.next_at = min(self.next_at, at)
        loop.call_at(at, self._check, at)

    def _check(self, set_for: float) -> None:
        self.timers.remove(set_for)
        self.next_at = min(self.timers, default=float("inf"))
        loop = self.loop()
        if loop is None:
            return
        now = loop.time() + _EARLY
        earliest = float("inf")
        for queue in self.queues.values():
            while queue:
                deadline, at = next(iter(queue.items()))
                if at > now:
                    earliest = min(earliest, at)
                    break
                del queue[deadline]
                deadline.fire()
        if earliest < self.next_at:
            self._set(loop, earliest)


async def off_loop(function: Callable, data: bytes, *args: Any) -> Any:
    """`function(data, *args)`, on a worker thread when `data` is large (the loop keeps answering)."""
    if len(data) < OFF_LOOP_BYTES:
        return function(data, *args)
    return await anyio.to_thread.run_sync(function, data, *args)


def read_declarations(data: bytes) -> tuple[list[Any], list[int], list[dict[str, Any]]]:
    """A bulk body (JSON Lines of declarations): the documents, their line numbers, and the
    problems of lines that are not JSON (each with its line)."""
    docs: list[Any] = []
    lines: list[int] = []
    problems: list[dict[str, Any]] = []
    for item in iter_documents(data, form=LINES, decode=parse_json):
        assert item.line is not None  # JSON Lines: every document has its line
        if item.problems:
            problems.extend(library_problems(SchemaError(list(item.problems)), line=item.line))
        else:
            docs.append(item.value)
            lines.append(item.line)
    return docs, lines, problems


def _prepare_bulk(data: bytes, ops: Operations) -> tuple[list, list[int]]:
    """The declarations of a bulk body, checked, and the line each is on."""
    docs, lines, problems = read_declarations(data)
    return ops.prepare_agents({"declarations": docs}, lines, problems), lines


#: Place requests one POST /v1/place may hold, at most (more: 413, nothing placed).
MAX_PLACE_BATCH = 1000
#: A batch of place requests is placed in steps of about this many seconds, with a turn of the
#: event loop between them: /healthz and the bodies of other requests are answered and read
#: meanwhile (a batch of 1,000 with spec records over 1,000 agents takes about half a second).
BATCH_TURN_SECONDS = 0.005
_decode_batch = msgspec.json.Decoder(list[msgspec.Raw]).decode
_SPACE = b" \t\r\n"


def is_batch(data: bytes) -> bool:
    """Whether a place body is a JSON array (a batch) rather than one request."""
    first = data[:1]
    if first and first in _SPACE:
        first = data.lstrip(_SPACE)[:1]
    return first == b"["


def read_place_batch(data: bytes, ops: Operations, record: str | None) -> list[Any]:
    """The place requests of a batch body, in order: each element read as the same text posted
    alone is read (typed, or the general way), or the ServiceError that refuses it then — one bad
    element is refused in its turn and the others are placed. A body that is not JSON at all is
    refused whole (400), and so is one of more than MAX_PLACE_BATCH elements (413)."""
    try:
        elements = [bytes(raw) for raw in _decode_batch(data)]
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        # not JSON (refused as a single body's text is), JSON msgspec cannot skip over but the
        # general reader takes (each element is then read from its own text again), or nested
        # past any reader's depth (refused whole, as a single body nested so deep is)
        elements = [orjson.dumps(value) for value in parse_json(data)]
    if len(elements) > MAX_PLACE_BATCH:
        raise ServiceError(413, [problem("$", f"an array of at most {MAX_PLACE_BATCH} place requests",
                                         f"{len(elements)}")])
    bodies: list[Any] = []
    for text in elements:
        typed = decode_place_request(text)
        body: Any = ops.prepared_place(typed) if typed is not None else None
        if body is None:
            try:
                body = parse_json(text)
                if not isinstance(body, dict):
                    raise ServiceError(400, [problem("$", "an object {requirements, session?, route?, record?}",
                                                     "another value")])
            except Exception as exc:
                bodies.append(exc)
                continue
        if record is not None:
            _set_record(body, record)
        bodies.append(body)
    return bodies


def _set_record(body: Any, record: str) -> None:
    """The `record` query parameter, which wins over the body's own field."""
    if type(body) is PreparedPlace:
        body.record = record
    else:
        body["record"] = record


def batch_answer(results: list[Any]) -> list[bytes]:
    """The answer to a batch, as the pieces of its text in order: per request, its place answer
    `{"records": [...]}` or, for one refused, `{"status": 4xx, "problems": [...]}` (what it alone
    would have been answered). The records are not copied: the answer to 1,000 placements over
    1,000 agents is tens of MB, and joining it whole holds the interpreter for a few hundred ms."""
    parts = [b"["]
    for k, result in enumerate(results):
        if k:
            parts.append(b",")
        if isinstance(result, Exception):
            error = refusal(result)
            if error is None:
                log.error("unexpected error answering a place request of a batch", exc_info=result)
                error = INTERNAL
            parts.append(orjson.dumps({"status": error.status, **error.body()}))
        else:
            parts += (b'{"records":', result.records_json, b"}")
    parts.append(b"]")
    return parts


#: A large answer is sent in bodies of about this many bytes, with a turn of the event loop
#: between them.
ANSWER_CHUNK = 1 << 20


async def start_json_answer(send, length: int, extra: tuple[bytes, bytes] | None = None) -> None:
    """Start a 200 JSON answer of `length` bytes (its body follows in one or more messages), with
    one `extra` header if given (and the header `Front` would add: its own check is then one look)."""
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % length), NOSNIFF]
    if extra is not None:
        headers.append(extra)
    await send({"type": "http.response.start", "status": 200, "headers": headers})


def _token_header(ops: Operations, table: tuple[int, int] | None) -> tuple[bytes, bytes] | None:
    """The A3-Fleet header of a place answer whose records carried a fleet snapshot's table
    (`table`: the snapshot and the record; the last one, in a batch): the token a client sends
    back as `?fleet=` (docs/protocol.md, "A snapshot the client holds")."""
    if table is None:
        return None
    return (b"a3-fleet", ops.fleet_token(table).encode("ascii"))


async def send_json_parts(send, parts: list[bytes], extra: tuple[bytes, bytes] | None = None) -> None:
    """A 200 JSON answer whose text is `parts` joined, sent in ANSWER_CHUNK bodies (each joined
    from a few parts) with a turn of the loop between them, so no join or write of the whole
    answer holds it; with one `extra` header if given."""
    await start_json_answer(send, sum(map(len, parts)), extra)
    chunk: list[bytes] = []
    size = 0
    for part in parts:
        chunk.append(part)
        size += len(part)
        if size >= ANSWER_CHUNK:
            await send({"type": "http.response.body", "body": b"".join(chunk), "more_body": True})
            await asyncio.sleep(0)
            chunk, size = [], 0
    await send({"type": "http.response.body", "body": b"".join(chunk)})


class RestOfPath(Convertor):
    """`{name:rest}`: the rest of the path, "/" and line breaks included (Starlette's `path`
    convertor stops at a line break, so such a name would be "no route" rather than "no agent")."""
    regex = "[\\s\\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("rest", RestOfPath())


def path_names(request: Request) -> dict[str, str]:
    """The names a route's path gives, as the client wrote them. The server decodes the path with
    every byte that is not UTF-8 replaced (so %FF and %FE named one agent "\ufffd") and splits it
    after decoding (so an encoded "/" in a session id moved the rest to the agent): both are 400
    here, naming the place, where they would have changed a name the client never sent."""
    raw = request.scope.get("raw_path")
    if raw is None:
        return dict(request.path_params)
    try:
        unquote_to_bytes(raw.split(b"?", 1)[0]).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ServiceError(400, [problem("$", "a path whose percent-encoded bytes are UTF-8",
                                         f"the byte {exc.object[exc.start]:#04x}")]) from None
    names = dict(request.path_params)
    if "session" in names:
        segment = raw.split(b"?", 1)[0].split(b"/")[3] if raw.count(b"/") >= 3 else b""
        if b"%2f" in segment.lower():
            raise ServiceError(400, [problem("$.session", "a session id without '/' (over HTTP)",
                                             repr(segment.decode("ascii", "replace"))[:80])])
    return names


# -- the route table ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Endpoint:
    """One route: `handler(request, body)` answers it; `body` names the limit its body is read with
    (None: the route takes no body); `open` routes need no token; `asgi` handlers are pure ASGI
    `(scope, receive, send)`, answered before Starlette's routing (the placement route, whose cost
    is otherwise mostly Starlette's)."""
    path: str
    method: str
    handler: Callable[..., Awaitable[Any]]
    body: str | None = None
    open: bool = False
    asgi: bool = False


def body_limits(config: ServiceConfig) -> dict[str, int]:
    """Limit name -> bytes; every limit is at most --max-body."""
    return {"request": min(config.max_request_body, config.max_body),
            "bulk": min(config.max_bulk_body, config.max_body),
            "k8s": min(config.max_k8s_body, config.max_body),
            "trace": config.max_body}


def endpoints(config: ServiceConfig, state: ServiceState, ops: Operations, extender: Extender,
              live: LiveReport, watcher, kube=None) -> list[Endpoint]:
    limits = body_limits(config)

    async def run(op: str, fields: dict[str, Any]) -> Response:
        return _json(await getattr(ops, op)(fields))

    async def put_agent(request: Request, body: bytes) -> Response:
        doc = await off_loop(parse_json, body)
        if not isinstance(doc, dict):        # the body is the declaration
            raise ServiceError(400, [problem("$", "a declaration (§3)", describe(doc))])
        return _json(await ops.put_agent({"name": path_names(request)["name"], "declaration": doc},
                                         declaration_at="$", name_is="the name in the path"))

    async def get_agent(request: Request, body: None) -> Response:
        return await run("get_agent", {"name": path_names(request)["name"]})

    async def delete_agent(request: Request, body: None) -> Response:
        return await run("delete_agent", {"name": path_names(request)["name"]})

    async def list_agents(request: Request, body: None) -> Response:
        fields: dict[str, Any] = {"after": request.query_params.get("after")}
        limit = request.query_params.get("limit")
        if limit is not None:
            fields["limit"] = query_int(limit, "$.limit", "an integer from 1 to 10000")
        return await run("list_agents", fields)

    async def put_agents(request: Request, body: bytes) -> Response:
        decls, lines = await off_loop(_prepare_bulk, body, ops)
        return _json(await ops.apply_agents(decls, lines))

    async def place(scope, receive, send) -> None:
        """POST /v1/place as pure ASGI (the same checks and answers as the other routes): one
        place request, or a JSON array of them (a batch)."""
        data = await receive_body(scope, receive, limits["request"], config.body_timeout)
        query = scope["query_string"]
        params = query_values(query) if query else {}
        record = params.get("record")
        token = params.get("fleet")
        # what the reader holds already, by the token an earlier answer gave it: its answers refer
        # to that record rather than carry the fleet's names again
        holds = (ops.holding(token) if token is not None else None) or {}
        if is_batch(data):
            bodies = await off_loop(read_place_batch, data, ops, record)
            # the response's `compact-stream` answers are read in order: one slice, each snapshot once
            results = await ops.place_batch(bodies, Slice(holds), holds)
            tables = [r.table for r in results if type(r) is PlaceAnswer and r.table is not None]
            await send_json_parts(send, batch_answer(results), _token_header(ops, tables[-1] if tables else None))
            return
        typed = decode_place_request(data)      # typed, when the text allows: the general way else
        body: Any = ops.prepared_place(typed) if typed is not None else None
        if body is None:
            body = await off_loop(parse_json, data)
            if not isinstance(body, dict):
                raise ServiceError(400, [problem("$", "an object {requirements, session?, route?, record?}",
                                                 "another value")])
        if record is not None:
            _set_record(body, record)
        answer = await ops.place(body, holds)
        payload = answer.framed(b'{"records":', b"}")
        await start_json_answer(send, len(payload), _token_header(ops, answer.table))
        await send({"type": "http.response.body", "body": payload})

    async def outcomes(request: Request, body: bytes) -> Response:
        doc = await off_loop(parse_json, body)
        if not isinstance(doc, dict):
            raise ServiceError(400, [problem("$", 'an object {"agent", "success", "kind" or "requirements"}',
                                             describe(doc))])
        return await run("outcome", doc)

    async def hold_session(request: Request, body: None) -> Response:
        return await run("hold_session", path_names(request))

    async def release_session(request: Request, body: None) -> Response:
        return await run("release_session", path_names(request))

    async def trace(request: Request, body: None) -> Response:
        since = query_since(request.query_params.get("since", "0"))
        limit = request.query_params.get("limit")
        count = None
        if limit is not None:       # as the stdio op takes it; without it the stream runs to the end
            expected = f"an integer from 1 to {MAX_TRACE_RECORDS}"
            count = query_int(limit, "$.limit", expected)
            if not 1 <= count <= MAX_TRACE_RECORDS:
                raise ServiceError(400, [problem("$.limit", expected, limit)])
        await state.durable()
        end = state.trace_size
        lines = readable_since(state, since, end)
        if count is not None:
            lines = itertools.islice(split_lines(lines), count)
        return StreamingResponse(_iterate(lines), media_type="application/x-ndjson")

    async def verify(request: Request, body: bytes) -> Response:
        return _json(await anyio.to_thread.run_sync(verify_text, body))

    async def healthz(request: Request, body: None) -> Response:
        return _json({"status": "ok"})

    async def readyz(request: Request, body: None) -> Response:
        if not state.ready:
            return _json({"status": "loading"}, 503)
        if kube is not None and not kube.synced:
            return _json({"status": "syncing", "kubernetes": "the first list of the cluster is not applied yet"}, 503)
        if not request.scope.get("a3fast.authorised"):
            return _json({"status": "ready"})      # no more to a caller without the token
        return _json({"status": "ready", "agents": len(state.fleet), "next_seq": state.next_seq})

    async def metrics_text(request: Request, body: None) -> Response:
        if state.ready:
            metrics.FLEET_AGENTS.set(len(state.fleet))
            metrics.JOURNAL_LAG.set(state.journal_lag)
            metrics.JOURNAL_ENTRIES.set(state.journal.entries if state.journal is not None else 0)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    async def ui(request: Request, body: None) -> Response:
        page = await live.page()
        headers = {"ETag": page.etag, "Cache-Control": "no-cache", **page.headers}
        if request.headers.get("if-none-match") == page.etag:
            return Response(status_code=304, headers=headers)
        return Response(page.html, media_type="text/html; charset=utf-8", headers=headers)

    async def ui_data(request: Request, body: None) -> Response:
        return Response(orjson.dumps({"version": await live.shown_version(), "next_seq": state.next_seq}),
                        media_type=JSON, headers={"Cache-Control": "no-store"})

    async def watch(request: Request, body: None) -> Response:
        answer = {"interval": None, "remove_after": None, "sources": []} if watcher is None else watcher.status()
        if kube is not None:
            answer = {**answer, "kubernetes": kube.status()}
        return _json(answer)

    async def openapi(request: Request, body: None) -> Response:
        return _json(openapi_document())

    def k8s(verb: str):
        # the body as it came, not parse_json: the service's bounds on A3 documents would refuse
        # valid Pods and Nodes; the extender decodes and bounds only what it reads (service/k8s.py)
        async def answer(request: Request, body: bytes) -> Response:
            return Response(await getattr(extender, verb)(body), media_type=JSON)
        return answer

    return [
        # agent names may hold "/": {name:rest} takes the rest of the path (docs/service.md)
        Endpoint("/v1/agents/{name:rest}", "PUT", put_agent, body="request"),
        Endpoint("/v1/agents/{name:rest}", "GET", get_agent),
        Endpoint("/v1/agents/{name:rest}", "DELETE", delete_agent),
        Endpoint("/v1/agents", "GET", list_agents),
        Endpoint("/v1/agents", "POST", put_agents, body="bulk"),
        Endpoint("/v1/place", "POST", place, asgi=True),
        Endpoint("/v1/outcomes", "POST", outcomes, body="request"),
        Endpoint("/v1/sessions/{session}/{agent:rest}", "PUT", hold_session),
        Endpoint("/v1/sessions/{session}/{agent:rest}", "DELETE", release_session),
        Endpoint("/v1/trace", "GET", trace),
        Endpoint("/v1/verify", "POST", verify, body="trace"),
        Endpoint("/v1/replay", "POST", replay_endpoint(state), body="trace"),
        Endpoint("/v1/watch", "GET", watch),
        Endpoint("/ui", "GET", ui),
        Endpoint("/ui/data", "GET", ui_data),
        Endpoint("/v1/openapi.json", "GET", openapi),
        Endpoint("/healthz", "GET", healthz, open=True),
        Endpoint("/readyz", "GET", readyz, open=True),
        Endpoint("/metrics", "GET", metrics_text, open=True),
        Endpoint("/k8s/filter", "POST", k8s("filter"), body="k8s"),
        Endpoint("/k8s/prioritize", "POST", k8s("prioritize"), body="k8s"),
    ]


def routes(table: list[Endpoint], limits: dict[str, int], timeout: float) -> list[Route]:
    """One Starlette route per path, answering each of its methods with the table's handler (one
    route per path, so a 405 lists every method the path takes in `Allow`)."""
    by_path: dict[str, list[Endpoint]] = {}
    for endpoint in table:
        by_path.setdefault(endpoint.path, []).append(endpoint)
    out = []
    for path, group in by_path.items():
        if len(group) == 1 and group[0].asgi:
            # a partial is not wrapped as request -> response; Front answers the method
            # before routing, so Starlette sees the path only for the 405 of other methods
            out.append(Route(path, functools.partial(group[0].handler), methods=[group[0].method]))
            continue
        handlers = {e.method: (e.handler, limits[e.body] if e.body is not None else None) for e in group}

        async def answer(request: Request, handlers=handlers) -> Response:
            handler, limit = handlers[request.method if request.method != "HEAD" else "GET"]
            body = None if limit is None else await receive_body(request.scope, request.receive, limit, timeout)
            return await handler(request, body)
        out.append(Route(path, answer, methods=list(handlers)))
    return out


# -- the service's layers, in one frame -----------------------------------------------------------
#: what every answer says: a browser never guesses a JSON or text answer to be HTML or script
NOSNIFF = (b"x-content-type-options", b"nosniff")


class Front:
    """What stands before every route, in the order it applies, as one ASGI layer:

    1. every answer says `X-Content-Type-Options: nosniff` (a page that sets its own security
       headers, /ui, keeps them, once each);
    2. the request latency histogram, by route template (or the path of a pure ASGI route);
    3. an exception becomes its answer from the table in `refusals` (the stdio protocol's too);
       anything else a one-line 500, its traceback logged and never sent;
    4. authentication: with a token configured, every route but the open ones needs
       `Authorization: Bearer <token>` (compared in constant time), and a 401 says
       `WWW-Authenticate: Bearer`. With --tls-client-ca, /k8s/* needs a verified TLS client
       certificate instead: kube-scheduler authenticates with its tlsConfig, never a token. The
       scope is marked `a3fast.authorised` for the open routes that tell an authorised caller more
       (/readyz);
    5. readiness: 503 while the state loads (but for the open routes), and for everything but
       /metrics once the journal could not be written — memory may hold changes that were answered
       with an error, and /healthz says so too, for a supervisor to restart the service; with
       --watch-k8s, the routes that decide from the fleet wait for the cluster's first list;
    6. the pure ASGI routes (`fast`), answered here, before Starlette's routing, request and
       response objects; every other request goes on to Starlette.

    One frame rather than a middleware each: the six frames and two wrapped `send`s cost a single
    placement about a tenth of its server CPU (docs/performance.md, "The service's layers in one
    frame")."""

    def __init__(self, app, *, state: ServiceState, token: str | None, open_paths: frozenset[str],
                 client_certificates: bool = False, kube=None, fast: dict[tuple[str, str], Callable] | None = None):
        self.app = app
        self.state = state
        self.token = token.encode() if token else None
        self.open_paths = open_paths
        self.client_certificates = client_certificates
        self.kube = kube
        self.fast = fast or {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        began = time.perf_counter()
        started = False

        async def answer(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = message.get("headers", [])
                if type(headers) is not list:     # any iterable of pairs, as ASGI allows
                    headers = list(headers)
                if NOSNIFF not in headers and not any(name.lower() == NOSNIFF[0] for name, _ in headers):
                    message = {**message, "headers": [*headers, NOSNIFF]}
            await send(message)
        try:
            refused = self._refused(scope)
            if refused is not None:
                await refused(scope, receive, answer)
            else:
                fast = self.fast.get((scope["method"], scope["path"]))
                if fast is not None:
                    scope["a3fast.route"] = scope["path"]
                    await fast(scope, receive, answer)
                else:
                    await self.app(scope, receive, answer)
        except Exception as exc:
            error = refusal(exc)
            if error is None:
                log.exception("unexpected error answering %s %s", scope["method"], scope["path"])
                error = INTERNAL
            if not started:
                await _refused(error)(scope, receive, answer)
        finally:
            route = scope.get("route")
            label = scope.get("a3fast.route") or getattr(route, "path", "unmatched")
            metrics.observe_request(label, scope["method"], time.perf_counter() - began)

    def _refused(self, scope) -> Response | None:
        """The answer that refuses the request before any route sees it (steps 4 and 5), or None."""
        path = scope["path"]
        if self.client_certificates and path.startswith("/k8s/"):
            if not verified_client(scope):
                return _refused(ServiceError(401, [problem("TLS client certificate", "one issued by --tls-client-ca",
                                                           "none")]))
        else:
            authorised = self.token is None or self._authorised(scope)
            scope["a3fast.authorised"] = authorised
            if not authorised and path not in self.open_paths:
                error = ServiceError(401, [problem("Authorization", "Bearer <token>", "no valid token")])
                return _refused(error, {"WWW-Authenticate": "Bearer"})
        state = self.state
        if not state.ready and path not in self.open_paths:
            return _refused(ServiceError(503, [problem("$", "a service whose state is loaded", "still loading")]))
        if state.failed is not None and path != "/metrics":
            return _refused(journal_failed(state.failed))
        if self.kube is not None and path in SYNCED_PATHS and not self.kube.synced:
            # a fleet that is not yet the cluster's would reject every offered node
            return _refused(ServiceError(503, [problem("$", "a fleet synced with the cluster (--watch-k8s)",
                                                       "the first list of the cluster not applied yet")]))
        return None

    def _authorised(self, scope) -> bool:
        value = _header(scope, b"authorization") or b""
        scheme, _, token = value.partition(b" ")
        assert self.token is not None  # asked only when a token is configured
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.token)


#: Routes that decide from the fleet: with --watch-k8s they wait for the first list of the cluster.
SYNCED_PATHS = frozenset({"/k8s/filter", "/k8s/prioritize", "/v1/place"})


async def _not_routed(request: Request, exc: Exception) -> Response:
    """404 and 405 with the service's problems, not Starlette's plain text."""
    assert isinstance(exc, HTTPException)  # the only exception this handler is registered for
    expected = {404: "a route of the API (/v1/openapi.json)", 405: "a method the route takes"}
    error = ServiceError(exc.status_code, [problem("$", expected.get(exc.status_code, "a request the API takes"),
                                                   f"{request.method} {request.url.path}"[:200])])
    return _refused(error, exc.headers)


def create_app(config: ServiceConfig = ServiceConfig(), state: ServiceState | None = None, *,
               settle: bool = False) -> Starlette:
    """The service as an ASGI app. The state is opened at startup (in a worker thread, so /healthz
    answers and /readyz says 503 while a large state loads) and closed — snapshot, fsync — at
    shutdown. A state that cannot be read back exactly stops the app (see `app.state.failure`).
    `settle`: the app's state owns its process (`a3fast serve`), so what it loads is frozen out of
    the collector's later passes (`ServiceState`'s `settle`)."""
    if state is None:
        state = ServiceState(config.state, engine=config.engine, trace_path=config.trace,
                             fsync=config.fsync, checkpoint_every=config.checkpoint_every,
                             fleet_factory=fleet_factory(config), settle=settle)
    ops = Operations(state, turn=BATCH_TURN_SECONDS)
    watcher = _watcher(config, ops, state)
    kube = _kube_watch(config, state)
    extender = Extender(state)
    table = endpoints(config, state, ops, extender, LiveReport(state), watcher, kube)
    limits = body_limits(config)
    open_paths = frozenset(e.path for e in table if e.open)
    middleware = [
        *([Middleware(AccessLog)] if config.access_log else []),
        Middleware(Front, state=state, token=config.token, open_paths=open_paths,
                   client_certificates=config.tls_client_ca is not None, kube=kube,
                   fast={(e.method, e.path): e.handler for e in table if e.asgi}),
    ]
    app = Starlette(routes=routes(table, limits, config.body_timeout), middleware=middleware,
                    exception_handlers={HTTPException: _not_routed},
                    lifespan=functools.partial(_lifespan, state=state, config=config, watcher=watcher,
                                               extender=extender, kube=kube))
    # a path that names no route is answered 404 with the service's problems, a trailing slash too:
    # never a redirect built from the client's Host header
    app.router.redirect_slashes = False
    app.state.service = state
    app.state.kube = kube
    app.state.on_failure = None
    app.state.on_ready = None      # called with the number of agents once the service takes work
    return app


@asynccontextmanager
async def _lifespan(app, state: ServiceState, config: ServiceConfig, watcher, extender: Extender, kube=None):
    app.state.failure = None
    loading = asyncio.get_running_loop().run_in_executor(None, _open, state, config, app)
    watching = [asyncio.create_task(_watch_when_ready(loading, state, w)) for w in (watcher, kube) if w is not None]
    if kube is not None:
        watching.append(asyncio.create_task(_ready_when_synced(loading, state, kube, watching[-1], app)))
    try:
        yield
    finally:
        await cancel_until_done(watching)
        await asyncio.shield(loading)
        extender.close()
        if state.ready:
            state.close()


def _watcher(config: ServiceConfig, ops: Operations, state: ServiceState):
    """The watch over --watch-cards and --watch-mcp, or None. Which agents each card gave, and which
    tools each server gave, are remembered in the state directory, so what vanished while the
    service was down is still removed."""
    if not config.watch_cards and not config.watch_mcp:
        return None
    from .watch import Watcher, WatchConfig

    memory = state.directory / "watch.json" if state.directory is not None else None
    return Watcher(ops, WatchConfig(cards=config.watch_cards, servers=config.watch_mcp,
                                    interval=config.watch_interval,
                                    remove_after=config.watch_remove_after), memory)


def _kube_watch(config: ServiceConfig, state: ServiceState):
    """The watch of the cluster's AgentDeclarations and Nodes (--watch-k8s), or None."""
    if not config.watch_k8s:
        return None
    from .k8s_watch import KubeWatch, KubeWatchConfig

    return KubeWatch(state, KubeWatchConfig(kubeconfig=config.kubeconfig, namespaces=config.k8s_namespaces,
                                            watch_timeout=config.k8s_watch_timeout,
                                            request_timeout=config.k8s_request_timeout))


async def _watch_when_ready(loading, state: ServiceState, watcher) -> None:
    await asyncio.shield(loading)
    if not state.ready:
        return
    try:
        await watcher.run()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("the watch %s stopped", type(watcher).__name__)


def _header(scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return value
    return None


def query_values(query: bytes) -> dict[str, str]:
    """Each query parameter's last value, as Starlette's `query_params` gives them
    (`parse_qsl(query.decode("latin-1"), keep_blank_values=True)`, the last of a name winning)."""
    if query == b"record=compact":       # what most place requests ask, answered without a split
        return {"record": "compact"}
    if b"%" in query or b"+" in query:     # escapes: the standard reader undoes them
        return dict(parse_qsl(query.decode("latin-1"), keep_blank_values=True))
    # without one, that reading is a split on "&" and each field's on its first "=" (a field
    # without one a blank value), empty fields skipped: the same, in a fifth of the time
    values = {}
    for field in query.decode("latin-1").split("&"):
        if field:
            name, _, value = field.partition("=")
            values[name] = value
    return values


def _open(state: ServiceState, config: ServiceConfig, app) -> None:
    source = state.directory          # what is being read: the state directory, then --fleet
    try:
        state.open(mark_ready=False)
        if config.fleet is not None:
            source = config.fleet
            seed_fleet(state, config)
        state.ready = True
    except (StateError, SchemaError, OSError) as exc:
        _stop_loading(app, state, os_error_line(exc) if isinstance(exc, OSError) else str(exc))
        return
    except Exception as exc:
        # whatever else escapes a loader stops the start too: a server left answering 503
        # "loading" would never become ready
        where = source if source is not None else "the fleet"
        _stop_loading(app, state, f"{where}: cannot be loaded ({type(exc).__name__}: {exc})")
        return
    # with --watch-k8s the service takes work once the cluster's first lists are applied
    # (`_ready_when_synced`); before, every request a fleet is needed for is answered 503
    if getattr(app.state, "on_ready", None) is not None and getattr(app.state, "kube", None) is None:
        app.state.on_ready(len(state.fleet))


async def _ready_when_synced(loading, state: ServiceState, kube, following: asyncio.Task, app) -> None:
    """The ready line of a service that follows the cluster: said once every collection's first
    list is applied, as `/readyz` and the extender's routes then say. A watch that stops before
    that (its task, `following`, ends: it logged why) stops the start as a failed load does."""
    await asyncio.shield(loading)
    while state.ready and not kube.synced and not following.done():
        await asyncio.sleep(0.05)
    if not state.ready or following.cancelled():     # a failed start, or the service stopping
        return
    if not kube.synced:
        _stop_loading(app, state, "--watch-k8s: the watch of the cluster stopped before its first lists were "
                                  "applied (the log above says why)")
    elif getattr(app.state, "on_ready", None) is not None:
        app.state.on_ready(len(state.fleet))


def _stop_loading(app, state: ServiceState, failure: str) -> None:
    """The start failed: the server stops (exit 2) with the reason on stderr."""
    app.state.failure = failure
    state.ready = False
    # a fleet of a thousand broken declarations is told in a screenful; with standard error's reader
    # gone the lines are lost, and the stop (exit 2) still happens
    status_line("\n".join(cannot_start_lines(failure)), sys.stderr)
    if app.state.on_failure is not None:
        app.state.on_failure()


async def _iterate(chunks):
    for chunk in chunks:
        yield chunk
