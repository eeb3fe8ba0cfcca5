"""Replay: re-place every task of a recorded trace against a changed fleet or policy, and say for each
placement whether the decision would change, and why.

    for verdict in a3fast.replay("trace.jsonl", new_fleet):
        if verdict.changed:
            print(verdict.seq, verdict.kind, verdict.before, "->", verdict.after, verdict.why())

What a replay takes from the trace, per placement (a task.bound or task.rejected record, spec or
compact): the requirements *as matched* (a route's additions included), the session those
requirements name, the route's name, the chosen agent, and whether the placement was a resumption.
What it takes from the fleet it is given: the agents, their declarations, the recorded outcomes the
default scorer reads, the sessions already held, the weights (unless `weights` is given) and the
scorer. Tasks are placed in trace order on a copy of that fleet, exactly as `Fleet.place` would
place them from scratch: a bound placement whose requirements name a session makes its agent hold
it, so later placements of that session score affinity as they would have; outcomes are never
invented (a trace does not say how a task went). docs/replay.md states all of it.
"""
from __future__ import annotations

import gc
import itertools
import os
import tempfile
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import msgspec
import orjson

from .errors import A3Error, SchemaError, describe
from .explain import PredicateCount, predicate_counts
from .fleet import Fleet
from .placement import Placement, Route, RouteError
from .predicates import first_failed
from .record.compact import KEY as COMPACT_KEY, CompactError, Snapshots
from .schema import Requirements, parse_requirements
from .scoring import COMPONENTS
from .trace import TraceContentError, TraceProblem, TraceRecord, read_lines, read_values

__all__ = ["replay", "Verdict", "Funnel", "ReplayError", "ReplaySummary", "KINDS", "CHANGED_KINDS",
           "SAME", "MOVED", "UNSCHEDULABLE", "SCHEDULABLE", "STILL_REJECTED", "summarise",
           "copy_fleet", "parse_weights", "Threshold", "parse_thresholds", "run_replay",
           "THRESHOLD_SUBJECTS"]

#: The recorded agent would be chosen again.
SAME = "same"
#: Another agent would be chosen.
MOVED = "moved"
#: Bound when recorded; no agent would be eligible now.
UNSCHEDULABLE = "unschedulable"
#: Rejected when recorded; an agent would be chosen now.
SCHEDULABLE = "schedulable"
#: Rejected when recorded, and rejected again.
STILL_REJECTED = "still_rejected"
KINDS = (SAME, MOVED, UNSCHEDULABLE, SCHEDULABLE, STILL_REJECTED)
CHANGED_KINDS = (MOVED, UNSCHEDULABLE, SCHEDULABLE)
#: What the chosen agent's first failed predicate is said to be when it has left the fleet.
NOT_IN_FLEET = "not in the fleet"
#: Decided by a tie of totals, broken by the smallest agent name (a3fast.scoring.choose).
TIE_BREAK = "tie (smallest name)"
#: Requirements parsed per distinct recorded text, bounded so a trace of unique tasks cannot pile up.
REQUIREMENTS_CACHE_SIZE = 4096


class ReplayError(A3Error):
    """A trace (or a record in it) that cannot be replayed; the message names the line or seq and
    the JSON path, and what was expected and found."""


@dataclass(frozen=True)
class Funnel:
    """One placement's filter funnel: candidates, and per predicate how many reached and were removed."""

    candidates: int
    eligible: int
    predicates: tuple[PredicateCount, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"candidates": self.candidates, "eligible": self.eligible,
                "predicates": [{"predicate": c.predicate, "reached": c.reached, "removed": c.removed}
                               for c in self.predicates]}


