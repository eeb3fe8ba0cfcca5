"""The service's state: a fleet, its trace, and what it takes to rebuild both exactly after a crash.

Every change is applied in one synchronous step on the event loop — validate, apply, append its
journal entry — so no placement ever sees half of an update, and nothing is applied that is not in the
journal. A placement's records go into the journal entry too (one fsync covers both) and are written
to the trace file; the trace file is rebuilt from the journal on recovery, so it is exactly as
durable as the journal.

Exactness after a restart: candidates are listed in the order agents first joined, and a removed
agent keeps its place (a later re-add takes it back), so the state keeps every name ever added, in
order, beside the live declarations, the outcome counts per (agent, kind) — which outlive removal,
as in the fleet — and the sessions each agent holds. A snapshot stores exactly that: the fleet as a
fleet snapshot file (`Fleet.save`, docs/snapshot.md; loading it rebuilds the index from its stored
rows, parsing no declaration) named by the service's own small snapshot, which holds the join order,
outcomes, sessions and trace position. Recovery loads both, then replays the journal. (Format 2
snapshots, which held the declarations as JSON, are still read: the fleet is rebuilt with the public
Fleet API, removed places re-created by adding a placeholder and removing it.)
"""
from __future__ import annotations

import asyncio
import os
from collections import deque
import shutil
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable

import orjson

from ..errors import FleetError, Problem, SchemaError, SnapshotError
from ..record.compact import Encoder
from ..fleet import Fleet
from ..record.write import placement_records
from ..schema import Declaration, parse_declaration
from ..trace import TraceWriter
from ..distributed.sharded import ShardError
from .journal import Journal, JournalCorrupt, JournalFailed, frame, read_entries

__all__ = ["ServiceState", "StateError", "SNAPSHOT", "JOURNAL", "TRACE"]

SNAPSHOT = "snapshot"
JOURNAL = "journal"
TRACE = "trace.jsonl"
SNAPSHOT_FORMAT = 3
#: The format before the fleet had its own snapshot file (declarations inside the JSON document).
SNAPSHOT_FORMAT_JSON_FLEET = 2
#: Fleet snapshot files are named `fleet.<token>.a3snap`; the service's snapshot names the current one.
FLEET_SNAPSHOT_PREFIX = "fleet."
FLEET_SNAPSHOT_SUFFIX = ".a3snap"
#: The snapshot checks this many bytes at the end of the trace it covers (its length checks the
#: rest): checking the whole trace would make every start slower as history grows.
TRACE_CHECK_BYTES = 1 << 20
#: The namespace of the placeholder that re-creates a removed agent's place in the join order.
_PLACEHOLDER_NAMESPACE = "a3fast.removed"
_OP = b"J"
_TRACE = b"T"


class StateError(Exception):
    """State on disk that cannot be read back exactly (exit 2 at start)."""


def _placeholder(name: str) -> dict[str, Any]:
    return {"v": "1.0", "agent": {"name": name, "namespace": _PLACEHOLDER_NAMESPACE},
            "capabilities": [], "clearances": []}


