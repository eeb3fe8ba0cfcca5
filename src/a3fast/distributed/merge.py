"""Merging the shards' explanations of one task into the explanation one fleet would have made.

Each shard answers a wave of tasks with one `WaveAnswer`: in columns (numpy arrays and byte
blobs, which Ray moves through its object store without pickling them item by item), per task and
predicate the Roaring set of its local agent ids that failed it first, its eligible ids, their
score columns, and its own winner. The coordinator reads each task's part as a `ShardAnswer` (views
of those columns), maps local ids to global join order (each shard's `local -> global` array) and
merges:

- the decision needs only the shards' winners (the same total and tie-break as
  `a3fast.fleet.scoring.choose`: highest total, then smallest name), so it is made at once;
- the per-agent sets and score columns are merged when a record or a caller first reads them, into
  one label per global id (the predicate it failed first, or eligible), which gives every set in
  global join order without sorting.

`MergedExplanation`, `MergedScores` and `GlobalIndex` have the methods of an engine's Explanation,
Scores and Index that `a3fast.record.write` and the compact encoder call, so a sharded placement
is written by the same record writers as a single fleet's.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import orjson

from ..roaring import deserialize_ids, serialize_ids
from ..fleet.scoring import choose
from ..record.write import rejection_content

__all__ = ["ShardAnswer", "WaveAnswer", "wave_answer", "MergedExplanation", "MergedScores",
           "GlobalIndex", "winner_of", "SCORE_COLUMNS", "roaring_of_mask"]

#: The default scorer's components, in the order of an engine's score map entries.
SCORE_COLUMNS = ("total", "affinity", "success_rate", "cost", "substantiated")
#: Label of a global id that is not a candidate of the merged explanation.
_NOT_CANDIDATE = np.iinfo(np.uint32).max


@dataclass(frozen=True)
class ShardAnswer:
    """One shard's compact explanation of a task (shard-local agent ids)."""

    #: per predicate (derivation order), the Roaring set of local ids that failed it first (b"" if none)
    failed: list[bytes]
    failed_counts: list[int]
    #: the Roaring set of eligible local ids
    eligible: bytes
    #: score columns (SCORE_COLUMNS order) aligned with the eligible ids ascending, shape (5, E)
    columns: np.ndarray
    #: the shard's winner: local id (-1 if none), its total and name
    best: int
    best_total: float
    best_name: str | None
    #: the winner's declaration as the records carry it
    best_json: bytes | None
    #: whether the winner already holds the task's session (a bound placement makes it hold it)
    best_holds_session: bool
    #: how many local ids the shard has given out (a check that coordinator and shard agree)
    ids_given: int
    #: how many changes the shard has acknowledged (the same check)
    changes: int
    #: nanoseconds the shard spent in its stages, explain to choose (the rest of a placement is transport)
    stages_ns: int
    #: a custom scorer's entries, aligned with the eligible ids ascending (None: the default
    #: scorer's `columns`; with a custom scorer `columns` holds only the totals, in its first row)
    custom_entries: list | None = None


def _blob(parts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Byte strings as one uint8 array (one buffer in Ray's object store, read without a copy)
    and each one's end offset."""
    ends = np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)))
    return np.frombuffer(b"".join(parts), dtype=np.uint8), ends


