"""The HTTP API: a Starlette application built by `create_app(config)`, routes in one table.

A thin shell over `operations` (the same handlers the stdio protocol uses) and the Kubernetes
extender: it reads a bounded body, turns path and query parameters into request fields, and writes
the operation's object as JSON (orjson). Authentication, body limits and timing are one pure ASGI
middleware in front of the routes.
"""
from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import sys
import time
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ..document_reader import LINES, iter_documents
from ..errors import SchemaError
from ..verify import verify_bytes
from . import metrics
from .config import ServiceConfig
from .k8s import BadArgs, Extender, ExtenderError
from .openapi import openapi_document
from .operations import Operations, verify_result
from ..journal import JournalFailed
from .problems import ServiceError, from_library, journal_failed, parse_json, problem
from .replay_route import replay_endpoint
from .sharded import ShardError, fleet_factory, shard_unavailable
from .state import ServiceState, StateError
from .tls import verified_client
from .slices import readable_since
from .ui import LiveReport

__all__ = ["create_app"]

log = logging.getLogger("a3fast.serve")
JSON = "application/json"
OPEN_PATHS = ("/healthz", "/readyz")


def _json(obj: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(obj), status_code=status, media_type=JSON)


def _error(status: int, problems: list[dict[str, Any]]) -> Response:
    return _json({"problems": problems}, status)


class TooLarge(Exception):
    pass