class ServiceState:
    """The fleet, its journal and trace. `directory=None` keeps no journal (nothing survives a
    restart) and writes the trace to `trace_path` or a temporary file."""

    def __init__(self, directory: str | os.PathLike | None = None, *, engine: str | None = None,
                 trace_path: str | os.PathLike | None = None, fsync: str = "group",
                 snapshot_every: int = 50_000, log=None, fleet_factory: Callable[[], Any] | None = None):
        self.directory = Path(directory) if directory is not None else None
        self.engine = engine
        self.fsync = fsync
        self.snapshot_every = snapshot_every
        self.log = log or (lambda message: print(f"a3fast serve: {message}", file=sys.stderr, flush=True))
        self._tempdir: str | None = None
        if trace_path is not None:
            self.trace_path = Path(trace_path)
        elif self.directory is not None:
            self.trace_path = self.directory / TRACE
        else:
            self._tempdir = tempfile.mkdtemp(prefix="a3fast-serve-")
            self.trace_path = Path(self._tempdir) / TRACE
        #: builds the served fleet at `open` when it is not a plain Fleet (a ShardedFleet,
        #: a3fast.service.sharded): started empty and rebuilt from the snapshot and journal
        self._fleet_factory = fleet_factory
        self.sharded = fleet_factory is not None
        self.fleet: Any = Fleet(engine)
        self.order: dict[str, None] = {}                 # every name ever added, in join order
        self.outcomes: dict[tuple[str, str], list[int]] = {}   # (agent, kind) -> [successes, attempts]
        self.sessions: dict[str, set[str]] = {}          # agent -> sessions it holds
        self.next_seq = 1
        self.encoder = Encoder()
        self.journal: Journal | None = None
        self._trace_fd = -1
        self._trace_buffer: list[bytes] = []     # trace lines not yet written to the trace file
        self._trace_flush_scheduled = False
        self._trace_end = 0                      # bytes of the trace file known written (and durable)
        self._trace_queued_end = 0               # ... once the commits under way are written
        self._trace_ends: deque[int] = deque()   # the end each commit under way writes up to
        self.ready = False
        self.recovered_entries = 0
        #: a ShardError that left the sharded fleet holding part of a batch (see `_change`)
        self.doubt: ShardError | None = None

    # -- start and stop ---------------------------------------------------------------------------
    def open(self, *, mark_ready: bool = True) -> None:
        """Load the snapshot, replay the journal, rebuild the trace file; StateError if the state
        cannot be read back exactly."""
        trace_bytes = 0
        trace_crc = 0
        replay: list[bytes] = []
        if self._fleet_factory is not None:
            self.fleet = self._fleet_factory()
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            snapshot = self._read_snapshot()
            if snapshot is not None:
                self._restore(snapshot)
                trace_bytes, trace_crc = snapshot["trace_bytes"], snapshot["trace_tail_crc"]
            replay = self._read_journal()
        self._open_trace(trace_bytes, trace_crc)
        for payload in replay:
            self._replay(payload)
        self._flush_trace()
        self.recovered_entries = len(replay)
        if self.directory is not None:
            self.journal = Journal(self.directory / JOURNAL, fsync=self.fsync)
            self.journal.before_write = self._take_trace
            self.journal.after_write = self._trace_written
            self.journal.entries = len(replay)
        self.ready = mark_ready

    def close(self) -> None:
        """Flush everything; with a state directory, take a snapshot so the next start is quick
        (not after a failed journal write: memory then holds changes that were never acknowledged)."""
        if self.journal is not None:
            if self.journal.entries and self.failed is None:
                self.snapshot()
            self.journal.close()
            self.journal = None
        if self.sharded and hasattr(self.fleet, "close"):
            self.fleet.close()
        if self._trace_fd >= 0:
            self._flush_trace()
            os.fsync(self._trace_fd)
            os.close(self._trace_fd)
            self._trace_fd = -1
        if self._tempdir is not None:
            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None

    def _read_snapshot(self) -> dict[str, Any] | None:
        assert self.directory is not None  # read only for a state kept on disk
        path = self.directory / SNAPSHOT
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        recovered = read_entries(data, str(path))
        if len(recovered.entries) != 1 or recovered.cut_bytes:
            raise StateError(f"{path}: the snapshot is damaged (bad length or checksum); restore the "
                             f"state directory from a copy")
        snapshot = orjson.loads(recovered.entries[0])
        if snapshot.get("format") not in (SNAPSHOT_FORMAT, SNAPSHOT_FORMAT_JSON_FLEET):
            raise StateError(f"{path}: snapshot format {snapshot.get('format')!r} is not "
                             f"{SNAPSHOT_FORMAT}, the one this a3fast reads")
        return snapshot

    def _read_journal(self) -> list[bytes]:
        assert self.directory is not None  # read only for a state kept on disk
        path = self.directory / JOURNAL
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        try:
            recovered = read_entries(data, str(path))
        except JournalCorrupt as exc:
            raise StateError(str(exc)) from None
        if recovered.cut_bytes:
            self.log(f"{path}: cut a torn tail of {recovered.cut_bytes} bytes after entry "
                     f"{len(recovered.entries)} (byte {recovered.good_bytes}): a write that was never "
                     f"acknowledged")
            with open(path, "r+b") as fh:
                fh.truncate(recovered.good_bytes)
                os.fsync(fh.fileno())
        return recovered.entries

    def _open_trace(self, trace_bytes: int, trace_crc: int) -> None:
        """The trace file holds what the snapshot covers; the journal's records follow it."""
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.trace_path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(fd).st_size
        if size < trace_bytes or _crc_tail(fd, trace_bytes) != trace_crc:
            os.close(fd)
            raise StateError(f"{self.trace_path}: the trace the snapshot covers (its first "
                             f"{trace_bytes} bytes) is cut short or its last "
                             f"{min(trace_bytes, TRACE_CHECK_BYTES)} of them are damaged; restore "
                             f"it from a copy")
        if self.directory is None:
            # no journal: the trace file is the service's own and starts afresh
            os.ftruncate(fd, 0)
        elif size > trace_bytes:
            os.ftruncate(fd, trace_bytes)   # the journal holds every record after the snapshot
        os.close(fd)
        self._trace_fd = os.open(self.trace_path, os.O_WRONLY | os.O_APPEND)
        self._trace_end = self._trace_queued_end = os.fstat(self._trace_fd).st_size

    def _restore(self, snapshot: dict[str, Any]) -> None:
        if snapshot["format"] == SNAPSHOT_FORMAT_JSON_FLEET:
            self._restore_json_fleet(snapshot)
            return
        assert self.directory is not None  # a snapshot is read only from disk
        path = self.directory / snapshot["fleet"]
        try:
            loaded = Fleet.load(path, engine=self.engine)
        except SnapshotError as exc:
            raise StateError(f"{exc}; restore the state directory from a copy") from None
        if self.sharded:
            # a sharded fleet is rebuilt through its public API, as from a format 2 snapshot
            decls = [loaded.get(name) for name in snapshot["names"]]
            self._restore_json_fleet({**snapshot, "declarations": [d.doc if d is not None else None
                                                                   for d in decls]})
            return
        self.fleet = loaded
        self.order = dict.fromkeys(snapshot["names"])
        for agent, kind, successes, attempts in snapshot["outcomes"]:
            self.outcomes[(agent, kind)] = [successes, attempts]
        for agent, session in snapshot["sessions"]:
            self.sessions.setdefault(agent, set()).add(session)
        if self.fleet.names() != [name for name in self.order if name in self.fleet]:
            raise StateError(f"{path}: the fleet snapshot does not match {self.directory / SNAPSHOT}; "
                             f"restore the state directory from a copy")
        self.next_seq = snapshot["next_seq"]

    def _restore_json_fleet(self, snapshot: dict[str, Any]) -> None:
        names = snapshot["names"]
        declarations = snapshot["declarations"]
        self.fleet.extend(decl if decl is not None else _placeholder(name)
                          for name, decl in zip(names, declarations))
        self.order = dict.fromkeys(names)
        for agent, kind, successes, attempts in snapshot["outcomes"]:
            self.outcomes[(agent, kind)] = [successes, attempts]
            self.fleet.record_outcomes(agent, kind, successes, attempts)
        for name, decl in zip(names, declarations):
            if decl is None:
                self.fleet.remove(name)
        for agent, session in snapshot["sessions"]:
            self.fleet.hold_session(agent, session)
            self.sessions.setdefault(agent, set()).add(session)
        self.next_seq = snapshot["next_seq"]

    def snapshot(self) -> None:
        """Write the state to a new snapshot (temp file, fsync, rename), then empty the journal."""
        if self.directory is None or self.journal is None:
            return
        self.journal.sync()          # every entry and trace line appended so far is written
        # (JournalFailed when the journal has failed: memory then holds unacknowledged changes)
        os.fsync(self._trace_fd)
        trace_bytes = os.fstat(self._trace_fd).st_size
        with open(self.trace_path, "rb") as fh:
            trace_crc = _crc_tail(fh.fileno(), trace_bytes)
        # the fleet goes to a file of its own under a new name, which the service's snapshot then
        # names: a crash between the two renames leaves the previous pair whole
        fleet_name = f"{FLEET_SNAPSHOT_PREFIX}{os.urandom(8).hex()}{FLEET_SNAPSHOT_SUFFIX}"
        if self.sharded:
            # a ShardedFleet has no `save`: its live declarations, gathered from the shards, go
            # into the document (format 2), and a restart rebuilds the shards from them
            try:
                declarations = self.fleet.declarations_json()
            except ShardError as exc:
                self.log(f"no snapshot taken: {exc}; the journal keeps every change since the last one")
                return
            fleet_part: dict[str, Any] = {
                "format": SNAPSHOT_FORMAT_JSON_FLEET,
                "declarations": [orjson.Fragment(declarations[name]) if name in declarations else None
                                 for name in self.order]}
        else:
            self.fleet.save(self.directory / fleet_name)
            fleet_part = {"format": SNAPSHOT_FORMAT, "fleet": fleet_name}
        document = {
            **fleet_part,
            "names": list(self.order),
            "outcomes": [[agent, kind, s, a] for (agent, kind), (s, a) in self.outcomes.items()],
            "sessions": [[agent, s] for agent, held in self.sessions.items() for s in sorted(held)],
            "next_seq": self.next_seq,
            "trace_bytes": trace_bytes,
            "trace_tail_crc": trace_crc,
        }
        data = frame(orjson.dumps(document))
        temp = self.directory / (SNAPSHOT + ".tmp")
        with open(temp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, self.directory / SNAPSHOT)
        _fsync_dir(self.directory)
        self.journal.reset()
        for old in self.directory.glob(f"{FLEET_SNAPSHOT_PREFIX}*{FLEET_SNAPSHOT_SUFFIX}"):
            if old.name != fleet_name:
                old.unlink(missing_ok=True)

    def maybe_snapshot(self) -> None:
        if self.journal is not None and self.failed is None and self.journal.entries >= self.snapshot_every:
            self.snapshot()

    # -- durability -------------------------------------------------------------------------------
    async def durable(self) -> None:
        """Wait until every change applied so far is on disk (no-op without a state directory)."""
        if self.journal is not None:
            await self.journal.durable()

    @property
    def failed(self) -> str | None:
        """Why the journal could not be written, once it could not (the service then stops)."""
        return self.journal.failed if self.journal is not None else None

    def check_writable(self) -> None:
        """JournalFailed once the journal has failed, ShardError while a failed batch has left
        the sharded fleet holding part of it: either way no change may be made."""
        if self.failed is not None:
            raise JournalFailed(self.failed)
        self.check_shards()

    @property
    def journal_lag(self) -> int:
        return self.journal.lag if self.journal is not None else 0

    def _log_op(self, op: dict[str, Any]) -> None:
        if self.journal is not None:
            self.journal.append(_OP + orjson.dumps(op))

    def _replay(self, payload: bytes) -> None:
        tag, body = payload[:1], payload[1:]
        if tag == _OP:
            self._apply(orjson.loads(body))
        elif tag == _TRACE:
            head, _, lines = body.partition(b"\n")
            hold = orjson.loads(head)
            self._write_trace(lines, lines.count(b"\n"))
            if hold is not None:
                self._hold(*hold)
        else:
            raise StateError(f"journal entry of unknown type {tag!r}")

    def _apply(self, op: dict[str, Any]) -> None:
        kind = op["op"]
        if kind == "put":
            self._put([parse_declaration(d) for d in op["decls"]])
        elif kind == "delete":
            self._delete(op["name"])
        elif kind == "outcome":
            self._outcome(op["agent"], op["kind"], op["success"])
        elif kind == "hold":
            self._hold(op["agent"], op["session"])
        elif kind == "release":
            self._release(op["agent"], op["session"])
        else:
            raise StateError(f"journal entry with unknown op {kind!r}")

    # -- changes: check, apply, journal -----------------------------------------------------------
    def _change(self, op: dict[str, Any], apply: Callable[..., None], *args: Any) -> None:
        """Apply a checked change, then journal it, in one synchronous step. Applying first means
        a change the fleet could not make — a shard of a ShardedFleet down or late (ShardError) —
        is never journaled, so a restart cannot bring back what was answered with a 503."""
        self.check_writable()
        try:
            apply(*args)
        except ShardError as exc:
            if op["op"] == "put" and len(op["decls"]) > 1:
                # the shards that answered made their part of the batch: the served fleet now
                # holds agents the journal does not, until a restart rebuilds it from the journal
                self.doubt = exc
            raise
        self._log_op(op)

    def check_shards(self) -> None:
        """ShardError while a failed batch has left the sharded fleet holding part of it."""
        if self.doubt is not None:
            raise ShardError(self.doubt.shard, f"failed during a change of several agents ({self.doubt}); "
                             f"the other shards made their part of it, so nothing more is decided until "
                             f"the service restarts and rebuilds the fleet from its journal")

    def seed(self, fleet: Fleet) -> None:
        """Start from a fleet read in bulk (`serve --fleet`) in place of the empty one: its agents
        join in the fleet's order, and with a state directory they go straight into a snapshot
        rather than one journal entry holding every declaration."""
        if self.order or len(self.fleet) or self.sharded:
            raise StateError("a fleet read in bulk seeds only an empty, unsharded state")
        self.check_writable()
        self.fleet = fleet
        self.order = dict.fromkeys(fleet.names())
        if self.journal is not None:
            self.snapshot()

    def put_agents(self, declarations: list[Declaration]) -> None:
        """Add or replace agents, all or none: conflicts are checked before anything is written."""
        self._check_namespaces(declarations)
        self._change({"op": "put", "decls": [d.doc for d in declarations]}, self._put, declarations)

    def _check_namespaces(self, declarations: Iterable[Declaration]) -> None:
        seen: dict[str, str] = {}
        problems = []
        for k, decl in enumerate(declarations):
            name, namespace = decl.agent.name, decl.agent.namespace
            held = seen.get(name, self._namespace_of(name) or namespace)
            if held != namespace:
                problems.append(Problem(f"[{k}].agent.namespace", f"namespace {held!r} (agent names are "
                                        f"unique in one scheduling domain)", repr(namespace)))
            seen[name] = namespace
        if problems:
            raise FleetConflict(problems)

    def _namespace_of(self, name: str) -> str | None:
        if self.sharded:
            return self.fleet.namespace_of(name)
        current = self.fleet.get(name)
        return current.agent.namespace if current is not None else None

    def _put(self, declarations: list[Declaration]) -> None:
        if len(declarations) == 1:
            self.fleet.add(declarations[0])
        else:
            self.fleet.extend(declarations)
        for decl in declarations:
            self.order.setdefault(decl.agent.name)

    def delete_agent(self, name: str) -> None:
        if name not in self.fleet:
            raise FleetError(f"no agent named {name!r} in the fleet")
        self._change({"op": "delete", "name": name}, self._delete, name)

    def _delete(self, name: str) -> None:
        self.fleet.remove(name)
        self.sessions.pop(name, None)

    def record_outcome(self, agent: str, kind: str, success: bool) -> None:
        if agent not in self.fleet:
            raise FleetError(f"no agent named {agent!r} in the fleet")
        self._change({"op": "outcome", "agent": agent, "kind": kind, "success": bool(success)},
                     self._outcome, agent, kind, success)

    def _outcome(self, agent: str, kind: str, success: bool) -> None:
        self.fleet.record_outcome(agent, kind, success)
        counts = self.outcomes.setdefault((agent, kind), [0, 0])
        counts[0] += bool(success)
        counts[1] += 1

    def hold_session(self, agent: str, session: str) -> None:
        if agent not in self.fleet:
            raise FleetError(f"no agent named {agent!r} in the fleet")
        self._change({"op": "hold", "agent": agent, "session": session}, self._hold, agent, session)

    def _hold(self, agent: str, session: str) -> None:
        self.fleet.hold_session(agent, session)
        self.sessions.setdefault(agent, set()).add(session)

    def release_session(self, agent: str, session: str) -> None:
        if agent not in self.fleet:
            raise FleetError(f"no agent named {agent!r} in the fleet")
        self._change({"op": "release", "agent": agent, "session": session}, self._release, agent, session)

    def _release(self, agent: str, session: str) -> None:
        self.fleet.release_session(agent, session)
        held = self.sessions.get(agent)
        if held is not None:
            held.discard(session)
            if not held:
                del self.sessions[agent]

    # -- placing ----------------------------------------------------------------------------------
    def place(self, requirements, *, session: str | None = None, route=None, compact: bool = False,
              task: dict[str, Any] | None = None, fleet: Fleet | None = None):
        """Place one task; its trace records are journalled and written before this returns (made
        durable by `durable()`). Returns (placement, record lines). `fleet` places on another fleet
        (a Kubernetes NodeList) whose records still go into this trace, in spec form."""
        own = fleet is None
        target = self.fleet if fleet is None else fleet
        if own:
            self.check_writable()
        elif self.failed is not None:
            raise JournalFailed(self.failed)
        p = target.place(requirements, session=session, route=route, remember_session=False)
        seq = self.next_seq
        if compact and own:
            records = self.encoder.encode_placement(seq, p)
            if task:
                records[0] = (records[0][0], orjson.dumps({**task, "requirements": p.submitted.doc}))
        else:
            records = list(placement_records(p, task))
        lines = _record_lines(records, seq)
        hold = (p.agent, p.session) if own and p.agent is not None and p.session is not None else None
        if hold is not None:
            # before the journal: a shard that fails to hold it leaves no record of the placement
            self._hold(*hold)
        if self.journal is not None:
            self.journal.append(_TRACE + orjson.dumps(hold) + b"\n" + lines)
        self._write_trace(lines, len(records))
        return p, lines

    def _write_trace(self, lines: bytes, count: int) -> None:
        """Queue trace lines: with a journal, its next commit writes them (the journal entry holds
        them too, and the trace file is rebuilt from it); without one, they are written once per
        turn of the event loop, so requests answered together share one write."""
        self._trace_buffer.append(lines)
        self.next_seq += count
        if self.journal is None and not self._trace_flush_scheduled:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return              # recovery, or a caller without a loop: flushed by open/close
            self._trace_flush_scheduled = True
            loop.call_soon(self._flush_trace)

    def _take_trace(self) -> list[tuple[int, bytes]]:
        """The queued trace lines, for the journal's next commit to write."""
        data = b"".join(self._trace_buffer)
        self._trace_buffer = []
        self._trace_queued_end += len(data)
        self._trace_ends.append(self._trace_queued_end)
        return [(self._trace_fd, data)] if data else []

    def _trace_written(self) -> None:
        """A commit is done: the trace lines it took are written, and their entries durable."""
        self._trace_end = self._trace_ends.popleft()

    def flush_trace(self) -> None:
        """Without a journal: write the trace lines queued so far (a caller without an event loop
        calls this after each batch of requests)."""
        if self._trace_buffer:
            self._flush_trace()

    def _flush_trace(self) -> None:
        """Without a journal: write queued trace lines now."""
        self._trace_flush_scheduled = False
        if self.journal is not None:
            return
        for fd, data in self._take_trace():
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        self._trace_written()

    @property
    def trace_size(self) -> int:
        """How much of the trace file may be read: with a journal, the lines of every finished
        commit (never half a line a commit is still writing); without one, every queued line."""
        if self.journal is None and self._trace_buffer:
            self._flush_trace()
        return self._trace_end

    # -- answers to a scheduler's question (a3fast.service.k8s) -----------------------------------
    def record_answer(self, p, task: dict[str, Any], *, compact: bool = False,
                      records: list[tuple[str, bytes]] | None = None) -> bytes:
        """Record a placement that was a question (a kube-scheduler filter): its records are
        journalled and written like `place`'s, but no session is held — the scheduler, not a3fast,
        decides where the pod runs. `compact` encodes a placement on the served fleet;
        `records` passes spec records already built (off the event loop)."""
        self.check_writable()
        seq = self.next_seq
        if records is None and compact:
            # a placement over the offered agents only: its live set is not the fleet's
            records = self.encoder.encode_placement(seq, p, task, restricted=True)
        elif records is None:
            records = list(placement_records(p, task))
        lines = _record_lines(records, seq)
        if self.journal is not None:
            self.journal.append(_TRACE + b"null\n" + lines)
        self._write_trace(lines, len(records))
        return lines


class FleetConflict(SchemaError):
    """Names already held by another namespace (409)."""


def _record_lines(records: list[tuple[str, bytes]], seq: int) -> bytes:
    """The records as JSON Lines, written by the library's TraceWriter exactly as `a3fast place`."""
    import io

    out = io.BytesIO()
    writer = TraceWriter(out, start_seq=seq)
    for kind, content in records:
        writer.append(kind, content_json=content)
    return out.getvalue()


def _crc_tail(fd: int, length: int) -> int:
    """CRC32 of the last TRACE_CHECK_BYTES of the file's first `length` bytes."""
    crc = 0
    offset = max(0, length - TRACE_CHECK_BYTES)
    while offset < length:
        chunk = os.pread(fd, min(1 << 20, length - offset), offset)
        if not chunk:
            break
        crc = zlib.crc32(chunk, crc)
        offset += len(chunk)
    return crc


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
