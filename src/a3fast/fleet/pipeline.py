"""The placing pipeline: every placement is a batch of tasks driven through named stages, each
task's state carried in its own `Placement` from the first stage on. A single placement is a batch
of one.

    prepare  -> parse the task once, apply the route, resolve its session and candidates; the
                task's Placement is made here, the one place one is made (`prepare`,
                `prepare_resumption`)
    explain  -> filter + first-failed explanation (§5), reused for a repeated task
    score    -> the eligible agents' scores: the engine's default scorer, or a caller's
    choose   -> the winner: highest total, ties to the smallest name (a3fast.fleet.scoring.choose)
    build    -> the Placement completed: the winner's declaration, timings, generation
                (`build_placement`)
    hold     -> a bound placement makes its agent hold the task's session

The stages are those of kube-scheduler's framework in spirit: each reads and fills the cycle state
— the Placement being made — and nothing else. The state is not a separate object copied into the
Placement at the end: making and filling a second object cost a prepared placement about a tenth
of its instructions (docs/performance.md, "The Python around the engine, counted in
instructions"). `drive` is the one driver: `Fleet.place` (a batch of one, `place_one`; on the
native engine its compiled twin runs these same steps in one call for the usual task), `place_many`,
`Fleet.scored` (what a shard of a sharded fleet answers with) and `Fleet.resume` — and so the
service's place routes, stdio `place` lines and replays, which call them — run a batch through a
`Stages`:

    prepare  every task, before any is placed (an invalid one places nothing)
    waves    with `remember_session`, the n-th task of a session in wave n (a bound placement's
             held session changes the affinity of the session's next task); every other task in
             the first
    decide   explain, score and choose for a whole wave: with the engine's scorer one
             `Index.place_batch` call, its loops without the GIL (on several threads for a wave
             that carries enough of their work, `min_run`); a caller's scorer task by task,
             under the GIL
    build    the wave's Placements, then `hold` for each bound one with a session, in order;
             `generation` numbered as if the tasks ran one by one

`LocalStages` are the stages over one process's index. A sharded fleet runs `prepare` on its
coordinator, the middle stages on each shard (`Fleet.scored`, through `drive`), merges the shards'
answers, and ends with the same `choose` rule and `build_placement`.

A resumption (§6) is a task of its own, a `Resumption`, that `drive` runs through the same stages:
prepare checks the agent the earlier placement chose against every predicate it matched and
carries the earlier cycle's explanation and scores into a Placement marked `resumed`; decide does
nothing (nothing is filtered or scored again); build completes it; nothing is held.
"""
from __future__ import annotations

import math
import numbers
import os
import sys
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import (TYPE_CHECKING, Any, Callable, Iterable, Mapping, NamedTuple, Protocol, Sequence, final,
                    runtime_checkable)

from ..engines import NATIVE_AVAILABLE, engine_module
from ..errors import A3Error, FleetError, SchemaError, describe
from .placement import CustomScores, Placement, Route, check_reason_limit, resumed_agent
from ..predicates import first_failed
from ..schema import Declaration, Requirements, check_text_argument, parse_requirements, requirements_reader, task_kind
from .scoring import Scorer, ScoringTask, choose, score_entry
from .bulk_load import collector_paused
from . import rows as rows_module
from .rows import PredicateRows
from .table import AgentTable

if TYPE_CHECKING:
    from .._core import Index

__all__ = ["Resumption", "Stages", "drive", "place_one", "waves_of", "prepare",
           "prepare_resumption", "LocalStages", "ResumingStages", "choose_among", "build_placement",
           "resume", "stage_steps", "StageSteps"]


@final       # the stages tell it from a requirements task by its exact type
class Resumption:
    """A task that goes back to the agent an earlier placement chose (§6): `earlier`, the bound
    Placement, and `seq`, the seq of the task.bound that holds its full explanation (None: the
    earlier placement's own)."""

    __slots__ = ("earlier", "seq")

    def __init__(self, earlier: Placement, seq: int | None = None):
        self.earlier = earlier
        self.seq = seq


#: A task as callers give it: a requirements document, Requirements prepared once, or a resumption.
Task = Mapping[str, Any] | Requirements | Resumption


#: The fewest tasks a thread of a batch is given: a run shorter than this costs more to hand over
#: (the new thread waits for the GIL, up to the 5 ms switch interval) than it saves.
MIN_RUN = 32
#: The least engine work, in agent-tasks (a run's tasks times the fleet's agents), that a thread of
#: its own pays for. Only the engine's loops run without the GIL, and their share of a task grows
#: with the fleet: measured on 2 cores, a second thread did not shorten a batch at 1,000 agents
#: (3.95 against 3.98 µs a task in runs of 2,048) and took up to 2.2 times the CPU on the batches
#: the service makes (64–256 tasks); at 10,000 agents runs of 256 tasks were 7–19% faster, at
#: 100,000 runs of 32 were 9–21% (docs/performance.md, "Threads only where the engine's loops pay
#: for them").
MIN_RUN_WORK = 2_500_000



