"""place(): gather, filter, explain, score, choose (§5, §6); the Placement; routes; resumed placements.

A Placement keeps the decision in compact form (the engine's id sets and score columns); the §6
scheduling object and its JSON bytes are produced only when a caller asks for them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import A3Error, FleetError
from .predicates import AGENT_REF, ANTI_AFFINITY, CAPABILITY, first_failed
from .schema import Requirements, parse_requirements, task_kind
from .scoring import ScoringTask, choose

__all__ = ["Placement", "Route", "RouteError", "place", "resume"]

_AGENT_REF = AGENT_REF + ":"
_ANTI = ANTI_AFFINITY + ":"
_CAPABILITY = CAPABILITY + ":"
_SINGLE_VALUED = ("residency", "agentRef")


class RouteError(A3Error):
    """A route that would drop or change a requirement the task stated (§6: a route may only add)."""


@dataclass(frozen=True)
class Route:
    """A named control-plane rule that adds requirements to every task it routes (§6).

    `adds` is shaped like a requirements document: lists are appended to the task's, single values
    (`residency`, `model.latency_class`, `agentRef`) are added where the task states none. A route
    that would change a value the task stated is refused (RouteError), since a placement that drops
    a requirement is not conformant whatever the route says.
    """

    name: str
    adds: Mapping[str, Any] = field(default_factory=dict)

    def apply(self, submitted: Requirements) -> Requirements:
        doc = dict(submitted.doc)
        for key, value in self.adds.items():
            if key in ("capabilities", "clearances", "tools", "exclude"):
                present = doc.get(key) or []
                doc[key] = list(present) + [v for v in value if v not in present]
            elif key == "model":
                model = dict(doc.get("model") or {})
                for mkey, mvalue in dict(value).items():
                    self._add_single(model, mkey, mvalue, f"model.{mkey}")
                doc["model"] = model
            elif key in _SINGLE_VALUED:
                self._add_single(doc, key, value, key)
            else:
                raise RouteError(f"route {self.name!r}: cannot add {key!r}; a route adds capabilities, "
                                 f"clearances, tools, exclude, residency, model or agentRef")
        return parse_requirements(doc)

    def _add_single(self, doc: dict, key: str, value: Any, label: str) -> None:
        if doc.get(key) is not None and doc[key] != value:
            raise RouteError(f"route {self.name!r} would change {label} from {doc[key]!r} to {value!r}; "
                             f"a route may only add requirements")
        doc[key] = value


class Placement:
    """The outcome of placing one task. Bound: `agent`, `scheduling`; not bound: `rejection`."""

    __slots__ = ("fleet_engine", "_index", "requirements", "submitted", "predicates", "route", "session",
                 "kind", "explanation", "scores", "agent", "declaration", "_declaration_json",
                 "gather_ns", "select_ns", "decided_at_ns", "resumed", "recorded_in", "seq",
                 "generation", "_scheduling", "_custom")

    def __init__(self, **fields: Any):
        self.seq = None
        self.resumed = False
        self.recorded_in = None
        self._scheduling = None
        self._custom = False
        for key, value in fields.items():
            setattr(self, key, value)

    @property
    def bound(self) -> bool:
        return self.agent is not None

    # -- the decision, readable without building the record ---------------------------------------
    @property
    def candidates(self) -> list[str]:
        return self._index.candidate_names(self.explanation)

    @property
    def eligible(self) -> list[str]:
        index = self._index
        return [index.name(i) for i in self.explanation.eligible_ids()]

    @property
    def filters_failed(self) -> list[dict[str, str]]:
        return self._index.failed_pairs(self.explanation, self.predicates)

    def first_failed(self) -> dict[str, str]:
        """Ineligible candidate -> the first predicate it failed."""
        return {pair["candidate"]: pair["predicate"] for pair in self.filters_failed}

    def failed_counts(self) -> dict[str, int]:
        """Predicate -> how many candidates failed it first (derivation order)."""
        return dict(zip(self.predicates, self.explanation.failed_counts()))

    @property
    def timings(self) -> dict[str, Any]:
        """§6 timings: measured phases only; launch_ms and requests are never invented (reading 9)."""
        from .records import timings

        return timings(self)

    # -- records ----------------------------------------------------------------------------------
    @property
    def scheduling(self) -> dict[str, Any] | None:
        """The §6 scheduling object of the task.bound record, or None when not bound."""
        if not self.bound:
            return None
        if self._scheduling is None:
            from .records import scheduling_dict

            self._scheduling = scheduling_dict(self)
        return self._scheduling

    def scheduling_json(self) -> bytes | None:
        """The scheduling object as JSON bytes (the native engine writes them directly)."""
        if not self.bound:
            return None
        from .records import scheduling_json

        return scheduling_json(self)

    @property
    def rejection(self) -> dict[str, Any] | None:
        """The task.rejected content when not bound: code, a reason naming every failed predicate
        with the candidates that failed it, candidates and filters_failed (§6)."""
        if self.bound:
            return None
        from .records import rejection_dict

        return rejection_dict(self)

    def summary(self) -> str:
        """One line in the style of a scheduler's event: eligible out of considered, and why not."""
        from .records import summary_line

        return summary_line(self)

    def _repr_html_(self) -> str:
        """The funnel, scores and candidates as a notebook shows them (a3fast.report)."""
        from .report import placement_html

        return placement_html(self)

    def __repr__(self) -> str:
        state = f"bound to {self.agent!r}" if self.bound else "unschedulable"
        return f"<Placement {state}: {len(self.predicates)} predicates, engine {self.fleet_engine}>"


