"""Fleet: one process's fleet — its agent table, predicate rows, history and placing — behind one API.

A fleet is one scheduling domain (docs/design.md, reading 3): agents are named by `agent.name`;
adding a declaration for an existing `(namespace, name)` replaces it; a name held by another
namespace is an error (a3fast.fleet.domain). Agent ids are dense and stay bound to their name
until `compact` renumbers the live agents (a3fast.fleet.table). Placing runs the stages of
a3fast.fleet.pipeline; bulk loads and snapshots are a3fast.fleet.bulk_load and
a3fast.fleet.persistence.
"""
from __future__ import annotations

import functools
import decimal
import math
import numbers
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import numpy as np

from ..engines import ENGINE, engine_module, ingest_module
from ..errors import FleetError, Problem, describe
from ..notebook import view_html
from .placement import Placement, Route
from ..predicates import AGENT_REF, ANTI_AFFINITY
from ..schema import (Declaration, Requirements, check_text_argument, parse_declaration, parse_declarations,
                      parse_requirements, task_kind)
from .scoring import DEFAULT_WEIGHTS, MAX_OUTCOMES, Scorer, check_total_bound, cost_score
from . import pipeline
from .bulk_load import JsonlSource, collector_paused, read_jsonl
from .domain import check_namespace
from .persistence import Saved, read_snapshot, write_snapshot
from .rows import PredicateRows
from .table import AgentTable

if TYPE_CHECKING:
    # Both engines' Index has the interface of the native one, whose stub (_core.pyi) mypy reads.
    from .._core import Explanation, Index

__all__ = ["Fleet"]

_Method = TypeVar("_Method", bound=Callable[..., Any])


