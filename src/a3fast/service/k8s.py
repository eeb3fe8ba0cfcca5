"""Kubernetes scheduler extender: the filter and prioritize verbs of k8s.io/kube-scheduler/extender/v1.

The Go types carry no JSON tags, so their keys are the Go field names: ExtenderArgs {Pod, Nodes,
NodeNames}, ExtenderFilterResult {Nodes, NodeNames, FailedNodes, FailedAndUnresolvableNodes, Error},
HostPriority {Host, Score}. The Pod and Node objects inside are core/v1 objects (lower-case keys).

What is decided. A pod takes part when it carries the annotation `a3.dev/requirements`; others pass
through untouched. The scheduler offers a share of the cluster's nodes (percentageOfNodesToScore);
a3fast places the pod on the offered nodes that are agents, in fleet join order, and on nothing
else: with `NodeNames` (nodeCacheCapable: true) an agent is the served fleet's agent of that name,
with `Nodes` (nodeCacheCapable: false) a node whose `a3.dev/declaration` annotation declares it.
Every offered node that is not an agent, and every agent failing an A3 predicate, is
FailedAndUnresolvable (preemption cannot make a node declare otherwise), with the reason as its
message. Prioritize scores the same candidates.

A filter is a question: it holds no session and records no outcome (kube-scheduler, not a3fast,
decides where the pod runs; a3fast has no bind verb). Its answer is recorded as a placement in the
trace, with the pod's UID as the task id — once per distinct answer: a pod asked about again with
the same requirements, the same offered nodes and the same answer (passed nodes, failures, a3fast's
first choice and its declaration) adds nothing to the trace. Prioritize records nothing.

What is read. Only what a3fast uses is decoded (msgspec Structs skip the rest of each object without
building it): the pod's name, namespace, uid and two annotations; each node's name and declaration
annotation. Everything else is held to the API server's own limits, not to the service's bounds on
A3 documents: a pod with a 100 KiB last-applied-configuration annotation is read like any other.
A large body is decoded in a worker thread, so other requests are answered meanwhile.

No request holds the event loop. A large NodeNames body (millions of names) is decoded, matched
against the fleet's names, answered and hashed on the worker thread, in slices of SLICE names
that each end by letting go of the interpreter (a C call over 3,000,000 names would hold it, and
so the event loop, for seconds). Only the placement over the offered agents runs on the loop, as
every placement of the service does: the fleet is changed only there, so it is read only there,
and its cost is that of the agents offered, not of the names sent. A filter's record takes the
state's `applying` lock like every change (its decision too, when both are made in one step), so
it lands after a batch of placements under way, never among its records; a decision made without
a record (a prioritize that has no filter's placement to reuse) takes it too, so that no decision
sees half of a watch's batch, which is applied in slices.
"""
from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import re
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, NamedTuple

import msgspec
import orjson

from ..engines import NATIVE_AVAILABLE, engine_module
from ..authority.times import parse_instant
from ..errors import A3Error, SchemaError, describe, json_path
from ..fleet import Fleet
from ..interop.kubernetes import fill_agent
from ..record.write import placement_records
from ..schema import parse_declaration, parse_requirements
from ..prepared import PreparedRequirements
from . import metrics
from .problems import check_bounds, problem
from .state import ServiceState

__all__ = ["REQUIREMENTS_ANNOTATION", "DECLARATION_ANNOTATION", "MAX_EXTENDER_PRIORITY", "Extender",
           "ExtenderError", "BadArgs", "NOT_AN_AGENT"]

REQUIREMENTS_ANNOTATION = "a3.dev/requirements"
DECLARATION_ANNOTATION = "a3.dev/declaration"
#: extenderv1.MaxExtenderPriority: kube-scheduler scales an extender's score by MaxNodeScore / 10.
MAX_EXTENDER_PRIORITY = 10
NOT_AN_AGENT = "not an agent of the a3fast fleet"
#: Bodies larger than this are decoded in the worker thread (a NodeNames body of 5,000 names is ~100 KB).
DECODE_INLINE = 1 << 20
#: Pods whose last recorded answer is remembered (oldest forgotten first): a pod forgotten and
#: asked about again is recorded once more.
RECORDED_PODS = 65_536
#: Filter placements kept for the prioritize call that follows (kube-scheduler runs one pod's
#: scheduling cycle at a time, so its prioritize comes next).
ASKED_PODS = 8
#: Declarations added to a Nodes-mode fleet per call (each call holds the GIL throughout).
EXTEND_SLICE = 500
#: Parsed node declarations kept by their annotation text (emptied when full).
DECLARATION_CACHE = 50_000
#: Names per slice of a large NodeNames request's work on the worker thread (each slice takes a few
#: ms; between two the event loop's thread runs).
SLICE = 8_192
#: Bytes of the NodeNames array decoded per piece.
PIECE_BYTES = 512 * 1024
#: Offered names resolved in one compiled call where the extension is built (same answers).
_NAMES = engine_module("native" if NATIVE_AVAILABLE else "pure")
_PURE = engine_module("pure")


