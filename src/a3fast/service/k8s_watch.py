"""The served fleet from the cluster: `a3fast serve --watch-k8s` lists and then watches the
AgentDeclaration objects (agentdeclarations.a3.dev/v1alpha1) and the Nodes, and keeps the fleet
equal to the declarations they carry (docs/kubernetes.md, "Agents from the cluster").

Informer semantics, as client-go's reflector has them, with the official `kubernetes` client:
each watched collection has a reflector on its own worker thread that lists (in pages of
LIST_PAGE), then watches from the list's resourceVersion with bookmarks allowed, resumes each
watch from the last resourceVersion it saw (an event's or a bookmark's), lists again when the API
server answers 410 Gone (the version was compacted) and, after a backoff with jitter, when it
answers any other error but 429 (a watch refused for a resourceVersion the server has not reached,
after etcd was restored from a backup, is listed past, not asked again for ever); a request that
got no answer is watched again from where the watch was (`_lists_again_after` says why). A list whose continue token expires is
made again whole, in one request, as client-go's pager does. Every request is bounded: a list by its read timeout, a watch by `timeoutSeconds` on the
server and a read timeout a little past it on the client.

The reflector threads parse what they receive (the declarations are checked there, off the event
loop) and hand each batch to the event loop, one at a time and in the order received; the loop
applies it to the fleet through the service state, as a PUT or DELETE of /v1/agents would be.

Ownership. A declaration's agent name is the fleet's key. An AgentDeclaration object declares the
agent its spec names (or, failing that, the object's metadata.name, in the object's namespace); a
Node declares the agent of its `a3.dev/declaration` annotation, which must be named as the node is
(kube-scheduler offers nodes by name). When several objects declare one name, the fleet serves
exactly one of them, chosen from the cluster state alone, so every replica chooses alike: an
AgentDeclaration before a Node, then the lowest (namespace, name). Every other claimant is a
conflict, reported like an invalid object; it is served once the winner lets go of the name.

An object that is not a valid declaration is reported and declares no agent until it is fixed (as
on a replica that never saw it valid): a Kubernetes Event on the object (reason
`InvalidDeclaration` or `DeclarationConflict`, once per distinct problem, posted from a daemon
thread of its own), the `a3fast_k8s_invalid_objects` gauge and
`a3fast_k8s_events_total{result="invalid"}`, and the problem under /v1/watch. Deleting the object
removes its agent.

Readiness: `synced` is true once every reflector's first full list has been applied (client-go's
HasSynced); /readyz answers 503 until then, and so do the routes that decide from the fleet.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as _dt
import functools
import logging
import os
import queue
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple

import orjson

from ..cancellation import join_within
from ..document import READABLE_DEPTH, cut_deeper_than
from ..errors import A3Error, SchemaError
from ..interop.kubernetes import ANNOTATION, GROUP, PLURAL, VERSIONS, fill_agent
from ..schema import parse_declaration
from . import metrics
from .problems import check_bounds

__all__ = ["KubeWatchConfig", "KubeWatch", "load_client_configuration", "KubeConfigError", "Claim",
           "read_declaration_object", "read_node", "LIST_PAGE"]

log = logging.getLogger("a3fast.serve.k8s")

VERSION = VERSIONS[0]
#: Objects asked for per list request (client-go's reflector pages by 500 too).
LIST_PAGE = 500
#: The component named on the Events a3fast posts.
COMPONENT = "a3fast"
#: Slowest retry of a failing list or watch, in seconds.
MAX_BACKOFF = 30.0
#: How long the watch's stop waits, at most, for its reflector threads to end (see `run`).
REFLECTORS_STOP_WAIT = 2.0
#: A batch's wait for the event loop to apply it, in seconds (the loop is never held for long).
APPLY_TIMEOUT = 120.0
#: A watch that ends sooner than this, in seconds, without an event is a failure (client-go's
#: reflector calls it "very short" under one second too): backed off, not resumed at once.
SHORT_WATCH = 1.0


class KubeConfigError(Exception):
    """No usable connection settings: the message says which source was tried and why it failed."""


@dataclass(frozen=True)
class KubeWatchConfig:
    #: the kubeconfig file (None: in-cluster when running in a pod, else ~/.kube/config)
    kubeconfig: Path | None = None
    #: namespaces whose AgentDeclarations are watched (empty: all namespaces)
    namespaces: tuple[str, ...] = ()
    #: a watch request's timeoutSeconds (the server ends it then; each request draws up to twice this)
    watch_timeout: float = 300.0
    #: read timeout of a list request, and the margin past timeoutSeconds of a watch's reads
    request_timeout: float = 30.0
    #: first retry delay after a failure (doubled each time, with jitter, up to MAX_BACKOFF)
    backoff: float = 0.8
    #: post Events on invalid and conflicting objects
    events: bool = True


def load_client_configuration(kubeconfig: Path | None):
    """The client's Configuration: `kubeconfig`, else the pod's service account (in-cluster), else
    ~/.kube/config. KubeConfigError naming the source when none is usable."""
    import yaml
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    # what a kubeconfig that is not one can raise: not YAML, or YAML of the wrong shapes
    unusable = (ConfigException, yaml.YAMLError, OSError, ValueError, TypeError, KeyError, AttributeError)
    configuration = client.Configuration()
    if kubeconfig is not None:
        try:
            config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration,
                                    persist_config=False)
        except unusable as exc:
            raise KubeConfigError(f"--kubeconfig {kubeconfig}: cannot use it: {exc}") from None
        return configuration
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config(client_configuration=configuration)
            return configuration
        except ConfigException as exc:
            raise KubeConfigError(f"in-cluster configuration: cannot use it: {exc}") from None
    files = kubeconfig_files(os.environ.get("KUBECONFIG"))
    found = [path for path in files if path.is_file()]
    if not found:
        raise KubeConfigError(f"no --kubeconfig, not running in a pod, and {_named(files)} "
                              f"{'does' if len(files) == 1 else 'do'} not exist")
    try:      # several files are merged as kubectl merges them (the client's KubeConfigMerger)
        config.load_kube_config(config_file=os.pathsep.join(map(str, found)), client_configuration=configuration,
                                persist_config=False)
    except unusable as exc:
        raise KubeConfigError(f"{_named(found)}: cannot use {'it' if len(found) == 1 else 'them'}: {exc}") from None
    return configuration


def kubeconfig_files(variable: str | None) -> list[Path]:
    """The kubeconfig files `$KUBECONFIG` names, as kubectl reads it: a list of paths, empty entries
    skipped, and ~/.kube/config when it names none (unset or empty)."""
    named = [entry for entry in (variable or "").split(os.pathsep) if entry]
    return [Path(os.path.expanduser(entry)) for entry in named or ["~/.kube/config"]]


def _named(paths: list[Path]) -> str:
    return ", ".join(map(str, paths))


# -- reading one object -----------------------------------------------------------------------------
class Claim(NamedTuple):
    """What one object says: its key, a reference for Events, and either a declaration (with the
    agent's name) or the problem that makes it none. `name` is None when the object declares nothing
    (a Node without the annotation)."""
    key: tuple[str, str, str]          # (kind, namespace, name): kind "AgentDeclaration" or "Node"
    ref: dict[str, Any]                # involvedObject of an Event on it
    name: str | None
    declaration: Any                   # Declaration, or None
    problem: str | None


def _ref(kind: str, meta: dict[str, Any], api_version: str) -> dict[str, Any]:
    return {"kind": kind, "apiVersion": api_version, "name": meta.get("name"), "namespace": meta.get("namespace"),
            "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}


def _parsed(doc: Any, where: str):
    """(Declaration, None) or (None, the problem)."""
    if not isinstance(doc, dict):
        return None, f"{where}: expected a declaration (a JSON object), found {type(doc).__name__}"
    try:
        check_bounds(doc)
        return parse_declaration(doc), None
    except SchemaError as exc:
        p = exc.problems[0]
        return None, f"{where}{p.path[1:]}: expected {p.expected}, found {p.found}"
    except A3Error as exc:
        return None, f"{where}: {exc}"


def read_declaration_object(obj: dict[str, Any]) -> Claim:
    """An AgentDeclaration as a Claim: its spec is the declaration, the agent's name and namespace
    defaulting to the object's (as `a3fast import k8s` reads it)."""
    meta = obj.get("metadata") or {}
    key = ("AgentDeclaration", meta.get("namespace") or "", meta.get("name") or "")
    ref = _ref("AgentDeclaration", meta, f"{GROUP}/{VERSION}")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return Claim(key, ref, None, None, "spec: expected the declaration (an object), found "
                                           + ("nothing" if spec is None else type(spec).__name__))
    filled, _, _ = fill_agent(spec, meta, None)
    decl, problem = _parsed(filled, "spec")
    agent = filled.get("agent")
    name = agent.get("name") if isinstance(agent, dict) and isinstance(agent.get("name"), str) else None
    return Claim(key, ref, decl.agent.name if decl is not None else name, decl, problem)


def read_node(obj: dict[str, Any]) -> Claim:
    """A Node as a Claim: the declaration is its `a3.dev/declaration` annotation, naming the node."""
    meta = obj.get("metadata") or {}
    node = meta.get("name") or ""
    key = ("Node", "", node)
    ref = _ref("Node", meta, "v1")
    text = (meta.get("annotations") or {}).get(ANNOTATION)
    if text is None:
        return Claim(key, ref, None, None, None)
    where = f"metadata.annotations[{ANNOTATION}]"
    try:
        doc = orjson.loads(text) if isinstance(text, str) else None
    except orjson.JSONDecodeError as exc:
        return Claim(key, ref, node, None, f"{where}: expected a declaration as JSON, found {str(exc)[:120]}")
    if isinstance(doc, dict):
        doc, _, _ = fill_agent(doc, {"name": node}, None)
    decl, problem = _parsed(doc, f"{where} $")
    if decl is not None and decl.agent.name != node:
        return Claim(key, ref, node, None, f"{where}: declares agent {decl.agent.name!r}; a node's "
                                           f"declaration must name the node ({node!r})")
    return Claim(key, ref, node, decl, problem)


def _precedence(key: tuple[str, str, str]) -> tuple[int, str, str]:
    return (0 if key[0] == "AgentDeclaration" else 1, key[1], key[2])


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _describe(key: tuple[str, str, str]) -> str:
    kind, namespace, name = key
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


# -- one watched collection ------------------------------------------------------------------------
@dataclass
class Collection:
    """A collection a reflector lists and watches, and what it has seen."""
    label: str                            # "nodes", "agentdeclarations" or "agentdeclarations/NS"
    kind: str
    read: Callable[[dict[str, Any]], Claim]
    namespace: str | None = None
    resource_version: str | None = None
    synced: bool = False
    lists: int = 0
    watches: int = 0
    relists_gone: int = 0
    bookmarks: int = 0
    events: int = 0
    failures: int = 0
    last_error: str | None = None
    last_error_at: str | None = None
    objects: int = 0


class _Gone(Exception):
    """410 Gone: the resourceVersion was compacted; list again."""


class WatchError(Exception):
    """A watch that misbehaved without an HTTP error (ended at once, a line that is no event):
    reported as the collection's last error and backed off from, as a failed request is."""


class KubeWatch:
    """The watch over the cluster's declarations: `run()` is the background task (cancelled when
    the service stops), `status()` its report under /v1/watch, `synced` its readiness."""

    def __init__(self, state, config: KubeWatchConfig, client_configuration=None):
        self.state = state
        self.config = config
        self.client_configuration = client_configuration
        self.collections = [Collection("nodes", "Node", read_node)]
        if config.namespaces:
            self.collections += [Collection(f"agentdeclarations/{ns}", "AgentDeclaration", read_declaration_object, ns)
                                 for ns in dict.fromkeys(config.namespaces)]
        else:
            self.collections.append(Collection("agentdeclarations", "AgentDeclaration", read_declaration_object))
        #: per object: its latest claim; per object: that claim, when it holds a declaration
        self.claims: dict[tuple[str, str, str], Claim] = {}
        self.good: dict[tuple[str, str, str], Claim] = {}
        #: agent name -> objects whose declaration names it
        self.claimants: dict[str, set[tuple[str, str, str]]] = {}
        #: agent name -> the object whose declaration the fleet serves
        self.served: dict[str, tuple[str, str, str]] = {}
        #: object -> its current problem (invalid, or a conflict), and the Events already posted
        self.problems: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._posted: dict[tuple[str, str, str], str] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        #: the Events to post, taken in order by a daemon thread of their own: an Event is a
        #: courtesy, and a slow Events endpoint must hold back neither a reflector, nor the first
        #: list's readiness, nor the process's exit
        self._posts: queue.SimpleQueue = queue.SimpleQueue()
        self._posting = threading.Event()          # set when this run's poster is to end
        self._watches: set[Any] = set()
        self._lock = threading.Lock()
        #: one batch applied at a time: a batch yields to the loop between slices of its puts, and
        #: another collection's batch run in such a gap would find the fleet half changed
        self._applying = asyncio.Lock()
        self.running = False
        self.applied = 0

    @property
    def synced(self) -> bool:
        return all(c.synced for c in self.collections)

    # -- the background task ----------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        if self.client_configuration is None:
            self.client_configuration = await loop.run_in_executor(None, load_client_configuration,
                                                                   self.config.kubeconfig)
        self._stop.clear()
        # the poster of this run has a queue and an end of its own: one of an earlier run still
        # inside a slow post ends with its own, never taking this run's Events
        posts: queue.SimpleQueue = queue.SimpleQueue()
        posting = threading.Event()
        self._posts, self._posting = posts, posting
        self.running = True
        metrics.K8S_WATCH_RUNNING.set(1)
        self._threads = [threading.Thread(target=self._reflect, args=(c, loop), daemon=True,
                                          name=f"a3fast-k8s-{c.label}") for c in self.collections]
        self._threads.append(threading.Thread(target=self._post_in_turn, args=(posts, posting), daemon=True,
                                              name="a3fast-k8s-events"))
        for thread in self._threads:
            thread.start()
        try:
            await asyncio.Event().wait()      # until cancelled
        finally:
            self.stop()
            # a reflector exits at once once stopped, unless it is inside a request (a TLS
            # handshake with the API server, say, in OpenSSL without the GIL): a process that
            # exits under such a thread can crash, so the stop waits for them a while
            await join_within(self._threads, REFLECTORS_STOP_WAIT)

    def stop(self) -> None:
        self.running = False
        metrics.K8S_WATCH_RUNNING.set(0)
        self._stop.set()
        self._posting.set()
        self._posts.put(None)           # wakes the poster, which posts nothing more once stopped
        with self._lock:
            watches = list(self._watches)
        for w in watches:
            w.stop()
            # The client's stop() shuts down the connection's socket, which urllib3 2 no longer
            # keeps there once the response holds it; the response's own shutdown() (urllib3 ≥ 2.3)
            # ends the thread's blocked read at once. Without either, a quiet watch would keep its
            # thread and its connection until timeoutSeconds.
            try:
                w._resp.shutdown()
            except (AttributeError, ValueError, RuntimeError, OSError):
                pass          # no response yet, already closed, or an older urllib3

    # -- a reflector (its own thread) --------------------------------------------------------------
    def _reflect(self, c: Collection, loop: asyncio.AbstractEventLoop) -> None:
        from kubernetes import client

        api = client.ApiClient(self.client_configuration)
        delay = self.config.backoff
        while not self._stop.is_set():
            try:
                if c.resource_version is None:
                    self._list(api, c, loop)
                started, seen = time.monotonic(), c.events + c.bookmarks
                self._watch(api, c, loop)
                # (half the watch's own timeout when that is shorter: a quiet cluster's watch lasts it)
                short = min(SHORT_WATCH, self.config.watch_timeout / 2)
                if c.events + c.bookmarks == seen and time.monotonic() - started < short \
                        and not self._stop.is_set():
                    # as client-go's reflector: a watch the server ends at once, with nothing in it
                    # (a proxy, a server going down), is a failure to back off from, not a loop
                    raise WatchError(f"the watch ended within {short:g} s without an event")
                delay = self.config.backoff          # a watch that ended normally: resume at once
            except _Gone:
                c.relists_gone += 1
                c.resource_version = None            # list again, after the backoff: a watch that
                # keeps answering 410 (a list older than the watch cache, say) must not make this a
                # loop of full lists; a list and watch that end normally reset it (client-go's
                # reflector backs off between every ListAndWatch alike)
                log.info("watch of %s: 410 Gone; listing again in about %.1f s", c.label, delay)
                self._stop.wait(delay * (0.5 + random.random() / 2))
                delay = min(MAX_BACKOFF, delay * 2)
            except Exception as exc:  # any failure of one request: reported, backed off, retried
                if self._stop.is_set():
                    break
                if _lists_again_after(exc):
                    c.resource_version = None
                c.failures += 1
                c.last_error = _error_text(exc)
                c.last_error_at = _now()
                metrics.K8S_REQUESTS.labels(c.kind, "error").inc()
                log.warning("watch of %s: %s; retrying in about %.1f s", c.label, c.last_error, delay)
                # full jitter over [delay/2, delay]: replicas that lost the server together do not
                # come back in step
                self._stop.wait(delay * (0.5 + random.random() / 2))
                delay = min(MAX_BACKOFF, delay * 2)
        api.close()

    def _call(self, api, c: Collection):
        from kubernetes import client

        if c.kind == "Node":
            return client.CoreV1Api(api).list_node, ()
        custom = client.CustomObjectsApi(api)
        if c.namespace is None:
            return custom.list_cluster_custom_object, (GROUP, VERSION, PLURAL)
        return custom.list_namespaced_custom_object, (GROUP, VERSION, c.namespace, PLURAL)

    def _list(self, api, c: Collection, loop) -> None:
        from kubernetes.client.rest import ApiException

        fn, args = self._call(api, c)
        claims: list[Claim] = []
        token = None
        paged = True
        while True:
            kwargs: dict[str, Any] = {"_preload_content": False,
                                      "_request_timeout": (self.config.request_timeout, self.config.request_timeout)}
            if paged:
                kwargs["limit"] = LIST_PAGE
            if token:
                kwargs["_continue"] = token
            try:
                response = fn(*args, **kwargs)
            except ApiException as exc:
                if exc.status == 410 and token:
                    # the continue token expired (paging took longer than the server keeps its
                    # snapshot): one whole list, as client-go's pager does (FullListIfExpired),
                    # since paging again from the start could expire the same way each time
                    log.info("list of %s: the continue token expired; listing whole", c.label)
                    claims, token, paged = [], None, False
                    continue
                raise
            page = _loads_cut(response.data)
            claims.extend(c.read(item) for item in page.get("items") or ())
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                break
            if self._stop.is_set():
                return
        c.lists += 1
        c.objects = len(claims)
        metrics.K8S_REQUESTS.labels(c.kind, "list").inc()
        self._deliver(loop, c, ("replace", claims))
        c.resource_version = meta.get("resourceVersion")
        c.synced = True
        c.last_error = None

    def _watch(self, api, c: Collection, loop) -> None:
        from kubernetes import watch
        from kubernetes.client.rest import ApiException

        fn, args = self._call(api, c)
        timeout = int(self.config.watch_timeout * (1 + random.random()))
        w = _watch_class()(return_type="object")
        with self._lock:
            self._watches.add(w)
        if self._stop.is_set():       # stop() took its list of watches before this one joined it
            with self._lock:
                self._watches.discard(w)
            return
        c.watches += 1
        metrics.K8S_REQUESTS.labels(c.kind, "watch").inc()
        try:
            for event in w.stream(fn, *args, resource_version=c.resource_version, allow_watch_bookmarks=True,
                                  timeout_seconds=timeout,
                                  _request_timeout=(self.config.request_timeout,
                                                    timeout + self.config.request_timeout)):
                if self._stop.is_set():
                    break
                if not isinstance(event, dict):      # the client's reading of a blank or broken line
                    raise WatchError(f"a watch line that is no event (a blank or broken line); watching again "
                                     f"from resourceVersion {c.resource_version}")
                kind = event.get("type")
                obj = event.get("raw_object")
                if kind == "BOOKMARK":
                    c.bookmarks += 1
                    c.resource_version = w.resource_version or c.resource_version
                    continue
                if kind not in ("ADDED", "MODIFIED", "DELETED") or not isinstance(obj, dict):
                    continue
                claim = c.read(obj)
                c.events += 1
                self._deliver(loop, c, ("delete" if kind == "DELETED" else "put", [claim]))
                c.resource_version = (obj.get("metadata") or {}).get("resourceVersion") or c.resource_version
        except ApiException as exc:
            if exc.status == 410:
                raise _Gone() from None
            raise
        finally:
            with self._lock:
                self._watches.discard(w)

    def _deliver(self, loop, c: Collection, batch) -> None:
        """Apply a batch on the event loop and wait for it (so batches apply in the order received),
        then hand the Events it calls for to the poster's thread, without waiting for them."""
        if self._stop.is_set():
            return
        future = asyncio.run_coroutine_threadsafe(self.apply(c, batch), loop)
        deadline = time.monotonic() + APPLY_TIMEOUT
        while True:
            try:
                posts = future.result(0.25)
                break
            except concurrent.futures.TimeoutError:
                # the service stopping (its loop closing) must not keep this thread waiting
                if self._stop.is_set() or time.monotonic() > deadline:
                    future.cancel()
                    raise
        if posts and self.config.events:
            self._posts.put(posts)

    # -- applying (on the event loop) --------------------------------------------------------------
    async def apply(self, c: Collection, batch) -> list[tuple[dict[str, Any], str, str]]:
        """Apply one batch: ("replace", every object of the collection), ("put", [claim]) or
        ("delete", [claim]). Returns the Events to post: (involvedObject, reason, message)."""
        async with self._applying:
            return await self._apply(c, batch)

    async def _apply(self, c: Collection, batch) -> list[tuple[dict[str, Any], str, str]]:
        what, claims = batch
        touched: set[str] = set()
        if what == "replace":
            listed = {claim.key for claim in claims}
            gone = [k for k in self.claims if k[0] == c.kind and (c.namespace is None or k[1] == c.namespace)
                    and k not in listed]
            for key in gone:
                touched |= self._forget(key)
            for claim in claims:
                touched |= self._take(claim)
        elif what == "put":
            for claim in claims:
                touched |= self._take(claim)
        else:
            for claim in claims:
                touched |= self._forget(claim.key)
        await self._serve(sorted(touched))
        self.applied += 1
        metrics.K8S_EVENTS.labels(c.kind, what).inc(len(claims) if what != "replace" else 1)
        metrics.K8S_INVALID.set(len(self.problems))
        return self._events_due()

    def _take(self, claim: Claim) -> set[str]:
        """Hold the object's new claim; the names whose owner may change."""
        key = claim.key
        self.claims[key] = claim
        touched: set[str] = set()
        # an object declares what it declares now: one that turns invalid declares no agent, so its
        # name leaves the fleet (or passes to the next object that declares it), as on a replica
        # that never saw it valid; keeping its last good declaration would make replicas' answers
        # depend on what each happened to see
        old = self.good.pop(key, None)
        if old is not None and old.name is not None:
            self.claimants.get(old.name, set()).discard(key)
            touched.add(old.name)
        if claim.problem is not None:
            self.problems[key] = {"object": _describe(key), "reason": "InvalidDeclaration",
                                  "problem": claim.problem, "at": _now(), "ref": claim.ref}
            metrics.K8S_EVENTS.labels(key[0], "invalid").inc()
            return touched
        self.problems.pop(key, None)
        if claim.declaration is not None:
            assert claim.name is not None  # a declaration names its agent
            self.good[key] = claim
            self.claimants.setdefault(claim.name, set()).add(key)
            touched.add(claim.name)
        return touched

    def _forget(self, key) -> set[str]:
        self.claims.pop(key, None)
        self.problems.pop(key, None)
        self._posted.pop(key, None)
        old = self.good.pop(key, None)
        if old is None or old.name is None:
            return set()
        self.claimants.get(old.name, set()).discard(key)
        return {old.name}

    async def _serve(self, names: list[str]) -> None:
        """Make the fleet serve each name's winning claim (or nothing), and note the conflicts."""
        # the state's turn to change, held from reading the fleet to its last slice: no change
        # lands between them, and no placement sees half of the update
        async with self.state.applying:
            puts = []
            deletes = []
            fleet = self.state.fleet
            for name in names:
                owners = self.claimants.get(name) or set()
                if not owners:
                    self.claimants.pop(name, None)
                winner = min(owners, key=_precedence) if owners else None
                for key in owners:
                    assert winner is not None  # owners is not empty here
                    if key == winner:
                        if self.problems.get(key, {}).get("reason") == "DeclarationConflict":
                            del self.problems[key]
                        continue
                    if self.claims.get(key) is not None and self.claims[key].problem is not None:
                        continue     # an invalid object reports its own problem first
                    self.problems[key] = {"object": _describe(key), "reason": "DeclarationConflict",
                                          "problem": f"agent {name!r} is also declared by {_describe(winner)}, "
                                                     f"which takes precedence (docs/kubernetes.md, \"Conflicts\")",
                                          "at": _now(), "ref": self.good[key].ref}
                if winner is None:
                    if self.served.pop(name, None) is not None and name in fleet:
                        deletes.append(name)
                    continue
                decl = self.good[winner].declaration
                held = fleet.get(name)
                self.served[name] = winner
                if held is not None and orjson.dumps(held.doc, option=orjson.OPT_SORT_KEYS) == \
                        orjson.dumps(decl.doc, option=orjson.OPT_SORT_KEYS):
                    continue
                if held is not None and held.agent.namespace != decl.agent.namespace:
                    deletes.append(name)       # a name moves namespace: out, then in again
                puts.append(decl)
            for name in deletes:
                self.state.delete_agent(name)
            # in slices: a first list of 5,000 Nodes is not applied in one step of the loop
            for start in range(0, len(puts), LIST_PAGE):
                self.state.put_agents(puts[start:start + LIST_PAGE])
                if start + LIST_PAGE < len(puts):
                    await asyncio.sleep(0)
        if puts or deletes:
            await self.state.durable()

    def _events_due(self) -> list[tuple[dict[str, Any], str, str]]:
        """The Events a batch leaves due: one for each problem not posted yet in its words. An
        object's posted problem is forgotten once it has none after a batch (it turned valid, or its
        conflict ended), so that the same problem coming back later is an Event again; while it
        persists (a Node's status updates come every few seconds) it is posted once."""
        for key in [key for key in self._posted if key not in self.problems]:
            del self._posted[key]
        due = []
        for key, found in self.problems.items():
            text = f"{found['reason']}: {found['problem']}"
            if self._posted.get(key) != text:
                self._posted[key] = text
                due.append((found["ref"], found["reason"], found["problem"]))
        return due

    # -- Events (on the poster's thread) ----------------------------------------------------------
    def _post_in_turn(self, queued: queue.SimpleQueue, ended: threading.Event) -> None:
        """The poster's thread of one run: each batch of Events in the order the batches were
        applied, until that run ends (what is not posted by then is dropped: a courtesy)."""
        while not ended.is_set():
            posts = queued.get()
            if posts is None or ended.is_set():
                break
            self._post_events(posts, ended)

    def _post_events(self, posts, ended: threading.Event) -> None:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        api = client.CoreV1Api(client.ApiClient(self.client_configuration))
        for ref, reason, message in posts:
            if ended.is_set():
                break
            namespace = ref.get("namespace") or "default"
            now = _dt.datetime.now(_dt.timezone.utc)
            event = client.CoreV1Event(
                metadata=client.V1ObjectMeta(generate_name=f"{ref.get('name') or 'object'}.", namespace=namespace),
                involved_object=client.V1ObjectReference(**{k: v for k, v in (
                    ("kind", ref["kind"]), ("api_version", ref["apiVersion"]), ("name", ref.get("name")),
                    ("namespace", ref.get("namespace")), ("uid", ref.get("uid")),
                    ("resource_version", ref.get("resourceVersion"))) if v}),
                reason=reason, message=message[:1024], type="Warning",
                source=client.V1EventSource(component=COMPONENT), reporting_component=COMPONENT,
                reporting_instance=os.environ.get("POD_NAME") or COMPONENT,
                first_timestamp=now, last_timestamp=now, count=1)
            try:
                api.create_namespaced_event(namespace, event, _request_timeout=(self.config.request_timeout,
                                                                                self.config.request_timeout))
                metrics.K8S_REQUESTS.labels("Event", "create").inc()
            except (ApiException, OSError, Exception) as exc:  # an Event is a courtesy: never stops the watch
                metrics.K8S_REQUESTS.labels("Event", "error").inc()
                log.warning("event on %s/%s not posted: %s", ref.get("kind"), ref.get("name"), _error_text(exc))
        api.api_client.close()

    # -- the report ---------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return {
            "running": self.running, "synced": self.synced, "agents": len(self.served),
            "collections": [{"collection": c.label, "synced": c.synced, "resource_version": c.resource_version,
                             "objects": c.objects, "lists": c.lists, "watches": c.watches,
                             "relists_after_gone": c.relists_gone, "bookmarks": c.bookmarks, "events": c.events,
                             "failures": c.failures, "last_error": c.last_error, "last_error_at": c.last_error_at}
                            for c in self.collections],
            "problems": [{k: v for k, v in found.items() if k != "ref"}
                         for _, found in sorted(self.problems.items())],
        }


