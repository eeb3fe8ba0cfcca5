"""The journal: an append-only file of framed entries, each with its length and a CRC32, and the
changes to a fleet that its entries hold (one format and one replay for the service and the shards
of a ShardedFleet; the files and their generations are a3fast.durable.statedir's, the cycle that
writes them a3fast.durable.fleet's).

An entry is `MAGIC | length (u32 LE) | crc32(length bytes + payload) (u32 LE) | payload`. A change
is acknowledged only after its entry is written and fsynced (see `Journal` for the three modes). On recovery, entries are read until the first one that does not
check out: if no valid entry follows it, that is a torn tail (a write cut short by a crash) and the
file is cut there and the cut reported; if a valid entry follows, the damage is in the middle of
acknowledged history and recovery refuses (`JournalCorrupt`), since skipping it would give a silently
wrong fleet.
"""
from __future__ import annotations

import asyncio
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from zlib_ng.zlib_ng import crc32       # zlib's CRC-32 values, about three times faster (docs/performance.md)

from ..errors import SnapshotError, describe

__all__ = ["MAGIC", "Journal", "JournalCorrupt", "JournalFailed", "RecoveredJournal", "frame", "read_entries",
           "CHANGE", "TRACE", "encode_change", "decode_change", "apply_change", "ChangeUnreadable",
           "ChangedFleet"]

MAGIC = b"A3J1"
_HEADER = struct.Struct("<4sII")
#: An entry larger than this is taken for a damaged length field, never allocated.
MAX_ENTRY = 1 << 30


class JournalCorrupt(SnapshotError):
    """Damage before the last valid entry: acknowledged history cannot be read back exactly."""


class JournalFailed(Exception):
    """A write or fsync of the journal failed (a full disk, an I/O error). The entries it held were
    answered with an error, yet their changes are already in memory, so the journal takes nothing
    more: the service stops changing and answering until it is restarted, and recovery reads back
    exactly what was acknowledged (fail-stop, as databases do on a failed fsync)."""


def frame(payload: bytes) -> bytes:
    length = len(payload)
    crc = crc32(payload, crc32(length.to_bytes(4, "little")))
    return _HEADER.pack(MAGIC, length, crc) + payload


def _entry_at(data: bytes | memoryview, pos: int) -> tuple[bytes, int] | None:
    """(payload, end) of a valid entry starting at `pos`, else None."""
    if pos + _HEADER.size > len(data):
        return None
    magic, length, crc = _HEADER.unpack_from(data, pos)
    if magic != MAGIC or length > MAX_ENTRY:
        return None
    end = pos + _HEADER.size + length
    if end > len(data):
        return None
    payload = bytes(data[pos + _HEADER.size:end])
    if crc32(payload, crc32(length.to_bytes(4, "little"))) != crc:
        return None
    return payload, end


@dataclass
class RecoveredJournal:
    entries: list[bytes]
    good_bytes: int          # where the last valid entry ends
    cut_bytes: int           # bytes after it (a torn tail), 0 when the file was whole
    offsets: list[int] | None = None   # where each entry starts


def read_entries(data: bytes, source: str = "journal") -> RecoveredJournal:
    """Every valid entry of a journal's bytes; raises JournalCorrupt for damage in the middle."""
    entries: list[bytes] = []
    offsets: list[int] = []
    pos = 0
    while pos < len(data):
        entry = _entry_at(data, pos)
        if entry is None:
            later = _next_valid(data, pos + 1)
            if pos == 0 and later is None and data.strip(b"\0") \
                    and not (data.startswith(MAGIC) or MAGIC.startswith(data)):
                # not a torn first write (one begins with the magic, or is zeros a crash left where
                # the file grew before its bytes came), and no entry of a3fast's anywhere in it:
                # another program's file (a first entry damaged before valid ones is damage, below)
                raise JournalCorrupt(f"{source}: not an a3fast journal (it does not begin with "
                                     f"{MAGIC.decode()}); move it out of the state directory")
            if later is not None:
                raise JournalCorrupt(
                    f"{source}: entry {len(entries) + 1} at byte {pos} is damaged (bad length or "
                    f"checksum) and a valid entry follows at byte {later}: acknowledged changes after "
                    f"the damage cannot be trusted; restore the state directory from a copy")
            return RecoveredJournal(entries, pos, len(data) - pos, offsets)
        entries.append(entry[0])
        offsets.append(pos)
        pos = entry[1]
    return RecoveredJournal(entries, pos, 0, offsets)


