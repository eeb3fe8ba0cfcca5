"""The Placement (the outcome of placing one task) and routes (§6).

A Placement keeps the decision in compact form (the engine's id sets and score columns); the §6
scheduling object and its JSON bytes are produced only when a caller asks for them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import orjson

from ..errors import A3Error, FleetError, describe, quoted
from ..explain import summary_line
from ..notebook import view_html
from ..record.write import rejection_dict, scheduling_dict, scheduling_json, timings
from ..schema import Declaration, Requirements, parse_requirements

__all__ = ["Placement", "Route", "RouteError", "CustomScores", "check_reason_limit", "resumed_agent"]

_SINGLE_VALUED = ("residency", "agentRef")
_LISTED = ("capabilities", "clearances", "tools", "exclude")


def _shown(value: Any) -> str:
    """A route's name or value as its errors quote it: text in quotes, cut past 60 characters, and
    anything else described (a hostile route stays one short line)."""
    return quoted(value) if isinstance(value, str) else describe(value)


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

    def __post_init__(self) -> None:
        # §6 records the rule "that added requirements": it has a name, and it adds something
        if not isinstance(self.name, str) or not self.name:
            raise RouteError(f"a route needs a name (a non-empty string), found {_shown(self.name)}")
        try:          # a record states it: a lone surrogate could never be written
            str(self.name).encode("utf-8")
        except UnicodeEncodeError:
            raise RouteError(f"a route's name must be text UTF-8 can write, found a lone surrogate in "
                             f"{_shown(self.name)}") from None
        if not isinstance(self.adds, Mapping) or not self.adds:
            raise RouteError(f"route {_shown(self.name)} adds no requirements; a route adds at least one")
        # a route that adds what it cannot is refused when made, not at the first task it routes
        for key, value in self.adds.items():
            if key not in _LISTED and key != "model" and key not in _SINGLE_VALUED:
                raise self._cannot_add(key)
            # the shapes `apply` merges by; what the merged values must be, §4 says when it parses them
            if key in _LISTED and not isinstance(value, (list, tuple)):
                raise RouteError(f"route {_shown(self.name)}: {key} must be added as a list, found {describe(value)}")
            if key == "model" and not isinstance(value, Mapping):
                raise RouteError(f"route {_shown(self.name)}: model must be added as an object, found {describe(value)}")
        # and adds something: an empty list, a null, a model without a latency class add no predicate
        if not any((value.get("latency_class") is not None) if key == "model" else
                   (bool(value) if key in _LISTED else value is not None) for key, value in self.adds.items()):
            raise RouteError(f"route {_shown(self.name)} adds no requirements; a route adds at least one")

    def apply(self, submitted: Requirements) -> Requirements:
        doc = dict(submitted.doc)
        for key, value in self.adds.items():
            if key in _LISTED:
                present = doc.get(key) or []
                doc[key] = list(present) + [v for v in value if v not in present]
            elif key == "model":
                model = dict(doc.get("model") or {})
                for mkey, mvalue in dict(value).items():
                    self._add_single(model, mkey, mvalue, f"model.{mkey}")
                doc["model"] = model
            elif key in _SINGLE_VALUED:
                self._add_single(doc, key, value, key)
            else:      # `adds` changed since the route was made
                raise self._cannot_add(key)
        return parse_requirements(doc)

    def _cannot_add(self, key: Any) -> RouteError:
        return RouteError(f"route {_shown(self.name)}: cannot add {_shown(key)}; a route adds capabilities, "
                          f"clearances, tools, exclude, residency, model or agentRef")

    def _add_single(self, doc: dict, key: str, value: Any, label: str) -> None:
        if doc.get(key) is not None and doc[key] != value:
            raise RouteError(f"route {_shown(self.name)} would change {label} from {_shown(doc[key])} to {_shown(value)}; "
                             f"a route may only add requirements")
        doc[key] = value


def check_reason_limit(reason_limit: int | None) -> None:
    """ValueError unless `reason_limit` is None (every name, as §6 asks) or a positive integer."""
    if reason_limit is not None and (isinstance(reason_limit, bool) or not isinstance(reason_limit, int)
                                     or reason_limit < 1):
        raise ValueError(f"reason_limit: expected None or a positive integer, found {reason_limit!r}")


class Placement:
    """The outcome of placing one task. Bound: `agent`, `scheduling`; not bound: `rejection`.

    A Placement is made by the placing pipeline's prepare stage (a3fast.fleet.pipeline: `Fleet.place`,
    `Fleet.resume`, a sharded fleet's) and is the task's cycle state from then on: each stage fills
    its part (explain the `explanation`, score the `scores`, choose the winner's id `best`), and the
    build stage completes it (`pipeline.build_placement`), so a placement is one object, not a
    cycle state copied into another. It keeps the decision as the engine left it — the id sets of
    the explanation and the score columns, with `index`, the engine index whose agent ids they are —
    and the record writers of `a3fast.record.write` turn it into §6 records on request.

    Fields set by prepare: `submitted`, `requirements`, `route`, `session`, `kind`, `reason_limit`,
    `resumed`, `recorded_in` and the cycle's own (`started`, `prepared`, `scorer`, `within`,
    `membership`); by the middle stages: `explanation`, `eval_rows`, `gathered`, `scores`, `best`,
    `selected`; by build: the rest but the declaration's JSON, which is made when first asked for
    (`declaration_json`), and it lets go of the caller's `scorer` and the `within` ids,
    which only the middle stages read. `Fleet.scored` hands back one that is decided but not built
    (its `repr` says so; what reads a built placement's fields, `bound` and the records, does not
    apply to it).
    """

    __slots__ = ("fleet_engine", "index", "requirements", "submitted", "route", "session", "kind",
                 "explanation", "scores", "custom_scores", "declaration", "_declaration_json",
                 "_fleet", "agent",
                 "_gather_ns", "_select_ns", "decided_at_ns", "generation", "resumed", "recorded_in",
                 "seq", "reason_limit", "membership", "session_held", "_scheduling",
                 # the cycle's working state, read by the stages
                 "started", "prepared", "scorer", "within", "eval_rows", "gathered", "best", "selected")

    # Declared for readers and type checkers; each is set by the stage named above.
    fleet_engine: str
    #: the engine index that names this placement's agent ids
    index: Any
    #: the requirements matched (the submitted ones plus what a route added)
    requirements: Requirements
    #: the requirements as the caller gave them, parsed once
    submitted: Requirements
    #: the route's name, or None
    route: str | None
    session: str | None
    kind: str | None
    explanation: Any
    scores: Any
    #: whether `scores` came from a caller's scorer (CustomScores) rather than the engine's
    custom_scores: bool
    #: the chosen agent's declaration (None: none)
    declaration: Declaration | None
    #: its JSON once made (`declaration_json`), and until then the fleet that placed it, which
    #: keeps each agent's JSON (None: the JSON is made, or came with the placement)
    _declaration_json: bytes | None
    _fleet: Any
    agent: str | None
    #: the gather and select phases as set (`gather_ns`, `select_ns`), or `...`: read from the
    #: clock readings when asked for
    _gather_ns: Any
    _select_ns: Any
    decided_at_ns: int
    #: the fleet's generation when the task was placed
    generation: int
    resumed: bool
    #: for a resumed placement, the seq of the task.bound that holds its full explanation
    recorded_in: int | None
    #: the seq of this placement's task.bound or task.rejected in the trace a `TraceWriter` last
    #: wrote it to (None until one has): what `Fleet.resume` cites when given no seq
    seq: int | None
    #: at most this many names per predicate in a rejection's reason (None: all, as §6 asks)
    reason_limit: int | None
    #: the fleet's membership count when the candidates were taken (None: not known): two
    #: placements on one `index` with the same count had the same live agents
    membership: int | None
    #: False when a placement with a session leaves it unheld (placed with
    #: `remember_session=False`, a filter's answer among them; bound or rejected: docs/design.md,
    #: reading 25); None when its agent holds it, as `place` makes it
    session_held: bool | None
    _scheduling: dict[str, Any] | None
    #: perf_counter_ns when prepare began, explain ended (`gathered`) and choose ended (`selected`)
    started: int
    gathered: int
    selected: int
    #: whether `requirements` is the caller's own Requirements object (kept and placed again)
    prepared: bool
    scorer: Any
    #: agent ids the candidates are restricted to, or None for every live agent
    within: list[int] | None
    eval_rows: list[int]
    #: the winner's id, -1 for none
    best: int

    def __getattr__(self, name: str) -> Any:
        # called only for a field no stage has set (a placement `Fleet.scored` gave is decided, not
        # built, so what the build stage sets is not there), or for a property whose getter read
        # one: it is read again, so that its error names the field, not the property
        attribute = getattr(type(self), name, None)
        if isinstance(attribute, property) and attribute.fget is not None:
            return attribute.fget(self)
        if name in Placement.__slots__:
            raise AttributeError(f"{name!r} is not set on this Placement: the stage that sets it has not run "
                                 f"(one Fleet.scored gives is decided, not built; place, place_many and "
                                 f"resume give built ones)", name=name, obj=self)
        raise AttributeError(f"'Placement' object has no attribute {name!r}", name=name, obj=self)

    @property
    def bound(self) -> bool:
        return self.agent is not None

    @property
    def declaration_json(self) -> bytes | None:
        """The chosen agent's declaration as JSON, as the records carry it (None: none).

        Made the first time it is asked for, by a record writer or a caller, not when the task is
        placed: a placement nobody records never encodes its agent's declaration. The fleet keeps
        it from then on while the agent is declared as it was (`Fleet.declaration_json_of`), so an
        agent's declaration is encoded once however often it is recorded."""
        text = self._declaration_json
        if text is None and self.declaration is not None:
            fleet = self._fleet
            text = self._declaration_json = (fleet.declaration_json_of(self.best, self.declaration)
                                             if fleet is not None else orjson.dumps(self.declaration.doc))
            self._fleet = None          # a placement kept by its caller does not keep its fleet
        return text

    @property
    def gather_ns(self) -> int | None:
        """The gather phase (prepare to explained) in nanoseconds; None for a resumed placement,
        which gathers nothing: its one phase is checking the agent again.

        The build stage leaves both phases to be read from the clock readings when asked for (a
        placement nobody records never makes their ints); a value set here is kept as it is."""
        value = self._gather_ns
        if value is ...:
            return None if self.resumed else self.gathered - self.started
        return value

    @gather_ns.setter
    def gather_ns(self, value: int | None) -> None:
        self._gather_ns = value

    @property
    def select_ns(self) -> int | None:
        """The select phase (explained to chosen) in nanoseconds; a resumed placement's one phase,
        from its start. Read from the clock readings when asked for, as `gather_ns`."""
        value = self._select_ns
        if value is ...:
            return self.selected - (self.started if self.resumed else self.gathered)
        return value

    @select_ns.setter
    def select_ns(self, value: int | None) -> None:
        self._select_ns = value

    @property
    def predicates(self) -> tuple[str, ...]:
        """The matched predicates in derivation order (§5): the record's filters_passed."""
        return self.requirements.predicates

    # -- the decision, readable without building the record ---------------------------------------
    @property
    def candidates(self) -> list[str]:
        return self.index.candidate_names(self.explanation)

    @property
    def eligible(self) -> list[str]:
        index = self.index
        return [index.name(i) for i in self.explanation.eligible_ids()]

    @property
    def filters_failed(self) -> list[dict[str, str]]:
        return self.index.failed_pairs(self.explanation, self.predicates)

    def first_failed(self) -> dict[str, str]:
        """Ineligible candidate -> the first predicate it failed."""
        return {pair["candidate"]: pair["predicate"] for pair in self.filters_failed}

    def failed_counts(self) -> dict[str, int]:
        """Predicate -> how many candidates failed it first (derivation order)."""
        return dict(zip(self.predicates, self.explanation.failed_counts()))

    @property
    def timings(self) -> dict[str, Any]:
        """§6 timings: measured phases only; launch_ms and requests are never invented (docs/design.md,
        reading 9)."""
        return timings(self)

    # -- records ----------------------------------------------------------------------------------
    @property
    def scheduling(self) -> dict[str, Any] | None:
        """The §6 scheduling object of the task.bound record, or None when not bound."""
        if not self.bound:
            return None
        if self._scheduling is None:
            self._scheduling = scheduling_dict(self)
        return self._scheduling

    def scheduling_json(self) -> bytes | None:
        """The scheduling object as JSON bytes (the native engine writes them directly)."""
        if not self.bound:
            return None
        return scheduling_json(self)

    @property
    def rejection(self) -> dict[str, Any] | None:
        """The task.rejected content when not bound: code, a reason naming every failed predicate
        with the candidates that failed it, candidates and filters_failed (§6)."""
        if self.bound:
            return None
        return rejection_dict(self)

    def summary(self) -> str:
        """One line in the style of a scheduler's event: eligible out of considered, and why not."""
        expl = self.explanation
        return summary_line(expl.eligible_count, expl.candidates_count, self.predicates,
                            expl.failed_counts(), self.agent)

    def _repr_html_(self) -> str | None:
        """The funnel, scores and candidates as a notebook shows them (the view a3fast.report
        registers; see a3fast.notebook)."""
        return view_html("placement", self)

    def __repr__(self) -> str:
        try:
            state = f"bound to {self.agent!r}" if self.agent is not None else "unschedulable"
            engine = f", engine {self.fleet_engine}"
        except AttributeError:      # `Fleet.scored`'s: decided, and the build stage has not run
            state, engine = "decided, not built", ""
        return f"<Placement {state}: {len(self.predicates)} predicates{engine}>"


def check_built(placement: Placement, what: str) -> None:
    """ValueError for a Placement `Fleet.scored` gave: decided by a shard's stages, not built, so it
    has no agent, declaration or timings to resume or write."""
    try:
        placement.agent
    except AttributeError:
        raise ValueError(f"{what}: a placement from Fleet.scored is decided, not built (it has no chosen "
                         f"agent, declaration or timings); give one from place, place_many or resume") from None


def resumed_agent(earlier: Placement) -> str:
    """The agent a resumption of `earlier` goes back to: the one it chose (FleetError if none)."""
    check_built(earlier, "earlier")
    if earlier.agent is None:
        raise FleetError("only a bound placement can be resumed")
    return earlier.agent


class CustomScores:
    """Scores from a caller's scorer: one mapping per eligible agent, as the scorer returned it."""

    __slots__ = ("ids", "entries", "best")

    def __init__(self, ids: list[int], entries: list[dict[str, Any]], best: int):
        self.ids = ids
        self.entries = entries
        self.best = best

    def __len__(self) -> int:
        return len(self.ids)