class CustomScores:
    """Scores from a caller's scorer: one mapping per eligible agent, as the scorer returned it."""

    __slots__ = ("ids", "entries", "best")

    def __init__(self, ids: list[int], entries: list[dict[str, Any]], best: int):
        self.ids = ids
        self.entries = entries
        self.best = best

    def __len__(self) -> int:
        return len(self.ids)


def _custom_scores(fleet, scorer, expl, matched: Requirements, session, kind) -> CustomScores:
    ids = expl.eligible_ids()
    agents = [fleet._agents[i] for i in ids]
    task = ScoringTask(matched, session, kind,
                       outcomes=lambda name: fleet.outcomes(name, kind),
                       holds_session=lambda name: session is not None and fleet.holds_session(name, session))
    raw = list(scorer(task, agents))
    if len(raw) != len(ids):
        raise A3Error(f"scorer returned {len(raw)} scores for {len(ids)} eligible agents")
    entries = []
    for decl, entry in zip(agents, raw):
        total = entry.get("total") if isinstance(entry, Mapping) else None
        if isinstance(total, bool) or not isinstance(total, (int, float)) or total != total:
            raise A3Error(f"scorer gave agent {decl.agent.name!r} no numeric 'total'")
        entries.append({"total": float(total), **{k: v for k, v in entry.items() if k != "total"}})
    best = choose([d.agent.name for d in agents], [e["total"] for e in entries])
    return CustomScores(ids, entries, ids[best] if best >= 0 else -1)


#: Prepared requirements resolved per fleet (rows and ids are append-only, so a resolution stays
#: valid until the fleet interns something new); bounded so that one-off requirements cannot pile up.
RESOLVED_CACHE_SIZE = 1024


def _resolve(fleet, matched: Requirements, with_kind: bool):
    """The predicates as the engine's arguments: filter rows, agentRef id, excluded ids, the rows
    of agents that substantiate each required capability, and the task kind when it is needed."""
    row_of, id_of, eval_of = fleet._rows, fleet._ids, fleet._eval_rows
    rows, excluded, eval_rows = [], [], []
    only = fleet._engine.NO_AGENT_REF
    for p in matched.predicates:
        # most predicates name an interned row: look it up before classifying the string
        row = row_of.get(p)
        if row is not None:
            rows.append(row)
            if p.startswith(_CAPABILITY):
                eval_rows.append(eval_of.get(p, -1))
        elif p.startswith(_ANTI):
            excluded.append(id_of.get(p[len(_ANTI):], -1))
        elif p.startswith(_AGENT_REF):
            only = id_of.get(p[len(_AGENT_REF):], -1)
        else:   # a predicate no agent satisfies
            rows.append(-1)
            if p.startswith(_CAPABILITY):
                eval_rows.append(-1)
    return rows, only, excluded, eval_rows, task_kind(matched) if with_kind else None


#: How many agent-sized explanations the repeated-task cache holds: 4,194 tasks at 1,000 agents,
#: 41 at 100,000 (an explanation holds P + 1 sets as large as the fleet).
EXPLAINED_CACHE_BUDGET = 1 << 22


def _remember(fleet, predicates: tuple[str, ...], expl, eval_rows) -> None:
    cache = fleet._explained
    if len(cache) * max(fleet._count, 1) >= EXPLAINED_CACHE_BUDGET:
        cache.clear()
    cache[predicates] = (fleet.membership, expl, eval_rows)


def _resolve_prepared(fleet, matched: Requirements):
    """`_resolve` for a Requirements object the caller keeps and places again (a prepared task)."""
    stamp = len(fleet._rows) + len(fleet._eval_rows) + len(fleet._ids)
    cache = fleet._resolved
    entry = cache.get(id(matched))
    # the entry holds `matched` itself, so its id cannot be reused by another object meanwhile
    if entry is not None and entry[0] is matched and entry[1] == stamp:
        return entry[2]
    if len(cache) >= RESOLVED_CACHE_SIZE:
        cache.clear()
    resolved = _resolve(fleet, matched, True)
    cache[id(matched)] = (matched, stamp, resolved)
    return resolved