def _next_valid(data: bytes, start: int) -> int | None:
    pos = data.find(MAGIC, start)
    while pos != -1:
        if _entry_at(data, pos) is not None:
            return pos
        pos = data.find(MAGIC, pos + 1)
    return None


class Journal:
    """An open journal for appending, with group commit.

    `append` frames an entry into a memory buffer (on the event loop, no system call). `durable()`
    waits until every entry appended so far is written and, unless `fsync="never"`, fsynced. One
    commit at a time runs on a dedicated writer thread, so the event loop never waits for a disk
    (with `fsync="never"` there is no disk to wait for, and a commit is written on the loop):

    - `fsync="group"`: a commit takes every entry appended before it started, writes them with one
      `write` and one `fsync`; requests that arrive while it is in flight append to the buffer and
      all share the next commit (classic group commit: no timer, no fsync per request).
    - `fsync="always"`: a commit takes one entry (one write and one fsync per change).
    - `fsync="never"`: as group, without the fsync: safe against a killed process (the bytes are in
      the operating system before the response), not against a power loss. Its commit is a write
      to the operating system's cache, made on the event loop (on the turn after the first request
      that waits for it, so the requests of one turn share it): the hand-off to the writer thread
      and back cost more than the write (at 1,000 requests/s, a placement's p50 was 1.3 ms through
      the thread against 0.7 ms on the loop).

    A commit that finds nothing to write (a blocking `sync`, at a checkpoint or at `close`, wrote
    and fsynced it first) neither writes nor fsyncs: after `close` the file and the writer thread
    are gone, and its waiters are told their entries are durable, as they are.

    `before_write`, if set, is called on the event loop when a commit starts and returns further
    `(fd, bytes)` writes for the writer thread to make first (the service's trace lines): it is
    told how many of the entries the commit takes are trace entries (TRACE), each of which the
    owner queued one piece of lines with, or None for every one appended so far (a commit that
    takes them all, and `sync`), so that lines are never written ahead of their entry (with
    `always`, a commit takes one entry); `after_write`, if set, is called on the event loop when
    that commit is done. Its files, as the journal's own, are opened to append and written by the
    journal's commits alone while it is open: a commit that fails cuts each back by what it wrote.
    """

    MODES = ("always", "group", "never")

    def __init__(self, path: Path, *, fsync: str = "group"):
        if fsync not in self.MODES:
            raise ValueError(f"fsync must be one of {self.MODES}, not {fsync!r}")
        self.path = path
        self.fsync = fsync
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.size = os.fstat(self._fd).st_size   # bytes of the file once everything is written
        self.entries = 0                         # entries since the journal was last emptied
        self.before_write: Callable[[int | None], list[tuple[int, bytes]]] | None = None
        self.after_write: Callable[[], None] | None = None
        self._buffer: list[bytes] = []
        self._traced: list[bool] = []            # beside _buffer: whether each is a trace entry
        self._buffered = 0                       # bytes in _buffer
        self._in_flight = 0                      # bytes a commit is writing now
        self._appended = 0                       # entries ever appended (a ticket per entry)
        self._committed = 0                      # entries ever made durable
        #: the commit under way: a task (its fsync on the writer thread), or with `fsync="never"`
        #: the loop's callback that writes it
        self._commit: asyncio.Future | asyncio.Handle | None = None
        self._waiters: list[asyncio.Future] = []  # the waits `durable` left for the commit in flight
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="a3fast-journal")
        #: why a write failed; once set, every append and wait raises JournalFailed
        self.failed: str | None = None
        #: the write that failed, as the writer thread saw it (before `failed` is set on the loop)
        self._broken: OSError | None = None
        #: the files of `before_write`'s descriptors by descriptor, to name the one a write failed on
        self.write_names: dict[int, str] = {}

    def _check(self) -> None:
        if self.failed is not None:
            raise JournalFailed(self.failed)

    def _fail(self, exc: OSError) -> JournalFailed:
        written = f"the journal {self.path}" if exc.filename is None else exc.filename
        self.failed = f"writing {written} failed: {exc.strerror or exc}"
        return JournalFailed(self.failed)

    def append(self, payload: bytes) -> None:
        self._check()
        data = frame(payload)
        self._buffer.append(data)
        self._traced.append(payload[:1] == TRACE)
        self._buffered += len(data)
        self.size += len(data)
        self.entries += 1
        self._appended += 1

    @property
    def lag(self) -> int:
        """Bytes appended but not yet known to be durable."""
        return self._buffered + self._in_flight

    def _take(self) -> tuple[list[tuple[int, bytes]], int, int]:
        """The writes of the next commit, the ticket it makes durable, and its journal bytes."""
        take = 1 if self.fsync == "always" else len(self._buffer)
        # the other writes first: should they fail, the entries stay in the buffer for the next commit
        if self.before_write is not None:
            writes = self.before_write(None if take >= len(self._buffer) else sum(self._traced[:take]))
        else:
            writes = []
        batch, self._buffer = self._buffer[:take], self._buffer[take:]
        self._traced = self._traced[take:]
        data = b"".join(batch)
        self._buffered -= len(data)
        if data:
            writes.append((self._fd, data))
        return writes, self._committed + len(batch), len(data)

    def _write(self, writes: list[tuple[int, bytes]], fsync: bool) -> None:
        """On the writer thread: write everything, then fsync the journal. A write or fsync that
        fails takes the journal back to its length before this commit: its entries are answered as
        failed, so none of them may come back at the next start (a failed fsync leaves what the
        disk holds unknown; the cut is what can still be said)."""
        if self._broken is not None:    # a commit before this one failed: nothing more is written
            raise self._broken
        # every file this commit writes goes back to where it was should a write fail: the other
        # writes (the service's trace) as well as the journal, so none is left with half a line
        # every file is opened to append and written by this writer alone, so where each was before
        # this commit is its length less what the commit wrote to it (no fstat a commit)
        written: dict[int, int] = dict.fromkeys([self._fd, *(fd for fd, _ in writes)], 0)
        fd = self._fd
        try:
            for fd, data in writes:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view)
                    written[fd] += n
                    view = view[n:]
            fd = self._fd
            if fsync:
                os.fsync(self._fd)
        except OSError as exc:
            # set here, on the writer thread, before the loop hears of it: a blocking `sync` queued
            # behind this commit must not write after the cut and report its entries durable
            if fd != self._fd and fd in self.write_names and exc.filename is None:
                exc.filename = self.write_names[fd]
            self._broken = exc
            for file, length in written.items():
                try:
                    os.ftruncate(file, os.fstat(file).st_size - length)
                except OSError:
                    pass    # the disk refuses even that: the next start cuts a torn tail, as it can
            raise

    async def durable(self) -> None:
        """Wait until every entry appended so far is durable. Waits end in the order they began: one
        whose entries a blocking `sync` (a checkpoint's) made durable while earlier waits are still
        to be woken ends after them, woken by the same commit, so requests that arrived together and
        wait for durability one after another are answered in that order."""
        ticket = self._appended
        if self._committed >= ticket and self._waiters:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)      # a commit is under way while any wait is: it wakes this
            await waiter
            return
        while self._committed < ticket:
            self._check()
            if self._commit is None:
                if self.fsync == "never":
                    # nothing to wait for but the write: a callback on the next turn, not a task
                    self._commit = asyncio.get_running_loop().call_soon(self._write_on_loop)
                else:
                    task = self._commit = asyncio.ensure_future(self._run_commit())
                    task.add_done_callback(self._ended)
            # a future of its own rather than the commit shielded: a waiter's cancellation cancels
            # only its wait, and the commit's end wakes every waiter with one callback (`_ended`)
            # where a shield took a future, two closures and two callbacks for each
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    async def _run_commit(self) -> None:
        # started on the loop's next turn: the entries appended meanwhile, by the requests of this
        # turn, share the commit (`group` and `always`; `never` commits in `_write_on_loop`)
        try:
            writes, ticket, size = self._take()
            self._in_flight = size
            if writes:      # else a blocking `sync` (a checkpoint, `close`) wrote and fsynced them all
                try:
                    await asyncio.get_running_loop().run_in_executor(self._writer, self._write, writes, True)
                except OSError as exc:
                    raise self._fail(exc) from None
                except BaseException as exc:    # the commit cancelled, even: see `_cut_short`
                    self._cut_short(exc)
                    raise
            self._committed = max(self._committed, ticket)
            if self.after_write is not None:
                self.after_write()
        finally:
            self._in_flight = 0

    def _write_on_loop(self) -> None:
        """`fsync="never"`'s commit, made on the event loop: `_run_commit` as a callback (a task's
        making and stepping cost a request more than the write), its waiters woken on the next turn
        as `_ended` wakes a task's, so that a wait begun meanwhile is woken with them, after them.
        Whatever ends it, an interruption too, each waiter raises, as a task's would have them: a
        wait left unwoken would hang, and one woken as if its entries were written would ask again
        for entries already taken from the buffer. A write cut short by anything but the disk fails
        the journal (`_cut_short`). (Nothing cancels the callback: its handle is the journal's own.)"""
        error: BaseException | None = None
        try:
            writes, ticket, size = self._take()
            self._in_flight = size
            if writes:
                try:
                    self._write(writes, False)
                except OSError as exc:
                    raise self._fail(exc) from None
                except BaseException as exc:
                    self._cut_short(exc)
                    raise
            self._committed = max(self._committed, ticket)
            if self.after_write is not None:
                self.after_write()
        except BaseException as exc:    # each waiter raises it, as a failed commit task's would
            error = exc
        finally:
            self._in_flight = 0
            self._commit = asyncio.get_running_loop().call_soon(self._wake, error)
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise error                 # out of the loop, as asyncio lets them out of a task

    def _cut_short(self, exc: BaseException) -> None:
        """A commit's write ended by anything but the disk (an error of the code, an interruption,
        the commit cancelled): its entries have left the buffer and none is known to be whole on
        disk, so no later commit could make them durable, and a wait for them would ask for one
        after another. The journal fails as on a disk error: every later change is refused, and a
        restart reads back what is whole."""
        if self.failed is None:
            self.failed = f"writing the journal {self.path} was cut short ({type(exc).__name__})"

    def _wake(self, error: BaseException | None) -> None:
        """The end of `_write_on_loop`'s commit: every wait woken, raising `error` if set; an error
        no wait is left to take goes to the loop's handler, which logs it, as a task's would be
        (an interruption has left the loop already)."""
        self._commit = None
        waiting = self._waiting()
        self._settle(waiting, error)
        if error is not None and not waiting and not isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise error

    def _ended(self, commit: asyncio.Future) -> None:
        """The commit's end, however it came (cancelled before it ran, even): every wait is woken,
        raising what the commit raised. An error no wait is left to take is left to asyncio,
        which reports an exception no one retrieved."""
        self._commit = None
        waiting = self._waiting()
        if commit.cancelled():
            for waiter in waiting:
                waiter.cancel()
        elif waiting:
            self._settle(waiting, commit.exception())

    def _waiting(self) -> list[asyncio.Future]:
        """The waits a commit's end wakes, taken from the journal (one already cancelled is left)."""
        waiters, self._waiters = self._waiters, []
        return [waiter for waiter in waiters if not waiter.done()]

    @staticmethod
    def _settle(waiting: list[asyncio.Future], error: BaseException | None) -> None:
        """Every wait ended: durable, or raising `error`."""
        for waiter in waiting:
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)

    def sync(self) -> None:
        """Write and fsync everything appended so far, blocking (at start, at a snapshot, at stop).
        The writer thread runs jobs in order, so this comes after any commit in flight."""
        self._check()
        ticket = self._appended
        writes = self.before_write(None) if self.before_write is not None else []
        data = b"".join(self._buffer)
        if data:
            writes.append((self._fd, data))
        self._buffer, self._buffered, self._traced = [], 0, []
        try:
            self._writer.submit(self._write, writes, True).result()
        except OSError as exc:
            raise self._fail(exc) from None
        self._committed = max(self._committed, ticket)
        if self.after_write is not None:
            self.after_write()

    def switch(self, path: Path) -> None:
        """Write and fsync everything appended so far, then append to `path` (the next generation,
        already created and durable): the file written so far is kept whole until a checkpoint
        that covers it is durable (a3fast.durable.statedir)."""
        self.sync()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.close(self._fd)
        self._fd = fd
        self.path = path
        self.size = os.fstat(fd).st_size
        self.entries = 0

    def write_now(self, payload: bytes) -> None:
        """Append one entry and write it before returning, on the calling thread (fsynced unless
        `fsync="never"`): for a caller without an event loop that acknowledges one change at a
        time, as a shard of a ShardedFleet does."""
        self._check()
        data = frame(payload)
        try:
            self._write([(self._fd, data)], self.fsync != "never")
        except OSError as exc:
            raise self._fail(exc) from None
        self.size += len(data)
        self.entries += 1
        self._appended += 1
        self._committed = self._appended

    def close(self) -> None:
        if self._fd >= 0:
            if self.failed is None:
                self.sync()
            self._writer.shutdown(wait=True)
            os.close(self._fd)
            self._fd = -1


