"""Watching live agents: the served fleet kept in step with the Agent Cards it was imported from,
and agents' tools kept in step with the MCP servers they are bound to.

A background task re-fetches each watched card on an interval (`fetch_card`: its bounds, and an
ETag so an unchanged card costs a 304), derives the declarations exactly as `a3fast import a2a URL`
does with no flags (namespace from the host, ids normalised under `a2a.`, version 1, endpoint kept),
and applies a change through the operations every PUT and DELETE of /v1/agents goes through, so it
is journaled and durable like any other change.

Policy (docs/service.md): a card that is gone (404 at every location, or 410) removes the agents it
gave after `remove_after` consecutive misses; a card that turns invalid, or an agent that cannot be
reached, keeps its last good agents and is reported (`status()`, served at /v1/watch, and the
`a3fast_watch_checks_total` counter). Errors on the way to a card back off; answers about the card
(gone, invalid) do not, since refetching them is cheap and the fix should be seen at once.

A watched MCP server (`AGENT=URL`, streamable HTTP) is listed on the same loop with the client of
`a3fast import mcp --server-url` and bound into the agent exactly as that import binds it: the
agent's tools are the ones it has from elsewhere (its declaration as last PUT, less the tools this
server gave before) plus the server's current tools, and `tool_servers` names the server. A server
that cannot be listed keeps the last tools and backs off; an agent not in the fleet is reported
and waited for, never made up.
"""
from __future__ import annotations

import asyncio
import datetime as _dt
import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ..cancellation import cancel_until_done, join_within, within
from ..errors import printable
from ..files import write_atomic
from ..interop.a2a import import_cards
from ..interop.fetch import EtagCache, FetchError, Limits, card_locations, fetch_card_async, without_credentials
from ..interop.mcp import TOOL_SERVERS, import_listings
from ..interop.naming import is_domain, server_domain
from ..interop.report import ImportReport
from ..interop.sources import Document, usable_json_documents
from ..interop.supply import Supplied
from . import metrics
from .operations import Operations
from .problems import ServiceError

if TYPE_CHECKING:
    import httpx

__all__ = ["CARD_DEFAULTS", "WatchConfig", "Watched", "WatchedServer", "Watcher", "bind_server_tools",
           "derive_declarations", "WatchError"]

log = logging.getLogger("a3fast.serve.watch")

#: What `a3fast import a2a URL` supplies when given no flags: the watch derives the same agents.
CARD_DEFAULTS = Supplied(derive_namespace=True, capability_version=1, normalise=True, skill_domain="a2a",
                         defaulted=frozenset({"capability_version", "skill_domain"}))
#: Longest wait between two fetches of a source that keeps failing.
MAX_BACKOFF = 300.0


class WatchError(Exception):
    """A card that was fetched but gives no usable agent; the message says why."""


@dataclass(frozen=True)
class WatchConfig:
    cards: tuple[str, ...] = ()
    #: (agent, streamable HTTP URL) pairs: each agent's tools kept in step with the server's
    servers: tuple[tuple[str, str], ...] = ()
    interval: float = 30.0
    remove_after: int = 3
    limits: Limits = Limits()
    #: checks running at once (each source has its own schedule; a fetch ends by its deadline)
    concurrency: int = 16