class ExtenderError(Exception):
    """A request the extender cannot act on: answered in the result's Error field (filter)."""


class BadArgs(Exception):
    """A body that is not ExtenderArgs as kube-scheduler sends it: answered with 400 and problems."""

    def __init__(self, path: str, expected: str, found: str):
        super().__init__(f"{path}: expected {expected}, found {found}")
        self.problems = [problem(path, expected, found)]


# -- the wire types, only the fields a3fast reads --------------------------------------------------
class _Annotations(msgspec.Struct):
    requirements: Any = msgspec.field(default=None, name=REQUIREMENTS_ANNOTATION)
    declaration: Any = msgspec.field(default=None, name=DECLARATION_ANNOTATION)


class _Meta(msgspec.Struct):
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    annotations: _Annotations | None = None


class _Object(msgspec.Struct):
    metadata: _Meta | None = None


class _NodeList(msgspec.Struct):
    items: list[msgspec.Raw] | None = None


class _Args(msgspec.Struct):
    Pod: _Object | None = None
    Nodes: _NodeList | None = None
    NodeNames: list[str] | None = None


class _ArgsRawNames(msgspec.Struct):
    Pod: _Object | None = None
    Nodes: _NodeList | None = None
    NodeNames: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


_ARGS = msgspec.json.Decoder(_Args)
_ARGS_RAW_NAMES = msgspec.json.Decoder(_ArgsRawNames)
_NAME_LIST = msgspec.json.Decoder(list[str])
_NODE = msgspec.json.Decoder(_Object)
_MSGSPEC_ERROR = re.compile(r"Expected `(?P<expected>.+?)`, got `(?P<found>.+?)`(?: - at `(?P<path>.+)`)?$")
#: msgspec's words for a value outside a constraint: "Expected `int` <= 9223372036854775807 - at `$.x`"
_MSGSPEC_BOUND = re.compile(r"Expected `(?P<expected>[^`]+)` (?P<bound>[<>]=? \S+)(?: - at `(?P<path>.+)`)?$")


def _bad(exc: Exception, prefix: str = "$") -> BadArgs:
    """A msgspec error as a problem naming where and what."""
    if isinstance(exc, RecursionError):
        return BadArgs(prefix, "nesting no deeper than core/v1 objects have", "a deeper document")
    text = str(exc)
    bound = _MSGSPEC_BOUND.match(text)
    if bound is not None:      # an integer past Go's int64
        path = bound.group("path") or "$"
        return BadArgs(prefix + path[1:], f"{bound.group('expected')} {bound.group('bound')} (Go's int64)",
                       "a number outside it")
    match = _MSGSPEC_ERROR.match(text)
    if match is None:
        return BadArgs(prefix, "ExtenderArgs as JSON (k8s.io/kube-scheduler/extender/v1)", text[:200])
    path = match.group("path") or "$"
    return BadArgs(prefix + path[1:], match.group("expected"), match.group("found"))


class Args(NamedTuple):
    """ExtenderArgs as read: the pod, and either the Node objects (raw) or the node names."""
    pod: _Object
    items: list[msgspec.Raw] | None
    names: list[str] | None


def decode_args(data: bytes) -> Args:
    try:
        wire = _ARGS.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise _bad(exc) from None
    if wire.Pod is None:
        raise BadArgs("$.Pod", "a Pod", "null or nothing")
    if wire.NodeNames is not None:
        return Args(wire.Pod, None, wire.NodeNames)
    if wire.Nodes is None:
        raise BadArgs("$", "ExtenderArgs with Nodes or NodeNames", "neither")
    if wire.Nodes.items is None:
        raise BadArgs("$.Nodes.items", "a list of Nodes", "null or nothing")
    return Args(wire.Pod, wire.Nodes.items, None)


def _let_go() -> None:
    """Let the event loop's thread have the interpreter (sleep releases it)."""
    time.sleep(0)


class _Unsliced(Exception):
    """The names array could not be cut into pieces: decode it whole (for its exact error)."""


def _names_in_pieces(raw: bytes) -> list[str]:
    """A JSON array of strings decoded in pieces of about PIECE_BYTES, cut after a string's
    closing quote and its comma. A quote preceded by an odd run of backslashes is inside a string;
    a cut that still lands inside one (a string that begins with a comma) leaves a piece that is
    not JSON, and then the array is decoded whole."""
    text = raw
    first, last = 0, len(text) - 1
    while first <= last and text[first] in b" \t\r\n":
        first += 1
    while last >= first and text[last] in b" \t\r\n":
        last -= 1
    if last - first < 1 or text[first] != 0x5B or text[last] != 0x5D:     # [ and ]
        raise _Unsliced
    end = last
    names: list[str] = []
    start = first + 1
    while start < end:
        cut = text.find(b'",', start + PIECE_BYTES, end)
        while cut != -1:
            slashes = 0
            while text[cut - 1 - slashes] == 0x5C:      # backslash
                slashes += 1
            if slashes % 2 == 0:
                break
            cut = text.find(b'",', cut + 1, end)
        stop = end if cut == -1 else cut + 1
        try:
            names.extend(_NAME_LIST.decode(b"[" + text[start:stop] + b"]"))
        except (msgspec.DecodeError, RecursionError):
            raise _Unsliced from None
        start = stop + 1
        _let_go()
    return names