def _finite(number: numbers.Real) -> bool:
    """Whether a number is finite as a float: an integer past any float (10**400) is not."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False

#: Setting up a wave runs a caller's code between its tasks (its objects hashed and compared while a
#: task's rows are found), from the thread that holds the fleet's (re-entrant) lock: code that
#: changes the fleet there would have the wave's tasks decided on two fleets. The batch is refused.
FLEET_CHANGED_IN_WAVE = ("the fleet changed while a batch of placements was being set up (code run from a "
                         "caller's object, its __hash__ or __eq__, changed it): nothing was placed")

FLEET_CHANGED_BY_SCORER = ("the fleet changed while a caller's scorer scored a placement (the scorer's own code "
                           "changed it): the placement would be recorded on another fleet than it was decided "
                           "on, so nothing was placed")


def checked_sessions(sessions: Any) -> Sequence[str | None] | None:
    """A batch's `sessions` as every fleet takes them: None, or one session (a string UTF-8 can
    write) or None per task, an iterator read once into a list; TypeError for one string (it would
    be read as its characters), ValueError naming a session that is not one and its place, before
    anything is placed."""
    if sessions is None:
        return None
    if isinstance(sessions, (str, bytes)):
        raise TypeError(f"sessions: expected a sequence of sessions (one per task), found {describe(sessions)}")
    if not isinstance(sessions, Sequence):
        sessions = list(sessions)
    for i, session in enumerate(sessions):
        if session is not None:
            check_text_argument(session, f"sessions[{i}]")
    return sessions


def rooted_at_task(exc: SchemaError, tasks: Sequence[Any], sessions: Sequence[str | None],
                   prepare: Callable[[Any, str | None], Any]) -> SchemaError:
    """`exc`, raised preparing a batch of several tasks, with its paths rooted at the task that
    raised it (`$[3].capabilities[0].name`), found by preparing the tasks again one at a time: the
    prepare stage changes nothing, and this runs only on the way to a refusal. A batch of one, or a
    refusal no single task raises again, is `exc` as it is."""
    if len(tasks) < 2:
        return exc
    for i, (task, session) in enumerate(zip(tasks, sessions)):
        try:
            prepare(task, session)
        except SchemaError as again:
            return again.with_source(again.source, f"$[{i}]")
    return exc


def check_resumption(earlier: Any, seq: Any) -> None:
    """`Fleet.resume`'s arguments as every fleet takes them: TypeError for an `earlier` that is no
    Placement, ValueError for a `seq` that is no seq of a task.bound, before anything is asked."""
    if not isinstance(earlier, Placement):
        raise TypeError(f"earlier: expected the Placement to resume, found {describe(earlier)}")
    if seq is not None and (type(seq) is not int or not 0 <= seq < 2**63):
        raise ValueError(f"seq: expected the seq of a task.bound (an integer from 0 to 2^63-1), found {seq!r}")


def check_predicates(predicates: Any) -> None:
    """TypeError unless a Requirements' predicates are a tuple of `str`, as the parsers make them
    (a caller may make one itself): every cache, check and record writer counts on that."""
    if type(predicates) is not tuple:
        raise TypeError(f"requirements.predicates: expected a tuple of strings (as parse_requirements makes it), "
                        f"found {type(predicates).__name__}")
    for predicate in predicates:
        if type(predicate) is not str:
            raise TypeError(f"requirements.predicates: expected a tuple of strings (as parse_requirements makes "
                            f"it), found a tuple holding {type(predicate).__name__}")


def min_run(agents: int) -> int:
    """The fewest tasks a thread of a batch over `agents` agents is given (MIN_RUN, and at least
    MIN_RUN_WORK agent-tasks)."""
    return max(MIN_RUN, -(-MIN_RUN_WORK // max(agents, 1)))

#: The cores `workers=None` means, read once: os.cpu_count() reads /sys each call (about 13 µs
#: here), which the service paid on every batch it placed.
CORES = os.cpu_count() or 1


def prepare_resumption(task: Resumption, decl: Declaration | None, declaration_json: bytes | None) -> Placement:
    """A resumption's prepare stage, given the current declaration of the agent the earlier
    placement chose (None: no longer in the fleet). That agent must still satisfy every predicate
    the earlier placement matched — the routed requirements, not only the submitted ones — since
    the resumed record is held to the same checks (§7); else FleetError."""
    started = time.perf_counter_ns()
    earlier = task.earlier
    if decl is None or declaration_json is None:
        raise FleetError(f"cannot resume on {earlier.agent!r}: the agent is no longer in the fleet")
    was = earlier.declaration.agent.namespace if earlier.declaration is not None else decl.agent.namespace
    if decl.agent.namespace != was:
        # the same name in another namespace is another agent: going back to it is no resumption
        raise FleetError(f"cannot resume on {earlier.agent!r}: the agent of that name is now in namespace "
                         f"{decl.agent.namespace!r}, not {was!r} where the earlier placement found it")
    check_predicates(earlier.requirements.predicates)
    unmet = first_failed(decl, earlier.requirements.predicates)
    if unmet is not None:
        raise FleetError(f"cannot resume on {earlier.agent!r}: its declaration no longer satisfies {unmet}")
    # the earlier cycle's outcome, carried over: nothing is filtered or scored again
    state = _new_placement(Placement)
    state.started = started
    state.submitted = earlier.submitted
    state.requirements = earlier.requirements
    state.prepared = False
    state.route = earlier.route
    state.session = earlier.session
    state.kind = earlier.kind
    state.reason_limit = None
    state.scorer = None
    state.within = None
    state.membership = None
    state.resumed = True
    # the placement that weighed the candidates: a resumption of a resumption cites the first's
    state.recorded_in = (task.seq if task.seq is not None
                         else earlier.recorded_in if earlier.resumed else earlier.seq)
    state.explanation, state.scores, state.best = earlier.explanation, earlier.scores, earlier.best
    state.declaration, state._declaration_json = decl, declaration_json
    state.index = earlier.index
    state.selected = time.perf_counter_ns()
    return state


def build_resumed(state: Placement, engine: str, generation: int) -> Placement:
    """A resumption's build stage: the resumed Placement completed (its agent's current
    declaration and the earlier index were set by `prepare_resumption`)."""
    return build_placement(state, engine, state.index, state.declaration, state._declaration_json, generation)


def prepare(requirements: Mapping[str, Any] | Requirements, session: str | None, route: Route | None,
            reason_limit: int | None = None, kind: str | None = None,
            scorer: Scorer | None = None) -> Placement:
    """Stage one: the task parsed once (a `Requirements` is taken as it is), the route applied,
    the session resolved (the caller's, else the requirements'), and the task's Placement made.
    SchemaError for an invalid task, RouteError for a route that would change it, ValueError for a
    bad reason_limit."""
    started = time.perf_counter_ns()
    if reason_limit is not None:
        check_reason_limit(reason_limit)
    submitted = requirements if type(requirements) is Requirements else parse_requirements(requirements)
    matched = route.apply(submitted) if route is not None else submitted
    state = _new_placement(Placement)
    state.started = started
    state.submitted = submitted
    state.requirements = matched
    state.prepared = matched is requirements
    state.route = route.name if route is not None else None
    state.session = session if session is not None else matched.session
    state.kind = kind
    state.reason_limit = reason_limit
    state.scorer = scorer
    state.within = None
    state.membership = None
    state.resumed = False
    state.recorded_in = None
    return state


# A Placement is made without calling its class (type.__call__ and the slot wrapper of __init__
# cost a placement measurable instructions); prepare and prepare_resumption fill it.
_new_placement = object.__new__


def choose_among(names: list[str], totals: list[float]) -> int:
    """The choose stage's rule over candidates given by name and total (a3fast.fleet.scoring.choose):
    the index of the winner, -1 when there is none. The engines apply the same rule in their
    scoring loop; a sharded fleet applies it to its shards' winners."""
    return choose(names, totals)