@dataclass(frozen=True, slots=True)
class Verdict:
    """What replaying one recorded placement gives.

    `kind` is one of KINDS. `before`/`after` are the recorded and the replayed agent (None when
    rejected). For a changed placement the explanation is filled in: `decided_by` — for MOVED with
    both agents eligible now, the score component that decided (the largest weighted gain of the new
    agent over the recorded one), or TIE_BREAK; for UNSCHEDULABLE, the predicate that now removes the
    last candidates; for SCHEDULABLE, the predicate that removed the last ones when recorded.
    `before_fails` is the recorded agent's first failed predicate in the new fleet (NOT_IN_FLEET if
    it left), for MOVED and UNSCHEDULABLE when it is no longer eligible. `scores_before` and
    `scores_after` hold the two agents' score entries as recorded and as replayed (each where the
    agent was eligible). `funnel_before`/`funnel_after` are the two funnels (None before for a
    resumed placement, which records no lists)."""

    seq: int
    kind: str
    before: str | None
    after: str | None
    requirements: Mapping[str, Any]
    session: str | None = None
    route: str | None = None
    resumed: bool = False
    decided_by: str | None = None
    before_fails: str | None = None
    scores_before: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    scores_after: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    funnel_before: Funnel | None = None
    funnel_after: Funnel | None = None

    @property
    def changed(self) -> bool:
        return self.kind in CHANGED_KINDS

    def why(self) -> str:
        """One line saying why the decision changed ('' for an unchanged one)."""
        if self.kind == MOVED:
            if self.before_fails is not None:
                gone = ("has left the fleet" if self.before_fails == NOT_IN_FLEET
                        else f"now fails {self.before_fails}")
                return f"{self.before} {gone}; {self.after} chosen instead"
            return f"{self.after} outscores {self.before} on {self.decided_by}"
        if self.kind == UNSCHEDULABLE:
            head = (f"{self.decided_by} now removes the last candidates" if self.decided_by
                    else "no candidates remain")
            if self.before_fails is not None:
                gone = ("has left the fleet" if self.before_fails == NOT_IN_FLEET
                        else f"now fails {self.before_fails}")
                head += f"; {self.before} {gone}"
            return head
        if self.kind == SCHEDULABLE:
            head = f"{self.after} is eligible now"
            return head + (f" (when recorded, {self.decided_by} removed the last candidates)"
                           if self.decided_by else "")
        return ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seq": self.seq, "kind": self.kind, "before": self.before, "after": self.after}
        if self.resumed:
            out["resumed"] = True
        if self.route is not None:
            out["route"] = self.route
        if self.session is not None:
            out["session"] = self.session
        if self.changed:
            out["why"] = self.why()
            out["decided_by"] = self.decided_by
            out["before_fails"] = self.before_fails
            out["scores_before"] = dict(self.scores_before)
            out["scores_after"] = dict(self.scores_after)
            out["funnel_before"] = self.funnel_before.to_dict() if self.funnel_before else None
            out["funnel_after"] = self.funnel_after.to_dict() if self.funnel_after else None
            out["requirements"] = dict(self.requirements)
        return out


# -- reading the placements of a trace ---------------------------------------------------------------
class _Agent(msgspec.Struct, gc=False):
    name: str


class _Declaration(msgspec.Struct, gc=False):
    agent: _Agent


class _Rest(msgspec.Struct, gc=False):
    route: str | None = None


class _Compact(msgspec.Struct, gc=False):
    fleet: msgspec.Raw
    # msgspec reads `Raw | None` as null only: an empty Raw stands for an absent member
    requirements: msgspec.Raw = msgspec.Raw(b"")
    declaration: _Declaration | None = None
    rest: _Rest | None = None


class _Scheduling(msgspec.Struct, gc=False):
    requirements: msgspec.Raw
    declaration: _Declaration
    route: str | None = None
    resumed: bool = False


class _BoundContent(msgspec.Struct, gc=False):
    scheduling: _Scheduling | None = None
    compact: _Compact | None = msgspec.field(default=None, name=COMPACT_KEY)
    resumed: bool = False


class _RejectedContent(msgspec.Struct, gc=False):
    requirements: msgspec.Raw
    route: str | None = None
    compact: _Compact | None = msgspec.field(default=None, name=COMPACT_KEY)


def _record_decoder(kind: str, content: type) -> msgspec.json.Decoder:
    record = msgspec.defstruct(f"_{kind}", [("seq", int), ("kind", str), ("content", content)], gc=False)
    return msgspec.json.Decoder(record)


#: Typed decoders of the records a replay reads: the large lists of a placement are skipped by the
#: decoder without being built.
_TYPED = {"task.bound": _record_decoder("bound", _BoundContent),
          "task.rejected": _record_decoder("rejected", _RejectedContent)}


class _Recorded:
    """One recorded placement, as much of it as a replay needs up front."""

    __slots__ = ("seq", "kind", "requirements", "agent", "route", "resumed", "record", "compact_fleet")

    def __init__(self, seq: int, kind: str, requirements: Requirements, agent: str | None,
                 route: str | None, resumed: bool, record: TraceRecord, compact_fleet: bool):
        self.seq = seq
        self.kind = kind
        self.requirements = requirements
        self.agent = agent
        self.route = route
        self.resumed = resumed
        self.record = record
        #: a compact record that carries a fleet snapshot object (later records refer to it)
        self.compact_fleet = compact_fleet


