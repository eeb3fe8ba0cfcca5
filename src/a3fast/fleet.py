"""Fleet: the agent table, dense agent ids, updates, and the per-predicate index behind them.

A fleet is one scheduling domain (DESIGN reading 3): agents are named by `agent.name`; adding a
declaration for an existing `(namespace, name)` replaces it; a name held by another namespace is an
error. Agent ids are dense and stay bound to their name for the fleet's life, so a placement kept in
compact form can always name its candidates, whatever happens to the fleet afterwards.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping

import orjson

from .engines import ENGINE, engine_module
from .errors import FleetError
from .predicates import (CAPABILITY, CLEARANCE, LATENCY, RESIDENCY, TOOL, capability, clearance,
                         latency_class, residency, tool)
from .schema import Declaration, Requirements, parse_declaration, parse_requirements, task_kind
from .scoring import DEFAULT_WEIGHTS, Scorer, cost_score

__all__ = ["Fleet"]

#: `_field_rows` tag of a capability's "substantiates it" row (beside the predicate kinds).
EVALUATED = "evaluated"
#: The predicate string of a declared value, per kind (capabilities take a name and a version).
_KEY_OF = {CLEARANCE: clearance, TOOL: tool, RESIDENCY: residency, LATENCY: latency_class}


def _placement():
    """The placement module, imported on first use (an import statement per call costs ~1 µs)."""
    global _placement_module
    if _placement_module is None:
        from . import placement

        _placement_module = placement
    return _placement_module


_placement_module = None


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a bulk load. Parsing and interning a batch makes
    many long-lived, acyclic objects, and the full collections they trigger rescan the growing
    heap: at 100,000 agents they took about two thirds of the parse time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Fleet:
    """Agents that tasks can be placed on. `engine` is "native", "pure" or None (a3fast.ENGINE)."""

    def __init__(self, engine: str | None = None, *, scorer: Scorer | None = None,
                 weights: tuple[float, float, float, float] = DEFAULT_WEIGHTS):
        self.engine = ENGINE if engine is None else engine
        self._engine = engine_module(self.engine)
        self._index = self._engine.Index()
        self.scorer = scorer
        self.weights = tuple(float(w) for w in weights)
        #: bumped by every change that can alter a placement's result
        self.generation = 0
        #: bumped by every change of who is in the fleet or what they declare (not by sessions or
        #: outcomes, which only scores read): the filter and explanation cache is valid within one
        self.membership = 0
        self._explained: dict[tuple[str, ...], tuple] = {}  # predicates -> (membership, explanation, eval rows)
        self._rows: dict[str, int] = {}          # predicate string -> row
        self._eval_rows: dict[str, int] = {}     # capability predicate -> row of agents that evaluate it
        self._session_rows: dict[str, int] = {}  # session id -> row of agents holding it
        self._kinds: dict[str, int] = {}         # task kind -> outcome column
        self._ids: dict[str, int] = {}           # agent name -> id (kept after removal)
        self._agents: list[Declaration | None] = []
        self._member_rows: list[tuple[int, ...]] = []
        self._held_sessions: list[set[int]] = []
        self._decl_json: list[bytes | None] = [] # each declaration as JSON once a record needs it
        # prepared requirements (by id) and predicate sets -> engine arguments (placement)
        self._resolved: dict[int | tuple[str, ...], tuple] = {}
        # predicate kind -> declared value ((name, version) for capabilities) -> row
        self._field_rows: dict[str, dict] = {kind: {} for kind in (*_KEY_OF, CAPABILITY, EVALUATED)}
        self._count = 0

    # -- membership -------------------------------------------------------------------------------
    def add(self, declaration: Mapping[str, Any] | Declaration) -> Declaration:
        """Add an agent, or replace the one with the same `(namespace, name)`. Returns the parsed
        declaration; raises SchemaError for an invalid one and FleetError for a name conflict."""
        decl = parse_declaration(declaration)
        name = decl.agent.name
        aid = self._ids.get(name)
        if aid is None:
            aid = len(self._agents)
            self._ids[name] = aid
            self._agents.append(None)
            self._member_rows.append(())
            self._held_sessions.append(set())
            self._decl_json.append(None)
        current = self._agents[aid]
        if current is not None:
            if current.agent.namespace != decl.agent.namespace:
                raise FleetError(
                    f"agent name {name!r} is already used in namespace {current.agent.namespace!r}; "
                    f"a fleet is one scheduling domain and names must be unique in it "
                    f"(cannot add it from namespace {decl.agent.namespace!r})")
            self._index.drop(aid, self._member_rows[aid])
        else:
            self._count += 1
        rows = self._rows_for(decl)
        # A replaced agent keeps the sessions it holds: drop() above left its session rows alone.
        self._index.put(aid, name, rows, cost_score(decl))
        self._agents[aid] = decl
        self._decl_json[aid] = None                # encoded when a record first needs it
        self._member_rows[aid] = rows
        self.generation += 1
        self.membership += 1
        return decl

    def extend(self, declarations: Iterable[Mapping[str, Any] | Declaration]) -> None:
        """Add many agents; new names are interned in one batch (much faster for a large fleet).
        All declarations are parsed before any is added, so an invalid one changes nothing."""
        with _collector_paused():
            parsed = [parse_declaration(d) for d in declarations]
            batch: dict[str, Declaration] = {}
            for decl in parsed:
                name = decl.agent.name
                if name in self._ids or name in batch:
                    self._add_batch(batch)
                    batch = {}
                    self.add(decl)
                else:
                    batch[name] = decl
            self._add_batch(batch)

    def _add_batch(self, batch: dict[str, Declaration]) -> None:
        if not batch:
            return
        first = len(self._agents)
        aids, names, all_rows, costs = [], [], [], []
        for offset, (name, decl) in enumerate(batch.items()):
            aid = first + offset
            rows = self._rows_for(decl)
            self._ids[name] = aid
            self._agents.append(decl)
            self._member_rows.append(rows)
            self._held_sessions.append(set())
            self._decl_json.append(None)
            aids.append(aid)
            names.append(name)
            all_rows.append(rows)
            costs.append(cost_score(decl))
        self._index.put_many(aids, names, all_rows, costs)
        self._count += len(batch)
        self.generation += 1
        self.membership += 1

    def remove(self, name: str) -> Declaration:
        """Remove an agent by name; its held sessions go with it. FleetError if it is not here."""
        aid = self._ids.get(name)
        decl = self._agents[aid] if aid is not None else None
        if decl is None:
            raise FleetError(f"no agent named {name!r} in the fleet")
        self._index.drop(aid, self._member_rows[aid] + tuple(self._held_sessions[aid]))
        self._held_sessions[aid] = set()
        self._agents[aid] = None
        self._member_rows[aid] = ()
        self._count -= 1
        self.generation += 1
        self.membership += 1
        return decl

    def __len__(self) -> int:
        return self._count

    def __contains__(self, name: object) -> bool:
        return self.get(name) is not None  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Declaration]:
        return (d for d in self._agents if d is not None)

    def get(self, name: str) -> Declaration | None:
        aid = self._ids.get(name)
        return self._agents[aid] if aid is not None else None

    def _repr_html_(self) -> str:
        """How many agents, and the predicates most of them satisfy, as a notebook shows it."""
        from .report import fleet_html

        return fleet_html(self)

    def names(self) -> list[str]:
        """Live agent names in id order (the order of `candidates` in records)."""
        return [d.agent.name for d in self._agents if d is not None]

    # -- history the scorer reads -----------------------------------------------------------------
    def record_outcome(self, agent: str, kind: str | Requirements | Mapping[str, Any], success: bool) -> None:
        """Learn from a finished task: `kind` is a task kind or the task's requirements."""
        aid = self._live_id(agent)
        if not isinstance(kind, str):
            kind = task_kind(parse_requirements(kind))
        self._index.record_outcome(self._kind(kind, create=True), aid, bool(success))
        self.generation += 1

    def outcomes(self, agent: str, kind: str) -> tuple[int, int]:
        """(successes, attempts) recorded for an agent and a task kind."""
        aid = self._ids.get(agent)
        kid = self._kinds.get(kind, -1)
        return self._index.outcome(kid, aid) if aid is not None and kid >= 0 else (0, 0)

    def hold_session(self, agent: str, session: str) -> None:
        """Mark an agent as holding a session's memory (affinity for tasks that continue it)."""
        aid = self._live_id(agent)
        row = self._session_row(session, create=True)
        self._held_sessions[aid].add(row)
        self._index.set_bit(row, aid)
        self.generation += 1

    def release_session(self, agent: str, session: str) -> None:
        aid = self._live_id(agent)
        row = self._session_rows.get(session)
        if row is not None and row in self._held_sessions[aid]:
            self._held_sessions[aid].discard(row)
            self._index.clear_bit(row, aid)
            self.generation += 1

    def holds_session(self, agent: str, session: str) -> bool:
        aid = self._ids.get(agent)
        row = self._session_rows.get(session)
        return aid is not None and row is not None and row in self._held_sessions[aid]

    # -- placing ----------------------------------------------------------------------------------
    def place(self, requirements: Mapping[str, Any] | Requirements, session: str | None = None,
              route: Any = None, *, scorer: Scorer | None = None, kind: str | None = None,
              remember_session: bool = True):
        """Place one task (§5, §6): filter, explain, score, choose. Returns a Placement.

        `session` (or the requirements' `session`) is used for affinity only; a bound placement
        makes the chosen agent hold it unless `remember_session` is false. `route` is a Route whose
        additions are matched and recorded. Raises SchemaError for invalid requirements.
        """
        return _placement().place(self, requirements, session=session, route=route, scorer=scorer,
                                  kind=kind, remember_session=remember_session)

    def resume(self, earlier, *, seq: int | None = None):
        """A resumed placement (§6) back to the agent `earlier` chose, without weighing candidates."""
        return _placement().resume(self, earlier, seq=seq)

    # -- internals shared with placement ----------------------------------------------------------
    def _declaration_json(self, aid: int) -> bytes:
        """An agent's declaration as JSON, encoded the first time a record needs it: encoding every
        declaration as it joined took a tenth of adding an agent, for agents most never chosen."""
        text = self._decl_json[aid]
        if text is None:
            text = self._decl_json[aid] = orjson.dumps(self._agents[aid].doc)
        return text

    def _row(self, key: str) -> int:
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = self._index.add_row()
        return row

    def _rows_for(self, decl: Declaration) -> tuple[int, ...]:
        """The rows of `declaration_keys(decl)`, then of `evaluated_keys(decl)`, in that order.

        A predicate string is built (by `predicates`) and interned only the first time its field
        value is seen; after that the row is found from the value itself. Building some thirty
        strings per declaration was two thirds of adding an agent to a large fleet."""
        by_kind = self._field_rows
        rows: list[int] = []
        cached = by_kind[CAPABILITY]
        for c in decl.capabilities:
            row = cached.get((c.name, c.version))
            rows.append(row if row is not None else self._field_row(CAPABILITY, (c.name, c.version)))
        for kind, values in ((CLEARANCE, decl.clearances), (TOOL, decl.tools or ()), (RESIDENCY, decl.residency or ())):
            cached = by_kind[kind]
            for value in values:
                row = cached.get(value)
                rows.append(row if row is not None else self._field_row(kind, value))
        if decl.model is not None and decl.model.latency_class is not None:
            cls = decl.model.latency_class
            row = by_kind[LATENCY].get(cls)
            rows.append(row if row is not None else self._field_row(LATENCY, cls))
        cached = by_kind[EVALUATED]
        for c in decl.capabilities:
            if c.substantiated:
                row = cached.get((c.name, c.version))
                rows.append(row if row is not None else self._field_row(EVALUATED, (c.name, c.version)))
        return tuple(dict.fromkeys(rows))   # a repeated field keeps its first place, as in `predicates`

    def _field_row(self, kind: str, value) -> int:
        """Intern the predicate string of one declared value (the first time it is seen)."""
        if kind == EVALUATED:
            row = self._eval_row(capability(*value))
        else:
            row = self._row(capability(*value) if kind == CAPABILITY else _KEY_OF[kind](value))
        self._field_rows[kind][value] = row
        return row

    def _eval_row(self, key: str) -> int:
        row = self._eval_rows.get(key)
        if row is None:
            row = self._eval_rows[key] = self._index.add_row()
        return row

    def _session_row(self, session: str, create: bool = False) -> int:
        row = self._session_rows.get(session)
        if row is None:
            if not create:
                return -1
            row = self._session_rows[session] = self._index.add_row()
        return row

    def _kind(self, kind: str, create: bool = False) -> int:
        kid = self._kinds.get(kind)
        if kid is None:
            if not create:
                return -1
            kid = self._kinds[kind] = self._index.new_kind()
        return kid

    def _live_id(self, name: str) -> int:
        aid = self._ids.get(name)
        if aid is None or self._agents[aid] is None:
            raise FleetError(f"no agent named {name!r} in the fleet")
        return aid

    def index_nbytes(self) -> int:
        """Bytes held by the engine's index (rows and live set)."""
        return self._index.nbytes()
