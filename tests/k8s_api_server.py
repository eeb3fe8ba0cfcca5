"""A Kubernetes API server for tests: the list and watch wire format of kube-apiserver, for Nodes,
AgentDeclarations (agentdeclarations.a3.dev/v1alpha1) and the Events posted about them, on
127.0.0.1. No kube-apiserver can run on these machines; this one speaks what a client sees.

- Lists: `{"kind": "NodeList", "metadata": {"resourceVersion", "continue"}, "items"}`, paged by
  `limit` with a `continue` token (each page from the snapshot the first page was taken at),
  items in key order (namespace/name), as etcd gives them.
- Watches (`?watch=true`): HTTP/1.1 chunked, one JSON event per line
  (`{"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK"|"ERROR", "object": ...}`), starting after the
  given resourceVersion; one compacted away is `ERROR` with a Status of code 410 (Expired), as
  kube-apiserver answers; `allowWatchBookmarks=true` gets a BOOKMARK every `bookmark_every` s;
  the watch ends after `timeoutSeconds`.
- Faults: `slow` seconds between written chunks, `stall` lists or watches that send their head and
  then nothing, `refuse` lists or watches answered with an error Status (`refuse["watch"] = (504,
  "Timeout", "Too large resource version: ...")`), `expire_continues` every continue token
  answered 410 Expired, `drop_watches()` cuts every open watch (and stalled answers),
  `stop()` / `start()` kill the server (every connection aborted) and bring it back on its port,
  `compact()` forgets the history (a client resuming from before it gets 410).

Objects are what the tests build with the official client's models, serialised as the API
server serialises them. The server assigns uid, resourceVersion and creationTimestamp.
"""
from __future__ import annotations

import asyncio
import base64
import itertools
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

NODES = "nodes"
DECLARATIONS = "agentdeclarations"
_LIST_KIND = {NODES: ("NodeList", "v1"), DECLARATIONS: ("AgentDeclarationList", "a3.dev/v1alpha1")}
_KIND = {NODES: ("Node", "v1"), DECLARATIONS: ("AgentDeclaration", "a3.dev/v1alpha1")}


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