def decode_large_args(data: bytes) -> Args:
    """decode_args for a large body, on the worker thread: the NodeNames array decoded in pieces,
    letting go of the interpreter between them (the same Args, and the same errors, as decode_args)."""
    try:
        wire = _ARGS_RAW_NAMES.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return decode_args(data)
    raw = bytes(wire.NodeNames)
    if wire.Pod is None or not raw or raw == b"null":
        return decode_args(data)
    try:
        names = _names_in_pieces(raw)
    except _Unsliced:
        return decode_args(data)
    return Args(wire.Pod, None, names)


def _split_in_slices(names: list[str], live: frozenset[str]) -> tuple[list[str], list[list[str]]]:
    """_offered_agents for many names, slice by slice (worker thread): the offered agents, and the
    other names in slices (never one dict of millions: growing it rehashes it all in one call)."""
    agents: list[str] = []
    strays: list[list[str]] = []
    for start in range(0, len(names), SLICE):
        inside, outside = _NAMES.split_members(names[start:start + SLICE], live)
        agents.extend(inside)
        if outside:
            strays.append(outside)
        _let_go()
    return agents, strays


def _answer_in_slices(agents: list[str], strays: list[list[str]], failures: dict[str, str],
                      requirements_json: bytes, choice: bytes) -> tuple[bytes, bytes]:
    """The NodeNames answer and its digest, built slice by slice (worker thread): the offered agents
    that passed, then every other name as not an agent followed by each failed agent's predicate
    (the bytes _names_result and _digest give when no name is offered twice)."""
    parts = [b'{"Nodes":null,"NodeNames":[']
    sep = b""
    for start in range(0, len(agents), SLICE):
        chunk = agents[start:start + SLICE]
        if failures:
            chunk = _NAMES.split_members(chunk, failures)[1]
        if chunk:
            parts.append(sep + orjson.dumps(chunk)[1:-1])
            sep = b","
        _let_go()
    parts.append(b'],"FailedNodes":{},"FailedAndUnresolvableNodes":{')
    sep = b""
    for part in strays:
        for start in range(0, len(part), SLICE):
            parts.append(sep + orjson.dumps(dict.fromkeys(part[start:start + SLICE], NOT_AN_AGENT))[1:-1])
            sep = b","
            _let_go()
    items = iter(failures.items())
    while True:
        batch = dict(itertools.islice(items, SLICE))
        if not batch:
            break
        parts.append(sep + orjson.dumps(batch)[1:-1])
        sep = b","
        _let_go()
    parts.append(b'},"Error":""}')
    body = b"".join(parts)
    h = hashlib.blake2b(digest_size=16)
    h.update(requirements_json)
    h.update(body)                # hashlib lets go of the interpreter while it hashes a large buffer
    h.update(choice)
    return body, h.digest()


#: annotation text -> its prepared requirements: the pods of one workload carry the same text
_POD_REQUIREMENTS = PreparedRequirements()


def _parsed_annotation(text: str):
    doc = orjson.loads(text)
    check_bounds(doc)
    return parse_requirements(doc)


def pod_requirements(pod: _Object):
    """The pod's parsed requirements, or None when it does not take part (ExtenderError when its
    annotation is not valid requirements)."""
    meta = pod.metadata
    text = meta.annotations.requirements if meta is not None and meta.annotations is not None else None
    if text is None:
        return None
    if not isinstance(text, str):
        raise ExtenderError(f"pod annotation {REQUIREMENTS_ANNOTATION} must be a JSON string")
    try:
        return _POD_REQUIREMENTS.lookup(text, lambda: _parsed_annotation(text))
    except orjson.JSONDecodeError as exc:
        raise ExtenderError(f"pod annotation {REQUIREMENTS_ANNOTATION} is not JSON: {exc}") from None
    except SchemaError as exc:
        raise ExtenderError(f"pod annotation {REQUIREMENTS_ANNOTATION}: " + "; ".join(exc.lines())) from None


def _task(pod: _Object) -> dict[str, Any]:
    meta = pod.metadata or _Meta()
    return {"id": meta.uid, "pod": {"namespace": meta.namespace, "name": meta.name}}


