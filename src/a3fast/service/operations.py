"""The service's operations, shared by the HTTP API and the stdio protocol: each takes a request
object (the HTTP body, with path and query parameters as fields) and returns the response object,
or raises ServiceError. HTTP and stdio are thin shells over these.

Each operation checks everything first and changes state in one synchronous step (no await between
checking and applying), then waits for durability: on one event loop this is what keeps any
placement from seeing half of an update, and any response from acknowledging what is not on disk.
The one exception is a batch of placements given `turn` seconds (HTTP): it is placed in steps of
about that long, each complete (its placements applied, journaled and traced), with a turn of the
loop between them so the loop goes on answering. Every change takes the state's `applying` lock
for its step(s), so nothing is applied between a batch's steps and changes are applied, and take
their seqs, in the order they reach the lock.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable, Literal, Protocol, Sequence

import asyncio
import re
import secrets
import time

import msgspec
import orjson

from ..errors import A3Error, FleetError, SchemaError
from ..fleet.scoring import MAX_OUTCOMES
from ..durable.journal import JournalFailed
from ..fleet.placement import Route, RouteError
from ..document import plainly_within
from ..engines import ENGINE, ingest_module
from ..schema import MAX_TEXT, Requirements, is_text, parse_declaration, parse_requirements, task_kind
from ..verify import is_valid, verify_stream_counted
from . import metrics
from ..prepared import PreparedRequirements
from .slices import Slice, readable_answer
from .problems import (MAX_DEPTH, MAX_STRING, SINCE_EXPECTED, ServiceError, check_bounds, from_library, library_problems,
                       parse_json, problem, since_seq)
from .state import FleetConflict, ServiceState

__all__ = ["Operations", "PlaceAnswer", "PlaceRequest", "PreparedPlace", "decode_place_request", "OPS", "RECORD_FORMS", "STREAM",
           "verify_text", "verify_result"]

#: Compact records that may refer to a fleet snapshot an earlier answer of the same stream carried:
#: a stdio stream's answers, or one HTTP response's (a batch's), are read in order, so together they
#: are one slice of the trace.
STREAM = "compact-stream"
#: The record forms of a place answer: §6 JSON, compact records that stand alone, or compact
#: records of a stream.
RECORD_FORMS = ("spec", "compact", STREAM)

#: Fleet tokens (`Operations.fleet_token`) a service remembers, the latest ones.
TOKENS_KEPT = 1024
#: What a fleet token is, as a refusal names it.
TOKEN_TEXT = "a fleet token, as an earlier answer's A3-Fleet header gave it"
#: a fleet token's text: a record seq (at most 20 digits) and an issuer (16 hex digits)
_TOKEN = re.compile(r"([0-9]{1,20})-([0-9a-f]{16})")
#: Names listed per page of GET /v1/agents, at most.
MAX_PAGE = 10_000
#: Records one stdio `trace` answer holds, at most.
MAX_TRACE_RECORDS = 100_000


def _require(body: Any, field: str, kind: type | tuple, expected: str) -> Any:
    if not isinstance(body, dict):
        raise ServiceError(400, [problem("$", "an object", orjson.dumps(body)[:60].decode("utf-8", "replace"))])
    value = body.get(field)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        found = "nothing" if field not in body else _describe(value)
        raise ServiceError(400, [problem(f"$.{field}", expected, found)])
    return value


def _optional(body: dict, field: str, kind: type | tuple, expected: str) -> Any:
    if body.get(field) is None:
        return None
    return _require(body, field, kind, expected)


def _text(value: Any, field: str, expected: str) -> Any:
    """A session or kind the request gives (a string already), held to the text rule (reading 10):
    400 at `$.field` for one outside it."""
    if value is not None and not is_text(value):
        raise ServiceError(400, [problem(f"$.{field}", f"{expected} (1 to {MAX_TEXT} characters, no control "
                                         "character)", _describe(value)[:80])])
    return value


def _describe(value: Any) -> str:
    from ..errors import describe

    return describe(value)


def _declaration(doc: Any, **where: Any):
    try:
        return parse_declaration(doc)
    except SchemaError as exc:
        raise from_library(exc, 400, **where) from None


class PlaceRequest(msgspec.Struct, forbid_unknown_fields=True):
    """A place request as its text decodes straight into typed fields (a stdio line, whose `op`
    is "place"; an HTTP body, which has none): no dict of the request, no field checked twice.
    `requirements` stays the member's JSON text, an object's: the service's cache of prepared
    requirements is keyed on it (`prepared.PreparedRequirements`). Only a request without a route,
    within every bound the general path checks, is read this way (`decode_place_request`); a
    request with any other member goes the general way, since msgspec passes over a member it does
    not know without checking its value."""
    requirements: msgspec.Raw
    op: Literal["place"] | None = None
    id: Any = None
    session: str | None = None
    record: str | None = None
    route: None = None


_decode_place = msgspec.json.Decoder(PlaceRequest).decode


#: `document.plainly_within` of bytes: one pass, no copy, where the extension is built
_plainly_within_bytes: Callable[[bytes, int], bool] = ingest_module(ENGINE).plainly_within


def decode_place_request(line: bytes) -> PlaceRequest | None:
    """The text's place request, typed; None for any other text, or one the general path must
    read (`parse_json` and the operation's own checks), which then answers it exactly as before:
    a route, a field of another type (`requirements` not an object), a text longer than
    MAX_STRING, or one whose nesting or integers the text alone does not show to be within bounds."""
    if len(line) > MAX_STRING:
        return None
    if not (_plainly_within_bytes(line, MAX_DEPTH) if type(line) is bytes else plainly_within(line, MAX_DEPTH)):
        return None
    try:
        request = _decode_place(line)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    # a Raw member is any JSON value: what is not an object is refused by the general path's words
    return request if memoryview(request.requirements)[0] == 0x7B else None    # "{"


def _requirements_refused(exc: SchemaError) -> ServiceError:
    """400 for a request's `requirements` the library refused: each problem at its path in the
    request, as the service's own bounds name them (the library reads the document as `$`)."""
    return ServiceError(400, [problem("$.requirements" + p.path[1:], p.expected, p.found) for p in exc.problems])


def _route_refused(exc: SchemaError) -> ServiceError:
    """400 for requirements the library took, whose route made of them a document it refuses: at
    the route's additions, saying where in the routed document."""
    return ServiceError(400, [problem("$.route.adds", p.expected,
                                      f"{p.found} (at {p.path} of the requirements the route makes)")
                              for p in exc.problems])


class PreparedPlace(msgspec.Struct):
    """A typed place request (`PlaceRequest`) with its requirements prepared from their text
    (`Operations.prepared_place`): the Requirements, or the SchemaError that refuses them, raised
    when the request is answered (after its other fields are checked, as the general path does).
    A Struct: made by msgspec's own constructor, one per place request, without a Python frame."""

    id: Any
    requirements: Requirements | SchemaError
    session: str | None
    record: str | None


class PlaceAnswer:
    """A place answer, `{"records": [...]}`, its records the trace lines a placement wrote
    (`lines`, readable in the answer's form already): a shell frames them into its response as they
    are, never decoded, in one copy (`framed`), or takes them as one JSON array (`records_json`,
    made once)."""
    __slots__ = ("lines", "_records_json", "table")

    def __init__(self, lines: bytes, table: tuple[int, int] | None = None):
        self.lines = lines
        self._records_json: bytes | None = None
        #: (snapshot seq, record seq) of the fleet snapshot's table a record of the answer carried,
        #: when the answer was made in a slice that says so (`Operations.fleet_token`)
        self.table = table

    @property
    def records_json(self) -> bytes:
        """The records as one JSON array."""
        if self._records_json is None:
            self._records_json = records_array(self.lines)
        return self._records_json

    def framed(self, prefix: bytes, suffix: bytes) -> bytes:
        """`prefix` + the records as one JSON array + `suffix`, in one copy."""
        return records_array(self.lines, prefix, suffix)


class _Turns:
    """How a batch's placements are spread over turns of the event loop: `fits()` is how many tasks
    fit in what is left of the current turn, by the time a task took in the piece placed last
    (`measured`); `check()` gives the loop a turn once the current one is spent. With `seconds`
    None the whole batch is one turn: a run is one piece, and the loop is never given a turn."""

    __slots__ = ("seconds", "started", "piece_started", "per_task")
    #: tasks in the first piece of a batch, before one is measured
    FIRST_PIECE = 8

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.started = self.piece_started = time.perf_counter()
        self.per_task: float | None = None

    async def check(self) -> None:
        if self.seconds is not None and time.perf_counter() - self.started >= self.seconds:
            await asyncio.sleep(0)
            self.started = time.perf_counter()

    def fits(self) -> int:
        if self.seconds is None:
            return MAX_PIECE
        self.piece_started = now = time.perf_counter()
        if self.per_task is None:
            return self.FIRST_PIECE
        return max(1, int((self.seconds - (now - self.started)) / self.per_task))

    def measured(self, tasks: int) -> None:
        if self.seconds is not None and tasks:
            # never 0 (a clock that did not move), which would make every later piece the whole run
            self.per_task = max((time.perf_counter() - self.piece_started) / tasks, 1e-7)


#: A run's tasks placed in one piece when the batch is not spread over turns: all of them.
MAX_PIECE = 1 << 62


class Operations:
    """The operations over one ServiceState. Each takes a request body as `parse_json` decodes it
    (so a place request's requirements are not checked against the document rule again)."""

    def __init__(self, state: ServiceState, *, stream: bool = False, turn: float | None = None,
                 counted: bool = True):
        self.state = state
        #: whether placements are counted in the service's metrics: an HTTP service serves them at
        #: /metrics; a stdio service has nothing that could read them, and does not count them
        self.counted = counted
        #: with a number: a batch of placements runs in steps of about this many seconds, with a
        #: turn of the event loop between them (HTTP, whose loop answers other requests meanwhile);
        #: None places a batch in one synchronous step (stdio, whose loop serves nothing else, and
        #: whose synchronous shell runs operations without a loop)
        self.turn = turn
        #: the slice of every `compact-stream` answer of a shell whose answers all go to one reader,
        #: in order (stdio), which may then be sent each fleet snapshot once; None: each response is
        #: a slice of its own (HTTP: a batch's answers, `place_batch`'s `stream`)
        self.stream = Slice() if stream else None
        self._forms_text = " or ".join(f'"{f}"' for f in RECORD_FORMS)
        #: requirements texts -> prepared Requirements, shared by every request of this service
        self.prepared = PreparedRequirements()
        #: this service's own part of every fleet token it hands out: a token of another process
        #: (a restarted service, whose trace may have begun again at seq 1) is never taken for one
        self.issuer = secrets.token_hex(8)
        #: record seq -> the snapshot whose table that record carried, for each token handed out
        self._tokens: dict[int, int] = {}

    def prepared_place(self, request: PlaceRequest) -> PreparedPlace | None:
        """A typed place request with its requirements looked up by their text (parsed on a miss);
        None when the text is not JSON msgspec decodes (its Raw member was only skipped over), for
        the general path to name what is wrong and where in the whole text."""
        try:
            requirements: Requirements | SchemaError = self.prepared.get(bytes(request.requirements))
        except SchemaError as exc:
            requirements = exc
        except msgspec.DecodeError:
            return None
        return PreparedPlace(request.id, requirements, request.session, request.record)

    # -- agents -----------------------------------------------------------------------------------
    async def put_agent(self, body: dict, declaration_at: str = "$.declaration",
                        name_is: str = "the request's name") -> dict:
        """Add or replace one agent. A problem's path is where it is in the request: in its
        `declaration` (stdio), or from the top of the body that is the declaration (HTTP, whose
        name is the path's: `declaration_at="$"`, `name_is="the name in the path"`)."""
        name = _require(body, "name", str, "the agent's name")
        doc = _require(body, "declaration", dict, "a declaration (§3)")
        try:
            decl = _declaration(doc)
            if decl.agent.name != name:
                raise ServiceError(422, [problem("$.agent.name", f"{name!r}, {name_is}", repr(decl.agent.name))])
            async with self.state.applying:
                created = self.state.fleet.get(name) is None
                self._put([decl])
        except ServiceError as exc:
            if declaration_at != "$":
                for found in exc.problems:
                    found["path"] = declaration_at + found["path"][1:]
            raise
        await self.state.durable()
        return {"name": name, "created": created}

    async def put_agents(self, body: dict, lines: list[int] | None = None,
                         problems: list[dict] | None = None) -> dict:
        """All or none. `lines` numbers the declarations (JSON Lines over HTTP; else 1, 2, ...);
        `problems` already found in the same body (lines that are not JSON) are reported together."""
        return await self.apply_agents(self.prepare_agents(body, lines, problems), lines)

    @staticmethod
    def prepare_agents(body: dict, lines: list[int] | None = None, problems: list[dict] | None = None) -> list:
        """The declarations of a bulk add, parsed and checked, or ServiceError naming every bad one.
        Touches no state, so HTTP runs it on a worker thread for a large body."""
        docs = _require(body, "declarations", list, "a list of declarations (§3)")
        lines = lines or list(range(1, len(docs) + 1))
        decls, problems = [], list(problems or [])
        for line, doc in zip(lines, docs):
            try:
                decls.append(parse_declaration(doc))
            except SchemaError as exc:
                problems.extend(library_problems(exc, line=line))
        if problems:
            problems.sort(key=lambda p: p.get("line", 0))
            raise ServiceError(400, problems)
        return decls

    async def apply_agents(self, decls: list, lines: list[int] | None = None) -> dict:
        """Add prepared declarations in one step (all or none), then wait for durability. `lines`:
        the line of each declaration in its body (else 1, 2, ...), which a 409 names."""
        async with self.state.applying:
            self._put(decls, lines or range(1, len(decls) + 1))
        await self.state.durable()
        return {"count": len(decls)}

    def _put(self, decls, lines: Sequence[int] | None = None) -> None:
        """Add declarations; 409 for a name another namespace holds, each problem with the `line` of
        its declaration in a bulk add (`lines`: the line each declaration is on)."""
        if not decls:
            return
        try:
            self.state.put_agents(decls)
        except FleetConflict as exc:
            raise ServiceError(409, [problem(p.path, p.expected, p.found,
                                             **({"line": lines[position - 1]} if lines is not None else {}))
                                     for p, position in zip(exc.problems, exc.positions)]) from None
        self._changed()

    async def get_agent(self, body: dict) -> dict:
        name = _require(body, "name", str, "the agent's name")
        decl = self.state.fleet.get(name)
        if decl is None:
            raise ServiceError(404, [problem("$.name", "an agent of the fleet", repr(name))])
        await self.state.durable()   # never show what a crash could still take back
        return {"declaration": decl.doc}

    async def delete_agent(self, body: dict) -> dict:
        name = _require(body, "name", str, "the agent's name")
        async with self.state.applying:
            try:
                self.state.delete_agent(name)
            except FleetError:
                raise ServiceError(404, [problem("$.name", "an agent of the fleet", repr(name))]) from None
            self._changed()
        await self.state.durable()
        return {"name": name, "deleted": True}

    async def list_agents(self, body: dict) -> dict:
        after = _optional(body, "after", str, "an agent name")
        limit = _optional(body, "limit", int, f"an integer from 1 to {MAX_PAGE}")
        if limit is None:
            limit = 1000
        if not 1 <= limit <= MAX_PAGE:
            raise ServiceError(400, [problem("$.limit", f"an integer from 1 to {MAX_PAGE}", str(limit))])
        names = sorted(self.state.fleet.names())
        start = 0
        if after is not None:
            import bisect

            start = bisect.bisect_right(names, after)
        page = names[start:start + limit]
        more = start + limit < len(names)
        await self.state.durable()
        return {"names": page, "next": page[-1] if more and page else None}

    # -- placing ----------------------------------------------------------------------------------
    async def place(self, body: dict | PreparedPlace, holds: dict[int, int] | None = None) -> PlaceAnswer:
        """One place request answered. `holds`: given, the snapshots the reader holds already
        (`holding`; {} for none), and its answer notes the table it carries (`PlaceAnswer.table`)."""
        parsed, session, route, form = self._place_request(body)
        async with self.state.applying:      # after a batch under way, never inside it
            lines, reference = self._placed(parsed, session, route, form != "spec")
        await self.state.durable()
        return self._place_answer(lines, form, reference, None, holds)

    def fleet_token(self, table: tuple[int, int]) -> str:
        """The token of an answer whose record `table[1]` carried the table of snapshot `table[0]`:
        a reader that holds that answer names it (`holding`) and is sent references to the record
        instead of the table. The record's seq, and this process's `issuer`."""
        snapshot, record = table
        if len(self._tokens) >= TOKENS_KEPT and record not in self._tokens:
            del self._tokens[next(iter(self._tokens))]
        self._tokens[record] = snapshot
        return f"{record}-{self.issuer}"

    def holding(self, token: str) -> dict[int, int] | None:
        """What a reader holds by a fleet token: {snapshot seq: record seq}, or None for a token
        this process did not hand out (another process's, or one forgotten since), whose reader
        is then sent the table again. ServiceError (400 at `$.fleet`) for text that is no token."""
        parts = _TOKEN.fullmatch(token)
        if parts is None:
            raise ServiceError(400, [problem("$.fleet", TOKEN_TEXT, repr(token[:60]))])
        if parts.group(2) != self.issuer:
            return None
        record = int(parts.group(1))
        snapshot = self._tokens.get(record)
        return {snapshot: record} if snapshot is not None else None

    async def place_batch(self, bodies: list[Any], stream: Slice | None = None,
                          holds: dict[int, int] | None = None) -> list[PlaceAnswer | Exception]:
        """Consecutive `place` requests (an Exception in place of a request its shell could not
        read: refused with it, in its turn), answered exactly as one at a time (the same placements,
        records and trace), placed through the fleet's batch path in runs: a run ends before a task
        with a route (placed alone) and before a second task of one session (its affinity depends
        on the session the earlier one holds). A request that is refused changes nothing, so it
        does not end a run. Returns, per request, its result or the exception that refuses it.
        `stream`: the slice the batch's `compact-stream` answers join, in order (an HTTP
        response's own), else the shell's (`self.stream`); `holds`, as `place` takes it, for each
        `compact` answer.

        The batch holds the state's `applying` lock until its last placement is made, so its
        records take consecutive seqs and no other change lands among them. With `turn`, a run is
        placed in pieces sized to end within the turn, and the loop gets a turn once one is spent."""
        results: list[PlaceAnswer | Exception | None] = [None] * len(bodies)
        placed: list[tuple[int, bytes, str, int | None]] = []
        turns = _Turns(self.turn)
        async with self.state.applying:
            await self._place_runs(bodies, results, placed, turns)
        if placed:
            try:
                await self.state.durable()
            except Exception as exc:
                for i, _, _, _ in placed:
                    results[i] = exc
                placed = []
        answer = self._place_answer
        timed = turns.seconds is not None      # else `check` never gives a turn: not awaited
        for i, lines, form, reference in placed:
            if timed:
                await turns.check()      # a thousand answers of many records take a while too
            try:
                result = results[i] = answer(lines, form, reference, stream, holds)
                if timed:
                    # an HTTP batch sends arrays: each made here, between turns, not all at once after
                    result.records_json
            except Exception as exc:
                results[i] = exc
        return results  # type: ignore[return-value]

    async def _place_runs(self, bodies: list[Any], results: list[Any], placed: list[tuple[int, bytes, str, int | None]],
                          turns: _Turns) -> None:
        """`place_batch`'s placements, made while it holds the lock: each request's result or
        refusal into `results`, and (index, record lines, form, the snapshot its lines plainly refer to
        or None: `ServiceState.place_many`) of each one placed into `placed`."""
        run: list[tuple[int, Any, str | None, str]] = []
        sessions: set[str] = set()
        state = self.state
        counted = self.counted
        timed = turns.seconds is not None      # else `check` never gives a turn: not awaited

        def place_piece(piece: list[tuple[int, Any, str | None, str]]) -> None:
            # the piece's columns, transposed by one call rather than a comprehension each
            at, tasks, task_sessions, forms = zip(*piece)
            try:
                answers = state.place_many(tasks, task_sessions, list(map("spec".__ne__, forms)))
            except Exception as exc:       # nothing was placed: each is refused alike
                answers = [exc] * len(piece)
            made: list[Any] | None = [] if counted else None
            for i, form, answer in zip(at, forms, answers):
                if type(answer) is tuple:
                    if made is not None:
                        made.append(answer[0])
                    placed.append((i, answer[1], form, answer[2]))
                else:
                    results[i] = answer
            if made is not None:
                metrics.count_placements(made)
            state.maybe_checkpoint()

        async def place_run() -> None:
            # a run placed in pieces is placed as it is whole: the fleet's batch path gives the
            # placements of one at a time, in order, for any consecutive tasks without a repeated
            # session, and nothing else changes the state between the pieces (the lock)
            start = 0
            while start < len(run):
                await turns.check()
                piece = run[start:start + turns.fits()]
                place_piece(piece)
                turns.measured(len(piece))
                start += len(piece)
            run.clear()
            sessions.clear()

        read = self._place_request
        for i, body in enumerate(bodies):
            try:
                if timed:
                    await turns.check()  # reading a request can take a while too (the general way)
                if isinstance(body, Exception):      # a request its shell could not read
                    raise body
                if state.failed is not None:
                    raise JournalFailed(state.failed)
                parsed, session, route, form = read(body)
                if route is not None:
                    await place_run()
                    lines, reference = self._placed(parsed, session, route, form != "spec")
                    placed.append((i, lines, form, reference))
                    continue
                chosen = session if session is not None else parsed.session
                if chosen is not None:
                    if chosen in sessions:
                        await place_run()
                    sessions.add(chosen)
                run.append((i, parsed, session, form))
            except Exception as exc:
                results[i] = exc
        await place_run()

    def _place_request(self, body: Any) -> tuple[Any, str | None, Route | None, str]:
        """A place request's fields, checked, with its requirements parsed (ServiceError if not)."""
        if type(body) is PreparedPlace:         # its fields' types were checked as it was decoded
            # checked in the general way's order (session, record, then the requirements): which
            # way reads a request (its length, its id's nesting) never changes its answer
            session = _text(body.session, "session", "a session id")
            form = "spec" if body.record is None else body.record      # "" is no form
            if form not in RECORD_FORMS:
                raise ServiceError(400, [problem("$.record", self._forms_text, repr(form))])
            requirements = body.requirements
            if isinstance(requirements, SchemaError):
                raise _requirements_refused(requirements) from None
            return requirements, session, None, form
        requirements = _require(body, "requirements", dict, "a requirements document (§4)")
        session = _text(_optional(body, "session", str, "a session id"), "session", "a session id")
        route = self._route(body)
        record = _optional(body, "record", str, self._forms_text)
        record = "spec" if record is None else record
        if record not in RECORD_FORMS:
            raise ServiceError(400, [problem("$.record", self._forms_text, repr(record))])
        try:
            return parse_requirements(requirements, decoded=True), session, route, record
        except SchemaError as exc:
            raise _requirements_refused(exc) from None

    def _placed(self, parsed, session: str | None, route: Route | None, compact: bool) -> tuple[bytes, int | None]:
        """A task placed alone: its record lines and the snapshot they plainly refer to, or None
        (`ServiceState.place`)."""
        try:
            p, lines, reference = self.state.place(parsed, session=session, route=route, compact=compact)
        except SchemaError as exc:     # the requirements parsed: the ones its route makes of them did not
            raise _route_refused(exc) from None
        except RouteError as exc:
            raise ServiceError(422, [problem("$.route", "a route that only adds requirements", str(exc))]) from None
        self._counted(p)
        return lines, reference

    def _counted(self, p) -> None:
        if self.counted:
            metrics.count_placement(p)
        self.state.maybe_checkpoint()

    def _place_answer(self, lines: bytes, form: str, reference: int | None = None,
                      stream: Slice | None = None, holds: dict[int, int] | None = None) -> "PlaceAnswer":
        """The answer of a placement's record `lines` in `form`. `reference`: the fleet snapshot the
        records' own compact members refer to by its seq, when the encoder wrote them so (None: not
        known); a stream that carries that snapshot as itself takes such lines as they are, which
        its slice would find only by reading them. A `compact-stream` answer joins `stream`, else
        the shell's; with neither it stands alone, as a `compact` one does. With `holds` (HTTP) a
        standalone answer is a slice of its own that starts out holding what the reader holds, and
        the answer notes the table it carried (`PlaceAnswer.table`)."""
        if form == STREAM:
            stream = stream if stream is not None else self.stream
            if stream is None and holds is not None:
                stream = Slice(holds)
        else:
            stream = Slice(holds) if holds is not None and form != "spec" else None
        if form == "spec" or stream is not None and reference is not None and stream.carried.get(reference) == reference:
            return PlaceAnswer(lines)
        if stream is None:
            return PlaceAnswer(readable_answer(self.state, lines, None, reference))
        before = stream.last_table
        readable = readable_answer(self.state, lines, stream, reference)
        return PlaceAnswer(readable, stream.last_table if stream.last_table is not before else None)

    @staticmethod
    def _route(body: dict):
        route = _optional(body, "route", dict, 'a route {"name", "adds"}')
        if route is None:
            return None
        name = route.get("name")
        adds = route.get("adds", {})
        if not isinstance(name, str) or not name:
            raise ServiceError(400, [problem("$.route.name", "a non-empty string", _describe(name))])
        _text(name, "route.name", "a route name")     # written into the trace, as a session is
        if not isinstance(adds, dict):
            raise ServiceError(400, [problem("$.route.adds", "an object shaped like requirements", _describe(adds))])
        return Route(name, adds)

    # -- history the scorer reads -----------------------------------------------------------------
    async def outcome(self, body: dict) -> dict:
        agent = _require(body, "agent", str, "an agent name")
        success = _require(body, "success", bool, "true or false")
        kind = _text(_optional(body, "kind", str, "a task kind"), "kind", "a task kind")
        # requirements given are checked whether or not a kind is: a wrong member changes nothing
        requirements = _optional(body, "requirements", dict, "requirements (§4), whose kind is counted")
        if requirements is not None:
            try:
                derived = task_kind(parse_requirements(requirements))
            except SchemaError as exc:
                raise _requirements_refused(exc) from None
            kind = kind if kind is not None else derived
        elif kind is None:
            raise ServiceError(400, [problem("$.kind", 'a task kind, or "requirements"', "neither")])
        async with self.state.applying:
            if agent not in self.state.fleet:
                raise ServiceError(404, [problem("$.agent", "an agent of the fleet", repr(agent))])
            try:
                self.state.record_outcome(agent, kind, success)
            except FleetError as exc:   # the agent's count for the kind is at MAX_OUTCOMES (design.md, Reading 26)
                raise ServiceError(409, [problem("$.success", f"at most {MAX_OUTCOMES} outcomes for one agent "
                                                 "and task kind", str(exc))]) from None
            self._changed()
            # read before the wait: requests that arrived with this one may change the counts meanwhile
            successes, attempts = self.state.fleet.outcomes(agent, kind)
        await self.state.durable()
        return {"agent": agent, "kind": kind, "successes": successes, "attempts": attempts}

    async def hold_session(self, body: dict) -> dict:
        return await self._session(body, hold=True)

    async def release_session(self, body: dict) -> dict:
        return await self._session(body, hold=False)

    async def _session(self, body: dict, hold: bool) -> dict:
        agent = _require(body, "agent", str, "an agent name")
        session = _text(_require(body, "session", str, "a session id"), "session", "a non-empty session id")
        async with self.state.applying:
            try:
                (self.state.hold_session if hold else self.state.release_session)(agent, session)
            except FleetError:
                raise ServiceError(404, [problem("$.agent", "an agent of the fleet", repr(agent))]) from None
            self._changed()
        await self.state.durable()
        return {"agent": agent, "session": session, "held": hold}

    # -- the trace --------------------------------------------------------------------------------
    async def trace(self, body: dict) -> dict:
        """The trace records after `since` (stdio; HTTP streams the same lines)."""
        since = _optional(body, "since", int, SINCE_EXPECTED)
        since = 0 if since is None else since_seq(since, str(since))
        limit = _optional(body, "limit", int, f"an integer from 1 to {MAX_TRACE_RECORDS}")
        if limit is None:
            limit = MAX_TRACE_RECORDS
        if not 1 <= limit <= MAX_TRACE_RECORDS:
            raise ServiceError(400, [problem("$.limit", f"an integer from 1 to {MAX_TRACE_RECORDS}", str(limit))])
        # the trace as it is now, read once it is durable: records that requests arriving with this
        # one add meanwhile are not this answer's (never past what is written, whatever came first)
        end = self.state.trace_appended
        await self.state.durable()
        from .slices import readable_since

        chunks, lines = [], 0
        for chunk in readable_since(self.state, since, min(end, self.state.trace_size)):
            chunks.append(chunk)
            lines += chunk.count(b"\n")
            if lines > limit:        # the chunks read hold `limit` whole records: read no further
                break
        records = b"".join(chunks).splitlines()[:limit]
        return {"records": orjson.Fragment(b"[" + b",".join(records) + b"]")}

    async def verify(self, body: dict) -> dict:
        """§7 over a posted trace: the `a3fast verify --json` object."""
        if isinstance(body, dict) and "trace" in body:
            text = _require(body, "trace", str, "a trace as JSON Lines text")
            data = text.encode()
        else:
            records = _require(body, "records", list, "a list of trace records")
            data = orjson.dumps(records) if records else b""
        return verify_text(data)

    def _changed(self) -> None:
        self.state.maybe_checkpoint()


def verify_text(data: bytes) -> dict:
    """§7 over a trace's text (JSON Lines or a JSON array): the `a3fast verify --json` object, or
    400 when it holds no record at all, as `a3fast verify` refuses it (exit 2) rather than calling
    an empty trace valid. Touches no state: HTTP runs it on a worker thread."""
    import io

    findings, records = verify_stream_counted(io.BytesIO(data))
    if records == 0:
        found = ("no records (the input is empty)" if not findings
                 else f"no records: not a trace of {{seq, kind, content}} records ({findings[0]})")
        raise ServiceError(400, [problem("$", "a trace of {seq, kind, content} records", found)])
    return verify_result("request", findings)


def verify_result(path: str, findings) -> dict:
    return {"path": path, "valid": is_valid(findings),
            "errors": [f.to_dict() for f in findings if f.is_error],
            "warnings": [f.to_dict() for f in findings if not f.is_error]}


class _Framing(Protocol):
    def __call__(self, data: bytes, prefix: bytes = ..., suffix: bytes = ...) -> bytes: ...


#: JSON Lines (bytes) as one JSON array, without decoding the records, optionally framed by a
#: prefix and a suffix: `_ingest.lines_array`, one copy where the extension is built
records_array: _Framing = ingest_module(ENGINE).lines_array


#: stdio op name -> Operations method
OPS: dict[str, str] = {
    "put_agent": "put_agent", "get_agent": "get_agent", "delete_agent": "delete_agent",
    "put_agents": "put_agents", "list_agents": "list_agents", "place": "place", "outcome": "outcome",
    "hold_session": "hold_session", "release_session": "release_session", "trace": "trace",
    "verify": "verify",
}
