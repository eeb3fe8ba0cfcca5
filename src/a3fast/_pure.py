"""The pure-Python engine: the hot classes of `_core.pyx`, same names and signatures, no compiled code.

Rows are Python ints used as bitsets over dense agent ids: an AND of two 1,000-bit ints costs
about 60 ns, less than one pyroaring call from Python (see the README's design notes).
"""
from __future__ import annotations

import base64
import math
import operator
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

import numpy as np
import orjson

from .bitset import bits_to_ids, ids_to_bits
from .record.write import rejection_content
from .roaring import serialize_ids

__all__ = ["Index", "Explanation", "Scores", "NO_AGENT_REF", "UNKNOWN", "MAX_OUTCOMES",
           "resolve_predicates"]

#: `only` argument of Index.explain when the task names no agent.
NO_AGENT_REF = -2
#: A row or agent id that does not exist (a predicate no agent satisfies, a name not in the fleet).
UNKNOWN = -1
#: The most outcomes counted for one agent and task kind (a3fast.fleet.scoring.MAX_OUTCOMES, docs/design.md
#: Reading 26), as in the native engine.
MAX_OUTCOMES = 10**15


def _check_cost(cost: float, aid: int) -> None:
    """A cost is finite and not negative (nor -0.0), or ValueError naming the agent."""
    if not (math.isfinite(cost) and cost >= 0.0) or math.copysign(1.0, cost) < 0:
        raise ValueError(f"agent {aid}: cost {float(cost)!r} is not a finite number of 0 or more")


def _check_outcomes(aid: int, had: int, successes: int, attempts: int) -> None:
    """`attempts` more outcomes, `successes` of them successful, on top of `had` attempts: within
    MAX_OUTCOMES, or ValueError (the same text as the native engine's)."""
    if successes < 0 or attempts < successes:
        raise ValueError(f"agent {aid}: {successes} successes of {attempts} attempts is not a count")
    if attempts > MAX_OUTCOMES - had:
        raise ValueError(f"agent {aid}: {had} + {attempts} outcomes would pass the {MAX_OUTCOMES} "
                         f"counted for one agent and task kind")


class Explanation:
    """The filter's result: candidates, eligible, and per predicate the candidates that failed it first.

    `failed[k]` holds exactly the candidates whose first failed predicate is the k-th (§6).
    """

    __slots__ = ("candidates", "eligible", "failed")

    def __init__(self, candidates: int, eligible: int, failed: list[int]):
        self.candidates = candidates
        self.eligible = eligible
        self.failed = failed

    @property
    def candidates_count(self) -> int:
        return self.candidates.bit_count()

    @property
    def eligible_count(self) -> int:
        return self.eligible.bit_count()

    def failed_counts(self) -> list[int]:
        return [f.bit_count() for f in self.failed]

    def candidate_ids(self) -> list[int]:
        return bits_to_ids(self.candidates)

    def eligible_ids(self) -> list[int]:
        return bits_to_ids(self.eligible)

    def failed_ids(self, k: int) -> list[int]:
        return bits_to_ids(self.failed[k])




    # The portable Roaring serialisation of a set (the compact placement format).
    def failed_roaring(self, k: int) -> bytes:
        return serialize_ids(bits_to_ids(self.failed[k]))

    def eligible_roaring(self) -> bytes:
        return serialize_ids(bits_to_ids(self.eligible))


class Scores:
    """Default score components of the eligible agents, aligned with `ids` (ascending agent id)."""

    __slots__ = ("ids", "total", "affinity", "success_rate", "cost", "substantiated", "best")

    def __init__(self, ids, total, affinity, success_rate, cost, substantiated, best):
        self.ids = ids
        self.total = total
        self.affinity = affinity
        self.success_rate = success_rate
        self.cost = cost
        self.substantiated = substantiated
        self.best = best

    def __len__(self) -> int:
        return len(self.ids)


