"""The service's state: a fleet, its trace, and what it takes to rebuild both exactly after a crash.

Every change is applied on the event loop — validate, apply, append its journal entry — in one
synchronous step, or, for a batch of placements over HTTP, in several steps with turns of the loop
between them while it holds `applying`, the lock every change made from the loop takes: so no
placement ever sees half of an update, no change lands inside a batch, changes take their seqs in
the order they reach the lock, and nothing is applied that is not in the journal. A placement's records go into the journal entry too (one fsync covers both) and are written
to the trace file; the trace file is rebuilt from the journal on recovery, so it is exactly as
durable as the journal.

Exactness after a restart is the fleet's: its snapshot (`fleet.save`, docs/snapshot.md) holds the
join order with removed names, the outcome counts and the held sessions, and the journal's changes
are replayed through the fleet's own API. The durable cycle — apply, journal, acknowledge after the
log, checkpoint, retire generations, recover — is a3fast.durable.DurableFleet's, shared with the
shards of a ShardedFleet; what is the service's own is here: the trace and its entries in the
journal, the next seq and how much of the trace file a checkpoint covers, the namespace check of a
batch, and the doubt a failed batch on a sharded fleet leaves.
"""
from __future__ import annotations

import asyncio
import gc
import os
import re
import shutil
import sys
import tempfile
import zlib
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence

import orjson

from ..errors import A3Error, FleetError, Problem, SchemaError, describe, os_error_line
from ..files import write_pieces
from ..streams import status_line
from ..record.compact import Encoder
from ..fleet import Fleet, FleetProtocol, namespace_problem
from ..fleet.placement import Placement, Route
from ..schema import Declaration, Requirements
from ..trace import placement_lines, record_lines
from ..distributed.sharded import ShardError
from ..durable.fleet import DurableFleet
from ..durable.journal import (MAGIC as JOURNAL_MAGIC, TRACE as TRACE_ENTRY, ChangeUnreadable, Journal, JournalCorrupt,
                               JournalFailed, read_entries)
from ..durable.statedir import Entry, StateDir, StateError
from ..files import fsync_directory

__all__ = ["ServiceState", "StateError", "TraceUnwritable", "FleetStore", "LocalFleets", "CHECKPOINT", "TRACE"]

CHECKPOINT = "checkpoint"
TRACE = "trace.jsonl"
#: The checkpoint checks this many bytes at the end of the trace it covers (its length checks the
#: rest): checking the whole trace would make every start slower as history grows.
TRACE_CHECK_BYTES = 1 << 20
#: agents added before the fleet is frozen out of the collector's passes again (`settle`), at least
SETTLE_AFTER = 1000
#: A served fleet is compacted (`Fleet.compact`) once it holds as many names of agents gone as it
#: has live agents, and at least this many: each compaction costs about as much as adding the live
#: agents again, so it comes at most once every so many removals
COMPACT_FROM = 4096


class _NotCompacted(Exception):
    """A compaction that could not be made (logged): the removal it followed stands."""


def _count_from(low: int, high: int | None = None) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if type(value) is int and value >= low and (high is None or value < high):
            return None
        return f"an integer from {low}" + (f" below {high}" if high is not None else "")
    return check


#: What the service adds to a checkpoint, each field checked at a start.
CHECKPOINT_FIELDS = {"next_seq": _count_from(1, 2**63), "trace_bytes": _count_from(0),
                     "trace_tail_crc": _count_from(0, 1 << 32)}


class FleetStore(Protocol):
    """How the service makes its fleet: empty, or from a snapshot the fleet's `save` wrote (the
    fleet itself is ended by its own `close`).
    `reads_in_bulk`: a fleet read by `a3fast.document_reader.load_fleet` may take the empty one's
    place (`ServiceState.seed`); otherwise a seed goes through `put_agents`."""

    reads_in_bulk: bool

    def empty(self) -> FleetProtocol: ...
    def load(self, path: Path) -> FleetProtocol: ...


class LocalFleets:
    """One Fleet in this process."""

    reads_in_bulk = True

    def __init__(self, engine: str | None = None):
        self.engine = engine

    def empty(self) -> Fleet:
        return Fleet(self.engine)

    def load(self, path: Path) -> Fleet:
        return Fleet.load(path, engine=self.engine)


class TraceUnwritable(StateError):
    """The trace file could not be written (a service without a journal): it is cut back to its
    last whole line, and the service takes no change after it."""

    def __init__(self, path: Path, exc: OSError | None, why: str | None = None):
        self.why = why or (f"{path}: cannot write the trace: {exc.strerror if exc is not None and exc.strerror else exc}; "
                           f"it ends at its last whole record")
        #: whether it failed at the stop, once every answer was given
        self.at_stop = False
        super().__init__(self.why)


