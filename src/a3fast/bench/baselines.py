"""The matchers a user would otherwise pick, doing exactly a3fast's work (§5 filter, first-failed
explanation, the default score, the §6 record) so that the benchmark compares like with like.

- `LiteralLoop`: every candidate through `predicates.first_failed`, the literal reading of §5.
- `NumpyMatrix`: a boolean matrix (predicate x agent); a task is a cumulative AND down its rows.
- `SqliteRegistry`: "the registry in a database": an agents table and a predicate table, one
  query per task that returns each candidate's first failed predicate (and, for the eligible, what
  scoring needs).

Each answers `explain(req)` (candidate ids, eligible ids, failed ids per predicate), `place(req)`
(the chosen id and the score columns) and `scheduling_json(req)` (the §6 record without timings,
built as dicts and encoded with orjson). Fleets are static: the baselines are built once from the
declarations, with no success history and no sessions held, as in the benchmark.
"""
from __future__ import annotations

import sqlite3
from collections import Counter
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import orjson

from ..predicates import (AGENT_REF, ANTI_AFFINITY, CAPABILITY, declaration_keys, evaluated_keys, first_failed,
                          parse_predicate)
from ..record.write import SESSION_HELD_MEMBER, scheduling_object
from ..schema import Declaration, Requirements, parse_declaration, task_kind
from ..fleet.scoring import DEFAULT_WEIGHTS, cost_score

__all__ = ["Baseline", "LiteralLoop", "NumpyMatrix", "SqliteRegistry", "BASELINES", "disagreement", "AGREEMENT_TASKS"]

_AGENT_REF = AGENT_REF + ":"
_ANTI = ANTI_AFFINITY + ":"
_CAPABILITY = CAPABILITY + ":"

#: (candidate ids, eligible ids, failed ids per predicate in derivation order)
Explained = tuple[list[int], list[int], list[list[int]]]


class Baseline:
    """What the three baselines share: the parsed fleet, the default score and the §6 record."""

    name = "baseline"

    def __init__(self, declarations: Sequence[Mapping[str, Any] | Declaration],
                 weights: tuple[float, float, float, float] = DEFAULT_WEIGHTS):
        self.decls = [parse_declaration(d) for d in declarations]
        self.names = [d.agent.name for d in self.decls]
        twice = [name for name, count in Counter(self.names).items() if count > 1]
        if twice:
            # a fleet keeps an agent's later declaration in its earlier place; a baseline keeps a
            # list, and would match both
            raise ValueError(f"a baseline holds each agent once: {twice[0]!r} is declared twice")
        self.costs = [cost_score(d) for d in self.decls]
        self.evaluated = [frozenset(evaluated_keys(d)) for d in self.decls]
        self.weights = weights
        #: session -> ids holding it; task kind -> id -> (successes, attempts): empty in the benchmark
        self.sessions: dict[str, set[int]] = {}
        self.outcomes: dict[str, dict[int, tuple[int, int]]] = {}

    def explain(self, req: Requirements) -> Explained:
        raise NotImplementedError

    def place(self, req: Requirements) -> tuple[int, list[int], list[tuple[float, ...]]]:
        """(chosen id or -1, eligible ids, per eligible (total, affinity, success_rate, cost, substantiated))."""
        _, eligible, _ = self.explain(req)
        return self.choose(req, eligible, self.components(req, eligible))

    def components(self, req: Requirements, eligible: list[int]) -> list[tuple[float, float, float, float]]:
        """(affinity, success_rate, cost, substantiated) per eligible agent, as a3fast's default scorer."""
        caps = [p for p in req.predicates if p.startswith(_CAPABILITY)]
        held = self.sessions.get(req.session, ()) if req.session is not None else ()
        history = self.outcomes.get(task_kind(req), {})
        out = []
        for aid in eligible:
            counts = history.get(aid)
            evaluated = self.evaluated[aid]
            out.append((1.0 if aid in held else 0.0,
                        (counts[0] + 1) / (counts[1] + 2) if counts else 0.5,
                        self.costs[aid],
                        sum(p in evaluated for p in caps) / len(caps) if caps else 1.0))
        return out

    def choose(self, req: Requirements, eligible: list[int], components) -> tuple[int, list[int], list[tuple]]:
        w_a, w_s, w_c, w_e = self.weights
        rows: list[tuple] = []
        best, best_key = -1, (0.0, "")
        names = self.names
        for aid, (a, s, c, e) in zip(eligible, components):
            total = ((w_a * a + w_s * s) + w_c * c) + w_e * e
            rows.append((total, a, s, c, e))
            if best < 0 or total > best_key[0] or (total == best_key[0] and names[aid] < best_key[1]):
                best, best_key = aid, (total, names[aid])
        return best, eligible, rows

    def scheduling_json(self, req: Requirements) -> bytes | None:
        """The §6 scheduling object (without timings) as built from dicts and encoded with orjson."""
        candidates, eligible, failed = self.explain(req)
        best, eligible, rows = self.choose(req, eligible, self.components(req, eligible))
        if best < 0:
            return None
        names = self.names
        predicates = req.predicates
        record = scheduling_object(
            dict(req.doc), dict(self.decls[best].doc), [names[i] for i in candidates], list(predicates),
            [{"candidate": names[i], "predicate": p} for p, ids in zip(predicates, failed) for i in ids],
            {names[aid]: {"total": t, "affinity": a, "success_rate": s, "cost": c, "substantiated": e}
             for aid, (t, a, s, c, e) in zip(eligible, rows)})
        if req.session is not None:
            # placed as the bench places for a3fast, holding nothing: the record says so
            record[SESSION_HELD_MEMBER] = False
        return orjson.dumps(record)