class _Decision:
    """One filter's answer: the placement, the offered nodes that failed and why, those that passed."""

    __slots__ = ("placement", "unresolvable", "passed", "records", "compact", "fleet_at")

    def __init__(self, placement, unresolvable: dict[str, str], passed: list, records=None, compact=False,
                 fleet_at: tuple[int, int] | None = None):
        self.placement = placement
        self.unresolvable = unresolvable
        self.passed = passed           # names (NodeNames) or raw Node objects (Nodes)
        self.records = records         # spec records built off the event loop, or None
        self.compact = compact
        self.fleet_at = fleet_at       # (the fleet's id, its generation) when placed, if not now


class Extender:
    """The filter and prioritize verbs over one service state."""

    def __init__(self, state: ServiceState):
        self.state = state
        # one worker: the Nodes-mode fleets it keeps are used by one thread at a time
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="a3fast-k8s")
        self._declarations: dict[tuple[str, str], Any] = {}   # (annotation text, node) -> Declaration or why not
        self._node_fleet: tuple[Any, Fleet] | None = None  # (key, fleet) of the last Nodes offer
        self._recorded: OrderedDict[str, bytes] = OrderedDict()   # pod uid -> digest of its last record
        self._live_names: tuple[Any, frozenset[str]] | None = None
        #: pod uid -> (fleet generation, requirements text, the filter's placement): prioritize
        #: scores the hosts the filter passed with the filter's own placement
        self._asked: OrderedDict[str, tuple[tuple[Any, ...], Any]] = OrderedDict()
        self.recorded = 0
        self.repeats = 0

    # -- decoding -----------------------------------------------------------------------------------
    async def _decode(self, data: bytes) -> Args:
        if len(data) <= DECODE_INLINE:
            return decode_args(data)
        return await asyncio.get_running_loop().run_in_executor(self._worker, decode_large_args, data)

    # -- the NodeNames mode: the served fleet -------------------------------------------------------
    def _live(self) -> frozenset[str]:
        """The served fleet's live names as a set, kept while the fleet's generation stands (every
        FleetProtocol bumps it when its membership changes)."""
        fleet = self.state.fleet
        key = (id(fleet), fleet.generation)
        if self._live_names is None or self._live_names[0] != key:
            self._live_names = (key, frozenset(fleet.names()))
        return self._live_names[1]

    def _offered_agents(self, names: list[str]) -> tuple[list[str], dict[str, str]]:
        """The offered names that are agents (the fleet orders them by join order when it
        places), and the rest as unresolvable."""
        agents, strays = _NAMES.split_members(names, self._live())
        return agents, dict.fromkeys(strays, NOT_AN_AGENT)

    def _ask_fleet(self, requirements, agents: list[str]):
        """A placement over the offered agents only, changing nothing."""
        return _unheld(self.state.fleet.place(requirements, candidates=agents, remember_session=False))

    def _decide_names(self, requirements, names: list[str]) -> _Decision:
        # the fleet places over the offered names that are its live agents and leaves the rest
        # out, so the placement comes first: the names are split only when some are not agents
        p = self._ask_fleet(requirements, names)
        unresolvable: dict[str, str]
        if p.explanation.candidates_count == len(names):
            agents, unresolvable = names, {}
        else:
            agents, unresolvable = self._offered_agents(names)
        _failures(p, agents, unresolvable)
        passed = _NAMES.split_members(names, unresolvable)[1] if unresolvable else names
        return _Decision(p, unresolvable, passed, compact=True)

    async def _filter_many_names(self, requirements, names: list[str]) -> tuple[_Decision, bytes, bytes]:
        """_decide_names and the answer with its digest, for many names: all but the placement over
        the offered agents on the worker thread, in slices."""
        # the names split and placed in the state's turn: no change lands between the split (off
        # the loop, which answers other requests meanwhile) and the placement, and the placement
        # never sees half of an update (a watch's batch yields between its slices), so every
        # offered name is decided on the fleet of one moment
        async with self.state.applying:
            agents, strays = await self._off_loop(_split_in_slices, names, self._live())
            p = self._ask_fleet(requirements, agents)
            fleet = self.state.fleet
            placed_at = (id(fleet), fleet.generation)
        failures: dict[str, str] = {}
        _failures(p, agents, failures)
        body, digest = await self._off_loop(_answer_in_slices, agents, strays, failures,
                                            orjson.dumps(requirements.doc), _choice(p))
        # the answer was written off the loop: the fleet it was decided on is the one prioritize
        # may reuse it for, not the fleet by then
        return _Decision(p, failures, [], compact=True, fleet_at=placed_at), body, digest

    # -- the Nodes mode: each node's declaration annotation (in the worker thread) -----------------
    def _declaration(self, text: Any, name: str):
        """The node's Declaration, or why it is not an agent (cached by annotation text and node
        name). An agent without a name is named as the node, as the watch reads a Node."""
        if not isinstance(text, str):
            return f"node has no {DECLARATION_ANNOTATION} annotation"
        found = self._declarations.get((text, name))
        if found is None:
            try:
                doc = orjson.loads(text)
                if not isinstance(doc, dict):
                    raise ValueError("not a JSON object")
                check_bounds(doc)
                doc, _, _ = fill_agent(doc, {"name": name}, None)
                found = parse_declaration(doc)
            except (ValueError, A3Error) as exc:
                first = exc.lines()[0] if isinstance(exc, SchemaError) else str(exc)
                found = f"{DECLARATION_ANNOTATION} is not a valid declaration: {first}"
            if len(self._declarations) >= DECLARATION_CACHE:
                self._declarations.clear()
            self._declarations[(text, name)] = found
        if isinstance(found, str):
            return found
        if found.agent.name != name:
            return f"{DECLARATION_ANNOTATION} declares agent {found.agent.name!r}, not {name!r}"
        return found

    def _read_nodes(self, items: list[msgspec.Raw]) -> tuple[list[str], list[Any], dict[str, str]]:
        """Names of the offered nodes, their Declarations (None for a node that is not an agent),
        and why each such node is not one."""
        names: list[str] = []
        decls: list[Any] = []
        unusable: dict[str, str] = {}
        at: dict[str, int] = {}
        for k, raw in enumerate(items):
            name, text = _node_meta(raw, k)
            if at.setdefault(name, k) != k:     # one agent a name: kube-scheduler offers a node once
                raise BadArgs(f"$.Nodes.items[{k}].metadata.name", "a node offered once",
                              f"{name!r} again (first at $.Nodes.items[{at[name]}])")
            found = self._declaration(text, name)
            names.append(name)
            if isinstance(found, str):
                unusable[name] = found
                decls.append(None)
            else:
                decls.append(found)
        return names, decls, unusable

    def _nodes_fleet(self, names: list[str], decls: list[Any]) -> tuple[Fleet, list[str]]:
        """A fleet of the offered nodes' declarations, in offer order (kept while the same nodes
        with the same declarations are offered again)."""
        pairs = tuple((n, id(d)) for n, d in zip(names, decls) if d is not None)
        if self._node_fleet is not None and self._node_fleet[0][0] == pairs:
            return self._node_fleet[1], [n for n, _ in pairs]
        fleet = Fleet(self.state.engine)
        usable = [d for d in decls if d is not None]
        # in slices: the GIL is let go between them, so the event loop keeps answering meanwhile
        for start in range(0, len(usable), EXTEND_SLICE):
            fleet.extend(usable[start:start + EXTEND_SLICE])
        # the declarations are held by the key too, so an id in it cannot name another object
        self._node_fleet = ((pairs, [d for d in decls if d is not None]), fleet)
        return fleet, [n for n, _ in pairs]

    def _decide_nodes(self, requirements, items: list[msgspec.Raw], task: dict[str, Any],
                      recorded: bytes | None) -> tuple[_Decision, bytes]:
        names, decls, unresolvable = self._read_nodes(items)
        fleet, agents = self._nodes_fleet(names, decls)
        p = _unheld(fleet.place(requirements, remember_session=False))
        _failures(p, agents, unresolvable)
        passed = [raw for name, raw in zip(names, items) if name not in unresolvable]
        decision = _Decision(p, unresolvable, passed)
        digest = _digest(requirements, orjson.dumps([[n for n in names if n not in unresolvable], unresolvable]), p)
        if digest != recorded:
            decision.records = list(placement_records(p, task))
        return decision, digest

    def _prioritize_nodes(self, requirements, items: list[msgspec.Raw]):
        names, decls, _ = self._read_nodes(items)
        fleet, _ = self._nodes_fleet(names, decls)
        return names, fleet.place(requirements, remember_session=False)

    # -- the verbs ----------------------------------------------------------------------------------
    async def filter(self, data: bytes) -> bytes:
        """ExtenderFilterResult as JSON (BadArgs for a body that is not ExtenderArgs)."""
        args = await self._decode(data)
        try:
            requirements = pod_requirements(args.pod)
        except ExtenderError as exc:
            return orjson.dumps({"Nodes": None, "NodeNames": None, "FailedNodes": {},
                                 "FailedAndUnresolvableNodes": {}, "Error": str(exc)})
        if args.names is not None:
            names = args.names
            if requirements is None:
                if len(names) > SLICE:
                    return (await self._off_loop(_answer_in_slices, names, [], {}, b"", b""))[0]
                return _names_result(names, {})
            if len(names) > SLICE:
                decision, body, digest = await self._filter_many_names(requirements, names)
                async with self.state.applying:      # its record after any batch under way
                    self._answered(args.pod, decision, digest)
            else:
                async with self.state.applying:      # decided and recorded in one step, as a place is
                    decision = self._decide_names(requirements, names)
                    # the answer's bytes hold the passed names and every failure with its message
                    body = _names_result(decision.passed, decision.unresolvable)
                    digest = _digest(requirements, body, decision.placement)
                    self._answered(args.pod, decision, digest)
        else:
            items = args.items
            assert items is not None  # decode_args gives Nodes when it gives no names
            if requirements is None:
                return await self._off_loop(_nodes_result, items, {})
            task = _task(args.pod)
            recorded = self._recorded.get(task["id"]) if task["id"] is not None else None
            decision, digest = await self._off_loop(self._decide_nodes, requirements, items, task, recorded)
            # the answer first (it refuses nodes Go would not decode): a filter is recorded only
            # once it has an answer to give
            body = await self._off_loop(_nodes_result, decision.passed, decision.unresolvable)
            async with self.state.applying:          # its record after any batch under way
                self._record(args.pod, decision, digest, recorded)
        await self.state.durable()
        return body

    async def prioritize(self, data: bytes) -> bytes:
        """HostPriorityList as JSON: each offered agent's A3 score total scaled to 0..10; ineligible
        nodes and nodes that are not agents score 0, and so does every node for a pod without
        requirements (no preference). BadArgs for a body that is not ExtenderArgs, ExtenderError
        for a requirements annotation that is not valid."""
        args = await self._decode(data)
        requirements = pod_requirements(args.pod)
        if args.names is not None:
            hosts = args.names
            many = len(hosts) > SLICE
            if requirements is None:
                if many:
                    return await self._off_loop(_scores_in_slices, hosts, {})
                return orjson.dumps([{"Host": h, "Score": 0} for h in hosts])
            p = self._asked_placement(args.pod)
            if p is None:
                # in the state's turn, as a filter decides: a watch applies a large batch in
                # slices, letting the loop run between them, and a placement made there would
                # score the fleet of half an update
                async with self.state.applying:
                    if many:
                        agents, _ = await self._off_loop(_split_in_slices, hosts, self._live())
                    else:
                        agents, _ = self._offered_agents(hosts)
                    p = self._ask_fleet(requirements, agents)
            if many:
                return await self._off_loop(_scores_in_slices, hosts, _totals(p))
        else:
            items = args.items
            assert items is not None  # decode_args gives Nodes when it gives no names
            if requirements is None:
                hosts = await self._off_loop(_node_names, items)
                return orjson.dumps([{"Host": h, "Score": 0} for h in hosts])
            hosts, p = await self._off_loop(self._prioritize_nodes, requirements, items)
        totals = _totals(p)
        return orjson.dumps([{"Host": h, "Score": int(round(totals.get(h, 0.0) * MAX_EXTENDER_PRIORITY))}
                             for h in hosts])

    def _answered(self, pod: _Object, decision: _Decision, digest: bytes) -> None:
        """A NodeNames filter's decision kept for the pod's prioritize, and recorded."""
        uid = _task(pod)["id"]
        if uid is not None:
            key = self._asked_key(pod)
            if decision.fleet_at is not None:
                key = (*decision.fleet_at, key[2])
            self._asked[uid] = (key, decision.placement)
            self._asked.move_to_end(uid)
            while len(self._asked) > ASKED_PODS:
                self._asked.popitem(last=False)
        recorded = self._recorded.get(uid) if uid is not None else None
        self._record(pod, decision, digest, recorded)

    def _asked_key(self, pod: _Object) -> tuple[Any, ...]:
        fleet = self.state.fleet
        meta = pod.metadata
        text = meta.annotations.requirements if meta is not None and meta.annotations is not None else None
        return id(fleet), fleet.generation, text

    def _asked_placement(self, pod: _Object):
        """The placement of this pod's filter, while the fleet and its requirements are unchanged:
        prioritize then scores the candidates the filter decided over."""
        uid = _task(pod)["id"]
        asked = self._asked.get(uid) if uid is not None else None
        if asked is None or asked[0][1] is None or asked[0] != self._asked_key(pod):
            return None
        return asked[1]

    async def _off_loop(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._worker, fn, *args)

    def _record(self, pod: _Object, decision: _Decision, digest: bytes, recorded: bytes | None) -> None:
        """The answer as a placement in the trace, unless it repeats the pod's last recorded one."""
        p = decision.placement
        task = _task(pod)
        uid = task["id"]
        if uid is not None and recorded == digest:
            self.repeats += 1
            self._recorded.move_to_end(uid)
            return
        self.state.record_answer(p, task, compact=decision.compact, records=decision.records)
        metrics.count_placement(p)
        self.recorded += 1
        if uid is not None:
            self._recorded[uid] = digest
            self._recorded.move_to_end(uid)
            while len(self._recorded) > RECORDED_PODS:
                self._recorded.popitem(last=False)

    def close(self) -> None:
        self._worker.shutdown(wait=False, cancel_futures=True)