@runtime_checkable
class Stages(Protocol):
    """The stages a fleet's placements go through (see the module docstring)."""

    def prepare(self, tasks: Sequence[Task], sessions: Sequence[str | None], route: Route | None,
                reason_limit: int | None, kind: str | None, scorer: Scorer | None,
                candidates: Iterable[str] | None) -> list[Placement]:
        """Each task parsed once, routed, its session and the candidates resolved (SchemaError,
        RouteError, ValueError before anything is placed)."""

    def decide(self, states: list[Placement], pool: Executor | None = None, parts: int = 1) -> None:
        """explain, score and choose for tasks that do not depend on one another; `pool` and
        `parts`: threads the engine's loops may be spread on."""

    def build(self, state: Placement, generation: int) -> Placement:
        """The Placement of a decided cycle."""

    def build_wave(self, states: list[Placement], wave: list[int], placements: list[Any], held: list[bool],
                   generation: int, remember_session: bool) -> None:
        """`build` for each task of a decided wave, and `hold` for each bound one with a session
        (the module's `build_wave`)."""

    def hold(self, agent: str, session: str) -> bool:
        """The agent holds the session; True when it did not hold it yet."""

    def release(self, agent: str, session: str) -> None:
        """`hold` undone, for a batch that fails after holding (stages without it: nothing undone)."""

    def min_run(self) -> int:
        """The fewest tasks of a wave worth a thread of their own in `decide`."""


def waves_of(sessions: Sequence[str | None], remember_session: bool) -> list[list[int]]:
    """Task positions in waves, each in order: with `remember_session` the n-th task of a session
    in wave n (it must see what the (n-1)-th made its agent hold); every other task in wave 0."""
    if not remember_session:
        return [list(range(len(sessions)))]
    waves: list[list[int]] = [[]]
    seen: dict[str, int] = {}
    for i, session in enumerate(sessions):
        wave = 0
        if session is not None:
            wave = seen.get(session, 0)
            seen[session] = wave + 1
            if wave == len(waves):
                waves.append([])
        waves[wave].append(i)
    return waves