def derive_declarations(body: bytes, requested: str, fetched_from: str) -> list[dict[str, Any]]:
    """The declarations a fetched card gives, as `a3fast import a2a` derives them with no flags, or
    WatchError naming what is wrong (a body that is not a card, a card that gives no agent, an agent
    with no capabilities: the import refuses all three)."""
    report = ImportReport("a2a")
    docs, problems = usable_json_documents(body, requested)
    if not docs:
        raise WatchError("; ".join(f"{p.path}: expected {p.expected}, found {p.found}" for p in problems[:3]))
    for problem in problems:    # a line that cannot be read is skipped, as the import skips it
        report.skip(requested, problem.path, f"expected {problem.expected}, found {problem.found}")
    result = import_cards(docs, CARD_DEFAULTS, report, fetched={requested: fetched_from})
    if not result.declarations:
        reasons = "; ".join(f"{s.path}: {s.reason}" for s in report.skipped[:3]) or "no agent derived"
        raise WatchError(f"the card gives no agent ({reasons})")
    empty = [d["agent"]["name"] for d in result.declarations if not d.get("capabilities")]
    if empty:
        skipped = "; ".join(f"{s.path}: {s.reason}" for s in report.skipped[:3])
        raise WatchError(f"agent {empty[0]!r} would have no capabilities"
                         + (f" ({skipped})" if skipped else ""))
    return result.declarations


def bind_server_tools(doc: dict[str, Any], contributed: Any, pages: list[dict[str, Any]], url: str,
                      server_name: str | None) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The agent's declaration `doc` with the tools the server at `url` contributed before
    (`contributed`) taken out and its current listing (`pages` of tools/list) bound in as
    `a3fast import mcp --server-url URL --bind AGENT` binds it; returns the declaration and the
    tools the server now contributes (those the agent did not already have from elsewhere)."""
    url = without_credentials(url)      # the declaration names the server, never its password
    gave = set(contributed)
    base = dict(doc)
    own = [t for t in doc.get("tools") or () if t not in gave]
    if own:
        base["tools"] = own
    else:
        base.pop("tools", None)
    # the server's entry is replaced, not added to, when the server renames itself
    others = [s for s in doc.get(TOOL_SERVERS) or () if not (isinstance(s, dict) and s.get("url") == url)]
    if others:
        base[TOOL_SERVERS] = others
    else:
        base.pop(TOOL_SERVERS, None)
    name = server_name if server_name is None or is_domain(server_name) else server_domain(server_name)
    tool_server = {**({"name": name} if name else {}), "transport": "streamable-http", "url": url}
    agent = doc["agent"]["name"]
    docs = [Document(f"mcp {url}", f"page {i + 1}: $", page) for i, page in enumerate(pages)]
    result = import_listings(docs, fleet=[Document("fleet", "$", base)], bind=[agent], tool_server=tool_server)
    decl = next(d for d in result.declarations if d["agent"]["name"] == agent)
    kept = set(own)
    return decl, tuple(t for t in decl.get("tools") or () if t not in kept)


#: How long the watch's stop waits, at most, for the listings still running on their threads. A
#: listing can be in OpenSSL without the GIL (the first of a process builds the TLS context every
#: listing shares, loading the CA bundle; each makes its handshakes), and a process that exits under
#: such a thread crashes: OpenSSL's exit handlers free what the thread reads. A listing stuck waiting on a server that never answers is left once
#: this has passed (it waits in the event loop's poll, where exiting is harmless).
LISTINGS_STOP_WAIT = 2.0


async def _in_daemon_thread(threads: set[threading.Thread], function, *args, **kwargs):
    """`function(*args, **kwargs)` run on a thread of its own, awaited. Not asyncio's default
    executor: the loop joins that executor's threads when it closes, so a listing stuck until its
    deadline (a server that accepts and never answers) held the service's exit for that long. A
    daemon thread is not waited for at exit, and a result that comes after its waiter gave up is
    dropped. The thread is in `threads` while it runs, for the watch's stop to wait for a while
    (`LISTINGS_STOP_WAIT`)."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def settle(outcome: BaseException | None, result: Any) -> None:
        if done.done():
            return   # the waiter was cancelled (deadline, stop)
        if outcome is not None:
            done.set_exception(outcome)
        else:
            done.set_result(result)

    def run() -> None:
        try:
            try:
                result, outcome = function(*args, **kwargs), None
            except Exception as exc:
                result, outcome = None, exc
            try:
                loop.call_soon_threadsafe(settle, outcome, result)
            except RuntimeError:
                pass   # the loop has closed: nothing waits for this result any more
        finally:
            threads.discard(threading.current_thread())

    thread = threading.Thread(target=run, name=f"a3fast-{function.__name__}", daemon=True)
    threads.add(thread)
    thread.start()
    return await done


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _canonical(doc: Any) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


