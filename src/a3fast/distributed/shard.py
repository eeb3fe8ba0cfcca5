"""One shard of a ShardedFleet: a plain `Fleet` of the agents whose names hash to it, kept durable
by a snapshot and a journal, answering placements with compact explanations.

A shard is a plain class; `a3fast.distributed.ShardedFleet` runs each one as a Ray actor. Durable
state, in the shard's `state_dir` (which must be reachable from wherever the actor restarts):

- `shard-I.SEQ.names.json` then `shard-I.SEQ.a3snap` (`Fleet.save`, written whole or not at all):
  the fleet after change SEQ, and every name the shard has given a local id, in id order;
- `shard-I.journal`: one line per acknowledged change since, `CRC32 JSON`, each flushed before
  the change is acknowledged (it survives the actor process; `fsync=True` makes it survive the
  machine too).

A restarted actor runs `__init__` again: it loads the newest complete snapshot and replays the
journal's changes after it, so it answers exactly as before. A torn last line (the process died
while writing it, so the change was never acknowledged) is cut; a damaged line before the last
is an error, since what follows it cannot be trusted.
"""
from __future__ import annotations

import glob
import os
import re
import time
import zlib
from typing import Any, Mapping, Sequence

import numpy as np
import orjson

from ..errors import SnapshotError
from ..fleet import Fleet
from .merge import ShardAnswer

__all__ = ["FleetShard", "SNAPSHOT_EVERY"]

#: Changes between snapshots (a change is one call: one add, one extend batch, one outcome...).
SNAPSHOT_EVERY = 1000
#: An extend of at least this many declarations is followed by a snapshot instead of a journal
#: line, since the journal would otherwise hold the whole batch once more.
SNAPSHOT_BATCH = 10_000


