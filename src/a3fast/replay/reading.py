"""Reading the placements of a trace for a replay: what each one takes from the trace.

The trace is framed and read by the trace reader (`a3fast.trace.read_trace` / `read_lines` /
`read_values`, the reader `verify` and `read_records` use), so a replay sees every record verify
sees, whatever the member order, the whitespace or the extension members. Typed decoders (given
to that reader) take from a placement only what a replay needs and skip its large lists unbuilt;
a record of an unusual shape is read whole, the generic way, with the same result.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from typing import Annotated, Any, Iterable, Iterator, Mapping

import msgspec
import orjson

from ..errors import SchemaError, describe
from ..prepared import PreparedRequirements
from ..record.compact import KEY as COMPACT_KEY, CompactError, Snapshots
from ..record.write import SESSION_HELD_MEMBER, SESSION_MEMBER
from ..schema import Requirements, parse_requirements
from ..trace import TraceContentError, TraceProblem, TraceRecord, read_lines, read_trace, read_values
from .verdict import ReplayError

__all__ = ["Recorded", "Reader", "trace_items"]

#: The most recent full placements a resumption without `recorded_in.seq` is matched against
#: (by agent and matched predicates), oldest forgotten first.
PLACED_KEPT = 1 << 16
#: Names of offered candidate sets kept, at most, counted over the sets (a side's resolved sets
#: likewise, a3fast.replay.deciding): past it the kept sets are let go, and a set met again is
#: read again. A trace of many large distinct sets (a churning fleet of 100,000 agents offers each
#: placement the live ones) would otherwise hold every one whole.
OFFERED_NAMES_KEPT = 1 << 22

_EMPTY = msgspec.Raw(b"")


# -- the typed shapes (a member a replay does not name is skipped by the decoder, unbuilt) ------------
class _Agent(msgspec.Struct, gc=False):
    name: str


class _Declaration(msgspec.Struct, gc=False):
    agent: _Agent


#: a seq within an int64 (msgspec bounds no wider): one past it sends its line to the ordinary reader,
#: which holds it to the document rule (up to 2^64-1) and names one past that
_Seq = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class _RecordedIn(msgspec.Struct, gc=False):
    seq: _Seq | None = None


class _Rest(msgspec.Struct, gc=False):
    # the spec record's other scheduling members, where a compact record keeps them
    route: str | None = None
    session: str | None = msgspec.field(default=None, name=SESSION_MEMBER)
    held: bool = msgspec.field(default=True, name=SESSION_HELD_MEMBER)
    resumed: bool = False
    recorded_in: _RecordedIn | None = None


class _Compact(msgspec.Struct, gc=False):
    fleet: msgspec.Raw
    # msgspec reads `Raw | None` as null only: an empty Raw stands for an absent member
    candidates: msgspec.Raw = _EMPTY
    requirements: msgspec.Raw = _EMPTY
    declaration: _Declaration | None = None
    rest: _Rest | None = None


class _Scheduling(msgspec.Struct, gc=False):
    requirements: msgspec.Raw
    declaration: _Declaration
    candidates: msgspec.Raw = _EMPTY
    route: str | None = None
    resumed: bool = False
    recorded_in: _RecordedIn | None = None
    session: str | None = msgspec.field(default=None, name=SESSION_MEMBER)
    held: bool = msgspec.field(default=True, name=SESSION_HELD_MEMBER)


class _BoundContent(msgspec.Struct, gc=False):
    scheduling: _Scheduling | None = None
    compact: _Compact | None = msgspec.field(default=None, name=COMPACT_KEY)
    resumed: bool = False


class _RejectedContent(msgspec.Struct, gc=False):
    requirements: msgspec.Raw
    candidates: msgspec.Raw = _EMPTY
    route: str | None = None
    session: str | None = msgspec.field(default=None, name=SESSION_MEMBER)
    held: bool = msgspec.field(default=True, name=SESSION_HELD_MEMBER)
    compact: _Compact | None = msgspec.field(default=None, name=COMPACT_KEY)


class _Pod(msgspec.Struct, gc=False):
    namespace: str | None = None
    name: str | None = None


class _SubmittedContent(msgspec.Struct, gc=False):
    id: str | int | None = None
    pod: _Pod | None = None


class _Skipped(msgspec.Struct, gc=False):
    pass


def _record_decoder(kind: str, content: type) -> msgspec.json.Decoder:
    record = msgspec.defstruct(f"_{kind}", [("seq", _Seq), ("kind", str), ("content", content)], gc=False)
    return msgspec.json.Decoder(record)


#: Typed decoders of the records a replay reads, for the trace reader (`read_lines(typed=...)`).
TYPED = {"task.bound": _record_decoder("bound", _BoundContent),
         "task.rejected": _record_decoder("rejected", _RejectedContent),
         "task.submitted": _record_decoder("submitted", _SubmittedContent),
         "task.admitted": _record_decoder("admitted", _Skipped)}


# -- framing: the one place a replay turns its input into trace items -----------------------------
def trace_items(records: Any) -> Iterator[Any]:
    """Trace items of a path, bytes (JSON Lines or a JSON array), a binary file, an iterable of
    record dicts (spec or compact form), or an iterable of bytes chunks of JSON Lines split
    anywhere; JSON Lines are streamed (memory does not grow with the trace)."""
    if isinstance(records, (str, os.PathLike)):
        try:   # said here, before the first item is asked for; the reader opens the file itself
            open(records, "rb").close()
        except OSError as exc:
            raise ReplayError(f"{records}: cannot read: {exc.strerror or exc}") from None
        return read_trace(records, typed=TYPED)
    if isinstance(records, (bytes, bytearray, memoryview)) or hasattr(records, "read"):
        return read_trace(records if hasattr(records, "read") else bytes(records), typed=TYPED)
    try:
        values = iter(records)
    except TypeError:
        raise TypeError(f"records: expected a path, bytes, a binary file or an iterable of records, "
                        f"found {describe(records)}") from None
    first = next(values, _NOTHING)
    if first is _NOTHING:       # (a first item of None is a record that is not one, said in its place)
        return iter(())
    if isinstance(first, (bytes, bytearray, memoryview)):
        return read_lines(_chunk_lines(bytes(first), values), typed=TYPED)
    return read_values(_prepend(first, values))


#: what `next` gives for an iterable of no items
_NOTHING = object()


def _prepend(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def _chunk_lines(first: bytes, chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The lines of JSON Lines given as chunks split anywhere (each chunk split once, in place)."""
    rest = b""
    for chunk in _prepend(first, iter(chunks)):
        lines = (rest + chunk if rest else bytes(chunk)).split(b"\n")
        rest = lines.pop()   # the part after the chunk's last newline: the start of a line
        yield from lines
    if rest:
        yield rest