def _unheld(p: Any) -> Any:
    """A filter's placement, marked as holding no session: its record says so, so that a replay
    holds none for it either (docs/design.md, reading 25)."""
    p.session_held = False
    return p


def _node_meta(raw: msgspec.Raw, k: int) -> tuple[str, Any]:
    """The node's name and its declaration annotation (None when it has none)."""
    try:
        meta = _NODE.decode(raw).metadata
    except (msgspec.DecodeError, RecursionError) as exc:
        raise _bad(exc, f"$.Nodes.items[{k}]") from None
    if meta is None or meta.name is None:
        raise BadArgs(f"$.Nodes.items[{k}].metadata.name", "the node's name", "nothing")
    return meta.name, meta.annotations.declaration if meta.annotations is not None else None


def _node_names(items: list[msgspec.Raw]) -> list[str]:
    return [_node_meta(raw, k)[0] for k, raw in enumerate(items)]


def _failures(p, agents: list[str], unresolvable: dict[str, str]) -> None:
    """Each offered agent the placement found ineligible, with the first predicate it failed
    (filters_failed holds one pair per ineligible candidate: its first failed predicate)."""
    expl = p.explanation
    if expl.eligible_count == len(agents):
        return
    # the names straight from the explanation's sets, not through a list of pairs
    for engine in (_NAMES, _PURE):
        if type(p.index) is engine.Index:
            engine.first_failed_into(p.index, expl, p.predicates, unresolvable)
            return
    for pair in p.filters_failed:
        unresolvable[pair["candidate"]] = pair["predicate"]