def drive(stages: Stages, tasks: Sequence[Task], sessions: Sequence[str | None] | None,
          generation: int, route: Route | None = None, reason_limit: int | None = None,
          kind: str | None = None, scorer: Scorer | None = None,
          candidates: Iterable[str] | None = None, remember_session: bool = True,
          workers: int | None = 1, build: bool = True) -> tuple[list[Any], int]:
    """Place `tasks` (with `sessions` beside them, or their own) in order through `stages`.

    Returns the Placements (decided but not built when not `build`: nothing is held and nothing
    changes) and the fleet's generation after the sessions the placements made their agents hold.
    `workers`: threads for the engine's loops at most (None: one per core); a pool is started only
    for a wave long enough to hand each further thread a run of `stages.min_run()` tasks.
    """
    if sessions is not None and len(sessions) != len(tasks):      # a batch of one too
        for task in tasks:      # an invalid task is named before a miscounted batch
            if type(task) is not Requirements and type(task) is not Resumption:
                parse_requirements(task)
        raise ValueError(f"sessions: {len(sessions)} for {len(tasks)} tasks")
    if len(tasks) != 1:
        with collector_paused():
            return _drive_batch(stages, tasks, sessions, generation, route, reason_limit, kind, scorer,
                                candidates, remember_session, workers, build)
    # a batch of one: the same stages, without waves or a pool
    states = stages.prepare(tasks, sessions if sessions is not None else (None,), route, reason_limit,
                            kind, scorer, candidates)
    stages.decide(states)
    if not build:
        return states, generation
    p = stages.build(states[0], generation)
    return [p], generation + hold_placed_session(stages.hold, p, states[0].session, remember_session)


def hold_placed_session(hold: Callable[[str, str], bool], p: Placement, session: str | None,
                        remember_session: bool) -> bool:
    """The session rule of a built placement, the one every driver applies (a Fleet's, whose
    compiled steps write it out, and a sharded fleet's coordinator): a bound placement of a session
    makes its agent hold it (`hold(agent, session)`, true when the agent came to hold it now) with
    `remember_session`, and is recorded as leaving it unheld without (bound or rejected: a replay
    that binds it holds nothing for it either; docs/design.md, reading 25). Whether the agent came
    to hold it now, which moves the fleet's generation on by one.

    A resumption holds nothing and leaves the generation as it is, as resuming always has: it makes
    no new choice (its agent is the one the earlier placement bound, which held the session then if
    it was to), and holding would renumber the generation of its record and of every record after
    it, which existing traces and their replays hold byte for byte."""
    if session is None or p.resumed:
        return False
    if not remember_session:
        p.session_held = False
        return False
    return p.agent is not None and bool(hold(p.agent, session))


def place_one(stages: Stages, task: Task, session: str | None, generation: int, route: Route | None = None,
              reason_limit: int | None = None, kind: str | None = None, scorer: Scorer | None = None,
              candidates: Iterable[str] | None = None, remember_session: bool = True) -> tuple[Placement, int]:
    """One task through `drive`, a batch of one: its Placement and the fleet's generation after it
    (what `Fleet.place` does). The native engine's twin, `_core.place_one`, runs the same stages for
    the usual task in one call."""
    placements, generation = drive(stages, (task,), (session,), generation, route, reason_limit, kind, scorer,
                                   candidates, remember_session)
    return placements[0], generation


def _drive_batch(stages: Stages, tasks: Sequence[Task], sessions: Sequence[str | None] | None,
                 generation: int, route: Route | None, reason_limit: int | None, kind: str | None,
                 scorer: Scorer | None, candidates: Iterable[str] | None, remember_session: bool,
                 workers: int | None, build: bool) -> tuple[list[Any], int]:
    """`drive` for a batch, with the cyclic collector paused: a batch's Placements
    all live until it returns, and every collection they would trigger rescans them for nothing."""
    states = stages.prepare(tasks, sessions if sessions is not None else [None] * len(tasks), route,
                            reason_limit, kind, scorer, candidates)
    # the sessions are read only when waves depend on them
    waves = (waves_of([state.session for state in states], True) if remember_session and build
             else [list(range(len(states)))])
    n = max(1, min(workers or CORES, len(states)))
    # a pool only when some wave can be cut into runs that carry enough of the engine's work to
    # pay for a thread (`min_run`): for less, starting the pool and handing runs over costs more
    # than the second core saves
    pool = (ThreadPoolExecutor(n - 1, thread_name_prefix="a3fast-place")
            if n > 1 and max(map(len, waves)) >= 2 * _min_run_of(stages) else None)
    placements: list[Any] = [None] * len(states)
    held = [False] * len(states)
    try:
        for wave in waves:
            stages.decide(states if len(waves) == 1 else [states[i] for i in wave], pool, n)
            if build:
                stages.build_wave(states, wave, placements, held, generation, remember_session)
    except BaseException:
        # a batch is placed whole or not at all: a later wave's failure (a caller's scorer, say)
        # lets go the sessions earlier waves made their agents hold, so the fleet is as it was, at
        # the generation it still has
        release = getattr(stages, "release", None)
        if release is not None:
            for i, did_hold in enumerate(held):
                if did_hold:
                    release(placements[i].agent, states[i].session)
        raise
    finally:
        if pool is not None:
            pool.shutdown()
    if not build:
        return states, generation
    if any(held):       # else every Placement has the batch's `generation` already, as built
        for p, did_hold in zip(placements, held):   # numbered in the tasks' order, as one by one would
            p.generation = generation
            generation += did_hold
    return placements, generation


