"""ShardedFleet: the Fleet API over N Ray actors, each holding a Fleet shard, with placements and
records identical (timings aside) to one Fleet holding the same agents in the same join order.

Agents go to shards by a stable hash of their name (BLAKE2b, never Python's salted `hash`), so a
name always lives on one shard and its shard-local id, like a Fleet's ids, is given once. The
coordinator keeps the global join order (name -> global id, append-only) and each shard's
`local id -> global id` array. A placement parses the task here, sends it to every shard, gathers
their compact explanations (a3fast.distributed.merge), chooses the winner as
`a3fast.fleet.scoring.choose` would over all eligible agents, and returns a Placement that the usual
record writers turn into §6 records.

Failure is loud: a shard that is down or does not answer in `timeout` seconds makes the call raise
ShardError naming it; no decision is ever made on a subset of the fleet. A shard actor restarts
(`max_restarts`) and recovers its agents from its snapshot and journal (a3fast.distributed.shard).
"""
from __future__ import annotations

import logging
import math
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import orjson

from ..files import write_atomic
from ..errors import A3Error, FleetError, Problem, SchemaError, SnapshotError, SnapshotUnreadable, describe
from ..fleet import pipeline
from ..fleet.core import check_outcome_counts, check_placing_arguments, truth
from ..fleet.table import check_agent_name
from ..fleet.bulk_load import collector_paused
from ..fleet.domain import check_namespace, namespace_problem
from ..fleet.placement import CustomScores, Placement, Route, resumed_agent
from ..fleet.scoring import import_scorer
from ..schema import (Declaration, Requirements, check_text_argument, parse_declaration, parse_declarations,
                      parse_requirements, task_kind)
from .cluster import connect, ray_module
from .jsonl_split import read_range
from .owners import shard_of
from .merge import GlobalIndex, MergedExplanation, MergedScores, winner_of
from .shard import CHECKPOINT_EVERY, FleetShard

log = logging.getLogger("a3fast.distributed")

__all__ = ["ShardedFleet", "ShardError", "shard_of"]

#: How long a failed batch waits for a shard to let go of a session it held (`_ShardedStages.undo`).
UNDO_TIMEOUT = 60.0
#: How long `ShardedFleet.close` waits for the shards to close their state before ending them.
CLOSE_TIMEOUT = 30.0

#: A sharded fleet snapshot: the coordinator's file (written last) and each shard's Fleet snapshot.
SHARDED_FILE = "sharded.json"
SHARDED_CONTENT = "a3fast.sharded-fleet"
SHARDED_FORMAT = 1


#: The most tasks of a wave in one call to a shard: a wave's answers are large at scale (a task's
#: failed sets over 200,000 agents are about 160 KB), so a longer wave goes out in parts.
WAVE_PART = 1024


def _raised_on_shard(exc: Any) -> BaseException:
    """What a shard's call raised, as one Fleet raises it (its own type and one-line message),
    rather than Ray's wrapper, whose message is the remote traceback."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc.as_instanceof_cause()


def _shard_file(shard: int) -> str:
    return f"shard-{shard}.a3snap"


class ShardError(A3Error):
    """A shard is down, restarting past the timeout, or disagrees with the coordinator; the
    operation was not carried out on the fleet as a whole."""

    def __init__(self, shard: int, message: str, shards: Sequence[int] | None = None):
        lost = list(shards) if shards is not None else [shard]
        named = f"shard {shard}" if len(lost) == 1 else f"shards {', '.join(map(str, lost))}"
        super().__init__(f"{named}: {message}")
        self.shard = shard
        #: every shard the operation found down or late (the first is `shard`)
        self.shards = lost


_COLOURS = re.compile(r"\x1b\[[0-9;]*m")


def _why_down(exc: Exception) -> str:
    """Why a shard's actor is down, in one line. An actor whose start failed (its `__init__`
    raised, as a shard does on a journal it cannot read back exactly) is told by that error: Ray's
    message ends in the error's own line, after the traceback, and that line names the file and
    the entry; any other loss by the first line of Ray's message."""
    lines = _COLOURS.sub("", str(exc)).strip().splitlines() or [""]
    if getattr(exc, "actor_init_failed", False):
        error = lines[-1]
        kind, colon, message = error.partition(": ")
        return f"its start failed: {kind.rsplit('.', 1)[-1]}: {message}" if colon else f"its start failed: {error}"
    return f"{type(exc).__name__}: {lines[0][:200]}"


class _IdMap:
    """A shard's local id -> global id, append-only (a view taken at a placement stays valid)."""

    __slots__ = ("array", "count")

    def __init__(self) -> None:
        self.array = np.zeros(1024, dtype=np.int64)
        self.count = 0

    def append(self, gid: int) -> None:
        if self.count == len(self.array):
            self.array = np.concatenate((self.array, np.zeros(len(self.array), dtype=np.int64)))
        self.array[self.count] = gid
        self.count += 1

    def extend(self, gids: np.ndarray) -> None:
        need = self.count + len(gids)
        if need > len(self.array):
            grown = np.zeros(max(need, 2 * len(self.array)), dtype=np.int64)
            grown[:self.count] = self.array[:self.count]
            self.array = grown
        self.array[self.count:need] = gids
        self.count = need

    def view(self) -> np.ndarray:
        return self.array[:self.count]