def _digest(requirements, answer: bytes, p) -> bytes:
    """What makes two answers to one pod the same: its requirements, the answer (the nodes that
    passed, why the others failed), a3fast's first choice and that agent's declaration."""
    h = hashlib.blake2b(digest_size=16)
    h.update(orjson.dumps(requirements.doc))
    h.update(answer)
    h.update(_choice(p))
    return h.digest()


def _scores_in_slices(hosts: list[str], totals: dict[str, float]) -> bytes:
    """The HostPriorityList of `prioritize`, byte for byte, built slice by slice (worker thread)."""
    parts = [b"["]
    sep = b""
    for start in range(0, len(hosts), SLICE):
        chunk = [{"Host": h, "Score": int(round(totals.get(h, 0.0) * MAX_EXTENDER_PRIORITY))}
                 for h in hosts[start:start + SLICE]]
        if chunk:
            parts.append(sep + orjson.dumps(chunk)[1:-1])
            sep = b","
        _let_go()
    parts.append(b"]")
    return b"".join(parts)


def _choice(p) -> bytes:
    """a3fast's first choice and its declaration, as the digest holds them."""
    return orjson.dumps(p.agent) + (p.declaration_json if p.bound else b"")


def _names_result(names: list[str], unresolvable: dict[str, str]) -> bytes:
    return orjson.dumps({"Nodes": None, "NodeNames": names, "FailedNodes": {},
                         "FailedAndUnresolvableNodes": unresolvable, "Error": ""})