# -- the changes a journal entry holds ------------------------------------------------------------
#: An entry's first byte: a change to the fleet (JSON after it), or a placement's trace lines
#: (the service's: the session it made the agent hold, as JSON, a newline, then the lines).
CHANGE = b"J"
TRACE = b"T"


def _string(value: Any) -> str | None:
    return None if isinstance(value, str) else "a string"


def _declarations(value: Any) -> str | None:
    if isinstance(value, list) and all(isinstance(d, dict) for d in value):
        return None
    return "an array of declaration objects"


def _kind(value: Any) -> str | None:
    return None if isinstance(value, (str, dict)) else "a task kind (a string) or a task's requirements (an object)"


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "true or false"


def _count(value: Any) -> str | None:
    return None if type(value) is int and value >= 0 else "a non-negative integer"


#: Each change and the fields it carries (every one required), with the check of each field's
#: type: an entry whose checksum holds may still have been written by another tool.
CHANGE_FIELDS: dict[str, dict[str, Callable[[Any], str | None]]] = {
    "put": {"decls": _declarations},
    "delete": {"name": _string},
    "outcome": {"agent": _string, "kind": _kind, "success": _boolean},
    "outcomes": {"agent": _string, "kind": _string, "successes": _count, "attempts": _count},
    "hold": {"agent": _string, "session": _string},
    "release": {"agent": _string, "session": _string},
    # the live agents renumbered and the names of those gone forgotten (`Fleet.compact`): it changes
    # what a returning name finds, so a replay makes it where it was made
    "compact": {},
}