class _Reader:
    """Turns trace items into recorded placements; requirements are parsed once per distinct text."""

    def __init__(self) -> None:
        self._requirements: dict[bytes, Requirements] = {}

    def placements(self, items: Iterable[Any]) -> Iterator[_Recorded]:
        for item in items:
            if isinstance(item, TraceProblem):
                raise ReplayError(f"{item.where}: {item.message}")
            if item.kind not in ("task.bound", "task.rejected"):
                continue
            yield self._read(item)

    def _where(self, item: TraceRecord, path: str) -> str:
        line = f"line {item.line}: " if item.line is not None else ""
        return f"{line}seq {item.seq}: {path}"

    def _parse(self, text: bytes, item: TraceRecord, path: str) -> Requirements:
        cache = self._requirements
        found = cache.get(text)
        if found is not None:
            return found
        try:
            parsed = parse_requirements(orjson.loads(text))
        except orjson.JSONDecodeError as exc:
            raise ReplayError(f"{self._where(item, path)}: expected the requirements as JSON, found {exc}") from None
        except SchemaError as exc:
            first = exc.problems[0]
            raise ReplayError(f"{self._where(item, path + first.path[1:])}: expected {first.expected}, "
                              f"found {first.found}") from None
        if len(cache) >= REQUIREMENTS_CACHE_SIZE:
            cache.clear()
        cache[text] = parsed
        return parsed

    def _read(self, item: TraceRecord) -> _Recorded:
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

    def _typed(self, item: TraceRecord, content: Any) -> _Recorded | None:
        """A record read by a typed decoder; None to read it the generic way (an unusual shape)."""
        if item.kind == "task.rejected":
            compact = content.compact
            return _Recorded(item.seq, item.kind, self._parse(bytes(content.requirements), item,
                                                              "$.content.requirements"),
                             None, content.route, False, item,
                             compact is not None and bytes(compact.fleet)[:1] == b"{")
        if content.scheduling is not None and content.compact is None:
            s = content.scheduling
            return _Recorded(item.seq, item.kind, self._parse(bytes(s.requirements), item,
                                                              "$.content.scheduling.requirements"),
                             s.declaration.agent.name, s.route, bool(content.resumed or s.resumed),
                             item, False)
        compact = content.compact
        if compact is None or content.scheduling is not None or not len(compact.requirements) \
                or compact.declaration is None:
            return None
        return _Recorded(item.seq, item.kind, self._parse(bytes(compact.requirements), item,
                                                          f"$.content['{COMPACT_KEY}'].requirements"),
                         compact.declaration.agent.name, compact.rest.route if compact.rest else None,
                         False, item, bytes(compact.fleet)[:1] == b"{")

    def _generic(self, item: TraceRecord, content: Any) -> _Recorded:
        if not isinstance(content, Mapping):
            raise ReplayError(f"{self._where(item, '$.content')}: expected an object, found {describe(content)}")
        if item.kind == "task.rejected":
            if "requirements" not in content:
                raise ReplayError(f"{self._where(item, '$.content.requirements')}: expected the task's "
                                  f"requirements, found none")
            compact = content.get(COMPACT_KEY)
            return _Recorded(item.seq, item.kind, self._requirements_of(content["requirements"], item,
                                                                        "$.content.requirements"),
                             None, self._route(content.get("route"), item, "$.content.route"), False, item,
                             isinstance(compact, Mapping) and isinstance(compact.get("fleet"), Mapping))
        if COMPACT_KEY in content:
            holder, at = content[COMPACT_KEY], f"$.content['{COMPACT_KEY}']"
            if not isinstance(holder, Mapping):
                raise ReplayError(f"{self._where(item, at)}: expected an object, found {describe(holder)}")
            rest: Mapping[str, Any] = holder["rest"] if isinstance(holder.get("rest"), Mapping) else {}
            route = self._route(rest.get("route"), item, f"{at}.rest.route")
            resumed = False
            compact_fleet = isinstance(holder.get("fleet"), Mapping)
        else:
            holder, at = content.get("scheduling"), "$.content.scheduling"
            if not isinstance(holder, Mapping):
                raise ReplayError(f"{self._where(item, at)}: expected the scheduling object, "
                                  f"found {describe(holder) if 'scheduling' in content else 'none'}")
            route = self._route(holder.get("route"), item, f"{at}.route")
            resumed = content.get("resumed") is True or holder.get("resumed") is True
            compact_fleet = False
        if "requirements" not in holder:
            raise ReplayError(f"{self._where(item, at + '.requirements')}: expected the task's requirements, found none")
        requirements = self._requirements_of(holder["requirements"], item, f"{at}.requirements")
        decl = holder.get("declaration")
        agent = decl.get("agent") if isinstance(decl, Mapping) else None
        name = agent.get("name") if isinstance(agent, Mapping) else None
        if not isinstance(name, str):
            raise ReplayError(f"{self._where(item, at + '.declaration.agent.name')}: expected the chosen "
                              f"agent's name, found {describe(name)}")
        return _Recorded(item.seq, item.kind, requirements, name, route, resumed, item, compact_fleet)

    def _requirements_of(self, doc: Any, item: TraceRecord, path: str) -> Requirements:
        try:
            text = orjson.dumps(doc)
        except TypeError as exc:
            raise ReplayError(f"{self._where(item, path)}: expected requirements, found {exc}") from None
        return self._parse(text, item, path)

    def _route(self, value: Any, item: TraceRecord, path: str) -> str | None:
        if value is None or isinstance(value, str):
            return value
        raise ReplayError(f"{self._where(item, path)}: expected a route name (a string), found {describe(value)}")