@dataclass
class Watched:
    """One watched card and what its checks found."""

    url: str
    #: agents this card gave when it was last good (remembered across restarts with --state)
    agents: tuple[str, ...] = ()
    last_fetch: str | None = None
    last_good: str | None = None
    last_change: str | None = None
    last_error: str | None = None
    last_error_at: str | None = None
    #: consecutive checks that found the card gone / that failed on the way to it
    misses: int = 0
    failures: int = 0
    checks: int = 0
    changes: int = 0
    #: checks that ended in an error, ever; the result of the last check
    errors: int = 0
    last_result: str | None = None
    last_error_time: float | None = field(default=None, repr=False)
    due: float = 0.0
    #: seconds from the last check to the next: the interval, or its backoff after failures
    delay: float = 0.0
    #: the digest of the body last applied or refused, and why it was refused, remembered across
    #: restarts: the same body again changes nothing (an operator's PUT or DELETE included), where
    #: a body whose apply failed, was cut short or is still under way is applied at the next check
    settled: bytes | None = field(default=None, repr=False)
    refusal: str | None = field(default=None, repr=False)
    #: the card URL its agents were last derived from (their `endpoint.card`), remembered across
    #: restarts: an agent the fleet holds from another card, or from an operator, is not this
    #: source's to delete or move (None: a memory from before it was kept)
    fetched: str | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        """The source's entry in the watch memory."""
        return self.url

    def owns(self, held: Any) -> bool:
        """Whether the fleet's declaration `held` is the one this card gave."""
        if self.fetched is None:
            return True
        endpoint = held.doc.get("endpoint")
        card = endpoint.get("card") if isinstance(endpoint, dict) else None
        return isinstance(card, str) and without_credentials(card) == without_credentials(self.fetched)

    def remembered(self) -> Any:
        return {"agents": list(self.agents), "digest": self.settled.hex() if self.settled else None,
                "refusal": self.refusal, "fetched": self.fetched}

    def recall(self, value: Any) -> None:
        if isinstance(value, list):          # the memory of an a3fast before it kept the body's digest
            value = {"agents": value}
        if not isinstance(value, dict):
            return
        agents, digest = value.get("agents"), value.get("digest")
        if isinstance(agents, list) and all(isinstance(n, str) for n in agents):
            self.agents = tuple(agents)
            fetched = value.get("fetched")
            self.fetched = fetched if isinstance(fetched, str) else None
            refusal = value.get("refusal")
            # "refused" was an earlier form that kept no words: its body is checked again
            if isinstance(digest, str) and len(digest) == 64 and "refused" not in value:
                try:
                    self.settled = bytes.fromhex(digest)
                except ValueError:
                    return
                self.refusal = refusal if isinstance(refusal, str) else None

    @property
    def shown(self) -> str:
        """The source's URL as the watch shows it (its status, logs, metrics): without a user name
        or password, which only the fetch uses."""
        return without_credentials(self.url)

    def status(self, now: float) -> dict[str, Any]:
        return {"url": self.shown, "kind": "a2a", "agents": list(self.agents), "last_fetch": self.last_fetch,
                "last_good": self.last_good, "last_change": self.last_change, "last_error": self.last_error,
                "last_error_at": self.last_error_at, "last_result": self.last_result, "errors": self.errors,
                "misses": self.misses, "failures": self.failures, "checks": self.checks, "changes": self.changes,
                "delay": round(self.delay, 3), "next_fetch_in": round(max(0.0, self.due - now), 3)}


