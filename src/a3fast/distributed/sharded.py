"""ShardedFleet: the Fleet API over N Ray actors, each holding a Fleet shard, with placements and
records identical (timings aside) to one Fleet holding the same agents in the same join order.

Agents go to shards by a stable hash of their name (BLAKE2b, never Python's salted `hash`), so a
name always lives on one shard and its shard-local id, like a Fleet's ids, is given once. The
coordinator keeps the global join order (name -> global id, append-only) and each shard's
`local id -> global id` array. A placement parses the task here, sends it to every shard, gathers
their compact explanations (a3fast.distributed.merge), chooses the winner as
`a3fast.scoring.choose` would over all eligible agents, and returns a Placement that the usual
record writers turn into §6 records.

Failure is loud: a shard that is down or does not answer in `timeout` seconds makes the call raise
ShardError naming it; no decision is ever made on a subset of the fleet. A shard actor restarts
(`max_restarts`) and recovers its agents from its snapshot and journal (a3fast.distributed.shard).
"""
from __future__ import annotations

import hashlib
import tempfile
import time
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import orjson

from ..errors import A3Error, FleetError
from ..placement import Placement, Route, check_reason_limit, resumed, resumed_agent
from ..schema import Declaration, Requirements, parse_declaration, parse_requirements, task_kind
from .cluster import connect, ray_module
from .merge import GlobalIndex, MergedExplanation, MergedScores, winner_of
from .shard import SNAPSHOT_EVERY, FleetShard

__all__ = ["ShardedFleet", "ShardError", "shard_of"]


class ShardError(A3Error):
    """A shard is down, restarting past the timeout, or disagrees with the coordinator; the
    operation was not carried out on the fleet as a whole."""

    def __init__(self, shard: int, message: str):
        super().__init__(f"shard {shard}: {message}")
        self.shard = shard


def shard_of(name: str, shards: int) -> int:
    """The shard that holds agent `name`: BLAKE2b of its UTF-8 bytes, modulo the shard count
    (the same on every machine and every run)."""
    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % shards


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

    def view(self) -> np.ndarray:
        return self.array[:self.count]