def _file_blocks(path: str | os.PathLike) -> Iterator[bytes]:
    """A file in large blocks (a trace can be larger than memory)."""
    with open(path, "rb") as fh:
        while block := fh.read(1 << 24):
            yield block


#: How far into a line to look for its kind (the writers put `seq` and `kind` first).
_KIND_PEEK = 160
_SKIPPED = (b'"kind":"task.submitted"', b'"kind":"task.admitted"')
_PLACEMENT_HINTS = ((b'"kind":"task.bound"', "task.bound"), (b'"kind":"task.rejected"', "task.rejected"))


def _placement_lines(lines: Iterable[bytes]) -> Iterator[Any]:
    """Trace items of the placement records of JSON Lines, read for a replay: a record that a
    replay does not read (task.submitted, task.admitted) is recognised by its kind and skipped
    undecoded, a placement is decoded by a typed decoder that skips its large lists, and any other
    line is read by the trace reader, which says what is wrong with a line that is not a record.
    A replay does not verify the trace (`a3fast verify` does)."""
    index = 0
    for lineno, line in enumerate(lines, 1):
        if not line or line.isspace():
            continue
        index += 1
        head = line[:_KIND_PEEK]
        if _SKIPPED[0] in head or _SKIPPED[1] in head:
            continue
        record = None
        for needle, kind in _PLACEMENT_HINTS:
            if needle in head:
                try:
                    record = _TYPED[kind].decode(line)
                except (msgspec.MsgspecError, RecursionError):
                    record = None
                if record is not None and record.kind != kind:
                    record = None
                break
        if record is not None:
            yield TraceRecord(record.seq, record.kind, lineno, index, typed=record.content, source=line)
        else:  # an unusual shape, or not a record at all: the trace reader says which
            yield from read_lines((line,), first_line=lineno)


def _items(records: Any) -> Iterator[Any]:
    """Trace items of a path, bytes, an iterable of record dicts (spec or compact form), or an
    iterable of bytes: chunks of JSON Lines, split anywhere."""
    if isinstance(records, (bytes, bytearray, memoryview)):
        data = bytes(records)
        if data.lstrip()[:1] == b"[":
            return _array(data, None)
        return _placement_lines(data.split(b"\n"))
    if isinstance(records, (str, os.PathLike)):
        path = Path(records)
        try:
            with open(path, "rb") as fh:
                head = fh.read(4096)
        except OSError as exc:
            raise ReplayError(f"{records}: cannot read: {exc.strerror or exc}") from None
        if head.lstrip()[:1] == b"[":
            return _array(path.read_bytes(), str(records))
        return _placement_lines(_chunk_lines(_file_blocks(path)))
    values = iter(records)
    first = next(values, None)
    if first is None:
        return iter(())
    rest = itertools.chain((first,), values)
    if isinstance(first, (bytes, bytearray, memoryview)):   # chunks of JSON Lines, split anywhere
        return _placement_lines(_chunk_lines(rest))
    return read_values(rest)


