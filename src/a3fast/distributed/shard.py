"""One shard of a ShardedFleet: a plain `Fleet` of the agents whose names hash to it, kept durable
by checkpoints and a journal, answering placements with compact explanations (its part of the
placing pipeline: prepare, explain, score and choose over its own agents).

A shard is a plain class; `a3fast.distributed.ShardedFleet` runs each one as a Ray actor. Its
durable state, in the shard's `state_dir` (which must be reachable from wherever the actor
restarts), is kept by the service's durable cycle (a3fast.durable.DurableFleet) under the prefix
`shard-I.`: a checkpoint naming the shard's fleet snapshot and the journal generation after it,
with the shard's change count and every name it has given a local id; each acknowledged change is
one journal entry, written (and with `fsync=True` fsynced) before it is acknowledged.

A restarted actor runs `__init__` again: it loads its checkpoint and replays the journal after it,
so it answers exactly as before. A new shard of a fleet read back by `ShardedFleet.load` starts
from its part of that snapshot (`load_from`), written by `save_snapshot`, and takes a checkpoint at
once, so a restart of its actor finds it.
"""
from __future__ import annotations

import os
import sys
import time
import zlib
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import orjson

from ..durable.fleet import DurableFleet
from ..durable.journal import CHANGE, apply_change
from ..durable.statedir import Entry, StateError
from ..errors import Problem, SnapshotError
from ..fleet import Fleet, namespace_problem
from ..fleet.scoring import import_scorer
from .jsonl_split import Share, deal, file_line, names_agree, read_share, same_file, share_text, shares_text, with_text
from .merge import ShardAnswer, WaveAnswer, wave_answer

__all__ = ["FleetShard", "CHECKPOINT_EVERY"]

#: Changes between checkpoints (a change is one call: one add, one extend batch, one outcome...).
CHECKPOINT_EVERY = 1000
#: An extend of at least this many declarations is followed by a checkpoint instead of a journal
#: entry, since the journal would otherwise hold the whole batch once more.
CHECKPOINT_BATCH = 10_000
#: The first byte of a journal entry of lines committed from a JSON Lines file (`commit_jsonl`):
#: a header, then where the lines lie in the file, not their bytes.
LINES = b"F"
#: The first byte of a journal entry of lines committed from bytes the coordinator sent (a file
#: the shards cannot all reach): a header, then the lines' bytes themselves, so that a restart
#: needs no file.
LINES_TEXT = b"T"


def _changes(value: Any) -> str | None:
    return None if type(value) is int and value >= 0 else "a non-negative integer"


def _names(value: Any) -> str | None:
    if isinstance(value, list) and all(isinstance(n, str) for n in value) and len(set(value)) == len(value):
        return None
    return "an array of distinct agent names"


#: What a shard adds to a checkpoint, each field checked at a start.
CHECKPOINT_FIELDS = {"seq": _changes, "names": _names}