def _min_run_of(stages: Stages) -> int:
    """`stages.min_run()`; MIN_RUN for stages written before the protocol asked for it."""
    min_run_of = getattr(stages, "min_run", None)
    return min_run_of() if min_run_of is not None else MIN_RUN


def build_wave(stages: Stages, states: list[Placement], wave: list[int], placements: list[Any],
               held: list[bool], generation: int, remember_session: bool) -> None:
    """The build stage of a decided wave (`states` at the positions `wave`), in order: each
    Placement into `placements`, and whether its agent came to hold the task's session into `held`
    (`hold_placed_session`)."""
    build_one = stages.build
    for i in wave:
        state = states[i]
        p = placements[i] = build_one(state, generation)
        if state.session is not None:
            held[i] = hold_placed_session(stages.hold, p, state.session, remember_session)


class LocalStages:
    """The stages over one process's index (the `Stages` that `drive` runs for a Fleet):
    prepare, decide (explain, score, choose), build, and hold a bound placement's session."""

    __slots__ = ("fleet", "table", "rows", "index", "engine", "prepare_one", "prepare_each", "gather_one",
                 "decide_one", "decide_wave", "build_one", "build_decided", "build_each",
                 "place_one")

    def __init__(self, fleet: Any, table: AgentTable, rows: PredicateRows):
        #: the Fleet whose membership, weights, scorer and history the stages read
        self.fleet = fleet
        self.table = table
        self.rows = rows
        self.index: Index = rows.index
        self.engine: str = fleet.engine
        #: the per-task steps as the fleet's engine runs them (`stage_steps`): `prepare`,
        #: `_prepare_each`, `_gather`, `_decide_one`, `_decide_wave`,
        #: `build_placement`, `_build_decided`, `build_wave` and `place_one` (a whole batch of one),
        #: or their compiled twins
        (self.prepare_one, self.prepare_each, self.gather_one, self.decide_one, self.decide_wave,
         self.build_one, self.build_decided, self.build_each, self.place_one) = stage_steps(self.engine)

    def prepare(self, tasks: Sequence[Task], sessions: Sequence[str | None], route: Route | None,
                reason_limit: int | None, kind: str | None, scorer: Scorer | None,
                candidates: Iterable[str] | None) -> list[Placement]:
        """`prepare` for each task, with the fleet's scorer when the caller gives none, and
        `candidates` (names) turned once into the live agent ids the placements are restricted to."""
        scorer = scorer or self.fleet.scorer
        try:
            states = self.prepare_each(self, tasks, sessions, route, reason_limit, kind, scorer)
        except SchemaError as exc:
            raise self._rooted(exc, tasks, sessions, route, reason_limit, kind, scorer) from None
        if candidates is not None:
            within = self.table.live_ids_of(candidates)
            for state in states:
                state.within = within
        return states

    def _rooted(self, exc: SchemaError, tasks: Sequence[Task], sessions: Sequence[str | None],
                route: Route | None, reason_limit: int | None, kind: str | None,
                scorer: Scorer | None) -> SchemaError:
        """`rooted_at_task` for `prepare`'s refusal (a method of its own: the function it passes
        would make `prepare` hold closure cells on every call)."""
        return rooted_at_task(exc, tasks, sessions, lambda task, session: (
            self.prepare_resumption(task) if type(task) is Resumption
            else self.prepare_one(task, session, route, reason_limit, kind, scorer)))

    def _prepare_each(self, tasks: Sequence[Task], sessions: Sequence[str | None], route: Route | None,
                      reason_limit: int | None, kind: str | None, scorer: Scorer | None) -> list[Placement]:
        """The prepare stage of each task beside its session, in order: `prepare`, or
        `prepare_resumption` for a resumption."""
        prepare_one = self.prepare_one
        # a loop, not a comprehension: a comprehension's free variables would be cells, made on
        # every call of this method
        states = []
        for task, session in zip(tasks, sessions):
            states.append(self.prepare_resumption(task) if type(task) is Resumption
                          else prepare_one(task, session, route, reason_limit, kind, scorer))
        return states

    def prepare_resumption(self, task: Resumption) -> Placement:
        """A resumption's prepare stage over this fleet: the current declaration of the agent the
        earlier placement chose (FleetError if it chose none), checked by `prepare_resumption`."""
        agent = resumed_agent(task.earlier)
        table = self.table
        decl = table.get(agent)     # None for a name no longer live (its id may be kept)
        return prepare_resumption(task, decl, table.declaration_json(table.ids[agent]) if decl is not None else None)

    def _gather(self, state: Placement, membership: int) -> tuple[Any, Any, int, Any]:
        """The explain stage up to the engine: the one path every placement and `Fleet.explain`
        take. Returns `(explanation, rows, only, excluded)`: an explanation already made (a task
        seen before against the same membership: it depends only on the predicates and who is in
        the fleet; or one restricted to `within`, made here, never kept, since it is not the task's
        explanation), else None and the engine's arguments for making it. Derives the task's kind
        when outcomes or a scorer need it, and sets `eval_rows`, `membership` and `gathered`."""
        rows, matched = self.rows, state.requirements
        check_predicates(matched.predicates)
        within = state.within
        # a placement over some agents only does not show who is live: no count to key on
        state.membership = membership if within is None else None
        needs_kind = state.kind is None and bool(rows.kinds or state.scorer)
        cached = rows.explained.get(matched.predicates) if within is None else None
        if cached is not None and cached[0] == membership:
            state.eval_rows = cached[2]
            if needs_kind:
                state.kind = task_kind(matched)
            state.gathered = time.perf_counter_ns()
            return cached[1], (), 0, ()
        ids, only, excluded, state.eval_rows = rows.resolve_cached(matched)
        if needs_kind:
            state.kind = task_kind(matched)
        state.gathered = time.perf_counter_ns()
        if within is not None:
            return self.index.explain(ids, only, excluded, within), (), 0, ()
        return None, ids, only, excluded

    def explain(self, state: Placement, membership: int) -> None:
        """The explain stage on its own: filter and first-failed explanation (§5), kept for the
        task's next placement (a caller's scorer, and `Fleet.explain`, score nothing natively)."""
        expl, ids, only, excluded = self.gather_one(self, state, membership)
        if expl is None:
            expl = self.index.explain(ids, only, excluded)
            self.rows.remember(state.requirements.predicates, membership, expl, state.eval_rows)
        state.explanation = expl

    def decide(self, states: list[Placement], pool: Executor | None = None, parts: int = 1) -> None:
        """explain, score and choose for tasks whose scores do not depend on one another (no two
        of one remembered session). With the engine's scorer, the tasks of a batch go through
        `decide_wave`: one batch of the engine's loops, run with the GIL released (with a `pool`,
        cut into `parts` runs on as many threads), and a single task through the engine's
        `explain` and `score`, which give the same (tests/fleet/test_place_many.py). A caller's
        scorer runs under the GIL, task by task."""
        if len(states) == 1:
            state = states[0]
            if state.resumed:
                return      # a resumption: its explanation and scores are the earlier cycle's
            if state.scorer is None:
                self.decide_one(self, state)
                return
        fleet = self.fleet
        membership = fleet.membership
        # the engine decides the tasks without a caller's scorer; a resumption is left as it is
        native = [state for state in states if state.scorer is None and not state.resumed]
        if len(native) < len(states):
            for state in states:
                if state.scorer is not None and not state.resumed:
                    self.explain(state, membership)
                    state.scores = self.custom_scores(state)
                    self.choose(state)
        if native:
            self.decide_wave(self, native, membership, fleet.weights, pool, min(parts, len(native) // self.min_run()))

    def _decide_wave(self, states: list[Placement], membership: int, weights: Sequence[float],
                     pool: Executor | None, parts: int) -> None:
        """explain, score and choose for the Placements of a wave with the engine's scorer: each
        one's gather stage and `Index.place_batch` job, the batch (in `parts` runs, one call each,
        all but the first on `pool`'s threads, when `parts` > 1), then each one's explanation,
        scores and winner taken back, in order, and the fresh explanations kept."""
        gather = self.gather_one
        session_rows, kinds = self.rows.session_rows, self.rows.kinds
        jobs: list[tuple[Any, ...]] = []
        fresh: list[Placement] = []
        generation = self.fleet.generation
        for state in states:
            expl, ids, only, excluded = gather(self, state, membership)
            if expl is None:
                fresh.append(state)
            session, kind = state.session, state.kind
            jobs.append((expl, ids, only, excluded, state.eval_rows,
                         session_rows.get(session, -1) if session is not None else -1,
                         kinds.get(kind, -1) if kind is not None else -1))
        if self.fleet.generation != generation:
            raise RuntimeError(FLEET_CHANGED_IN_WAVE)
        index = self.index
        if pool is None or parts <= 1:
            results = index.place_batch(jobs, weights)
        else:
            # runs of as near one length as may be (k·n // parts on), so none is shorter than the
            # min_run that `parts` was counted by; loops, not comprehensions: a comprehension's
            # free variables would be cells, made on every call
            n = len(jobs)
            runs = []
            for k in range(1, parts):
                runs.append(pool.submit(index.place_batch, jobs[k * n // parts:(k + 1) * n // parts], weights))
            results = index.place_batch(jobs[:n // parts], weights)
            for run in runs:
                results += run.result()
        selected = time.perf_counter_ns()
        for state, (expl, scores) in zip(states, results):
            state.explanation, state.scores, state.best = expl, scores, scores.best
            state.selected = selected
        remember = self.rows.remember
        for state in fresh:
            remember(state.requirements.predicates, membership, state.explanation, state.eval_rows)

    def _decide_one(self, state: Placement) -> None:
        """`decide` for one task with the engine's scorer: the explain stage, then the engine's
        score call (what place_batch does for each task, without setting up a batch and letting go
        of the GIL for a few microseconds)."""
        fleet, rows = self.fleet, self.rows
        # this class's explain stage, as the compiled twin runs it, whatever a subclass makes of its own
        LocalStages.explain(self, state, fleet.membership)
        session, kind = state.session, state.kind
        scores = state.scores = self.index.score(
            state.explanation, state.eval_rows, rows.session_rows.get(session, -1) if session is not None else -1,
            rows.kinds.get(kind, -1) if kind is not None else -1, fleet.weights)
        state.best = scores.best
        state.selected = time.perf_counter_ns()

    def custom_scores(self, state: Placement) -> CustomScores:
        """Scores from a caller's scorer: one mapping with a numeric `total` per eligible agent."""
        assert state.scorer is not None
        ids = state.explanation.eligible_ids()
        agents = [self.table.declaration(i) for i in ids]
        session = state.session
        kind = state.kind if state.kind is not None else task_kind(state.requirements)
        # read off this placement's own table, rows and index, without the fleet's lock (which the
        # placement holds, so nothing compacts meanwhile): a scorer may ask from threads of its own
        rows = self.rows
        task = ScoringTask(state.requirements, session, kind,
                           outcomes=lambda name: rows.outcome(name, kind),
                           holds_session=lambda name: session is not None and rows.holds(name, session))
        generation = self.fleet.generation
        raw = list(state.scorer(task, agents))
        if self.fleet.generation != generation:
            # its placement would be decided on one fleet and recorded with another's declarations
            raise RuntimeError(FLEET_CHANGED_BY_SCORER)
        if len(raw) != len(ids):
            raise A3Error(f"scorer returned {len(raw)} scores for {len(ids)} eligible agents")
        entries = []
        for decl, entry in zip(agents, raw):
            total = entry.get("total") if isinstance(entry, Mapping) else None
            if isinstance(total, bool) or not isinstance(total, numbers.Real) or not _finite(total):
                # JSON has no NaN or infinity: the record could not state such a total
                raise A3Error(f"scorer gave agent {decl.agent.name!r} no finite numeric 'total'")
            try:            # refused now, not when a record of it is first written
                stated = score_entry(entry)
            except ValueError as exc:
                raise A3Error(f"scorer gave agent {decl.agent.name!r} {exc}") from None
            entries.append({"total": float(total), **{k: v for k, v in stated.items() if k != "total"}})
        return CustomScores(ids, entries, -1)

    def choose(self, state: Placement) -> None:
        """The winner of a caller's scores, by the rule the engine's scoring loop applies to its
        own (a3fast.fleet.scoring.choose)."""
        scores = state.scores
        name = self.index.name
        j = choose_among([name(i) for i in scores.ids], [e["total"] for e in scores.entries])
        scores.best = scores.ids[j] if j >= 0 else -1
        state.best = scores.best
        state.selected = time.perf_counter_ns()

    def build(self, state: Placement, generation: int) -> Placement:
        """The build stage for a decided Placement, or a resumption's (`_build_decided`)."""
        return self.build_decided(self, state, generation)

    def build_wave(self, states: list[Placement], wave: list[int], placements: list[Any], held: list[bool],
                   generation: int, remember_session: bool) -> None:
        """The module's `build_wave` over these stages, as the fleet's engine runs it."""
        self.build_each(self, states, wave, placements, held, generation, remember_session)

    def _build_decided(self, state: Placement, generation: int) -> Placement:
        """`build`: the Placement completed with the chosen agent's declaration and its JSON."""
        if state.resumed:
            return build_resumed(state, self.engine, generation)
        best = state.best
        if best >= 0:
            table = self.table
            declaration = table.declaration(best)
            # its JSON where the table holds it (one read from stored text keeps that text), else
            # made when a record first asks for it, through the fleet
            text = table.decl_json[best]
            return self.build_one(state, self.engine, self.index, declaration, text, generation,
                                  self.fleet if text is None else None)
        return self.build_one(state, self.engine, self.index, None, None, generation)

    def hold(self, agent: str, session: str) -> bool:
        """A bound placement's agent holds its task's session (PredicateRows.hold). True when it did
        not hold it yet; the driver numbers `generation` by it."""
        return self.rows.hold(self.table.ids[agent], session)

    def release(self, agent: str, session: str) -> None:
        """`hold` undone (PredicateRows.release): a batch that fails lets go what it held."""
        self.rows.release(self.table.ids[agent], session)

    def min_run(self) -> int:
        """`min_run` of the fleet's live agents: the engine's loops walk a bitmap word per 64."""
        return min_run(self.table.count)


def build_placement(state: Placement, engine: str, index: Any, declaration: Declaration | None,
                    declaration_json: bytes | None, generation: int, fleet: Any = None) -> Placement:
    """The last stage: the decided Placement completed — `declaration` is the chosen agent's (None:
    none), `index` the engine index whose ids its explanation and scores hold — and returned.
    `declaration_json` is the declaration's JSON, or None to make it when it is first asked for,
    kept by `fleet` (the one that placed it) when one is given (`Placement.declaration_json`)."""
    state.fleet_engine = engine
    state.index = index
    state.custom_scores = type(state.scores) is CustomScores
    state.declaration = declaration
    state._declaration_json = declaration_json
    state._fleet = fleet
    state.agent = declaration.agent.name if declaration is not None else None
    # the phases are read from the clock readings when asked for (`Placement.gather_ns`)
    state._gather_ns = state._select_ns = ...
    state.decided_at_ns = time.time_ns()
    state.generation = generation
    state.seq = None
    state.session_held = None
    state._scheduling = None
    # what only the middle stages read: a placement kept by its caller keeps neither alive
    state.scorer = state.within = None
    return state


class StageSteps(NamedTuple):
    """The per-task steps of the stages as one engine runs them (`stage_steps`). Every one but
    `prepare` and `build_placement` takes the LocalStages first, as its methods do."""

    prepare: Callable[..., Placement]
    prepare_each: Callable[..., list[Placement]]
    gather: Callable[..., tuple[Any, Any, int, Any]]
    decide_one: Callable[..., None]
    decide_wave: Callable[..., None]
    build_placement: Callable[..., Placement]
    build_decided: Callable[..., Placement]
    build_wave: Callable[..., None]
    place_one: Callable[..., tuple[Placement, int]]


def stage_steps(engine: str) -> StageSteps:
    """The steps for a fleet on `engine`: the Python ones (`prepare`, `LocalStages._prepare_each`,
    `_gather`, `_decide_one`, `_decide_wave`, `build_placement`, `_build_decided`,
    `build_wave`, `place_one`) for the pure engine, the native engine's compiled twins
    (`_core.prepare`, `_core.prepare_each`, ...: the same fields with the same values, stored
    straight into the Placement's slots, and the same cache entries) for the native one."""
    if engine == "native" and NATIVE_STEPS:
        native = engine_module("native")
        return StageSteps(native.prepare, native.prepare_each, native.gather, native.decide_one, native.decide_wave,
                          native.build_placement, native.build_decided, native.build_wave, native.place_one)
    return StageSteps(prepare, LocalStages._prepare_each, LocalStages._gather, LocalStages._decide_one,
                      LocalStages._decide_wave, build_placement,
                      LocalStages._build_decided, build_wave, place_one)


#: Whether the native engine's build has the compiled steps, the batch's loops included: one built
#: before them has not, and its fleets run the Python steps rather than fail to import.
NATIVE_STEPS = NATIVE_AVAILABLE and hasattr(engine_module("native"), "decide_wave")
if NATIVE_STEPS:
    _native = engine_module("native")
    _native.bind_placement(Placement, CustomScores, Requirements, parse_requirements, check_reason_limit,
                           task_kind, read_requirements=requirements_reader("native"), declaration=Declaration,
                           rows_namespace=vars(rows_module), drive=drive, resumption=Resumption,
                           fleet_changed=FLEET_CHANGED_IN_WAVE, check_predicates=check_predicates)
    _native.bind_holders(LocalStages, PredicateRows, AgentTable)


class ResumingStages:
    """The stages of a resumption whose agent's current declaration the caller looked up itself (a
    sharded fleet's coordinator): prepare checks it, decide does nothing, build makes the resumed
    Placement, and nothing is held."""

    __slots__ = ("engine", "declaration", "declaration_json")

    def __init__(self, engine: str, declaration: Declaration | None, declaration_json: bytes | None):
        self.engine = engine
        self.declaration = declaration
        self.declaration_json = declaration_json

    def prepare(self, tasks: Sequence[Task], sessions: Sequence[str | None], route: Route | None,
                reason_limit: int | None, kind: str | None, scorer: Scorer | None,
                candidates: Iterable[str] | None) -> list[Placement]:
        states: list[Placement] = []
        for task in tasks:
            if type(task) is not Resumption:
                raise TypeError(f"ResumingStages run resumptions only, not {type(task).__name__}")
            resumed_agent(task.earlier)
            states.append(prepare_resumption(task, self.declaration, self.declaration_json))
        return states

    def decide(self, states: list[Placement], pool: Executor | None = None, parts: int = 1) -> None:
        """Nothing: a resumption's explanation and scores are the earlier cycle's."""

    def build(self, state: Placement, generation: int) -> Placement:
        assert state.resumed
        return build_resumed(state, self.engine, generation)

    def build_wave(self, states: list[Placement], wave: list[int], placements: list[Any], held: list[bool],
                   generation: int, remember_session: bool) -> None:
        build_wave(self, states, wave, placements, held, generation, remember_session)

    def hold(self, agent: str, session: str) -> bool:
        return False        # never called: the driver holds nothing for a resumption

    def release(self, agent: str, session: str) -> None:
        pass                # nothing held, so nothing to let go

    def min_run(self) -> int:
        return sys.maxsize  # no thread: deciding a resumption runs nothing


def resume(earlier: Placement, engine: str, decl: Declaration | None, declaration_json: bytes | None,
           generation: int, seq: int | None) -> Placement:
    """A resumed placement (§6) given the current declaration of the agent `earlier` chose (None:
    no longer in the fleet), through `drive` (`ResumingStages`): what a sharded fleet's
    coordinator, which looks the declaration up on a shard, calls."""
    placements, _ = drive(ResumingStages(engine, decl, declaration_json), (Resumption(earlier, seq),),
                          None, generation)
    return placements[0]