def _locked(method: _Method) -> _Method:
    """Run a method under the fleet's lock: an update waits for a `place_many` batch under way
    (whose threads read the index without the GIL), and a batch for an update."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return run  # type: ignore[return-value]


def check_outcome_counts(successes: Any, attempts: Any) -> None:
    """ValueError unless `successes` and `attempts` are integers (not bools or floats) with
    0 <= successes <= attempts: what `record_outcomes` takes, on any fleet."""
    for what, count in (("successes", successes), ("attempts", attempts)):
        if type(count) is not int:
            raise ValueError(f"{what}: expected an integer, found {describe(count)}")
    if not 0 <= successes <= attempts:
        raise ValueError(f"successes ({successes}) must be between 0 and attempts ({attempts})")


def check_placing_arguments(route: Any, scorer: Any) -> None:
    """TypeError naming the argument, for a `route` that is no Route or a `scorer` that cannot be
    called (rather than an AttributeError inside the engine, or a scorer's failure at its first
    placement)."""
    if route is not None and not isinstance(route, Route):
        raise TypeError(f"route: expected a Route, found {describe(route)}")
    if scorer is not None and not callable(scorer):
        raise TypeError(f"scorer: expected a callable (a Scorer), found {describe(scorer)}")


def _finite_weights(weights: Any) -> tuple[float, ...]:
    """Four finite floats of `weights`, or ValueError naming what is not: the weights as a whole
    when they are not four, else the first weight that is no finite number (a snapshot holds them
    as JSON numbers, which cannot be NaN or infinite)."""
    try:
        # a string would be read character by character ("1234" as four weights), a mapping by
        # its keys
        items = None if isinstance(weights, (str, bytes, Mapping)) else list(weights)
    except TypeError:
        items = None
    if items is None or len(items) != 4:
        found = f"{len(items)} of them" if items is not None else describe(weights)
        raise ValueError(f"weights: expected 4 finite numbers (affinity, success rate, cost, exploration), "
                         f"found {found}")
    out = []
    for i, weight in enumerate(items):
        # a number, not what float() would make one of ("1.5", True)
        if isinstance(weight, bool) or not isinstance(weight, (numbers.Real, decimal.Decimal)):
            raise ValueError(f"weights[{i}]: expected a finite number, found {describe(weight)}")
        try:
            number = float(weight)
        except (TypeError, ValueError, OverflowError):     # 10**400 is past any float
            number = math.nan
            shown = describe(weight)
        else:
            shown = repr(number)
        if not math.isfinite(number):
            raise ValueError(f"weights[{i}]: expected a finite number, found {shown}")
        out.append(number)
    return tuple(out)


def truth(value: Any, name: str) -> bool:
    """`value` as a bool: True, False, numpy's bools, and the integers 1 and 0 (a column of outcomes
    from an array); ValueError for anything else, which `bool()` would read as true ("false", NaN)."""
    if type(value) is bool:
        return value
    if (type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")) \
            or (type(value) is int and value in (0, 1)):
        return bool(value)
    raise ValueError(f"{name}: expected true or false, found {describe(value)}")


class Fleet:
    """Agents that tasks can be placed on. `engine` is "native", "pure" or None (a3fast.ENGINE)."""

    def __init__(self, engine: str | None = None, *, scorer: Scorer | None = None,
                 weights: tuple[float, float, float, float] = DEFAULT_WEIGHTS):
        self.engine = ENGINE if engine is None else engine
        self._engine = engine_module(engine)
        self._index: Index = self._engine.Index()
        if scorer is not None:
            check_placing_arguments(None, scorer)
        self.scorer = scorer
        self.weights: tuple[float, ...] = _finite_weights(weights)
        check_total_bound(self.weights)
        #: bumped by every change that can alter a placement's result
        self.generation = 0
        #: bumped by every change of who is in the fleet or what they declare (not by sessions or
        #: outcomes, which only scores read): the filter and explanation cache is valid within one
        self.membership = 0
        self._table = AgentTable()
        self._rows = PredicateRows(self._index, self._table, self._engine.NO_AGENT_REF,
                                   self._engine.resolve_predicates, ingest_module(self.engine).Notes)
        self._stages = pipeline.LocalStages(self, self._table, self._rows)
        self._lock = threading.RLock()

    # -- membership -------------------------------------------------------------------------------
    @_locked
    def add(self, declaration: Mapping[str, Any] | Declaration) -> Declaration:
        """Add an agent, or replace the one with the same `(namespace, name)`. Returns the parsed
        declaration; raises SchemaError for an invalid one and FleetError for a name conflict."""
        decl = parse_declaration(declaration)
        name = decl.agent.name
        table, rows = self._table, self._rows
        aid = table.ids.get(name)
        current = table.declaration(aid) if aid is not None and table.is_live(aid) else None
        if current is not None:
            check_namespace(name, current.agent.namespace, decl.agent.namespace)
        if aid is None:
            aid = table.new_id(name)
        if current is not None:
            self._index.drop(aid, rows.rows_of(aid))
        else:
            table.count += 1
        agent_rows = rows.rows_for(decl)
        # A replaced agent keeps the sessions it holds: drop() above left its session rows alone.
        self._index.put(aid, name, agent_rows, cost_score(decl))
        table.entries[aid] = decl
        table.decl_json[aid] = None                # encoded when a record first needs it
        table.member_rows[aid] = agent_rows
        self.generation += 1
        self.membership += 1
        return decl

    @_locked
    def extend(self, declarations: Iterable[Mapping[str, Any] | Declaration]) -> None:
        """Add many agents; new names are interned in one batch (much faster for a large fleet).
        All declarations are parsed before any is added, so an invalid one changes nothing."""
        with collector_paused():
            parsed = parse_declarations(declarations)
            # a name held by another namespace, in the fleet or earlier in the batch, is refused
            # before anything is added: the batch is all or nothing
            held: dict[str, str] = {}
            for decl in parsed:
                name = decl.agent.name
                check_namespace(name, held.get(name, self.namespace_of(name)), decl.agent.namespace)
                held[name] = decl.agent.namespace
            batch: dict[str, Declaration] = {}
            ids = self._table.ids
            for decl in parsed:
                name = decl.agent.name
                if name in ids or name in batch:
                    self._add_batch(batch)
                    batch = {}
                    self.add(decl)
                else:
                    batch[name] = decl
            self._add_batch(batch)

    def _add_batch(self, batch: dict[str, Declaration]) -> None:
        if not batch:
            return
        table, rows = self._table, self._rows
        first = len(table.entries)
        aids, names, all_rows, costs = [], [], [], []
        for offset, (name, decl) in enumerate(batch.items()):
            aid = first + offset
            agent_rows = rows.rows_for(decl)
            table.ids[name] = aid
            table.entries.append(decl)
            table.member_rows.append(agent_rows)
            table.decl_json.append(None)
            aids.append(aid)
            names.append(name)
            all_rows.append(agent_rows)
            costs.append(cost_score(decl))
        self._index.put_many(aids, names, all_rows, costs)
        table.count += len(batch)
        self.generation += 1
        self.membership += 1

    @_locked
    def remove(self, name: str) -> Declaration:
        """Remove an agent by name; its held sessions go with it. FleetError if it is not here."""
        table, rows = self._table, self._rows
        aid = table.live_id(name, "name")
        decl = table.declaration(aid)
        self._index.drop(aid, rows.rows_of(aid) + rows.drop_holder(aid))
        table.entries[aid] = None
        table.decl_json[aid] = None
        table.member_rows[aid] = ()
        table.count -= 1
        self.generation += 1
        self.membership += 1
        return decl

    def __len__(self) -> int:
        return self._table.count

    def __contains__(self, name: object) -> bool:
        # without the lock (the service asks before each change), so read as another thread may
        # leave the table at any step: one table (a compaction replaces it), and a name's id given
        # before its entry is appended (`AgentTable.new_id`)
        if not isinstance(name, str):
            return False
        table = self._table
        aid = table.ids.get(name)
        entries = table.entries
        return aid is not None and aid < len(entries) and entries[aid] is not None

    # Reading a declaration can write the agent table: one loaded from a snapshot or JSON Lines is
    # parsed when first read, and kept. Under the fleet's lock, so that an `add` or `remove` from
    # another thread is never undone by a read that began before it.
    def __iter__(self) -> Iterator[Declaration]:
        """The live declarations in id order, each read under the lock when the iteration reaches
        it (a fleet loaded in bulk is parsed as it is read, and placements are not held up for the
        whole walk): an agent removed before then is left out, one joining after it began is not
        seen. The walk goes by the names live when it began, each looked up in the fleet as it is
        when reached, so a compaction meanwhile (which renumbers the agents) changes nothing; a
        name removed and added back meanwhile is yielded, with its new declaration, in its turn."""
        lock = self._lock
        with lock:
            names = self._table.names()
        for name in names:
            with lock:
                decl = self._table.get(name)
            if decl is not None:
                yield decl

    def get(self, name: str) -> Declaration | None:
        with self._lock:
            return self._table.get(name)

    def names(self) -> list[str]:
        """Live agent names in id order (the order of `candidates` in records). Under the fleet's
        lock: the names are read off a dict that an `add` from another thread may grow."""
        with self._lock:
            return self._table.names()

    def namespace_of(self, name: str) -> str | None:
        """The namespace of a live agent, None if no agent has the name."""
        with self._lock:
            decl = self._table.get(name)
        return decl.agent.namespace if decl is not None else None

    def close(self) -> None:
        """Nothing to release: a fleet in this process holds no outside resource (FleetProtocol)."""

    def _repr_html_(self) -> str | None:
        """How many agents, and the predicates most of them satisfy, as a notebook shows it (the
        view a3fast.report registers; see a3fast.notebook)."""
        return view_html("fleet", self)

    # -- JSON Lines ingest (a3fast.fleet.bulk_load) -----------------------------------------------
    @classmethod
    def load_jsonl(cls, source: JsonlSource, engine: str | None = None, *,
                   on_error: str = "refuse", pack: bool | None = None, **options: Any) -> "Fleet":
        """A fleet from JSON Lines of §3 declarations (a path, or the bytes themselves); see
        `extend_jsonl`. `options` go to the Fleet (scorer, weights)."""
        fleet = cls(engine, **options)
        fleet.extend_jsonl(source, on_error=on_error, pack=pack)
        return fleet

    @_locked
    def extend_jsonl(self, source: JsonlSource, *, on_error: str = "refuse",
                     pack: bool | None = None, first_line: int = 1) -> list[Problem]:
        """Add (or replace) the agents of JSON Lines declarations, in line order, in bulk: a path,
        the bytes themselves, or a binary stream (read 2 MiB of whole lines at a time; its first
        line is numbered `first_line` in problems).

        Each line is validated as `parse_declaration` does (the same problems, under `line N:
        $...`) and kept as its rows, cost and canonical JSON — no Declaration stays alive — then
        new rows and agents are interned in one batch per run of new names (a3fast.fleet.bulk_load:
        the compiled reader on the native engine). A name held by another namespace is a problem of
        its line. With `on_error="refuse"` any problem raises SchemaError listing every one and
        nothing is added; with "skip" the bad lines are left out and their problems returned.
        Blank lines are ignored.

        `pack`: keep the declarations compressed with a dictionary trained on the fleet's own
        (a3fast.declaration_codec) — True, False, or None (the default) for a source of
        `PACK_FROM_BYTES` (256 MiB, about 240,000 declarations of the standard workload) or more.
        Placements and records are the same either way; a packed declaration is expanded when a
        record or a caller needs it. A fleet that packs keeps packing.
        """
        problems, added = read_jsonl(self._table, self._rows, self.engine, source, on_error=on_error,
                                     pack=pack, first_line=first_line)
        if added:
            self.generation += 1
            self.membership += 1
        return problems

    # -- snapshots (a3fast.fleet.persistence, docs/snapshot.md) ---------------------------------------
    @_locked
    def save(self, path: str | os.PathLike) -> None:
        """Write everything that decides placements and records to `path`, whole or not at all:
        agent ids and join order (removed names too), declarations as canonical JSON, the index
        rows, outcomes, held sessions and weights. A custom `scorer` is code and is not saved:
        pass it again to `Fleet.load`."""
        write_snapshot(path, self._table, self._rows, self.engine,
                       Saved(self.weights, self.generation, self.membership))

    @classmethod
    def load(cls, path: str | os.PathLike, engine: str | None = None, *,
             scorer: Scorer | None = None) -> "Fleet":
        """A fleet from a snapshot `save` wrote (by either engine): placements on it are exactly
        those on the saved fleet. SnapshotError names what is wrong with a file that is not a
        snapshot, is of another format version, is cut short or damaged."""
        if not isinstance(path, (str, os.PathLike)):     # an int would be read as an open descriptor
            raise TypeError(f"path: expected a file name (str or os.PathLike), found {describe(path)}")
        fleet = cls(engine, scorer=scorer)
        saved = read_snapshot(path, fleet._table, fleet._rows)
        fleet.weights, fleet.generation, fleet.membership = saved.weights, saved.generation, saved.membership
        return fleet

    @property
    def names_gone(self) -> int:
        """How many names of agents gone the fleet still holds (until `compact`)."""
        return len(self._table.entries) - self._table.count

    @property
    @_locked
    def rows_unused(self) -> int:
        """How many rows the fleet's index holds that no agent is in (until `drop_unused_rows` or
        `compact`): each value an agent ever declared has its row, and so has each session held,
        and one whose agents have left, been re-declared without it or let it go keeps it, empty.
        Counted afresh, in time that grows with the number of rows."""
        return len(self._index.empty_row_ids())

    @_locked
    def drop_unused_rows(self) -> int:
        """Drop the rows no agent is in (`rows_unused`), in place: the agents keep their ids and
        names, their outcomes and held sessions, and the fleet its generation, so every placement
        and record is what it would have been (docs/design.md, reading 3). Returns how many rows
        were dropped."""
        return self._rows.drop_empty_rows()

    @_locked
    def compact(self) -> int:
        """Give the live agents the ids 0, 1, ... in their join order and forget the names of the
        agents gone, with their outcomes, and the rows no agent is in (`rows_unused`): every set
        the engine makes spans the id space, so a fleet whose agents came and went under new names
        places, explains and writes compact records as one that holds only its live agents does
        (docs/design.md, reading 3), and a fleet whose agents were re-declared with ever new values
        holds only the rows of the values declared now. Placements, scores and records of the live
        agents are as they were; a name that comes back later is a new agent, last in the join
        order, with no history. Placements made before keep the index they were made on, and stay
        readable and resumable. With no name gone, only the rows are dropped (`drop_unused_rows`:
        the ids and the generation stay as they are). Returns how many names and rows were
        forgotten (0: nothing to do, nothing changed)."""
        table, rows, index = self._table, self._rows, self._index
        live = [aid for aid in range(len(table.entries)) if table.is_live(aid)]
        forgotten = len(table.entries) - len(live)
        if not forgotten:
            return rows.drop_empty_rows()
        unused = len(index.empty_row_ids())
        # taken before the declarations are read: reading one kept in a snapshot's bytes parses it
        parsed = {at: table.entries[aid] for at, aid in enumerate(live)
                  if isinstance(table.entries[aid], Declaration)}
        fresh = Fleet(self.engine)        # its index, table and rows are taken; weights stay ours
        # the declarations' JSON through the bulk reader: packed ones stay packed, none is parsed
        # here, and the new ids follow the join order
        problems = fresh.extend_jsonl(b"\n".join(table.declaration_json(aid) for aid in live),
                                      pack=table.codec is not None)
        assert not problems, "a fleet's own declarations are read back as they were stored"
        # a declaration already parsed stays parsed (the bulk reader keeps JSON, parsed when first
        # asked for: each agent's first placement after the compaction would pay for it again)
        entries, texts = fresh._table.entries, fresh._table.decl_json
        for at, declaration in parsed.items():
            entries[at], texts[at] = declaration, table.decl_json[live[at]]
        new_id = np.full(len(table.entries), -1, dtype=np.int64)
        new_id[live] = np.arange(len(live))
        for kind, kid in rows.kinds.items():
            counts = np.frombuffer(index.export_outcomes(kid), dtype="<i8").reshape(-1, 3).copy()
            counts[:, 0] = new_id[counts[:, 0]]
            counts = counts[counts[:, 0] >= 0]
            if len(counts):              # a kind only the agents gone were seen at is forgotten too
                fresh._index.import_outcomes(fresh._rows.kind(kind), counts.astype("<i8").tobytes())
        for aid in live:                 # each live agent's sessions, in the order their rows were made
            for row in sorted(rows.held_sessions.get(aid, ())):
                fresh._rows.hold(int(new_id[aid]), rows.session_of_row[row])
        self._index, self._table, self._rows = fresh._index, fresh._table, fresh._rows
        self._stages = pipeline.LocalStages(self, self._table, self._rows)
        self.generation += 1
        self.membership += 1
        return forgotten + unused

    # -- history the scorer reads -----------------------------------------------------------------
    @_locked
    def record_outcome(self, agent: str, kind: str | Requirements | Mapping[str, Any], success: bool) -> None:
        """Learn from a finished task: `kind` is a task kind or the task's requirements."""
        aid = self._table.live_id(agent)
        if not isinstance(kind, str):
            kind = task_kind(parse_requirements(kind))
        success = truth(success, "success")
        self._check_outcomes(agent, aid, kind, int(success), 1)
        self._index.record_outcome(self._rows.kind(kind), aid, success)
        self.generation += 1

    @_locked
    def record_outcomes(self, agent: str, kind: str, successes: int, attempts: int) -> None:
        """Learn `attempts` finished tasks of one kind at once, `successes` of them successful: the
        same as that many `record_outcome` calls, in one step (restoring saved counts). Counts are
        integers (not bools or floats); past MAX_OUTCOMES attempts for the agent and kind, FleetError
        and nothing changes (docs/design.md, Reading 26)."""
        check_outcome_counts(successes, attempts)
        check_text_argument(kind, "kind")      # (a task's requirements are record_outcome's)
        aid = self._table.live_id(agent)
        self._check_outcomes(agent, aid, kind, successes, attempts)
        self._index.add_outcomes(self._rows.kind(kind), aid, successes, attempts)
        self.generation += 1

    def _check_outcomes(self, agent: str, aid: int, kind: str, successes: int, attempts: int) -> None:
        """FleetError, before anything changes, for counts that would pass MAX_OUTCOMES."""
        kid = self._rows.kinds.get(kind, -1)
        had = self._index.outcome(kid, aid)[1] if kid >= 0 else 0
        if attempts > MAX_OUTCOMES - had:
            raise FleetError(f"{agent!r}, kind {kind!r}: {had} + {attempts} outcomes would pass the "
                             f"{MAX_OUTCOMES} a fleet counts for one agent and task kind")

    @_locked       # an id read off one table and looked up in the same index, never across a compaction
    def outcomes(self, agent: str, kind: str | Requirements | Mapping[str, Any]) -> tuple[int, int]:
        """(successes, attempts) recorded for an agent and a task kind (or the task's requirements,
        as `record_outcome` takes them)."""
        if not isinstance(kind, str):
            kind = task_kind(parse_requirements(kind))
        return self._rows.outcome(agent, kind)

    @_locked
    def hold_session(self, agent: str, session: str) -> None:
        """Mark an agent as holding a session's memory (affinity for tasks that continue it)."""
        self._rows.hold(self._table.live_id(agent), session)
        self.generation += 1

    @_locked
    def release_session(self, agent: str, session: str) -> None:
        """The agent no longer holds the session (nothing changes if it did not hold it)."""
        aid = self._table.live_id(agent)
        check_text_argument(session, "session")
        if self._rows.release(aid, session):
            self.generation += 1

    @_locked       # as `outcomes`
    def holds_session(self, agent: str, session: str) -> bool:
        return self._rows.holds(agent, session)

    # -- placing (a3fast.fleet.pipeline) ------------------------
    def place(self, requirements: Mapping[str, Any] | Requirements, session: str | None = None,
              route: Route | None = None, *, scorer: Scorer | None = None, kind: str | None = None,
              remember_session: bool = True, reason_limit: int | None = None,
              candidates: Iterable[str] | None = None) -> Placement:
        """Place one task (§5, §6): prepare, explain, score, choose, build. Returns a Placement.

        `requirements` may be a Requirements prepared once and placed again; it is never parsed
        again. `session` (or the requirements' `session`) is used for affinity only; a bound
        placement makes the chosen agent hold it unless `remember_session` is false (then the
        placement changes nothing in the fleet). `route` is a Route whose additions are matched and
        recorded. A rejection's reason names every candidate that failed each predicate (§6);
        `reason_limit=N` names at most N per predicate and counts the rest, a departure from §6 for
        callers that keep reasons short (filters_failed still lists every one). `candidates`, when
        given, restricts the placement to those agents: names not in the fleet are ignored (the
        caller reports them), and the record's candidates, filters_failed and scores are of those
        agents only, in join order. Raises SchemaError for invalid requirements, ValueError for a
        bad reason_limit or an argument no record can carry, TypeError for a route that is no Route,
        a scorer that cannot be called, or candidates given as one string.
        """
        # The lock is taken here rather than by `_locked`, whose wrapper repacks the keywords: a
        # placement is a few microseconds, of which that was half of one. Arguments are passed by
        # position for the same reason.
        if session is not None:         # what its records and the fleet's snapshot must carry
            check_text_argument(session, "session")
        if kind is not None:
            check_text_argument(kind, "kind")
        if route is not None or scorer is not None:
            check_placing_arguments(route, scorer)
        if type(remember_session) is not bool:
            remember_session = truth(remember_session, "remember_session")
        with self._lock:
            stages, start = self._stages, self.generation
            placement, after = stages.place_one(stages, requirements, session, start, route, reason_limit, kind,
                                                scorer, candidates, remember_session)
            if self.generation is start:         # the usual case, in fewer steps
                self.generation = after
            else:                                # see place_many
                self.generation += after - start
            return placement

    def scored(self, requirements: Mapping[str, Any] | Requirements, session: str | None = None, *,
               kind: str | None = None, candidates: Iterable[str] | None = None,
               scorer: Scorer | None = None) -> Placement:
        """A task through prepare, explain, score and choose, not built: its Placement as the
        choose stage leaves it, with the explanation, the scores and the winner's id (`best`), and
        nothing the build stage sets (the winner's declaration, timings, generation). A shard of a
        sharded fleet answers with it; nothing in the fleet changes. Its arguments are checked as
        `place` checks them."""
        if session is not None:
            check_text_argument(session, "session")
        if kind is not None:
            check_text_argument(kind, "kind")
        if scorer is not None:
            check_placing_arguments(None, scorer)
        with self._lock:
            states, _ = pipeline.drive(self._stages, (requirements,), (session,), self.generation, kind=kind,
                              scorer=scorer, candidates=candidates, build=False)
            return states[0]

    @_locked
    def declaration_json(self, aid: int) -> bytes:
        """The declaration of live agent id `aid` as JSON, as records carry it (IndexError for an
        id the fleet never gave: a negative one is not counted from the end)."""
        if type(aid) is not int or not 0 <= aid < len(self._table.entries):
            raise IndexError(f"agent id {aid!r} does not exist")
        return self._table.declaration_json(aid)

    @_locked
    def declaration_json_of(self, aid: int, declaration: Declaration) -> bytes:
        """`declaration` as JSON, for a placement that chose agent id `aid`
        (`Placement.declaration_json`): kept for the agent while it is still declared by that very
        object (`AgentTable.declaration_json_of`). Under the fleet's lock, since the JSON is kept
        where an update of the agent clears it."""
        return self._table.declaration_json_of(aid, declaration)

    def place_many(self, requirements_list: Iterable[Mapping[str, Any] | Requirements], *,
                   sessions: Sequence[str | None] | None = None, workers: int | None = None,
                   scorer: Scorer | None = None, kind: str | None = None,
                   remember_session: bool = True, reason_limit: int | None = None) -> list[Placement]:
        """Place a batch with the same results and records as `place` one at a time, in order (§6
        timings aside), through the same driver (a3fast.fleet.pipeline.drive).

        Every task is parsed before any is placed (an invalid one raises SchemaError and places
        nothing), and a batch that fails later (a caller's scorer raising in a later wave, say)
        lets go the sessions its earlier waves made agents hold: the fleet is left holding what it
        held, at the same generation. The batch holds the fleet's lock: updates from other threads wait for it, so it
        sees one membership. What must stay in order: a bound placement makes its agent hold the
        task's session, which changes the affinity of later tasks of that session, so with
        `remember_session` the n-th task of each session is decided in the n-th wave; each wave's
        explain and score loops run in the engine with the GIL released, on up to `workers` threads
        (default: one per core; a caller's scorer runs under the GIL): a wave is cut into runs for
        further threads only when each run carries enough of the engine's work to pay for one
        (`pipeline.min_run`: at 1,000 agents a wave of 5,000 tasks or more, at 100,000 one of 64).
        `generation` is numbered as if the batch ran in order. A caller's object whose code changes
        the fleet while a wave is set up (its `__hash__` or `__eq__`, run from this thread, which
        holds the lock) makes the batch raise RuntimeError, placing nothing; a Requirements whose
        `predicates` are no tuple (one a caller made itself) is a TypeError.
        """
        sessions = pipeline.checked_sessions(sessions)
        if kind is not None:
            check_text_argument(kind, "kind")
        if scorer is not None:
            check_placing_arguments(None, scorer)
        remember_session = truth(remember_session, "remember_session")
        if workers is not None and (type(workers) is not int or workers < 1):
            raise ValueError(f"workers: expected None (one per core) or a positive integer, found {describe(workers)}")
        with self._lock:
            start = self.generation
            placements, after = pipeline.drive(
                self._stages, list(requirements_list), sessions, start, reason_limit=reason_limit,
                kind=kind, scorer=scorer, remember_session=remember_session, workers=workers)
            # moved on by the sessions the batch made agents hold (the driver counts them from
            # `start`), on the generation as it is now: code a caller's object ran meanwhile (its
            # `__hash__`, a scorer), from this thread, which holds the re-entrant lock, may have
            # changed the fleet too, and a generation set back would name two fleets by one number
            self.generation += after - start
            return placements

    def resume(self, earlier: Placement, *, seq: int | None = None) -> Placement:
        """A resumed placement (§6): back to the agent `earlier` chose, with no candidates weighed.

        The agent must still be in the fleet and its current declaration must still satisfy every
        predicate matched the first time — the routed requirements, not only the submitted ones —
        since the resumed record is held to the same checks (§7). `seq`: the seq of the task.bound
        that holds its explanation, when the caller wrote it (ValueError for one that is no seq).
        """
        pipeline.check_resumption(earlier, seq)
        with self._lock:
            # a resumption holds nothing, so the generation the driver returns is this one
            placements, _ = pipeline.drive(self._stages, (pipeline.Resumption(earlier, seq),), None,
                                           self.generation)
            return placements[0]

    def explain(self, requirements: Mapping[str, Any] | Requirements) -> Explanation:
        """The filter and first-failed explanation of a task (§5), without scoring: the engine's
        Explanation (candidate, eligible and per-predicate failed id sets), by the explain stage
        every placement takes."""
        with self._lock:
            state = self._stages.prepare_one(requirements, None, None)
            self._stages.explain(state, self.membership)
            return state.explanation

    def all_failed(self, requirements: Mapping[str, Any] | Requirements) -> dict[str, list[str]]:
        """Every predicate each ineligible agent fails, not only the first (derivation order).

        One set difference per predicate over the index; asked for on request only, since it costs
        O(P·N) where the first-failed explanation costs O(P) set operations. Under the fleet's lock:
        the live set and every predicate's row are read from one fleet.
        """
        req = parse_requirements(requirements)
        pipeline.check_predicates(req.predicates)
        with self._lock:
            return self._all_failed(req)

    def _all_failed(self, req: Requirements) -> dict[str, list[str]]:
        index, ids, row_of = self._index, self._table.ids, self._rows.rows
        live = index.live_ids()
        live_set = set(live)
        failing: list[tuple[str, set[int]]] = []
        for p in req.predicates:
            kind, _, arg = p.partition(":")
            if kind == ANTI_AFFINITY:
                aid = ids.get(arg)
                failing.append((p, {aid} & live_set if aid is not None else set()))
            elif kind == AGENT_REF:
                failing.append((p, live_set - {ids.get(arg)}))
            else:
                failing.append((p, live_set - set(index.row_ids(row_of.get(p, -1)))))
        out: dict[str, list[str]] = {}
        for aid in live:
            missed = [p for p, failed in failing if aid in failed]
            if missed:
                out[index.name(aid)] = missed
        return out

    def forget_explanations(self) -> None:
        """Empty the reuse of repeated tasks' explanations, and the notes of sets explained once, so
        the next placement of every task is met afresh, as a task met for the first time is
        (benchmarks measure both)."""
        self._rows.explained.clear()
        self._rows.explained_once.clear()

    @property
    def index(self) -> Index:
        """The engine's index behind this fleet, read-only, for tools that measure or inspect its
        rows (`row_ids`, `row_count`, `explain`); changing it directly breaks the fleet."""
        return self._index

    def filter_rows(self, requirements: Mapping[str, Any] | Requirements) -> list[int]:
        """The index rows of a task's filter predicates in derivation order (-1 for a predicate no
        agent satisfies), for tools that work on the rows themselves."""
        return list(self._rows.resolve_cached(parse_requirements(requirements))[0])

    def index_nbytes(self) -> int:
        """Bytes held by the engine's index (rows and live set)."""
        return self._index.nbytes()

