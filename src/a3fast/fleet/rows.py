"""The predicate rows of a fleet's index and the caches built on them.

Every predicate string an agent satisfies is a row of the engine's index (the agent ids that
satisfy it); a capability also has the row of agents that substantiate it, a held session a row of
its holders, and a task kind a column of outcomes. Predicate rows are interned the first time a
value is seen and are append-only, which is what lets a task's resolution to rows be kept until the
fleet interns something new, and a task's explanation be kept until its membership changes; the
one exception, the removal of rows no agent is in (`drop_empty_rows`), empties both caches.

A session's row is made when it is first held and serves again, for another session, once no agent
holds it (a service that gives each conversation its own session would otherwise grow by a row and
an entry per conversation for good: about 190–300 bytes of memory and 40 of every snapshot each). Until
then the session keeps its row, which holds no agent, exactly as a session never held: no
resolution reads session rows, and a placement looks its session's row up as it is decided.
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any, Callable

from ..predicates import (CAPABILITY, CLEARANCE, LATENCY, RESIDENCY, TOOL,
                          capability, clearance, latency_class, residency, tool)
from ..schema import Declaration, Requirements, check_text_argument
from .table import AgentTable

if TYPE_CHECKING:
    # Both engines' Index has the interface of the native one, whose stub (_core.pyi) mypy reads.
    from .._core import Explanation, Index

__all__ = ["PredicateRows", "Resolution", "EVALUATED", "INGEST_KINDS", "RESOLVED_CACHE_SIZE",
           "NOTED_ONCE_LIMIT", "EXPLAINED_CACHE_BUDGET"]

#: `field_rows` tag of a capability's "substantiates it" row (beside the predicate kinds).
EVALUATED = "evaluated"
#: The predicate string of a declared value, per kind (capabilities take a name and a version).
KEY_OF = {CLEARANCE: clearance, TOOL: tool, RESIDENCY: residency, LATENCY: latency_class}
#: The kinds of value the compiled reader asks rows for, by its codes (a3fast._ingest).
INGEST_KINDS = (CAPABILITY, CLEARANCE, TOOL, RESIDENCY, LATENCY, EVALUATED)

#: Predicate sets resolved to engine arguments, kept (predicate rows and ids are append-only within
#: one PredicateRows, which a compaction replaces and a drop of empty rows empties this cache of,
#: and no resolution reads a session row, so a
#: resolution stays valid until the fleet interns something new); bounded so that one-off sets
#: cannot pile up.
RESOLVED_CACHE_SIZE = 1024
#: Predicate sets resolved once, and explained once, each noted by its hash without holding
#: anything, at most this many of each (then forgotten at once): a resolution and an explanation
#: are kept from the second time they are made on (`resolve_cached`, `remember`).
NOTED_ONCE_LIMIT = 4096
#: How many agent-sized explanations the repeated-task cache holds: 4,194 tasks at 1,000 agents,
#: 41 at 100,000 (an explanation holds P + 1 sets as large as the fleet's id space: every agent ever
#: added, removed ones included, so a fleet whose agents come and go under new names keeps fewer).
EXPLAINED_CACHE_BUDGET = 1 << 22

#: A task's predicates as the engine's arguments: filter rows, agentRef id, excluded ids, and the
#: rows of agents that substantiate each required capability.
Resolution = tuple[list[int], int, list[int], list[int]]


def _session_state(session_rows: dict[str, int], held_sessions: dict[int, set[int]]
                   ) -> tuple[dict[int, str], dict[int, int], list[int], set[int]]:
    """What `PredicateRows` derives from its session rows and who holds them: each row's session,
    each held row's holders, and the rows no agent holds (a heap, and its set)."""
    session_of_row = {row: session for session, row in session_rows.items()}
    holders: dict[int, int] = {}
    for rows in held_sessions.values():
        for row in rows:
            holders[row] = holders.get(row, 0) + 1
    free = sorted(row for row in session_of_row if row not in holders)
    return session_of_row, holders, free, set(free)