class ChangeUnreadable(Exception):
    """A whole entry (its checksum holds) whose contents are not a change this a3fast knows."""


class ChangedFleet(Protocol):
    """What replaying a change asks of a fleet (a Fleet, a ShardedFleet)."""

    def add(self, declaration: Any) -> Any: ...
    def extend(self, declarations: Any) -> None: ...
    def remove(self, name: str) -> Any: ...
    def record_outcome(self, agent: str, kind: Any, success: bool) -> None: ...
    def record_outcomes(self, agent: str, kind: str, successes: int, attempts: int) -> None: ...
    def hold_session(self, agent: str, session: str) -> None: ...
    def release_session(self, agent: str, session: str) -> None: ...


def encode_change(op: str, **fields: Any) -> bytes:
    """The payload of a journal entry holding one change."""
    import orjson

    return CHANGE + orjson.dumps({"op": op, **fields})


def decode_change(body: bytes) -> dict[str, Any]:
    """The change of an entry's JSON (after its tag); ChangeUnreadable says what is wrong."""
    import orjson

    try:
        change = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ChangeUnreadable(f"its payload is not JSON ({exc})") from None
    if not isinstance(change, dict):
        raise ChangeUnreadable("its payload is not a JSON object")
    op = change.get("op")
    fields = CHANGE_FIELDS.get(op) if isinstance(op, str) else None
    if fields is None:
        raise ChangeUnreadable(f"unknown change {op!r} (known: {', '.join(CHANGE_FIELDS)})")
    missing = [f for f in fields if f not in change]
    if missing:
        raise ChangeUnreadable(f"change {op!r} lacks {', '.join(repr(m) for m in missing)}")
    for name, check in fields.items():
        expected = check(change[name])
        if expected is not None:
            raise ChangeUnreadable(f"change {op!r}: field {name!r}: expected {expected}, found "
                                   f"{describe(change[name])}")
    if op == "outcomes" and change["successes"] > change["attempts"]:
        raise ChangeUnreadable(f"change 'outcomes': field 'successes': {change['successes']} is more than "
                               f"the {change['attempts']} attempts")
    return change


def apply_change(fleet: ChangedFleet, change: dict[str, Any]) -> None:
    """Make one decoded change on a fleet (the one replay of the service and the shards)."""
    op = change["op"]
    if op == "put":
        decls = change["decls"]
        if len(decls) == 1:
            fleet.add(decls[0])
        else:
            fleet.extend(decls)
    elif op == "delete":
        fleet.remove(change["name"])
    elif op == "outcome":
        fleet.record_outcome(change["agent"], change["kind"], bool(change["success"]))
    elif op == "outcomes":
        fleet.record_outcomes(change["agent"], change["kind"], change["successes"], change["attempts"])
    elif op == "hold":
        fleet.hold_session(change["agent"], change["session"])
    elif op == "compact":
        compact = getattr(fleet, "compact", None)
        if compact is None:
            raise ChangeUnreadable(f"change 'compact': a {type(fleet).__name__} is never compacted")
        compact()
    else:
        fleet.release_session(change["agent"], change["session"])