async def _body(request: Request, limit: int) -> bytes:
    """The body, refused past `limit` bytes whatever Content-Length claimed."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


class Guard:
    """Pure ASGI middleware: bearer token, Content-Length limit, request timing, and a one-line 500
    for anything unexpected (logged with its traceback, never sent).

    `fast` maps (method, path) to a pure ASGI handler answered here without Starlette's routing,
    request and response objects: the placement route, whose cost is otherwise mostly theirs."""

    def __init__(self, app, config: ServiceConfig, state: ServiceState, fast=None):
        self.app = app
        self.token = config.token.encode() if config.token else None
        self.client_certificates = config.tls_client_ca is not None
        self.max_body = config.max_body
        self.state = state
        self.fast = fast or {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        started = time.perf_counter()
        if self.client_certificates and path.startswith("/k8s/"):
            # kube-scheduler authenticates with its tlsConfig client certificate, never a token
            if not verified_client(scope):
                return await _error(401, [problem("TLS client certificate", "one issued by --tls-client-ca",
                                                  "none")])(scope, receive, send)
        elif self.token is not None and path not in OPEN_PATHS and not self._authorised(scope):
            return await _error(401, [problem("Authorization", "Bearer <token>", "no valid token")])(scope, receive, send)
        length = _header(scope, b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return await _error(413, [problem("$", f"a body of at most {self.max_body} bytes",
                                              f"Content-Length {length.decode('latin-1')[:20]}")])(scope, receive, send)
        if not self.state.ready and path not in OPEN_PATHS and path != "/metrics":
            return await _error(503, [problem("$", "a service whose state is loaded", "still loading")])(
                scope, receive, send)
        if self.state.failed is not None and path != "/metrics":
            # fail-stop: memory may hold changes that were answered with an error; /healthz says
            # so too, for a supervisor to restart the service
            error = journal_failed(self.state.failed)
            return await _error(error.status, error.problems)(scope, receive, send)
        started_response = False

        async def tracking_send(message):
            nonlocal started_response
            if message["type"] == "http.response.start":
                started_response = True
            await send(message)
        fast = self.fast.get((scope["method"], path))
        try:
            if fast is not None:
                await fast(scope, receive, tracking_send)
            else:
                await self.app(scope, receive, tracking_send)
        except ShardError as exc:
            if not started_response:
                error = shard_unavailable(exc)
                await _error(error.status, error.problems)(scope, receive, send)
        except JournalFailed as exc:
            if not started_response:
                error = journal_failed(str(exc))
                await _error(error.status, error.problems)(scope, receive, send)
        except Exception:
            log.exception("unexpected error answering %s %s", scope["method"], path)
            if not started_response:
                await _error(500, [problem("$", "a request the service can answer",
                                           "an internal error (logged)")])(scope, receive, send)
        finally:
            label = path if fast is not None else getattr(scope.get("route"), "path", "unmatched")
            metrics.request_timer(label, scope["method"]).observe(time.perf_counter() - started)

    def _authorised(self, scope) -> bool:
        value = _header(scope, b"authorization") or b""
        scheme, _, token = value.partition(b" ")
        assert self.token is not None  # asked only when a token is configured
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.token)


def _header(scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return value
    return None


def create_app(config: ServiceConfig = ServiceConfig(), state: ServiceState | None = None) -> Starlette:
    """The service as an ASGI app. The state is opened at startup (in a worker thread, so /healthz
    answers and /readyz says 503 while a large state loads) and closed — snapshot, fsync — at
    shutdown. A state that cannot be read back exactly stops the app (see `app.state.failure`)."""
    if state is None:
        state = ServiceState(config.state, engine=config.engine, trace_path=config.trace,
                             fsync=config.fsync, checkpoint_every=config.checkpoint_every,
                             fleet_factory=fleet_factory(config))
    ops = Operations(state)
    extender = Extender(state)
    live = LiveReport(state)
    watcher = _watcher(config, ops, state)

    async def run(op: str, fields: dict[str, Any]) -> Response:
        try:
            return _json(await getattr(ops, op)(fields))
        except ServiceError as exc:
            return _error(exc.status, exc.problems)

    async def read_json(request: Request) -> Any:
        try:
            return parse_json(await _body(request, config.max_body))
        except TooLarge:
            raise ServiceError(413, [problem("$", f"a body of at most {config.max_body} bytes", "more")]) from None
        except SchemaError as exc:
            raise from_library(exc) from None

    async def agent(request: Request) -> Response:
        name = request.path_params["name"]
        if request.method == "GET":
            return await run("get_agent", {"name": name})
        if request.method == "DELETE":
            return await run("delete_agent", {"name": name})
        try:
            doc = await read_json(request)
        except ServiceError as exc:
            return _error(exc.status, exc.problems)
        return await run("put_agent", {"name": name, "declaration": doc})

    async def agents(request: Request) -> Response:
        if request.method == "GET":
            fields: dict[str, Any] = {"after": request.query_params.get("after")}
            limit = request.query_params.get("limit")
            if limit is not None:
                if not limit.isdigit():
                    return _error(400, [problem("$.limit", "an integer", repr(limit[:40]))])
                fields["limit"] = int(limit)
            return await run("list_agents", fields)
        try:
            data = await _body(request, config.max_body)
        except TooLarge:
            return _error(413, [problem("$", f"a body of at most {config.max_body} bytes", "more")])
        docs: list[Any] = []
        lines: list[int] = []
        problems: list[dict[str, Any]] = []
        for item in iter_documents(data, form=LINES, decode=parse_json):
            assert item.line is not None  # JSON Lines: every document has its line
            if item.problems:
                problems.extend(from_library(SchemaError(list(item.problems)), line=item.line).problems)
            else:
                docs.append(item.value)
                lines.append(item.line)
        try:
            return _json(await ops.put_agents({"declarations": docs}, lines, problems))
        except ServiceError as exc:
            return _error(exc.status, exc.problems)

    async def place_asgi(scope, receive, send) -> None:
        """POST /v1/place as pure ASGI (the same checks and answers as the other routes)."""
        status, payload = 200, None
        try:
            chunks, size, more = [], 0, True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > config.max_body:
                    raise ServiceError(413, [problem("$", f"a body of at most {config.max_body} bytes", "more")])
                chunks.append(chunk)
                more = message.get("more_body", False)
            try:
                body = parse_json(chunks[0] if len(chunks) == 1 else b"".join(chunks))
            except SchemaError as exc:
                raise from_library(exc) from None
            if not isinstance(body, dict):
                raise ServiceError(400, [problem("$", "an object {requirements, session?, route?}", "another value")])
            query = scope["query_string"]
            if query:
                record = _query_value(query, "record")
                if record is not None:
                    body["record"] = record
            payload = orjson.dumps(await ops.place(body))
        except ServiceError as exc:
            status, payload = exc.status, orjson.dumps({"problems": exc.problems})
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})

    async def body_op(request: Request, op: str) -> Response:
        try:
            body = await read_json(request)
        except ServiceError as exc:
            return _error(exc.status, exc.problems)
        return await run(op, body if isinstance(body, dict) else {"$": body})

    async def outcomes(request: Request) -> Response:
        return await body_op(request, "outcome")

    async def session(request: Request) -> Response:
        fields = {"agent": request.path_params["agent"], "session": request.path_params["session"]}
        return await run("hold_session" if request.method == "PUT" else "release_session", fields)

    async def trace(request: Request) -> Response:
        since = request.query_params.get("since", "0")
        if not since.isdigit():
            return _error(400, [problem("$.since", "a seq (a non-negative integer)", repr(since[:40]))])
        await state.durable()
        end = state.trace_size
        return StreamingResponse(_iterate(readable_since(state, int(since), end)),
                                 media_type="application/x-ndjson")

    async def verify(request: Request) -> Response:
        try:
            data = await _body(request, config.max_body)
        except TooLarge:
            return _error(413, [problem("$", f"a body of at most {config.max_body} bytes", "more")])
        findings = await asyncio.get_running_loop().run_in_executor(None, verify_bytes, data)
        return _json(verify_result("request", findings))

    async def healthz(request: Request) -> Response:
        return _json({"status": "ok"})

    async def readyz(request: Request) -> Response:
        if state.ready:
            return _json({"status": "ready", "agents": len(state.fleet), "next_seq": state.next_seq})
        return _json({"status": "loading"}, 503)

    async def metrics_text(request: Request) -> Response:
        if state.ready:
            metrics.FLEET_AGENTS.set(len(state.fleet))
            metrics.JOURNAL_LAG.set(state.journal_lag)
            metrics.JOURNAL_ENTRIES.set(state.journal.entries if state.journal is not None else 0)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    async def ui(request: Request) -> Response:
        page = await live.page()
        headers = {"ETag": page.etag, "Cache-Control": "no-cache", **page.headers}
        if request.headers.get("if-none-match") == page.etag:
            return Response(status_code=304, headers=headers)
        return Response(page.html, media_type="text/html; charset=utf-8", headers=headers)

    async def ui_data(request: Request) -> Response:
        return Response(orjson.dumps({"version": await live.shown_version(), "next_seq": state.next_seq}),
                        media_type=JSON, headers={"Cache-Control": "no-store"})

    async def watch(request: Request) -> Response:
        if watcher is None:
            return _json({"interval": None, "remove_after": None, "sources": []})
        return _json(watcher.status())

    async def openapi(request: Request) -> Response:
        return _json(openapi_document())

    async def k8s(request: Request, verb: str) -> Response:
        # not parse_json: the service's bounds on A3 documents would refuse valid Pods and Nodes;
        # the extender bounds only what it reads (a3fast.service.k8s)
        try:
            data = await _body(request, config.max_body)
        except TooLarge:
            return _error(413, [problem("$", f"a body of at most {config.max_body} bytes", "more")])
        try:
            return Response(await getattr(extender, verb)(data), media_type=JSON)
        except BadArgs as exc:
            return _error(400, exc.problems)
        except ExtenderError as exc:
            return _error(400, [problem("$.Pod.metadata.annotations", "valid A3 requirements", str(exc))])

    async def k8s_filter(request: Request) -> Response:
        return await k8s(request, "filter")

    async def k8s_prioritize(request: Request) -> Response:
        return await k8s(request, "prioritize")

    routes = [
        Route("/v1/agents/{name}", agent, methods=["PUT", "GET", "DELETE"]),
        Route("/v1/agents", agents, methods=["GET", "POST"]),
        # an ASGI endpoint (a partial is not wrapped as request -> response); Guard answers
        # POST before routing, so Starlette only sees it for the 405 of other methods
        Route("/v1/place", functools.partial(place_asgi), methods=["POST"]),
        Route("/v1/outcomes", outcomes, methods=["POST"]),
        Route("/v1/sessions/{session}/{agent}", session, methods=["PUT", "DELETE"]),
        Route("/v1/trace", trace, methods=["GET"]),
        Route("/v1/verify", verify, methods=["POST"]),
        Route("/v1/replay", replay_endpoint(state, config.max_body), methods=["POST"]),
        Route("/v1/watch", watch, methods=["GET"]),
        Route("/ui", ui, methods=["GET"]),
        Route("/ui/data", ui_data, methods=["GET"]),
        Route("/v1/openapi.json", openapi, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_text, methods=["GET"]),
        Route("/k8s/filter", k8s_filter, methods=["POST"]),
        Route("/k8s/prioritize", k8s_prioritize, methods=["POST"]),
    ]

    @asynccontextmanager
    async def lifespan(app):
        app.state.failure = None
        loading = asyncio.get_running_loop().run_in_executor(None, _open, state, config, app)
        watching = asyncio.create_task(_watch_when_ready(loading, state, watcher)) if watcher else None
        try:
            yield
        finally:
            if watching is not None:
                watching.cancel()
                await asyncio.gather(watching, return_exceptions=True)
            await asyncio.shield(loading)
            extender.close()
            if state.ready:
                state.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.service = state
    app.state.on_failure = None
    app.add_middleware(Guard, config=config, state=state, fast={("POST", "/v1/place"): place_asgi})
    return app


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


async def _watch_when_ready(loading, state: ServiceState, watcher) -> None:
    await asyncio.shield(loading)
    if not state.ready:
        return
    try:
        await watcher.run()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("the watch of agent cards and MCP servers stopped")


def _query_value(query: bytes, name: str) -> str | None:
    """The last value of one query parameter (as Starlette's query_params would give it)."""
    if query == b"record=compact" and name == "record":
        return "compact"
    value = None
    for key, item in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if key == name:
            value = item
    return value


def _open(state: ServiceState, config: ServiceConfig, app) -> None:
    try:
        state.open(mark_ready=False)
        if config.fleet is not None:
            seed_fleet(state, config)
        state.ready = True
    except (StateError, SchemaError, OSError) as exc:
        app.state.failure = str(exc)
        state.ready = False
        print(f"a3fast serve: cannot start: {exc}", file=sys.stderr, flush=True)
        if app.state.on_failure is not None:
            app.state.on_failure()


def seed_fleet(state: ServiceState, config: ServiceConfig) -> None:
    """Declarations of --fleet, added when the state holds no agent yet (a restart keeps what the
    state holds). A fleet that reads in bulk (one Fleet) is read by the fleet's bulk reader in one
    pass and handed to the state whole; a sharded one takes the declarations through `put_agents`.
    SchemaError names every problem by line (or index) and JSON path; nothing is added then."""
    if not state.fresh or config.fleet is None:
        return
    from ..document_reader import load_fleet, read_declarations

    name = str(config.fleet)
    if state.fleets.reads_in_bulk:
        state.seed(load_fleet(config.fleet, state.engine, name=name))
        return
    parsed, problems = read_declarations(config.fleet)
    if problems:
        raise SchemaError(problems, name)
    state.put_agents([decl for _, decl in parsed])
    if state.journal is not None:
        state.journal.sync()


async def _iterate(chunks):
    for chunk in chunks:
        yield chunk