@dataclass(frozen=True)
class WaveAnswer:
    """One shard's answers to a wave of tasks, in columns: what a list of ShardAnswers holds, as a
    few numpy arrays and one JSON document of names instead of a pickled object per task and set."""

    #: per task, how many predicates it has (its failed sets, in derivation order)
    predicates: np.ndarray
    #: per task and predicate (tasks one after another), how many local ids failed it first
    failed_counts: np.ndarray
    #: the Roaring sets, per task its failed sets then its eligible set, one after another (an
    #: empty set takes no bytes), and each set's end offset in `sets`
    sets: np.ndarray
    set_ends: np.ndarray
    #: per task, how many agents are eligible: its score columns' width
    eligible: np.ndarray
    #: the score columns (SCORE_COLUMNS order) of every task's eligible ids, tasks one after another
    columns: np.ndarray
    #: per task: its winner's local id (-1 if none), total, whether it holds the task's session
    best: np.ndarray
    best_total: np.ndarray
    best_holds_session: np.ndarray
    #: per task, the winner's name (None if none), as one JSON array
    best_names: bytes
    #: the winners' declarations as the records carry them, one after another, and their ends
    declarations: np.ndarray
    declaration_ends: np.ndarray
    ids_given: int
    changes: int
    #: nanoseconds the shard spent on the wave's stages, explain to choose, and on this answer
    stages_ns: int
    #: a custom scorer's entries per task (None: the default scorer's columns)
    custom_entries: list | None = None

    def __len__(self) -> int:
        return len(self.predicates)

    def answers(self) -> list[ShardAnswer]:
        """Each task's part, as a ShardAnswer (its byte strings copied out of the columns once)."""
        names = orjson.loads(self.best_names)
        sets, ends = self.sets, self.set_ends.tolist()
        decls, decl_ends = self.declarations, self.declaration_ends.tolist()
        counts = self.failed_counts.tolist()
        best, totals, holds = self.best.tolist(), self.best_total.tolist(), self.best_holds_session.tolist()
        out = []
        k = 0          # the task's first set
        at = 0         # where its first set begins in `sets`
        width = 0      # where its score columns begin
        decl_at = 0
        for j, (n, e) in enumerate(zip(self.predicates.tolist(), self.eligible.tolist())):
            failed = []
            for end in ends[k:k + n + 1]:
                failed.append(sets[at:end].tobytes() if end > at else b"")
                at = end
            eligible = failed.pop()
            decl_end = decl_ends[j]
            out.append(ShardAnswer(failed, counts[k - j:k - j + n], eligible,
                                   self.columns[:, width:width + e], best[j], totals[j], names[j],
                                   decls[decl_at:decl_end].tobytes() if names[j] is not None else None,
                                   holds[j], self.ids_given, self.changes, self.stages_ns,
                                   self.custom_entries[j] if self.custom_entries is not None else None))
            k += n + 1
            width += e
            decl_at = decl_end
        return out


def wave_answer(parts: Sequence[tuple[Any, Any, int, str | None, bytes | None, bool]], custom: bool,
                ids_given: int, changes: int, stages_ns: int) -> WaveAnswer:
    """The WaveAnswer of a shard's scored tasks: per task (explanation, scores, winner's local id,
    winner's name, winner's declaration JSON, whether it holds the task's session), the scores
    being the default scorer's (or a custom scorer's CustomScores when `custom`)."""
    predicates: list[int] = []
    counts: list[int] = []
    sets: list[bytes] = []
    eligible: list[int] = []
    columns: list[np.ndarray] = []
    best: list[int] = []
    totals: list[float] = []
    holds: list[bool] = []
    names: list[str | None] = []
    decls: list[bytes] = []
    entries: list = []
    for expl, scores, winner, name, decl, held in parts:
        task_counts = expl.failed_counts()
        predicates.append(len(task_counts))
        counts.extend(task_counts)
        sets.extend(expl.failed_roaring(k) if c else b"" for k, c in enumerate(task_counts))
        n = len(scores)
        sets.append(expl.eligible_roaring() if n else b"")
        eligible.append(n)
        if custom:
            column = np.zeros((len(SCORE_COLUMNS), n), dtype=np.float64)
            column[0] = [entry["total"] for entry in scores.entries]
            entries.append(scores.entries)
        else:
            column = np.array([scores.total, scores.affinity, scores.success_rate, scores.cost,
                               scores.substantiated], dtype=np.float64).reshape(len(SCORE_COLUMNS), n)
        columns.append(column)
        totals.append(float(column[0][scores.ids.index(winner)]) if winner >= 0 else 0.0)
        best.append(winner)
        holds.append(held)
        names.append(name)
        decls.append(decl if decl is not None else b"")
    blob, ends = _blob(sets)
    decl_blob, decl_ends = _blob(decls)
    return WaveAnswer(np.array(predicates, dtype=np.int64), np.array(counts, dtype=np.int64), blob, ends,
                      np.array(eligible, dtype=np.int64),
                      np.concatenate(columns, axis=1) if columns else np.zeros((len(SCORE_COLUMNS), 0)),
                      np.array(best, dtype=np.int64), np.array(totals, dtype=np.float64),
                      np.array(holds, dtype=bool), orjson.dumps(names), decl_blob, decl_ends,
                      ids_given, changes, stages_ns, entries if custom else None)