class ServiceState:
    """The fleet, its journal and trace. `directory=None` keeps no journal (nothing survives a
    restart) and writes the trace to `trace_path` or a temporary file. `fleet_factory` makes the
    fleet (a FleetStore; one Fleet in this process by default)."""

    def __init__(self, directory: str | os.PathLike | None = None, *, engine: str | None = None,
                 trace_path: str | os.PathLike | None = None, fsync: str = "group",
                 checkpoint_every: int = 50_000, log=None, fleet_factory: FleetStore | None = None,
                 settle: bool = False):
        self.directory = Path(directory) if directory is not None else None
        #: the state owns its process (`a3fast serve`): what it loads is frozen out of the
        #: collector's later passes (`settle`); a state embedded in another program leaves its
        #: collector alone
        self.settle = settle
        self.engine = engine
        self.fsync = fsync
        self.checkpoint_every = checkpoint_every
        self.log = log or (lambda message: status_line(f"a3fast: {message}", sys.stderr))
        self._tempdir: str | None = None
        if trace_path is not None:
            self.trace_path = Path(trace_path)
        elif self.directory is not None:
            self.trace_path = self.directory / TRACE
        else:
            self._tempdir = tempfile.mkdtemp(prefix="a3fast-serve-")
            self.trace_path = Path(self._tempdir) / TRACE
        self.fleets: FleetStore = fleet_factory if fleet_factory is not None else LocalFleets(engine)
        self.durable_fleet: DurableFleet[FleetProtocol] = DurableFleet(
            self.directory, empty=self._empty_fleet, load=self.fleets.load, fsync=fsync,
            checkpoint_every=checkpoint_every, document=self._checkpoint_document, fields=CHECKPOINT_FIELDS,
            log=self.log, transient=(ShardError,))
        self.durable_fleet.fleet = Fleet(engine)     # replaced at `open`
        self.next_seq = 1
        self.encoder = Encoder()
        self._trace_fd = -1
        self._trace_buffer: list[bytes] = []     # trace lines not yet written to the trace file
        self._trace_flush_scheduled = False
        self._trace_end = 0                      # bytes of the trace file known written (and durable)
        self._trace_queued_end = 0               # ... once the commits under way are written
        self._trace_ends: deque[int] = deque()   # the end each commit under way writes up to
        self._trace_failed: str | None = None    # without a journal: why the trace file could not be written
        self.ready = False
        self._unsettled = 0                      # agents added since the fleet was last frozen
        self.recovered_entries = 0
        #: whether the state held nothing at `open` (no checkpoint, no journal entry)
        self.fresh = True
        #: a ShardError that left the sharded fleet holding part of a batch (see `_change`)
        self.doubt: ShardError | None = None
        #: the names gone a compaction waits for after one could not be made (`_compact`)
        self._compact_after = 0
        #: agents put since the fleet's unused rows were last counted (`put_agents`)
        self._put_since_counted = 0
        #: the turn to change the state, taken by every change made from the event loop (the
        #: operations, the extender's recorded answers, the cluster watch) and held only while the
        #: change is applied, never while it waits for durability. A change made in one synchronous
        #: step takes it without waiting when no one holds it; a batch of placements holds it
        #: across the turns of the loop it lets other requests have (`Operations.place_batch`),
        #: so whatever arrives meanwhile is applied after the batch, in arrival order (FIFO).
        self.applying = asyncio.Lock()

    @property
    def fleet(self) -> FleetProtocol:
        return self.durable_fleet.fleet

    @fleet.setter
    def fleet(self, fleet: FleetProtocol) -> None:
        self.durable_fleet.fleet = fleet

    @property
    def journal(self) -> Journal | None:
        return self.durable_fleet.journal

    # -- start and stop ---------------------------------------------------------------------------
    def open(self, *, mark_ready: bool = True) -> None:
        """Recover (a3fast.durable.DurableFleet): the checkpoint loaded, the journal after it
        replayed, the trace file rebuilt; StateError naming the file, the entry and the reason if
        the state cannot be read back exactly."""
        statedir = self.durable_fleet.state
        if statedir is not None and statedir.directory.is_dir():
            statedir.lock()         # before the layout is moved: one process moves it, or none
            try:
                _upgrade_layout(statedir)
            except BaseException:
                statedir.release()
                raise
        recovered = self.durable_fleet.open(restore=self._restore, replay_other=self._replay_trace)
        self._write_queued_trace()
        entries = recovered.entries if recovered is not None else []
        self.recovered_entries = len(entries)
        self.fresh = (recovered is None or recovered.checkpoint is None) and not entries
        if self.journal is not None:
            self.journal.before_write = self._take_trace
            self.journal.after_write = self._trace_written
            self.journal.write_names[self._trace_fd] = str(self.trace_path)
        self.ready = mark_ready
        if self.settle:
            settle()

    def _restore(self, checkpoint: dict[str, Any] | None) -> None:
        """The service's part of the checkpoint (checked against CHECKPOINT_FIELDS), before the
        journal is replayed: the next seq, and the trace file as the checkpoint covers it."""
        trace_bytes = trace_crc = 0
        if checkpoint is not None:
            self.next_seq = checkpoint["next_seq"]
            trace_bytes, trace_crc = checkpoint["trace_bytes"], checkpoint["trace_tail_crc"]
        self._open_trace(trace_bytes, trace_crc)

    def _empty_fleet(self) -> FleetProtocol:
        try:
            return self.fleets.empty()
        except ShardError as exc:
            raise StateError(f"cannot start the fleet: {exc}") from None

    def close(self, *, checkpoint: bool = True) -> None:
        """Flush everything; with a state directory and `checkpoint`, take a checkpoint so the next
        start is quick (not after a failed journal write: memory then holds changes that were
        never acknowledged)."""
        # after a failed write (the journal's or the trace's, read before the journal closes and
        # is gone) the lines still queued are those of changes answered 503: they go into no trace
        write = self.failed is None
        try:
            self.durable_fleet.close(checkpoint=checkpoint)
            self.fleet.close()
        except BaseException:
            write = False
            raise
        finally:
            try:
                self._close_trace(write=write)
            finally:
                if self._tempdir is not None:
                    shutil.rmtree(self._tempdir, ignore_errors=True)
                    self._tempdir = None

    def _close_trace(self, write: bool) -> None:
        """The queued trace lines written (with `write`) and synced, and the file closed whatever
        happens; TraceUnwritable (`at_stop`) if they cannot be."""
        if self._trace_fd < 0:
            return
        try:
            if write:
                self._write_queued_trace()
                try:
                    os.fsync(self._trace_fd)
                except OSError as exc:
                    failure = TraceUnwritable(self.trace_path, exc, f"{self.trace_path}: cannot sync the trace "
                                              f"at the stop: {exc.strerror or exc}")
                    failure.at_stop = True
                    raise failure from None
        finally:
            os.close(self._trace_fd)
            self._trace_fd = -1

    def _open_trace(self, trace_bytes: int, trace_crc: int) -> None:
        """The trace file holds what the checkpoint covers; the journal's records follow it."""
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.trace_path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(fd).st_size
        if size < trace_bytes or _crc_tail(fd, trace_bytes) != trace_crc:
            os.close(fd)
            raise StateError(f"{self.trace_path}: the trace the checkpoint covers (its first "
                             f"{trace_bytes} bytes) is cut short or its last "
                             f"{min(trace_bytes, TRACE_CHECK_BYTES)} of them are damaged; restore "
                             f"it from a copy")
        if self.directory is None:
            # no journal: the trace file is the service's own and starts afresh (its seqs start
            # again at 1, so it cannot go on from an earlier one); an earlier trace is kept beside
            # it, never emptied: a restarted container, or a second start by hand, would lose it
            if size > 0:
                os.close(fd)
                kept = keep_aside(self.trace_path)
                self.log(f"{self.trace_path} held an earlier trace: kept as {kept}")
                fd = os.open(self.trace_path, os.O_RDWR | os.O_CREAT, 0o644)
        else:
            try:
                last = _last_seq(fd, trace_bytes)
            except ValueError as exc:
                os.close(fd)
                raise StateError(f"{self.trace_path}: {exc}; restore it from a copy") from None
            if (last if last is not None else 0) + 1 != self.next_seq:
                os.close(fd)
                raise StateError(f"{self.trace_path}: the trace the checkpoint covers ends with "
                                 f"{'no record' if last is None else f'the record of seq {last}'} where the "
                                 f"checkpoint goes on from seq {self.next_seq}: one of the two is not the "
                                 f"other's; restore the state directory from a copy")
            if size > trace_bytes:
                os.ftruncate(fd, trace_bytes)   # the journal holds every record after the checkpoint
        os.close(fd)
        self._trace_fd = os.open(self.trace_path, os.O_WRONLY | os.O_APPEND)
        self._trace_end = self._trace_queued_end = os.fstat(self._trace_fd).st_size

    def checkpoint(self) -> None:
        """Take a checkpoint (a3fast.durable.DurableFleet.try_checkpoint). One that fails part-way
        (a disk error, a shard down) is logged and changes nothing that a restart reads back: the
        journal keeps every change since the last checkpoint that did complete."""
        self.durable_fleet.try_checkpoint()

    def _checkpoint_document(self) -> dict[str, Any]:
        """The service's part of a checkpoint, once every trace line appended so far is written:
        the next seq and the trace file's length and the CRC of its end."""
        os.fsync(self._trace_fd)
        trace_bytes = os.fstat(self._trace_fd).st_size
        with open(self.trace_path, "rb") as fh:
            trace_crc = _crc_tail(fh.fileno(), trace_bytes)
        return {"next_seq": self.next_seq, "trace_bytes": trace_bytes, "trace_tail_crc": trace_crc}

    def maybe_checkpoint(self) -> None:
        if self.journal is not None:      # asked after every request: without a journal, not a call
            self.durable_fleet.maybe_checkpoint()

    # -- durability -------------------------------------------------------------------------------
    async def durable(self) -> None:
        """Wait until every change applied so far is on disk (no-op without a state directory)."""
        if self.journal is not None:      # without one, nothing to wait for, off the hot path
            await self.durable_fleet.durable()

    @property
    def failed(self) -> str | None:
        """Why the journal could not be written, once it could not (the service then stops). Read
        here rather than through DurableFleet.failed: every placement asks, on its hot path."""
        journal = self.durable_fleet.journal
        return journal.failed if journal is not None else self._trace_failed

    def check_writable(self) -> None:
        """JournalFailed once the journal has failed, ShardError while a failed batch has left
        the sharded fleet holding part of it: either way no change may be made."""
        if self.failed is not None:
            raise JournalFailed(self.failed)
        self.check_shards()

    @property
    def journal_lag(self) -> int:
        return self.journal.lag if self.journal is not None else 0

    def _replay_trace(self, entry: Entry) -> None:
        """A journal entry that is not a change: a placement's trace lines and the session it made
        its agent hold (the service's own entries)."""
        tag, body = entry.payload[:1], entry.payload[1:]
        if tag != TRACE_ENTRY:
            raise ChangeUnreadable(f"unknown entry type {tag!r}")
        head, _, lines = body.partition(b"\n")
        try:
            hold = orjson.loads(head)
        except orjson.JSONDecodeError as exc:
            raise ChangeUnreadable(f"its placement's session is not JSON ({exc})") from None
        if hold is not None and not (isinstance(hold, list) and len(hold) == 2
                                     and all(isinstance(x, str) for x in hold)):
            raise ChangeUnreadable("its placement's session is not [agent, session]")
        self._write_trace(lines, _records_from(lines, self.next_seq))
        if hold is not None:
            self.fleet.hold_session(*hold)

    # -- changes: check, apply, journal -----------------------------------------------------------
    def _change(self, op: str, apply: Callable[..., object], *args: Any, **fields: Any) -> None:
        """Apply a checked change, then journal it, in one synchronous step. Applying first means
        a change the fleet could not make — a shard of a ShardedFleet down or late (ShardError) —
        is never journaled, so a restart cannot bring back what was answered with a 503."""
        self.check_writable()

        def make() -> None:
            try:
                apply(*args)
            except ShardError as exc:
                if op == "put" and len(fields["decls"]) > 1:
                    # the shards that answered made their part of the batch: the served fleet now
                    # holds agents the journal does not, until a restart rebuilds it from the journal
                    self.doubt = exc
                raise

        self.durable_fleet.apply({"op": op, **fields}, make)

    def check_shards(self) -> None:
        """ShardError while a failed batch has left the sharded fleet holding part of it."""
        if self.doubt is not None:
            raise ShardError(self.doubt.shard, f"failed during a change of several agents ({self.doubt}); "
                             f"the other shards made their part of it, so nothing more is decided until "
                             f"the service restarts and rebuilds the fleet from its journal")

    def seed(self, fleet: Fleet) -> None:
        """Start from a fleet read in bulk (`serve --fleet`) in place of the empty one: its agents
        join in the fleet's order, and with a state directory they go straight into a checkpoint
        rather than one journal entry holding every declaration."""
        if not self.fresh or len(self.fleet):
            raise StateError("a fleet read in bulk seeds only an empty state")
        self.check_writable()
        self.fleet.close()
        self.fleet = fleet
        self.fresh = False
        # the seed is in no journal entry: a checkpoint that fails would leave it nowhere on disk,
        # under every change acknowledged after it, so the start fails instead (a restart finds the
        # state still fresh and seeds it again)
        try:
            self.durable_fleet.checkpoint()
        except (OSError, A3Error) as exc:
            why = os_error_line(exc) if isinstance(exc, OSError) else exc
            raise StateError(f"{self.directory}: the fleet read in bulk could not be checkpointed ({why}); "
                             f"nothing of it was kept") from None
        if self.settle:
            settle()

    def put_agents(self, declarations: list[Declaration]) -> None:
        """Add or replace agents, all or none: conflicts are checked before anything is written."""
        self._check_namespaces(declarations)
        self._change("put", self._put, declarations, decls=[d.doc for d in declarations])
        # the fleet frozen again once it has grown by a tenth (at least SETTLE_AFTER agents) since
        # the last time: often enough that most of it is frozen, rarely enough that the full
        # collection before each freeze stays a small share of the adds
        self._unsettled += len(declarations)
        if self.settle and self._unsettled >= max(SETTLE_AFTER, len(self.fleet) // 10):
            settle()
            self._unsettled = 0
        self._put_since_counted += len(declarations)
        fleet = self.fleet
        if type(fleet) is Fleet and self._put_since_counted >= COMPACT_FROM:
            # agents re-declared with ever new values leave a row for each value no one declares
            # any more, and no name gone asks for a compaction: they are counted once every so
            # many agents put and dropped in place, which changes nothing a placement or a record
            # shows (so nothing is journaled: a restart that replays the puts holds them again,
            # until the next count)
            self._put_since_counted = 0
            try:
                if fleet.rows_unused >= max(len(fleet), COMPACT_FROM):
                    fleet.drop_unused_rows()
            except Exception as exc:        # the put stands, made and journaled; nothing was dropped
                self.log(f"the fleet's unused rows were not dropped ({type(exc).__name__}: {exc}); "
                         f"it goes on as it was, and counts them again after {COMPACT_FROM} agents put")

    def _check_namespaces(self, declarations: Iterable[Declaration]) -> None:
        seen: dict[str, str] = {}
        problems, positions = [], []
        for k, decl in enumerate(declarations):
            name, namespace = decl.agent.name, decl.agent.namespace
            conflict = namespace_problem("$.agent.namespace", name,
                                         seen.get(name, self.fleet.namespace_of(name)), namespace)
            if conflict is not None:
                problems.append(conflict)
                positions.append(k + 1)
            seen[name] = namespace
        if problems:
            raise FleetConflict(problems, positions)

    def _put(self, declarations: list[Declaration]) -> None:
        if len(declarations) == 1:
            self.fleet.add(declarations[0])
        else:
            self.fleet.extend(declarations)

    def delete_agent(self, name: str) -> None:
        if name not in self.fleet:
            raise FleetError(f"no agent named {name!r} in the fleet")
        self._change("delete", self.fleet.remove, name, name=name)
        fleet = self.fleet
        if type(fleet) is Fleet and fleet.names_gone >= max(len(fleet), COMPACT_FROM, self._compact_after):
            # agents that came and went under new names widen every set the engine makes: the
            # live ones renumbered, journaled as a change of its own (a replay makes it here too)
            try:
                self._change("compact", self._compact, fleet)
            except _NotCompacted:       # logged; nothing changed, nothing journaled
                pass

    def _compact(self, fleet: Fleet) -> None:
        """`fleet.compact()`, or, when it cannot be made (it changes nothing until its last step),
        a line in the log: the removal before it is made and journaled, and is answered so; the
        next try waits until twice as many names are gone, and once one is made the usual bound
        holds again (as after a restart). A compaction made is journaled (a failure to journal it
        is the journal's, as any change's)."""
        try:
            fleet.compact()
            self._compact_after = 0
        except Exception as exc:
            self._compact_after = 2 * fleet.names_gone
            self.log(f"the fleet was not compacted ({type(exc).__name__}: {exc}); it goes on as it was, "
                     f"and is compacted once {self._compact_after} names are gone")
            raise _NotCompacted() from None

    def record_outcome(self, agent: str, kind: str, success: bool) -> None:
        if agent not in self.fleet:
            raise FleetError(f"no agent named {agent!r} in the fleet")
        self._change("outcome", self.fleet.record_outcome, agent, kind, bool(success),
                     agent=agent, kind=kind, success=bool(success))

    def hold_session(self, agent: str, session: str) -> None:
        if agent not in self.fleet:
            raise FleetError(f"no agent named {agent!r} in the fleet")
        self._change("hold", self.fleet.hold_session, agent, session, agent=agent, session=session)

    def release_session(self, agent: str, session: str) -> None:
        if agent not in self.fleet:
            raise FleetError(f"no agent named {agent!r} in the fleet")
        self._change("release", self.fleet.release_session, agent, session, agent=agent, session=session)

    # -- placing ----------------------------------------------------------------------------------
    def place(self, requirements, *, session: str | None = None, route=None, compact: bool = False,
              task: dict[str, Any] | None = None, fleet: FleetProtocol | None = None):
        """Place one task; its trace records are journalled and written before this returns (made
        durable by `durable()`). Returns (placement, record lines, reference): `reference` as
        `place_many` gives it, the fleet snapshot the records' own compact members refer to by its
        seq (`Encoder.plain_reference`), or None. `fleet` places on another fleet (a Kubernetes
        NodeList) whose records still go into this trace, in spec form."""
        own = fleet is None
        target = self.fleet if fleet is None else fleet
        if own:
            self.check_writable()
        elif self.failed is not None:
            raise JournalFailed(self.failed)
        p = target.place(requirements, session=session, route=route, remember_session=False)
        if own and p.session is not None:
            # the service holds a bound placement's session itself, below, with its records (and
            # would hold it for a rejection a replay binds)
            p.session_held = None
        seq = self.next_seq
        mark = self.encoder.mark() if compact and own else None
        if compact and own:
            # the engine writes the placement's lines in one call (task.submitted carries `task`)
            lines, count = self.encoder.encode_placement_lines(seq, p, task or None)
            reference = self.encoder.plain_reference
        else:
            lines, count = placement_lines(p, seq, task)
            reference = None
        hold = (p.agent, p.session) if own and p.agent is not None and p.session is not None else None
        if hold is not None:
            # before the journal: a shard that fails to hold it leaves no record of the placement
            self._hold(hold, mark)
        if self.journal is not None:
            self.durable_fleet.append(TRACE_ENTRY + orjson.dumps(hold) + b"\n" + lines)
        self._write_trace(lines, count)
        return p, lines, reference

    def place_many(self, tasks: Sequence[Any], sessions: Sequence[str | None],
                   compact: Sequence[bool]) -> list[tuple[Any, bytes, int | None] | Exception]:
        """Place consecutive tasks (requirements, each beside its session and whether its records
        are compact) through the fleet's batch path, with exactly the placements, records and trace
        of `place` one at a time, in order. The caller gives tasks whose order of updates allows it:
        no route, and no session twice (a held session changes only the affinity of its own
        session's tasks). The service holds each bound session itself (as `place` does), so
        `generation` is renumbered here as one at a time would see it. Returns, per task,
        (placement, record lines, reference) or the exception `place` would raise; `reference` is
        the fleet snapshot the records' own compact members refer to by its seq
        (`Encoder.plain_reference`), or None."""
        self.check_writable()
        fleet, encoder, durable = self.fleet, self.encoder, self.durable_fleet
        placements = fleet.place_many(tasks, sessions=sessions, remember_session=False)
        generation = fleet.generation
        out: list[tuple[Any, bytes, int | None] | Exception] = []
        written: list[bytes] = []
        seq = self.next_seq
        encode = encoder.encode_placement_lines
        # nothing in this loop replaces the journal (a checkpoint comes after the batch); its writer
        # thread may mark it failed meanwhile, which each placement asks
        journal = durable.journal
        try:
            for p, compact_records in zip(placements, compact):
                try:
                    if self.doubt is not None or journal is not None and journal.failed is not None:
                        self.check_writable()
                    p.generation = generation
                    agent = p.agent
                    hold: tuple[str, str] | None
                    if p.session is not None:
                        p.session_held = None       # the service holds it itself, as `place` says
                    if agent is not None and p.session is not None:
                        hold = (agent, p.session)
                        # needed only to take back the records of a hold that fails
                        mark = encoder.mark() if compact_records else None
                    else:
                        hold = mark = None
                    if compact_records:
                        lines, count = encode(seq, p)
                        reference = encoder.plain_reference
                    else:
                        lines, count = placement_lines(p, seq)
                        reference = None
                    if hold is not None:
                        self._hold(hold, mark)
                        generation = fleet.generation
                    if journal is not None:
                        durable.append(TRACE_ENTRY + orjson.dumps(hold) + b"\n" + lines)
                    written.append(lines)
                    seq += count
                    out.append((p, lines, reference))
                except Exception as exc:        # answered for this task, as `place` would raise it
                    out.append(exc)
        finally:      # the batch's trace lines queued at once, in order, as one at a time queues them
            if written:
                self._write_trace(written, seq - self.next_seq)
        return out

    def _hold(self, hold: tuple[str, str], mark: tuple[Any, ...] | None) -> None:
        """The bound agent holds the task's session; if it cannot (a shard down), the placement's
        records are not written, so the compact encoder goes back to `mark`, before them (None:
        the records were spec records, which leave the encoder alone)."""
        try:
            self.fleet.hold_session(*hold)
        except BaseException:
            if mark is not None:
                self.encoder.rewind(mark)
            raise

    def _write_trace(self, lines: bytes | list[bytes], count: int) -> None:
        """Queue trace lines (`count` records; a batch's pieces in order, as a list, never joined
        here: each copy of a batch's lines goes to memory the caches no longer hold): with a
        journal, its next commit writes them, joined once (the journal entry holds them too, and
        the trace file is rebuilt from it); without one, they are written piece by piece in gathered
        writes once per turn of the event loop, so requests answered together share one write."""
        if isinstance(lines, list):
            self._trace_buffer.extend(lines)
        else:
            self._trace_buffer.append(lines)
        self.next_seq += count
        if self.journal is None and not self._trace_flush_scheduled:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return              # recovery, or a caller without a loop: flushed by open/close
            self._trace_flush_scheduled = True
            loop.call_soon(self._flush_trace)

    def _take_trace(self, pieces: int | None) -> list[tuple[int, bytes]]:
        """The queued trace lines of the journal's next commit, for it to write: those of its
        `pieces` trace entries (one piece each, queued in the same order), or all (None)."""
        data = b"".join(self._take_trace_pieces(pieces))
        return [(self._trace_fd, data)] if data else []

    def _take_trace_pieces(self, count: int | None = None) -> list[bytes]:
        """The first `count` queued pieces of trace lines (all: None), counted as written next."""
        if count is None or count >= len(self._trace_buffer):
            pieces, self._trace_buffer = self._trace_buffer, []
        else:
            pieces, self._trace_buffer = self._trace_buffer[:count], self._trace_buffer[count:]
        self._trace_queued_end += sum(map(len, pieces))
        self._trace_ends.append(self._trace_queued_end)
        return pieces

    def _trace_written(self) -> None:
        """A commit is done: the trace lines it took are written, and their entries durable."""
        self._trace_end = self._trace_ends.popleft()

    def flush_trace(self) -> None:
        """Without a journal: write the trace lines queued so far (a caller without an event loop
        calls this after each batch of requests); TraceUnwritable if the file cannot be written,
        or could not be since the last call (a `trace` request of the batch flushed it, and the
        failure it logged must still stop the answers of the batch)."""
        if self.journal is None and (self._trace_buffer or self._trace_failed is not None):
            self._trace_flush_scheduled = False
            self._write_queued_trace()

    def _flush_trace(self) -> None:
        """Without a journal: write queued trace lines now. Run by the event loop (the HTTP
        service), a trace that cannot be written stops the service taking changes, as a journal
        that cannot be written does: the answers of the lines lost were sent, no later one is."""
        self._trace_flush_scheduled = False
        if self.journal is None:
            try:
                self._write_queued_trace()
            except TraceUnwritable as exc:
                self.log(str(exc))


    def _write_queued_trace(self) -> None:
        """Write the queued trace lines now (without a journal; and after recovery, the lines of
        the entries it replayed), piece by piece in gathered writes: a batch's lines are not copied
        into one more buffer first."""
        if self._trace_failed is not None:
            raise TraceUnwritable(self.trace_path, None, self._trace_failed)
        try:
            write_pieces(self._trace_fd, self._take_trace_pieces())
        except OSError as exc:
            # the file is cut back to its last whole line, so it stays a trace every reader takes
            self._trace_ends.pop()
            self._trace_queued_end = self._trace_end
            try:
                os.ftruncate(self._trace_fd, self._trace_end)
            except OSError:
                pass
            failure = TraceUnwritable(self.trace_path, exc)
            self._trace_failed = failure.why
            raise failure from None
        self._trace_written()

    @property
    def trace_appended(self) -> int:
        """Where the trace file will end once every line queued so far is written: what a reader
        that waits for `durable()` may then read."""
        return self._trace_queued_end + sum(map(len, self._trace_buffer))

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
            lines, count = self.encoder.encode_placement_lines(seq, p, task, restricted=True)
        elif records is None:
            lines, count = placement_lines(p, seq, task)
        else:
            lines, count = record_lines(records, seq), len(records)
        if self.journal is not None:
            self.durable_fleet.append(TRACE_ENTRY + b"null\n" + lines)
        self._write_trace(lines, count)
        return lines


#: The layout before journal generations: `snapshot` (format 3: it named a fleet snapshot file)
#: and one `journal`, emptied at each snapshot; its entries are the changes of today's journal.
_OLD_SNAPSHOT = "snapshot"
_OLD_JOURNAL = "journal"


def _upgrade_layout(statedir: StateDir) -> None:
    """A state directory of the layout before journal generations, moved to today's: its journal
    becomes generation 1 and its snapshot document a checkpoint at generation 1. Each step can be
    taken again after a stop part-way (the old snapshot is removed last)."""
    directory = statedir.directory
    old_snapshot, old_journal = directory / _OLD_SNAPSHOT, directory / _OLD_JOURNAL
    if not old_snapshot.exists() and not old_journal.exists():
        return
    if (statedir.path(CHECKPOINT).exists() and old_snapshot.exists() and not old_journal.exists()
            and _upgraded_but_for(statedir)):
        # stopped after the checkpoint was committed, before the old snapshot was removed: the
        # move's last step is all that is left
        old_snapshot.unlink()
        fsync_directory(directory)
        statedir.log(f"{directory}: moved to journal generations (journal.00000001, checkpoint)")
        return
    if statedir.path(CHECKPOINT).exists() or (not old_snapshot.exists() and statedir.journal_path(1).exists()):
        raise StateError(f"{directory}: holds both the layout before journal generations ({old_snapshot.name}, "
                         f"{old_journal.name}) and today's; restore the state directory from a copy")
    document = None
    if old_snapshot.exists():
        try:
            read = read_entries(old_snapshot.read_bytes(), str(old_snapshot))
        except JournalCorrupt as exc:       # another program's file, or one damaged past reading
            raise StateError(f"{old_snapshot}: not a snapshot of the layout before journal generations "
                             f"(its bytes are not whole a3fast entries: {str(exc).split(': ', 1)[-1]})") from None
        try:
            document = orjson.loads(read.entries[0]) if len(read.entries) == 1 and not read.cut_bytes else None
        except orjson.JSONDecodeError:
            document = None
        if not isinstance(document, dict) or document.get("format") != 3 or not isinstance(document.get("fleet"), str):
            found = document.get("format") if isinstance(document, dict) else "damaged"
            raise StateError(f"{old_snapshot}: a snapshot of the layout before journal generations in format "
                             f"{found!r}; this a3fast moves only format 3 (a fleet snapshot file) to checkpoints")
        # the fields the checkpoint will carry, checked before anything is moved; the fleet's file
        # is named as that layout named it (another name could be the trace, the journal or a file
        # outside the directory, moved over the fleet), and is there (or already moved)
        fleet_name = document["fleet"]
        if _OLD_FLEET_NAME.fullmatch(fleet_name) is None:
            raise StateError(f"{old_snapshot}: field 'fleet': expected a fleet snapshot's name as that layout "
                             f"wrote it (fleet.<16 hex digits>.a3snap), found {describe(fleet_name)}; restore "
                             f"the state directory from a copy")
        if not (directory / fleet_name).exists() and not statedir.path(statedir.snapshot_name(1)).exists():
            raise StateError(f"{directory / fleet_name}: missing: the fleet snapshot named by {old_snapshot}; "
                             f"restore the state directory from a copy")
        for name, check in CHECKPOINT_FIELDS.items():
            expected = "present" if name not in document else check(document[name])
            if expected is not None:
                found = "nothing" if name not in document else describe(document[name])
                raise StateError(f"{old_snapshot}: field {name!r}: expected {expected}, found {found}; "
                                 f"restore the state directory from a copy")
    if old_journal.exists():
        with open(old_journal, "rb") as fh:
            start = fh.read(len(JOURNAL_MAGIC))
        if start.strip(b"\0") and not JOURNAL_MAGIC.startswith(start):
            raise StateError(f"{old_journal}: not an a3fast journal (it does not begin with "
                             f"{JOURNAL_MAGIC.decode()}); move it out of the state directory")
        os.replace(old_journal, statedir.journal_path(1))
    elif not statedir.journal_path(1).exists():
        statedir.journal_path(1).touch()
    fsync_directory(directory)
    if document is not None:
        source, target = directory / document["fleet"], directory / statedir.snapshot_name(1)
        if source.exists():
            os.replace(source, target)
            fsync_directory(directory)
        elif not target.exists():
            raise StateError(f"{source}: missing: the fleet snapshot named by {old_snapshot}; restore the "
                             f"state directory from a copy")
        statedir.generation = 1
        statedir.commit(lambda path: None, {"next_seq": document["next_seq"],
                                            "trace_bytes": document["trace_bytes"],
                                            "trace_tail_crc": document["trace_tail_crc"]})
        old_snapshot.unlink()
        fsync_directory(directory)
    statedir.log(f"{directory}: moved to journal generations (journal.00000001, checkpoint)")


#: How the layout before journal generations named its fleet snapshot.
_OLD_FLEET_NAME = re.compile(r"fleet\.[0-9a-f]{16}\.a3snap")


def _upgraded_but_for(statedir: StateDir) -> bool:
    """Whether the checkpoint is the one the move to journal generations commits (generation 1,
    its snapshot and journal in place), so that only the old `snapshot` is left to remove."""
    try:
        checkpoint = statedir.read_checkpoint()
    except StateError:
        return False
    return (checkpoint is not None and checkpoint["generation"] == 1
            and (statedir.directory / checkpoint["fleet"]).exists() and statedir.journal_path(1).exists())


def settle() -> None:
    """The fleet was loaded or grew in bulk: keep every object alive now out of the garbage
    collector's later passes (`gc.freeze`). A fleet's declarations and rows are long-lived, and a
    full pass walks each of them again while placements allocate: at 1,000 agents that was a third
    of the service's CPU a placement (docs/performance.md, "Pipelined stdio"). What is frozen is
    still freed when its last reference goes, unless it is part of a reference cycle (never
    collected once frozen): the garbage of the moment is collected first, and the fleet is frozen
    again only as it grows by a tenth, so what a long run can keep so is bounded and small."""
    gc.collect()
    gc.freeze()


class FleetConflict(SchemaError):
    """Names already held by another namespace (409): each problem at its declaration's own path,
    beside `positions`, where that declaration is in the batch (from 1, as a bulk add's lines are
    numbered)."""

    def __init__(self, problems: list[Problem], positions: list[int]):
        super().__init__(problems)
        self.positions = positions


#: how a trace line a3fast wrote begins (`trace.record_line`), and the seq any record begins with
_RECORD_HEAD = re.compile(rb'\{"seq":(0|-?[1-9][0-9]{0,19}),"kind":"')
_SEQ_HEAD = re.compile(rb'\{"seq":(0|-?[1-9][0-9]{0,19})[,}]')


def _records_from(lines: bytes, seq: int) -> int:
    """How many records a journal entry's trace lines are, each checked to be the next one's
    (seq `seq` on, as this service wrote them): a whole entry copied, or lines that are no records,
    would put records in the trace twice or make it unreadable. ChangeUnreadable otherwise."""
    if lines and not lines.endswith(b"}\n"):
        raise ChangeUnreadable("its trace lines do not end with a whole record")
    count = 0
    for count, line in enumerate(lines.splitlines(), 1):
        head = _RECORD_HEAD.match(line)
        if head is None:
            raise ChangeUnreadable(f"its trace line {count} is not a record as this service writes one")
        if int(head.group(1)) != seq + count - 1:
            raise ChangeUnreadable(f"its trace line {count} is the record of seq {int(head.group(1))} where the "
                                   f"trace goes on from seq {seq + count - 1} (an entry replayed twice, or "
                                   f"the journal altered)")
    return count


def _last_seq(fd: int, length: int) -> int | None:
    """The seq of the last record in the file's first `length` bytes (None when there is none),
    read back from its end: where a checkpoint says the trace goes on. ValueError when that last
    line is not a record."""
    end = length
    if end == 0:
        return None
    tail = b""
    while True:
        start = max(0, end - (1 << 16))
        tail = os.pread(fd, end - start, start) + tail
        newline = tail.rfind(b"\n", 0, len(tail) - 1)
        if newline >= 0 or start == 0:
            break
        end = start
    head = _SEQ_HEAD.match(tail, newline + 1)
    if head is None:
        raise ValueError("the trace the checkpoint covers does not end with a record")
    return int(head.group(1))


def keep_aside(path: Path) -> Path:
    """Keep the file at `path` as `STEM.N.SUFFIX` beside it (`trace.jsonl` as `trace.1.jsonl`: what
    takes `*.jsonl` takes it too), N the first number from 1 that names no file yet, and return
    where it went; `path` is then free for a new file, or empty. Moved by a link then an unlink, so
    no file already there is replaced; a file that cannot be moved (bind-mounted on its own, or on
    another filesystem than its name) is copied and emptied. StateError naming it when it can be
    kept neither way: it is never emptied unkept."""
    for n in range(1, 1_000_000):
        kept = path.with_name(f"{path.stem}.{n}{path.suffix}")
        try:
            os.link(path, kept)
        except FileExistsError:
            continue
        except OSError:
            if os.path.lexists(kept):
                continue
            try:
                os.rename(path, kept)          # a filesystem without links
            except OSError:
                try:
                    _copy_new(path, kept)
                except FileExistsError:
                    continue
                except OSError as exc:
                    raise StateError(f"{path}: held an earlier trace that could not be kept beside it "
                                     f"({kept}: {exc.strerror or exc}); move it elsewhere, or start with "
                                     f"--state to go on with it") from None
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.ftruncate(fd, 0)
                finally:
                    os.close(fd)
        else:
            os.unlink(path)
        fsync_directory(path.parent)
        return kept
    raise StateError(f"{path}: an earlier trace is in the way and {path.stem}.1{path.suffix} to "
                     f"{path.stem}.999999{path.suffix} are taken; move them elsewhere")


def _copy_new(source: Path, target: Path) -> None:
    """`source`'s bytes into a new file `target` (FileExistsError if there is one), synced; a copy
    that fails part-way is removed."""
    with open(source, "rb") as src, open(target, "xb") as out:
        try:
            shutil.copyfileobj(src, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        except BaseException:
            os.unlink(target)
            raise


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