def _chunk_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The lines of JSON Lines given as chunks split anywhere (each chunk split once, in place)."""
    rest = b""
    for chunk in chunks:
        lines = (rest + chunk if rest else bytes(chunk)).split(b"\n")
        rest = lines.pop()   # the part after the chunk's last newline: the start of a line
        yield from lines
    if rest:
        yield rest


def _array(data: bytes, source: str | None) -> Iterator[Any]:
    try:
        values = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ReplayError(f"{source + ': ' if source else ''}$: expected a JSON array of records, found {exc}") from None
    return read_values(values)


# -- placing again and comparing ---------------------------------------------------------------------
def copy_fleet(fleet: Any) -> Any:
    """An independent copy of a fleet (agents, outcomes, sessions, weights, scorer), through its
    snapshot: a replay holds sessions on the copy, never on the fleet it was given. The snapshot
    goes to memory-backed /dev/shm where there is one and it has room (the file is read back at
    once and removed, so forcing it to disk would only cost), else to the temporary directory."""
    places = ["/dev/shm", None] if os.path.isdir("/dev/shm") else [None]
    for i, place in enumerate(places):
        fd, tmp = tempfile.mkstemp(prefix=".a3fast-replay.", suffix=".snapshot", dir=place)
        os.close(fd)
        try:
            fleet.save(tmp)
            return type(fleet).load(tmp, engine=fleet.engine, scorer=fleet.scorer)
        except OSError:
            if i == len(places) - 1:
                raise
        finally:
            os.unlink(tmp)
    raise AssertionError("unreachable")


def parse_weights(value: Any, base: Sequence[float]) -> tuple[float, ...] | None:
    """Weights of the default scorer's components from four numbers ("0.4,0.3,0.2,0.1" or a list), a
    mapping or NAME=VALUE pairs ("cost=0.5,affinity=0.2", the others kept from `base`); None for
    None. ValueError names what is wrong."""
    if value is None:
        return None
    pairs: Mapping[str, Any] | None = None
    numbers: list[Any] | None = None
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if parts and all("=" in p for p in parts):
            pairs = dict(p.split("=", 1) for p in parts)
        elif any("=" in p for p in parts):
            raise ValueError(f"weights: expected four numbers or NAME=VALUE pairs, not both, found {value!r}")
        else:
            numbers = parts
    elif isinstance(value, Mapping):
        pairs = value
    elif isinstance(value, (list, tuple)):
        numbers = list(value)
    else:
        raise ValueError(f"weights: expected four numbers or NAME=VALUE pairs, found {value!r}")
    if pairs is not None:
        weights = list(base)
        for name, number in pairs.items():
            name = str(name).strip()
            if name not in COMPONENTS:
                raise ValueError(f"weights: unknown component {name!r} (components: {', '.join(COMPONENTS)})")
            weights[COMPONENTS.index(name)] = _weight(number, name)
        return tuple(weights)
    assert numbers is not None
    if len(numbers) != len(COMPONENTS):
        raise ValueError(f"weights: expected {len(COMPONENTS)} numbers ({', '.join(COMPONENTS)}), "
                         f"found {len(numbers)}")
    return tuple(_weight(v, name) for v, name in zip(numbers, COMPONENTS))


def _weight(value: Any, name: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"weights: {name}: expected a number, found {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"weights: {name}: expected a number, found {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"weights: {name}: expected a finite number, found {value!r}")
    return number


def replay(records: Any, fleet: Any, *, weights: Any = None,
           route: Route | None = None, copy: bool = True, scorer: Any = None) -> Iterator[Verdict]:
    """Re-place every recorded placement of `records` on `fleet`, in trace order, and yield a Verdict
    for each (changed or not), as the trace is read.

    `records`: a path, the trace's bytes (JSON Lines or a JSON array), an iterable of record dicts,
    or an iterable of bytes chunks of JSON Lines; spec or compact form, or both. `fleet`: the new fleet; with `copy` (the default) the replay places on
    a copy of it, so the fleet itself is left as it was. `weights` replaces the default scorer's
    weights (four numbers, a mapping of components or "name=value,..."). `route` is applied to
    every task on top of what it was recorded with (a route only adds requirements); its name is
    the one the replayed placements carry. `scorer` replaces the fleet's custom scorer.

    Raises ReplayError (naming the line or seq and the JSON path) for a trace that cannot be read or
    a placement whose requirements are not §4 requirements, and when `route` would change a
    requirement a task stated; ValueError for bad weights.
    """
    base_weights = tuple(fleet.weights)
    new_weights = parse_weights(weights, base_weights)
    target = copy_fleet(fleet) if copy else fleet
    if new_weights is not None:
        target.weights = new_weights
    if scorer is not None:
        target.scorer = scorer
    items = _items(records)
    return _replay(items, target, route)


def _replay(items: Iterator[Any], fleet: Any, route: Route | None) -> Iterator[Verdict]:
    compare = _Comparer(fleet)
    for recorded in _Reader().placements(items):
        if recorded.compact_fleet:
            compare.register_snapshot(recorded)
        yield compare.verdict(recorded, route)


class _Comparer:
    """Places one recorded task again and compares; builds the explanation only for a change."""

    def __init__(self, fleet: Any):
        self.fleet = fleet
        self.snapshots = Snapshots()
        # A Fleet answers the decision without building a Placement (`Fleet.scored`: prepare,
        # explain, score, choose — what `place` runs, the same winner); other fleets place.
        self.decide = fleet.scored if isinstance(fleet, Fleet) else None
        self.name_of = fleet.index.name if isinstance(fleet, Fleet) else None

    def register_snapshot(self, recorded: _Recorded) -> None:
        """Read a compact record that carries a fleet snapshot, so that later records that refer to
        it can be read when they change."""
        self._member(recorded)

    def _member(self, recorded: _Recorded, content: Any = None) -> Any:
        """The compact member of a record (its `content`, when the caller has read it already),
        read on its bitmaps (never expanded); None when it cannot be read (a fleet snapshot that
        lies before the part of the trace given, or a member outside the format): the decision is
        replayed all the same, only the recorded funnel is missing."""
        item = recorded.record
        try:
            return self.snapshots.read_member(item.seq, item.kind,
                                              item.content if content is None else content)
        except (CompactError, TraceContentError):
            return None

    def verdict(self, recorded: _Recorded, route: Route | None) -> Verdict:
        fleet = self.fleet
        requirements = recorded.requirements
        route_name = route.name if route is not None else recorded.route
        if recorded.resumed:
            return self._resumed(recorded, requirements, route, route_name)
        if route is None and self.decide is not None and self.name_of is not None:
            # the decision alone first: most placements are the same, and need no Placement
            state = self.decide(requirements)
            best = state.best
            agent = self.name_of(best) if best >= 0 else None
            if agent == recorded.agent:
                session = state.session
                if agent is not None and session is not None and not fleet.holds_session(agent, session):
                    fleet.hold_session(agent, session)   # as `place` does for a bound placement
                return _unchanged(recorded.seq, SAME if agent is not None else STILL_REJECTED, agent,
                                  state.matched.doc, session, route_name)
        try:
            p = fleet.place(requirements, route=route)
        except RouteError as exc:
            raise ReplayError(f"seq {recorded.seq}: {exc}") from None
        if p.agent == recorded.agent:
            kind = SAME if p.agent is not None else STILL_REJECTED
            return _unchanged(recorded.seq, kind, p.agent, p.requirements.doc, p.session, route_name)
        return self._changed(recorded, p, route_name)

    def _resumed(self, recorded: _Recorded, requirements: Requirements, route: Route | None,
                 route_name: str | None) -> Verdict:
        """A resumption goes back to the agent it resumed on (§6), with no candidates weighed: the
        same agent if it is still in the fleet and satisfies every matched predicate, otherwise the
        task cannot resume (UNSCHEDULABLE, with the predicate the agent now fails)."""
        try:
            matched = route.apply(requirements) if route is not None else requirements
        except RouteError as exc:
            raise ReplayError(f"seq {recorded.seq}: {exc}") from None
        agent = recorded.agent
        assert agent is not None  # a task.bound names its agent
        decl = self.fleet.get(agent)
        unmet = NOT_IN_FLEET if decl is None else first_failed(decl, matched.predicates)
        if unmet is None:
            return Verdict(recorded.seq, SAME, agent, agent, matched.doc, matched.session, route_name,
                           resumed=True)
        return Verdict(recorded.seq, UNSCHEDULABLE, agent, None, matched.doc, matched.session, route_name,
                       resumed=True, decided_by=None if unmet == NOT_IN_FLEET else unmet,
                       before_fails=unmet)

    def _changed(self, recorded: _Recorded, p: Placement, route_name: str | None) -> Verdict:
        before, after = recorded.agent, p.agent
        named = [n for n in (before, after) if n is not None]
        funnel_before, then_scores = self._recorded(recorded, named)
        funnel_after = _funnel_of(p)
        now_scores = _scores_of(p, named)
        decided_by = before_fails = None
        if before is not None and before not in now_scores:
            before_fails = self._first_failed_now(p, before)
        if after is None:
            kind = UNSCHEDULABLE
            decided_by = _last_removed(funnel_after)
        elif before is None:
            kind = SCHEDULABLE
            decided_by = _last_removed(funnel_before) if funnel_before is not None else None
        else:
            kind = MOVED
            if before_fails is None:
                decided_by = _deciding_component(now_scores[after], now_scores[before], self._weights(p))
        return Verdict(recorded.seq, kind, before, after, p.requirements.doc, p.session, route_name,
                       decided_by=decided_by, before_fails=before_fails, scores_before=then_scores,
                       scores_after=now_scores, funnel_before=funnel_before, funnel_after=funnel_after)

    def _weights(self, p: Placement) -> dict[str, float] | None:
        if p.custom_scores:
            return None
        return dict(zip(COMPONENTS, self.fleet.weights))

    def _recorded(self, recorded: _Recorded, names: list[str]) -> tuple[Funnel | None, dict[str, Any]]:
        """The recorded funnel, and the recorded score entries of `names` (those that were scored);
        (None, {}) for a record without the §6 lists (a resumption) or whose lists cannot be read."""
        try:
            content = recorded.record.content
            if COMPACT_KEY in content:
                member = self._member(recorded, content)
                return (None, {}) if member is None else _compact_recorded(member, names)
            return _spec_recorded(recorded, content, names)
        except (TraceContentError, TypeError, KeyError, AttributeError, ValueError):
            return None, {}

    def _first_failed_now(self, p: Placement, agent: str) -> str:
        """The recorded agent's first failed predicate in the new fleet (derivation order)."""
        decl = self.fleet.get(agent)
        if decl is None:
            return NOT_IN_FLEET
        return first_failed(decl, p.predicates) or NOT_IN_FLEET