class ShardedFleet:
    """A fleet of `shards` Ray actors (see the module docstring).

    `address` is given to `ray.init` when Ray is not initialised yet (None: a local Ray). Each
    shard keeps its checkpoints and journal under `state_dir` (a new temporary directory by
    default; on a cluster it must be storage every node can reach), so that Ray can restart its
    actor. `timeout` bounds every call to a shard. `save(directory)` and `ShardedFleet.load(directory)`
    write and read a snapshot of the whole fleet, each shard its own part (docs/scale.md).
    """

    def __init__(self, shards: int = 4, address: str | None = None, engine: str | None = None, *,
                 state_dir: str | None = None, checkpoint_every: int = CHECKPOINT_EVERY,
                 timeout: float = 30.0, max_restarts: int = -1, fsync: bool = False,
                 resources: Sequence[Mapping[str, float]] | None = None,
                 _snapshot: tuple[Path, dict[str, Any]] | None = None):
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise ValueError(f"shards: expected a positive integer, found {shards!r}")
        try:
            seconds = math.nan if isinstance(timeout, (bool, str, bytes)) else float(timeout)
        except (TypeError, ValueError):
            seconds = math.nan
        if not 0 < seconds < math.inf:
            # Ray's own core aborts the process on a negative wait and reads -1 as none
            raise ValueError(f"timeout: expected a positive number of seconds, found {describe(timeout)}")
        ray = connect(address)
        self.engine = engine
        self.timeout = seconds
        self.state_dir = state_dir if state_dir is not None else tempfile.mkdtemp(prefix="a3fast-shards-")
        self._ids: dict[str, int] = {}            # name -> global id
        self._namespace: dict[str, str] = {}      # live name -> its namespace
        self._maps = [_IdMap() for _ in range(shards)]
        self._changes = [0] * shards              # changes each shard has acknowledged
        self._index = GlobalIndex()                # global id -> name (kept after removal)
        self._kinds_seen = False                  # whether any outcome was recorded (task kinds)
        #: bumped by every change that can alter a placement's result
        self.generation = 0
        #: bumped by every change of who is in the fleet (a Placement carries it: equal counts on
        #: one index mean the same live agents)
        self.membership = 0
        #: seconds the last `extend_jsonl` spent in each step: dealing the byte ranges, reading the
        #: lines on the shards, checking (problems, namespaces), committing, numbering the names
        self.load_phases: dict[str, float] = {}
        #: whether the last `extend_jsonl` had the shards read the file by its path (True) or
        #: sent them its bytes (False); None before any
        self.last_load_shared: bool | None = None
        parts: list[tuple[str | None, list[str] | None, list[str] | None]] = [(None, None, None)] * shards
        if _snapshot is not None:
            parts = self._restore_coordinator(*_snapshot)
        if resources is not None and len(resources) != shards:
            raise ValueError(f"resources: {len(resources)} for {shards} shards (one mapping per shard)")
        self._resources = [dict(r) for r in resources] if resources is not None else [{} for _ in range(shards)]
        self._actor_options = (engine, checkpoint_every, fsync, max_restarts)
        self._shards = [self._start_shard(i, *parts[i]) for i in range(shards)]
        states = self._gather([s.state.remote() for s in self._shards], "start")
        for state, (loaded_from, names, _) in zip(states, parts):
            if state["recovered"]["loaded_from"] != loaded_from or state["ids_given"] != len(names or ()):
                raise ShardError(state["shard"], f"its state directory {self.state_dir} already holds "
                                 f"agents; a ShardedFleet starts from empty shards or from its snapshot "
                                 f"alone (give it a new state directory)")
            self._changes[state["shard"]] = state["changes"]

    def _start_shard(self, shard: int, load_from: str | None = None, names: list[str] | None = None,
                     live: list[str] | None = None) -> Any:
        """The Ray actor of one shard, on a node with its `resources` (any node without)."""
        ray = ray_module()
        engine, checkpoint_every, fsync, max_restarts = self._actor_options
        actor = ray.remote(FleetShard).options(num_cpus=0, max_restarts=max_restarts, max_task_retries=0,
                                               resources=self._resources[shard] or None)
        return actor.remote(shard, engine, self.state_dir, checkpoint_every, fsync, load_from, names,
                            shards=len(self._maps), live=live)

    def restart_shards(self, shards: Iterable[int], resources: Mapping[str, float] | None = None) -> None:
        """Start new actors for `shards` (lost with their node, say), on a node with `resources`
        (None: each shard's own): each recovers its part from its checkpoint and journal in
        `state_dir`, which must be reachable from the new node. Raises ShardError unless every
        restarted shard holds exactly the changes and local ids the coordinator knows, so the
        fleet then places exactly as before the loss."""
        ray = ray_module()
        restarted = sorted(set(shards))
        for shard in restarted:
            try:
                ray.kill(self._shards[shard], no_restart=True)
            except Exception:   # already gone with its node
                pass
            if resources is not None:
                self._resources[shard] = dict(resources)
            self._shards[shard] = self._start_shard(shard)
        states = self._gather([self._shards[i].state.remote() for i in restarted], "restart", restarted)
        for shard, state in zip(restarted, states):
            self._check_changes(shard, state["changes"], self._changes[shard])
            if state["ids_given"] != self._maps[shard].count:
                raise ShardError(shard, f"restarted with {state['ids_given']} local ids, the coordinator "
                                 f"knows {self._maps[shard].count}")

    # -- snapshots (docs/scale.md) ----------------------------------------------------------------
    def save(self, directory: str | os.PathLike) -> None:
        """Write the fleet to `directory` (created): each shard writes its own part, a Fleet
        snapshot, in its own process (`shard-I.a3snap`; the directory must be reachable from every
        shard), then the coordinator's join order, namespaces and state go to `sharded.json`,
        written last and whole: its presence marks the snapshot complete. Raises ShardError if a
        shard is down or late, or holds changes the coordinator does not know of."""
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        refs = [s.save_snapshot.remote(str(target / _shard_file(i))) for i, s in enumerate(self._shards)]
        for shard, (ids_given, changes) in enumerate(self._gather(refs, "save")):
            self._check_changes(shard, changes, self._changes[shard])
            if ids_given != self._maps[shard].count:
                raise ShardError(shard, f"has given {ids_given} local ids, the coordinator knows "
                                 f"{self._maps[shard].count}: the shard's state differs from what it acknowledged")
        document = {"content": SHARDED_CONTENT, "format": SHARDED_FORMAT, "shards": len(self._shards),
                    "names": self._index.names(), "namespaces": self._namespace,
                    "kinds_seen": self._kinds_seen, "generation": self.generation,
                    "written_by": self.engine}
        write_atomic(target / SHARDED_FILE, orjson.dumps(document))

    @classmethod
    def load(cls, directory: str | os.PathLike, address: str | None = None, engine: str | None = None,
             **options: Any) -> "ShardedFleet":
        """A ShardedFleet from a snapshot `save` wrote: as many shards as it was saved with, each
        reading its own part in its own process (no declaration passes through the coordinator),
        placing exactly as the saved fleet. `options` are the constructor's (a new `state_dir`,
        `timeout`...). SnapshotError names what is missing or wrong."""
        source = Path(directory)
        path = source / SHARDED_FILE
        try:
            document = orjson.loads(path.read_bytes())
        except FileNotFoundError:
            raise SnapshotError(f"{path}: missing: {source} is not a complete sharded fleet snapshot") from None
        except OSError as exc:
            raise SnapshotUnreadable(path, exc.strerror or str(exc)) from None
        except orjson.JSONDecodeError as exc:
            raise SnapshotError(f"{path}: cannot read the sharded fleet snapshot ({exc})") from None
        if not isinstance(document, dict) or document.get("content") != SHARDED_CONTENT \
                or document.get("format") != SHARDED_FORMAT:
            raise SnapshotError(f"{path}: not a sharded fleet snapshot of format {SHARDED_FORMAT}")
        shards = document.get("shards")
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise SnapshotError(f"{path}: the number of shards is not a positive integer")
        for i in range(shards):
            if not (source / _shard_file(i)).is_file():
                raise SnapshotError(f"{source / _shard_file(i)}: missing: shard {i}'s part of the snapshot")
        return cls(shards, address, engine, _snapshot=(source, document), **options)

    def _restore_coordinator(self, source: Path, document: dict[str, Any]
                             ) -> list[tuple[str | None, list[str] | None, list[str] | None]]:
        """The coordinator's order and state from a snapshot; each shard's part, its names (its
        local ids') and its live names, which the shard holds its part to."""
        try:
            names, namespaces = document["names"], document["namespaces"]
            per_shard: list[list[str]] = [[] for _ in self._maps]
            for name in names:
                if name in self._ids:
                    raise ValueError(f"{name!r} is named twice")
                shard = self._owner_of(name)
                gid = self._index.append(name)
                self._ids[name] = gid
                self._maps[shard].append(gid)
                per_shard[shard].append(name)
            for name, namespace in namespaces.items():
                if name not in self._ids or not isinstance(namespace, str):
                    raise ValueError(f"live agent {name!r} is not in the join order")
                self._namespace[name] = namespace
            self._kinds_seen = bool(document["kinds_seen"])
            generation = document["generation"]
            if type(generation) is not int or generation < 0:
                raise ValueError(f"generation {describe(generation)} is not a count")
            self.generation = generation
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SnapshotError(f"{source / SHARDED_FILE}: the coordinator's part is inconsistent ({exc})") from None
        return [(str(source / _shard_file(i)), per_shard[i], [n for n in per_shard[i] if n in self._namespace])
                for i in range(len(self._maps))]

    @property
    def shards(self) -> int:
        return len(self._shards)

    def shard_actor(self, shard: int) -> Any:
        """The Ray actor of one shard (to inspect it, or to kill it in a failure drill)."""
        return self._shards[shard]

    # -- calls to shards --------------------------------------------------------------------------
    def _gather(self, refs: list, what: str, shards: Iterable[int] | None = None) -> list:
        """Every shard's answer, or ShardError naming every shard that is down or late (waiting
        at most `timeout` in all); an error a shard raised is raised as it is."""
        ray = ray_module()
        deadline = time.monotonic() + self.timeout
        try:
            return ray.get(refs, timeout=self.timeout)
        except ray.exceptions.RayTaskError as exc:
            if not isinstance(exc, ray.exceptions.RayActorError):
                raise _raised_on_shard(exc) from None
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError,
                ray.exceptions.ActorUnavailableError):
            pass
        # which shards: each answer again, within what is left of the timeout. Late answers are
        # not cancelled: a late change is caught by the local-id check of the next call
        down: list[int] = []
        late: list[int] = []
        cause = ""
        for shard, ref in zip(shards if shards is not None else range(len(refs)), refs):
            try:
                ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except ray.exceptions.GetTimeoutError:
                late.append(shard)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
                down.append(shard)
                cause = cause or _why_down(exc)
            except ray.exceptions.RayTaskError as exc:
                raise _raised_on_shard(exc) from None
        lost = sorted(down + late)
        if not lost:   # every answer came in after all
            return ray.get(refs, timeout=0)
        if not late:
            message = f"down during {what} ({cause})"
        elif not down:
            message = f"no answer to {what} within {self.timeout:g} s"
        else:
            message = (f"down ({', '.join(map(str, down))}) and no answer within {self.timeout:g} s "
                       f"({', '.join(map(str, late))}) during {what}")
        raise ShardError(lost[0], f"{message}; nothing was decided", lost)

    def _call(self, shard: int, method: str, *args: Any) -> Any:
        return self._gather([getattr(self._shards[shard], method).remote(*args)], method, [shard])[0]

    def _acknowledged(self, shard: int, changes: int) -> None:
        """Hold a shard's count of changes against the coordinator's, after one more change."""
        self._check_changes(shard, changes, self._changes[shard] + 1)
        self._changes[shard] = changes

    def _check_changes(self, shard: int, changes: int, expected: int) -> None:
        if changes > expected:
            raise ShardError(shard, f"has applied {changes} changes where the coordinator knows of "
                             f"{expected}: a change that timed out reached it late, so its part of "
                             f"the fleet is in doubt")
        if changes < expected:
            raise ShardError(shard, f"has applied {changes} changes where the coordinator knows of "
                             f"{expected}: it restarted without changes it had acknowledged (a "
                             f"journal entry cut at its start, or a state directory older than "
                             f"them), so its part of the fleet is in doubt")

    def _change(self, shard: int, method: str, *args: Any) -> Any:
        """A change on one shard, acknowledged: what the shard returned besides its change count."""
        answer = self._call(shard, method, *args)
        result, changes = answer if isinstance(answer, tuple) else (None, answer)
        self._acknowledged(shard, changes)
        return result

    def _owner(self, name: str) -> int:
        return shard_of(name, len(self._shards))

    def _owner_of(self, name: str) -> int:
        return shard_of(name, len(self._maps))

    def _number(self, shard: int, name: str, local: int) -> None:
        """Give a name its global id the first time a shard gives it a local id."""
        if name in self._ids:
            return
        idmap = self._maps[shard]
        if local != idmap.count:
            raise ShardError(shard, f"gave {name!r} local id {local}, the coordinator expected "
                             f"{idmap.count}: the shard's state differs from what it acknowledged")
        gid = self._index.append(name)
        self._ids[name] = gid
        idmap.append(gid)

    # -- membership -------------------------------------------------------------------------------
    def _check_namespace(self, decl: Declaration, batch: Mapping[str, str] | None = None) -> None:
        name, namespace = decl.agent.name, decl.agent.namespace
        check_namespace(name, (batch or {}).get(name, self._namespace.get(name)), namespace)

    def add(self, declaration: Mapping[str, Any] | Declaration) -> Declaration:
        """Add an agent, or replace the one with the same `(namespace, name)` (Fleet.add)."""
        decl = parse_declaration(declaration)
        self._check_namespace(decl)
        name = decl.agent.name
        shard = self._owner(name)
        local = self._change(shard, "add", dict(decl.doc))
        self._number(shard, name, local)
        self._namespace[name] = decl.agent.namespace
        self.generation += 1
        self.membership += 1
        return decl

    def extend(self, declarations: Iterable[Mapping[str, Any] | Declaration]) -> None:
        """Add many agents (Fleet.extend), each shard its own in one call, all shards at once.
        Every declaration is parsed and every name checked before any is sent, so an invalid one
        or a namespace conflict changes nothing."""
        parsed = parse_declarations(declarations)
        batch: dict[str, str] = {}
        for decl in parsed:
            self._check_namespace(decl, batch)
            batch[decl.agent.name] = decl.agent.namespace
        by_shard: dict[int, list[Declaration]] = {}
        for decl in parsed:
            by_shard.setdefault(self._owner(decl.agent.name), []).append(decl)
        shards = list(by_shard)
        refs = [self._shards[s].extend.remote([dict(d.doc) for d in by_shard[s]]) for s in shards]
        ray = ray_module()
        # number new names in the input's order, from each shard that acknowledged its part
        answers: dict[int, list[int]] = {}
        failure: ShardError | None = None
        try:
            for s, (local_ids, changes) in zip(shards, self._gather(refs, "extend", shards)):
                self._acknowledged(s, changes)
                answers[s] = local_ids
        except ShardError as exc:
            failure = exc
            for s, ref in zip(shards, refs):
                if s not in answers:
                    try:
                        local_ids, changes = ray.get(ref, timeout=0)
                        self._acknowledged(s, changes)
                        answers[s] = local_ids
                    except Exception:   # this shard's part is in doubt; the next call finds out
                        pass
        at = {s: 0 for s in shards}
        for decl in parsed:
            s = self._owner(decl.agent.name)
            if s in answers:
                self._number(s, decl.agent.name, answers[s][at[s]])
                self._namespace[decl.agent.name] = decl.agent.namespace
                at[s] += 1
        self.generation += 1
        self.membership += 1
        if failure is not None:
            raise failure

    @classmethod
    def load_jsonl(cls, path: str | os.PathLike, shards: int = 4, address: str | None = None,
                   engine: str | None = None, *, shared: bool | None = None, **options: Any) -> "ShardedFleet":
        """A ShardedFleet of the JSON Lines declarations at `path`, each shard reading its own
        share in its own process (`extend_jsonl`, with `shared`); placements are those of
        `Fleet.load_jsonl` of the same file. `options` are the constructor's. Any bad line raises
        SchemaError listing every problem under its line number, and no fleet is made."""
        fleet = cls(shards, address, engine, **options)
        try:
            fleet.extend_jsonl(path, shared=shared)
        except BaseException:
            fleet.close()
            raise
        return fleet

    def extend_jsonl(self, path: str | os.PathLike, *, shared: bool | None = None) -> None:
        """Add (or replace) the agents of a JSON Lines file of declarations, in line order
        (Fleet.extend_jsonl), without a declaration passing through the coordinator: every shard
        reads one byte range of the file and deals its lines out to the shards owning their names
        (a3fast.distributed.jsonl_split), then every shard reads its own lines with the compiled
        reader, in parallel; the coordinator receives the names, their first lines and
        namespaces, and gives global ids in file order.

        `shared=True` has every shard read the file by the same path, as above (journaled as
        where the lines lie in the file, which must then stay as it is until the shards' next
        checkpoints). `shared=False` is for a file the shards cannot all reach: the coordinator
        reads it and sends each shard one byte range's bytes through Ray's object store, and each
        shard journals its lines' bytes, so a restart needs no file. `shared=None` (the default)
        chooses True when every shard finds a file of the coordinator's size and modification
        time at `path`, else False; `last_load_shared` tells which ran. Any problem (a bad line,
        a namespace conflict within the file or with the fleet) raises SchemaError listing every
        one under the file's line numbers, the same in both ways, and nothing is added on any
        shard."""
        source = os.fspath(path)
        if not os.path.isfile(source):
            raise FileNotFoundError(f"{source}: no such file")
        if shared is None:
            shared = self._file_shared(source)
        elif not isinstance(shared, bool):
            raise ValueError(f"shared: expected None, True or False, found {shared!r}")
        self.last_load_shared = shared
        # hundreds of thousands of names come back and are numbered: long-lived, acyclic objects
        # that would make every full collection rescan the growing heap
        with collector_paused():
            self._extend_jsonl(source, shared)

    def _file_shared(self, source: str) -> bool:
        """Whether every shard finds, at `source`, a file of the size and modification time the
        coordinator finds there (one small call per shard)."""
        found = os.stat(source)
        return all(self._gather([s.sees_file.remote(source, found.st_size, found.st_mtime_ns)
                                 for s in self._shards], "extend_jsonl"))

    def _extend_jsonl(self, source: str, shared: bool) -> None:
        shards = self._shards
        count = len(shards)
        phases = self.load_phases = {}
        started = time.perf_counter()
        if shared:
            dealt = [s.read_share.options(num_returns=1 + count).remote(source, i, count)
                     for i, s in enumerate(shards)]
        else:
            # each range's bytes put in the object store once, read there by the shard dealing it
            ray = ray_module()
            dealt = []
            for i, s in enumerate(shards):
                start, data = read_range(source, i, count)
                dealt.append(s.deal_range.options(num_returns=1 + count).remote(start, ray.put(data)))
                del data
        path_for_shards = source if shared else None
        counts = self._gather([refs[0] for refs in dealt], "extend_jsonl")
        phases["deal"] = time.perf_counter() - started
        firsts = np.concatenate(([0], np.cumsum(counts)[:-1])).tolist()
        staged = self._gather([s.stage_jsonl.remote(path_for_shards, firsts, *[refs[1 + j] for refs in dealt])
                               for j, s in enumerate(shards)], "extend_jsonl")
        phases["read"] = time.perf_counter() - started - phases["deal"]
        # each shard checks its lines' namespaces against the agents it holds (FleetShard.stage_jsonl)
        problems = [p for answer in staged for p in answer[0]]
        if problems:
            for s in shards:
                s.discard_jsonl.remote()
            problems.sort(key=lambda p: p[0])
            raise SchemaError([p for _, p in problems], source)
        checked = time.perf_counter()
        phases["check"] = checked - started - phases["deal"] - phases["read"]
        refs = [s.commit_jsonl.remote() for s in shards]
        committed: dict[int, int] = {}
        failure: ShardError | None = None
        try:
            for shard, (ids_given, changes) in enumerate(self._gather(refs, "extend_jsonl")):
                self._acknowledged(shard, changes)
                committed[shard] = ids_given
        except ShardError as exc:
            failure = exc
        numbering = time.perf_counter()
        phases["commit"] = numbering - checked
        # new names numbered in the order of their first line in the file, from every shard
        # that acknowledged its part (in bulk: a file holds hundreds of thousands)
        ids = self._ids
        names: list[str] = []
        lines: list[np.ndarray] = []
        owners: list[np.ndarray] = []
        for shard in committed:
            new = [k for k, name in enumerate(staged[shard][1]) if name not in ids]
            names.extend(staged[shard][1][k] for k in new)
            lines.append(np.asarray(staged[shard][2], dtype=np.int64)[new])
            owners.append(np.full(len(new), shard, dtype=np.int64))
        if names:
            order = np.argsort(np.concatenate(lines), kind="stable")
            owner = np.concatenate(owners)[order]
            ordered = [names[k] for k in order.tolist()]
            first = len(self._index)
            gids = np.arange(first, first + len(ordered), dtype=np.int64)
            self._index.extend(ordered)
            ids.update(zip(ordered, gids.tolist()))
            for shard in committed:
                self._maps[shard].extend(gids[owner == shard])
        for shard in committed:
            if committed[shard] != self._maps[shard].count:
                failure = failure or ShardError(shard, f"has given {committed[shard]} local ids, the "
                                                f"coordinator knows {self._maps[shard].count}")
            self._namespace.update(zip(staged[shard][1], staged[shard][3]))
        phases["number"] = time.perf_counter() - numbering
        self.generation += 1
        self.membership += 1
        if failure is not None:
            raise failure

    def remove(self, name: str) -> Declaration:
        """Remove an agent by name; its held sessions go with it (Fleet.remove)."""
        check_agent_name(name, "name")
        decl = self.get(name)
        if decl is None:
            raise FleetError(f"no agent named {name!r} in the fleet")
        self._change(self._owner(name), "remove", name)
        del self._namespace[name]
        self.generation += 1
        self.membership += 1
        return decl

    def __len__(self) -> int:
        return len(self._namespace)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._namespace    # as Fleet: only a name is one

    def __iter__(self) -> Iterator[Declaration]:
        return (self.get(name) for name in self.names())  # type: ignore[misc]

    def names(self) -> list[str]:
        """Live agent names in global join order (the order of `candidates` in records)."""
        return [name for name in self._index.names() if name in self._namespace]

    def get(self, name: str) -> Declaration | None:
        text = self._declaration_json(name)
        return parse_declaration(orjson.loads(text)) if text is not None else None

    def namespace_of(self, name: str) -> str | None:
        """The namespace of a live agent, from the coordinator (no shard is asked)."""
        return self._namespace.get(name) if isinstance(name, str) else None

    def declarations_json(self) -> dict[str, bytes]:
        """Every live agent's declaration as JSON, by name: one call per shard, all at once."""
        out: dict[str, bytes] = {}
        for part in self._gather([s.declarations_json.remote() for s in self._shards], "declarations"):
            out.update(part)
        return out

    def _declaration_json(self, name: str) -> bytes | None:
        if not isinstance(name, str) or name not in self._namespace:
            return None
        return self._call(self._owner(name), "declaration_json", name)

    # -- history the scorer reads -----------------------------------------------------------------
    def _live(self, name: str, what: str = "agent") -> int:
        check_agent_name(name, what)
        if name not in self._namespace:
            raise FleetError(f"no agent named {name!r} in the fleet")
        return self._owner(name)

    def record_outcome(self, agent: str, kind: str | Requirements | Mapping[str, Any], success: bool) -> None:
        """Learn from a finished task (Fleet.record_outcome), on the agent's shard."""
        shard = self._live(agent)
        if not isinstance(kind, str):
            kind = task_kind(parse_requirements(kind))
        self._change(shard, "record_outcome", agent, kind, truth(success, "success"))
        self._kinds_seen = True
        self.generation += 1

    def record_outcomes(self, agent: str, kind: str, successes: int, attempts: int) -> None:
        """Learn many finished tasks of one kind at once (Fleet.record_outcomes), on the agent's shard:
        counts held to the same rule, before any shard is asked."""
        check_outcome_counts(successes, attempts)
        check_text_argument(kind, "kind")
        shard = self._live(agent)
        self._change(shard, "record_outcomes", agent, kind, successes, attempts)
        self._kinds_seen = True
        self.generation += 1

    def outcomes(self, agent: str, kind: str) -> tuple[int, int]:
        if not isinstance(agent, str) or agent not in self._ids:
            return (0, 0)
        successes, attempts = self._call(self._owner(agent), "outcomes", agent, kind)
        return (successes, attempts)

    def hold_session(self, agent: str, session: str) -> None:
        check_text_argument(session, "session")
        self._change(self._live(agent), "hold_session", agent, session)
        self.generation += 1

    def release_session(self, agent: str, session: str) -> None:
        shard = self._live(agent)
        check_text_argument(session, "session")
        self._change(shard, "release_session", agent, session)
        self.generation += 1

    def holds_session(self, agent: str, session: str) -> bool:
        if not isinstance(agent, str) or agent not in self._namespace:
            return False
        return self._call(self._owner(agent), "holds_session", agent, session)

    # -- placing (the stages of a3fast.fleet.pipeline, split between coordinator and shards) ----
    #: A custom scorer by importable name ("package.module:function", a3fast.fleet.scoring.import_scorer)
    #: that every shard imports; None: the default scorer. A `scorer` given to `place` overrides it.
    scorer: str | None = None

    def place(self, requirements: Mapping[str, Any] | Requirements, session: str | None = None,
              route: Route | None = None, *, remember_session: bool = True,
              reason_limit: int | None = None, candidates: Iterable[str] | None = None,
              scorer: str | None = None) -> Placement:
        """Place one task over every shard (Fleet.place): the same decision, explanation and
        records as one Fleet, through the same driver (a3fast.fleet.pipeline.drive, a batch of one
        over `_ShardedStages`). The coordinator prepares the task; each shard explains, scores and
        chooses over its own agents; the coordinator merges their answers, chooses among the
        shards' winners and builds the Placement. A bound placement makes the chosen agent hold the
        task's session on its shard, unless `remember_session` is false. `candidates` restricts the
        placement to those agents (Fleet.place): each shard is sent the ones it holds. `scorer`
        names a custom scorer each shard imports (the records are one Fleet's with that scorer when
        it scores each agent on its own, since a shard shows it only its own eligible agents).
        Raises ShardError if any shard is down, ValueError for a scorer that cannot be imported,
        and what `Fleet.place` raises for its arguments, before any shard is asked."""
        if session is not None:
            check_text_argument(session, "session")
        if route is not None:
            check_placing_arguments(route, None)
        remember_session = truth(remember_session, "remember_session")
        stages = _ShardedStages(self, scorer, candidates=candidates)
        placements, _ = pipeline.drive(stages, (requirements,), (session,), self.generation, route, reason_limit,
                                       remember_session=remember_session, workers=1)
        return placements[0]

    def place_many(self, requirements_list: Iterable[Mapping[str, Any] | Requirements], *,
                   sessions: Sequence[str | None] | None = None, remember_session: bool = True,
                   reason_limit: int | None = None, scorer: str | None = None) -> list[Placement]:
        """Place a batch (Fleet.place_many): the same placements and records as `place` one at a
        time, in order (§6 timings aside), through the same driver (a3fast.fleet.pipeline.drive),
        with one call to each shard per wave (per WAVE_PART tasks of a longer wave, all sent at
        once) instead of one per task. Every task is parsed before any is placed. With
        `remember_session`, a bound placement's held session changes the affinity of the next task
        of that session, so the n-th task of each session goes in wave n (tasks without one all go
        in the first); the sessions a wave's placements hold are sent to their shards just before
        the next wave (in the same round trip: a shard runs its calls in order) and after the last;
        `generation` is numbered as if the batch ran in order. Each shard answers a wave in columns
        (`FleetShard.score_wave`, a WaveAnswer); the coordinator merges them task by task."""
        sessions = pipeline.checked_sessions(sessions)
        remember_session = truth(remember_session, "remember_session")
        stages = _ShardedStages(self, scorer, batch=True)
        try:
            placements, _ = pipeline.drive(stages, list(requirements_list), sessions, self.generation,
                                           reason_limit=reason_limit, remember_session=remember_session, workers=1)
            stages.send_holds()          # the last wave's
        except BaseException:
            # a batch is placed whole or not at all: the sessions its waves held are let go (the
            # driver's own failures by `release`, the last holds' here), so a retry decides as
            # this batch would have (docs/scale.md: failure is never partial)
            stages.undo()
            raise
        return placements

    def explain(self, requirements: Mapping[str, Any] | Requirements) -> MergedExplanation:
        """The filter and first-failed explanation of a task over every shard (Fleet.explain), in
        global join order."""
        state = self._prepare(requirements, None, None, None)
        maps, size = self._views()
        doc = dict(state.requirements.doc)
        answers = self._gather([s.score_task.remote(doc, None) for s in self._shards], "explain")
        self._check_answers(answers, maps)
        return MergedExplanation(answers, maps, size, len(state.requirements.predicates))

    def all_failed(self, requirements: Mapping[str, Any] | Requirements) -> dict[str, list[str]]:
        """Every predicate each ineligible agent fails (Fleet.all_failed), in global join order."""
        doc = dict(parse_requirements(requirements).doc)
        merged: dict[str, list[str]] = {}
        for part in self._gather([s.all_failed.remote(doc) for s in self._shards], "all_failed"):
            merged.update(part)
        ids = self._ids
        return {name: merged[name] for name in sorted(merged, key=ids.__getitem__)}

    def resume(self, earlier: Placement, *, seq: int | None = None) -> Placement:
        """A resumed placement (§6, Fleet.resume): back to the agent `earlier` chose, which must
        still be in the fleet and still satisfy every predicate matched the first time (the routed
        requirements)."""
        pipeline.check_resumption(earlier, seq)
        text = self._declaration_json(resumed_agent(earlier))
        decl = parse_declaration(orjson.loads(text)) if text is not None else None
        return pipeline.resume(earlier, earlier.fleet_engine, decl, text, self.generation, seq)

    def _prepare(self, requirements: Mapping[str, Any] | Requirements, session: str | None,
                 route: Route | None, reason_limit: int | None) -> Placement:
        """The prepare stage, on the coordinator; the task's kind is derived once outcomes exist."""
        state = pipeline.prepare(requirements, session, route, reason_limit)
        # the merged explanation counts its failed sets by them, where the shards parse the document
        pipeline.check_predicates(state.requirements.predicates)
        if self._kinds_seen:
            state.kind = task_kind(state.requirements)
        return state

    def _scorer_name(self, scorer: str | None) -> str | None:
        """The custom scorer's name for the shards, imported here first so that a bad name fails
        before any shard is asked."""
        name = scorer if scorer is not None else self.scorer
        if name is not None:
            import_scorer(name)
        return name

    def _views(self) -> tuple[list[np.ndarray], int]:
        """Each shard's local -> global ids and the global ids given, as of now."""
        return [m.view() for m in self._maps], len(self._index)

    def _candidates_by_shard(self, candidates: Iterable[str] | None) -> list[list[str] | None]:
        """The named agents each shard holds (None for every shard: no restriction)."""
        if candidates is None:
            return [None] * len(self._shards)
        if isinstance(candidates, str):
            raise TypeError("candidates: expected an iterable of agent names, found one string")
        within: list[list[str] | None] = [[] for _ in self._shards]
        for name in dict.fromkeys(candidates):
            if isinstance(name, str) and name in self._namespace:
                within[self._owner(name)].append(name)  # type: ignore[union-attr]
        return within

    def _check_answers(self, answers: list, maps: list[np.ndarray]) -> None:
        for shard, (answer, idmap) in enumerate(zip(answers, maps)):
            self._check_changes(shard, answer.changes, self._changes[shard])
            if answer.ids_given != len(idmap):
                raise ShardError(shard, f"has given {answer.ids_given} local ids, the coordinator "
                                 f"knows {len(idmap)}: the shard's state differs from what it acknowledged")

    # -- operations -------------------------------------------------------------------------------
    def shard_states(self) -> list[dict[str, Any]]:
        """Each shard's ids given, live agents, changes, recovery counts, process and index bytes."""
        return self._gather([s.state.remote() for s in self._shards], "state")

    def close(self) -> None:
        """End the shard actors (their snapshots and journals stay in `state_dir`). Each shard first
        closes its state, letting its directory go, and is waited for (at most CLOSE_TIMEOUT): a
        killed actor's process ends some time after `ray.kill` returns, and until it has, a fleet
        opened on the same directory found it held by that process. A shard that is down holds
        nothing; one that does not answer in time is killed all the same."""
        ray = ray_module()
        shards, self._shards = self._shards, []
        closing = []
        for actor in shards:
            try:
                closing.append(actor.close.remote())
            except Exception:       # an actor Ray no longer knows: nothing of it is left to close
                pass
        deadline = time.monotonic() + CLOSE_TIMEOUT
        for ref in closing:
            try:
                ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except Exception as exc:    # a shard down, or one that did not answer in time
                log.warning("a shard did not close its state before it was ended: %s", exc)
        for actor in shards:
            ray.kill(actor, no_restart=True)