class Index:
    """Per-predicate rows of agent ids, the live set, and the per-agent columns scoring reads.

    Agent ids are dense and never reused for another name (a compacted fleet has a new Index); rows are created by `add_row` and
    addressed by the integer it returns. `UNKNOWN` (-1) stands for the empty row.
    """

    def __init__(self) -> None:
        self._rows: list[int] = []
        self._live = 0
        self._names: list[str] = []
        self._quoted: list[bytes] = []
        self._cost: list[float] = []
        self._outcomes: list[dict[int, list[int]]] = []

    # -- building ---------------------------------------------------------------------------------
    def add_row(self) -> int:
        self._rows.append(0)
        return len(self._rows) - 1

    def row_count(self) -> int:
        return len(self._rows)

    def empty_row_ids(self) -> list[int]:
        """The rows that hold no agent, ascending."""
        return [r for r, bits in enumerate(self._rows) if not bits]

    def drop_rows(self, rows: Iterable[int]) -> None:
        """Remove `rows` from the index: the others keep their order, each numbered down by the
        rows removed before it. Refused, nothing changed, unless each is a row of this index
        (IndexError) that holds no agent, the rows given once each in ascending order (ValueError)."""
        all_rows = self._rows
        drop = [operator.index(r) for r in rows]
        prev = -1
        for r in drop:
            if not 0 <= r < len(all_rows):      # as the native engine: no row counted from the end
                raise IndexError(f"row {r} does not exist")
            if all_rows[r]:
                raise ValueError(f"row {r} holds agents")
            if r <= prev:
                raise ValueError("drop_rows takes rows in ascending order, each once")
            prev = r
        dropped = set(drop)
        self._rows = [bits for r, bits in enumerate(all_rows) if r not in dropped]

    def new_kind(self) -> int:
        self._outcomes.append({})
        return len(self._outcomes) - 1

    def put(self, aid: int, name: str, rows: Sequence[int], cost: float) -> None:
        """Agent `aid` (a new id == number of ids so far, or one seen before) joins with `rows`."""
        _check_cost(cost, aid)
        if aid == len(self._names):
            self._names.append(name)
            self._quoted.append(orjson.dumps(name))
            self._cost.append(cost)
        else:
            self._cost[aid] = cost
        bit = 1 << aid
        all_rows = self._rows
        for r in rows:
            all_rows[r] |= bit
        self._live |= bit

    def put_many(self, aids: Sequence[int], names: Sequence[str], rows: Sequence[Sequence[int]],
                 costs: Sequence[float]) -> None:
        """`put` for many new agents at once (ids consecutive from the next free id).

        Building each row once from its id list avoids re-copying a growing int per agent, which
        makes a one-by-one build quadratic in the fleet size.
        """
        if not aids:
            return
        if aids[0] != len(self._names) or list(aids) != list(range(aids[0], aids[0] + len(aids))):
            raise ValueError("put_many takes consecutive new ids")
        for aid, cost in zip(aids, costs):
            _check_cost(cost, aid)
        members: dict[int, list[int]] = {}
        for aid, agent_rows in zip(aids, rows):
            for r in agent_rows:
                members.setdefault(r, []).append(aid)
        self._names.extend(names)
        self._quoted.extend(orjson.dumps(name) for name in names)
        self._cost.extend(costs)
        size = len(self._names)
        for r, ids in members.items():
            self._rows[r] |= ids_to_bits(ids, size)
        self._live |= ids_to_bits(aids, size)

    def put_flat(self, names: Sequence[str], rows: Any, offsets: Any, costs: Any) -> None:
        """`put_many` for new agents `names` with their rows in one array: agent j's are
        `rows[offsets[j]:offsets[j + 1]]` (a JSON Lines batch's columns)."""
        if len(offsets) != len(names) + 1 or len(costs) != len(names):
            raise ValueError("put_flat takes one cost and one offset per name, and a last offset")
        bounds = [int(o) for o in offsets]
        flat = [int(r) for r in rows]
        first = len(self._names)
        self.put_many(range(first, first + len(names)), names,
                      [flat[a:b] for a, b in zip(bounds, bounds[1:])], [float(c) for c in costs])

    def drop(self, aid: int, rows: Sequence[int]) -> None:
        """Agent `aid` leaves `rows` and the live set (its id and name stay reserved)."""
        mask = ~(1 << aid)
        all_rows = self._rows
        for r in rows:
            all_rows[r] &= mask
        self._live &= mask

    def set_bit(self, row: int, aid: int) -> None:
        self._rows[row] |= 1 << aid

    def clear_bit(self, row: int, aid: int) -> None:
        self._rows[row] &= ~(1 << aid)

    def record_outcome(self, kind: int, aid: int, success: bool) -> None:
        had = self._outcomes[kind].get(aid)
        _check_outcomes(aid, had[1] if had else 0, 1 if success else 0, 1)
        counts = self._outcomes[kind].setdefault(aid, [0, 0])
        counts[0] += 1 if success else 0
        counts[1] += 1

    def add_outcomes(self, kind: int, aid: int, successes: int, attempts: int) -> None:
        """`attempts` outcomes at once, `successes` of them successful; refused, changing nothing,
        past MAX_OUTCOMES."""
        had = self._outcomes[kind].get(aid)
        _check_outcomes(aid, had[1] if had else 0, successes, attempts)
        counts = self._outcomes[kind].setdefault(aid, [0, 0])
        counts[0] += successes
        counts[1] += attempts

    # -- snapshots (docs/snapshot.md): the rows and columns as little-endian arrays -------------------
    def export_rows(self) -> tuple[bytes, bytes]:
        """Every row's members: (u64 offsets, R + 1 of them, into u32 ascending agent ids)."""
        parts = [_ids_array(r) for r in self._rows]
        offsets = np.zeros(len(parts) + 1, dtype="<u8")
        np.cumsum([len(p) for p in parts], out=offsets[1:])
        ids = np.concatenate(parts) if parts else np.zeros(0, dtype="<u4")
        return offsets.tobytes(), ids.astype("<u4").tobytes()

    def export_live(self) -> bytes:
        """The live agent ids, u32 ascending."""
        return _ids_array(self._live).tobytes()

    def export_costs(self) -> bytes:
        """The cost column, one f64 per agent id."""
        return np.asarray(self._cost, dtype="<f8").tobytes()

    def export_outcomes(self, kind: int) -> bytes:
        """One kind's outcome counts: (i64 agent id, i64 successes, i64 attempts) by agent id."""
        table = self._outcomes[kind]
        return np.asarray([(aid, *table[aid]) for aid in sorted(table)], dtype="<i8").reshape(-1, 3).tobytes()

    def import_outcomes(self, kind: int, data) -> None:
        """Add the counts `export_outcomes` wrote to a kind (all checked before any is added)."""
        table = self._outcomes[kind]
        if len(data) % 24:
            raise ValueError("outcome records are 24 bytes each")
        if table:
            raise ValueError("outcome records are imported into a kind with no outcomes yet")
        records = np.frombuffer(data, dtype="<i8").reshape(-1, 3).tolist()
        previous = -1
        for j, (aid, s, a) in enumerate(records):
            if not (previous < aid < len(self._names) and 0 <= s <= a <= MAX_OUTCOMES):
                raise ValueError(f"outcome record {j}: agent {aid}, {s} of {a} is not a valid count")
            previous = aid
        for aid, s, a in records:
            counts = table.setdefault(aid, [0, 0])
            counts[0] += s
            counts[1] += a

    def restore(self, names: Sequence[str], costs, live, row_offsets, row_ids) -> None:
        """Fill an empty Index from what the export methods wrote: every array is checked (ids
        ascending and known, offsets in range) before anything is built."""
        if self._names or self._rows:
            raise ValueError("restore fills an empty Index")
        n = len(names)
        if len(costs) != 8 * n:
            raise ValueError(f"{len(costs)} bytes of costs for {n} agents")
        if len(live) % 4 or len(row_ids) % 4 or len(row_offsets) % 8 or len(row_offsets) < 8:
            raise ValueError("live ids, row ids and row offsets must be whole arrays")
        live_ids = np.frombuffer(live, dtype="<u4").astype(np.int64)
        offsets = np.frombuffer(row_offsets, dtype="<u8").astype(np.int64)
        ids = np.frombuffer(row_ids, dtype="<u4").astype(np.int64)
        _check_ids(live_ids, n, "the live set")
        if offsets[0] != 0 or offsets[-1] != len(ids):
            raise ValueError("row offsets do not cover the row ids")
        for i in range(len(offsets) - 1):
            if not offsets[i] <= offsets[i + 1] <= len(ids):
                raise ValueError(f"row {i}: offsets {offsets[i]}..{offsets[i + 1]} out of order")
            _check_ids(ids[offsets[i]:offsets[i + 1]], n, f"row {i}")
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"agent names must be str, not {type(name).__name__}")
        cost_column = np.frombuffer(costs, dtype="<f8").tolist()
        for aid, cost in enumerate(cost_column):
            _check_cost(cost, aid)
        self._names = list(names)
        self._quoted = [orjson.dumps(name) for name in self._names]
        self._cost = cost_column
        self._rows = [_ids_bits(ids[offsets[i]:offsets[i + 1]], n) for i in range(len(offsets) - 1)]
        self._live = _ids_bits(live_ids, n)

    # -- reading ----------------------------------------------------------------------------------

    def live_ids(self) -> list[int]:
        return bits_to_ids(self._live)

    def row_ids(self, row: int) -> list[int]:
        return bits_to_ids(self._rows[row]) if row >= 0 else []

    def name(self, aid: int) -> str:
        if not 0 <= aid < len(self._names):      # as the native engine: no id counted from the end
            raise IndexError(f"agent id {aid} does not exist")
        return self._names[aid]

    def outcome(self, kind: int, aid: int) -> tuple[int, int]:
        counts = self._outcomes[kind].get(aid) if kind >= 0 else None
        return (counts[0], counts[1]) if counts else (0, 0)

    def nbytes(self) -> int:
        """Bytes held by the rows and the live set (the index proper, without names and columns)."""
        return sum((r.bit_length() + 7) // 8 for r in self._rows) + (self._live.bit_length() + 7) // 8

    # -- the hot path -----------------------------------------------------------------------------
    def explain(self, rows: Sequence[int], only: int, excluded: Sequence[int],
                within: Iterable[int] | None = None) -> Explanation:
        """Filter the live agents by the rows, then `agentRef` (`only`), then each anti-affinity.

        One ordered difference per predicate gives first-failed sets (docs/design.md, "How one
        placement flows"). `within`, when given, is the agent ids the candidates are restricted to
        (ids that are not live are left out).
        """
        candidates = self._live
        if within is not None:
            restriction = 0
            for aid in within:
                if aid >= 0:
                    restriction |= 1 << aid
            candidates &= restriction
        remaining = candidates
        failed = []
        all_rows = self._rows
        for r in rows:
            row = all_rows[r] if r >= 0 else 0
            failed.append(remaining & ~row)
            remaining &= row
        if only != NO_AGENT_REF:
            row = (1 << only) if only >= 0 else 0
            failed.append(remaining & ~row)
            remaining &= row
        for aid in excluded:
            row = (1 << aid) if aid >= 0 else 0
            failed.append(remaining & row)
            remaining &= ~row
        return Explanation(candidates, remaining, failed)

    def score(self, expl: Explanation, eval_rows: Sequence[int], session_row: int, kind: int,
              weights: Sequence[float]) -> Scores:
        """Default score components for the eligible agents and the winner (ties: smallest name).

        total = ((w_a*affinity + w_s*success_rate) + w_c*cost) + w_e*substantiated, in that order,
        so that both engines produce the same bits.
        """
        w_a, w_s, w_c, w_e = weights
        ids = expl.eligible_ids()
        session = self._rows[session_row] if session_row >= 0 else 0
        evals = [self._rows[r] if r >= 0 else 0 for r in eval_rows]
        outcomes = self._outcomes[kind] if kind >= 0 else {}
        names = self._names
        n_eval = len(evals)
        total, affinity, success, cost, substantiated = [], [], [], [], []
        best, best_total, best_name = UNKNOWN, 0.0, ""
        for aid in ids:
            a = 1.0 if (session >> aid) & 1 else 0.0
            counts = outcomes.get(aid)
            s = (counts[0] + 1) / (counts[1] + 2) if counts else 0.5
            c = self._cost[aid]
            if n_eval:
                e = sum((row >> aid) & 1 for row in evals) / n_eval
            else:
                e = 1.0
            t = ((w_a * a + w_s * s) + w_c * c) + w_e * e
            total.append(t)
            affinity.append(a)
            success.append(s)
            cost.append(c)
            substantiated.append(e)
            if best == UNKNOWN or t > best_total or (t == best_total and names[aid] < best_name):
                best, best_total, best_name = aid, t, names[aid]
        return Scores(ids, total, affinity, success, cost, substantiated, best)

    def place_batch(self, tasks: Iterable[tuple], weights: Sequence[float]) -> list[tuple[Explanation, Scores]]:
        """explain + score + choose for a batch: one `(Explanation, Scores)` per task
        `(explanation or None, rows, only, excluded, eval_rows, session_row, kind)`, as `explain`
        then `score` give them one at a time (a given explanation is only scored)."""
        out = []
        for given, rows, only, excluded, eval_rows, session_row, kind in tasks:
            expl = self.explain(rows, only, excluded) if given is None else given
            out.append((expl, self.score(expl, eval_rows, session_row, kind, weights)))
        return out

    # -- records ----------------------------------------------------------------------------------
    def candidate_names(self, expl: Explanation) -> list[str]:
        names = self._names
        return [names[i] for i in expl.candidate_ids()]

    def failed_pairs(self, expl: Explanation, predicates: Sequence[str]) -> list[dict[str, str]]:
        """§6 filters_failed: grouped by predicate in derivation order, then by agent id."""
        names = self._names
        return [{"candidate": names[i], "predicate": p}
                for k, p in enumerate(predicates) for i in bits_to_ids(expl.failed[k])]

    def score_map(self, scores: Scores) -> dict[str, dict[str, float]]:
        names = self._names
        return {names[aid]: {"total": scores.total[j], "affinity": scores.affinity[j],
                             "success_rate": scores.success_rate[j], "cost": scores.cost[j],
                             "substantiated": scores.substantiated[j]}
                for j, aid in enumerate(scores.ids)}

    def write_scheduling(self, expl: Explanation, scores: Scores, predicates: Sequence[str],
                         requirements_json: bytes, declaration_json: bytes, tail_json: bytes,
                         head: bytes = b"", foot: bytes = b"") -> bytes:
        """The §6 scheduling object as JSON bytes, keys in record order; `tail_json` is the
        already-encoded members that follow `scores` (route, timings), without braces; `head` and
        `foot` before and after it."""
        lists = orjson.dumps({"candidates": self.candidate_names(expl), "filters_passed": list(predicates),
                              "filters_failed": self.failed_pairs(expl, predicates),
                              "scores": self.score_map(scores)})
        return b"".join((head, b'{"requirements":', requirements_json, b',"declaration":', declaration_json, b",",
                         lists[1:-1], b"," if tail_json else b"", tail_json, b"}", foot))

    def write_rejection(self, expl: Explanation, predicates: Sequence[str], reason_json: bytes | None,
                        requirements_json: bytes, tail_json: bytes, head: bytes = b"", foot: bytes = b"") -> bytes:
        """The §6 task.rejected content as JSON bytes, as the native engine writes it (its reason
        derived from the lists when `reason_json` is None)."""
        return rejection_content(self, expl, predicates, reason_json, requirements_json, tail_json, head, foot)

    def failed_names(self, expl: Explanation, k: int, limit: int) -> str:
        """The names of the first `limit` agents (in id order) of failed set `k`, joined by ", "
        (a rejection's reason, §6)."""
        names = self._names
        return ", ".join([names[i] for i in bits_to_ids(expl.failed[k])[:max(limit, 0)]])

    def write_compact_lists(self, expl: Explanation, scores: Scores | None) -> bytes:
        """The compact member's `failed` list and, given the default scorer's `scores`, its
        `scores` object, as JSON members without braces (docs/compact-format.md): each set as
        base64 of its portable Roaring bytes ("" when empty), each score column as base64 of its
        little-endian doubles."""
        members: dict[str, object] = {"failed": [_roaring_text(ids) for ids in expl.failed]}
        if scores is not None:
            members["scores"] = {
                "ids": _roaring_text(expl.eligible) if len(scores) else "",
                "columns": [[c, "f64", base64.b64encode(np.asarray(getattr(scores, c), dtype="<f8").tobytes())
                             .decode("ascii")] for c in _COMPACT_COLUMNS]}
        return orjson.dumps(members)[1:-1]


    def write_placement_lines(self, seq: int, expl: Explanation, scores: Scores | None, scores_json: bytes | None,
                              submitted_json: bytes, admitted_json: bytes | None, fleet_json: bytes,
                              predicates_json: bytes, requirements_json: bytes, declaration_json: bytes | None,
                              reason_json: bytes | None, derived: bool, tail_json: bytes) -> bytes:
        """The trace lines of one placement in compact form, numbered from `seq`
        (docs/compact-format.md): task.submitted, then task.admitted + task.bound when
        `admitted_json` is given, else task.rejected. The large members come from `expl` and the
        default scorer's `scores` (a custom scorer's `scores` object comes as `scores_json`); the
        rest is JSON the caller holds (see the native engine's method, whose bytes these are)."""
        if expl is None:
            raise TypeError("a placement's lines need its Explanation")
        if _int64(seq, "seq") > (1 << 63) - 3:
            raise OverflowError(SEQ_PAST_INT64 % seq)
        for value, what in ((submitted_json, "submitted_json"), (fleet_json, "fleet_json"),
                            (predicates_json, "predicates_json"), (requirements_json, "requirements_json"),
                            (tail_json, "tail_json")):
            _bytes_check(value, what)
        if len(tail_json) < 2:
            raise ValueError("tail_json must be a JSON object")
        bound = admitted_json is not None
        if bound:
            _bytes_check(admitted_json, "admitted_json")
            _bytes_check(declaration_json, "declaration_json")
            if (scores is None) == (scores_json is None):
                raise ValueError("a bound placement's lines take the default scorer's Scores or a scores_json, "
                                 "one of them")
            if scores is None:
                _bytes_check(scores_json, "scores_json")
            if derived or reason_json is not None:
                raise ValueError("a bound placement has no reason")
        else:
            if scores is not None or scores_json is not None or declaration_json is not None:
                raise ValueError("a rejection's lines take no scores and no declaration")
            if bool(derived) == (reason_json is not None):
                raise ValueError("a rejection's lines take a reason_json unless its reason is derived")
            if reason_json is not None:
                _bytes_check(reason_json, "reason_json")
        head = b'{"format":%d,"fleet":%b,"filters_passed":%b,%b' % (
            2 if derived else 1, fleet_json, predicates_json, self.write_compact_lists(expl, scores))
        submitted = b'{"seq":%d,"kind":"task.submitted","content":%b}\n' % (seq, submitted_json)
        if admitted_json is not None and declaration_json is not None:   # bound (checked above)
            custom = b',"scores":' + scores_json if scores_json is not None else b""
            return submitted + (
                b'{"seq":%d,"kind":"task.admitted","content":%b}\n' % (seq + 1, admitted_json)
                + b'{"seq":%d,"kind":"task.bound","content":{"a3fast.compact":%b%b,"requirements":%b,'
                  b'"declaration":%b,"rest":%b}}}\n'
                % (seq + 2, head, custom, requirements_json, declaration_json, tail_json))
        reason = b'"reason":' + reason_json + b"," if reason_json is not None else b""
        derived_member = b',"derived_reason":true' if derived else b""
        return submitted + (
            b'{"seq":%d,"kind":"task.rejected","content":{"code":"unschedulable",%b"requirements":%b,'
            b'"a3fast.compact":%b%b},%b}}\n'
            % (seq + 1, reason, requirements_json, head, derived_member, tail_json[1:-1]))

    def write_placement_lines_of(self, seq: int, placement: Any, task: dict | None, membership: Any,
                                 snapshot_seq: Any, caches: tuple) -> tuple[bytes, int] | None:
        """`write_placement_lines` of a Placement on this index in the usual case, its arguments
        gathered here: the lines and how many records they are, or None when the placement is not
        that case (see the native engine's method, whose bytes and caches these are)."""
        if not _usual_snapshot(membership, snapshot_seq, caches) or _int64(seq, "seq") > (1 << 63) - 3:
            return None     # lines numbered past 2^63-1: the caller's way
        gathered = self._gather_lines(seq, placement, task, membership, caches)
        if gathered is None:
            return None
        return self.write_placement_lines(*gathered[0], b"%d" % snapshot_seq, *gathered[1]), gathered[2]

    def write_placements_lines_of(self, seq: int, placements: list, tasks: list | None, start: int, membership: Any,
                                  snapshot_seq: Any, caches: tuple, prefix: bytes = b"") -> tuple[bytes, list[int]]:
        """`write_placement_lines_of` of the placements from `start` on, in one buffer after `prefix`:
        the lines of the longest run of usual placements there and each one's record count (see the
        native engine's method, whose bytes and caches these are)."""
        # the native method's arguments are typed: each refused alike here
        seq, start = _int64(seq, "seq"), _int64(start, "start")
        for value, kind, name in ((prefix, bytes, "prefix"), (placements, list, "placements"), (caches, tuple, "caches")):
            if type(value) is not kind:
                raise TypeError(f"{name}: expected {kind.__name__}, found {type(value).__name__}")
        if tasks is not None and (type(tasks) is not list or len(tasks) != len(placements)):
            raise ValueError("tasks: expected None or a list beside the placements")
        if start < 0:
            raise ValueError(f"start: expected a position in the placements, found {start}")
        counts: list[int] = []
        if start >= len(placements) or not _usual_snapshot(membership, snapshot_seq, caches):
            return prefix, counts
        fleet_json = b"%d" % snapshot_seq
        out = [prefix]
        for k in range(start, len(placements)):
            if seq > (1 << 63) - 3:     # the native engine numbers lines in a signed 64-bit integer
                break
            if k >= len(placements) or tasks is not None and k >= len(tasks):
                break                   # shortened by a caller's code the gathering ran
            gathered = self._gather_lines(seq, placements[k], None if tasks is None else tasks[k], membership,
                                          caches)
            if gathered is None:
                break
            out.append(self.write_placement_lines(*gathered[0], fleet_json, *gathered[1]))
            counts.append(gathered[2])
            seq += gathered[2]
        return b"".join(out), counts

    def _gather_lines(self, seq: int, p: Any, task: dict | None, membership: Any, caches: tuple) \
            -> tuple[tuple[int, Any, Any, None, bytes, bytes | None],
                     tuple[bytes, bytes, bytes | None, None, bool, bytes], int] | None:
        """A usual placement's `write_placement_lines` arguments, before the fleet member's and from
        it on, and its record count; None when it is not that case."""
        if p.index is not self or p.resumed or p.custom_scores or p.route is not None:
            return None
        requirements = p.requirements
        if p.submitted is not requirements:
            return None
        session = p.session
        if session is not None and session != requirements.session:
            return None
        # a session the placement left unheld (remember_session=False) is said before the timings
        unheld = session is not None and p.session_held is False
        if p.membership is None or p.membership != membership:
            return None
        if task is not None and type(task) is not dict:
            return None
        requirements_cache, seen, predicates_cache, admitted_cache = caches[0], caches[2], caches[4], caches[6]
        expl = p.explanation
        bound = p.agent is not None
        scores = admitted_json = declaration_json = None
        derived = False
        if bound:
            scores = p.scores
            declaration_json = p.declaration_json
            agent = p.declaration.agent
            admitted_json = admitted_cache.get(agent)
            if admitted_json is None:
                admitted_json = orjson.dumps({"agent": agent.to_dict()})
                if len(admitted_cache) >= caches[7]:
                    admitted_cache.clear()
                admitted_cache[agent] = admitted_json
        else:
            # a3fast's own reason is the text the lists give, unless a reason_limit shortened it
            derived = p.reason_limit is None and expl.candidates_count > 0
            if not derived:
                return None
        tail_json = _timings_tail(p.gather_ns, p.select_ns, p.decided_at_ns)
        if tail_json is None:
            return None
        if unheld:
            tail_json = UNHELD_TAIL_HEAD + tail_json[1:]
        key = id(requirements)
        hit = requirements_cache.get(key)
        keep = 0
        if hit is not None and hit[0] is requirements:
            requirements_json, predicates_json = hit[1]
        else:
            predicates = requirements.predicates
            if type(predicates) is not tuple:
                return None
            predicates_json = predicates_cache.get(predicates)
            if predicates_json is None:
                predicates_json = orjson.dumps(predicates)
                if len(predicates_cache) >= caches[5]:
                    predicates_cache.clear()
                predicates_cache[predicates] = predicates_json
            requirements_json = orjson.dumps(requirements.doc)
            if p.prepared:      # one the placement parsed itself is never placed again
                keep = 2 if seen.get(key) is requirements else 1
        if task:
            submitted_json = orjson.dumps({**task, "requirements": requirements.doc})
        else:
            submitted_json = b'{"requirements":' + requirements_json + b"}"
        if keep == 1:
            # held while noted, so the id names this object (a freed one's is reused at once)
            if len(seen) >= caches[3]:
                seen.clear()
            seen[key] = requirements
        elif keep == 2:
            if len(requirements_cache) >= caches[1]:
                requirements_cache.clear()
            # the object held, so its id is not reused meanwhile
            requirements_cache[key] = (requirements, (requirements_json, predicates_json))
        return ((seq, expl, scores, None, submitted_json, admitted_json),
                (predicates_json, requirements_json, declaration_json, None, derived, tail_json), 3 if bound else 2)


#: the default scorer's components, in the order of the compact record's columns
_COMPACT_COLUMNS = ("total", "affinity", "success_rate", "cost", "substantiated")


#: a placement's lines would be numbered past what the native engine's signed 64-bit seq holds
SEQ_PAST_INT64 = ("seq: %d: a placement's lines from it would be numbered past 2^63-1, which the engine's writer "
                  "does not number")


def _int64(value: Any, name: str) -> int:
    """`value` as an index that a C int64 holds (TypeError, OverflowError as the native engine's
    typed arguments raise them)."""
    value = operator.index(value)
    if not -(1 << 63) <= value < (1 << 63):
        raise OverflowError(f"{name}: {value} does not fit a signed 64-bit integer")
    return value


def _usual_snapshot(membership: Any, snapshot_seq: Any, caches: tuple) -> bool:
    """Whether the caller's last membership and snapshot seq let a placement's lines be gathered
    (`Index.write_placement_lines_of`)."""
    if membership is None or type(snapshot_seq) is not int:
        return False
    if not 0 <= snapshot_seq < 2**63:      # the native engine writes an int64's digits only
        return False
    if len(caches) != 8:
        raise ValueError(f"a placement's line caches are 8, found {len(caches)}")
    return True


#: A tail's first member when the placement left its task's session unheld (record.write.tail_members).
UNHELD_TAIL_HEAD = b'{"a3fast.session_held":false,'


def _timings_tail(gather_ns: Any, select_ns: Any, decided_at_ns: Any) -> bytes | None:
    """`record.write.tail_json` of a placement whose only tail member is `timings`, both phases
    measured; None for values the native engine leaves to the caller's writer (a phase outside 0
    and 100 ≤ |ns| < 10**15, a moment before 1970 or from 2116 on)."""
    if type(gather_ns) is not int or type(select_ns) is not int or type(decided_at_ns) is not int:
        return None
    if not (-(1 << 62) < gather_ns < (1 << 62) and -(1 << 62) < select_ns < (1 << 62)
            and 0 <= decided_at_ns < (1 << 62)):
        return None
    if not all(ns == 0 or 100 <= abs(ns) < 10**15 for ns in (gather_ns, select_ns)):
        return None
    gather, select = gather_ns / 1e6, select_ns / 1e6
    moment = datetime.fromtimestamp(decided_at_ns // 1_000_000_000, tz=timezone.utc)
    return b'{"timings":{"gather_ms":%b,"select_ms":%b,"decided_at":"%b.%06dZ"}}' % (
        orjson.dumps(gather), orjson.dumps(select), moment.strftime("%Y-%m-%dT%H:%M:%S").encode(),
        decided_at_ns // 1000 % 1_000_000)


def _bytes_check(value: Any, what: str) -> None:
    if type(value) is not bytes:
        raise TypeError(f"{what} must be bytes, not {type(value).__name__}")


def _roaring_text(bits: int) -> str:
    return base64.b64encode(serialize_ids(bits_to_ids(bits))).decode("ascii") if bits else ""


def _ids_array(bits: int) -> np.ndarray:
    """Ascending ids of the set bits, as u32."""
    raw = np.frombuffer(bits.to_bytes((bits.bit_length() + 7) // 8, "little"), dtype=np.uint8)
    return np.flatnonzero(np.unpackbits(raw, bitorder="little")).astype("<u4")


def _ids_bits(ids: np.ndarray, size: int) -> int:
    if not len(ids):
        return 0
    flags = np.zeros(size, dtype=bool)
    flags[ids] = True
    return int.from_bytes(np.packbits(flags, bitorder="little").tobytes(), "little")


def _check_ids(ids: np.ndarray, limit: int, what: str) -> None:
    """Ids strictly ascending and below `limit`, or ValueError naming `what`."""
    if not len(ids):
        return
    bad = np.flatnonzero((ids >= limit) | np.concatenate(([False], ids[1:] <= ids[:-1])))
    if len(bad):
        j = int(bad[0])
        raise ValueError(f"{what}: agent id {int(ids[j])} at position {j} is out of order or unknown")


# -- names offered by a caller, resolved in one call (the Kubernetes extender's NodeNames) --------
def split_members(names: list[str], members: Any) -> tuple[list[str], list[str]]:
    """`names` split into those in `members` (a set, frozenset or dict) and the rest, each in the
    order given."""
    inside = [n for n in names if n in members]
    if len(inside) == len(names):
        return inside, []
    return inside, [n for n in names if n not in members]


def live_ids_of(ids: dict[str, int], entries: list[Any], names: Iterable[Any]) -> list[int]:
    """The ids of the named agents that are live (a name with an id whose entry is not None),
    ascending and once each; other names, and items that are not strings, are left out."""
    found = {aid for aid in (ids.get(n) for n in names if isinstance(n, str))
             if aid is not None and entries[aid] is not None}
    return sorted(found)


def first_failed_into(index: Index, expl: Explanation, predicates: Sequence[str], out: dict[str, str]) -> None:
    """Each ineligible candidate's name -> the first predicate it failed, added to `out` in the
    order of `Index.failed_pairs` (by predicate in derivation order, then by agent id)."""
    if len(predicates) != len(expl.failed):
        raise ValueError(f"{len(predicates)} predicates for {len(expl.failed)} failed sets")
    names = index._names
    for k, predicate in enumerate(predicates):
        for i in bits_to_ids(expl.failed[k]):
            out[names[i]] = predicate


# -- a task's predicates resolved to the engine's arguments (a3fast.fleet.rows) -------------------
def resolve_predicates(predicates: Sequence[str], rows: dict[str, int], eval_rows: dict[str, int],
                       ids: dict[str, int], no_agent_ref: int) -> tuple[list[int], int, list[int], list[int]]:
    """A task's predicates as `Index.explain`'s and `Index.score`'s arguments: the filter rows in
    derivation order (-1 for a predicate no agent satisfies), the agentRef's id (`no_agent_ref`
    when the task names none, -1 for a name not in the fleet), the anti-affinity ids (-1 likewise),
    and for each required capability the row of agents that substantiate it (-1: none)."""
    filter_rows: list[int] = []
    excluded: list[int] = []
    substantiated: list[int] = []
    only = no_agent_ref
    for p in predicates:
        # most predicates name an interned row: look it up before classifying the string
        row = rows.get(p)
        if row is not None:
            filter_rows.append(row)
            if p.startswith("capability:"):
                substantiated.append(eval_rows.get(p, -1))
        elif p.startswith("anti-affinity:"):
            excluded.append(ids.get(p[14:], -1))
        elif p.startswith("agentRef:"):
            only = ids.get(p[9:], -1)
        else:   # a predicate no agent satisfies
            filter_rows.append(-1)
            if p.startswith("capability:"):
                substantiated.append(-1)
    return filter_rows, only, excluded, substantiated