# -- one recorded placement ----------------------------------------------------------------------
class Recorded:
    """One recorded placement, as much of it as a replay needs up front.

    `offered` is the placement's recorded candidates as `(token, names)` — one token per distinct
    set, so a fleet resolves each set once — or None when the record lists none (a resumption).
    `session` is the placement's session: the one given beside the requirements (reading 25) or
    the requirements' own. `resumes` is the seq a resumption cites; `holds` is False for a
    bound placement that left its session unheld (reading 25). `submitted` is the task.submitted
    record before it (read for the task's name only when the placement changes)."""

    __slots__ = ("seq", "kind", "requirements", "agent", "route", "resumed", "record", "session",
                 "resumes", "offered", "submitted", "holds")

    def __init__(self, seq: int, kind: str, requirements: Requirements, agent: str | None,
                 route: str | None, resumed: bool, record: TraceRecord, session: str | None,
                 resumes: int | None = None):
        self.seq = seq
        self.kind = kind
        self.requirements = requirements
        self.agent = agent
        self.route = route
        self.resumed = resumed
        self.record = record
        self.session = session if session is not None else requirements.session
        self.resumes = resumes
        self.offered: tuple[int, tuple[str, ...]] | None = None
        self.submitted: TraceRecord | None = None
        #: whether the placement's agent was made to hold its session (False: a filter's answer)
        self.holds = True

    def identity(self) -> tuple[str | None, str | None]:
        """The task's name and namespace from its task.submitted: a pod's `namespace/name`, else its
        `id`; (None, None) when it has neither."""
        item = self.submitted
        if item is None:
            return None, None
        content = item.typed
        if content is not None:
            pod, ident = content.pod, content.id
            pod_ns, pod_name = (pod.namespace, pod.name) if pod is not None else (None, None)
        else:
            try:
                found = item.content
            except TraceContentError:
                return None, None
            ident = found.get("id")
            pod = found.get("pod")
            pod_ns = pod.get("namespace") if isinstance(pod, Mapping) else None
            pod_name = pod.get("name") if isinstance(pod, Mapping) else None
        if isinstance(pod_name, str) and pod_name:
            ns = pod_ns if isinstance(pod_ns, str) and pod_ns else None
            return (f"{ns}/{pod_name}" if ns else pod_name), ns
        if isinstance(ident, (str, int)) and not isinstance(ident, bool):
            return str(ident), None
        return None, None