def winner_of(answers: Sequence[ShardAnswer]) -> int:
    """The choose stage over the shards' winners, each already the best of its shard: index of the
    answer whose winner wins overall by `a3fast.fleet.scoring.choose` (highest total, ties to the
    smallest name). -1 when no shard has an eligible agent."""
    contenders = [j for j, a in enumerate(answers) if a.best >= 0 and a.best_name is not None]
    k = choose([answers[j].best_name for j in contenders],  # type: ignore[misc]
               [answers[j].best_total for j in contenders])
    return contenders[k] if k >= 0 else -1


def _ids(data: bytes) -> np.ndarray:
    if not data:
        return np.zeros(0, dtype=np.uint32)
    return np.asarray(deserialize_ids(data).to_array(), dtype=np.uint32)


def roaring_of_mask(mask: np.ndarray) -> bytes:
    """The ids where `mask` (a boolean array over global ids) is true, in the portable Roaring
    format, byte for byte what `a3fast.roaring.serialize_ids` and the native engine write: read by
    pyroaring from the ids' buffer, as a merged set of a large fleet holds hundreds of thousands of
    ids, which a Python list of them would cost far more."""
    return serialize_ids(np.flatnonzero(mask))


class MergedExplanation:
    """The explanation of a task over every shard, in global join order (an engine Explanation's
    reading methods)."""

    __slots__ = ("_answers", "_maps", "_size", "_predicates", "_labels", "_eligible_sources")

    def __init__(self, answers: Sequence[ShardAnswer], maps: Sequence[np.ndarray], size: int,
                 predicates: int):
        self._answers = answers
        self._maps = maps          # per shard: local id -> global id, as of the placement
        self._size = size          # global ids given out as of the placement
        self._predicates = predicates
        self._labels: np.ndarray | None = None
        self._eligible_sources: list[np.ndarray] | None = None

    def _merged(self) -> np.ndarray:
        """Per global id: the index of the predicate it failed first, `predicates` if eligible,
        or _NOT_CANDIDATE."""
        if self._labels is None:
            labels = np.full(self._size, _NOT_CANDIDATE, dtype=np.uint32)
            eligible_sources = []
            for answer, to_global in zip(self._answers, self._maps):
                for k, data in enumerate(answer.failed):
                    if data:
                        labels[to_global[_ids(data)]] = k
                ids = to_global[_ids(answer.eligible)]
                labels[ids] = self._predicates
                eligible_sources.append(ids)
            self._labels, self._eligible_sources = labels, eligible_sources
        return self._labels

    @property
    def candidates_count(self) -> int:
        return sum(sum(a.failed_counts) for a in self._answers) + self.eligible_count

    @property
    def eligible_count(self) -> int:
        return sum(a.columns.shape[1] for a in self._answers)

    def failed_counts(self) -> list[int]:
        return [sum(a.failed_counts[k] for a in self._answers) for k in range(self._predicates)]

    def labels(self) -> np.ndarray:
        """Per global id (as of the placement): the index of the predicate it failed first, the
        number of predicates if it is eligible, or the largest uint32 if not a candidate."""
        return self._merged()

    def candidate_ids(self) -> list[int]:
        return np.flatnonzero(self._merged() != _NOT_CANDIDATE).tolist()

    def eligible_ids(self) -> list[int]:
        return np.flatnonzero(self._merged() == self._predicates).tolist()

    def failed_ids(self, k: int) -> list[int]:
        if not 0 <= k < self._predicates:
            raise IndexError(f"predicate {k} of {self._predicates}")
        return np.flatnonzero(self._merged() == k).tolist()

    def failed_roaring(self, k: int) -> bytes:
        return roaring_of_mask(self._merged() == k)

    def eligible_roaring(self) -> bytes:
        return roaring_of_mask(self._merged() == self._predicates)

    def eligible_by_shard(self) -> list[np.ndarray]:
        """Per shard, its eligible agents' global ids (ascending local id, as its score columns)."""
        self._merged()
        return self._eligible_sources  # type: ignore[return-value]