#: Go's int64 (a generation, a grace period): a larger number does not decode there.
_Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class _OwnerReference(msgspec.Struct):
    apiVersion: str | None = None
    kind: str | None = None
    name: str | None = None
    uid: str | None = None
    controller: bool | None = None
    blockOwnerDeletion: bool | None = None


class _ManagedFieldsEntry(msgspec.Struct):
    manager: str | None = None
    operation: str | None = None
    apiVersion: str | None = None
    time: str | None = None
    fieldsType: str | None = None
    fieldsV1: Any = None            # FieldsV1 keeps any JSON value as it is
    subresource: str | None = None


class _EchoedMeta(msgspec.Struct):
    """ObjectMeta's fields with the JSON types Go's decoder takes for them (a time's text is then
    read as RFC 3339, `_times_of`)."""
    name: str
    generateName: str | None = None
    namespace: str | None = None
    selfLink: str | None = None
    uid: str | None = None
    resourceVersion: str | None = None
    generation: _Int64 | None = None
    creationTimestamp: str | None = None
    deletionTimestamp: str | None = None
    deletionGracePeriodSeconds: _Int64 | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    ownerReferences: list[_OwnerReference] | None = None
    finalizers: list[str] | None = None
    managedFields: list[_ManagedFieldsEntry] | None = None


class _EchoedNode(msgspec.Struct):
    metadata: _EchoedMeta
    kind: str | None = None           # TypeMeta, decoded by Go beside the metadata
    apiVersion: str | None = None


_ECHOED_NODE = msgspec.json.Decoder(_EchoedNode)
_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _folded(key: str) -> str:
    """A key as Go's encoding/json compares it to a field's name: case folded as unicode.SimpleFold
    folds, where besides the ASCII cases 'ſ' (U+017F) is an s and the Kelvin sign a k."""
    return key.lower().replace("\u017f", "s")


class _Members(dict):
    """A decoded object, and the first of its members named more than once (None: none is)."""

    repeated: str | None = None