_new_verdict = object.__new__
_VERDICT_FIELDS = {name: getattr(Verdict, name) for name in Verdict.__slots__}
_VERDICT_DEFAULTS = (("resumed", False), ("decided_by", None), ("before_fails", None),
                     ("funnel_before", None), ("funnel_after", None))


def _unchanged(seq: int, kind: str, agent: str | None, requirements: Mapping[str, Any],
               session: str | None, route: str | None) -> Verdict:
    """The Verdict of an unchanged placement (SAME or STILL_REJECTED), filled in through its slots:
    a frozen dataclass's own __init__ sets each of its fourteen fields through object.__setattr__,
    a measurable share of a replay where nearly every placement is unchanged."""
    v = _new_verdict(Verdict)
    put = _VERDICT_SETTERS
    put[0](v, seq)
    put[1](v, kind)
    put[2](v, agent)
    put[3](v, agent)
    put[4](v, requirements)
    put[5](v, session)
    put[6](v, route)
    for setter, value in _VERDICT_REST:
        setter(v, value)
    # each verdict its own (empty) score mappings, as the dataclass's default factories give
    put[7](v, {})
    put[8](v, {})
    return v


_VERDICT_SETTERS = [_VERDICT_FIELDS[name].__set__ for name in
                    ("seq", "kind", "before", "after", "requirements", "session", "route",
                     "scores_before", "scores_after")]