class LiteralLoop(Baseline):
    """Each candidate through the derived predicates with `satisfies`, first failure kept (§5).
    The predicates are parsed once per task, not once per candidate."""

    name = "literal loop"

    def explain(self, req: Requirements) -> Explained:
        parsed = [parse_predicate(p) for p in req.predicates]
        predicates = [p for p in parsed if p is not None]
        assert len(predicates) == len(parsed)  # requirements derive only well-formed predicates
        position = {p: k for k, p in enumerate(predicates)}
        failed: list[list[int]] = [[] for _ in predicates]
        eligible = []
        for aid, decl in enumerate(self.decls):
            miss = first_failed(decl, predicates)
            if miss is None:
                eligible.append(aid)
            else:
                failed[position[miss]].append(aid)
        return list(range(len(self.decls))), eligible, failed


class NumpyMatrix(Baseline):
    """A boolean matrix with one row per satisfiable predicate and one column per agent; a task is a
    cumulative AND down its predicates' rows, and the count of leading passes is the first failure."""

    name = "numpy matrix"

    def __init__(self, declarations, weights=DEFAULT_WEIGHTS):
        super().__init__(declarations, weights)
        keys: dict[str, int] = {}
        member_rows: list[int] = []
        member_cols: list[int] = []
        for aid, decl in enumerate(self.decls):
            for key in declaration_keys(decl):
                member_rows.append(keys.setdefault(key, len(keys)))
                member_cols.append(aid)
        self.keys = keys
        self.matrix = np.zeros((len(keys), len(self.decls)), dtype=bool)
        self.matrix[member_rows, member_cols] = True
        self.ids = np.arange(len(self.decls))
        self.name_ids = {name: aid for aid, name in enumerate(self.names)}
        self.cost_column = np.asarray(self.costs, dtype=np.float64)

    def passes(self, req: Requirements) -> np.ndarray:
        """(predicates x agents) booleans: does each agent satisfy each predicate."""
        n = len(self.decls)
        out = np.zeros((len(req.predicates), n), dtype=bool)
        for k, p in enumerate(req.predicates):
            if p.startswith(_ANTI):
                out[k] = True
                aid = self.name_ids.get(p[len(_ANTI):])
                if aid is not None:
                    out[k, aid] = False
            elif p.startswith(_AGENT_REF):
                aid = self.name_ids.get(p[len(_AGENT_REF):])
                if aid is not None:
                    out[k, aid] = True
            else:
                row = self.keys.get(p)
                if row is not None:
                    out[k] = self.matrix[row]
        return out

    def explain(self, req: Requirements) -> Explained:
        ok = self.passes(req)
        leading = np.logical_and.accumulate(ok, axis=0).sum(axis=0) if len(ok) else np.zeros(len(self.decls), int)
        failed = [np.flatnonzero(leading == k).tolist() for k in range(len(ok))]
        return self.ids.tolist(), np.flatnonzero(leading == len(ok)).tolist(), failed

    def components(self, req, eligible):
        idx = np.asarray(eligible, dtype=np.int64)
        caps = [p for p in req.predicates if p.startswith(_CAPABILITY)]
        held = self.sessions.get(req.session, ()) if req.session is not None else ()
        affinity = np.isin(idx, np.fromiter(held, dtype=np.int64, count=len(held)))
        success = np.full(len(idx), 0.5)
        history = self.outcomes.get(task_kind(req), {})
        for j, aid in enumerate(eligible):
            counts = history.get(aid)
            if counts:
                success[j] = (counts[0] + 1) / (counts[1] + 2)
        if caps:
            evaluated = np.zeros(len(idx), dtype=np.int64)
            for p in caps:
                evaluated += np.fromiter((p in self.evaluated[aid] for aid in eligible), dtype=bool, count=len(idx))
            substantiated = evaluated / len(caps)
        else:
            substantiated = np.ones(len(idx))
        return list(zip(affinity.astype(np.float64).tolist(), success.tolist(),
                        self.cost_column[idx].tolist(), substantiated.tolist()))