def _members(pairs: list[tuple[str, Any]]) -> _Members:
    out = _Members(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                out.repeated = key
                break
            seen.add(key)
    return out


def _named_once(members: Any, path: str) -> None:
    """BadArgs for an object Go decodes into a struct whose member is named twice: Go decodes each
    occurrence, so a first bad value fails there though the last one, all a dict keeps, is good.
    (A map's repeated key, in labels or annotations, Go takes the last of, as a dict does.)"""
    if isinstance(members, _Members) and members.repeated is not None:
        raise BadArgs(path, "each member named once (Go decodes every occurrence)",
                      f"{describe(members.repeated)} twice")


def _rfc3339(text: str) -> bool:
    """Whether Go's time.Parse(time.RFC3339, text) reads `text`: RFC 3339 with an upper-case T and
    Z (Go matches the layout's letters as they are)."""
    return parse_instant(text) is not None and text[10:11] == "T" and "z" not in text[19:]


def _spelled_as(members: Any, struct: type[msgspec.Struct], path: str) -> None:
    """BadArgs for a member of `members` (a decoded object) that Go's decoder would take for one of
    `struct`'s fields though it is spelled otherwise: encoding/json matches a key to a field
    regardless of case, so `"Labels"` is read as `labels`, past every check made here."""
    if not isinstance(members, dict):
        return
    fields = {_folded(name): name for name in struct.__struct_fields__}
    for key in members:
        field = fields.get(_folded(key))
        if field is not None and field != key:
            raise BadArgs(json_path(path, key), f"{field!r} spelled exactly (Go would read {key!r} as {field!r})",
                          describe(key))


def _careful(text: bytes, hook: Any, path: str) -> Any:
    """`text` read member by member (`hook` sees each object's pairs); what msgspec took and Python's
    reader does not (a number it will not read) is BadArgs."""
    try:
        return json.loads(text, object_pairs_hook=hook)
    except ValueError as exc:
        raise BadArgs(path, "JSON the Node's members can be read from", str(exc)[:200]) from None


def _check_node_metadata(raw: msgspec.Raw, path: str) -> None:
    """A Node's metadata (and its kind and apiVersion) held to what Go decodes them with: their
    spelling, each struct's members named once, their types and their times (BadArgs naming the
    member otherwise)."""
    node = _MEMBERS.decode(raw)
    _spelled_as(node, _EchoedNode, path)
    text = bytes(raw)
    if text.count(b'"metadata"') > 1 or b"\\u" in text:
        # a repeated member at the Node's own level, read carefully only where one may be: the
        # token twice (rare elsewhere: a string holding a quote is escaped), or any escape (a key
        # may spell "metadata" with one); the reader returns the outermost object, the Node
        _named_once(_careful(text, _members, path), path)
    where = json_path(path, "metadata")
    # read member by member; what Python's reader refuses (a number of thousands of digits, a key
    # that is not UTF-8) is BadArgs there, never passed unchecked
    meta = _careful(bytes(node["metadata"]), _members, where) if "metadata" in node else None
    _named_once(meta, where)
    _spelled_as(meta, _EchoedMeta, where)
    if isinstance(meta, dict):
        for name, struct in (("ownerReferences", _OwnerReference), ("managedFields", _ManagedFieldsEntry)):
            items = meta.get(name)
            if isinstance(items, list):
                for i, item in enumerate(items):
                    at = json_path(json_path(where, name), i)
                    _named_once(item, at)
                    _spelled_as(item, struct, at)
    decoded = _ECHOED_NODE.decode(raw).metadata
    times = [("creationTimestamp", decoded.creationTimestamp), ("deletionTimestamp", decoded.deletionTimestamp)]
    times += [(f"managedFields[{i}].time", entry.time) for i, entry in enumerate(decoded.managedFields or ())]
    for member, stamp in times:
        if stamp is not None and not _rfc3339(stamp):
            raise BadArgs(f"{path}.metadata.{member}", "an RFC 3339 date-time (metav1.Time), or null", describe(stamp))


def _nodes_result(items: list[msgspec.Raw], unresolvable: dict[str, str]) -> bytes:
    """The passed Node objects as they were sent, byte for byte: kube-scheduler takes the returned
    objects as the nodes in this mode (extender.go's Filter), so they are not trimmed. Each one's
    metadata is first held to the types Go decodes ObjectMeta with (BadArgs otherwise: a label
    that is a number, a generation that is text), so the answer's metadata is what kube-scheduler
    can read back; a Node's spec and status are echoed as sent, unread."""
    for k, raw in enumerate(items):
        try:
            _check_node_metadata(raw, f"$.Nodes.items[{k}]")
        except (msgspec.DecodeError, RecursionError) as exc:
            raise _bad(exc, f"$.Nodes.items[{k}]") from None
    return (b'{"Nodes":{"metadata":{},"items":[' + b",".join(items)
            + b']},"NodeNames":null,"FailedNodes":{},"FailedAndUnresolvableNodes":'
            + orjson.dumps(unresolvable) + b',"Error":""}')


def _totals(p) -> dict[str, float]:
    """Each eligible agent's score total (the default scorer's column, aligned with `eligible`;
    a custom scorer's from its entries)."""
    if not p.bound:
        return {}
    if p.custom_scores:
        return {name: entry["total"] for name, entry in p.scheduling["scores"].items()}
    return dict(zip(p.eligible, p.scores.total))