def _resolve_parsed(fleet, matched: Requirements, with_kind: bool):
    """`_resolve` for requirements parsed for this placement. The engine arguments depend only on
    the predicates, so they are kept per predicate set (until the fleet interns something new); the
    task kind, which also reads `kind`, is derived each time it is needed."""
    stamp = len(fleet._rows) + len(fleet._eval_rows) + len(fleet._ids)
    cache = fleet._resolved
    entry = cache.get(matched.predicates)
    if entry is None or entry[0] != stamp:
        if len(cache) >= RESOLVED_CACHE_SIZE:
            cache.clear()
        entry = cache[matched.predicates] = (stamp, _resolve(fleet, matched, False)[:4])
    rows, only, excluded, eval_rows = entry[1]
    return rows, only, excluded, eval_rows, task_kind(matched) if with_kind else None


def place(fleet, requirements, *, session=None, route=None, scorer=None, kind=None,
          remember_session=True) -> Placement:
    """Place one task on `fleet`; see Fleet.place."""
    started = time.perf_counter_ns()
    submitted = parse_requirements(requirements)
    matched = route.apply(submitted) if route is not None else submitted
    predicates = matched.predicates
    session = session if session is not None else matched.session

    # gather: the filter and explanation of a task seen before against the same membership are
    # reused (they depend only on the predicates and who is in the fleet); else resolve the
    # predicates to index rows and agent ids, and filter + explain
    index = fleet._index
    scorer = scorer or fleet.scorer
    cached = fleet._explained.get(predicates)
    if cached is not None and cached[0] == fleet.membership:
        expl, eval_rows = cached[1], cached[2]
        if kind is None and (fleet._kinds or scorer):
            kind = task_kind(matched)
        gathered = time.perf_counter_ns()
    else:
        if matched is requirements:
            rows, only, excluded, eval_rows, matched_kind = _resolve_prepared(fleet, matched)
        else:
            rows, only, excluded, eval_rows, matched_kind = _resolve_parsed(
                fleet, matched, kind is None and bool(fleet._kinds or scorer))
        if kind is None and (fleet._kinds or scorer):
            kind = matched_kind
        gathered = time.perf_counter_ns()
        expl = index.explain(rows, only, excluded)
        _remember(fleet, predicates, expl, eval_rows)

    # score the eligible and choose
    if scorer is None:
        session_row = fleet._session_rows.get(session, -1) if session is not None else -1
        kid = fleet._kinds.get(kind, -1) if kind is not None else -1
        scores = index.score(expl, eval_rows, session_row, kid, fleet.weights)
    else:
        scores = _custom_scores(fleet, scorer, expl, matched, session, kind)
    best = scores.best
    selected = time.perf_counter_ns()
    decided_at = time.time_ns()

    # slots are set directly: Placement(**fields) costs more than the whole native filter
    placement = Placement.__new__(Placement)
    placement.fleet_engine = fleet.engine
    placement._index = index
    placement.requirements = matched
    placement.submitted = submitted
    placement.predicates = predicates
    placement.route = route.name if route is not None else None
    placement.session = session
    placement.kind = kind
    placement.explanation = expl
    placement.scores = scores
    placement.gather_ns = gathered - started
    placement.select_ns = selected - gathered
    placement.decided_at_ns = decided_at
    placement.generation = fleet.generation
    placement.seq = placement.recorded_in = placement._scheduling = None
    placement.resumed = False
    placement._custom = scorer is not None
    if best >= 0:
        decl = fleet._agents[best]
        placement.agent = name = decl.agent.name
        placement.declaration = decl
        placement._declaration_json = fleet._decl_json[best] or fleet._declaration_json(best)
        if session is not None and remember_session and not fleet.holds_session(name, session):
            fleet.hold_session(name, session)
    else:
        placement.agent = placement.declaration = placement._declaration_json = None
    return placement


def resume(fleet, earlier: Placement, *, seq: int | None = None) -> Placement:
    """A resumed placement (§6): back to the agent `earlier` chose, with no candidates weighed.

    The agent must still be in the fleet and its current declaration must still satisfy every
    predicate matched the first time, since the resumed record is held to the same checks (§7).
    """
    if not earlier.bound:
        raise FleetError("only a bound placement can be resumed")
    decl = fleet.get(earlier.agent)
    if decl is None:
        raise FleetError(f"cannot resume on {earlier.agent!r}: the agent is no longer in the fleet")
    unmet = first_failed(decl, earlier.predicates)
    if unmet is not None:
        raise FleetError(f"cannot resume on {earlier.agent!r}: its declaration no longer satisfies {unmet}")
    started = time.perf_counter_ns()
    aid = fleet._ids[earlier.agent]
    placement = Placement(
        fleet_engine=fleet.engine, _index=earlier._index, requirements=earlier.requirements,
        submitted=earlier.submitted, predicates=earlier.predicates, route=earlier.route,
        session=earlier.session, kind=earlier.kind, explanation=earlier.explanation,
        scores=earlier.scores, agent=earlier.agent, declaration=decl,
        _declaration_json=fleet._declaration_json(aid), gather_ns=None,
        select_ns=time.perf_counter_ns() - started, decided_at_ns=time.time_ns(),
        generation=fleet.generation)
    placement.resumed = True
    placement.recorded_in = seq if seq is not None else earlier.seq
    placement._custom = earlier._custom
    return placement