class FleetShard:
    """A Fleet shard with durable state (see the module docstring)."""

    def __init__(self, shard: int, engine: str | None = None, state_dir: str | None = None,
                 snapshot_every: int = SNAPSHOT_EVERY, fsync: bool = False):
        self.shard = shard
        self._engine = engine
        self._dir = state_dir
        self._every = max(1, int(snapshot_every))
        self._fsync = fsync
        self.fleet = Fleet(engine)
        #: every name given a local id, in id order (the fleet's own ids: it numbers new names so)
        self._local: dict[str, int] = {}
        self._seq = 0            # changes acknowledged
        self._snapshot_seq = 0   # changes in the newest snapshot
        self.recovered: dict[str, int] = {"snapshot_seq": 0, "journal_changes": 0, "torn_bytes": 0}
        self._journal = None
        if state_dir is not None:
            os.makedirs(state_dir, exist_ok=True)
            self._recover()
            self._journal = open(self._journal_path(), "ab")

    # -- changes ----------------------------------------------------------------------------------
    # Each change returns the count of changes acknowledged so far, which the coordinator holds
    # against its own: a change that reached the shard after the coordinator gave up on it shows.
    def add(self, doc: Mapping[str, Any]) -> tuple[int, int]:
        """Add or replace one agent; its local id."""
        self._apply("add", [doc])
        self._commit("add", [doc])
        return self._local[doc["agent"]["name"]], self._seq

    def extend(self, docs: Sequence[Mapping[str, Any]]) -> tuple[list[int], int]:
        """Add or replace agents in order; their local ids."""
        self._apply("extend", [docs])
        if len(docs) >= SNAPSHOT_BATCH and self._dir is not None:
            self._seq += 1
            self._save()
        else:
            self._commit("extend", [docs])
        return [self._local[d["agent"]["name"]] for d in docs], self._seq

    def remove(self, name: str) -> int:
        self._apply("remove", [name])
        self._commit("remove", [name])
        return self._seq

    def record_outcome(self, agent: str, kind: Any, success: bool) -> int:
        self._apply("outcome", [agent, kind, success])
        self._commit("outcome", [agent, kind, success])
        return self._seq

    def record_outcomes(self, agent: str, kind: str, successes: int, attempts: int) -> int:
        """Many outcomes of one kind at once (Fleet.record_outcomes: restoring saved counts)."""
        self._apply("outcomes", [agent, kind, successes, attempts])
        self._commit("outcomes", [agent, kind, successes, attempts])
        return self._seq

    def hold_session(self, agent: str, session: str) -> int:
        self._apply("hold", [agent, session])
        self._commit("hold", [agent, session])
        return self._seq

    def release_session(self, agent: str, session: str) -> int:
        self._apply("release", [agent, session])
        self._commit("release", [agent, session])
        return self._seq

    def _apply(self, op: str, args: list) -> None:
        fleet = self.fleet
        if op == "add":
            fleet.add(args[0])
            self._number([args[0]])
        elif op == "extend":
            fleet.extend(args[0])
            self._number(args[0])
        elif op == "remove":
            fleet.remove(args[0])
        elif op == "outcome":
            fleet.record_outcome(*args)
        elif op == "outcomes":
            fleet.record_outcomes(*args)
        elif op == "hold":
            fleet.hold_session(*args)
        elif op == "release":
            fleet.release_session(*args)
        else:
            raise SnapshotError(f"shard {self.shard}: unknown journal operation {op!r}")

    def _number(self, docs: Sequence[Mapping[str, Any]]) -> None:
        local = self._local
        for d in docs:
            local.setdefault(d["agent"]["name"], len(local))

    # -- reading ----------------------------------------------------------------------------------
    def explain(self, requirements: Mapping[str, Any], session: str | None,
                reason_limit: int | None = None, candidates: Sequence[str] | None = None) -> ShardAnswer:
        """This shard's compact explanation of a task: its local failed and eligible sets, the
        eligible agents' score components, and its own winner (over `candidates` only, if given)."""
        started = time.perf_counter_ns()
        p = self.fleet.place(requirements, session, remember_session=False, candidates=candidates)
        expl, scores = p.explanation, p.scores
        counts = expl.failed_counts()
        failed = [expl.failed_roaring(k) if c else b"" for k, c in enumerate(counts)]
        columns = np.array([scores.total, scores.affinity, scores.success_rate, scores.cost,
                            scores.substantiated], dtype=np.float64).reshape(5, len(scores))
        best_total = float(columns[0][scores.ids.index(scores.best)]) if scores.best >= 0 else 0.0
        holds = p.agent is not None and p.session is not None and self.fleet.holds_session(p.agent, p.session)
        return ShardAnswer(failed, counts, expl.eligible_roaring() if len(scores) else b"", columns,
                           scores.best, best_total, p.agent, p.declaration_json, holds, len(self._local), self._seq,
                           time.perf_counter_ns() - started)

    def declaration_json(self, name: str) -> bytes | None:
        decl = self.fleet.get(name)
        return orjson.dumps(decl.doc) if decl is not None else None

    def declarations_json(self) -> dict[str, bytes]:
        """Every live agent's declaration as JSON, by name (one call for a whole snapshot)."""
        return {decl.agent.name: orjson.dumps(decl.doc) for decl in self.fleet}

    def outcomes(self, agent: str, kind: str) -> tuple[int, int]:
        return self.fleet.outcomes(agent, kind)

    def holds_session(self, agent: str, session: str) -> bool:
        return self.fleet.holds_session(agent, session)

    def state(self) -> dict[str, Any]:
        """What the coordinator checks and reports: ids given, live agents, changes, recovery."""
        return {"shard": self.shard, "ids_given": len(self._local), "live": len(self.fleet),
                "changes": self._seq, "snapshot_seq": self._snapshot_seq, "recovered": dict(self.recovered),
                "pid": os.getpid(), "index_nbytes": self.fleet.index_nbytes(), "rss_bytes": _rss()}

    def local_names(self) -> list[str]:
        """Every name given a local id, in id order."""
        return list(self._local)

    # -- durability -------------------------------------------------------------------------------
    def _journal_path(self) -> str:
        return os.path.join(self._dir, f"shard-{self.shard}.journal")  # type: ignore[arg-type]

    def _snapshot_paths(self, seq: int) -> tuple[str, str]:
        base = os.path.join(self._dir, f"shard-{self.shard}.{seq}")  # type: ignore[arg-type]
        return base + ".names.json", base + ".a3snap"

    def _commit(self, op: str, args: list) -> None:
        """Journal an applied change (acknowledged once this returns), snapshotting every K."""
        self._seq += 1
        if self._journal is None:
            return
        payload = orjson.dumps({"seq": self._seq, "op": op, "args": args})
        self._journal.write(b"%08x %s\n" % (zlib.crc32(payload), payload))
        self._journal.flush()
        if self._fsync:
            os.fsync(self._journal.fileno())
        if self._seq - self._snapshot_seq >= self._every:
            self._save()

    def _save(self) -> None:
        """Snapshot the fleet after change `_seq`, then start an empty journal and drop older
        snapshots. The names file goes first: a snapshot file's presence marks both complete."""
        names_path, snap_path = self._snapshot_paths(self._seq)
        tmp = names_path + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(orjson.dumps(list(self._local)))
        os.replace(tmp, names_path)
        self.fleet.save(snap_path)
        old = self._snapshot_seq
        self._snapshot_seq = self._seq
        if self._journal is not None:
            self._journal.close()
        self._journal = open(self._journal_path(), "wb")
        if old != self._seq:
            for path in self._snapshot_paths(old):
                if os.path.exists(path):
                    os.remove(path)

    def _newest_snapshot(self) -> int:
        pattern = re.compile(rf"shard-{self.shard}\.(\d+)\.a3snap$")
        seqs = []
        for path in glob.glob(os.path.join(self._dir, f"shard-{self.shard}.*.a3snap")):  # type: ignore[arg-type]
            m = pattern.search(path)
            if m and os.path.exists(self._snapshot_paths(int(m.group(1)))[0]):
                seqs.append(int(m.group(1)))
        return max(seqs, default=0)

    def _recover(self) -> None:
        seq = self._newest_snapshot()
        if seq:
            names_path, snap_path = self._snapshot_paths(seq)
            self.fleet = Fleet.load(snap_path, self._engine)
            with open(names_path, "rb") as fh:
                self._local = {name: i for i, name in enumerate(orjson.loads(fh.read()))}
            self._seq = self._snapshot_seq = seq
            self.recovered["snapshot_seq"] = seq
        path = self._journal_path()
        if not os.path.exists(path):
            return
        with open(path, "rb") as fh:
            data = fh.read()
        at = 0
        lines = data.split(b"\n")
        for n, line in enumerate(lines):
            last = n == len(lines) - 1
            if last and not line:
                break
            entry = _journal_entry(line)
            if entry is None:
                if last or all(not rest for rest in lines[n + 1:]):
                    # a torn tail: written while the process died, never acknowledged
                    self.recovered["torn_bytes"] = len(data) - at
                    with open(path, "r+b") as out:
                        out.truncate(at)
                    break
                raise SnapshotError(f"{path}: journal line {n + 1} is damaged (its checksum does not "
                                    f"match) and changes follow it; the shard cannot recover")
            at += len(line) + 1
            if entry["seq"] <= self._seq:
                continue   # already in the snapshot
            if entry["seq"] != self._seq + 1:
                raise SnapshotError(f"{path}: journal line {n + 1} holds change {entry['seq']}, "
                                    f"expected {self._seq + 1}")
            self._apply(entry["op"], entry["args"])
            self._seq = entry["seq"]
            self.recovered["journal_changes"] += 1


def _rss() -> int | None:
    """This process's resident memory in bytes (Linux), else None."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _journal_entry(line: bytes) -> dict | None:
    """A journal line's change, or None if the line is torn or damaged."""
    crc, _, payload = line.partition(b" ")
    try:
        if len(crc) != 8 or int(crc, 16) != zlib.crc32(payload):
            return None
        entry = orjson.loads(payload)
    except (ValueError, orjson.JSONDecodeError):
        return None
    return entry if isinstance(entry, dict) and {"seq", "op", "args"} <= entry.keys() else None
