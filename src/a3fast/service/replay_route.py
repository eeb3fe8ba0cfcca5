"""POST /v1/replay: the tasks of a trace placed again on the served fleet (or a posted one), and
which decisions would change and why — `a3fast replay` over HTTP.

The body is `{"trace": [records]}` or `{"since": N, "until": M}` (a range of the service's own
trace), with optional `fleet` (the proposed fleet's declarations; default: a copy of the served
fleet, outcomes and sessions included), `weights`, `route`, `offer_new`, `fail_on`, `show` and
`compare`. The served fleet is the baseline (`compare: "baseline"`, the default): every task is placed
on a copy of it and on the proposed fleet, and only decisions that differ are changes;
`compare: "recorded"` compares the proposed fleet's decisions with the recorded ones. The replay runs on a worker thread
(the event loop keeps answering), on a copy of the fleet (the served fleet is never changed), and is
bounded: the body by --max-body, the work by REPLAY_TIMEOUT_S and REPLAY_MAX_PLACEMENTS (503 and
413 beyond them, with nothing half-answered).
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import orjson
from starlette.requests import Request
from starlette.responses import Response

from ..schema import is_text
from ..errors import SchemaError, describe
from ..fleet.placement import Route, RouteError
from ..replay.verdict import RouteReplayError
from ..replay import ReplayError, ReplaySummary, copy_fleet, parse_thresholds, parse_weights, run_replay
from ..schema import parse_declaration
from .problems import MAX_SEQ, SINCE_EXPECTED, ServiceError, from_library, parse_json, problem

__all__ = ["replay_endpoint", "REPLAY_TIMEOUT_S", "REPLAY_MAX_PLACEMENTS", "SHOW_MAX"]

#: Longest a replay may run before the request is answered 503 (the work stops there).
REPLAY_TIMEOUT_S = 60.0
#: Most placements one request may replay (a `since` range of a long trace is bounded by this).
REPLAY_MAX_PLACEMENTS = 1_000_000
#: Most changed placements one answer lists in detail (all are counted).
SHOW_MAX = 1_000
_FIELDS = ("trace", "since", "until", "fleet", "weights", "route", "fail_on", "show", "compare", "offer_new")
#: What a replay compares the proposed fleet's decisions with.
COMPARE = ("baseline", "recorded")


class _Stopped(Exception):
    def __init__(self, status: int, found: str, expected: str):
        super().__init__(found)
        self.status, self.found, self.expected = status, found, expected


def replay_endpoint(state: Any) -> Callable[[Request, bytes], Any]:
    """The handler of POST /v1/replay for a service `state`: `(request, body)`, the body read by the
    route table within its limit (service/app.py)."""

    async def endpoint(request: Request, data: bytes) -> Response:
        try:
            body = await asyncio.to_thread(_parse, data)
            request_fields = _fields(body)
            source = request_fields.pop("source")
            if source is None:      # a range of the service's own trace, as far as it is durable
                await state.durable()
                end = state.trace_size
                since = request_fields["since"]
                from .slices import readable_since

                # a slice whose compact records carry the fleet snapshots they name, so that a
                # changed placement's recorded funnel can be read however late the range starts
                # (made here, on the event loop, which owns the encoder whose snapshot it asks for;
                # the chunks themselves are read on the worker thread)
                source = _Range(readable_since(state, since, end))
            loop = asyncio.get_running_loop()
            answer = await loop.run_in_executor(None, _run, state, source, request_fields)
        except ServiceError as exc:
            return Response(orjson.dumps({"problems": exc.problems}), status_code=exc.status,
                            media_type="application/json")
        return Response(answer, media_type="application/json")

    return endpoint


class _Range:
    """The chunks of a range of the service's trace (an iterator, read on the worker thread)."""

    def __init__(self, chunks: Any):
        self.chunks = chunks


def _parse(data: bytes) -> Any:
    try:
        return parse_json(data)
    except SchemaError as exc:
        raise from_library(exc) from None