def _loads_cut(data: bytes) -> Any:
    """A list's JSON; one with an object nested past a reader's recursion limit (an
    AgentDeclaration's spec keeps unknown fields) read with the part past `READABLE_DEPTH` cut
    away, so that object is named as one that breaks the document rule and the others are served,
    rather than the whole list failing for good."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "depth limit exceeded" not in str(exc):      # orjson's words for nesting past its limit
            raise
        try:
            return orjson.loads(cut_deeper_than(data))
        except orjson.JSONDecodeError:
            raise exc from None      # what is wrong besides the depth, where the text has it


@functools.lru_cache(maxsize=None)
def _watch_class() -> type:
    """The client's Watch with events read as `Watch.unmarshal_event` says (made on the first watch:
    the client is imported by the reflectors, not with this module)."""
    from kubernetes import watch

    class Watch(watch.Watch):
        """The client's Watch, whose events nested past its JSON reader's recursion limit are read
        cut at `READABLE_DEPTH` (`_loads_cut`): otherwise the event fails every watch that resumes
        before it, and the collection stops following the cluster until a 410."""

        def unmarshal_event(self, data, return_type):
            try:
                return super().unmarshal_event(data, return_type)
            except RecursionError:       # the client's reader takes only its own JSONDecodeError
                cut = cut_deeper_than(data.encode("utf-8", "surrogatepass")).decode("utf-8", "surrogatepass")
                return super().unmarshal_event(cut, return_type)

    return Watch


def _lists_again_after(exc: BaseException) -> bool:
    """Whether a failed request is followed by a list rather than a watch from where it was: after
    an HTTP answer of the server's but 429 (which asks only to wait), as client-go's reflector lists
    again after one: a watch refused with 504 for a resourceVersion the server has not reached
    (etcd restored from a backup), or ended by an error event. A request that got no answer (the
    server down or unreachable, a connection cut; the client's ApiException of status 0 for a TLS
    failure) is watched again from where the watch was, where client-go lists again for all but a
    refused connection: a version the server no longer holds is answered 410, which lists again,
    so resuming loses nothing and spares the server a full list each time it is away a moment."""
    status = getattr(exc, "status", None)
    return isinstance(status, int) and status >= 100 and status != 429


#: the most of an error's own words kept in `last_error` and the log
ERROR_TEXT = 300


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, WatchError):
        return str(exc)
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if isinstance(status, int) and status >= 100:
        # an error event's words are in `reason` ("Expired: too old resource version: ..."), an
        # answer's in its Status body
        said = f"HTTP {status} {reason or ''}".strip()
        message = _status_message(getattr(exc, "body", None))
        return _shortened(f"{said}: {message}" if message else said)
    if status is not None:       # the client's ApiException for a request that got no answer
        return _shortened(str(reason or exc))
    return f"{type(exc).__name__}: {_shortened(str(exc))}"


def _status_message(body: Any) -> str | None:
    """The `message` of the Status an API server answers an error with (what is refused and why:
    `nodes is forbidden: User ... cannot list resource ...`), or None."""
    try:
        status = orjson.loads(body) if isinstance(body, (str, bytes, bytearray)) else None
    except orjson.JSONDecodeError:
        return None
    message = status.get("message") if isinstance(status, dict) else None
    return _shortened(message) if isinstance(message, str) and message.strip() else None


def _shortened(text: str) -> str:
    """`text` on one line, at most ERROR_TEXT characters, cut at a word where it is cut."""
    text = " ".join(text.split())
    if len(text) <= ERROR_TEXT:
        return text
    cut = text[:ERROR_TEXT].rsplit(" ", 1)[0] or text[:ERROR_TEXT]
    return cut + " …"