_VERDICT_REST = [(_VERDICT_FIELDS[name].__set__, value) for name, value in _VERDICT_DEFAULTS]


def _funnel_of(p: Placement) -> Funnel:
    expl = p.explanation
    counts = predicate_counts(expl.candidates_count, p.predicates, expl.failed_counts())
    return Funnel(expl.candidates_count, expl.eligible_count, tuple(counts))


def _funnel(candidates: int, predicates: Sequence[str], removed: Sequence[int]) -> Funnel:
    return Funnel(candidates, candidates - sum(removed), tuple(predicate_counts(candidates, predicates, removed)))


def _compact_recorded(member: Any, names: list[str]) -> tuple[Funnel, dict[str, Any]]:
    """Funnel and scores of a compact record, from its bitmaps and columns."""
    funnel = _funnel(len(member.candidates), member.predicates, [len(ids) for ids in member.failed])
    scores: dict[str, Any] = {}
    table = member.names
    for name in names:
        try:
            aid = table.index(name)
        except ValueError:
            continue
        if aid in member.score_ids:
            at = member.score_ids.rank(aid) - 1
            scores[name] = {column: values[at] for column, values in member.score_columns}
    return funnel, scores


def _spec_recorded(recorded: _Recorded, content: Mapping[str, Any], names: list[str]) -> tuple[Funnel | None, dict[str, Any]]:
    """Funnel and scores of a spec record, counted straight from its lists."""
    if recorded.kind == "task.bound":
        holder = content["scheduling"]
        if "candidates" not in holder:
            return None, {}
        predicates = list(holder.get("filters_passed") or ())
    else:
        holder = content
        if "candidates" not in holder:
            return None, {}
        predicates = list(recorded.requirements.predicates)
    counts = Counter(pair["predicate"] for pair in holder.get("filters_failed") or ())
    predicates += [p for p in counts if p not in predicates]
    funnel = _funnel(len(holder["candidates"]), predicates, [counts.get(p, 0) for p in predicates])
    scores = holder.get("scores") or {} if recorded.kind == "task.bound" else {}
    return funnel, {name: dict(scores[name]) for name in names if name in scores}


def _last_removed(funnel: Funnel) -> str | None:
    """The predicate after which no candidate remains (None when there were no candidates at all)."""
    for count in funnel.predicates:
        if count.removed and count.removed == count.reached:
            return count.predicate
    return None


def _scores_of(p: Placement, names: list[str]) -> dict[str, dict[str, Any]]:
    """The replayed score entries of the named agents that are eligible."""
    if not p.bound:
        return {}
    index = p.index
    if p.custom_scores:
        wanted = set(names)
        return {index.name(aid): dict(entry) for aid, entry in zip(p.scores.ids, p.scores.entries)
                if index.name(aid) in wanted}
    scores = index.score_map(p.scores)
    return {name: dict(scores[name]) for name in names if name in scores}


def _deciding_component(winner: Mapping[str, Any], loser: Mapping[str, Any],
                        weights: Mapping[str, float] | None) -> str:
    """The component that gives the winner its largest (weighted) lead, or TIE_BREAK for equal totals."""
    if winner.get("total") == loser.get("total"):
        return TIE_BREAK
    best, lead = None, 0.0
    for name, value in winner.items():
        other = loser.get(name)
        if name == "total" or not _number(value) or not _number(other):
            continue
        gain = (value - other) * (weights.get(name, 1.0) if weights is not None else 1.0)
        if best is None or gain > lead:
            best, lead = name, gain
    return best if best is not None and lead > 0 else "total"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# -- the summary ---------------------------------------------------------------------------------------