def _fields(body: Any) -> dict[str, Any]:
    """The request's fields checked for shape; every problem named by its path."""
    if not isinstance(body, dict):
        raise ServiceError(400, [problem("$", "an object {trace | since, fleet?, weights?, route?, fail_on?, show?}",
                                         type(body).__name__)])
    problems = [problem(f"$.{k}", f"one of {', '.join(_FIELDS)}", repr(k)) for k in body if k not in _FIELDS]
    trace = body.get("trace")
    if trace is not None and not isinstance(trace, list):
        problems.append(problem("$.trace", "an array of trace records {seq, kind, content}", type(trace).__name__))
    if trace is not None and ("since" in body or "until" in body):
        problems.append(problem("$.since", "either a posted trace or a range of the service's trace", "both"))
    for key in ("since", "until"):      # seqs, as a trace's `since` is (`problems.since_seq`)
        value = body.get(key)
        if value is not None and (type(value) is not int or not 0 <= value <= MAX_SEQ):
            problems.append(problem(f"$.{key}", SINCE_EXPECTED, repr(value)[:40]))
    show = body.get("show")
    if show is not None and (type(show) is not int or show < 0):
        problems.append(problem("$.show", "a non-negative integer", repr(show)[:40]))
    compare = body.get("compare")
    if compare is not None and compare not in COMPARE:
        problems.append(problem("$.compare", f"one of {', '.join(COMPARE)}", repr(compare)[:40]))
    offer_new = body.get("offer_new")
    if offer_new is not None and not isinstance(offer_new, bool):
        problems.append(problem("$.offer_new", "true or false", repr(offer_new)[:40]))
    fleet = body.get("fleet")
    if fleet is not None and not isinstance(fleet, list):
        problems.append(problem("$.fleet", "an array of declarations", type(fleet).__name__))
    thresholds = []
    if body.get("fail_on") is not None:
        if not isinstance(body["fail_on"], str):
            problems.append(problem("$.fail_on", "rules like 'moved>1%,unschedulable>0'", repr(body["fail_on"])[:40]))
        else:
            try:
                thresholds = parse_thresholds(body["fail_on"])
            except ValueError as exc:
                problems.append(problem("$.fail_on", "rules like 'moved>1%,unschedulable>0'", str(exc)))
    weights = body.get("weights")
    if weights is not None:
        try:
            parse_weights(weights, (0.0, 0.0, 0.0, 0.0))
        except ValueError as exc:
            problems.append(problem("$.weights", "four numbers, or an object of components", str(exc)))
    route = None
    route_refused = None      # a route that adds nothing: 422, as a place request's (the errors table)
    if body.get("route") is not None:
        raw = body["route"]
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            problems.append(problem("$.route", 'a route {"name", "adds"}', repr(raw)[:80]))
        else:
            adds = raw.get("adds")
            if not is_text(raw["name"]):      # written into the trace: held as a place request's is
                problems.append(problem("$.route.name", "a route name (a non-empty string of at most 1,024 "
                                        "characters, no control characters)", describe(raw["name"])))
            elif adds is not None and not isinstance(adds, dict):
                problems.append(problem("$.route.adds", "an object shaped like requirements", describe(adds)))
            else:
                try:
                    route = Route(raw["name"], adds or {})
                except RouteError as exc:
                    route_refused = problem("$.route", 'a route {"name", "adds"} that adds something', str(exc))
    show, since, until = body.get("show"), body.get("since"), body.get("until")
    if type(show) is int and show > SHOW_MAX:
        problems.append(problem("$.show", f"at most {SHOW_MAX:,} changes to show", repr(show)[:40]))
    if type(since) is int and type(until) is int and until < since:
        problems.append(problem("$.until", f"a seq at or after since ({since})", repr(until)[:40]))
    if problems:
        raise ServiceError(400, problems)
    if route_refused is not None:
        raise ServiceError(422, [route_refused])
    return {"source": trace, "since": body.get("since") or 0, "until": body.get("until"), "fleet": fleet,
            "weights": weights, "route": route, "thresholds": thresholds,
            "compare": compare or "baseline", "offer_new": bool(offer_new),
            "show": min(SHOW_MAX, 10 if show is None else show)}