class _ShardedStages:
    """The stages `pipeline.drive` runs over a sharded fleet: prepare on the coordinator; decide on
    every shard (each explains, scores and chooses over its own agents), merged here; build here; a
    bound placement's session held on its agent's shard — at once for one placement, and for a
    batch with the next wave's calls (a shard runs its calls in order) and after the last
    (`send_holds`). The shards are the parallelism: the driver is given one worker."""

    def __init__(self, fleet: ShardedFleet, scorer: str | None, *, candidates: Iterable[str] | None = None,
                 batch: bool = False):
        self.fleet = fleet
        self.scorer = scorer
        self.scorer_name: str | None = None
        self.candidates = candidates
        self.batch = batch
        self.queued: list[list[tuple[str, str]]] = [[] for _ in fleet._shards]   # holds not sent yet
        self.made: list[tuple[str, str]] = []                                     # holds sent
        # (agent, session) of winners their shard said already hold the task's session
        self._holding: set[tuple[str, str]] = set()
        self._texts: dict[int, bytes | None] = {}     # each decided state's winner's declaration JSON
        self._unreachable: set[int] = set()           # shards that failed a release of this batch

    def prepare(self, tasks: Sequence[Any], sessions: Sequence[str | None], route: Route | None,
                reason_limit: int | None, kind: str | None, scorer: Any, candidates: Any) -> list[Placement]:
        fleet = self.fleet
        try:
            states = [fleet._prepare(task, session, route, reason_limit) for task, session in zip(tasks, sessions)]
        except SchemaError as exc:
            raise pipeline.rooted_at_task(exc, tasks, sessions, lambda task, session: fleet._prepare(
                task, session, route, reason_limit)) from None
        self.scorer_name = fleet._scorer_name(self.scorer)
        if self.scorer_name is not None:
            for state in states:
                if state.kind is None:      # a scorer is told the task's kind, as in a Fleet
                    state.kind = task_kind(state.requirements)
        return states

    def decide(self, states: list[Placement], pool: Any = None, parts: int = 1) -> None:
        fleet = self.fleet
        if not self.batch:
            # one task: each shard's ShardAnswer as it is (a wave's columns pay for themselves only
            # over many tasks: Ray serialises each array of an answer on its own)
            for state in states:
                within = fleet._candidates_by_shard(self.candidates)
                maps, size = fleet._views()
                doc = dict(state.requirements.doc)
                answers = fleet._gather([s.score_task.remote(doc, state.session, part, self.scorer_name)
                                         for s, part in zip(fleet._shards, within)], "place")
                state.gathered = time.perf_counter_ns()
                self._merge(state, answers, maps, size, checked=False)
            return
        sent = self._send()
        maps, size = fleet._views()
        # a long wave goes out in parts, every part's calls at once: the shards score part n + 1
        # while the coordinator merges part n, and no answer holds more than a part
        wave_parts = [states[at:at + WAVE_PART] for at in range(0, len(states), WAVE_PART)]
        calls = [[s.score_wave.remote(orjson.dumps([state.requirements.doc for state in part]),
                                      [state.session for state in part], None, self.scorer_name)
                  for s in fleet._shards] for part in wave_parts]
        self._acknowledge(*sent)
        for part, refs in zip(wave_parts, calls):
            by_shard = fleet._gather(refs, "place_many")
            gathered = time.perf_counter_ns()
            fleet._check_answers(by_shard, maps)
            answers = [wave.answers() for wave in by_shard]
            for j, state in enumerate(part):
                state.gathered = gathered
                self._merge(state, [shard_part[j] for shard_part in answers], maps, size, checked=True)

    def _merge(self, state: Placement, answers: list, maps: list[np.ndarray], size: int, checked: bool) -> None:
        """The shards' answers merged (checked against the coordinator's counts unless `checked`)
        and the choose stage over their winners: the state decided, its winner's declaration kept
        for `build`, and noted when the winner's shard says it holds the task's session already."""
        fleet = self.fleet
        if not checked:
            fleet._check_answers(answers, maps)
        won = winner_of(answers)
        expl = MergedExplanation(answers, maps, size, len(state.requirements.predicates))
        best = int(maps[won][answers[won].best]) if won >= 0 else -1
        scores: MergedScores | CustomScores
        if answers and answers[0].custom_entries is not None:
            # a custom scorer's entries, merged into global join order as its Fleet would list them
            ids = np.concatenate(expl.eligible_by_shard()) if answers else np.zeros(0, dtype=np.int64)
            entries = [entry for a in answers for entry in (a.custom_entries or ())]
            order = np.argsort(ids, kind="stable").tolist()
            scores = CustomScores([int(ids[j]) for j in order], [entries[j] for j in order], best)
        else:
            scores = MergedScores(answers, expl, best)
        state.explanation, state.scores, state.best = expl, scores, best
        text = None
        state.declaration = None
        if won >= 0:
            text = answers[won].best_json
            state.declaration = parse_declaration(orjson.loads(text))
            if answers[won].best_holds_session and state.session is not None:
                self._holding.add((state.declaration.agent.name, state.session))
        self._texts[id(state)] = text
        state.selected = time.perf_counter_ns()
        # a placement over some agents only carries no membership count (its candidates are not
        # who is live)
        state.membership = None if self.candidates is not None else fleet.membership

    def build(self, state: Placement, generation: int) -> Placement:
        return pipeline.build_placement(state, self.fleet.engine or "sharded", self.fleet._index, state.declaration,
                                        self._texts.pop(id(state)), generation)

    def build_wave(self, states: list[Placement], wave: list[int], placements: list[Any], held: list[bool],
                   generation: int, remember_session: bool) -> None:
        pipeline.build_wave(self, states, wave, placements, held, generation, remember_session)

    def hold(self, agent: str, session: str) -> bool:
        """The agent holds the session: nothing to send when its shard said it did already; one
        placement's hold is sent now, a batch's with the next wave's calls."""
        if (agent, session) in self._holding:
            return False
        if self.batch:
            self.queued[self.fleet._owner(agent)].append((agent, session))
        else:
            self.fleet.hold_session(agent, session)
        return True

    def min_run(self) -> int:
        return pipeline.MIN_RUN

    def send_holds(self) -> None:
        """The holds the batch's last wave made, sent and acknowledged."""
        self._acknowledge(*self._send())

    def _send(self) -> tuple[list[int], list]:
        """The queued holds sent to their shards (one call per shard that has any), not waited for:
        the shards and their calls."""
        fleet = self.fleet
        shards = [shard for shard, pairs in enumerate(self.queued) if pairs]
        refs = [fleet._shards[shard].hold_sessions.remote(self.queued[shard]) for shard in shards]
        self.made.extend(pair for shard in shards for pair in self.queued[shard])
        return shards, refs

    def _acknowledge(self, shards: list[int], refs: list) -> None:
        """Each hold sent is one change acknowledged, as `hold_session` (the queue then emptied)."""
        if not shards:
            return
        fleet = self.fleet
        for shard, changes in zip(shards, fleet._gather(refs, "hold_session", shards)):
            fleet._check_changes(shard, changes, fleet._changes[shard] + len(self.queued[shard]))
            fleet._changes[shard] = changes
            fleet.generation += len(self.queued[shard])
            self.queued[shard].clear()

    def release(self, agent: str, session: str) -> None:
        """`hold` undone, for a batch that failed: a hold not sent yet is dropped; one sent is let
        go on its shard. A shard runs its calls in order, so the release waits behind the late call
        that failed the batch: it is given UNDO_TIMEOUT rather than the placement's timeout. One
        that cannot be let go even so (its shard is down) is left, and logged."""
        fleet, pair = self.fleet, (agent, session)
        shard = fleet._owner(agent)
        if pair in self.queued[shard]:          # not acknowledged (sent or not)
            self.queued[shard].remove(pair)
        if pair not in self.made:               # never sent: nothing to let go
            return
        self.made.remove(pair)
        timeout, fleet.timeout = fleet.timeout, max(fleet.timeout, UNDO_TIMEOUT)
        try:
            if shard in self._unreachable:
                raise ShardError(shard, "failed an earlier release of this batch")
            fleet.release_session(agent, session)
        except ShardError as exc:
            self._unreachable.add(shard)    # not waited for again
            log.warning("a failed batch could not let go of session %r on %r: %s", session, agent, exc)
        finally:
            fleet.timeout = timeout

    def undo(self) -> None:
        """Every hold sent and not let go yet, let go (`release`): for a batch that failed after
        the driver returned, as its last holds were sent."""
        for agent, session in list(self.made):
            self.release(agent, session)