class PredicateRows:
    """Rows by predicate, session and kind, and the resolution and explanation caches (see the
    module docstring). The fleet package's modules read and fill its attributes."""

    __slots__ = ("index", "table", "no_agent_ref", "resolve_predicates", "rows", "eval_rows", "session_rows", "kinds",
                 "field_rows", "held_sessions", "resolved", "resolved_once", "explained", "explained_once",
                 "session_holders", "session_of_row", "free_session_rows", "free_listed")

    def __init__(self, index: Index, table: AgentTable, no_agent_ref: int,
                 resolve_predicates: Callable[..., Resolution], notes: Callable[[], Any]):
        self.index = index
        self.table = table
        #: the engine's "no agentRef" argument
        self.no_agent_ref = no_agent_ref
        #: the engine's `resolve_predicates` (the same arguments from either engine)
        self.resolve_predicates = resolve_predicates
        self.rows: dict[str, int] = {}          # predicate string -> row
        self.eval_rows: dict[str, int] = {}     # capability predicate -> row of agents that evaluate it
        self.session_rows: dict[str, int] = {}  # session id -> row of agents holding it
        self.kinds: dict[str, int] = {}         # task kind -> outcome column
        # predicate kind -> declared value ((name, version) for capabilities) -> row
        self.field_rows: dict[str, dict] = {kind: {} for kind in (*KEY_OF, CAPABILITY, EVALUATED)}
        self.held_sessions: dict[int, set[int]] = {}   # agent id -> session rows, holders only
        self.session_holders: dict[int, int] = {}      # session row -> how many agents hold it (> 0)
        self.session_of_row: dict[int, str] = {}       # session row -> its session
        # session rows no agent holds, smallest first (a heap; an entry held again since is passed
        # over when met), and the rows listed in it, each at most once: which row a new session
        # takes depends on the fleet alone, never on the order it was let go in, so a fleet
        # restored from its snapshot goes on numbering as the fleet it was saved from
        self.free_session_rows: list[int] = []
        self.free_listed: set[int] = set()
        # predicates -> (interned count, engine arguments) (resolve_cached)
        self.resolved: dict[tuple[str, ...], tuple] = {}
        # hashes of predicate sets resolved once, not holding them (resolve_cached), in a `notes()`:
        # the engine's `seen.Notes`, compiled on the native one
        self.resolved_once = notes()
        # predicates -> (membership, explanation, eval rows)
        self.explained: dict[tuple[str, ...], tuple] = {}
        # hashes of predicate sets explained once, not holding them (remember)
        self.explained_once = notes()

    # -- interning --------------------------------------------------------------------------------
    def row(self, key: str) -> int:
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = self.index.add_row()
        return row

    def eval_row(self, key: str) -> int:
        row = self.eval_rows.get(key)
        if row is None:
            row = self.eval_rows[key] = self.index.add_row()
        return row

    def session_row(self, session: str) -> int:
        """The row of agents holding `session`, made the first time the session is held."""
        row = self.session_rows.get(session) if type(session) is str else None
        if row is None:
            # held to the text rule once, when first held: a snapshot and a record must carry it
            check_text_argument(session, "session")
            row = self._free_session_row()
            if row is None:
                row = self.index.add_row()
            self.session_rows[session] = row
            self.session_of_row[row] = session
        return row

    def _free_session_row(self) -> int | None:
        """The smallest session row no agent holds, taken from the session it served; None if
        every one is held."""
        free, listed = self.free_session_rows, self.free_listed
        while free:
            row = heapq.heappop(free)
            listed.discard(row)
            if row not in self.session_holders:
                del self.session_rows[self.session_of_row.pop(row)]
                return row
        return None

    def _let_go(self, row: int) -> None:
        """One agent fewer holds session row `row` (its bit already cleared or about to be)."""
        left = self.session_holders[row] - 1
        if left:
            self.session_holders[row] = left
        else:
            del self.session_holders[row]
            if row not in self.free_listed:
                self.free_listed.add(row)
                heapq.heappush(self.free_session_rows, row)

    def drop_holder(self, aid: int) -> tuple[int, ...]:
        """Agent id `aid` leaves the fleet: the session rows it held (for the index to clear its
        bits in), each now held by one agent fewer."""
        held = tuple(self.held_sessions.pop(aid, ()))
        for row in held:
            self._let_go(row)
        return held

    def sessions_restored(self) -> None:
        """Count the holders of each session row again from `session_rows` and `held_sessions`,
        as a snapshot restores them."""
        (self.session_of_row, self.session_holders, self.free_session_rows,
         self.free_listed) = _session_state(self.session_rows, self.held_sessions)

    def hold(self, aid: int, session: str) -> bool:
        """Agent id `aid` holds `session` (the affinity of the tasks that continue it): its row is
        made the first time a session is held. True when the agent did not hold it yet. Every way a
        session comes to be held — a bound placement, `Fleet.hold_session` — goes through here."""
        row = self.session_row(session)
        holds = self.held_sessions.setdefault(aid, set())
        if row in holds:
            return False
        holds.add(row)
        self.index.set_bit(row, aid)
        self.session_holders[row] = self.session_holders.get(row, 0) + 1
        return True

    def release(self, aid: int, session: str) -> bool:
        """Agent id `aid` no longer holds `session`. True when it held it; every way a session is
        let go — `Fleet.release_session`, a batch undoing its holds — goes through here."""
        row = self.session_rows.get(session)
        held = self.held_sessions.get(aid)
        if row is None or held is None or row not in held:
            return False
        held.discard(row)
        if not held:
            del self.held_sessions[aid]
        self.index.clear_bit(row, aid)
        self._let_go(row)
        return True

    def outcome(self, name: Any, kind: str) -> tuple[int, int]:
        """(successes, attempts) of agent `name` at task kind `kind`, (0, 0) for either unknown."""
        aid = self.table.ids.get(name) if isinstance(name, str) else None
        kid = self.kinds.get(kind, -1)
        return self.index.outcome(kid, aid) if aid is not None and kid >= 0 else (0, 0)

    def holds(self, name: Any, session: Any) -> bool:
        """Whether agent `name` holds `session`."""
        aid = self.table.ids.get(name) if isinstance(name, str) else None
        row = self.session_rows.get(session) if isinstance(session, str) else None
        return aid is not None and row is not None and row in self.held_sessions.get(aid, ())

    def kind(self, kind: str) -> int:
        """The outcome column of a task kind, made the first time an outcome of it is recorded."""
        kid = self.kinds.get(kind) if type(kind) is str else None
        if kid is None:
            check_text_argument(kind, "kind")
            kid = self.kinds[kind] = self.index.new_kind()
        return kid

    def field_row(self, kind: str, value: Any) -> int:
        """Intern the predicate string of one declared value (the first time it is seen)."""
        if kind == EVALUATED:
            row = self.eval_row(capability(*value))
        else:
            row = self.row(capability(*value) if kind == CAPABILITY else KEY_OF[kind](value))
        self.field_rows[kind][value] = row
        return row

    def rows_for(self, decl: Declaration, new_row: Callable[[str, Any], int] | None = None) -> tuple[int, ...]:
        """The rows of `declaration_keys(decl)`, then of `evaluated_keys(decl)`, in that order.

        A predicate string is built (by `predicates`) and interned only the first time its field
        value is seen; after that the row is found from the value itself, so adding an agent whose
        values the fleet has seen builds no strings. `new_row(kind, value)`, when given, numbers an
        unseen value instead of interning it (a batch that may yet be refused)."""
        by_kind = self.field_rows
        field_row = self.field_row if new_row is None else new_row
        rows: list[int] = []
        cached = by_kind[CAPABILITY]
        for c in decl.capabilities:
            row = cached.get((c.name, c.version))
            rows.append(row if row is not None else field_row(CAPABILITY, (c.name, c.version)))
        for kind, values in ((CLEARANCE, decl.clearances), (TOOL, decl.tools or ()), (RESIDENCY, decl.residency or ())):
            cached = by_kind[kind]
            for value in values:
                row = cached.get(value)
                rows.append(row if row is not None else field_row(kind, value))
        if decl.model is not None and decl.model.latency_class is not None:
            cls = decl.model.latency_class
            row = by_kind[LATENCY].get(cls)
            rows.append(row if row is not None else field_row(LATENCY, cls))
        cached = by_kind[EVALUATED]
        for c in decl.capabilities:
            if c.substantiated:
                row = cached.get((c.name, c.version))
                rows.append(row if row is not None else field_row(EVALUATED, (c.name, c.version)))
        return tuple(dict.fromkeys(rows))   # a repeated field keeps its first place, as in `predicates`

    def rows_of(self, aid: int) -> tuple[int, ...]:
        """A live agent's index rows: kept, or derived again from its declaration, whose every value
        was interned when it joined (so `rows_for` finds them all and interns nothing)."""
        rows = self.table.member_rows[aid]
        if rows is None:
            rows = self.rows_for(self.table.declaration(aid))
        return rows

    def intern_pending(self, pending: list[tuple[str, Any, int]]) -> None:
        """Create the rows a bulk load numbered ahead, in the order it numbered them."""
        for kind, value, row in pending:
            made = self.index.add_row()
            assert made == row, "rows are numbered in creation order"
            if kind == EVALUATED:
                self.eval_rows[capability(*value)] = row
            else:
                self.rows[capability(*value) if kind == CAPABILITY else KEY_OF[kind](value)] = row
            self.field_rows[kind][value] = row

    def drop_empty_rows(self) -> int:
        """Remove the index's rows that hold no agent (of values no live agent declares, of
        sessions no agent holds) and number the others down in order, in every map here and in the
        agent table; nothing a placement, a record or a caller can read changes (ids, names,
        outcomes, held sessions). The maps are made anew before the index is changed, so a failure
        leaves everything as it was; the caches of row numbers are emptied. Returns how many rows
        were removed."""
        empty = self.index.empty_row_ids()
        if not empty:
            return 0
        dropped = set(empty)
        new_of: list[int] = []      # each row's number once the empty ones are gone, -1 for those
        kept_before = 0
        for row in range(self.index.row_count()):
            if row in dropped:
                new_of.append(-1)
            else:
                new_of.append(kept_before)
                kept_before += 1

        def kept(rows: dict) -> dict:
            return {key: new_of[row] for key, row in rows.items() if new_of[row] >= 0}

        predicate_rows, eval_rows, session_rows = kept(self.rows), kept(self.eval_rows), kept(self.session_rows)
        field_rows = {kind: kept(values) for kind, values in self.field_rows.items()}
        held_sessions = {aid: {new_of[row] for row in rows} for aid, rows in self.held_sessions.items()}
        member_rows = [tuple(new_of[row] for row in rows) if rows else rows for rows in self.table.member_rows]
        sessions = _session_state(session_rows, held_sessions)
        self.index.drop_rows(empty)
        self.rows, self.eval_rows, self.session_rows, self.field_rows = predicate_rows, eval_rows, session_rows, field_rows
        self.held_sessions = held_sessions
        self.session_of_row, self.session_holders, self.free_session_rows, self.free_listed = sessions
        self.table.member_rows = member_rows
        self.resolved.clear()
        self.explained.clear()
        return len(empty)

    # -- resolving a task's predicates ------------------------------------------------------------
    def resolve(self, matched: Requirements) -> Resolution:
        """The predicates as the engine's arguments: filter rows, agentRef id, excluded ids, and the
        rows of agents that substantiate each required capability (the engine's
        `resolve_predicates`, one compiled loop on the native engine)."""
        return self.resolve_predicates(matched.predicates, self.rows, self.eval_rows, self.table.ids,
                                       self.no_agent_ref)

    def interned(self) -> int:
        """Grows whenever a row or an agent id is interned, which is what can change a resolution."""
        return len(self.rows) + len(self.eval_rows) + len(self.table.ids)

    def resolve_cached(self, matched: Requirements) -> Resolution:
        """`resolve`, kept per predicate set (a resolution depends on the predicates alone, and
        stays valid until the fleet interns something new) from the second time the set is
        resolved on. The first only notes the set's hash, holding nothing, so that a stream of
        distinct tasks leaves no resolution behind (docs/performance.md, "One-off tasks let go").
        Keyed by the set, not by the Requirements object, an entry holds no task: a prepared task
        and the same task parsed for each placement share it."""
        stamp = len(self.rows) + len(self.eval_rows) + len(self.table.ids)     # self.interned(), inline
        predicates = matched.predicates
        cache = self.resolved
        entry = cache.get(predicates)
        if entry is not None and entry[0] == stamp:
            return entry[1]
        resolved = self.resolve(matched)
        if entry is None and not self.resolved_once.seen_before(hash(predicates), NOTED_ONCE_LIMIT):
            return resolved
        if len(cache) >= RESOLVED_CACHE_SIZE:
            cache.clear()
        cache[predicates] = (stamp, resolved)
        return resolved

    # -- the repeated-task explanation cache ------------------------------------------------------
    def remember(self, predicates: tuple[str, ...], membership: int, expl: Explanation,
                 eval_rows: list[int]) -> None:
        """Keep a predicate set's explanation for the next task of that set while the membership
        holds, from the second time the set is explained: the first only notes the set's hash, so
        that the tasks of a stream of distinct ones leave no explanation behind (as for
        `resolve_cached`; `a3fast.seen`)."""
        if not self.explained_once.seen_before(hash(predicates), NOTED_ONCE_LIMIT):
            return
        cache = self.explained
        if len(cache) * max(len(self.table.entries), 1) >= EXPLAINED_CACHE_BUDGET:
            cache.clear()
        cache[predicates] = (membership, expl, eval_rows)