@dataclass
class WatchedServer(Watched):
    """One watched MCP server and the agent whose tools follow it."""

    agent: str = ""
    #: the tools this server gave the agent, as last applied (remembered across restarts with --state)
    tools: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"mcp {self.agent}={self.url}"

    def remembered(self) -> Any:
        return {"tools": list(self.tools)}

    def recall(self, value: Any) -> None:
        tools = value.get("tools") if isinstance(value, dict) else None
        if isinstance(tools, list) and all(isinstance(t, str) for t in tools):
            self.tools = tuple(tools)

    def status(self, now: float) -> dict[str, Any]:
        return {**super().status(now), "kind": "mcp", "agents": [self.agent], "tools": list(self.tools)}


class Watcher:
    """The watch over a service's fleet: `run()` is the background task, `status()` its report."""

    def __init__(self, ops: Operations, config: WatchConfig, memory: Path | None = None):
        for url in config.cards:
            card_locations(url)   # a bad URL is refused before the service starts (FetchError)
        self.ops = ops
        self.config = config
        self.memory = memory
        self.sources: list[Watched] = [Watched(url) for url in dict.fromkeys(config.cards)]
        self.sources += [WatchedServer(url, agent=agent) for agent, url in dict.fromkeys(config.servers)]
        self.cache = EtagCache(None)
        self._client: httpx.AsyncClient | None = None   # one connection pool while `run` runs
        self._slots = asyncio.Semaphore(config.concurrency)
        self._listings: set[threading.Thread] = set()   # the threads of MCP listings under way
        self.running = False
        self.load_memory()

    # -- memory of which agents each card gave ---------------------------------------------------
    def load_memory(self) -> None:
        """Agents each card gave before a restart, so a card that vanished while the service was
        down is still removed. A missing or unreadable file is an empty memory."""
        if self.memory is None or not self.memory.is_file():
            return
        try:
            data = orjson.loads(self.memory.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            log.warning("%s: unreadable; the watch starts with no memory of earlier agents", self.memory)
            return
        if not isinstance(data, dict):
            return
        for source in self.sources:
            source.recall(data.get(source.key))

    def _save_memory(self) -> None:
        if self.memory is None:
            return
        data = {s.key: s.remembered() for s in self.sources}
        try:
            write_atomic(self.memory, orjson.dumps(data, option=orjson.OPT_SORT_KEYS))
        except OSError as exc:
            log.warning("%s: not saved (%s)", self.memory, exc.strerror or exc)

    # -- the loop ---------------------------------------------------------------------------------
    async def run(self) -> None:
        """Check every source when due, forever (cancelled when the service stops). Each source has
        its own task, so a slow source (each fetch ends at its deadline) delays no other; at most
        `config.concurrency` checks run at once."""
        from ..interop.fetch import new_client

        self._client = new_client(self.config.limits)
        self._slots = asyncio.Semaphore(self.config.concurrency)
        metrics.WATCH_RUNNING.set(1)
        self.running = True
        tasks = [asyncio.create_task(self._follow(source)) for source in self.sources]
        try:
            await asyncio.gather(*tasks)
        finally:
            self.running = False
            metrics.WATCH_RUNNING.set(0)
            try:
                await cancel_until_done(tasks)
                await self._client.aclose()
            finally:
                await join_within(list(self._listings), LISTINGS_STOP_WAIT)

    async def _follow(self, source: Watched) -> None:
        """One source's checks, forever: an error of one check (of any kind) is that source's
        error, reported and backed off, never the end of the watch."""
        while True:
            await asyncio.sleep(max(0.0, source.due - time.monotonic()))
            async with self._slots:
                await self.check(source)

    async def check(self, source: Watched) -> str:
        """Fetch one card and apply what changed; returns the result counted in the metrics."""
        try:
            result = await self._check(source)
        except Exception as exc:  # a bug or an unforeseen error of one source stops no other
            log.exception("watch %s: the check failed", printable(source.shown))
            text = without_credentials(" ".join(str(exc).split())[:300])
            result = self._failed(source, f"the check failed ({type(exc).__name__}: {text}); "
                                          f"keeping the last good agents")
        source.checks += 1
        source.last_fetch = _now()
        delay = self.config.interval
        if result == "error":
            source.failures += 1
            delay = min(max(MAX_BACKOFF, self.config.interval), self.config.interval * 2 ** min(source.failures, 10))
        else:
            source.failures = 0
        source.delay = delay
        source.due = time.monotonic() + delay
        source.last_result = result
        metrics.WATCH_CHECKS.labels(result).inc()
        metrics.watched(without_credentials(source.key), failing=source.last_error is not None, errors=source.errors,
                        last_error_at=source.last_error_time, checked_at=time.time())
        return result

    async def _check(self, source: Watched) -> str:
        if isinstance(source, WatchedServer):
            return await self._check_server(source)
        try:
            card = await fetch_card_async(source.url, self.config.limits, self.cache, self._client)
        except FetchError as exc:
            if not exc.gone:
                return self._failed(source, exc.message)
            source.misses += 1
            source.settled = None
            self._failed(source, f"{exc.message} (miss {source.misses} of {self.config.remove_after})")
            if source.misses >= self.config.remove_after and source.agents:
                if await self._remove(source, source.agents):
                    source.changes += 1
                    source.last_change = _now()
                source.agents = ()
                self._save_memory()
                return "removed"
            return "missing"
        source.misses = 0
        digest = hashlib.sha256(card.body).digest()
        if digest == source.settled:
            # the same body as last time (often a 304): already applied, or refused (said again
            # where another error, or a restart, left another word or none)
            if source.refusal is None:
                source.last_good, source.last_error, source.last_error_at = _now(), None, None
                return "unchanged"
            if source.last_error != source.refusal:
                return self._failed(source, source.refusal, "invalid")
            return "invalid"
        try:
            decls = derive_declarations(card.body, source.url, card.url)
        except WatchError as exc:
            source.settled, source.refusal = digest, f"{without_credentials(card.url)}: {exc}; keeping the last good agents"
            self._save_memory()
            return self._failed(source, source.refusal, "invalid")
        return await self._apply(source, decls, digest, without_credentials(card.url))

    async def _check_server(self, source: WatchedServer) -> str:
        from ..interop.mcp_live import ListingError, ServerSpec, list_tools

        try:
            # list_tools ends itself at the deadline; the wait is bounded again here, so a listing
            # stuck where it cannot be cancelled holds its thread but not this source's schedule
            deadline = self.config.limits.deadline
            listing = await within(_in_daemon_thread(self._listings, list_tools, ServerSpec(url=source.url),
                                                     timeout=deadline), deadline + 5)
        except ListingError as exc:
            return self._failed(source, f"{exc.message}; keeping the last tools")
        except TimeoutError:
            return self._failed(source, f"no complete tool listing within {deadline + 5:g} s; "
                                        f"keeping the last tools")
        held = self.ops.state.fleet.get(source.agent)
        if held is None:
            return self._failed(source, f"agent {source.agent!r} is not in the fleet; its tools are bound "
                                        f"once it is declared", "missing")
        decl, tools = bind_server_tools(dict(held.doc), source.tools, listing.pages, source.url, listing.server_name)
        changed = _canonical(held.doc) != _canonical(decl)
        if changed:
            try:
                await self.ops.put_agent({"name": source.agent, "declaration": decl})
            except ServiceError as exc:
                detail = "; ".join(f"{p.get('path')}: expected {p.get('expected')}, found {p.get('found')}"
                                   for p in exc.problems[:3])
                return self._failed(source, f"agent {source.agent!r} not applied (HTTP {exc.status}: {detail}); "
                                            f"keeping the last tools", "invalid")
            source.changes += 1
            source.last_change = _now()
        source.last_good, source.last_error, source.last_error_at = _now(), None, None
        if tools != source.tools:
            source.tools = tools
            self._save_memory()
        return "changed" if changed else "unchanged"

    def _failed(self, source: Watched, message: str, result: str = "error") -> str:
        source.last_error, source.last_error_at = message, _now()
        source.last_error_time = time.time()
        source.errors += 1
        # one line whatever a card server put in it (a redirect's Location, a card's text)
        log.warning("watch %s: %s", printable(source.shown), printable(message))
        return result

    async def _apply(self, source: Watched, decls: list[dict[str, Any]], digest: bytes, fetched: str) -> str:
        """The body's agents put where they differ, those it no longer gives removed. Until all
        are put the body is not settled, so the next check applies it again (a conflict may be
        resolved by then, a shard back); the agents put so far are the source's from then on,
        so a card that goes away takes them with it."""
        changed, put, removing, name = False, list[str](), False, ""
        names = tuple(d["agent"]["name"] for d in decls)
        try:
            for decl in decls:
                name = decl["agent"]["name"]
                held = self.ops.state.fleet.get(name)
                if held is not None and _canonical(held.doc) == _canonical(decl):
                    continue
                if (held is not None and name in source.agents and source.owns(held)
                        and held.agent.namespace != decl["agent"]["namespace"]):
                    # the card moved host (a redirect, say): its own agent, held in the namespace
                    # of the old one, would refuse it (a name lives in one namespace)
                    await self.ops.delete_agent({"name": name})
                # counted before it is awaited: a put cut short (the watch stopping, a shard that
                # answered late) may already be in the fleet; only a refusal changes nothing
                put.append(name)
                try:
                    await self.ops.put_agent({"name": name, "declaration": decl})
                except ServiceError:
                    put.pop()
                    raise
                changed = True
            gone = [n for n in source.agents if n not in names]
            if gone:
                removing = True
                changed = await self._remove(source, gone) or changed
        except BaseException as exc:
            if put or removing:
                # the fleet may hold part of this body: its agents are the card's, and no body is
                # settled, so the next check applies whichever body the card then gives, its last
                # good one included
                source.agents = tuple(dict.fromkeys((*source.agents, *put)))
                source.settled = None
                self._save_memory()
            if not isinstance(exc, ServiceError):
                raise
            detail = "; ".join(f"{p.get('path')}: expected {p.get('expected')}, found {p.get('found')}"
                               for p in exc.problems[:3])
            kept = (f"applied so far: {', '.join(map(repr, put))}" if put else
                    "the fleet keeps what it holds of the card; applied again at the next check")
            return self._failed(source, f"agent {name!r} not applied (HTTP {exc.status}: {detail}); {kept}",
                                "invalid")
        source.last_good, source.last_error, source.last_error_at = _now(), None, None
        source.agents, source.settled, source.refusal, source.fetched = names, digest, None, fetched
        self._save_memory()      # the agents, and the body they came from
        if changed:
            source.changes += 1
            source.last_change = _now()
            return "changed"
        return "unchanged"

    async def _remove(self, source: Watched, names) -> bool:
        """Delete the agents of `names` the fleet holds as this card gave them (not one another card
        or an operator has put since); whether any was deleted. Another watched card that gives a
        deleted name puts it back at its next check."""
        deleted = []
        for name in names:
            held = self.ops.state.fleet.get(name)
            if held is None or not source.owns(held):
                continue   # already deleted, or another's now
            try:
                await self.ops.delete_agent({"name": name})
            except ServiceError:
                continue
            deleted.append(name)
        for other in self.sources:
            if other is not source and not isinstance(other, WatchedServer) and set(other.agents) & set(deleted):
                other.settled = None
        return bool(deleted)

    def status(self) -> dict[str, Any]:
        now = time.monotonic()
        return {"running": self.running, "interval": self.config.interval, "remove_after": self.config.remove_after,
                "sources": [s.status(now) for s in self.sources]}