class Reader:
    """Turns trace items into recorded placements; requirements are parsed once per distinct text,
    offered candidate sets resolved once per distinct set, compact fleet snapshots registered."""

    def __init__(self) -> None:
        # the service's cache of requirements by their text: a task type that recurs is parsed
        # twice and then never again, a task met once leaves nothing behind
        self._requirements = PreparedRequirements()
        self._offered: dict[Any, tuple[int, tuple[str, ...]] | None] = {}
        self._offered_names = 0     # names the kept sets hold (OFFERED_NAMES_KEPT)
        self._tokens = 0            # tokens given: a set read again after a letting go gets a new one
        self.snapshots = Snapshots()
        #: the seq of the latest full placement of each (agent, session, matched predicates), for
        #: resumptions that cite none (`_cited`), oldest first
        self._placed: OrderedDict[tuple[str | None, str | None, tuple[str, ...]], int] = OrderedDict()

    def placements(self, items: Iterable[Any]) -> Iterator[Recorded]:
        submitted = None
        for item in items:
            if type(item) is TraceProblem:
                raise ReplayError(f"{item.where}: {item.message}")
            kind = item.kind
            if kind == "task.submitted":
                submitted = item
            elif kind == "task.bound" or kind == "task.rejected":
                recorded = self._read(item)
                recorded.submitted = submitted
                if kind == "task.bound":
                    self._cited(recorded)
                yield recorded

    def _cited(self, recorded: Recorded) -> None:
        """A full placement is remembered by its agent, session and matched predicates; a
        resumption that cites no seq (§6 makes `recorded_in.seq` optional) is taken to resume the
        latest of them it matches — the placement of its task whose agent and matched requirements
        it goes back to, as `Fleet.resume` writes it — so it follows that placement on each side.
        One that matches none kept (or forgotten: at most PLACED_KEPT) resumes on its recorded
        agent."""
        key = (recorded.agent, recorded.session, recorded.requirements.predicates)
        placed = self._placed
        if not recorded.resumed:
            placed[key] = recorded.seq
            placed.move_to_end(key)     # the oldest is first to forget
            if len(placed) > PLACED_KEPT:
                placed.popitem(last=False)
        elif recorded.resumes is None:
            recorded.resumes = placed.get(key)

    def member(self, item: TraceRecord, content: Any = None) -> Any:
        """The compact member of a record, read on its bitmaps (never expanded); its snapshot is
        registered. ReplayError naming the record when it cannot be read (a member outside the
        format, or a fleet snapshot that is not earlier in the trace given, as in a trace cut
        from its start): replayed over the whole fleet instead, its placement would be offered
        agents it was not, and could be reported as a change that is not real."""
        try:
            return self.snapshots.read_member(item.seq, item.kind, item.content if content is None else content)
        except CompactError as exc:     # its words name the seq and the member
            raise ReplayError(f"line {item.line}: {exc}" if item.line is not None else str(exc)) from None
        except TraceContentError as exc:
            raise ReplayError(f"{self._where(item, '$.content')}: {exc}") from None

    # -- the parts ---------------------------------------------------------------------------------
    def _where(self, item: TraceRecord, path: str) -> str:
        line = f"line {item.line}: " if item.line is not None else ""
        return f"{line}seq {item.seq}: {path}"

    def _parse(self, text: bytes, item: TraceRecord, path: str) -> Requirements:
        try:   # the trace's text is held to the document rule here (the service's is, before the cache)
            return self._requirements.lookup(text, lambda: parse_requirements(orjson.loads(text)))
        except orjson.JSONDecodeError as exc:
            raise ReplayError(f"{self._where(item, path)}: expected the requirements as JSON, found {exc}") from None
        except SchemaError as exc:
            first = exc.problems[0]
            raise ReplayError(f"{self._where(item, path + first.path[1:])}: expected {first.expected}, "
                              f"found {first.found}") from None

    def _token(self, key: Any, names: Any) -> tuple[int, tuple[str, ...]] | None:
        if names is None:
            found = None
        else:
            listed = tuple(names)
            if self._offered_names + len(listed) > OFFERED_NAMES_KEPT:
                self._offered.clear()
                self._offered_names = 0
            found = (self._tokens, listed)
            self._tokens += 1
            self._offered_names += len(listed)
        self._offered[key] = found
        return found

    def _spec_offered(self, raw: bytes) -> tuple[int, tuple[str, ...]] | None:
        if not raw:
            return None
        try:
            return self._offered[raw]
        except KeyError:
            pass
        try:
            names = orjson.loads(raw)
        except orjson.JSONDecodeError:
            names = None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            names = None   # not §6 candidates: the whole fleet is offered (verify names the record)
        return self._token(raw, names)

    def _compact_offered(self, item: TraceRecord, fleet: bytes, candidates: bytes,
                         content: Any = None) -> tuple[int, tuple[str, ...]] | None:
        key = (fleet, candidates)
        carries_snapshot = fleet[:1] == b"{"
        if not carries_snapshot:
            try:
                return self._offered[key]
            except KeyError:
                pass
        member = self.member(item, content)     # registers a snapshot the record carries
        names = member.names.names     # indexed by the record's checked ids
        found = self._offered.get(key) if carries_snapshot else None
        if found is not None:
            return found
        return self._token(key, [names[aid] for aid in member.candidates])

    def _read(self, item: TraceRecord) -> Recorded:
        typed = item.typed
        if typed is not None:
            found = self._typed(item, typed)
            if found is not None:
                return found
        try:
            content = item.content
        except TraceContentError as exc:
            raise ReplayError(f"{self._where(item, '$.content')}: {exc}") from None
        return self._generic(item, content)

    def _typed(self, item: TraceRecord, content: Any) -> Recorded | None:
        """A record read by a typed decoder; None to read it the generic way (an unusual shape)."""
        if item.kind == "task.rejected":
            compact = content.compact
            r = Recorded(item.seq, item.kind, self._parse(bytes(content.requirements), item,
                                                          "$.content.requirements"),
                         None, content.route, False, item, content.session)
            r.holds = content.held
            if compact is not None:
                r.offered = self._compact_offered(item, bytes(compact.fleet), bytes(compact.candidates))
            else:
                r.offered = self._spec_offered(bytes(content.candidates))
            return r
        if content.scheduling is not None and content.compact is None:
            s = content.scheduling
            resumed = bool(content.resumed or s.resumed)
            r = Recorded(item.seq, item.kind, self._parse(bytes(s.requirements), item,
                                                          "$.content.scheduling.requirements"),
                         s.declaration.agent.name, s.route, resumed, item, s.session,
                         s.recorded_in.seq if s.recorded_in is not None else None)
            r.holds = s.held
            if not resumed:
                r.offered = self._spec_offered(bytes(s.candidates))
            return r
        compact = content.compact
        if compact is None or content.scheduling is not None or not len(compact.requirements) \
                or compact.declaration is None:
            return None
        rest = compact.rest
        # a resumption read as its spec form is: `resumed` beside the member or in its rest (the spec
        # record's scheduling), and the placement it cites
        resumed = bool(content.resumed or (rest is not None and rest.resumed))
        cited = rest.recorded_in if rest is not None else None
        r = Recorded(item.seq, item.kind, self._parse(bytes(compact.requirements), item,
                                                      f"$.content['{COMPACT_KEY}'].requirements"),
                     compact.declaration.agent.name, rest.route if rest else None, resumed, item,
                     rest.session if rest else None, cited.seq if cited is not None else None)
        r.holds = rest.held if rest else True
        # read whether or not it is kept: a record that carries a fleet snapshot registers it here
        offered = self._compact_offered(item, bytes(compact.fleet), bytes(compact.candidates))
        if not resumed:
            r.offered = offered
        return r

    def _generic(self, item: TraceRecord, content: Any) -> Recorded:
        if not isinstance(content, Mapping):
            raise ReplayError(f"{self._where(item, '$.content')}: expected an object, found {describe(content)}")
        if item.kind == "task.rejected":
            if "requirements" not in content:
                raise ReplayError(f"{self._where(item, '$.content.requirements')}: expected the task's "
                                  f"requirements, found none")
            r = Recorded(item.seq, item.kind, self._requirements_of(content["requirements"], item,
                                                                    "$.content.requirements"),
                         None, self._text(content.get("route"), item, "$.content.route", "a route name"), False,
                         item, self._text(content.get(SESSION_MEMBER), item, f"$.content['{SESSION_MEMBER}']",
                                          "a session"))
            r.holds = content.get(SESSION_HELD_MEMBER) is not False
            r.offered = self._generic_offered(item, content, content)
            return r
        if COMPACT_KEY in content:
            holder, at = content[COMPACT_KEY], f"$.content['{COMPACT_KEY}']"
            if not isinstance(holder, Mapping):
                raise ReplayError(f"{self._where(item, at)}: expected an object, found {describe(holder)}")
            rest: Mapping[str, Any] = holder["rest"] if isinstance(holder.get("rest"), Mapping) else {}
            route = self._text(rest.get("route"), item, f"{at}.rest.route", "a route name")
            session = self._text(rest.get(SESSION_MEMBER), item, f"{at}.rest['{SESSION_MEMBER}']", "a session")
            resumed = content.get("resumed") is True or rest.get("resumed") is True
            cited = rest.get("recorded_in")
            resumes = cited.get("seq") if isinstance(cited, Mapping) else None
            resumes = resumes if type(resumes) is int else None
        else:
            holder, at = content.get("scheduling"), "$.content.scheduling"
            if not isinstance(holder, Mapping):
                raise ReplayError(f"{self._where(item, at)}: expected the scheduling object, "
                                  f"found {describe(holder) if 'scheduling' in content else 'none'}")
            route = self._text(holder.get("route"), item, f"{at}.route", "a route name")
            session = self._text(holder.get(SESSION_MEMBER), item, f"{at}['{SESSION_MEMBER}']", "a session")
            resumed = content.get("resumed") is True or holder.get("resumed") is True
            cited = holder.get("recorded_in")
            resumes = cited.get("seq") if isinstance(cited, Mapping) else None
            resumes = resumes if type(resumes) is int else None
        if "requirements" not in holder:
            raise ReplayError(f"{self._where(item, at + '.requirements')}: expected the task's requirements, found none")
        requirements = self._requirements_of(holder["requirements"], item, f"{at}.requirements")
        decl = holder.get("declaration")
        agent = decl.get("agent") if isinstance(decl, Mapping) else None
        name = agent.get("name") if isinstance(agent, Mapping) else None
        if not isinstance(name, str):
            raise ReplayError(f"{self._where(item, at + '.declaration.agent.name')}: expected the chosen "
                              f"agent's name, found {describe(name)}")
        r = Recorded(item.seq, item.kind, requirements, name, route, resumed, item, session, resumes)
        r.holds = (rest if COMPACT_KEY in content else holder).get(SESSION_HELD_MEMBER) is not False
        # read whether or not it is kept: a compact record that carries a fleet snapshot registers it
        offered = self._generic_offered(item, content, holder)
        if not resumed:
            r.offered = offered
        return r

    def _generic_offered(self, item: TraceRecord, content: Mapping[str, Any],
                         holder: Any) -> tuple[int, tuple[str, ...]] | None:
        compact = content.get(COMPACT_KEY)
        if isinstance(compact, Mapping):
            fleet = compact.get("fleet")
            candidates = compact.get("candidates")
            return self._compact_offered(item, orjson.dumps(fleet) if fleet is not None else b"",
                                         orjson.dumps(candidates) if candidates is not None else b"", content)
        names = holder.get("candidates") if isinstance(holder, Mapping) else None
        if names is None:
            return None
        try:
            return self._spec_offered(orjson.dumps(names))
        except TypeError:
            return None

    def _requirements_of(self, doc: Any, item: TraceRecord, path: str) -> Requirements:
        try:
            text = orjson.dumps(doc)
        except TypeError as exc:
            raise ReplayError(f"{self._where(item, path)}: expected requirements, found {exc}") from None
        return self._parse(text, item, path)

    def _text(self, value: Any, item: TraceRecord, path: str, what: str) -> str | None:
        if value is None or isinstance(value, str):
            return value
        raise ReplayError(f"{self._where(item, path)}: expected {what} (a string), found {describe(value)}")