class FleetShard:
    """A Fleet shard with durable state (see the module docstring)."""

    def __init__(self, shard: int, engine: str | None = None, state_dir: str | None = None,
                 checkpoint_every: int = CHECKPOINT_EVERY, fsync: bool = False,
                 load_from: str | None = None, names: Sequence[str] | None = None, shards: int = 1,
                 live: Sequence[str] | None = None):
        self.shard = shard
        self._shards = shards     # how many shards the fleet has (to deal a file's lines out)
        #: lines read by `stage_jsonl`: their fleet, bytes, file (None: sent as bytes), and
        #: offsets in the file
        self._staged: tuple[Fleet, bytes, str | None, np.ndarray, np.ndarray] | None = None
        self._engine = engine
        #: every name given a local id, in id order (the fleet's own ids: it numbers new names so)
        self._local: dict[str, int] = {}
        self._seq = 0            # changes acknowledged
        self.recovered: dict[str, Any] = {"checkpoint_seq": 0, "journal_changes": 0, "torn_bytes": 0,
                                          "loaded_from": None}
        self.durable: DurableFleet[Fleet] = DurableFleet(
            state_dir, prefix=f"shard-{shard}.", empty=lambda: Fleet(engine),
            load=lambda path: Fleet.load(path, engine), fsync="always" if fsync else "never",
            checkpoint_every=checkpoint_every, fields=CHECKPOINT_FIELDS,
            document=lambda: {"seq": self._seq, "names": list(self._local)},
            log=lambda message: print(f"a3fast shard {shard}: {message}", file=sys.stderr, flush=True))
        recovered = self.durable.open(restore=self._restore, applied=self._replayed,
                                      replay_other=self._replay_lines)
        if recovered is not None:
            self.recovered["torn_bytes"] = recovered.cut_bytes
            self.recovered["journal_changes"] = len(recovered.entries)
        fresh = recovered is None or (recovered.checkpoint is None and not recovered.entries)
        if fresh and load_from is not None:
            self._load(load_from, names or [], live)
            self.durable.checkpoint()

    def close(self) -> None:
        """Write what the journal holds, take a checkpoint if anything came since the last, and let
        the state directory go (`ShardedFleet.close`, before the actor is ended)."""
        self.durable.close()

    @property
    def fleet(self) -> Fleet:
        return self.durable.fleet

    @fleet.setter
    def fleet(self, fleet: Fleet) -> None:
        self.durable.fleet = fleet

    def _restore(self, checkpoint: dict[str, Any] | None) -> None:
        """The shard's part of its checkpoint: its change count and its local ids' names."""
        if checkpoint is not None:
            self._local = {name: i for i, name in enumerate(checkpoint["names"])}
            self._seq = checkpoint["seq"]
            self.recovered["checkpoint_seq"] = self._seq
            stray = [n for n in self.fleet.names() if n not in self._local]
            if stray:
                raise StateError(f"{self.durable.state.checkpoint_path()}: field 'names': lacks {stray[0]!r}, "   # type: ignore[union-attr]
                                 f"an agent of the snapshot it names; restore the state directory from a copy")

    def _replayed(self, change: dict[str, Any]) -> None:
        """A change of the journal made again: the local ids of its new names, one change more."""
        if change["op"] == "put":
            self._number(change["decls"])
        self._seq += 1

    def _load(self, path: str, names: Sequence[str], live: Sequence[str] | None = None) -> None:
        """Start from this shard's part of a ShardedFleet snapshot (`names`: its local ids' names,
        as the coordinator saved them; `live`: those of them live there). SnapshotError unless the
        part holds exactly those live agents, each at the local id the coordinator numbers it by:
        a part that does not, whatever else is right about it, would place as another fleet."""
        self.fleet = Fleet.load(path, self._engine)
        self._local = {name: i for i, name in enumerate(names)}
        held = self.fleet.names()
        stray = [n for n in held if n not in self._local]
        if stray:
            raise SnapshotError(f"{path}: shard {self.shard} holds {stray[0]!r}, which the coordinator's "
                                f"order does not name; the snapshot's parts do not belong together")
        if live is not None and held != list(live):
            expected, holding = set(live), set(held)
            missing = [n for n in live if n not in holding]
            extra = [n for n in held if n not in expected]
            what = (f"lacks {missing[0]!r}, live in the coordinator's part" if missing
                    else f"holds {extra[0]!r}, removed in the coordinator's part" if extra
                    else "holds its live agents in another order than the coordinator's part")
            raise SnapshotError(f"{path}: shard {self.shard} {what}; the snapshot's parts do not belong together")
        index = self.fleet.index
        for name in held:
            local = self._local[name]
            try:
                at = index.name(local)
            except IndexError:
                at = None
            if at != name:
                raise SnapshotError(f"{path}: shard {self.shard} holds {name!r} at another local id than "
                                    f"the coordinator's part ({local}); the snapshot's parts do not belong together")
        self.recovered["loaded_from"] = path

    # -- changes ----------------------------------------------------------------------------------
    # Each change returns the count of changes acknowledged so far, which the coordinator holds
    # against its own: a change that reached the shard after the coordinator gave up on it shows.
    def add(self, doc: Mapping[str, Any]) -> tuple[int, int]:
        """Add or replace one agent; its local id."""
        self._change({"op": "put", "decls": [doc]})
        return self._local[doc["agent"]["name"]], self._seq

    def extend(self, docs: Sequence[Mapping[str, Any]]) -> tuple[list[int], int]:
        """Add or replace agents in order; their local ids."""
        self._change({"op": "put", "decls": list(docs)}, checkpoint_instead=len(docs) >= CHECKPOINT_BATCH)
        return [self._local[d["agent"]["name"]] for d in docs], self._seq

    def remove(self, name: str) -> int:
        self._change({"op": "delete", "name": name})
        return self._seq

    def record_outcome(self, agent: str, kind: Any, success: bool) -> int:
        self._change({"op": "outcome", "agent": agent, "kind": kind, "success": success})
        return self._seq

    def record_outcomes(self, agent: str, kind: str, successes: int, attempts: int) -> int:
        """Many outcomes of one kind at once (Fleet.record_outcomes: restoring saved counts)."""
        self._change({"op": "outcomes", "agent": agent, "kind": kind, "successes": successes, "attempts": attempts})
        return self._seq

    def hold_session(self, agent: str, session: str) -> int:
        self._change({"op": "hold", "agent": agent, "session": session})
        return self._seq

    def release_session(self, agent: str, session: str) -> int:
        self._change({"op": "release", "agent": agent, "session": session})
        return self._seq

    def _change(self, change: dict[str, Any], *, checkpoint_instead: bool = False) -> None:
        """One change through the durable cycle (a3fast.durable.DurableFleet.apply_now): made on
        the shard's fleet, the local ids of names new to the shard given, then journaled and
        acknowledged on return. The count goes up once the change is made, before its entry is
        written, so that a checkpoint the entry brings about counts it."""
        def make() -> None:
            apply_change(self.fleet, change)
            if change["op"] == "put":
                self._number(change["decls"])
            self._seq += 1

        self.durable.apply_now(change, make, checkpoint_instead=checkpoint_instead)

    def _number(self, docs: Sequence[Mapping[str, Any]]) -> None:
        local = self._local
        for d in docs:
            local.setdefault(d["agent"]["name"], len(local))

    # -- reading a fleet file in parallel (a3fast.distributed.jsonl_split) -----------------------
    def read_share(self, path: str, part: int, parts: int) -> tuple:
        """Step 1: byte range `part` of `parts` of the file, its lines dealt out by owner: the
        range's line count, then one Share per shard (the caller asks for 1 + shards returns, so
        each Share goes straight to its shard)."""
        count, shares = read_share(path, part, parts, self._shards)
        return (count, *shares)

    def sees_file(self, path: str, size: int, mtime_ns: int) -> bool:
        """Whether this shard reaches, by `path`, the file the coordinator stat'ed
        (jsonl_split.same_file)."""
        return same_file(path, size, mtime_ns)

    def deal_range(self, start: int, data: bytes) -> tuple:
        """Step 1 for a file the shards cannot all reach: a byte range the coordinator sent
        through the object store (`data`, beginning at byte `start`), dealt out as `read_share`
        does, each Share carrying its lines' bytes."""
        count, shares = deal(start, data, self._shards)
        return (count, *with_text(shares, start, data))

    def stage_jsonl(self, path: str | None, firsts: Sequence[int], *shares: Share) -> tuple[list[tuple[int, Problem]], list[str], np.ndarray, list[str]]:
        """Step 2: read this shard's lines of every range straight from the file at `path` (None:
        from the bytes the shares carry, `deal_range`)
        (`firsts`: each range's first line number in the file) with the compiled reader into a
        fleet of their own, keeping it until `commit_jsonl`. Answers the problems under the file's
        line numbers, else the names in join order with the line of each one's first appearance
        and its namespace."""
        self._staged = None
        text = share_text(path, shares) if path is not None else shares_text(shares)
        numbers = np.concatenate([share.lines + first + 1 for share, first in zip(shares, firsts)]) \
            if shares else np.zeros(0, dtype=np.int64)
        found = [name for share in shares for name in share.names]
        spaces = [ns for share in shares for ns in share.namespaces]
        staged = Fleet(self._engine)
        problems = [file_line(p, numbers) for p in staged.extend_jsonl(text, on_error="skip")]
        problems = self._namespace_problems(problems, found, spaces, numbers)
        if not problems:
            disagreement = names_agree(staged.names(), found, numbers)
            if disagreement is not None:
                problems.append(file_line(disagreement, numbers))
        if problems:
            return problems, [], np.zeros(0, dtype=np.int64), []
        # each name's first line and namespace (the reader's join order: names_agree held)
        firsts_of: dict[str, int] = {}
        for k, name in enumerate(found):
            firsts_of.setdefault(name, k)
        at = np.fromiter(firsts_of.values(), dtype=np.int64, count=len(firsts_of))
        starts = np.concatenate([share.starts for share in shares]) if shares else np.zeros(0, dtype=np.int64)
        ends = np.concatenate([share.ends for share in shares]) if shares else np.zeros(0, dtype=np.int64)
        self._staged = (staged, text, path, starts, ends)
        return [], list(firsts_of), numbers[at], [spaces[k] for k in at.tolist()]

    def _namespace_problems(self, problems: list[tuple[int, Problem]], names: Sequence[str],
                            namespaces: Sequence[str], numbers: np.ndarray) -> list[tuple[int, Problem]]:
        """The staged lines' problems as one Fleet reading the file over this shard's agents finds
        them (`bulk_load`): each line the reader took whose name this shard holds in another
        namespace is a problem of its own (the shard holds every agent of the names it owns); and
        a line the reader refused only for differing from an earlier line's namespace is no problem
        when it is the namespace held (that earlier line is the one refused)."""
        if not len(self.fleet):
            return problems      # no agent held: no namespace to differ from (a first load)
        held_of = self.fleet.namespace_of
        refused = {line for line, _ in problems}
        out = []
        for line, problem in problems:
            if problem.path.endswith(": $.agent.namespace"):
                k = int(np.searchsorted(numbers, line))
                if k < len(names) and int(numbers[k]) == line and held_of(names[k]) == namespaces[k]:
                    continue
            out.append((line, problem))
        for k, (name, namespace) in enumerate(zip(names, namespaces)):
            held = held_of(name) if name else None
            if held is None or held == namespace:
                continue         # the usual line: a name not held, or held in its own namespace
            line = int(numbers[k])
            if line in refused:
                continue
            conflict = namespace_problem(f"line {line}: $.agent.namespace", name, held, namespace)
            if conflict is not None:
                out.append((line, conflict))
        return out

    def commit_jsonl(self) -> tuple[int, int]:
        """Step 3: the staged lines added to the shard's fleet, in order, as one change, journaled
        as where the lines lie in the file and the CRC-32 of their bytes (not the bytes: the file
        holds them already, and writing them again was most of a load's time), so a restart reads
        them from the file again (`_replay_lines`) and refuses a file that changed. Returns (local
        ids given, changes acknowledged). Lines sent as bytes (no path) are journaled as their
        bytes (`LINES_TEXT`; a checkpoint instead when too large for one entry), so a restart
        never needs the file."""
        if self._staged is None:
            raise SnapshotError(f"shard {self.shard}: no staged lines to commit")
        staged, text, path, starts, ends = self._staged
        self._staged = None
        self._add_lines(staged, text)
        header = orjson.dumps({"op": "put_lines", "path": path, "lines": len(starts), "bytes": len(text),
                               "crc32": zlib.crc32(text)})
        if path is None:
            payload = b"".join((LINES_TEXT, header, b"\n", text))
        else:
            payload = b"".join((LINES, header, b"\n", starts.astype("<i8").tobytes(), ends.astype("<i8").tobytes()))
        self._seq += 1
        self.durable.write_now(payload)
        return len(self._local), self._seq

    def _add_lines(self, staged: Fleet, text: bytes) -> None:
        """Lines read into `staged` added to the shard's fleet, their new names given local ids."""
        if not self._local and len(self.fleet) == 0:
            self.fleet = staged       # an empty shard takes the read fleet as it is: one reading
        else:
            self.fleet.extend_jsonl(text)
        for name in staged.names():
            self._local.setdefault(name, len(self._local))

    def _replay_lines(self, entry: Entry) -> None:
        """A journal entry of lines committed from a file, made again: the lines read from the
        file where they lay, checked against their recorded length and CRC-32."""
        where = entry.where()
        if entry.payload[:1] == LINES_TEXT:
            self._replay_text(entry)
            return
        if entry.payload[:1] != LINES:
            raise StateError(f"{where}: unknown entry type {entry.payload[:1]!r}; restore the state "
                             f"directory from a copy")
        try:
            cut = entry.payload.index(b"\n")
            header = orjson.loads(entry.payload[1:cut])
            path, lines, size, crc = header["path"], header["lines"], header["bytes"], header["crc32"]
            offsets = np.frombuffer(entry.payload, dtype="<i8", offset=cut + 1)
        except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
            raise StateError(f"{where}: unreadable lines entry; restore the state directory from a copy") from None
        if len(offsets) != 2 * lines:
            raise StateError(f"{where}: unreadable lines entry; restore the state directory from a copy")
        share = Share(offsets[:lines].astype(np.int64), offsets[lines:].astype(np.int64),
                      np.zeros(lines, dtype=np.int64), [], [])
        try:
            text = share_text(path, [share])
        except (OSError, ValueError) as exc:
            why = exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
            raise StateError(f"{where}: cannot read the lines it committed from {path} ({why}); the "
                             f"file must stay as it was until the shard's next checkpoint") from None
        if len(text) != size or zlib.crc32(text) != crc:
            raise StateError(f"{where}: {path} changed since its lines were committed (length or CRC-32 "
                             f"differs); the file must stay as it was until the shard's next checkpoint")
        self._replay_checked(text)

    def _replay_text(self, entry: Entry) -> None:
        """A journal entry of lines committed from bytes, made again from the bytes it holds,
        checked against their recorded length and CRC-32."""
        where = entry.where()
        try:
            cut = entry.payload.index(b"\n")
            header = orjson.loads(entry.payload[1:cut])
            size, crc = header["bytes"], header["crc32"]
        except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
            raise StateError(f"{where}: unreadable lines entry; restore the state directory from a copy") from None
        text = entry.payload[cut + 1:]
        if len(text) != size or zlib.crc32(text) != crc:
            raise StateError(f"{where}: its lines' bytes do not match their recorded length or CRC-32; "
                             f"restore the state directory from a copy")
        self._replay_checked(text)

    def _replay_checked(self, text: bytes) -> None:
        """Lines of a journal entry, checked against its length and CRC-32, committed again: read
        into a fleet of their own as `stage_jsonl` read them, added as `commit_jsonl` added them,
        one change more."""
        staged = Fleet(self._engine)
        staged.extend_jsonl(text)
        self._add_lines(staged, text)
        self._seq += 1

    def discard_jsonl(self) -> None:
        """Drop staged lines another shard's problems refused."""
        self._staged = None

    # -- placing: this shard's part of the pipeline ----------------------------------------------
    def score_task(self, requirements: Mapping[str, Any], session: str | None,
                   candidates: Sequence[str] | None = None, scorer: str | None = None) -> ShardAnswer:
        """Run the pipeline's prepare, explain, score and choose stages over this shard's agents
        (only `candidates`, if given) and answer compactly: its local failed and eligible sets, the
        eligible agents' score components, and its own winner. `scorer` is a custom scorer's
        importable name (a3fast.fleet.scoring.import_scorer). Nothing in the shard changes."""
        started = time.perf_counter_ns()
        state = self.fleet.scored(requirements, session, candidates=candidates, scorer=self._scorer(scorer))
        return self._answer(state, started)

    def score_wave(self, tasks: bytes, sessions: Sequence[str | None] | None = None,
                   candidates: Sequence[str] | None = None, scorer: str | None = None) -> WaveAnswer:
        """`score_task` for a wave of tasks in one call, answered in columns (a WaveAnswer).
        `tasks` is the JSON array of the tasks' requirements (prepared by the coordinator: parsed
        here once more, never pickled as objects), `sessions` each one's session. The tasks of a
        wave are independent (no two of one remembered session), so with the default scorer the
        wave goes through `Fleet.place_many` — the engine's batch loop, `Index.place_batch` — on one
        thread (a shard shares its machine with the others), holding nothing; one task, a custom
        scorer or `candidates` (one task), each task through `Fleet.scored`. Nothing in the shard
        changes."""
        started = time.perf_counter_ns()
        docs = orjson.loads(tasks)
        chosen = list(sessions) if sessions is not None else [None] * len(docs)
        fleet = self.fleet
        parts = []
        if scorer is None and candidates is None and len(docs) > 1:
            for p in fleet.place_many(docs, sessions=chosen, workers=1, remember_session=False):
                holds = p.agent is not None and p.session is not None and fleet.holds_session(p.agent, p.session)
                parts.append((p.explanation, p.scores, p.scores.best, p.agent, p.declaration_json, holds))
        else:
            custom = self._scorer(scorer)
            for requirements, session in zip(docs, chosen):
                state = fleet.scored(requirements, session, candidates=candidates, scorer=custom)
                best = state.best
                name = fleet.index.name(best) if best >= 0 else None
                holds = name is not None and state.session is not None and fleet.holds_session(name, state.session)
                parts.append((state.explanation, state.scores, best, name,
                              fleet.declaration_json(best) if best >= 0 else None, holds))
        return wave_answer(parts, scorer is not None, len(self._local), self._seq,
                           time.perf_counter_ns() - started)

    def hold_sessions(self, holds: Sequence[tuple[str, str]]) -> int:
        """`hold_session` for each (agent, session) in order, each its own change (the bound
        placements of a wave, sent with the next wave's call)."""
        for agent, session in holds:
            self.hold_session(agent, session)
        return self._seq

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
                "changes": self._seq, "checkpoint_seq": (self.durable.checkpointed or {}).get("seq", 0),
                "recovered": dict(self.recovered),
                "pid": os.getpid(), "node": _node(), "index_nbytes": self.fleet.index_nbytes(), "rss_bytes": _rss()}

    def local_names(self) -> list[str]:
        """Every name given a local id, in id order."""
        return list(self._local)

    # -- durability -------------------------------------------------------------------------------
    def save_snapshot(self, path: str) -> tuple[int, int]:
        """This shard's part of a ShardedFleet snapshot: its fleet (`Fleet.save`) at `path`, written
        here, in the shard's own process. Returns (local ids given, changes acknowledged)."""
        self.fleet.save(path)
        return len(self._local), self._seq


def _node() -> str | None:
    """The Ray node this shard runs on (None outside Ray)."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:
        return None


def _rss() -> int | None:
    """This process's resident memory in bytes (Linux), else None."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