@dataclass
class ReplaySummary:
    """Totals per kind, and what lies behind most changes: predicates and agents."""

    placements: int = 0
    kinds: Counter = field(default_factory=Counter)
    predicates: Counter = field(default_factory=Counter)
    lost: Counter = field(default_factory=Counter)      # agents that no longer get placements
    gained: Counter = field(default_factory=Counter)    # agents that get them instead
    components: Counter = field(default_factory=Counter)

    def add(self, verdict: Verdict) -> None:
        self.placements += 1
        self.kinds[verdict.kind] += 1
        if not verdict.changed:
            return
        predicate = verdict.before_fails if verdict.before_fails not in (None, NOT_IN_FLEET) \
            else verdict.decided_by if verdict.kind != MOVED else None
        if predicate is not None and predicate != TIE_BREAK:
            self.predicates[predicate] += 1
        if verdict.kind == MOVED and verdict.before_fails is None and verdict.decided_by:
            self.components[verdict.decided_by] += 1
        if verdict.before is not None:
            self.lost[verdict.before] += 1
        if verdict.after is not None:
            self.gained[verdict.after] += 1

    @property
    def changed(self) -> int:
        return sum(self.kinds[k] for k in CHANGED_KINDS)

    def share(self, kind: str) -> float:
        count = self.changed if kind == "changed" else self.kinds[kind]
        return count / self.placements if self.placements else 0.0

    def to_dict(self, top: int = 10) -> dict[str, Any]:
        return {"placements": self.placements, "changed": self.changed,
                "kinds": {k: self.kinds[k] for k in KINDS},
                "predicates": [{"predicate": p, "placements": n} for p, n in self.predicates.most_common(top)],
                "components": [{"component": c, "placements": n} for c, n in self.components.most_common(top)],
                "agents_lost": [{"agent": a, "placements": n} for a, n in self.lost.most_common(top)],
                "agents_gained": [{"agent": a, "placements": n} for a, n in self.gained.most_common(top)]}


def summarise(verdicts: Iterable[Verdict]) -> ReplaySummary:
    summary = ReplaySummary()
    for verdict in verdicts:
        summary.add(verdict)
    return summary


# -- thresholds for CI ---------------------------------------------------------------------------------
#: What a threshold may count: a kind of verdict, or "changed" (moved + unschedulable + schedulable).
THRESHOLD_SUBJECTS = (*KINDS, "changed")


@dataclass(frozen=True)
class Threshold:
    """`moved>1%`: fails when the count (or share of placements, with `percent`) of `subject` is
    above `limit` (`>`), or at or above it (`>=`)."""

    subject: str
    operator: str
    limit: float
    percent: bool

    def __str__(self) -> str:
        limit = f"{self.limit:g}{'%' if self.percent else ''}"
        return f"{self.subject}{self.operator}{limit}"

    def measured(self, summary: ReplaySummary) -> float:
        count = summary.changed if self.subject == "changed" else summary.kinds[self.subject]
        return 100.0 * count / summary.placements if self.percent and summary.placements else \
            (0.0 if self.percent else float(count))

    def exceeded(self, summary: ReplaySummary) -> bool:
        value = self.measured(summary)
        return value > self.limit if self.operator == ">" else value >= self.limit


def parse_thresholds(text: str) -> list[Threshold]:
    """`moved>1%,unschedulable>0` -> thresholds; ValueError names the rule that is wrong and why."""
    import re

    rule = re.compile(r"\s*([a-z_]+)\s*(>=|>)\s*([0-9]+(?:\.[0-9]+)?)\s*(%?)\s*")
    out = []
    for part in text.split(","):
        match = rule.fullmatch(part)
        if match is None:
            raise ValueError(f"--fail-on: {part.strip()!r}: expected KIND>N or KIND>N% (e.g. moved>1%), "
                             f"KIND one of {', '.join(THRESHOLD_SUBJECTS)}")
        subject, operator, limit, percent = match.groups()
        if subject not in THRESHOLD_SUBJECTS:
            raise ValueError(f"--fail-on: {part.strip()!r}: unknown kind {subject!r} "
                             f"(one of {', '.join(THRESHOLD_SUBJECTS)})")
        out.append(Threshold(subject, operator, float(limit), bool(percent)))
    return out


# -- a whole replay, as the command, the service and the benchmark run it ---------------------------
@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a whole replay. Every placement makes short-lived,
    acyclic objects (its record, requirements, placement, verdict) that reference counting frees;
    the collections they would trigger rescan the fleet's long-lived objects each time, a quarter
    of a replay's time at 1,000 agents."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def run_replay(records: Any, fleet: Any, *, changes: Any = None, keep: int = 1_000,
               until: int | None = None, check: Any = None, **options: Any) -> tuple[ReplaySummary, list[Verdict]]:
    """Replay a whole trace (see `replay`, whose `options` these are): the summary, and the first
    `keep` changed verdicts. `changes`, a binary file, receives every changed verdict as a line of
    JSON; `until` stops after that seq; `check(summary)` is called every 256 placements and may raise
    to stop the replay. The cyclic garbage collector is paused meanwhile."""
    summary = ReplaySummary()
    kept: list[Verdict] = []
    with _collector_paused():
        for verdict in replay(records, fleet, **options):
            if until is not None and verdict.seq > until:
                break
            summary.add(verdict)
            if verdict.changed:
                if changes is not None:
                    changes.write(_json_line(verdict.to_dict()))
                if len(kept) < keep:
                    kept.append(verdict)
            if check is not None and summary.placements % 256 == 0:
                check(summary)
    return summary, kept


def _json_line(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_APPEND_NEWLINE)
    except TypeError:   # what orjson refuses (an integer beyond 64 bits in recorded requirements)
        import json

        return json.dumps(value).encode() + b"\n"