class SqliteRegistry(Baseline):
    """The registry in a database: `agents(id, name, cost)` and `predicates(predicate, agent_id,
    evaluated)` in SQLite (in memory), one query per task."""

    name = "sqlite"

    # kinds of requirement rows: 0 a capability (counted for `substantiated`), 1 another predicate
    # of the declaration, 2 agentRef, 3 anti-affinity
    _FIRST_FAILED = """
        SELECT a.id, (SELECT MIN(r.k) FROM req r WHERE CASE r.kind
                        WHEN 2 THEN a.name != r.arg
                        WHEN 3 THEN a.name = r.arg
                        ELSE NOT EXISTS (SELECT 1 FROM predicates p WHERE p.predicate = r.arg AND p.agent_id = a.id)
                      END) AS first_failed
        FROM agents a"""
    _EXPLAIN = "WITH req(k, kind, arg) AS ({values})" + _FIRST_FAILED + " ORDER BY a.id"
    _PLACE = """WITH req(k, kind, arg) AS ({values})
        SELECT f.id, f.first_failed,
               CASE WHEN f.first_failed IS NULL THEN
                 (SELECT COUNT(*) FROM req r JOIN predicates p ON p.predicate = r.arg
                  WHERE r.kind = 0 AND p.agent_id = f.id AND p.evaluated) END,
               CASE WHEN f.first_failed IS NULL THEN (SELECT cost FROM agents WHERE id = f.id) END
        FROM (""" + _FIRST_FAILED + """) f ORDER BY f.id"""

    def __init__(self, declarations, weights=DEFAULT_WEIGHTS):
        super().__init__(declarations, weights)
        db = self.db = sqlite3.connect(":memory:")
        db.execute("CREATE TABLE agents (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, cost REAL NOT NULL)")
        db.execute("CREATE TABLE predicates (predicate TEXT NOT NULL, agent_id INTEGER NOT NULL, "
                   "evaluated INTEGER NOT NULL, PRIMARY KEY (predicate, agent_id)) WITHOUT ROWID")
        db.executemany("INSERT INTO agents VALUES (?, ?, ?)",
                       ((aid, name, cost) for aid, (name, cost) in enumerate(zip(self.names, self.costs))))
        db.executemany("INSERT INTO predicates VALUES (?, ?, ?)",
                       ((key, aid, int(key in self.evaluated[aid]))
                        for aid, decl in enumerate(self.decls) for key in declaration_keys(decl)))
        db.commit()

    @staticmethod
    def _requirement_rows(req: Requirements) -> tuple[str, list]:
        rows: list = []
        for k, p in enumerate(req.predicates):
            if p.startswith(_ANTI):
                rows += (k, 3, p[len(_ANTI):])
            elif p.startswith(_AGENT_REF):
                rows += (k, 2, p[len(_AGENT_REF):])
            else:
                rows += (k, 0 if p.startswith(_CAPABILITY) else 1, p)
        values = ", ".join(["(?, ?, ?)"] * len(req.predicates)) if req.predicates else None
        return ("VALUES " + values) if values else "SELECT 0, 0, '' WHERE 0", rows

    def explain(self, req: Requirements) -> Explained:
        values, params = self._requirement_rows(req)
        failed: list[list[int]] = [[] for _ in req.predicates]
        candidates, eligible = [], []
        for aid, first in self.db.execute(self._EXPLAIN.format(values=values), params):
            candidates.append(aid)
            if first is None:
                eligible.append(aid)
            else:
                failed[first].append(aid)
        return candidates, eligible, failed

    def place(self, req: Requirements):
        values, params = self._requirement_rows(req)
        n_caps = sum(p.startswith(_CAPABILITY) for p in req.predicates)
        held = self.sessions.get(req.session, ()) if req.session is not None else ()
        history = self.outcomes.get(task_kind(req), {})
        eligible, components = [], []
        for aid, first, evaluated, cost in self.db.execute(self._PLACE.format(values=values), params):
            if first is None:
                counts = history.get(aid)
                eligible.append(aid)
                components.append((1.0 if aid in held else 0.0,
                                   (counts[0] + 1) / (counts[1] + 2) if counts else 0.5,
                                   cost, evaluated / n_caps if n_caps else 1.0))
        return self.choose(req, eligible, components)