class ShardedFleet:
    """A fleet of `shards` Ray actors (see the module docstring).

    `address` is given to `ray.init` when Ray is not initialised yet (None: a local Ray). Each
    shard keeps its snapshot and journal under `state_dir` (a new temporary directory by default;
    on a cluster it must be storage every node can reach). `timeout` bounds every call to a shard.
    """

    def __init__(self, shards: int = 4, address: str | None = None, engine: str | None = None, *,
                 state_dir: str | None = None, snapshot_every: int = SNAPSHOT_EVERY,
                 timeout: float = 30.0, max_restarts: int = -1, fsync: bool = False):
        if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
            raise ValueError(f"shards: expected a positive integer, found {shards!r}")
        ray = connect(address)
        self.engine = engine
        self.timeout = float(timeout)
        self.state_dir = state_dir if state_dir is not None else tempfile.mkdtemp(prefix="a3fast-shards-")
        actor = ray.remote(FleetShard).options(num_cpus=0, max_restarts=max_restarts, max_task_retries=0)
        self._shards = [actor.remote(i, engine, self.state_dir, snapshot_every, fsync) for i in range(shards)]
        self._ids: dict[str, int] = {}            # name -> global id
        self._namespace: dict[str, str] = {}      # live name -> its namespace
        self._maps = [_IdMap() for _ in range(shards)]
        self._changes = [0] * shards              # changes each shard has acknowledged
        self._index = GlobalIndex()                # global id -> name (kept after removal)
        self._kinds_seen = False                  # whether any outcome was recorded (task kinds)
        #: bumped by every change that can alter a placement's result
        self.generation = 0
        states = self._gather([s.state.remote() for s in self._shards], "start")
        for state in states:
            if state["ids_given"]:
                raise ShardError(state["shard"], f"its state directory {self.state_dir} already holds "
                                 f"agents; a ShardedFleet starts from empty shards")

    @property
    def shards(self) -> int:
        return len(self._shards)

    def shard_actor(self, shard: int) -> Any:
        """The Ray actor of one shard (to inspect it, or to kill it in a failure drill)."""
        return self._shards[shard]

    # -- calls to shards --------------------------------------------------------------------------
    def _gather(self, refs: list, what: str, shards: Iterable[int] | None = None) -> list:
        """Every shard's answer, or ShardError naming the first shard that is down or late."""
        ray = ray_module()
        deadline = time.monotonic() + self.timeout
        out = []
        for shard, ref in zip(shards if shards is not None else range(len(refs)), refs):
            try:
                out.append(ray.get(ref, timeout=max(0.0, deadline - time.monotonic())))
            except ray.exceptions.GetTimeoutError:
                # not cancelled: a late answer is dropped, and a late change is caught by the
                # local-id check of the next call that reaches the shard
                raise ShardError(shard, f"no answer to {what} within {self.timeout:g} s; nothing was decided") from None
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
                raise ShardError(shard, f"down during {what} ({type(exc).__name__}); "
                                 f"nothing was decided") from None
            except ray.exceptions.RayTaskError as exc:
                cause = exc.as_instanceof_cause()
                raise cause from None
        return out

    def _call(self, shard: int, method: str, *args: Any) -> Any:
        return self._gather([getattr(self._shards[shard], method).remote(*args)], method, [shard])[0]

    def _acknowledged(self, shard: int, changes: int) -> None:
        """Hold a shard's count of changes against the coordinator's, after one more change."""
        self._check_changes(shard, changes, self._changes[shard] + 1)
        self._changes[shard] = changes

    def _check_changes(self, shard: int, changes: int, expected: int) -> None:
        if changes != expected:
            raise ShardError(shard, f"has applied {changes} changes where the coordinator knows of "
                             f"{expected}: a change that timed out reached it late, so its part of "
                             f"the fleet is in doubt")

    def _change(self, shard: int, method: str, *args: Any) -> Any:
        """A change on one shard, acknowledged: what the shard returned besides its change count."""
        answer = self._call(shard, method, *args)
        result, changes = answer if isinstance(answer, tuple) else (None, answer)
        self._acknowledged(shard, changes)
        return result

    def _owner(self, name: str) -> int:
        return shard_of(name, len(self._shards))

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
        held = (batch or {}).get(name, self._namespace.get(name))
        if held is not None and held != namespace:
            raise FleetError(
                f"agent name {name!r} is already used in namespace {held!r}; "
                f"a fleet is one scheduling domain and names must be unique in it "
                f"(cannot add it from namespace {namespace!r})")

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
        return decl

    def extend(self, declarations: Iterable[Mapping[str, Any] | Declaration]) -> None:
        """Add many agents (Fleet.extend), each shard its own in one call, all shards at once.
        Every declaration is parsed and every name checked before any is sent, so an invalid one
        or a namespace conflict changes nothing."""
        parsed = [parse_declaration(d) for d in declarations]
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
        if failure is not None:
            raise failure

    def remove(self, name: str) -> Declaration:
        """Remove an agent by name; its held sessions go with it (Fleet.remove)."""
        decl = self.get(name)
        if decl is None:
            raise FleetError(f"no agent named {name!r} in the fleet")
        self._change(self._owner(name), "remove", name)
        del self._namespace[name]
        self.generation += 1
        return decl

    def __len__(self) -> int:
        return len(self._namespace)

    def __contains__(self, name: object) -> bool:
        return name in self._namespace

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
        return self._namespace.get(name)

    def declarations_json(self) -> dict[str, bytes]:
        """Every live agent's declaration as JSON, by name: one call per shard, all at once."""
        out: dict[str, bytes] = {}
        for part in self._gather([s.declarations_json.remote() for s in self._shards], "declarations"):
            out.update(part)
        return out

    def _declaration_json(self, name: str) -> bytes | None:
        if name not in self._namespace:
            return None
        return self._call(self._owner(name), "declaration_json", name)

    # -- history the scorer reads -----------------------------------------------------------------
    def _live(self, name: str) -> int:
        if name not in self._namespace:
            raise FleetError(f"no agent named {name!r} in the fleet")
        return self._owner(name)

    def record_outcome(self, agent: str, kind: str | Requirements | Mapping[str, Any], success: bool) -> None:
        """Learn from a finished task (Fleet.record_outcome), on the agent's shard."""
        shard = self._live(agent)
        if not isinstance(kind, str):
            kind = task_kind(parse_requirements(kind))
        self._change(shard, "record_outcome", agent, kind, bool(success))
        self._kinds_seen = True
        self.generation += 1

    def record_outcomes(self, agent: str, kind: str, successes: int, attempts: int) -> None:
        """Learn many finished tasks of one kind at once (Fleet.record_outcomes), on the agent's shard."""
        if not 0 <= successes <= attempts:
            raise ValueError(f"successes ({successes}) must be between 0 and attempts ({attempts})")
        shard = self._live(agent)
        self._change(shard, "record_outcomes", agent, kind, int(successes), int(attempts))
        self._kinds_seen = True
        self.generation += 1

    def outcomes(self, agent: str, kind: str) -> tuple[int, int]:
        if agent not in self._ids:
            return (0, 0)
        successes, attempts = self._call(self._owner(agent), "outcomes", agent, kind)
        return (successes, attempts)

    def hold_session(self, agent: str, session: str) -> None:
        self._change(self._live(agent), "hold_session", agent, session)
        self.generation += 1

    def release_session(self, agent: str, session: str) -> None:
        self._change(self._live(agent), "release_session", agent, session)
        self.generation += 1

    def holds_session(self, agent: str, session: str) -> bool:
        if agent not in self._namespace:
            return False
        return self._call(self._owner(agent), "holds_session", agent, session)

    # -- placing ----------------------------------------------------------------------------------
    def place(self, requirements: Mapping[str, Any] | Requirements, session: str | None = None,
              route: Route | None = None, *, remember_session: bool = True,
              reason_limit: int | None = None, candidates: Iterable[str] | None = None) -> Placement:
        """Place one task over every shard (Fleet.place): the same decision, explanation and
        records as one Fleet. A bound placement makes the chosen agent hold the task's session on
        its shard, unless `remember_session` is false. `candidates` restricts the placement to
        those agents (Fleet.place): each shard is sent the ones it holds. Raises ShardError if any
        shard is down."""
        started = time.perf_counter_ns()
        check_reason_limit(reason_limit)
        submitted = parse_requirements(requirements)
        matched = route.apply(submitted) if route is not None else submitted
        session = session if session is not None else matched.session
        kind = task_kind(matched) if self._kinds_seen else None
        doc = dict(matched.doc)
        maps = [m.view() for m in self._maps]
        size = len(self._index)
        within: list[list[str] | None] = [None] * len(self._shards)
        if candidates is not None:
            if isinstance(candidates, str):
                raise TypeError("candidates: expected an iterable of agent names, found one string")
            within = [[] for _ in self._shards]
            for name in dict.fromkeys(candidates):
                if isinstance(name, str) and name in self._namespace:
                    within[self._owner(name)].append(name)  # type: ignore[union-attr]
        answers = self._gather([s.explain.remote(doc, session, None, part)
                                for s, part in zip(self._shards, within)], "place")
        gathered = time.perf_counter_ns()
        for shard, (answer, idmap) in enumerate(zip(answers, maps)):
            self._check_changes(shard, answer.changes, self._changes[shard])
            if answer.ids_given != len(idmap):
                raise ShardError(shard, f"has given {answer.ids_given} local ids, the coordinator "
                                 f"knows {len(idmap)}: the shard's state differs from what it acknowledged")
        won = winner_of(answers)
        expl = MergedExplanation(answers, maps, size, len(matched.predicates))
        best = int(maps[won][answers[won].best]) if won >= 0 else -1
        scores = MergedScores(answers, expl, best)
        decl = None
        if won >= 0:
            decl = parse_declaration(orjson.loads(answers[won].best_json))
        selected = time.perf_counter_ns()
        placement = Placement(
            self.engine or "sharded", self._index, matched, submitted,
            route.name if route is not None else None, session, kind, expl, scores, False, decl,
            answers[won].best_json if won >= 0 else None, gathered - started, selected - gathered,
            time.time_ns(), self.generation, reason_limit=reason_limit)
        if decl is not None and session is not None and remember_session:
            if not answers[won].best_holds_session:
                self.hold_session(decl.agent.name, session)
        return placement

    def resume(self, earlier: Placement, *, seq: int | None = None) -> Placement:
        """A resumed placement (§6, Fleet.resume): back to the agent `earlier` chose, which must
        still be in the fleet and still satisfy every predicate matched the first time."""
        text = self._declaration_json(resumed_agent(earlier))
        decl = parse_declaration(orjson.loads(text)) if text is not None else None
        return resumed(earlier, earlier.fleet_engine, decl, text, self.generation, seq)

    # -- operations -------------------------------------------------------------------------------
    def shard_states(self) -> list[dict[str, Any]]:
        """Each shard's ids given, live agents, changes, recovery counts, process and index bytes."""
        return self._gather([s.state.remote() for s in self._shards], "state")

    def close(self) -> None:
        """End the shard actors (their snapshots and journals stay in `state_dir`)."""
        ray = ray_module()
        for actor in self._shards:
            ray.kill(actor, no_restart=True)
        self._shards = []