def _new_fleet(state: Any, declarations: list | None) -> Any:
    """A fleet to replay on: the posted declarations (on the served fleet's engine), or a copy of
    the served fleet (a sharded fleet cannot be copied: 501)."""
    from ..fleet import Fleet

    served = state.fleet
    if declarations is None:
        # a replay decides on one process's fleet (`Fleet.scored`), copied through its snapshot;
        # a sharded fleet's snapshot is its shards' own, so it is not copied here
        if not isinstance(served, Fleet):
            raise ServiceError(501, [problem("$.fleet", "declarations to replay on (the served fleet is sharded "
                                                        "and has no snapshot to copy)", "none")])
        return copy_fleet(served)
    problems = []
    parsed = []
    for i, doc in enumerate(declarations):
        try:
            parsed.append(parse_declaration(doc))
        except SchemaError as exc:
            problems += [problem(f"$.fleet[{i}]{p.path[1:]}", p.expected, p.found) for p in exc.problems]
    if problems:
        raise ServiceError(400, problems)
    fleet = Fleet(engine=getattr(served, "engine", None))
    try:
        fleet.extend(parsed)
    except Exception as exc:   # FleetError: a name held by two namespaces
        raise ServiceError(409, [problem("$.fleet", "one scheduling domain", str(exc))]) from None
    return fleet


def _run(state: Any, source: Any, fields: dict[str, Any]) -> bytes:
    """The replay itself, on a worker thread: the answer's JSON bytes."""
    started = time.monotonic()
    fleet = _new_fleet(state, fields["fleet"])
    baseline = None
    if fields["compare"] == "baseline":
        from ..fleet import Fleet

        if not isinstance(state.fleet, Fleet):
            raise ServiceError(501, [problem("$.compare", '"recorded" with the declarations to replay on (the served '
                                                          "fleet is sharded and has no snapshot to copy as the "
                                                          "baseline)", "baseline")])
        baseline = _new_fleet(state, None)
    records = source.chunks if isinstance(source, _Range) else source

    def check(summary: ReplaySummary) -> None:
        if summary.placements >= REPLAY_MAX_PLACEMENTS:
            raise _Stopped(413, f"more than {REPLAY_MAX_PLACEMENTS:,} placements",
                           f"at most {REPLAY_MAX_PLACEMENTS:,} placements per request (narrow since/until)")
        if time.monotonic() - started > REPLAY_TIMEOUT_S:
            raise _Stopped(503, f"still replaying after {REPLAY_TIMEOUT_S:g} s "
                                f"({summary.placements:,} placements done)",
                           f"a replay that finishes within {REPLAY_TIMEOUT_S:g} s (narrow since/until)")

    try:
        summary, kept = run_replay(records, fleet, keep=fields["show"], until=fields["until"], check=check,
                                   weights=fields["weights"], route=fields["route"], copy=False,
                                   baseline=baseline, offer_new=fields["offer_new"])
    except RouteReplayError as exc:     # the route's fault: it would change what a task asks
        raise ServiceError(422, [problem("$.route", "a route that only adds to each replayed task's requirements",
                                         str(exc))]) from None
    except ReplayError as exc:
        raise ServiceError(422, [problem("$.trace" if not isinstance(source, _Range) else "$.since",
                                         "a trace whose placements can be replayed", str(exc))]) from None
    except SchemaError as exc:    # what a route's additions make of a task: not valid requirements
        raise ServiceError(400, [problem("$.route.adds", p.expected, f"{p.found} (at {p.path} of the requirements "
                                         "the route makes of a task)") for p in exc.problems]) from None
    except ValueError as exc:
        raise ServiceError(400, [problem("$.weights", "four numbers, or an object of components", str(exc))]) from None
    except _Stopped as exc:
        raise ServiceError(exc.status, [problem("$", exc.expected, exc.found)]) from None
    thresholds = fields["thresholds"]
    return orjson.dumps({
        "summary": summary.to_dict(),
        "thresholds": [{"rule": str(t), "measured": t.measured(summary), "exceeded": t.exceeded(summary)}
                       for t in thresholds],
        "passed": not any(t.exceeded(summary) for t in thresholds),
        "changes": [verdict.to_dict() for verdict in kept],
        "seconds": round(time.monotonic() - started, 6),
    })