BASELINES = (LiteralLoop, NumpyMatrix, SqliteRegistry)


#: Tasks `a3fast bench` checks each baseline against the engine on, before it times them.
AGREEMENT_TASKS = 50


def disagreement(baseline: Baseline, place: Callable[[Requirements], Any],
                 tasks: Sequence[Requirements]) -> str | None:
    """Where `baseline` decides one of `tasks` otherwise than a3fast's `place` (a fleet of the same
    declarations, in the same order, placing without holding sessions): the candidates, each
    rejected candidate's first failed predicate, the eligible, the totals or the winner. None when
    it decides every one alike: a ratio between the two then compares the same work."""
    names = baseline.names
    for k, req in enumerate(tasks):
        p = place(req)
        candidates, eligible, failed = baseline.explain(req)
        best, _, rows = baseline.place(req)
        found = {"candidates": [names[i] for i in candidates], "eligible": [names[i] for i in eligible],
                 "first failures": [(names[i], predicate) for predicate, ids in zip(req.predicates, failed)
                                    for i in ids],
                 "totals": [row[0] for row in rows], "winner": names[best] if best >= 0 else None}
        expected = {"candidates": p.candidates, "eligible": p.eligible,
                    "first failures": [(f["candidate"], f["predicate"]) for f in p.filters_failed],
                    "totals": list(p.scores.total), "winner": p.agent}
        for what, value in expected.items():
            if found[what] != value:
                return (f"the {baseline.name} baseline decides task {k} of the workload otherwise than a3fast: "
                        f"its {what} differ ({_brief(found[what])} against {_brief(value)})")
    return None


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "…"