class FakeApiServer:
    """The server, run on its own thread and event loop; every method is called from the test's."""

    def __init__(self, bookmark_every: float = 0.5):
        self.bookmark_every = bookmark_every
        self.slow = 0.0
        #: requests answered with their head and then nothing, until dropped ("list", "watch")
        self.stall: set[str] = set()
        #: requests answered with an error: "list" or "watch" -> (code, reason, message)
        self.refuse: dict[str, tuple[int, str, str]] = {}
        #: every continue token is taken for expired (paging slower than the server's snapshot)
        self.expire_continues = False
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {NODES: {}, DECLARATIONS: {}}
        self.history: list[tuple[int, str, str, dict[str, Any]]] = []   # (rv, resource, type, object)
        self.compacted = 0          # events at or below this resourceVersion are gone
        self.rv = 1
        self.events: list[dict[str, Any]] = []
        self.requests: list[str] = []
        self.port = 0
        self._snapshots: dict[str, tuple[list[dict[str, Any]], int]] = {}
        self._tokens = itertools.count(1)
        self._writers: set[asyncio.StreamWriter] = set()
        self._watchers: set[asyncio.Queue] = set()
        self._server: asyncio.base_events.Server | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="fake-apiserver")
        self._thread.start()

    # -- running ----------------------------------------------------------------------------------
    def _call(self, fn, *args):
        async def run():
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def start(self) -> int:
        async def serve():
            self._server = await asyncio.start_server(self._connection, "127.0.0.1", self.port, reuse_address=True)
            self.port = self._server.sockets[0].getsockname()[1]
        asyncio.run_coroutine_threadsafe(serve(), self._loop).result(10)
        return self.port

    def stop(self) -> None:
        """Kill the server: stop accepting and abort every open connection (no goodbye)."""
        async def kill():
            if self._server is not None:
                self._server.close()
                self._server = None
            for writer in list(self._writers):
                writer.transport.abort()
            self._writers.clear()
        asyncio.run_coroutine_threadsafe(kill(), self._loop).result(10)

    def close(self) -> None:
        self.stop()

        async def finish():
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(finish(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def drop_watches(self) -> None:
        """Cut every open watch mid-stream (the client sees the connection end)."""
        def drop():
            for queue in list(self._watchers):
                queue.put_nowait(("drop", None))
        self._loop.call_soon_threadsafe(drop)

    def compact(self) -> None:
        """Forget the history: a watch resuming from an older resourceVersion gets 410 Gone."""
        def forget():
            self.compacted = self.rv
            self.history.clear()
        self._call(forget)

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: test\n  cluster:\n    server: http://127.0.0.1:{self.port}\n"
            "users:\n- name: test\n  user:\n    token: test-token\n"
            "contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n"
            "current-context: test\n")
        return path

    # -- the store ----------------------------------------------------------------------------------
    def put(self, resource: str, obj: dict[str, Any]) -> int:
        """Create or replace an object (ADDED or MODIFIED); returns its new resourceVersion."""
        return self._call(self._put, resource, orjson.loads(orjson.dumps(obj)))

    def put_many(self, resource: str, objs: list[dict[str, Any]]) -> int:
        def many():
            rv = 0
            for obj in objs:
                rv = self._put(resource, orjson.loads(orjson.dumps(obj)))
            return rv
        return self._call(many)

    def delete(self, resource: str, name: str, namespace: str = "") -> int:
        return self._call(self._delete, resource, (namespace, name))

    def _put(self, resource: str, obj: dict[str, Any]) -> int:
        key = _key(obj)
        held = self.objects[resource].get(key)
        self.rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.rv)
        meta["uid"] = held["metadata"]["uid"] if held else str(uuid.uuid4())
        meta["creationTimestamp"] = (held["metadata"]["creationTimestamp"] if held
                                     else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        kind, api_version = _KIND[resource]
        obj["kind"], obj["apiVersion"] = kind, api_version
        self.objects[resource][key] = obj
        self._publish(resource, "MODIFIED" if held else "ADDED", obj)
        return self.rv

    def _delete(self, resource: str, key: tuple[str, str]) -> int:
        obj = self.objects[resource].pop(key)
        self.rv += 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self.rv)}}
        self._publish(resource, "DELETED", obj)
        return self.rv

    def _publish(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        self.history.append((self.rv, resource, kind, obj))
        for queue in list(self._watchers):
            queue.put_nowait(("event", (self.rv, resource, kind, obj)))

    # -- HTTP ---------------------------------------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests.append(f"{method} {target}")
                if not await self._answer(method, target, body, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass       # the server closing: the connection ends with it
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        if self.slow:
            await asyncio.sleep(self.slow)
        writer.write(data)
        await writer.drain()

    async def _reply(self, writer, status: int, doc: Any) -> bool:
        body = orjson.dumps(doc)
        reason = {200: "OK", 201: "Created", 403: "Forbidden", 404: "Not Found", 410: "Gone",
                  504: "Gateway Timeout"}.get(status, "Error")
        await self._write(writer, f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                                  f"Content-Length: {len(body)}\r\n\r\n".encode())
        # the body in pieces, so a slow server is slow within a response too
        for start in range(0, len(body), 1 << 16):
            await self._write(writer, body[start:start + (1 << 16)])
        return True

    async def _answer(self, method: str, target: str, body: bytes, writer) -> bool:
        url = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = url.path.strip("/").split("/")
        if method == "POST" and len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "events":
            event = orjson.loads(body)
            event.setdefault("metadata", {})["name"] = f"event-{len(self.events)}"
            self.events.append(event)
            return await self._reply(writer, 201, event)
        if method != "GET":
            return await self._reply(writer, 404, _status(404, "NotFound", "no such route"))
        if parts == ["api", "v1", "nodes"]:
            resource, namespace = NODES, None
        elif parts == ["apis", "a3.dev", "v1alpha1", "agentdeclarations"]:
            resource, namespace = DECLARATIONS, None
        elif len(parts) == 6 and parts[:4] == ["apis", "a3.dev", "v1alpha1", "namespaces"] and parts[5] == DECLARATIONS:
            resource, namespace = DECLARATIONS, parts[4]
        else:
            return await self._reply(writer, 404, _status(404, "NotFound", f"no route {url.path}"))
        refused = self.refuse.get("watch" if query.get("watch") in ("true", "1") else "list")
        if refused is not None:
            return await self._reply(writer, refused[0], _status(*refused))
        if query.get("watch") in ("true", "1"):
            await self._watch(writer, resource, namespace, query)
            return False
        return await self._list(writer, resource, namespace, query)

    async def _hang(self, writer, head: bytes) -> None:
        """A server that answers the head and then nothing: the client's read timeout must end it."""
        queue: asyncio.Queue = asyncio.Queue()
        self._watchers.add(queue)
        try:
            await self._write(writer, head)
            while (await queue.get())[0] != "drop":
                pass
            writer.transport.abort()
        finally:
            self._watchers.discard(queue)

    async def _list(self, writer, resource: str, namespace: str | None, query: dict[str, str]) -> bool:
        if "list" in self.stall:
            await self._hang(writer, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
            return False
        token = query.get("continue")
        if token:
            held = None if self.expire_continues else self._snapshots.get(token)
            if held is None:
                return await self._reply(writer, 410, _status(410, "Expired", "the continue token has expired"))
            items, rv, offset = held[0], held[1], int(base64.b64decode(token).decode().split(":")[1])
        else:
            items = [obj for key, obj in sorted(self.objects[resource].items())
                     if namespace is None or key[0] == namespace]
            rv, offset = self.rv, 0
        limit = int(query.get("limit") or 0) or len(items) or 1
        page = items[offset:offset + limit]
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if offset + limit < len(items):
            following = base64.b64encode(f"{next(self._tokens)}:{offset + limit}".encode()).decode()
            self._snapshots[following] = (items, rv)
            meta["continue"] = following
        kind, api_version = _LIST_KIND[resource]
        return await self._reply(writer, 200, {"kind": kind, "apiVersion": api_version, "metadata": meta,
                                               "items": page})

    async def _watch(self, writer, resource: str, namespace: str | None, query: dict[str, str]) -> None:
        if "watch" in self.stall:
            await self._hang(writer, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                     b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            return
        queue: asyncio.Queue = asyncio.Queue()
        self._watchers.add(queue)
        try:
            since = int(query.get("resourceVersion") or self.rv)
            timeout = float(query.get("timeoutSeconds") or 1800)
            bookmarks = query.get("allowWatchBookmarks") == "true"
            await self._write(writer, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                      b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            if since < self.compacted:
                await self._chunk(writer, {"type": "ERROR", "object": _status(
                    410, "Expired", f"too old resource version: {since} ({self.compacted})")})
                await self._write(writer, b"0\r\n\r\n")
                return
            backlog = [h for h in self.history if h[0] > since]
            for rv, res, kind, obj in backlog:
                if self._matches(res, obj, resource, namespace):
                    await self._chunk(writer, {"type": kind, "object": obj})
            last = max([since] + [h[0] for h in backlog])
            ends = time.monotonic() + timeout
            next_bookmark = time.monotonic() + self.bookmark_every
            while True:
                now = time.monotonic()
                if now >= ends:
                    break
                wait = min(ends, next_bookmark) - now if bookmarks else ends - now
                try:
                    what, item = await asyncio.wait_for(queue.get(), max(0.0, wait))
                except asyncio.TimeoutError:
                    if bookmarks and time.monotonic() >= next_bookmark:
                        kind, api_version = _KIND[resource]
                        await self._chunk(writer, {"type": "BOOKMARK", "object": {
                            "kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": str(self.rv)}}})
                        next_bookmark = time.monotonic() + self.bookmark_every
                    continue
                if what == "drop":
                    writer.transport.abort()
                    return
                rv, res, kind, obj = item
                if rv > last and self._matches(res, obj, resource, namespace):
                    await self._chunk(writer, {"type": kind, "object": obj})
            await self._write(writer, b"0\r\n\r\n")
        finally:
            self._watchers.discard(queue)

    @staticmethod
    def _matches(res: str, obj: dict[str, Any], resource: str, namespace: str | None) -> bool:
        return res == resource and (namespace is None or obj["metadata"].get("namespace") == namespace)

    async def _chunk(self, writer, event: dict[str, Any]) -> None:
        line = orjson.dumps(event) + b"\n"
        await self._write(writer, f"{len(line):x}\r\n".encode() + line + b"\r\n")


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