class MergedScores:
    """The default score columns of every eligible agent in global join order (an engine Scores'
    attributes); `best` is the winner's global id. Columns are merged on first read."""

    __slots__ = ("best", "_expl", "_answers", "_columns", "_ids")

    def __init__(self, answers: Sequence[ShardAnswer], explanation: MergedExplanation, best: int):
        self.best = best
        self._expl = explanation
        self._answers = answers
        self._columns: list[list[float]] | None = None
        self._ids: list[int] | None = None

    def __len__(self) -> int:
        return sum(a.columns.shape[1] for a in self._answers)

    def _merge(self) -> None:
        sources = self._expl.eligible_by_shard()
        ids = np.concatenate(sources) if sources else np.zeros(0, dtype=np.int64)
        columns = (np.concatenate([a.columns for a in self._answers], axis=1) if self._answers
                   else np.zeros((len(SCORE_COLUMNS), 0)))
        order = np.argsort(ids, kind="stable")
        self._ids = ids[order].tolist()
        self._columns = [c.tolist() for c in columns[:, order]]

    def _column(self, j: int) -> list:
        if self._columns is None:
            self._merge()
        return self._columns[j]  # type: ignore[index]

    @property
    def ids(self) -> list[int]:
        if self._ids is None:
            self._merge()
        return self._ids  # type: ignore[return-value]

    total = property(lambda self: self._column(0))
    affinity = property(lambda self: self._column(1))
    success_rate = property(lambda self: self._column(2))
    cost = property(lambda self: self._column(3))
    substantiated = property(lambda self: self._column(4))


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class GlobalIndex:
    """Global agent ids to names (append-only, like a fleet's ids) and the record-writing methods
    of an engine Index over merged explanations.

    Each name is kept JSON-encoded too, in an array that numpy indexes by id, so that the lists of
    a record are joined in C from an explanation's ids instead of built item by item (a record of
    a large fleet names every agent in it)."""

    def __init__(self) -> None:
        self._names: list[str] = []
        self._quoted = np.empty(1024, dtype=object)

    def append(self, name: str) -> int:
        """Give `name` the next global id."""
        gid = len(self._names)
        if gid == len(self._quoted):
            self._quoted = np.concatenate((self._quoted, np.empty(gid, dtype=object)))
        self._quoted[gid] = orjson.dumps(name)
        self._names.append(name)
        return gid

    def extend(self, names: list[str]) -> None:
        """Give each of `names` (new ones) the next global id, in order."""
        first = len(self._names)
        need = first + len(names)
        if need > len(self._quoted):
            grown = np.empty(max(need, 2 * len(self._quoted)), dtype=object)
            grown[:first] = self._quoted[:first]
            self._quoted = grown
        self._quoted[first:need] = np.fromiter(map(orjson.dumps, names), dtype=object, count=len(names))
        self._names.extend(names)

    def __len__(self) -> int:
        return len(self._names)

    def names(self) -> list[str]:
        """Every name given an id, in id order (removed agents' too)."""
        return self._names

    def name(self, gid: int) -> str:
        return self._names[gid]

    def candidate_names(self, expl: MergedExplanation) -> list[str]:
        names = self._names
        return [names[i] for i in expl.candidate_ids()]

    def failed_pairs(self, expl: MergedExplanation, predicates: Sequence[str]) -> list[dict[str, str]]:
        """§6 filters_failed: grouped by predicate in derivation order, then by global id."""
        names = self._names
        return [{"candidate": names[i], "predicate": p}
                for k, p in enumerate(predicates) for i in expl.failed_ids(k)]

    def failed_names(self, expl: MergedExplanation, k: int, limit: int) -> str:
        """The names of the first `limit` agents (in global id order) of failed set `k`, joined by
        ", " (a rejection's reason, §6), as an engine Index writes them."""
        names = self._names
        return ", ".join([names[i] for i in expl.failed_ids(k)[:max(limit, 0)]])

    def write_compact_lists(self, expl: MergedExplanation, scores: MergedScores | None) -> bytes:
        """The compact member's `failed` list and, given default scores, its `scores` object, as JSON
        members without braces, exactly as an engine Index writes them (docs/compact-format.md)."""
        members: dict[str, object] = {"failed": [_base64(expl.failed_roaring(k)) if count else ""
                                                 for k, count in enumerate(expl.failed_counts())]}
        if scores is not None:
            members["scores"] = {
                "ids": _base64(expl.eligible_roaring()) if len(scores) else "",
                "columns": [[c, "f64", _base64(np.asarray(getattr(scores, c), dtype="<f8").tobytes())]
                            for c in SCORE_COLUMNS]}
        return orjson.dumps(members)[1:-1]

    def score_map(self, scores: MergedScores) -> dict[str, dict[str, float]]:
        names = self._names
        cols = [scores.total, scores.affinity, scores.success_rate, scores.cost, scores.substantiated]
        return {names[gid]: {c: col[j] for c, col in zip(SCORE_COLUMNS, cols)}
                for j, gid in enumerate(scores.ids)}

    def write_rejection(self, expl: MergedExplanation, predicates: Sequence[str], reason_json: bytes | None,
                        requirements_json: bytes, tail_json: bytes, head: bytes = b"", foot: bytes = b"") -> bytes:
        """The §6 task.rejected content as JSON bytes, as an engine Index writes it."""
        return rejection_content(self, expl, predicates, reason_json, requirements_json, tail_json, head, foot)

    def write_scheduling(self, expl: MergedExplanation, scores: MergedScores, predicates: Sequence[str],
                         requirements_json: bytes, declaration_json: bytes, tail_json: bytes,
                         head: bytes = b"", foot: bytes = b"") -> bytes:
        """The §6 scheduling object as JSON bytes, members in record order, as orjson writes the
        lists (no spaces): each list is joined from the names' JSON in one call."""
        quoted = self._quoted
        labels = expl.labels()
        candidates = b",".join(quoted[np.flatnonzero(labels != _NOT_CANDIDATE)])
        failed = []
        for k, p in enumerate(predicates):
            ids = np.flatnonzero(labels == k)
            if len(ids):
                # {"candidate":N1,"predicate":P},{"candidate":N2,"predicate":P}...
                before, after = b'{"candidate":', b',"predicate":' + orjson.dumps(p) + b"}"
                failed.append(before + (after + b"," + before).join(quoted[ids]) + after)
        out = [head, b'{"requirements":', requirements_json, b',"declaration":', declaration_json,
               b',"candidates":[', candidates, b'],"filters_passed":', orjson.dumps(list(predicates)),
               b',"filters_failed":[', b",".join(failed), b'],"scores":', orjson.dumps(self.score_map(scores))]
        if tail_json:
            out += [b",", tail_json]
        out += [b"}", foot]
        return b"".join(out)
