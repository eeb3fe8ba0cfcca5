"""Writing the records of a placement (§6): the task.bound scheduling object, task.rejected content,
and the trace records of one placement, as dicts and as JSON bytes.

`scheduling_object` is the shape of a full §6 scheduling object, member order included; every
writer of it in dict form goes through it (this module, the compact decoder, the benchmark's
baselines), and the engines' bytes writers follow the same order (tests hold them to it)."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterable, Iterator, Mapping

import orjson

__all__ = ["SESSION_MEMBER", "SESSION_HELD_MEMBER", "tail_members", "tail_json", "scheduling_object", "scheduling_dict", "scheduling_json", "rejection_dict",
           "reason_derived", "rejection_json", "rejection_content", "timings", "placement_records", "submitted_json", "admitted_json",
           "reason_text", "reason_of", "reason_among"]

_second_text: list = [None, ""]  # the last whole second formatted, since placements come many a second


def _iso(ns: int) -> str:
    """RFC 3339 UTC with microseconds."""
    second = ns // 1_000_000_000
    if _second_text[0] != second:
        moment = datetime.fromtimestamp(second, tz=timezone.utc)
        _second_text[:] = [second, moment.strftime("%Y-%m-%dT%H:%M:%S")]
    return f"{_second_text[1]}.{(ns // 1000) % 1_000_000:06d}Z"


def timings(p) -> dict[str, Any]:
    """gather_ms, select_ms and decided_at where measured (docs/design.md, reading 9); launch_ms and
    requests are omitted, never zero: a3fast does not launch agents and lists no API server."""
    out: dict[str, Any] = {}
    gather, select = p.gather_ns, p.select_ns      # each read once: a Placement computes them
    if gather is not None:
        out["gather_ms"] = gather / 1e6
    if select is not None:
        out["select_ms"] = select / 1e6
    out["decided_at"] = _iso(p.decided_at_ns)
    return out


def _score_map(p) -> dict[str, dict[str, Any]]:
    if p.custom_scores:
        index = p.index
        return {index.name(aid): entry for aid, entry in zip(p.scores.ids, p.scores.entries)}
    return p.index.score_map(p.scores)


#: The member that records a placement's session when it was given beside the requirements
#: (`Fleet.place(session=)`, the service body's `session`, `place --session`): docs/design.md,
#: reading 25. §7 reads no such member; a replay reads it to reproduce the session's affinity.
SESSION_MEMBER = "a3fast.session"
#: The member that says a placement did not make its agent hold its session (`false`): one placed
#: with `remember_session=False`, such as a Kubernetes filter's answer, which asks and holds
#: nothing. A rejection carries it too, so that a replay which binds the task where the trace
#: rejected it holds nothing either (docs/design.md, reading 25).
SESSION_HELD_MEMBER = "a3fast.session_held"


def tail_members(p) -> dict[str, Any]:
    """The members of a placement record after its lists: `route`, the session given beside the
    requirements, and `timings` (every writer of either form writes these)."""
    tail: dict[str, Any] = {}
    if p.route is not None:
        tail["route"] = p.route
    session = p.session
    if session is not None and session != p.requirements.session:
        tail[SESSION_MEMBER] = session
    if session is not None and p.session_held is False:
        tail[SESSION_HELD_MEMBER] = False
    tail["timings"] = timings(p)
    return tail


_tail = tail_members


def tail_json(p) -> bytes:
    """`tail_members(p)` as orjson writes it; the usual placement's (no route, no session, both
    phases measured) written without building the dicts."""
    if p.route is None and p.session is None:
        gather, select = p.gather_ns, p.select_ns
        if gather is not None and select is not None:
            ns = p.decided_at_ns
            second = ns // 1_000_000_000
            if _second_bytes[0] != second:
                _second_bytes[:] = [second, _iso(ns)[:-8].encode()]   # without ".ffffffZ"
            return b'{"timings":{"gather_ms":%b,"select_ms":%b,"decided_at":"%b.%06dZ"}}' % (
                orjson.dumps(gather / 1e6), orjson.dumps(select / 1e6), _second_bytes[1], (ns // 1000) % 1_000_000)
    return orjson.dumps(tail_members(p))


_second_bytes: list = [None, b""]  # `_second_text` as bytes, for tail_json


def scheduling_object(requirements: Any, declaration: Any, candidates: list[str],
                      filters_passed: list[str], filters_failed: list[dict[str, str]],
                      scores: dict[str, Any], rest: dict[str, Any] | None = None) -> dict[str, Any]:
    """A full §6 scheduling object from its parts; `rest` holds the members after the four lists
    (route, timings, and whatever else a record carries)."""
    out = {"requirements": requirements, "declaration": declaration, "candidates": candidates,
           "filters_passed": filters_passed, "filters_failed": filters_failed, "scores": scores}
    if rest:
        out.update(rest)
    return out


def scheduling_dict(p) -> dict[str, Any]:
    """The §6 scheduling object; for a resumed placement, the `recorded_in` form."""
    if not p.resumed:
        return scheduling_object(dict(p.requirements.doc), dict(p.declaration.doc), p.candidates,
                                 list(p.predicates), p.filters_failed, _score_map(p), _tail(p))
    return {"resumed": True, "recorded_in": _recorded_in(p), "requirements": dict(p.requirements.doc),
            "declaration": dict(p.declaration.doc), **_counts(p), **_tail(p)}


def _recorded_in(p) -> dict[str, Any]:
    ref: dict[str, Any] = {"kind": "task.bound"}
    if p.recorded_in is not None:
        ref["seq"] = p.recorded_in
    return ref


def _counts(p) -> dict[str, int]:
    expl = p.explanation
    return {"candidates_count": expl.candidates_count, "filters_passed_count": len(p.predicates),
            "filters_failed_count": expl.candidates_count - expl.eligible_count,
            "scores_count": len(p.scores)}


def scheduling_json(p, head: bytes = b"", foot: bytes = b"") -> bytes:
    """The scheduling object as JSON bytes, between `head` and `foot` (a trace line around it,
    written in the same buffer); the engine writes the lists directly."""
    if p.resumed or p.custom_scores:
        return head + orjson.dumps(scheduling_dict(p)) + foot
    requirements_json = orjson.dumps(p.requirements.doc)
    return p.index.write_scheduling(p.explanation, p.scores, p.predicates, requirements_json,
                                     p.declaration_json, orjson.dumps(_tail(p))[1:-1], head, foot)


def reason_derived(p) -> bool:
    """Whether a rejection's reason is a3fast's own, the text its lists give (every candidate under
    the predicate it failed first, §6): no `reason_limit` shortened it, and there are candidates."""
    return p.reason_limit is None and p.explanation.candidates_count > 0


def rejection_json(p, head: bytes = b"", foot: bytes = b"") -> bytes:
    """The task.rejected content as JSON bytes (`rejection_dict`'s, as orjson writes it), between
    `head` and `foot` as for `scheduling_json`. The engine writes the lists directly, and the reason
    with them when it is the one they give (`reason_derived`)."""
    reason_json = None if reason_derived(p) else orjson.dumps(reason_text(p))
    return p.index.write_rejection(p.explanation, p.predicates, reason_json, orjson.dumps(p.requirements.doc),
                                   orjson.dumps(_tail(p))[1:-1], head, foot)


def rejection_content(index, expl, predicates, reason_json: bytes | None, requirements_json: bytes,
                      tail_json: bytes, head: bytes = b"", foot: bytes = b"") -> bytes:
    """`Index.write_rejection` from an index's list methods (`candidate_names`, `failed_pairs`,
    `failed_names`), through orjson: the pure engine's, and the merged index's of a sharded fleet."""
    failed_sets = len(expl.failed_counts())
    if len(predicates) != failed_sets:
        raise ValueError(f"{len(predicates)} predicates for {failed_sets} failed sets")
    if reason_json is None:
        if expl.candidates_count == 0:
            raise ValueError("a rejection among no candidates takes its reason_json")
        reason_json = orjson.dumps(reason_of(index, expl, predicates, None))
    lists = orjson.dumps({"candidates": index.candidate_names(expl),
                          "filters_failed": index.failed_pairs(expl, predicates)})
    return b"".join((head, b'{"code":"unschedulable","reason":', reason_json, b',"requirements":', requirements_json,
                     b",", lists[1:-1], b"," if tail_json else b"", tail_json, b"}", foot))


def reason_text(p) -> str:
    """A §6-conformant reason: every failed predicate with every candidate that failed it first.
    With the placement's `reason_limit` (a caller's choice, departing from §6) at most that many
    names per predicate, and a count of the rest."""
    return reason_of(p.index, p.explanation, p.predicates, p.reason_limit)


def reason_of(index, expl, predicates, reason_limit: int | None) -> str:
    """`reason_text` of an explanation on `index` and its predicates."""
    n = expl.candidates_count
    if n == 0:
        if predicates:
            return ("no eligible agent: the fleet has no agents to consider; the task requires "
                    + ", ".join(predicates))
        return "no eligible agent: the fleet has no agents to consider (the task requires nothing)"
    parts = []
    for k, (predicate, count) in enumerate(zip(predicates, expl.failed_counts())):
        if not count:
            continue
        # a limit past the count names every one: the engine's native count is a machine word
        limit = count if reason_limit is None else min(reason_limit, count)
        more = f" and {count - limit} more" if count > limit else ""
        parts.append((predicate, f"{index.failed_names(expl, k, limit)}{more}"))
    return reason_among(n, parts)


def reason_among(n: int, failed: Iterable[tuple[str, str]]) -> str:
    """The reason of a rejection among `n` ≥ 1 candidates: each failed predicate with the names of
    the candidates that failed it first, as written (`failed`: (predicate, names) pairs). The
    compact decoder derives a reason it left out through this same text."""
    return (f"no eligible agent among {n} candidate{'s' if n != 1 else ''}: "
            + "; ".join(f"{predicate} failed by {names}" for predicate, names in failed))


def rejection_dict(p) -> dict[str, Any]:
    """task.rejected content (§6; docs/design.md, reading 6)."""
    out: dict[str, Any] = {"code": "unschedulable", "reason": reason_text(p),
                           "requirements": dict(p.requirements.doc), "candidates": p.candidates,
                           "filters_failed": p.filters_failed}
    out.update(_tail(p))
    return out


def placement_records(p, task: Mapping[str, Any] | None = None) -> Iterator[tuple[str, bytes]]:
    """(kind, content JSON) of the trace records of one placement: task.submitted, then
    task.admitted + task.bound, or task.rejected; a resumed placement is one task.bound.
    `task` adds fields to task.submitted (goal, inputs, …)."""
    if p.resumed:
        yield "task.bound", scheduling_json(p, b'{"resumed":true,"scheduling":', b"}")
        return
    yield "task.submitted", submitted_json(p, task)
    if p.bound:
        yield "task.admitted", admitted_json(p)
        yield "task.bound", scheduling_json(p, b'{"scheduling":', b"}")
    else:
        yield "task.rejected", rejection_json(p)


def submitted_json(p, task: Mapping[str, Any] | None = None) -> bytes:
    """The task.submitted content: `task`'s fields and the requirements as submitted."""
    submitted = dict(task or {})
    submitted["requirements"] = dict(p.submitted.doc)
    return orjson.dumps(submitted)


def admitted_json(p) -> bytes:
    """The task.admitted content of a bound placement: the chosen agent."""
    return orjson.dumps({"agent": p.declaration.agent.to_dict()})
