"""One shard of a ShardedFleet: a plain `Fleet` of the agents whose names hash to it, kept durable
by checkpoints and a journal, answering placements with compact explanations (its part of the
placing pipeline: prepare, explain, score and choose over its own agents).

A shard is a plain class; `a3fast.distributed.ShardedFleet` runs each one as a Ray actor. Its
durable state, in the shard's `state_dir` (which must be reachable from wherever the actor
restarts), follows the service's protocol and format (a3fast.statedir, a3fast.journal) under the
prefix `shard-I.`: a checkpoint naming the shard's fleet snapshot and the journal generation after
it, the shard's change count and every name it has given a local id; each acknowledged change is one
journal entry, written (and with `fsync=True` fsynced) before it is acknowledged.

A restarted actor runs `__init__` again: it loads its checkpoint and replays the journal after it,
so it answers exactly as before. A new shard of a fleet read back by `ShardedFleet.load` starts
from its part of that snapshot (`load_from`), written by `save_snapshot`, and takes a checkpoint at
once, so a restart of its actor finds it.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import orjson

from ..errors import SnapshotError
from ..fleet import Fleet
from ..journal import CHANGE, ChangeUnreadable, Journal, apply_change, decode_change, encode_change
from ..scoring import import_scorer
from ..statedir import StateDir, StateError
from .merge import ShardAnswer

__all__ = ["FleetShard", "CHECKPOINT_EVERY"]

#: Changes between checkpoints (a change is one call: one add, one extend batch, one outcome...).
CHECKPOINT_EVERY = 1000
#: An extend of at least this many declarations is followed by a checkpoint instead of a journal
#: entry, since the journal would otherwise hold the whole batch once more.
CHECKPOINT_BATCH = 10_000


class FleetShard:
    """A Fleet shard with durable state (see the module docstring)."""

    def __init__(self, shard: int, engine: str | None = None, state_dir: str | None = None,
                 checkpoint_every: int = CHECKPOINT_EVERY, fsync: bool = False,
                 load_from: str | None = None, names: Sequence[str] | None = None):
        self.shard = shard
        self._engine = engine
        self._dir = state_dir
        self._every = max(1, int(checkpoint_every))
        self.fleet = Fleet(engine)
        #: every name given a local id, in id order (the fleet's own ids: it numbers new names so)
        self._local: dict[str, int] = {}
        self._seq = 0            # changes acknowledged
        self._checkpoint_seq = 0   # changes in the newest checkpoint
        self.recovered: dict[str, Any] = {"checkpoint_seq": 0, "journal_changes": 0, "torn_bytes": 0,
                                          "loaded_from": None}
        self._journal: Journal | None = None
        self._state: StateDir | None = None
        if state_dir is not None:
            self._state = StateDir(Path(state_dir), prefix=f"shard-{shard}.")
            fresh = self._recover()
            self._journal = Journal(self._state.journal_path(self._state.generation),
                                    fsync="always" if fsync else "never")
            if fresh and load_from is not None:
                self._load(load_from, names or [])
                self._save()
        elif load_from is not None:
            self._load(load_from, names or [])

    def _load(self, path: str, names: Sequence[str]) -> None:
        """Start from this shard's part of a ShardedFleet snapshot (`names`: its local ids' names,
        as the coordinator saved them)."""
        self.fleet = Fleet.load(path, self._engine)
        self._local = {name: i for i, name in enumerate(names)}
        stray = [n for n in self.fleet.names() if n not in self._local]
        if stray:
            raise SnapshotError(f"{path}: shard {self.shard} holds {stray[0]!r}, which the coordinator's "
                                f"order does not name; the snapshot's parts do not belong together")
        self.recovered["loaded_from"] = path

    # -- changes ----------------------------------------------------------------------------------
    # Each change returns the count of changes acknowledged so far, which the coordinator holds
    # against its own: a change that reached the shard after the coordinator gave up on it shows.
    def add(self, doc: Mapping[str, Any]) -> tuple[int, int]:
        """Add or replace one agent; its local id."""
        self._apply({"op": "put", "decls": [doc]})
        self._commit("put", decls=[doc])
        return self._local[doc["agent"]["name"]], self._seq

    def extend(self, docs: Sequence[Mapping[str, Any]]) -> tuple[list[int], int]:
        """Add or replace agents in order; their local ids."""
        self.fleet.extend(docs)
        self._number(docs)
        if len(docs) >= CHECKPOINT_BATCH and self._journal is not None:
            self._seq += 1
            self._save()
        else:
            self._commit("put", decls=list(docs))
        return [self._local[d["agent"]["name"]] for d in docs], self._seq

    def remove(self, name: str) -> int:
        self._apply({"op": "delete", "name": name})
        self._commit("delete", name=name)
        return self._seq

    def record_outcome(self, agent: str, kind: Any, success: bool) -> int:
        self._apply({"op": "outcome", "agent": agent, "kind": kind, "success": success})
        self._commit("outcome", agent=agent, kind=kind, success=success)
        return self._seq

    def record_outcomes(self, agent: str, kind: str, successes: int, attempts: int) -> int:
        """Many outcomes of one kind at once (Fleet.record_outcomes: restoring saved counts)."""
        change = {"agent": agent, "kind": kind, "successes": successes, "attempts": attempts}
        self._apply({"op": "outcomes", **change})
        self._commit("outcomes", **change)
        return self._seq

    def hold_session(self, agent: str, session: str) -> int:
        self._apply({"op": "hold", "agent": agent, "session": session})
        self._commit("hold", agent=agent, session=session)
        return self._seq

    def release_session(self, agent: str, session: str) -> int:
        self._apply({"op": "release", "agent": agent, "session": session})
        self._commit("release", agent=agent, session=session)
        return self._seq

    def _apply(self, change: dict[str, Any]) -> None:
        """One change made on the shard's fleet: the service's replay (a3fast.journal), then the
        local ids of names new to the shard."""
        apply_change(self.fleet, change)
        if change["op"] == "put":
            self._number(change["decls"])

    def _number(self, docs: Sequence[Mapping[str, Any]]) -> None:
        local = self._local
        for d in docs:
            local.setdefault(d["agent"]["name"], len(local))

    # -- placing: this shard's part of the pipeline ----------------------------------------------
    def score_task(self, requirements: Mapping[str, Any], session: str | None,
                   candidates: Sequence[str] | None = None, scorer: str | None = None) -> ShardAnswer:
        """Run the pipeline's prepare, explain, score and choose stages over this shard's agents
        (only `candidates`, if given) and answer compactly: its local failed and eligible sets, the
        eligible agents' score components, and its own winner. `scorer` is a custom scorer's
        importable name (a3fast.scoring.import_scorer). Nothing in the shard changes."""
        started = time.perf_counter_ns()
        state = self.fleet.scored(requirements, session, candidates=candidates, scorer=self._scorer(scorer))
        return self._answer(state, started)

    def score_tasks(self, tasks: Sequence[tuple[Mapping[str, Any], str | None]],
                    scorer: str | None = None) -> list[ShardAnswer]:
        """`score_task` for a batch of (requirements, session), in one call."""
        out = []
        custom = self._scorer(scorer)
        for requirements, session in tasks:
            started = time.perf_counter_ns()
            out.append(self._answer(self.fleet.scored(requirements, session, scorer=custom), started))
        return out

    def _scorer(self, name: str | None) -> Any:
        return None if name is None else import_scorer(name)

    def all_failed(self, requirements: Mapping[str, Any]) -> dict[str, list[str]]:
        """Every predicate each ineligible agent of this shard fails (Fleet.all_failed)."""
        return self.fleet.all_failed(requirements)

    def _answer(self, state: Any, started: int) -> ShardAnswer:
        fleet = self.fleet
        expl, scores, best = state.explanation, state.scores, state.best
        counts = expl.failed_counts()
        failed = [expl.failed_roaring(k) if c else b"" for k, c in enumerate(counts)]
        custom = scores.entries if state.scorer is not None else None
        if custom is None:
            columns = np.array([scores.total, scores.affinity, scores.success_rate, scores.cost,
                                scores.substantiated], dtype=np.float64).reshape(5, len(scores))
        else:
            columns = np.zeros((5, len(scores)), dtype=np.float64)
            columns[0] = [entry["total"] for entry in custom]
        best_total = float(columns[0][scores.ids.index(best)]) if best >= 0 else 0.0
        name = fleet.index.name(best) if best >= 0 else None
        holds = name is not None and state.session is not None and fleet.holds_session(name, state.session)
        return ShardAnswer(failed, counts, expl.eligible_roaring() if len(scores) else b"", columns,
                           best, best_total, name, fleet.declaration_json(best) if best >= 0 else None,
                           holds, len(self._local), self._seq, time.perf_counter_ns() - started, custom)

    # -- reading ----------------------------------------------------------------------------------
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
                "changes": self._seq, "checkpoint_seq": self._checkpoint_seq, "recovered": dict(self.recovered),
                "pid": os.getpid(), "index_nbytes": self.fleet.index_nbytes(), "rss_bytes": _rss()}

    def local_names(self) -> list[str]:
        """Every name given a local id, in id order."""
        return list(self._local)

    # -- durability -------------------------------------------------------------------------------
    def save_snapshot(self, path: str) -> tuple[int, int]:
        """This shard's part of a ShardedFleet snapshot: its fleet (`Fleet.save`) at `path`, written
        here, in the shard's own process. Returns (local ids given, changes acknowledged)."""
        self.fleet.save(path)
        return len(self._local), self._seq

    def _commit(self, op: str, **fields: Any) -> None:
        """Journal an applied change (acknowledged once this returns), with a checkpoint every K."""
        self._seq += 1
        if self._journal is None:
            return
        self._journal.write_now(encode_change(op, **fields))
        if self._seq - self._checkpoint_seq >= self._every:
            self._save()

    def _save(self) -> None:
        """A checkpoint (a3fast.statedir): a new journal generation, the fleet snapshot, the
        checkpoint naming both with the change count and the local names."""
        assert self._state is not None and self._journal is not None   # only with a state_dir
        self._journal.switch(self._state.next_generation())
        self._state.commit(self.fleet.save, {"seq": self._seq, "names": list(self._local)})
        self._checkpoint_seq = self._seq

    def _recover(self) -> bool:
        """The checkpoint and the journal after it; True when the directory held nothing."""
        assert self._state is not None   # only with a state_dir
        recovered = self._state.recover()
        checkpoint = recovered.checkpoint
        if checkpoint is not None:
            assert recovered.snapshot is not None   # a checkpoint always names one
            self.fleet = Fleet.load(recovered.snapshot, self._engine)
            self._local = {name: i for i, name in enumerate(checkpoint["names"])}
            self._seq = self._checkpoint_seq = int(checkpoint["seq"])
            self.recovered["checkpoint_seq"] = self._seq
        self.recovered["torn_bytes"] = recovered.cut_bytes
        for entry in recovered.entries:
            try:
                if entry.payload[:1] != CHANGE:
                    raise ChangeUnreadable(f"unknown entry type {entry.payload[:1]!r}")
                self._apply(decode_change(entry.payload[1:]))
            except ChangeUnreadable as exc:
                raise StateError(f"{entry.where()}: unreadable: {exc}") from None
            except (SnapshotError, StateError):
                raise
            except Exception as exc:
                raise StateError(f"{entry.where()}: does not apply to shard {self.shard}'s fleet "
                                 f"({type(exc).__name__}: {exc})") from None
            self._seq += 1
            self.recovered["journal_changes"] += 1
        return checkpoint is None and not recovered.entries


def _rss() -> int | None:
    """This process's resident memory in bytes (Linux), else None."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
